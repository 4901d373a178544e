// salt: publish a job through the running master's CLI socket and print the returns as
// Salt 3008's salt CLI does (salt/cli/salt.py, salt/client/__init__.py cmd_cli):
// returns stream per minion with the chosen outputter, minions that did not return get
// "Minion did not return. [No response]..." via the no_return outputter, any non-zero
// retcode -> "ERROR: Minions returned with non-zero exit code" and exit 1, no match ->
// "No minions matched the target. ..." + "ERROR: No return received" and exit 2.
// The outputter is the return's "out" (state.* -> highstate) unless --out names another;
// highstate reads state_output/state_verbose/... from the master config, overridden by
// --state-output/--state-verbose/--output-diff (docs/operations.md "Highstate output").
// The messages are master/ipc_protocol.hpp's; the main (salt.cpp) only calls salt_main.
// Batch mode (-b, --batch-safe-limit) runs in master/cli/batch.cpp (run_batch).
#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

#include "master/cli/args.hpp"
#include "master/cli/batch.hpp"
#include "core/util/log.hpp"
#include "master/cli/common.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::cli {

using wire::value;
namespace ipc = master::ipc;

namespace {

const char* const usage = "salt [options] '<target>' <function> [arguments]";

std::string no_response_text(const std::string& jid) {
  return "Minion did not return. [No response]\nThe minions may not have all finished running and any remaining "
         "minions will return upon completion. To look up the return data for this job later, run the following "
         "command:\n\nsalt-run jobs.lookup_jid " + jid;
}

// highstate: Salt's state_* options from the master config, overridden by --state-output,
// --state-verbose and --output-diff as Salt's MergeConfigMixIn does; `color` in the config
// as get_printout reads it (kept unless --force-color / --no-color).
void apply_state_options(output::options& o, const value& raw, const output_flags& of,
                         const std::optional<std::string>& state_output, const std::optional<std::string>& state_verbose,
                         bool output_diff, const value& arg) {
  auto truthy = [](const value& v) {
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_number()) return v.get<double>() != 0;
    if (v.is_string()) return !v.get_ref<const std::string&>().empty();
    if (v.is_array() || v.is_object()) return !v.empty();
    return false;
  };
  auto flag = [&](const char* key, bool& dst) {
    if (raw.contains(key) && !raw[key].is_null()) dst = truthy(raw[key]);
  };
  if (raw.contains("state_output") && raw["state_output"].is_string()) o.state_output = raw["state_output"].get<std::string>();
  flag("state_verbose", o.state_verbose);
  flag("state_output_diff", o.state_output_diff);
  flag("state_output_profile", o.state_output_profile);
  flag("state_output_pct", o.state_output_pct);
  flag("state_tabular", o.state_tabular);
  flag("state_compress_ids", o.state_compress_ids);
  if (raw.contains("state_output_exclude")) o.state_output_exclude = raw["state_output_exclude"];
  if (raw.contains("state_output_terse")) o.state_output_terse = raw["state_output_terse"];
  if (raw.contains("color") && raw["color"].is_boolean() && !of.force_color && !of.no_color)
    o.color = raw["color"].get<bool>();
  if (state_output) o.state_output = *state_output;
  if (state_verbose) {
    // process_state_verbose: "True"/"true" and "False"/"false" become bools, other text stays (truthy).
    o.state_verbose = !(*state_verbose == "False" || *state_verbose == "false" || state_verbose->empty());
  }
  if (output_diff) o.state_output_diff = true;
  o.cli_arg = arg;
}

}  // namespace

int salt_main(int argc, char** argv, cli_env& env) {
  CLI::App app{"Salt allows for commands to be executed across a swath of remote systems in\nparallel, so they "
               "can be both controlled and queried with ease.",
               "salt"};
  app.set_version_flag("--version", version_line("salt"));
  std::string config_dir = "/etc/salt";
  log_flags logf;
  add_config_dir_flag(app, config_dir);
  output_flags of;

  int timeout = 0;
  bool is_static = false, is_async = false, verbose = false, hide_timeout = false, show_jid = false,
       progress = false, failhard = false, doc = false, summary = false, start_event = false, config_dump = false,
       preview = false, hard_crash = false, make_token = false, args_stdin = false;
  std::string batch, batch_wait, batch_safe_limit, batch_safe_size = "8", returner, return_config, return_kwargs,
      metadata, args_separator = ",", no_parse, delimiter = ":", module_executors, executor_opts, saltfile, eauth,
      username, password;
  std::optional<std::string> state_output, state_verbose;
  bool output_diff = false;
  int subset = 0;
  bool t_pcre = false, t_list = false, t_grain = false, t_grain_pcre = false, t_nodegroup = false, t_range = false,
       t_compound = false, t_pillar = false, t_pillar_pcre = false, t_ipcidr = false, t_hosts = false;
  std::vector<std::string> positional;

  app.add_option("--saltfile", saltfile, "Specify the path to a Saltfile (not supported).");
  app.add_option("--module-executors", module_executors, "Set an alternative list of executors.");
  app.add_option("--executor-opts", executor_opts, "Set alternate executor options if supported by executor.");
  app.add_option("-t,--timeout", timeout, "Change the timeout, if applicable, for the running command (in seconds). Default: 5.");
  app.add_flag("--args-stdin", args_stdin, "Read additional options and/or arguments from stdin (not supported).");
  app.add_flag("--hard-crash", hard_crash, "Accepted for compatibility.");
  app.add_option("--no-parse", no_parse, "Comma-separated list of named CLI arguments (i.e. argname=value) which should not be parsed as Python data types");
  app.add_flag("-s,--static", is_static, "Return the data from minions as a group after they all return.");
  app.add_flag("-p,--progress", progress, "Display a progress graph (not supported).");
  app.add_flag("--failhard", failhard, "Stop batch execution upon first \"bad\" return.");
  app.add_flag("--async", is_async, "Run the salt command but don't wait for a reply.");
  app.add_option("--subset", subset, "Execute the routine on a random subset of the targeted minions (not supported).");
  app.add_flag("-v,--verbose", verbose, "Turn on command verbosity, display jid and active job queries.");
  app.add_flag("--hide-timeout", hide_timeout, "Hide minions that timeout (no effect, as in Salt 3008: they are always listed).");
  app.add_flag("--show-jid", show_jid, "Display jid without the additional output of --verbose.");
  app.add_option("-b,--batch,--batch-size", batch, "Execute the salt job in batch mode, pass either the number of minions to batch at a time, or the percentage of minions to have running.");
  app.add_option("--batch-wait", batch_wait, "Wait the specified time in seconds after each job is done before freeing the slot in the batch for the next one.");
  app.add_option("--batch-safe-limit", batch_safe_limit, "Execute the salt job in batch mode if the job would have executed on at least this many minions.");
  app.add_option("--batch-safe-size", batch_safe_size, "Batch size to use for batch jobs created by batch-safe-limit.");
  app.add_option("--return", returner, "Set an alternative return method.");
  app.add_option("--return_config", return_config, "Set an alternative return method configuration.");
  app.add_option("--return_kwargs", return_kwargs, "Set any returner options at the command line.");
  app.add_flag("-d,--doc,--documentation", doc, "Return the documentation (not supported).");
  app.add_option("--args-separator", args_separator, "Set the special argument used as a delimiter between command arguments of compound commands.");
  app.add_flag("--summary", summary, "Display summary information about a salt command.");
  app.add_option("--metadata", metadata, "Pass metadata into Salt, used to search jobs.");
  app.add_flag("--start-event", start_event, "Request that targeted minions fire a start event.");
  app.add_flag("--config-dump", config_dump, "Dump the master configuration values (not supported).");
  app.add_flag("--preview-target", preview, "Show the minions expected to match a target (not supported).");
  auto* tg = app.add_option_group("Target Options", "Target selection options.");
  tg->add_flag("-H,--hosts", t_hosts, "List all known hosts (not supported).");
  tg->add_flag("-E,--pcre", t_pcre, "Instead of using shell globs to evaluate the target servers, use pcre regular expressions.");
  tg->add_flag("-L,--list", t_list, "Instead of using shell globs to evaluate the target servers, take a comma or whitespace delimited list of servers.");
  tg->add_flag("-G,--grain", t_grain, "Use a grain value to identify targets: \"os:Arch*\".");
  tg->add_flag("-P,--grain-pcre", t_grain_pcre, "Use a grain value with a pcre to identify targets: \"os:Arch.*\".");
  tg->add_flag("-N,--nodegroup", t_nodegroup, "Use one of the predefined nodegroups to identify a list of targets.");
  tg->add_flag("-R,--range", t_range, "Use a range expression (not supported).");
  tg->add_flag("-C,--compound", t_compound, "Compound target: 'G@os:RedHat and webser* or E@database.*'.");
  tg->add_flag("-I,--pillar", t_pillar, "Use a pillar value to identify targets: \"role:production*\".");
  tg->add_flag("-J,--pillar-pcre", t_pillar_pcre, "Use a pillar value with a pcre to identify targets: \"role:prod.*\".");
  tg->add_flag("-S,--ipcidr", t_ipcidr, "Match based on Subnet (CIDR notation) or IP address.");
  auto* atg = app.add_option_group("Additional Target Options", "Additional options for minion targeting.");
  atg->add_option("--delimiter", delimiter, "Change the default delimiter for matching in multi-level data structures. Default: ':'.");
  auto* ea = app.add_option_group("External Authentication");
  ea->add_option("-a,--auth,--eauth,--external-auth", eauth, "External authentication (not supported).");
  ea->add_flag("-T,--make-token", make_token, "Generate and save an authentication token (not supported).");
  ea->add_option("--username", username, "Username for external authentication.");
  ea->add_option("--password", password, "Password for external authentication.");
  add_output_flags(app, of, "salt");
  auto* og = app.get_option_group("Output Options");
  og->add_option("--state-output,--state_output", state_output, "Override the configured state_output value for minion output. One of 'full', 'terse', 'mixed', 'changes' or 'filter'. Default: 'None'.");
  og->add_option("--state-verbose,--state_verbose", state_verbose, "Override the configured state_verbose value for minion output. Set to True or False. Default: None.");
  app.add_flag("--output-diff", output_diff, "Report only those states that have changed.");
  add_log_flags(app, logf);
  app.add_option("target_function_args", positional, "'<target>' <function> [arguments]");

  if (auto rc = parse_cli(app, argc, argv, usage, *env.out, *env.err)) return *rc;
  // Salt's CLI logging: the console (stderr) at -l (default warning), optionally a file.
  init_cli_logging("salt", logf);

  // Refuse what sylvite does not implement, clearly and before touching the master.
  auto refuse = [&](const std::string& what) {
    return usage_error("salt", usage, what + " is not supported by sylvite", *env.err);
  };
  // Batch options are typed as Salt's optparse types them (float / int).
  auto bad_value = [&](const std::string& opt, const char* kind, const std::string& v) {
    return usage_error("salt", usage, "option " + opt + ": invalid " + kind + " value: '" + v + "'", *env.err);
  };
  double batch_wait_s = 0;
  long long safe_limit = 0;
  if (!batch_wait.empty()) {
    auto v = py_float_text(batch_wait);
    if (!v) return bad_value("--batch-wait", "floating-point", batch_wait);
    batch_wait_s = *v;
  }
  if (!batch_safe_limit.empty()) {
    auto v = py_int_text(batch_safe_limit);
    if (!v) return bad_value("--batch-safe-limit", "integer", batch_safe_limit);
    safe_limit = *v;
  }
  // Salt hands `--async -b` to its master-side BatchManager, which sylvite has not.
  if (!batch.empty() && is_async) return refuse("batch mode with --async");
  if (progress) return refuse("-p/--progress");
  if (subset) return refuse("--subset");
  if (doc) return refuse("-d/--doc");
  if (preview) return refuse("--preview-target");
  if (config_dump) return refuse("--config-dump");
  if (args_stdin) return refuse("--args-stdin");
  if (!eauth.empty() || make_token) return refuse("external authentication (-a/--eauth, -T)");
  if (t_range) return refuse("-R/--range targeting");
  if (t_hosts) return refuse("-H/--hosts");
  if (!saltfile.empty()) return refuse("--saltfile");

  std::vector<std::pair<bool, const char*>> types = {
      {t_pcre, "pcre"},          {t_list, "list"},       {t_grain, "grain"},     {t_grain_pcre, "grain_pcre"},
      {t_nodegroup, "nodegroup"}, {t_compound, "compound"}, {t_pillar, "pillar"}, {t_pillar_pcre, "pillar_pcre"},
      {t_ipcidr, "ipcidr"}};
  std::string tgt_type = "glob";
  int ntypes = 0;
  for (auto& [on, name] : types)
    if (on) tgt_type = name, ++ntypes;
  if (ntypes > 1) return usage_error("salt", usage, "only one target option may be given", *env.err);

  if (positional.size() <= 1) {
    (*env.out) << app.help();
    (*env.err) << (positional.empty() ? "\nCannot execute command without defining a target.\n\n"
                                     : "\nIncomplete options passed.\n\n");
    return ex_target_error;
  }
  std::set<std::string> no_parse_set;
  for (auto& n : split_ws([&] {
         std::string s = no_parse;
         std::replace(s.begin(), s.end(), ',', ' ');
         return s;
       }()))
    no_parse_set.insert(n);
  auto made = make_salt_job(positional, t_list, args_separator, no_parse_set);
  if (auto* e = std::get_if<salt_job_error>(&made)) {
    (*env.err) << e->message;
    return e->exit_code;
  }
  salt_job job = std::get<salt_job>(made);
  if (!t_list) job.tgt_type = tgt_type;

  auto cfg = load_config(config_dir, *env.err);
  if (!cfg) return ex_client_error;
  if (timeout <= 0) timeout = cfg->timeout;

  // Nodegroups are resolved by the client, as Salt's LocalClient._prep_pub does.
  if (job.tgt_type == "nodegroup" || job.tgt_type == "compound") {
    std::string tgt = job.tgt.get<std::string>();
    if (job.tgt_type == "nodegroup") {
      auto e = expand_nodegroup(tgt, cfg->nodegroups);
      if (!e) {
        (*env.out) << "Node group " << tgt << " unavailable in " << (cfg->config_dir / "master").string() << "\n";
        return ex_generic;
      }
      tgt = *e;
      job.tgt_type = "compound";
    }
    auto e = expand_compound_nodegroups(tgt, cfg->nodegroups);
    if (!e) {
      (*env.out) << "Node group unavailable in " << (cfg->config_dir / "master").string() << "\n";
      return ex_generic;
    }
    job.tgt = *e;
  }

  ipc::publish pub;
  pub.tgt = job.tgt;
  pub.tgt_type = job.tgt_type;
  pub.fun = job.fun;
  pub.arg = job.arg;
  pub.ret = returner;
  pub.timeout = timeout;
  pub.user = env.user();
  pub.delimiter = delimiter;
  pub.wait = !is_async;
  if (!return_config.empty()) pub.ret_config = value(return_config);
  if (!return_kwargs.empty()) pub.ret_kwargs = yamlify_arg(return_kwargs);
  if (!metadata.empty()) pub.metadata = yamlify_arg(metadata);
  if (!module_executors.empty()) pub.module_executors = yamlify_arg(module_executors);
  if (!executor_opts.empty()) pub.executor_opts = yamlify_arg(executor_opts);
  pub.start_event = start_event;
  const value body = ipc::encode(pub);

  output::options base_opt = make_output_options(of);
  apply_state_options(base_opt, cfg->raw, of, state_output, state_verbose, output_diff, job.arg);
  auto down = [&](const master_reply& r) {
    (*env.out) << r.error << "\n";
    return ex_client_error;
  };

  // A cheap ping first: a hung master gives Salt's timeout message instead of a hang.
  {
    auto r = env.request(*cfg, ipc::encode(ipc::ping{}), std::chrono::seconds(std::max(timeout, 10)));
    if (!r.body) return down(r);
  }

  // Batch mode (master/cli/batch.hpp): -b, or --batch-safe-limit reached.
  if (!batch.empty() || (safe_limit > 1 && !is_static && !is_async)) {
    batch_request br;
    br.spec = batch.empty() ? batch_safe_size : batch;
    br.batch_wait = batch_wait_s;
    br.failhard = failhard;
    br.quiet = is_static;
    br.timeout = timeout;
    br.gather_job_timeout = cfg->gather_job_timeout;
    br.log_errors = logf.level != "quiet" && logf.level != "critical";
    br.job = pub;
    if (batch.empty()) br.safe_limit = safe_limit;
    if (auto rc = run_batch(br, batch_output{of, base_opt}, *cfg, env)) return *rc;
  }

  if (is_async) {
    auto r = env.request(*cfg, body, std::chrono::seconds(std::max(timeout, 10) + 30));
    if (!r.body) return down(r);
    std::string jid = "0";
    if (auto d = ipc::decode_async_publish_reply(*r.body)) {
      if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
        (*env.out) << e->error << "\n";  // Salt prints it, jid stays 0
        // publisher_acl refusals: Salt's CLI prints the message alone and exits 0.
        if (e->error == "Authorization error occurred." || e->error == "Authentication error occurred.") return ex_ok;
      } else {
        jid = std::get<ipc::publish_head>(*d).jid;
      }
    }
    (*env.out) << "Executed command with job ID: " << jid << "\n";
    return ex_ok;
  }

  std::string jid;
  std::set<std::string> missing;
  std::vector<int> retcodes;
  value all = value::object();        // --static / --summary
  std::set<std::string> failed;       // --summary: returned with a non-zero retcode
  std::set<std::string> returned_ids;
  bool any_output = false;

  // Salt's get_printout: --out wins, except --out=highstate, which leaves the choice to the
  // return's "out" (the minion sets it: highstate for state.*, nested when absent).
  auto out_for = [&](const std::string& fallback) {
    return of.out.empty() || of.out == "highstate" ? fallback : of.out;
  };
  auto on_item = [&](const value& body) {
    auto d = ipc::decode_publish_push(body);
    if (!d) return;  // not a message of this protocol: skipped
    if (auto* item = std::get_if<ipc::return_item>(&*d)) {
      const std::string& id = item->id;
      value data = value::object();
      data[id] = item->ret;
      int rc = ipc::retcode_of(*item);
      retcodes.push_back(rc);
      returned_ids.insert(id);
      if (rc) failed.insert(id);
      all[id] = data[id];
      if (!is_static) {
        std::string outname = "nested";
        if (item->out && output::known(*item->out)) outname = *item->out;
        output::options opt = base_opt;
        opt.retcode = rc;
        emit(of, output::display(out_for(outname), data, opt), *env.out);
      }
      any_output = true;
    } else {
      const auto& head = std::get<ipc::publish_head>(*d);
      jid = head.jid;
      missing.insert(head.missing.begin(), head.missing.end());
      if (verbose) {
        std::string msg = "Executing job with jid " + jid;
        (*env.out) << msg << "\n" << std::string(msg.size(), '-') << "\n\n" << std::flush;
      } else if (show_jid) {
        (*env.out) << "jid: " << jid << "\n" << std::flush;
      }
    }
  };
  // The master bounds the wait itself (timeout + find_job rounds while minions still run);
  // ours only guards against a master that stops answering altogether.
  auto r = env.request_stream(*cfg, body, on_item, std::chrono::hours(24));
  if (!r.body) return down(r);
  auto fin = ipc::decode_publish_final(*r.body);
  if (fin) {
    if (auto* e = std::get_if<ipc::error_reply>(&*fin)) {
      (*env.out) << e->error << "\n";
      // publisher_acl refusals: Salt's CLI prints the message alone and exits 0.
      if (e->error == "Authorization error occurred." || e->error == "Authentication error occurred.") return ex_ok;
      if (!any_output) {
        (*env.err) << "ERROR: No return received\n";
        return ex_client_error;
      }
      return ex_generic;
    }
    const auto& done = std::get<ipc::publish_done>(*fin);
    if (!done.jid.empty()) jid = done.jid;
    missing.insert(done.no_return.begin(), done.no_return.end());
  }
  for (auto& id : missing) {
    if (all.contains(id)) continue;
    value data = value::object();
    data[id] = no_response_text(jid);
    all[id] = data[id];
    retcodes.push_back(ex_generic);
    if (!is_static) {
      output::options opt = base_opt;
      opt.retcode = ex_generic;
      emit(of, output::display(out_for("no_return"), data, opt), *env.out);
    }
    any_output = true;
  }

  if (is_static) {
    // Salt's --static runs through the batch code and prints once; it does not turn
    // minion retcodes into the exit code.
    // get_printout with --static: state.* functions print through highstate.
    const bool state_fun = job.fun.is_string() && job.fun.get<std::string>().rfind("state.", 0) == 0;
    emit(of, output::display(of.out.empty() ? (state_fun ? "highstate" : "nested") : of.out, all, base_opt), *env.out);
    if (all.empty()) {
      (*env.err) << "ERROR: No return received\n";
      return ex_client_error;
    }
    return ex_ok;
  }
  if (!any_output) {
    (*env.err) << "ERROR: No return received\n";
    return ex_client_error;
  }
  if (summary && of.out.empty()) {
    const std::size_t returned = returned_ids.size();
    const std::size_t not_returned = all.size() - returned;
    const std::size_t with_errors = failed.size();
    (*env.out) << "\n\n"
              << "-------------------------------------------\n"
              << "Summary\n"
              << "-------------------------------------------\n"
              << "# of minions targeted: " << all.size() << "\n"
              << "# of minions returned: " << returned << "\n"
              << "# of minions that did not return: " << not_returned << "\n"
              << "# of minions with errors: " << with_errors << "\n";
    if (verbose) {
      std::string nr, fl;
      for (auto& id : missing)
        if (!returned_ids.count(id)) nr += (nr.empty() ? "" : " ") + id;
      for (auto& id : failed) fl += (fl.empty() ? "" : " ") + id;
      if (!nr.empty()) (*env.out) << "Minions not responding: " << nr << "\n";
      if (!fl.empty()) (*env.out) << "Minions with failures: " << fl << "\n";
    }
    (*env.out) << "-------------------------------------------\n";
  }
  for (int rc : retcodes) {
    if (rc != 0) {
      (*env.err) << "ERROR: Minions returned with non-zero exit code\n";
      return ex_generic;
    }
  }
  return ex_ok;
}

}  // namespace sylvite::cli
