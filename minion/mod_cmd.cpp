// sylvite::minion cmd module: cmd.run, cmd.run_all, cmd.run_stdout, cmd.run_stderr,
// cmd.retcode with salt/modules/cmdmod.py's _run semantics (3008.5):
//   - python_shell defaults to True for published/salt-call jobs (they carry __pub_jid):
//     the command runs as `<shell> -c <cmd>`, shell = $SHELL or /bin/sh (DEFAULT_SHELL);
//     python_shell=False splits the command shlex-style and runs it without a shell;
//   - cwd defaults to the home of runas/the minion user ("/" if not accessible);
//   - environment: the minion's own, LC_* and LANGUAGE forced to "C" unless given
//     (reset_system_locale), `env` applied on top, NOTIFY_SOCKET removed;
//   - cmd.run merges stderr into stdout (redirect_stderr=True), run_all keeps them apart;
//   - output rstrip()ed; retcode from the process (-N if killed by signal N) becomes the
//     job retcode unless ignore_retcode; success_retcodes/success_stdout/success_stderr;
//   - timeout: "<cmd> : Timed out after <n> seconds" as stdout, retcode 1 (we kill the
//     whole process group, Salt only kills the shell).
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "minion/modules.hpp"
#include "minion/process.hpp"

extern char** environ;

namespace sylvite::minion {

namespace {

std::string val_str(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump();
}

bool truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<long long>() != 0;
  if (auto t = wire::as_text(v)) return !t->empty() && *t != "False" && *t != "false";
  return !v.empty();
}

std::string default_shell() {
  const char* s = std::getenv("SHELL");
  return s && *s ? s : "/bin/sh";
}

std::vector<std::string> split_input(const wire::value& v) {
  std::vector<std::string> out;
  if (v.is_array()) {
    for (const auto& x : v) out.push_back(val_str(x));
  } else if (!v.is_null()) {
    std::string s = val_str(v);
    std::size_t start = 0;
    for (;;) {
      auto pos = s.find(',', start);
      std::string part = s.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
      while (!part.empty() && part.front() == ' ') part.erase(part.begin());
      while (!part.empty() && part.back() == ' ') part.pop_back();
      if (!part.empty()) out.push_back(part);
      if (pos == std::string::npos) break;
      start = pos + 1;
    }
  }
  return out;
}

struct run_ret {
  wire::value pid;
  wire::value retcode;
  std::string stdout_;
  std::string stderr_;
};

void rstrip(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

std::string timeout_text(const wire::value& t) {
  if (t.is_number_float()) {
    double d = t.get<double>();
    if (std::floor(d) == d) return std::to_string(static_cast<long long>(d)) + ".0";
    std::string s = t.dump();
    return s;
  }
  return val_str(t);
}

// The shared _run. `merge` = stderr=subprocess.STDOUT.
boost::system::result<run_ret, exec_error> do_run(call_context& ctx, const bound_args& a, bool merge) {
  const std::string cmd = val_str(a["cmd"]);
  // python_shell default: True when called from a job (jid present).
  bool python_shell;
  if (a["python_shell"].is_null()) {
    python_shell = a.kwargs.contains("__pub_jid") || !ctx.jid.empty();
  } else {
    python_shell = truthy(a["python_shell"]);
  }
  std::string shell = a["shell"].is_null() ? default_shell() : val_str(a["shell"]);
  if (!shell.empty()) {
    if (access(shell.c_str(), X_OK) != 0 || !std::filesystem::is_regular_file(shell))
      return exec_error{exec_error::kind::execution, "The shell " + shell + " is not available"};
  }

  // runas
  process_spec spec;
  std::string runas = a["runas"].is_null() ? std::string() : val_str(a["runas"]);
  std::string home;
  if (!runas.empty()) {
    struct passwd pw{}, *res = nullptr;
    std::vector<char> pbuf(16384);
    if (getpwnam_r(runas.c_str(), &pw, pbuf.data(), pbuf.size(), &res) != 0 || !res)
      return exec_error{exec_error::kind::execution, "User '" + runas + "' is not available"};
    if (geteuid() != 0 && geteuid() != pw.pw_uid)
      return exec_error{exec_error::kind::execution, "Insufficient privileges to run as user '" + runas + "'"};
    if (geteuid() != pw.pw_uid) {
      spec.uid = pw.pw_uid;
      spec.gid = pw.pw_gid;
      spec.user = runas;
    }
    home = pw.pw_dir ? pw.pw_dir : "";
  } else {
    struct passwd pw{}, *res = nullptr;
    std::vector<char> pbuf(16384);
    const char* h = std::getenv("HOME");
    if (h && *h) home = h;
    else if (getpwuid_r(geteuid(), &pw, pbuf.data(), pbuf.size(), &res) == 0 && res && pw.pw_dir) home = pw.pw_dir;
  }

  std::string cwd;
  if (a["cwd"].is_null() || val_str(a["cwd"]).empty()) {
    cwd = home;
    std::error_code ec;
    if (cwd.empty() || access(cwd.c_str(), R_OK) != 0 || !std::filesystem::is_directory(cwd, ec)) cwd = "/";
  } else {
    cwd = val_str(a["cwd"]);
    std::error_code ec;
    if (cwd.empty() || cwd[0] != '/' || !std::filesystem::is_directory(cwd, ec))
      return exec_error{exec_error::kind::execution, "Specified cwd '" + cwd + "' either not absolute or does not exist"};
  }
  spec.cwd = cwd;

  // Environment.
  wire::value env = wire::value::object();
  const wire::value& env_arg = a["env"];
  if (env_arg.is_object()) {
    env = env_arg;
  } else if (env_arg.is_array()) {
    for (const auto& d : env_arg)
      if (d.is_object())
        for (const auto& [k, v] : d.items()) env[k] = v;
  }
  if (!a.named.contains("reset_system_locale") || truthy(a["reset_system_locale"])) {
    for (const char* k : {"LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES", "LC_PAPER",
                          "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION", "LANGUAGE"})
      if (!env.contains(k)) env[k] = "C";
  }
  std::map<std::string, std::string> run_env;
  if (!truthy(a["clean_env"])) {
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) run_env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& [k, v] : env.items()) run_env[k] = val_str(v);
  if (!a["prepend_path"].is_null()) run_env["PATH"] = val_str(a["prepend_path"]) + ":" + run_env["PATH"];
  if (!env.contains("NOTIFY_SOCKET")) run_env.erase("NOTIFY_SOCKET");
  if (spec.uid) {
    run_env["HOME"] = home;
    run_env["USER"] = runas;
    run_env["LOGNAME"] = runas;
  }
  for (const auto& [k, v] : run_env) spec.env.push_back(k + "=" + v);

  if (!a["umask"].is_null()) {
    std::string um = val_str(a["umask"]);
    while (!um.empty() && um.front() == '0') um.erase(um.begin());
    if (um.empty()) return exec_error{exec_error::kind::execution, "Zero umask is not allowed."};
    char* end = nullptr;
    long v = std::strtol(um.c_str(), &end, 8);
    if (!end || *end) return exec_error{exec_error::kind::execution, "Invalid umask: '" + val_str(a["umask"]) + "'"};
    spec.umask = static_cast<mode_t>(v);
  }

  if (python_shell) {
    spec.argv = {shell.empty() ? std::string("/bin/sh") : shell, "-c", cmd};
  } else {
    auto parts = shlex_split(cmd);
    if (!parts || parts->empty())
      return exec_error{exec_error::kind::execution, "Unable to run command '" + cmd + "': bad quoting"};
    spec.argv = std::move(*parts);
  }
  if (!a["stdin"].is_null()) spec.stdin_data = val_str(a["stdin"]);
  spec.merge_stderr = merge;
  const wire::value& tmo = a["timeout"];
  if (!tmo.is_null()) {
    double secs = -1;
    if (tmo.is_number()) secs = tmo.get<double>();
    else if (auto t = wire::as_text(tmo)) {
      char* end = nullptr;
      std::string ts(*t);
      secs = std::strtod(ts.c_str(), &end);
      if (!end || *end) return exec_error{exec_error::kind::execution, "Error: timeout " + ts + " must be a number"};
    }
    if (secs > 0) spec.timeout = std::chrono::milliseconds(static_cast<long long>(secs * 1000));
  }

  spdlog::info("Executing command '{}' in directory '{}'", cmd, cwd);
  process_result pr = run_process(spec);
  run_ret ret;
  if (!pr.started) {
    std::string why = std::string("[Errno ") + std::to_string(pr.exec_errno) + "] " + std::strerror(pr.exec_errno) +
                      ": '" + spec.argv[0] + "'";
    return exec_error{exec_error::kind::execution,
                      "Unable to run command '" + cmd + "' with the context '{'cwd': '" + cwd + "', 'shell': " +
                          (python_shell ? "True" : "False") + "}', reason: " + why};
  }
  ret.pid = pr.pid;
  if (pr.timed_out) {
    ret.stdout_ = cmd + " : Timed out after " + timeout_text(tmo) + " seconds";
    ret.stderr_ = "";
    ret.retcode = 1;
  } else {
    ret.stdout_ = std::move(pr.out);
    ret.stderr_ = std::move(pr.err);
    if (a["rstrip"].is_null() || truthy(a["rstrip"])) {
      rstrip(ret.stdout_);
      rstrip(ret.stderr_);
    }
    int rc = pr.retcode;
    std::vector<std::string> ok_codes = split_input(a["success_retcodes"]);
    for (const auto& c : ok_codes)
      if (c == std::to_string(rc)) rc = 0;
    for (const auto& s : split_input(a["success_stdout"]))
      if (ret.stdout_.find(s) != std::string::npos) rc = 0;
    for (const auto& s : split_input(a["success_stderr"]))
      if (ret.stderr_.find(s) != std::string::npos) rc = 0;
    ret.retcode = rc;
  }
  const bool ignore = truthy(a["ignore_retcode"]);
  ctx.retcode = ignore ? 0 : ret.retcode.get<int>();
  if (!ignore && ret.retcode.get<int>() != 0)
    spdlog::error("Command '{}' failed with return code: {}", cmd, ret.retcode.get<int>());
  return ret;
}

std::vector<param> run_params(bool redirect_default, bool with_rstrip, bool with_bg) {
  std::vector<param> p = {
      {"cmd", {}},
      {"cwd", wire::value()},
      {"stdin", wire::value()},
      {"runas", wire::value()},
      {"group", wire::value()},
      {"shell", wire::value()},  // DEFAULT_SHELL resolved at call time
      {"python_shell", wire::value()},
      {"env", wire::value()},
      {"clean_env", wire::value(false)},
      {"template", wire::value()},
  };
  if (with_rstrip) p.push_back({"rstrip", wire::value(true)});
  for (param x : std::vector<param>{{"umask", wire::value()},
                                    {"output_encoding", wire::value()},
                                    {"output_loglevel", wire::value("debug")},
                                    {"log_callback", wire::value()},
                                    {"hide_output", wire::value(false)},
                                    {"timeout", wire::value()},
                                    {"reset_system_locale", wire::value(true)},
                                    {"ignore_retcode", wire::value(false)},
                                    {"saltenv", wire::value()},
                                    {"use_vt", wire::value(false)}})
    p.push_back(std::move(x));
  if (with_rstrip) p.push_back({"redirect_stderr", wire::value(redirect_default)});
  if (with_bg) p.push_back({"bg", wire::value(false)});
  p.push_back({"password", wire::value()});
  p.push_back({"encoded_cmd", wire::value(false)});
  if (with_bg) p.push_back({"raise_err", wire::value(false)});
  p.push_back({"prepend_path", wire::value()});
  p.push_back({"success_retcodes", wire::value()});
  p.push_back({"success_stdout", wire::value()});
  p.push_back({"success_stderr", wire::value()});
  return p;
}

}  // namespace

void register_cmd_module(module_registry& r) {
  r.add({"cmd.run", run_params(true, true, true), false, true, "Execute the passed command and return the output as a string", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           auto rr = do_run(ctx, a, truthy(a["redirect_stderr"]));
           if (!rr) return rr.error();
           if (truthy(a["raise_err"]) && rr->retcode.get<int>() != 0 && !truthy(a["ignore_retcode"]))
             return exec_error{exec_error::kind::execution, truthy(a["hide_output"]) ? "" : rr->stdout_};
           if (truthy(a["hide_output"])) return wire::value("");
           return wire::value(rr->stdout_);
         }});
  r.add({"cmd.run_all", run_params(false, true, false), false, true,
         "Execute the passed command and return a dict of return data", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           auto rr = do_run(ctx, a, truthy(a["redirect_stderr"]));
           if (!rr) return rr.error();
           wire::value out = wire::value::object();
           out["pid"] = rr->pid;
           out["retcode"] = rr->retcode;
           out["stdout"] = truthy(a["hide_output"]) ? std::string() : rr->stdout_;
           out["stderr"] = truthy(a["hide_output"]) ? std::string() : rr->stderr_;
           return out;
         }});
  r.add({"cmd.run_stdout", run_params(false, true, false), false, true,
         "Execute a command, and only return the standard out", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           auto rr = do_run(ctx, a, false);
           if (!rr) return rr.error();
           return wire::value(truthy(a["hide_output"]) ? std::string() : rr->stdout_);
         }});
  r.add({"cmd.run_stderr", run_params(false, true, false), false, true,
         "Execute a command and only return the standard error", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           auto rr = do_run(ctx, a, false);
           if (!rr) return rr.error();
           return wire::value(truthy(a["hide_output"]) ? std::string() : rr->stderr_);
         }});
  r.add({"cmd.retcode", run_params(false, false, false), false, true,
         "Execute a shell command and return the command's return code.", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           auto rr = do_run(ctx, a, true);
           if (!rr) return rr.error();
           return rr->retcode;
         }});
}

}  // namespace sylvite::minion
