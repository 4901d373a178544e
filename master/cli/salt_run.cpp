// salt-run: run a runner on the master (ipc "runner") and print its return with the
// nested outputter (or --out); the exit code is the runner's retcode, as Salt's
// salt/cli/run.py does.
#include <algorithm>
#include <iostream>
#include <set>

#include "master/cli/args.hpp"
#include "master/cli/common.hpp"

using namespace sylvite;
using wire::value;

int main(int argc, char** argv) {
  const std::string usage = "salt-run [options] <function> [arguments]";
  CLI::App app{"salt-run is the frontend command for executing Salt Runners. Salt Runners are\nmodules used to "
               "execute convenience functions on the Salt Master",
               "salt-run"};
  app.set_version_flag("--version", cli::version_line("salt-run"));
  std::string config_dir = "/etc/salt";
  cli::add_config_dir_flag(app, config_dir);
  cli::output_flags of;
  int timeout = 0;
  bool doc = false, is_async = false, hard_crash = false, skip_grains = false, args_stdin = false;
  std::string jid, no_parse, saltfile, eauth, log_level, log_file, log_file_level;
  std::vector<std::string> positional;
  app.add_option("--saltfile", saltfile, "Specify the path to a Saltfile (accepted, ignored).");
  app.add_option("-t,--timeout", timeout, "Change the timeout, if applicable, for the running command (in seconds). Default: 1.");
  app.add_flag("--args-stdin", args_stdin, "Read additional options and/or arguments from stdin (not supported).");
  app.add_option("--jid", jid, "Pass a JID to be used instead of generating one (accepted).");
  app.add_flag("--hard-crash", hard_crash, "Accepted for compatibility.");
  app.add_option("--no-parse", no_parse, "Comma-separated list of named CLI arguments (i.e. argname=value) which should not be parsed as Python data types");
  app.add_flag("-d,--doc,--documentation", doc, "Display documentation for runners (not supported).");
  app.add_flag("--async", is_async, "Start the runner operation and immediately return control (not supported).");
  app.add_flag("--skip-grains", skip_grains, "Do not load grains (accepted).");
  app.add_option("-a,--auth,--eauth,--external-auth", eauth, "External authentication (not supported).");
  cli::add_output_flags(app, of, "salt-run");
  auto* lg = app.add_option_group("Logging Options");
  lg->add_option("-l,--log-level", log_level, "Console logging log level (accepted).");
  lg->add_option("--log-file", log_file, "Log file path (accepted).");
  lg->add_option("--log-file-level", log_file_level, "Logfile logging log level (accepted).");
  app.add_option("function_args", positional, "<function> [arguments]");

  if (auto rc = cli::parse_cli(app, argc, argv, usage)) return *rc;
  auto refuse = [&](const std::string& what) {
    return cli::usage_error("salt-run", usage, what + " is not supported by sylvite");
  };
  if (doc) return refuse("-d/--doc");
  if (is_async) return refuse("--async");
  if (args_stdin) return refuse("--args-stdin");
  if (!eauth.empty()) return refuse("external authentication (-a/--eauth)");
  if (positional.empty()) {
    std::cout << app.help();
    return cli::ex_ok;
  }

  std::set<std::string> no_parse_set;
  {
    std::string s = no_parse;
    std::replace(s.begin(), s.end(), ',', ' ');
    for (auto& n : cli::split_ws(s)) no_parse_set.insert(n);
  }
  auto cfg = cli::load_config(config_dir);
  if (!cfg) return cli::ex_client_error;

  // Runners get positional args and kwargs apart (parse_input(condition=False)).
  std::vector<std::string> rest(positional.begin() + 1, positional.end());
  auto in = cli::parse_input_split(rest, no_parse_set);
  value body = {{"cmd", "runner"}, {"fun", positional[0]}, {"arg", in.args}, {"kwarg", in.kwargs}};
  if (timeout > 0) body["timeout"] = timeout;
  if (!jid.empty()) body["jid"] = jid;

  // Runners such as manage.up wait for minions: allow the master's own timeouts plenty.
  const auto wait = std::chrono::seconds(std::max(timeout, cfg->timeout) + cfg->gather_job_timeout + 300);
  auto r = cli::master_request(*cfg, body, wait);
  if (!r.body) {
    std::cerr << r.error << "\n";
    return cli::ex_generic;  // Salt: raise SystemExit(str(exc))
  }
  const value& rep = *r.body;
  if (auto err = wire::get_text(rep, "error")) {
    std::cout << output::display(of.out.empty() ? "nested" : of.out, value(std::string(*err)),
                                 cli::make_output_options(of))
              << std::flush;
    return cli::ex_generic;
  }
  const value* ret = wire::find(rep, "return");
  cli::emit(of, output::display(of.out.empty() ? "nested" : of.out, ret ? *ret : value(nullptr),
                                cli::make_output_options(of)));
  auto rc = wire::get_int(rep, "retcode").value_or(0);
  return static_cast<int>(rc);
}
