// sylvite::minion execution modules: Salt's function registry, argument handling and the
// return shapes of salt/modules/{test,cmdmod,grains,pillar,cp,saltutil,sysmod}.py (3008.5).
//
// Calling convention (salt/minion.py load_args_and_kwargs + _thread_return):
//   - published `arg` is a list; a trailing map {"__kwarg__": true, k: v...} holds keyword
//     arguments; a string "k=v" (Salt's KWARG_REGEX) is a keyword argument too (yamlified);
//   - keyword arguments a function does not take are refused ("The following keyword
//     arguments are not valid: ...", SaltInvocationError); functions taking **kwargs also
//     receive the publish data as __pub_<key>;
//   - Python binding errors become "Passed invalid arguments to <fun>: <TypeError>\n<doc>";
//   - retcode comes from the function (cmd.* set it like __context__["retcode"]), else 1 when
//     a dict return has result/success false; success = retcode == 0;
//   - errors set out "nested"; grains.items/grains.item set out "nested" (__outputter__).
// Thread-safety: the registry is immutable after construction and shared by every job
// thread; each call gets its own call_context.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

// What a module may ask of the master (implemented by the daemon / salt-call driver).
// Blocking calls: never call them on an io thread.
class master_link {
 public:
  virtual ~master_link() = default;
  // AES request with the v3 envelope; re-authenticates and retries once on a decrypt
  // failure; `tries` attempts of `timeout` each.
  virtual result<wire::value> send(wire::value load, std::chrono::milliseconds timeout, int tries = 1) = 0;
  // Fresh `_pillar` (send_private) with our grains.
  virtual result<wire::value> fetch_pillar() = 0;
};

// Jobs running in this process (saltutil.running / find_job), keyed by jid.
class running_jobs {
 public:
  void add(const std::string& jid, wire::value info);
  void remove(const std::string& jid);
  // Every running job's info except `exclude_jid` (the caller's own job, as Salt does).
  std::vector<wire::value> list(const std::string& exclude_jid = {}) const;
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, wire::value> jobs_;
};

struct call_context {
  const config::minion_config* cfg = nullptr;
  std::shared_ptr<const wire::value> grains;  // never null
  std::shared_ptr<const wire::value> pillar;  // never null
  master_link* master = nullptr;              // null: --local / not connected
  running_jobs* running = nullptr;
  std::string jid;
  wire::value pub = wire::value::object();    // publish data, exposed as __pub_* kwargs
  bool local = false;                         // salt-call --local / file_client local
  // Set by functions like __context__["retcode"].
  std::optional<int> retcode;
};

// A function error mapped from Salt's exception classes.
struct exec_error {
  enum class kind { invocation, client, execution, command_not_found, type, generic } type = kind::generic;
  std::string message;
};
struct exec_outcome {
  wire::value ret;
  int retcode = 0;
  bool success = false;
  std::optional<std::string> out;  // outputter Salt names for this return
  bool missing = false;            // function does not exist
  std::optional<exec_error> error; // the error behind an error return (salt-call reports it)
};

struct param {
  std::string name;
  std::optional<wire::value> def;  // nullopt: required
  bool kwonly = false;             // declared after *args (Python keyword-only)
};

// Arguments after binding, as a Python function would see them.
struct bound_args {
  wire::value named = wire::value::object();  // every declared parameter (defaults filled)
  wire::value varargs = wire::value::array(); // *args
  wire::value kwargs = wire::value::object(); // **kwargs (includes __pub_*)
  const wire::value& operator[](const std::string& n) const;
  bool is_set(const std::string& n) const;    // present and not null
};

// A function's return value or its error. (boost::system::result<json, E> cannot be used:
// nlohmann::json converts to anything, which disables result's converting constructors.)
class fn_result {
 public:
  fn_result(wire::value v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  fn_result(exec_error e) : e_(std::move(e)) {}   // NOLINT(google-explicit-constructor)
  explicit operator bool() const noexcept { return !e_; }
  wire::value& operator*() noexcept { return v_; }
  const wire::value& operator*() const noexcept { return v_; }
  const exec_error& error() const { return *e_; }

 private:
  wire::value v_;
  std::optional<exec_error> e_;
};
using fn_handler = std::function<fn_result(call_context&, const bound_args&)>;

struct fn_spec {
  std::string name;               // "test.ping"
  std::vector<param> params;
  bool varargs = false;
  bool varkw = false;
  std::string doc;
  std::optional<std::string> outputter;
  fn_handler handler;
};

class module_registry {
 public:
  // Every built-in module (test, cmd, grains, pillar, cp, saltutil, sys).
  static const module_registry& builtin();

  void add(fn_spec f);
  const fn_spec* find(const std::string& fun) const;
  std::vector<std::string> names() const;  // sorted

  // Run `fun` like Salt's _thread_return: argument parsing, binding, errors, retcode.
  exec_outcome call(const std::string& fun, const wire::value& arg_list, call_context& ctx) const;

 private:
  std::map<std::string, fn_spec> fns_;
};

// Salt's missing_fun_string.
std::string missing_fun_string(const std::string& fun);

// load_args_and_kwargs + Python binding. Errors: invocation (invalid kwargs) or type.
boost::system::result<bound_args, exec_error> bind_arguments(const fn_spec& f, const wire::value& arg_list,
                                                             const wire::value& pub);

// salt.utils.args.yamlify_arg / parse_kwarg.
wire::value yamlify_arg(const std::string& arg);
std::optional<std::pair<std::string, std::string>> parse_kwarg(const std::string& s);

// salt.utils.data.traverse_dict_and_list with delimiter; default if the path is missing.
wire::value traverse(const wire::value& data, const std::string& key, const wire::value& def,
                     const std::string& delimiter = ":");

// Registration helpers (one per module file).
void register_test_module(module_registry& r);
void register_cmd_module(module_registry& r);
void register_grains_module(module_registry& r);
void register_pillar_module(module_registry& r);
void register_cp_module(module_registry& r);
void register_saltutil_module(module_registry& r);
void register_sys_module(module_registry& r);

}  // namespace sylvite::minion
