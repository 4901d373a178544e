// sylvite::cli shared pieces of salt, salt-key and salt-run: Salt-style usage errors
// (exit 64), --version text, config loading (-c CONFIG_DIR), the master CLI socket
// endpoint (sock_dir/master_cli.ipc, master/ipc_protocol.hpp), output option flags and
// Salt's messages for an unreachable master. Asio stays behind transport.hpp's
// request_once/request_stream_once. Thread-safety: single-threaded CLI helpers.
#pragma once
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "core/config/config.hpp"
#include "core/output/output.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cli {

// "<prog> 3008.5 (sylvite 0.1.0)": the Salt release we follow, then our own version
// (both from sylvite/version.hpp).
std::string version_line(const std::string& prog);

// Salt's exit codes (salt/defaults/exitcodes.py).
inline constexpr int ex_ok = 0;
inline constexpr int ex_generic = 1;
inline constexpr int ex_client_error = 2;   // no return / master unreachable
inline constexpr int ex_target_error = 42;  // missing target/function
inline constexpr int ex_usage = 64;

// Prints "Usage: <usage>\n\n<prog>: error: <msg>\n" to err (optparse style); returns 64.
int usage_error(const std::string& prog, const std::string& usage, const std::string& msg,
                std::ostream& err = std::cerr);

// Output flags common to the three tools (--out, --out-indent, --no-color, --force-color).
struct output_flags {
  std::string out;  // "" -> tool default
  std::optional<int> out_indent;
  bool no_color = false;
  bool force_color = false;
  std::string out_file;
  bool out_file_append = false;
};
// Salt's "Logging Options" group (-l/--log-level, --log-file, --log-file-level) and the
// logging it sets up: the console (stderr) at the level (default warning), optionally a
// file. short_l: -l is the level (salt-key uses -l for --list).
struct log_flags {
  std::string level, file, file_level;
};
void add_log_flags(CLI::App& app, log_flags& f, bool short_l = true);
void init_cli_logging(const std::string& prog, const log_flags& f);

void add_output_flags(CLI::App& app, output_flags& f, const std::string& prog);
// Colour decision as salt.output.get_printout: --force-color, else not --no-color and a tty.
output::options make_output_options(const output_flags& f);

// Print text to out, or append to --out-file (Salt's display_output semantics).
void emit(const output_flags& f, const std::string& text, std::ostream& out = std::cout);

// -c CONFIG_DIR (default /etc/salt).
void add_config_dir_flag(CLI::App& app, std::string& config_dir);
// Load CONFIG_DIR/master; on error prints the message to err and returns nullopt.
std::optional<config::master_config> load_config(const std::string& config_dir, std::ostream& err = std::cerr);

// Master CLI socket path for this config.
std::filesystem::path master_socket(const config::master_config& cfg);

// Salt's messages for a master that cannot be used.
inline constexpr const char* msg_master_down = "The salt master could not be contacted. Is master running?";
inline constexpr const char* msg_master_timeout =
    "Salt request timed out. The master is not responding. You may need to run your command with `--async` in "
    "order to bypass the congested event bus. With `--async`, the CLI tool will print the job id (jid) and exit "
    "immediately without listening for responses. You can then use `salt-run jobs.lookup_jid` to look up the "
    "results of the job in the job cache later.";

struct master_reply {
  std::optional<wire::value> body;  // set on success (may hold {"error": ...})
  std::string error;                // human text when body is empty
  bool down = false;                // socket absent / refused
};
// One request to the running master over its CLI socket.
master_reply master_request(const config::master_config& cfg, const wire::value& body,
                            std::chrono::milliseconds timeout);
master_reply master_request_stream(const config::master_config& cfg, const wire::value& body,
                                   const std::function<void(const wire::value&)>& on_item,
                                   std::chrono::milliseconds timeout);

// The invoking user as Salt reports it (SUDO_USER when run through sudo, else the login name).
std::string current_user();

// Parse with CLI11 and translate errors into Salt's usage error (64) or help (0).
// Returns nullopt when parsing succeeded and the caller should go on.
std::optional<int> parse_cli(CLI::App& app, int argc, char** argv, const std::string& usage,
                             std::ostream& out = std::cout, std::ostream& err = std::cerr);

// What one run of a CLI talks to. The defaults are the real ones; tests replace them.
struct cli_env {
  std::istream* in = &std::cin;
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  std::function<master_reply(const config::master_config&, const wire::value&, std::chrono::milliseconds)> request =
      master_request;
  std::function<master_reply(const config::master_config&, const wire::value&,
                             const std::function<void(const wire::value&)>&, std::chrono::milliseconds)>
      request_stream = master_request_stream;
  std::function<std::string()> user = current_user;
};

// The three tools (master/cli/salt_cmd.cpp, salt_key_cmd.cpp, salt_run_cmd.cpp): parse
// argv as Salt 3008 does, talk to the master through env, return the exit code.
int salt_main(int argc, char** argv, cli_env& env);
int salt_key_main(int argc, char** argv, cli_env& env);
int salt_run_main(int argc, char** argv, cli_env& env);

}  // namespace sylvite::cli
