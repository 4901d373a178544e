// sylvite::master::api lowstate dispatch (api_lowstate.hpp). Every client goes through the
// service the CLIs use (the CLI service's commands, in-process: a cli_reply that collects
// the pushes and the final reply), so a job started here is published, waited for,
// stored and (in a cluster) relayed exactly as one started by `salt` on this master.
// The key wheel works on the key store the way salt-key does (move/remove the files,
// then tell the key service, which fires Salt's key events and drops connections).
#include "master/api/api_lowstate.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "core/crypto/rsa.hpp"
#include "master/cli/args.hpp"
#include "master/cli/batch.hpp"
#include "master/cli/key_ops.hpp"
#include "master/event_hub.hpp"
#include "master/ipc_protocol.hpp"
#include "master/job_cache.hpp"

namespace sylvite::master::api {

using wire::value;
using steady = std::chrono::steady_clock;
namespace keys = cli::keys;

namespace {

// A CLI connection inside the process: collects pushes, waits for the final reply.
class sync_reply : public cli_reply {
 public:
  void reply(value body) override {
    {
      std::lock_guard lk(mu_);
      if (final_) return;
      final_ = std::move(body);
    }
    cv_.notify_all();
  }
  bool push(value body) override {
    {
      std::lock_guard lk(mu_);
      if (!alive_) return false;
      if (pushes_.size() >= 1000000) return false;
      pushes_.push_back(std::move(body));
    }
    cv_.notify_all();
    return true;
  }
  bool alive() const override {
    std::lock_guard lk(mu_);
    return alive_;
  }
  // The final reply, or nullopt at the deadline / when stopping is set (the connection
  // is then marked gone: the CLI service ends the wait).
  std::optional<value> wait(steady::time_point deadline, const std::atomic<bool>& stopping) {
    std::unique_lock lk(mu_);
    while (!final_) {
      if (stopping.load() || steady::now() >= deadline) {
        alive_ = false;
        return std::nullopt;
      }
      cv_.wait_until(lk, std::min(deadline, steady::now() + std::chrono::milliseconds(250)));
    }
    return final_;
  }
  std::deque<value> take_pushes() {
    std::lock_guard lk(mu_);
    std::deque<value> out;
    out.swap(pushes_);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<value> pushes_;
  std::optional<value> final_;
  bool alive_ = true;
};

std::optional<std::int64_t> int_of(const value* v) {
  if (!v) return std::nullopt;
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<std::int64_t>();
  if (v->is_number_float()) return static_cast<std::int64_t>(v->get<double>());
  if (auto t = wire::as_text(*v)) {
    try {
      std::size_t used = 0;
      double d = std::stod(std::string(*t), &used);
      if (used == t->size()) return static_cast<std::int64_t>(d);
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

bool truthy(const value* v) {
  if (!v || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  if (auto t = wire::as_text(*v)) {
    std::string s(*t);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return !(s.empty() || s == "false" || s == "no" || s == "off" || s == "0");
  }
  if (v->is_array() || v->is_object()) return !v->empty();
  return true;
}

std::string text_of(const value* v, std::string dflt = {}) {
  if (!v || v->is_null()) return dflt;
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_number()) return v->dump();
  return dflt;
}

// The chunk's `arg` as a list (lowdata_fmt makes scalars a list; a missing arg is []).
value arg_list(const value& chunk) {
  const value* a = wire::find(chunk, "arg");
  if (!a || a->is_null()) return value::array();
  if (a->is_array()) return *a;
  return value::array({*a});
}

// Salt's condition_kwarg: a non-empty kwarg map is appended to the args as
// {"__kwarg__": True, ...}.
value with_kwarg(value args, const value& chunk) {
  const value* k = wire::find(chunk, "kwarg");
  if (k && k->is_object() && !k->empty()) {
    value m = *k;
    m["__kwarg__"] = true;
    args.push_back(std::move(m));
  }
  return args;
}

// The CLI service's answer when all its threads are taken or it is stopping: the API
// answers 503 (try again), not an empty result.
bool is_busy(std::string_view error) { return error.starts_with("master busy or stopping"); }

chunk_result busy(std::string why) {
  chunk_result r;
  r.status = 503;
  r.error = std::move(why);
  return r;
}

bool is_client_key(const std::string& k) {
  static const std::set<std::string> own = {"client", "fun",  "token",   "eauth",       "username", "password",
                                            "user",   "key",  "timeout", "full_return", "arg",      "kwarg"};
  return own.contains(k);
}

}  // namespace

call_args reformat_low(const value& chunk) {
  call_args c;
  std::vector<std::string> texts;
  value raw = arg_list(chunk);
  // parse_input(condition=False): text name=value -> kwargs, everything else positional
  // (already typed by the JSON/YAML body; urlencoded args were yamlified on the way in).
  for (const auto& a : raw) {
    if (auto t = wire::as_text(a)) {
      if (auto kv = cli::parse_kwarg(std::string(*t))) {
        c.kwargs[kv->first] = cli::yamlify_arg(kv->second);
        continue;
      }
    }
    if (a.is_object() && truthy(wire::find(a, "__kwarg__"))) {
      for (auto it = a.begin(); it != a.end(); ++it)
        if (it.key() != "__kwarg__") c.kwargs[it.key()] = it.value();
      continue;
    }
    c.args.push_back(a);
  }
  if (const value* k = wire::find(chunk, "kwarg"); k && k->is_object())
    for (auto it = k->begin(); it != k->end(); ++it) c.kwargs[it.key()] = it.value();
  if (chunk.is_object())
    for (auto it = chunk.begin(); it != chunk.end(); ++it)
      if (!is_client_key(it.key())) c.kwargs[it.key()] = it.value();
  return c;
}

lowstate_runner::lowstate_runner(lowstate_services s)
    : s_(std::move(s)), stopping_(std::make_shared<std::atomic<bool>>(false)) {}

void lowstate_runner::stop() { stopping_->store(true); }

chunk_result lowstate_runner::run(const value& chunk, const std::string& user) const {
  chunk_result r;
  if (!chunk.is_object()) {
    r.status = 400;
    r.error = "Lowstate chunks must be maps";
    return r;
  }
  const std::string client = text_of(wire::find(chunk, "client"));
  try {
    if (client == "local") return local(chunk, user, true);
    if (client == "local_async") return local(chunk, user, false);
    if (client == "local_batch") return local_batch(chunk, user);
    if (client == "local_subset") return local_subset(chunk, user);
    if (client == "runner") return runner(chunk, user, true);
    if (client == "runner_async") return runner(chunk, user, false);
    if (client == "wheel") return wheel(chunk, user, true);
    if (client == "wheel_async") return wheel(chunk, user, false);
  } catch (const std::exception& e) {
    // A value of an unexpected type deep in a chunk: the client's fault, not a 500.
    r.status = 400;
    r.error = std::string("Bad lowstate chunk: ") + e.what();
    return r;
  }
  r.status = 400;
  if (client == "ssh") {
    // salt-api's answer for a client it cannot run (SaltInvocationError: 400).
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true))
      spdlog::warn("api: netapi_enable_clients lists 'ssh' but sylvite has no salt-ssh; ssh chunks are refused");
    r.error = "Client not available: 'ssh'. sylvite has no salt-ssh; remove 'ssh' from 'netapi_enable_clients'.";
  } else if (std::find(netapi_known().begin(), netapi_known().end(), client) != netapi_known().end())
    r.error = "Client not supported by sylvite: '" + client + "'";
  else
    r.error = "Invalid client specified: '" + client + "'";
  return r;
}

const std::vector<std::string>& lowstate_runner::netapi_known() {
  static const std::vector<std::string> c = {"ssh", "destroy"};
  return c;
}

chunk_result lowstate_runner::local(const value& chunk, const std::string& user, bool wait) const {
  chunk_result r;
  const value* tgt = wire::find(chunk, "tgt");
  const value* fun = wire::find(chunk, "fun");
  if (!tgt || tgt->is_null() || !fun || fun->is_null()) {
    r.status = 400;
    r.error = std::string("Missing required argument for client '") + (wait ? "local" : "local_async") + "': " +
              (!tgt || tgt->is_null() ? "tgt" : "fun");
    return r;
  }
  ipc::publish p;
  p.tgt = wire::as_text(*tgt) ? value(std::string(*wire::as_text(*tgt))) : *tgt;
  p.tgt_type = text_of(wire::find(chunk, "tgt_type"), text_of(wire::find(chunk, "expr_form"), "glob"));
  p.fun = wire::as_text(*fun) ? value(std::string(*wire::as_text(*fun))) : *fun;
  p.arg = with_kwarg(arg_list(chunk), chunk);
  p.ret = text_of(wire::find(chunk, "ret"));
  const int timeout = static_cast<int>(int_of(wire::find(chunk, "timeout")).value_or(s_.cfg ? s_.cfg->timeout : 5));
  if (timeout > 0) p.timeout = timeout;
  p.user = user.empty() ? "root" : user;
  if (auto d = text_of(wire::find(chunk, "delimiter")); !d.empty()) p.delimiter = d;
  if (auto j = text_of(wire::find(chunk, "jid")); !j.empty()) p.jid = j;
  p.wait = wait;
  for (const char* k : {"metadata", "ret_config", "ret_kwargs", "module_executors", "executor_opts"}) {
    const value* v = wire::find(chunk, k);
    if (!v || v->is_null()) continue;
    if (std::string_view(k) == "metadata") p.metadata = *v;
    else if (std::string_view(k) == "ret_config") p.ret_config = *v;
    else if (std::string_view(k) == "ret_kwargs") p.ret_kwargs = *v;
    else if (std::string_view(k) == "module_executors") p.module_executors = *v;
    else p.executor_opts = *v;
  }
  const bool full_return = truthy(wire::find(chunk, "full_return"));
  auto out = std::make_shared<sync_reply>();
  s_.cli(ipc::encode(p), out);
  // The CLI service ends the wait itself (timeout, find_job rounds); this bound only
  // protects the API worker from a wait that never ends.
  const int gather = s_.cfg ? std::max(1, s_.cfg->gather_job_timeout) : 10;
  const auto deadline = steady::now() + std::chrono::seconds(std::max(timeout, 1) * 4 + gather * 8 + 30);
  auto fin = out->wait(deadline, *stopping_);
  value ret = value::object();
  if (!wait) {
    if (fin) {
      auto d = ipc::decode_async_publish_reply(*fin);
      if (d) {
        if (auto* h = std::get_if<ipc::publish_head>(&*d); h && !h->minions.empty()) {
          ret["jid"] = h->jid;
          ret["minions"] = h->minions;
        } else if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
          spdlog::info("api: local_async {} for {}: {}", text_of(fun), user, e->error);
          if (is_busy(e->error)) return busy(e->error);
        }
      }
    }
    r.ret = std::move(ret);
    return r;
  }
  for (auto& pv : out->take_pushes()) {
    auto d = ipc::decode_publish_push(pv);
    if (!d) continue;
    if (auto* item = std::get_if<ipc::return_item>(&*d)) {
      if (full_return) {
        value full = {{"ret", item->ret}, {"retcode", item->retcode}, {"jid", item->jid}};
        if (item->out) full["out"] = *item->out;
        ret[item->id] = std::move(full);
      } else {
        ret[item->id] = item->ret;
      }
    }
  }
  if (fin) {
    if (auto e = wire::get_text(*fin, "error")) {
      spdlog::info("api: local {} for {}: {}", text_of(fun), user, *e);
      if (is_busy(*e)) return busy(std::string(*e));
    }
  }
  r.ret = std::move(ret);
  return r;
}

chunk_result lowstate_runner::local_batch(const value& chunk, const std::string& user) const {
  chunk_result r;
  r.many = true;
  r.ret = value::array();
  const std::string spec = text_of(wire::find(chunk, "batch"), "10%");
  // Gather: who answers test.ping in the target (Salt's Batch.gather_minions).
  value ping = chunk;
  ping["fun"] = "test.ping";
  ping["arg"] = value::array();
  ping.erase("kwarg");
  auto gathered = local(ping, user, true);
  if (gathered.status != 200) return gathered;
  std::vector<std::string> up;
  for (auto it = gathered.ret.begin(); it != gathered.ret.end(); ++it) up.push_back(it.key());
  std::sort(up.begin(), up.end());
  auto windows = cli::batch_windows(spec, up);
  if (!windows) {
    r.status = 400;
    r.error = "Invalid batch data sent: " + spec;
    return r;
  }
  for (const auto& window : *windows) {
    if (stopping_->load()) break;
    value c = chunk;
    c["tgt"] = window;
    c["tgt_type"] = "list";
    c.erase("expr_form");
    auto part = local(c, user, true);
    if (part.status != 200) return part;
    for (auto it = part.ret.begin(); it != part.ret.end(); ++it) r.ret.push_back(value{{it.key(), it.value()}});
  }
  return r;
}

chunk_result lowstate_runner::local_subset(const value& chunk, const std::string& user) const {
  // LocalClient.cmd_subset: sys.list_functions on the target, then the call on `subset`
  // (legacy `sub`; default 3) minions picked at random among those that list fun.
  const value* fun = wire::find(chunk, "fun");
  const value* n = wire::find(chunk, "sub") ? wire::find(chunk, "sub") : wire::find(chunk, "subset");
  const std::int64_t subset = n ? int_of(n).value_or(3) : 3;
  value probe = chunk;
  probe["fun"] = "sys.list_functions";
  probe["arg"] = value::array();
  for (const char* k : {"kwarg", "ret", "full_return"}) probe.erase(k);
  auto listed = local(probe, user, true);
  if (listed.status != 200) return listed;
  std::vector<std::string> ids;
  for (auto it = listed.ret.begin(); it != listed.ret.end(); ++it) ids.push_back(it.key());
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(std::random_device{}()));
  value picked = value::array();
  const auto want = fun ? wire::as_text(*fun) : std::nullopt;
  for (const auto& id : ids) {
    const value& fns = listed.ret[id];
    if (!fns.is_array()) continue;  // no answer (False) or not a list: skipped
    for (const auto& f : fns)
      if (auto t = wire::as_text(f); want && t && *t == *want) {
        picked.push_back(id);
        break;
      }
    if (static_cast<std::int64_t>(picked.size()) >= subset) break;
  }
  chunk_result r;
  if (picked.empty()) {  // Salt publishes to an empty list: no minions, {}
    r.ret = value::object();
    return r;
  }
  value c = chunk;
  c["tgt"] = picked;
  c["tgt_type"] = "list";
  c.erase("expr_form");
  const bool cli = truthy(wire::find(chunk, "cli"));
  if (cli) c["full_return"] = true;
  auto part = local(c, user, true);
  if (part.status != 200 || !cli) return part;
  // cli=True: cmd_cli's generator, one {id: {ret, retcode, jid}} per minion.
  r.many = true;
  r.ret = value::array();
  for (auto it = part.ret.begin(); it != part.ret.end(); ++it) r.ret.push_back(value{{it.key(), it.value()}});
  return r;
}

chunk_result lowstate_runner::runner(const value& chunk, const std::string& user, bool wait) const {
  chunk_result r;
  const std::string fun = text_of(wire::find(chunk, "fun"));
  if (fun.empty()) {
    r.status = 400;
    r.error = "Missing required argument for client 'runner': fun";
    return r;
  }
  auto ca = reformat_low(chunk);
  ipc::runner rq;
  rq.fun = fun;
  rq.arg = ca.args;
  rq.kwarg = ca.kwargs;
  if (auto t = int_of(wire::find(chunk, "timeout")); t && *t > 0) rq.timeout = *t;
  rq.user = user.empty() ? std::string("root") : user;
  const std::string jid = new_jid();
  rq.jid = jid;
  auto out = std::make_shared<sync_reply>();
  s_.cli(ipc::encode(rq), out);
  if (!wait) {
    r.ret = value{{"tag", "salt/run/" + jid}, {"jid", jid}};
    return r;
  }
  auto fin = out->wait(steady::now() + std::chrono::hours(24), *stopping_);
  if (!fin) {
    r.ret = nullptr;
    return r;
  }
  auto d = ipc::decode_runner_reply(*fin);
  if (!d) {
    r.ret = nullptr;
    return r;
  }
  if (auto* rr = std::get_if<ipc::runner_reply>(&*d)) {
    r.ret = rr->ret;
  } else if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
    if (is_busy(e->error)) return busy(e->error);
    r.ret = e->error;
  }
  if (truthy(wire::find(chunk, "full_return"))) r.ret = value{{"return", r.ret}, {"success", true}};
  return r;
}

chunk_result lowstate_runner::wheel(const value& chunk, const std::string& user, bool wait) const {
  chunk_result r;
  std::string fun = text_of(wire::find(chunk, "fun"));
  if (fun.empty()) {
    r.status = 400;
    r.error = "Missing required argument for client 'wheel': fun";
    return r;
  }
  auto ca = reformat_low(chunk);
  const std::string jid = new_jid();
  const std::string tag = "salt/wheel/" + jid;
  const std::string who = user.empty() ? "root" : user;
  value fun_args = ca.args;
  if (!ca.kwargs.empty()) fun_args.push_back(ca.kwargs);
  if (s_.fire)
    s_.fire(tag + "/new", value{{"fun", "wheel." + fun}, {"fun_args", fun_args}, {"jid", jid}, {"user", who}});
  std::string error;
  value ret = wheel_call(fun, ca.args, ca.kwargs, error);
  const bool success = error.empty();
  if (!success) ret = error;
  // The ret event carries fun_args (and the hub adds _stamp); the reply's data is what
  // salt-api 3008.5 answers: fun, jid, user, return, success, tag.
  if (s_.fire)
    s_.fire(tag + "/ret", value{{"fun", "wheel." + fun}, {"jid", jid}, {"user", who}, {"fun_args", fun_args},
                                {"return", ret}, {"success", success}});
  value data = {{"fun", "wheel." + fun}, {"jid", jid}, {"user", who}, {"return", ret}, {"success", success},
                {"tag", tag}};
  if (!wait) {
    r.ret = value{{"tag", tag}, {"jid", jid}};
    return r;
  }
  r.ret = value{{"tag", tag}, {"data", data}};
  return r;
}

namespace {

// A wheel function's parameter by position or name.
const value* param(const value& args, const value& kwargs, std::size_t pos, const char* name) {
  if (const value* k = wire::find(kwargs, name)) return k;
  if (args.is_array() && pos < args.size()) return &args[pos];
  return nullptr;
}

// A key wheel `match`: a glob text ("a,b*"), or a list of globs.
std::optional<std::string> match_text(const value* m) {
  if (!m || m->is_null()) return std::nullopt;
  if (auto t = wire::as_text(*m)) return std::string(*t);
  if (m->is_array()) {
    std::string out;
    for (const auto& e : *m) {
      auto t = wire::as_text(e);
      if (!t) return std::nullopt;
      if (!out.empty()) out += ",";
      out += *t;
    }
    return out;
  }
  return std::nullopt;
}

std::optional<pki::key_state> state_of_dir(std::string_view d) {
  for (auto s : {pki::key_state::accepted, pki::key_state::pending, pki::key_state::rejected, pki::key_state::denied})
    if (pki::dir_name(s) == d) return s;
  return std::nullopt;
}

std::optional<std::string> read_text(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return std::nullopt;
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace

value lowstate_runner::wheel_call(const std::string& fun, const value& args, const value& kwargs,
                                  std::string& error) const {
  if (!s_.keys || !s_.cfg) {
    error = "The key wheel is not available";
    return nullptr;
  }
  const auto& ks = *s_.keys;
  const auto& cfg = *s_.cfg;
  auto need_match = [&](std::size_t pos, const char* name) -> std::optional<std::string> {
    auto m = match_text(param(args, kwargs, pos, name));
    if (!m) error = "Passed invalid arguments: " + fun + "() missing 1 required positional argument: '" + name + "'";
    return m;
  };
  auto all_with_local = [&] {
    value all = keys::list_keys(ks);
    value local = keys::local_keys(cfg.pki_dir);
    for (auto it = local.begin(); it != local.end(); ++it) all[it.key()] = it.value();
    return all;
  };
  if (fun == "key.list_all") return all_with_local();
  if (fun == "key.list") {
    auto m = need_match(0, "match");
    if (!m) return nullptr;
    value all = keys::list_keys(ks);
    const std::string& s = *m;
    auto pick = [&](const char* k) { return value{{k, all.contains(k) ? all[k] : value::array()}}; };
    if (s.starts_with("acc")) return pick(keys::acc);
    if (s.starts_with("pre") || s.starts_with("un")) return pick(keys::pend);
    if (s.starts_with("rej")) return pick(keys::rej);
    if (s.starts_with("den")) return pick(keys::den);
    if (s.starts_with("all")) return all;
    return value::object();
  }
  if (fun == "key.glob_match" || fun == "key.name_match") {
    auto m = need_match(0, "match");
    if (!m) return nullptr;
    return keys::glob_match(keys::list_keys(ks), *m);
  }
  const bool is_accept = fun == "key.accept" || fun == "key.accept_dict";
  const bool is_reject = fun == "key.reject" || fun == "key.reject_dict";
  const bool is_delete = fun == "key.delete" || fun == "key.delete_dict";
  if (is_accept || is_reject || is_delete) {
    const bool dict = fun.ends_with("_dict");
    value matches;
    std::optional<std::string> m;
    if (dict) {
      const value* md = param(args, kwargs, 0, "match");
      if (!md || !md->is_object()) {
        error = "Passed invalid arguments: " + fun + "() needs match: a map of key states to ids";
        return nullptr;
      }
      matches = *md;
    } else {
      m = need_match(0, "match");
      if (!m) return nullptr;
      matches = keys::glob_match(keys::list_keys(ks), *m);
    }
    std::vector<pki::key_state> from;
    pki::key_state to = pki::key_state::accepted;
    std::string act;
    if (is_accept) {
      act = "accept";
      from = {pki::key_state::pending};
      if (truthy(param(args, kwargs, 1, "include_rejected"))) from.push_back(pki::key_state::rejected);
      if (truthy(param(args, kwargs, 2, "include_denied"))) from.push_back(pki::key_state::denied);
    } else if (is_reject) {
      act = "reject";
      to = pki::key_state::rejected;
      from = {pki::key_state::pending};
      if (truthy(param(args, kwargs, 1, "include_accepted"))) from.push_back(pki::key_state::accepted);
      if (truthy(param(args, kwargs, 2, "include_denied"))) from.push_back(pki::key_state::denied);
    } else {
      act = "delete";
      from = {pki::key_state::accepted, pki::key_state::pending, pki::key_state::rejected, pki::key_state::denied};
    }
    std::vector<std::string> changed;
    for (auto it = matches.begin(); it != matches.end(); ++it) {
      auto st = state_of_dir(it.key());
      if (!st || std::find(from.begin(), from.end(), *st) == from.end() || !it.value().is_array()) continue;
      for (const auto& idv : it.value()) {
        auto id = wire::as_text(idv);
        if (!id || !pki::valid_id(*id)) continue;
        auto res = is_delete ? ks.remove(*st, *id) : ks.move(*id, *st, to);
        if (!res) {
          spdlog::warn("api: wheel {} {}: {}", fun, *id, res.error().message());
          continue;
        }
        changed.emplace_back(*id);
      }
    }
    if (!changed.empty() && s_.key_event) s_.key_event(act, changed);
    if (dict) return keys::dict_match(matches, keys::list_keys(ks));
    return keys::glob_match(keys::list_keys(ks), *m);
  }
  if (fun == "key.key_str") {
    auto m = need_match(0, "match");
    if (!m) return nullptr;
    value matches = keys::glob_match(keys::list_keys(ks), *m);
    value out = value::object();
    for (auto it = matches.begin(); it != matches.end(); ++it) {
      auto st = state_of_dir(it.key());
      out[it.key()] = value::object();
      if (!st) continue;
      for (const auto& idv : it.value()) {
        auto id = wire::as_text(idv);
        if (!id) continue;
        auto pem = ks.read(*st, *id);
        out[it.key()][std::string(*id)] = pem ? value(*pem) : value(nullptr);
      }
    }
    return out;
  }
  if (fun == "key.finger") {
    auto m = need_match(0, "match");
    if (!m) return nullptr;
    std::string ht = text_of(param(args, kwargs, 1, "hash_type"), cfg.hash_type);
    value matches = keys::glob_match(all_with_local(), *m);
    value out = value::object();
    for (auto it = matches.begin(); it != matches.end(); ++it) {
      out[it.key()] = value::object();
      auto st = state_of_dir(it.key());
      for (const auto& idv : it.value()) {
        auto id = wire::as_text(idv);
        if (!id) continue;
        std::optional<std::string> pem =
            st ? ks.read(*st, *id) : read_text(cfg.pki_dir / std::string(*id));
        if (!pem) continue;
        auto fp = keys::key_fingerprint(*pem, ht);
        if (fp) out[it.key()][std::string(*id)] = *fp;
      }
    }
    return out;
  }
  if (fun == "key.finger_master") {
    std::string ht = text_of(param(args, kwargs, 0, "hash_type"), cfg.hash_type);
    auto pem = read_text(cfg.pki_dir / "master.pub");
    value fp = nullptr;
    if (pem)
      if (auto f = keys::key_fingerprint(*pem, ht)) fp = *f;
    return value{{"local", {{"master.pub", fp}}}};
  }
  if (fun == "key.master_key_str") {
    auto pem = read_text(cfg.pki_dir / "master.pub");
    return value{{"local", {{cfg.id + ".pub", pem ? value(*pem) : value(nullptr)}}}};
  }
  if (fun == "key.gen" || fun == "key.gen_accept") {
    const bool accept = fun == "key.gen_accept";
    std::string id = text_of(param(args, kwargs, 0, "id_"));
    if (accept && (id.empty() || !pki::valid_id(id))) {
      error = "Passed invalid arguments: gen_accept() needs a valid id_";
      return nullptr;
    }
    auto bits = int_of(param(args, kwargs, 1, "keysize")).value_or(2048);
    if (bits < 2048 || bits > 16384) {
      error = "keysize must be between 2048 and 16384";
      return nullptr;
    }
    if (accept && ks.state_of(id) && !truthy(param(args, kwargs, 2, "force"))) return value::object();
    auto key = crypto::rsa_key::generate(static_cast<int>(bits));
    if (!key) {
      error = "key generation failed: " + key.error().message();
      return nullptr;
    }
    value out = {{"priv", key->private_pem()}, {"pub", key->public_pem()}};
    if (accept) {
      if (auto st = ks.state_of(id)) (void)ks.remove(*st, id);
      if (auto w = ks.write(pki::key_state::accepted, id, key->public_pem()); !w) {
        error = "cannot store the key of " + id + ": " + w.error().message();
        return nullptr;
      }
      if (s_.key_event) s_.key_event("accept", {id});
    }
    return out;
  }
  error = "'" + fun + "' is not available.";
  return nullptr;
}

}  // namespace sylvite::master::api
