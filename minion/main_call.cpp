// salt-call: run one execution-module function on this minion, as salt/cli/caller.py
// (3008.5) does:
//   - arguments: positional strings are yamlified, "key=value" become keyword arguments
//     (salt.utils.args.parse_input); published as [args..., {"__kwarg__": true, ...}];
//   - without --local: authenticate as the minion (pki_dir keys, same code as the daemon),
//     fetch pillar, run the function here, send `_return` with jid "req" to the master;
//     key not accepted -> "Minion failed to authenticate with the master, has the minion
//     key been accepted?" and exit 2;
//   - output: {"local": <return>} through the outputter the function names (nested by
//     default) or --out;
//   - -l/--log-level must be one of Salt's levels (else Salt's usage error, exit 64);
//   - exit: --retcode-passthrough -> the function's retcode; otherwise 1 if it is not 0;
//     an unknown function prints "'x.y' is not available." on stderr and exits 255.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "core/config/config.hpp"
#include "core/output/output.hpp"
#include "core/util/files.hpp"
#include "core/util/log.hpp"
#include "minion/cli_config.hpp"
#include "minion/call_client.hpp"
#include "minion/grains.hpp"
#include "minion/jobs.hpp"
#include "minion/local_pillar.hpp"
#include "minion/modules.hpp"
#include "sylvite/version.hpp"

namespace mn = sylvite::minion;
namespace wire = sylvite::wire;

int main(int argc, char** argv) {
  CLI::App app{"salt-call (sylvite): run a Salt execution-module function on this minion"};
  std::string config_dir = "/etc/salt";
  std::string log_level;
  std::string log_file;
  std::string out;
  bool local = false;
  bool retcode_passthrough = false;
  bool no_color = false;
  int out_indent = 4;
  std::string fun;
  std::vector<std::string> args;
  app.add_option("-c,--config-dir", config_dir, "Pass in an alternative configuration directory.");
  app.add_option("-l,--log-level", log_level, "Console logging log level.");
  app.add_option("--log-file", log_file, "Log file path.");
  app.add_flag("--local", local, "Run salt-call locally, as if there was no master running.");
  app.add_option("--out,--output", out, "Print the output using the specified outputter (nested, json, yaml, txt, raw).");
  auto* indent_opt = app.add_option("--out-indent,--output-indent", out_indent,
                                    "Print the output indented by the provided value in spaces. Negative values "
                                    "disables indentation. Only applicable in outputters that support indentation.");
  app.add_flag("--no-color,--no-colour", no_color, "Disable all colored output.");
  app.add_flag("--retcode-passthrough", retcode_passthrough, "Exit with the salt call retcode and not the salt binary retcode.");
  app.set_version_flag("--version", std::string("salt-call ") + sylvite::salt_compat_version + " (sylvite " +
                                        sylvite::sylvite_version + ")");
  app.add_option("function", fun, "Function to call, e.g. test.ping")->required();
  app.add_option("args", args, "Function arguments; key=value for keyword arguments");
  CLI11_PARSE(app, argc, argv);
  if (!mn::check_cli_log_level("salt-call", "-l/--log-level", log_level)) return mn::ex_usage;

  if (!out.empty() && !sylvite::output::known(out)) {
    std::cerr << "salt-call: error: invalid outputter '" << out << "'\n";
    return 2;
  }
  auto cfg_r = mn::load_cli_config(config_dir, log_level, log_file);
  if (!cfg_r) return 1;
  sylvite::config::minion_config cfg = std::move(*cfg_r);
  if (local) cfg.file_client = "local";
  const bool is_local = local || cfg.file_client == "local" || cfg.master_type == "disable";
  (void)sylvite::util::make_dirs(cfg.pki_dir, 0700);
  (void)sylvite::util::make_dirs(cfg.cachedir, 0700);
  if (!cfg.log_file.empty()) (void)sylvite::util::make_dirs(cfg.log_file.parent_path(), 0755);
  sylvite::util::init_logging("salt-call", cfg.log_level, cfg.log_file.string(), cfg.log_level_logfile);

  const auto& reg = mn::module_registry::builtin();
  if (!reg.find(fun)) {
    std::cerr << mn::missing_fun_string(fun) << "\n";
    return 255;  // sys.exit(-1)
  }

  // parse_input(opts["arg"]) + condition_input.
  wire::value arg_list = wire::value::array();
  wire::value kw = wire::value::object();
  for (const auto& a : args) {
    if (auto kv = mn::parse_kwarg(a)) kw[kv->first] = mn::yamlify_arg(kv->second);
    else arg_list.push_back(mn::yamlify_arg(a));
  }
  if (!kw.empty()) {
    wire::value k = wire::value::object();
    k["__kwarg__"] = true;
    for (auto& [key, v] : kw.items()) k[key] = v;
    arg_list.push_back(std::move(k));
  }

  wire::value grains = mn::collect_grains(cfg);
  std::unique_ptr<mn::call_client> client;
  mn::call_context ctx;
  ctx.cfg = &cfg;
  ctx.grains = std::make_shared<const wire::value>(grains);
  if (is_local) {
    ctx.pillar = std::make_shared<const wire::value>(mn::compile_local_pillar(cfg, grains));
    ctx.local = true;
  } else {
    client = mn::call_client::create(cfg, grains);
    if (!client) return 1;
    int code = client->connect();
    if (code != 0) {
      client->close();
      spdlog::shutdown();
      return code;
    }
    ctx.pillar = client->pillar();
    ctx.master = &client->link();
  }
  mn::running_jobs running;
  ctx.running = &running;
  ctx.jid = mn::gen_jid();
  ctx.pub = wire::value::object();
  ctx.pub["fun"] = fun;
  ctx.pub["pid"] = static_cast<long long>(::getpid());
  ctx.pub["jid"] = ctx.jid;
  ctx.pub["tgt"] = "salt-call";
  running.add(ctx.jid, ctx.pub);

  mn::exec_outcome o = reg.call(fun, arg_list, ctx);
  running.remove(ctx.jid);

  if (o.error) {
    // caller.py reports these on stderr instead of printing a return.
    const auto& e = *o.error;
    int code = 1;
    switch (e.type) {
      case mn::exec_error::kind::type:
        std::cerr << "\nPassed invalid arguments: " << e.message << ".\n\nUsage:\n" << reg.find(fun)->doc << "\n";
        break;
      case mn::exec_error::kind::execution:
        std::cerr << "Error running '" << fun << "': " << e.message << "\n";
        break;
      case mn::exec_error::kind::command_not_found:
        std::cerr << "Command required for '" << fun << "' not found: " << e.message << "\n";
        break;
      default:
        std::cerr << e.message << "\n";
        break;
    }
    if (client) client->close();
    spdlog::shutdown();
    return code;
  }

  if (client) {
    wire::value fun_args = wire::value::array();
    for (const auto& a : args) fun_args.push_back(a);
    auto r = client->link().send(mn::make_call_return_load(cfg.id, fun, fun_args, o), std::chrono::seconds(60), 1);
    if (!r) spdlog::debug("Could not send the return to the master: {}", r.error().message());
    client->close();
  }

  std::string outputter = !out.empty() ? out : o.out.value_or("nested");
  wire::value data = wire::value::object();
  data["local"] = o.ret;
  sylvite::output::options oo;
  oo.color = !no_color && ::isatty(1);
  oo.indent = out_indent;
  oo.indent_explicit = indent_opt->count() > 0;  // yaml: a negative --out-indent is flow style
  std::string text = sylvite::output::render(outputter, data, oo);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
  spdlog::shutdown();
  if (retcode_passthrough) return o.retcode;
  return o.retcode != 0 ? 1 : 0;
}
