// sylvite::util logging: spdlog setup shared by every daemon and CLI.
// Levels use Salt's names: garbage, trace, debug, info, warning, error, critical, quiet.
// Thread-safety: init once at start (main thread); spdlog loggers are thread-safe.
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace sylvite::util {

// log_file empty -> stderr only. level: Salt level name; unknown -> "warning".
// Reopen-on-SIGHUP: call reopen_logs().
void init_logging(const std::string& program, const std::string& level,
                  const std::string& log_file = {}, const std::string& file_level = {});
void reopen_logs();

}  // namespace sylvite::util

// Use spdlog directly: spdlog::info("...{}", x); spdlog::warn(...); spdlog::error(...).
