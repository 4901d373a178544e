// salt-run: run a runner on the master (ipc "runner") and print its return with the
// nested outputter (or --out); the exit code is the runner's retcode, as Salt's
// salt/cli/run.py does. The main (salt_run.cpp) only calls salt_run_main.
#include <algorithm>
#include <iostream>
#include <set>

#include "master/cli/args.hpp"
#include "core/util/log.hpp"
#include "master/cli/common.hpp"
#include "master/cli/state_event.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::cli {

using wire::value;
namespace ipc = master::ipc;

int salt_run_main(int argc, char** argv, cli_env& env) {
  const std::string usage = "salt-run [options] <function> [arguments]";
  CLI::App app{"salt-run is the frontend command for executing Salt Runners. Salt Runners are\nmodules used to "
               "execute convenience functions on the Salt Master",
               "salt-run"};
  app.set_version_flag("--version", version_line("salt-run"));
  std::string config_dir = "/etc/salt";
  log_flags logf;
  add_config_dir_flag(app, config_dir);
  output_flags of;
  int timeout = 0;
  bool doc = false, is_async = false, hard_crash = false, skip_grains = false, args_stdin = false;
  std::string jid, no_parse, saltfile, eauth;
  std::vector<std::string> positional;
  app.add_option("--saltfile", saltfile, "Specify the path to a Saltfile (not supported).");
  app.add_option("-t,--timeout", timeout, "Change the timeout, if applicable, for the running command (in seconds). Default: 1.");
  app.add_flag("--args-stdin", args_stdin, "Read additional options and/or arguments from stdin (not supported).");
  app.add_option("--jid", jid, "Pass a JID to be used instead of generating one (not supported: refused).");
  app.add_flag("--hard-crash", hard_crash, "Accepted for compatibility.");
  app.add_option("--no-parse", no_parse, "Comma-separated list of named CLI arguments (i.e. argname=value) which should not be parsed as Python data types");
  app.add_flag("-d,--doc,--documentation", doc, "Display documentation for runners (not supported).");
  app.add_flag("--async", is_async, "Start the runner operation and immediately return control (not supported).");
  app.add_flag("--skip-grains", skip_grains, "Do not load grains (accepted).");
  app.add_option("-a,--auth,--eauth,--external-auth", eauth, "External authentication (not supported).");
  add_output_flags(app, of, "salt-run");
  add_log_flags(app, logf);
  app.add_option("function_args", positional, "<function> [arguments]");

  if (auto rc = parse_cli(app, argc, argv, usage, *env.out, *env.err)) return *rc;
  // Salt's CLI logging: the console (stderr) at -l (default warning), optionally a file.
  init_cli_logging("salt-run", logf);
  auto refuse = [&](const std::string& what) {
    return usage_error("salt-run", usage, what + " is not supported by sylvite", *env.err);
  };
  if (!saltfile.empty()) return refuse("--saltfile");
  if (!jid.empty()) return refuse("--jid");
  if (doc) return refuse("-d/--doc");
  if (is_async) return refuse("--async");
  if (args_stdin) return refuse("--args-stdin");
  if (!eauth.empty()) return refuse("external authentication (-a/--eauth)");
  if (positional.empty()) {
    (*env.out) << app.help();
    return ex_ok;
  }

  std::set<std::string> no_parse_set;
  {
    std::string s = no_parse;
    std::replace(s.begin(), s.end(), ',', ' ');
    for (auto& n : split_ws(s)) no_parse_set.insert(n);
  }
  auto cfg = load_config(config_dir, *env.err);
  if (!cfg) return ex_client_error;

  // Runners get positional args and kwargs apart (parse_input(condition=False)).
  std::vector<std::string> rest(positional.begin() + 1, positional.end());
  auto in = parse_input_split(rest, no_parse_set);
  // state.event streams the bus until interrupted (master/cli/state_event.hpp).
  if (positional[0] == "state.event") return run_state_event(*cfg, in.args, in.kwargs, of, env);
  ipc::runner req{positional[0], in.args, in.kwargs, std::nullopt, std::nullopt, env.user()};
  if (timeout > 0) req.timeout = timeout;
  if (!jid.empty()) req.jid = jid;

  // Runners such as manage.up wait for minions: allow the master's own timeouts plenty.
  const auto wait = std::chrono::seconds(std::max(timeout, cfg->timeout) + cfg->gather_job_timeout + 300);
  auto r = env.request(*cfg, ipc::encode(req), wait);
  if (!r.body) {
    (*env.err) << r.error << "\n";
    return ex_generic;  // Salt: raise SystemExit(str(exc))
  }
  auto d = ipc::decode_runner_reply(*r.body);
  if (!d) {
    (*env.err) << "The master sent a reply salt-run cannot read: " << d.error << "\n";
    return ex_generic;
  }
  if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
    (*env.out) << output::display(of.out.empty() ? "nested" : of.out, value(e->error), make_output_options(of))
               << std::flush;
    return ex_generic;
  }
  const auto& rep = std::get<ipc::runner_reply>(*d);
  emit(of, output::display(of.out.empty() ? "nested" : of.out, rep.ret, make_output_options(of)), *env.out);
  return static_cast<int>(rep.retcode);
}

}  // namespace sylvite::cli
