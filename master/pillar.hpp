// sylvite::master pillar compiler: pillar_roots[env]/top.sls + YAML SLS files, after
// salt/pillar/__init__.py (3008). top.sls maps env -> {target: [sls, ...]}; a target list
// may hold {"match": "glob|pcre|list|grain|grain_pcre|pillar|ipcidr|compound|nodegroup"}
// (default: compound, as Salt's confirm_top, where a bare word is a glob), plus
// {"order": n} and {"ignore_missing": true}. Top files of every env are merged (one level
// of `include:` in top files). sls names are globbed against the env's available sls;
// "a.b" is a/b.sls or a/b/init.sls (first root with the file wins); `include:` in SLS
// (also ".rel" and {name: {key: "x:y"}} forms) is honoured. Results are merged with
// Salt's "smart" strategy (recursive dict merge, later wins, lists replaced unless
// pillar_merge_lists). Jinja is NOT rendered: a file containing "{%", "{{" or "{#" is
// reported in _errors as "Jinja is not rendered by sylvite: <file>".
// Rendering errors go into the "_errors" list (Salt's behaviour and messages).
// Thread-safety: const, safe from any thread (blocking disk I/O: worker pool).
#pragma once
#include <map>
#include <string>
#include <vector>

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
  std::string state_top_ = "top.sls";
  std::vector<std::string> env_order_;
  bool merge_lists_ = false;
  bool includes_override_sls_ = false;
};

// Salt's dictupdate.merge_recurse: a copy of a with b merged in recursively (maps merge,
// later wins; lists replaced, or appended without duplicates if merge_lists).
wire::value pillar_merge(const wire::value& a, const wire::value& b, bool merge_lists = false);

}  // namespace sylvite::master
