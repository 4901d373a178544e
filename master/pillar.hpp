// sylvite::master pillar compiler: pillar_roots[env]/top.sls + YAML SLS files.
// top.sls maps env -> {target: [sls, ...]}; a target list may start with
// {"match": "grain|pcre|list|compound|glob|pillar|ipcidr"} (default glob). Each sls
// "a.b" is a/b.sls or a/b/init.sls; `include:` lists are honoured. Results are merged
// with Salt's "smart" strategy (recursive dict merge, later wins). Jinja is NOT rendered:
// an SLS that contains "{%" or "{{" is reported in _errors (clear message, not a crash).
// Rendering errors go into the "_errors" list (Salt's behaviour).
// Thread-safety: const, safe from any thread (blocking disk I/O: worker pool).
#pragma once
#include <string>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

class pillar_compiler {
 public:
  explicit pillar_compiler(const config::master_config& cfg);
  // grains may be null/empty. saltenv/pillarenv: null or a string (restricts envs).
  wire::value compile(const std::string& minion_id, const wire::value& grains,
                      const wire::value& pillarenv = nullptr) const;

 private:
  config::roots_map roots_;
  std::map<std::string, std::string> nodegroups_;
};

}  // namespace sylvite::master
