// salt-minion: the sylvite minion daemon. Flags follow Salt's salt-minion:
//   -c/--config-dir (default /etc/salt), -l/--log-level, --log-file, --log-file-level,
//   -d/--daemon, --pid-file, --version, --help.
// A log level that is not one of Salt's is refused as Salt's option parser does (exit 64).
// A bad config prints the config_error message and exits 1. SIGTERM/SIGINT stop cleanly.
// Exit codes: 0 stopped, 1 bad config/keys, 42 master_finger mismatch, 64 bad option value,
// 77 key rejected.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/config/config.hpp"
#include "core/util/daemonize.hpp"
#include "core/util/files.hpp"
#include "core/util/log.hpp"
#include "minion/cli_config.hpp"
#include "minion/driver.hpp"
#include "minion/grains.hpp"
#include "sylvite/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"salt-minion (sylvite): receives commands from a remote Salt master"};
  std::string config_dir = "/etc/salt";
  std::string log_level;
  std::string log_file;
  std::string log_file_level;
  bool daemon = false;
  std::string pid_file;
  app.add_option("-c,--config-dir", config_dir, "Pass in an alternative configuration directory.");
  app.add_option("-l,--log-level", log_level, "Console logging log level (all, garbage, trace, debug, info, warning, error, critical, quiet).");
  app.add_option("--log-file", log_file, "Log file path.");
  app.add_option("--log-file-level", log_file_level, "Logfile logging log level.");
  app.add_flag("-d,--daemon", daemon, "Run the salt-minion as a daemon.");
  app.add_option("--pid-file", pid_file, "Specify the location of the pidfile.");
  app.set_version_flag("--version", std::string("salt-minion ") + sylvite::salt_compat_version +
                                        " (sylvite " + sylvite::sylvite_version + ")");
  CLI11_PARSE(app, argc, argv);
  if (!sylvite::minion::check_cli_log_level("salt-minion", "-l/--log-level", log_level) ||
      !sylvite::minion::check_cli_log_level("salt-minion", "--log-file-level", log_file_level))
    return sylvite::minion::ex_usage;

  auto cfg_r = sylvite::minion::load_cli_config(config_dir, log_level, log_file);
  if (!cfg_r) return 1;
  sylvite::config::minion_config cfg = std::move(*cfg_r);
  if (!log_file_level.empty()) cfg.log_level_logfile = log_file_level;

  for (const auto& d : {cfg.pki_dir, cfg.cachedir}) {
    if (auto r = sylvite::util::make_dirs(d, 0700); !r) {
      std::cerr << "Failed to create directory " << d.string() << ": " << r.error().message() << "\n";
      return 1;
    }
  }
  if (!cfg.log_file.empty()) (void)sylvite::util::make_dirs(cfg.log_file.parent_path(), 0755);

  if (daemon) {
    if (pid_file.empty()) pid_file = "/var/run/salt-minion.pid";
    if (!sylvite::util::daemonize(022)) {
      std::cerr << "Failed to daemonize\n";
      return 1;
    }
  }
  if (!pid_file.empty()) {
    if (auto r = sylvite::util::write_pid_file(pid_file); !r)
      std::cerr << "Cannot write pid file " << pid_file << ": " << r.error().message() << "\n";
  }
  sylvite::util::init_logging("salt-minion", cfg.log_level, cfg.log_file.string(), cfg.log_level_logfile);
  spdlog::info("Setting up the Salt Minion \"{}\" (sylvite {})", cfg.id, sylvite::sylvite_version);

  int code = sylvite::minion::run_minion_daemon(cfg, sylvite::minion::collect_grains(cfg));

  if (!pid_file.empty()) (void)sylvite::util::remove_file(pid_file);
  spdlog::info("The Salt Minion is shut down");
  spdlog::shutdown();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);  // job threads may still block in long-running modules
}
