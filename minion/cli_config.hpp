// sylvite::minion command-line config shared by salt-minion and salt-call.
// Thread-safety: call from main before any thread exists (writes to stderr).
#pragma once
#include <optional>
#include <string>

#include "core/config/config.hpp"

namespace sylvite::minion {

// Load config_dir/minion and apply the command line's --log-level and --log-file (an empty
// one keeps the config's). A bad config prints its message on stderr and gives nullopt;
// the caller exits 1.
std::optional<config::minion_config> load_cli_config(const std::string& config_dir, const std::string& log_level,
                                                     const std::string& log_file);

}  // namespace sylvite::minion
