// sylvite::minion command-line config shared by salt-minion and salt-call.
// Thread-safety: call from main before any thread exists (writes to stderr).
#pragma once
#include <optional>
#include <string>

#include "core/config/config.hpp"

namespace sylvite::minion {

// Salt's usage-error exit code (EX_USAGE), as its option parser exits on a bad option value.
inline constexpr int ex_usage = 64;

// Load config_dir/minion and apply the command line's --log-level and --log-file (an empty
// one keeps the config's). A bad config prints its message on stderr and gives nullopt;
// the caller exits 1.
std::optional<config::minion_config> load_cli_config(const std::string& config_dir, const std::string& log_level,
                                                     const std::string& log_file);

// A log level given on the command line (-l/--log-level, --log-file-level) must be one of
// Salt's (all, critical, debug, error, garbage, info, profile, quiet, trace, warning; empty:
// not given). Otherwise prints Salt's optparse refusal on stderr
//   Usage: <prog> [options]
//
//   <prog>: error: option <opt>: invalid choice: 'x' (choose from 'all', ...)
// and returns false; the caller exits ex_usage.
bool check_cli_log_level(const std::string& prog, const std::string& opt, const std::string& level);

}  // namespace sylvite::minion
