// salt-master: command line, logging, daemonizing and pid file; the daemon itself is
// master/daemon.cpp. Flags follow Salt's salt-master where they exist.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "core/config/config.hpp"
#include "core/util/daemonize.hpp"
#include "core/util/files.hpp"
#include "core/util/log.hpp"
#include "master/daemon.hpp"
#include "sylvite/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"salt-master: the sylvite (Salt-compatible) master daemon"};
  std::string config_dir = "/etc/salt";
  std::string log_level;
  std::string log_file;
  std::string pid_file;
  bool daemon = false;
  bool version = false;
  app.add_option("-c,--config-dir", config_dir, "Salt configuration directory (default /etc/salt)");
  app.add_option("-l,--log-level", log_level,
                 "Console log level: all, garbage, trace, debug, info, warning, error, critical, quiet");
  app.add_option("--log-file", log_file, "Log file path (default: log_file from the config)");
  app.add_option("--pid-file", pid_file, "Write the process id to this file");
  app.add_flag("-d,--daemon", daemon, "Run in the background");
  app.add_flag("--version", version, "Print the version and exit");
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::cout << "salt-master " << sylvite::sylvite_version << " (sylvite)\n";
    return 0;
  }

  auto cfg = sylvite::config::load_master_config(config_dir);
  if (!cfg) {
    std::cerr << cfg.error().message << "\n";
    return 1;
  }
  if (!log_level.empty()) cfg->log_level = log_level;
  if (!log_file.empty()) cfg->log_file = log_file;
  if (pid_file.empty() && daemon) {
    if (auto p = sylvite::wire::get_text(cfg->raw, "pidfile")) pid_file = std::string(*p);
    else pid_file = "/var/run/salt-master.pid";
  }

  // Log file: create its directory; fall back to stderr only if it cannot be opened.
  std::string lf = cfg->log_file.string();
  if (!lf.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(lf).parent_path(), ec);
  }
  if (daemon && !sylvite::util::daemonize()) {
    std::cerr << "salt-master: cannot daemonize\n";
    return 1;
  }
  sylvite::util::init_logging("salt-master", cfg->log_level, lf, cfg->log_level_logfile);
  if (!pid_file.empty()) {
    auto r = sylvite::util::write_pid_file(pid_file);
    if (!r) spdlog::warn("cannot write pid file {}: {}", pid_file, r.error().message());
  }
  int rc = sylvite::master::run_master(*cfg);
  if (!pid_file.empty()) (void)sylvite::util::remove_file(pid_file);
  spdlog::shutdown();
  return rc;
}
