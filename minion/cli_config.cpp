// Command-line config for salt-minion and salt-call (see cli_config.hpp).
#include "minion/cli_config.hpp"

#include <array>
#include <iostream>
#include <string_view>

namespace sylvite::minion {

namespace {
constexpr std::array<std::string_view, 10> k_levels = {"all",     "critical", "debug", "error", "garbage",
                                                       "info",    "profile",  "quiet", "trace", "warning"};
}

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

bool check_cli_log_level(const std::string& prog, const std::string& opt, const std::string& level) {
  if (level.empty()) return true;
  for (auto l : k_levels)
    if (l == level) return true;
  std::string choices;
  for (auto l : k_levels) {
    if (!choices.empty()) choices += ", ";
    choices += "'" + std::string(l) + "'";
  }
  std::cerr << "Usage: " << prog << " [options]\n\n"
            << prog << ": error: option " << opt << ": invalid choice: '" << level << "' (choose from " << choices
            << ")\n";
  return false;
}

}  // namespace sylvite::minion
