// sylvite::minion local pillar for `salt-call --local` / file_client: local: a minimal
// version of Salt's pillar compiler: pillar_roots[<env>]/top.sls and the listed sls files,
// plain YAML only (no Jinja or other renderers), targets matched with core/match
// (glob by default, `- match: <type>` honoured), dicts merged recursively ("smart").
// Files that do not parse are reported under `_errors`, as Salt does.
// Thread-safety: pure function over files.
#pragma once
#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

wire::value compile_local_pillar(const config::minion_config& cfg, const wire::value& grains,
                                 const std::string& saltenv = "base");

}  // namespace sylvite::minion
