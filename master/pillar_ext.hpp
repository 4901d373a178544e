// sylvite::master ext_pillar modules (internal to the pillar compiler), exactly as Salt
// 3008.5's salt/pillar/{cmd_yaml,cmd_json,file_tree}.py:
//   cmd_yaml: "%s" in the command replaced by the minion id, run by /bin/sh -c (Salt's
//     cmd.run_stdout, python_shell=True), stdout (trailing whitespace stripped) parsed
//     as YAML; failure: logged, {}.
//   cmd_json: the same with cmd.run (no shell: the command split as shlex.split does,
//     stderr merged into stdout) parsed as JSON.
//   file_tree: root_dir/nodegroups/<group>/ (groups in `nodegroups` matching the minion)
//     then root_dir/hosts/<id>/: each directory a map, each file a value (its bytes: text
//     if UTF-8, else binary; one trailing newline removed unless keep_newline, a bool
//     or a list of globs on "<prefix>/<file>"); template: True renders each file with
//     render_default (or its shebang); a relative root_dir is taken under every
//     pillar_roots dir of pillarenv. Options: root_dir, follow_dir_links, debug,
//     keep_newline, render_default, renderer_blacklist, renderer_whitelist, template.
// Commands run with stdin /dev/null and are killed at the compile deadline.
// Thread-safety: pure functions over their arguments (renderer is thread-safe).
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master::pillar_ext {

struct context {
  std::string minion_id;
  wire::value grains = wire::value::object();
  wire::value opts = wire::value::object();  // template variable `opts` (file_tree template)
  std::optional<std::string> pillarenv;
  config::roots_map pillar_roots;
  std::map<std::string, std::string> nodegroups;
  const config::master_config* cfg = nullptr;
  render::renderer* renderer = nullptr;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::chrono::milliseconds render_timeout{30000};
};

// True for the modules above.
bool supported(std::string_view name);

struct result {
  wire::value data = wire::value::object();  // what the module returned
  std::optional<std::string> error;          // Salt's "Failed to load ext_pillar <x>: <why>"
  bool timed_out = false;                    // the deadline passed
};
// Salt's Pillar._external_pillar_data: arg a map (keyword arguments), a list
// (positional) or a scalar (the single argument).
result run(const std::string& name, const wire::value& arg, const context& c);

// Python's shlex.split (POSIX mode); nullopt on an unbalanced quote ("No closing
// quotation") or a trailing escape ("No escaped character").
std::optional<std::vector<std::string>> shlex_split(std::string_view s);

struct command_output {
  std::string out;
  int status = -1;
  bool timed_out = false;
  bool started = false;
};
// argv[0] looked up in PATH; merge_stderr: 2>&1, else stderr discarded.
command_output run_command(const std::vector<std::string>& argv, bool merge_stderr,
                           std::chrono::steady_clock::time_point deadline);

}  // namespace sylvite::master::pillar_ext
