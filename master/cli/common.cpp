// sylvite::cli shared helpers (see common.hpp). Messages are Salt 3008's wording.
#include "master/cli/common.hpp"

#include "core/util/log.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "core/transport/transport.hpp"
#include "master/ipc_protocol.hpp"
#include "sylvite/version.hpp"

namespace sylvite::cli {

std::string version_line(const std::string& prog) {
  return prog + " " + salt_compat_version + " (sylvite " + sylvite_version + ")";
}

int usage_error(const std::string& prog, const std::string& usage, const std::string& msg, std::ostream& err) {
  err << "Usage: " << usage << "\n\n" << prog << ": error: " << msg << "\n";
  return ex_usage;
}

void add_log_flags(CLI::App& app, log_flags& f, bool short_l) {
  auto* lg = app.add_option_group("Logging Options");
  lg->add_option(short_l ? "-l,--log-level" : "--log-level", f.level,
                 "Console logging log level. One of 'all', 'garbage', 'trace', 'debug', 'info', 'warning', 'error', "
                 "'critical', 'quiet'. Default: 'warning'.");
  lg->add_option("--log-file", f.file, "Log file path (default: none, the console only).");
  lg->add_option("--log-file-level", f.file_level, "Logfile logging log level. Default: the console level.");
}

void init_cli_logging(const std::string& prog, const log_flags& f) {
  util::init_logging(prog, f.level.empty() ? "warning" : f.level, f.file, f.file_level);
}

void add_output_flags(CLI::App& app, output_flags& f, const std::string& prog) {
  auto* g = app.add_option_group("Output Options", "Configure your preferred output format.");
  g->add_option("--out,--output", f.out,
                "Print the output from the '" + prog + "' command using the specified outputter.");
  g->add_option("--out-indent,--output-indent", f.out_indent,
                "Print the output indented by the provided value in spaces. Negative values disables "
                "indentation. Only applicable in outputters that support indentation.");
  g->add_option("--out-file,--output-file", f.out_file, "Write the output to the specified file.");
  g->add_flag("--out-file-append,--output-file-append", f.out_file_append, "Append the output to the specified file.");
  g->add_flag("--no-color,--no-colour", f.no_color, "Disable all colored output.");
  g->add_flag("--force-color,--force-colour", f.force_color, "Force colored output.");
}

output::options make_output_options(const output_flags& f) {
  output::options o;
  if (f.force_color) o.color = true;
  else if (f.no_color || !f.out_file.empty()) o.color = false;
  else o.color = ::isatty(STDOUT_FILENO) == 1;
  if (f.out_indent) {
    o.indent = *f.out_indent;
    o.indent_explicit = true;
  }
  return o;
}

void emit(const output_flags& f, const std::string& text, std::ostream& out) {
  if (text.empty()) return;
  if (!f.out_file.empty()) {
    // Salt truncates the file once (unless --out-file-append), then appends every
    // display_output call to it.
    static bool first = true;
    std::ofstream of(f.out_file, (first && !f.out_file_append) ? std::ios::trunc : std::ios::app);
    first = false;
    of << text;
    return;
  }
  out << text << std::flush;
}

void add_config_dir_flag(CLI::App& app, std::string& config_dir) {
  app.add_option("-c,--config-dir", config_dir,
                 "Pass in an alternative configuration directory. Default: '/etc/salt'.");
}

std::optional<config::master_config> load_config(const std::string& config_dir, std::ostream& err) {
  auto r = config::load_master_config(config_dir);
  if (!r) {
    err << r.error().message << "\n";
    return std::nullopt;
  }
  return std::move(*r);
}

std::filesystem::path master_socket(const config::master_config& cfg) {
  return master::cli_socket_path(cfg.sock_dir);
}

namespace {
master_reply translate(const config::master_config& cfg, result<wire::value> r) {
  master_reply out;
  if (r) {
    out.body = std::move(*r);
    return out;
  }
  const auto ec = r.error();
  if (ec == transport::errc::timeout) {
    out.error = msg_master_timeout;
  } else {
    std::error_code fec;
    out.down = ec == transport::errc::connect_failed || !std::filesystem::exists(master_socket(cfg), fec);
    out.error = msg_master_down;
  }
  return out;
}

transport::endpoint endpoint_of(const config::master_config& cfg) {
  transport::endpoint ep;
  ep.unix_path = master_socket(cfg).string();
  return ep;
}

transport::options transport_options(const config::master_config& cfg) {
  transport::options o;
  o.max_frame_size = static_cast<std::size_t>(cfg.max_message_size);
  return o;
}
}  // namespace

master_reply master_request(const config::master_config& cfg, const wire::value& body,
                            std::chrono::milliseconds timeout) {
  std::error_code fec;
  if (!std::filesystem::exists(master_socket(cfg), fec)) return {std::nullopt, msg_master_down, true};
  return translate(cfg, transport::request_once(endpoint_of(cfg), body, timeout, transport_options(cfg)));
}

master_reply master_request_stream(const config::master_config& cfg, const wire::value& body,
                                   const std::function<void(const wire::value&)>& on_item,
                                   std::chrono::milliseconds timeout) {
  std::error_code fec;
  if (!std::filesystem::exists(master_socket(cfg), fec)) return {std::nullopt, msg_master_down, true};
  return translate(cfg,
                   transport::request_stream_once(endpoint_of(cfg), body, on_item, timeout, transport_options(cfg)));
}

std::string current_user() {
  if (const char* s = std::getenv("SUDO_USER"); s && *s) return s;
  if (const passwd* pw = ::getpwuid(::geteuid())) return pw->pw_name;
  return "root";
}

std::optional<int> parse_cli(CLI::App& app, int argc, char** argv, const std::string& usage, std::ostream& out,
                             std::ostream& err) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return ex_ok;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return ex_ok;
  } catch (const CLI::ExtrasError& e) {
    // optparse wording for an unknown option
    std::string what = e.what();
    auto colon = what.find(": ");
    std::string first = colon == std::string::npos ? what : what.substr(colon + 2);
    first = first.substr(0, first.find(' '));
    return usage_error(app.get_name(), usage, "no such option: " + first, err);
  } catch (const CLI::ParseError& e) {
    return usage_error(app.get_name(), usage, e.what(), err);
  }
  return std::nullopt;
}

}  // namespace sylvite::cli
