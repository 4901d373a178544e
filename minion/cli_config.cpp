// Command-line config for salt-minion and salt-call (see cli_config.hpp).
#include "minion/cli_config.hpp"

#include <iostream>

namespace sylvite::minion {

std::optional<config::minion_config> load_cli_config(const std::string& config_dir, const std::string& log_level,
                                                     const std::string& log_file) {
  auto cfg_r = config::load_minion_config(config_dir);
  if (!cfg_r) {
    std::cerr << cfg_r.error().message << "\n";
    return std::nullopt;
  }
  config::minion_config cfg = std::move(*cfg_r);
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!log_file.empty()) cfg.log_file = log_file;
  return cfg;
}

}  // namespace sylvite::minion
