// spdlog setup. Salt level names map onto spdlog levels; "garbage"/"trace" -> trace,
// "profile"/"debug" -> debug, "quiet" -> off.
#include "core/util/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <mutex>
#include <vector>

namespace sylvite::util {
namespace {
std::mutex mu;
std::string g_program, g_file;
spdlog::level::level_enum g_console = spdlog::level::warn, g_file_level = spdlog::level::warn;

spdlog::level::level_enum parse_level(const std::string& s, spdlog::level::level_enum dflt) {
  if (s == "garbage" || s == "trace" || s == "all") return spdlog::level::trace;
  if (s == "debug" || s == "profile") return spdlog::level::debug;
  if (s == "info") return spdlog::level::info;
  if (s == "warning" || s == "warn") return spdlog::level::warn;
  if (s == "error") return spdlog::level::err;
  if (s == "critical") return spdlog::level::critical;
  if (s == "quiet") return spdlog::level::off;
  return dflt;
}

void build() {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  console->set_level(g_console);
  sinks.push_back(console);
  if (!g_file.empty()) {
    try {
      auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(g_file, false);
      file->set_level(g_file_level);
      sinks.push_back(file);
    } catch (const spdlog::spdlog_ex& e) {
      console->log(spdlog::details::log_msg(g_program, spdlog::level::warn,
                                            std::string("cannot open log file ") + g_file + ": " + e.what()));
    }
  }
  auto logger = std::make_shared<spdlog::logger>(g_program, sinks.begin(), sinks.end());
  logger->set_level(std::min(g_console, g_file.empty() ? g_console : g_file_level));
  logger->set_pattern("%Y-%m-%d %H:%M:%S,%e [%n][%l][%t] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}
}  // namespace

void init_logging(const std::string& program, const std::string& level, const std::string& log_file,
                  const std::string& file_level) {
  std::lock_guard lk(mu);
  g_program = program;
  g_file = log_file;
  g_console = parse_level(level, spdlog::level::warn);
  g_file_level = parse_level(file_level.empty() ? level : file_level, g_console);
  build();
}

void reopen_logs() {
  std::lock_guard lk(mu);
  build();
}

}  // namespace sylvite::util
