// sylvite::master reactor (reactor.hpp): Salt 3008.5 salt/utils/reactor.py (Reactor.
// list_reactors, render_reaction, reactions; ReactWrap.run, local, runner, wheel) and the
// state compiler steps it uses (salt/state.py Compiler.pad_funcs, _verify_high,
// compile_high_data, order_chunks; salt/utils/requisite.py aggregate_and_order_chunks).
// Thread-safety: see reactor.hpp.
#include "master/reactor.hpp"

#include <fnmatch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/util/files.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;
using wire::value;

namespace {

// Low-chunk keys that are not arguments of a runner/wheel function (Salt's
// REACTOR_INTERNAL_KEYWORDS, with the args forms and the compiler's own keys).
const std::set<std::string> k_internal = {"__id__", "__sls__", "name", "order", "fun", "key", "state",
                                          "arg",    "kwarg",   "args", "__env__"};

std::string text_of(const value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_null()) return "None";
  return v.dump();
}

std::string python_type(const value& v) {
  if (v.is_string() || v.is_binary()) return "str";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number_float()) return "float";
  if (v.is_array()) return "list";
  if (v.is_object()) return "dict";
  return "NoneType";
}

std::string sls_of(const value& body) {
  if (auto s = wire::get_text(body, "__sls__")) return std::string(*s);
  return "";
}

// Compiler.pad_funcs: "state.fun" keys (and short string declarations) become
// {state: [..., "fun"]}.
void pad_funcs(value& high) {
  for (auto it = high.begin(); it != high.end(); ++it) {
    value& body = it.value();
    if (!body.is_object()) {
      if (body.is_string()) {
        std::string s = body.get<std::string>();
        auto dot = s.find('.');
        if (dot != std::string::npos) body = value{{s.substr(0, dot), value::array({s.substr(dot + 1)})}};
      }
      continue;
    }
    std::vector<std::string> keys;
    for (auto k = body.begin(); k != body.end(); ++k) keys.push_back(k.key());
    std::sort(keys.begin(), keys.end());
    std::set<std::string> skeys;
    for (const auto& key : keys) {
      if (key.starts_with("_")) continue;
      if (!body.contains(key) || !body[key].is_array()) continue;
      auto dot = key.find('.');
      if (dot != std::string::npos) {
        std::string state = key.substr(0, dot);
        if (skeys.contains(state)) continue;
        value args = body[key];
        body.erase(key);
        args.push_back(key.substr(dot + 1));
        body[state] = std::move(args);
        skeys.insert(state);
        continue;
      }
      skeys.insert(key);
    }
  }
}

const std::set<std::string> k_requisites = {"require",     "require_any", "watch",         "watch_any",
                                            "prereq",      "onfail",      "onfail_any",    "onfail_all",
                                            "onchanges",   "onchanges_any", "use",          "listen",
                                            "require_in",  "watch_in",    "prereq_in",     "onfail_in",
                                            "onchanges_in", "use_in",     "listen_in"};

// salt.state._verify_high (the reactor's subset: no requisite graph).
std::vector<std::string> verify_high(const value& high) {
  std::vector<std::string> errors;
  if (!high.is_object()) return {"High data is not a dictionary and is invalid"};
  for (auto it = high.begin(); it != high.end(); ++it) {
    const std::string& id = it.key();
    const value& body = it.value();
    if (id.starts_with("__")) continue;
    if (!body.is_object()) {
      errors.push_back("The type " + id + " in " + text_of(body) + " is not formatted as a dictionary");
      continue;
    }
    const std::string sls = sls_of(body);
    for (auto s = body.begin(); s != body.end(); ++s) {
      const std::string& state = s.key();
      if (state.starts_with("__")) continue;
      if (s.value().is_null()) {
        errors.push_back("ID '" + id + "' in SLS '" + sls + "' contains a short declaration (" + state +
                         ") with a trailing colon. When not passing any arguments to a state, the colon must be "
                         "omitted.");
        continue;
      }
      if (!s.value().is_array()) {
        errors.push_back("State '" + id + "' in SLS '" + sls + "' is not formed as a list");
        continue;
      }
      int fun_count = state.find('.') != std::string::npos ? 1 : 0;
      std::vector<std::string> funs;
      for (const auto& arg : s.value()) {
        if (arg.is_string()) {
          ++fun_count;
          std::string f = arg.get<std::string>();
          funs.push_back(f);
          auto b = f.find_first_not_of(" \t\n");
          auto e = f.find_last_not_of(" \t\n");
          if (b != std::string::npos && f.substr(b, e - b + 1).find(' ') != std::string::npos)
            errors.push_back("The function \"" + f + "\" in state \"" + id + "\" in SLS \"" + sls +
                             "\" has whitespace, a function with whitespace is not supported, perhaps this is an "
                             "argument that is missing a \":\"");
        } else if (arg.is_object() && !arg.empty()) {
          const std::string first = arg.begin().key();
          if (first == "names" && !arg.begin().value().is_array())
            errors.push_back("The 'names' argument in state '" + id + "' in SLS '" + sls +
                             "' needs to be formed as a list");
          if (k_requisites.contains(first) && !arg.begin().value().is_array())
            errors.push_back("The " + first + " statement in state '" + id + "' in SLS '" + sls +
                             "' needs to be formed as a list");
          if (k_requisites.contains(first) && arg.size() != 1)
            errors.push_back("Multiple dictionaries defined in argument of state '" + id + "' in SLS '" + sls + "'");
        }
      }
      if (fun_count == 0) {
        errors.push_back("No function declared in state '" + id + "' in SLS '" + sls + "'");
      } else if (fun_count > 1) {
        std::string list;
        if (auto dot = state.find('.'); dot != std::string::npos) list = state.substr(dot + 1);
        for (const auto& f : funs) list += (list.empty() ? "" : ", ") + f;
        errors.push_back("Too many functions declared in state '" + id + "' in SLS '" + sls +
                         "'. Please choose one of the following: " + list);
      }
    }
  }
  return errors;
}

// The order value of a chunk (requisite._get_chunk_order without edges): an int, "first"
// (0), "last" (cap + 1000000), anything else cap; negative ints count from the end;
// name_order adds n/10000.
double chunk_order(const value& chunk, double cap) {
  double order = cap;
  if (const value* o = wire::find(chunk, "order")) {
    if (o->is_number() && !o->is_boolean()) {
      order = o->get<double>();
    } else if (auto t = wire::as_text(*o)) {
      if (*t == "last") order = cap + 1000000;
      else if (*t == "first") order = 0;
    }
  }
  if (auto n = wire::get_int(chunk, "name_order"); n && *n) order += static_cast<double>(*n) / 10000.0;
  if (order < 0) order += cap + 1000000;
  return order;
}

}  // namespace

bool tag_fnmatch(const std::string& pattern, const std::string& tag) {
  return ::fnmatch(pattern.c_str(), tag.c_str(), FNM_NOESCAPE) == 0;
}

std::optional<value> repack_dictlist(const value& list) {
  if (!list.is_array()) return std::nullopt;
  value out = value::object();
  for (const auto& e : list) {
    if (e.is_string() || e.is_binary() || (e.is_number() && !e.is_boolean())) {
      out[text_of(e)] = nullptr;
    } else if (e.is_object() && e.size() == 1) {
      out[e.begin().key()] = e.begin().value();
    } else {
      return std::nullopt;
    }
  }
  return out;
}

reactor_compiled compile_reactions(value high) {
  reactor_compiled out;
  pad_funcs(high);
  out.errors = verify_high(high);
  if (!out.errors.empty()) return out;
  std::vector<value> chunks;
  for (auto it = high.begin(); it != high.end(); ++it) {
    const std::string& name = it.key();
    const value& body = it.value();
    if (name.starts_with("__")) continue;
    for (auto s = body.begin(); s != body.end(); ++s) {
      const std::string& state = s.key();
      if (state.starts_with("__")) continue;
      value chunk = value::object();
      chunk["state"] = state;
      chunk["name"] = name;
      for (const char* k : {"__sls__", "__env__"})
        if (const value* v = wire::find(body, k)) chunk[k] = *v;
      chunk["__id__"] = name;
      std::vector<std::string> funs;
      value names = value::array();
      for (const auto& arg : s.value()) {
        if (arg.is_string()) {
          funs.push_back(arg.get<std::string>());
          continue;
        }
        if (!arg.is_object()) continue;
        for (auto a = arg.begin(); a != arg.end(); ++a) {
          if (a.key() == "names") {
            for (const auto& n : a.value())
              if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
          } else {
            chunk[a.key()] = a.value();
          }
        }
      }
      // Salt keeps the functions in a set and takes the first (verify_high allows one).
      if (funs.empty()) continue;
      std::sort(funs.begin(), funs.end());
      if (!names.empty()) {
        int name_order = 1;
        for (const auto& entry : names) {
          value live = chunk;
          if (entry.is_object() && !entry.empty()) {
            live["name"] = entry.begin().key();
            const value& extra = entry.begin().value();
            if (extra.is_array())
              for (const auto& m : extra)
                if (m.is_object())
                  for (auto x = m.begin(); x != m.end(); ++x) live[x.key()] = x.value();
          } else {
            live["name"] = text_of(entry);
          }
          live["name_order"] = name_order++;
          live["fun"] = funs.front();
          chunks.push_back(std::move(live));
        }
      } else {
        chunk["fun"] = funs.front();
        chunks.push_back(std::move(chunk));
      }
    }
  }
  // order_chunks: cap = (largest int order) + 100, or 1; sorted by (order, state+name+fun).
  double cap = 1;
  for (const auto& c : chunks)
    if (const value* o = wire::find(c, "order"); o && o->is_number_integer() && !o->is_boolean()) {
      double v = o->get<double>();
      if (v > cap - 1 && v > 0) cap = v + 100;
    }
  std::vector<std::pair<std::pair<double, std::string>, std::size_t>> keyed;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    keyed.push_back({{chunk_order(c, cap), text_of(c["state"]) + text_of(c["name"]) + text_of(c["fun"])}, i});
  }
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, i] : keyed) {
    value c = std::move(chunks[i]);
    c["order"] = k.first == std::floor(k.first) ? value(static_cast<std::int64_t>(k.first)) : value(k.first);
    c.erase("name_order");
    out.chunks.push_back(std::move(c));
  }
  return out;
}

// ---- wheel.key

namespace {

std::vector<std::string> match_globs(const value& match) {
  std::vector<std::string> out;
  if (match.is_array()) {
    for (const auto& m : match)
      if (auto t = wire::as_text(m)) out.emplace_back(*t);
  } else if (auto t = wire::as_text(match)) {
    std::string s(*t);
    if (s.find(',') == std::string::npos) {
      out.push_back(s);
    } else {
      std::size_t pos = 0;
      while (pos <= s.size()) {
        auto c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        out.push_back(s.substr(pos, c - pos));
        pos = c + 1;
      }
    }
  } else if (!match.is_null()) {
    out.push_back(text_of(match));
  }
  return out;
}

const std::pair<const char*, pki::key_state> k_dirs[] = {{"minions_pre", pki::key_state::pending},
                                                         {"minions_rejected", pki::key_state::rejected},
                                                         {"minions", pki::key_state::accepted},
                                                         {"minions_denied", pki::key_state::denied}};

// Key.name_match: {dir: [ids]} of the keys matching any glob (ids sorted ignoring case).
value name_match(const pki::key_store& ks, const std::vector<std::string>& globs) {
  value ret = value::object();
  for (const auto& [dir, st] : k_dirs) {
    auto ids = ks.list(st);
    std::stable_sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](unsigned char x, unsigned char y) {
        return std::tolower(x) < std::tolower(y);
      });
    });
    for (const auto& id : ids)
      for (const auto& g : globs)
        if (tag_fnmatch(g, id)) {
          if (!ret.contains(dir)) ret[dir] = value::array();
          ret[dir].push_back(id);
        }
  }
  return ret;
}

bool truthy(const value* v) {
  if (!v) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  if (auto t = wire::as_text(*v)) {
    std::string s(*t);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s == "true" || s == "yes" || s == "1" || s == "on";
  }
  return false;
}

}  // namespace

wheel_outcome run_wheel_key(const pki::key_store& ks, const std::string& fun, const value& arg, const value& kwarg,
                            const std::function<void(const std::string&, const std::vector<std::string>&)>& notify) {
  wheel_outcome out;
  std::string act;
  if (fun == "key.accept") act = "accept";
  else if (fun == "key.reject") act = "reject";
  else if (fun == "key.delete") act = "delete";
  else {
    out.error = "'" + fun + "' is not available.";
    return out;
  }
  auto kw = [&](const char* k) -> const value* { return kwarg.is_object() ? wire::find(kwarg, k) : nullptr; };
  const value* match = kw("match");
  if (!match && arg.is_array() && !arg.empty()) match = &arg[0];
  if (!match) {
    out.error = "Passed invalid arguments: " + act + "() missing 1 required positional argument: 'match'";
    return out;
  }
  const auto globs = match_globs(*match);
  value matches = name_match(ks, globs);
  std::vector<std::pair<const char*, pki::key_state>> from;
  if (act == "accept") {
    from.push_back(k_dirs[0]);
    if (truthy(kw("include_rejected"))) from.push_back(k_dirs[1]);
    if (truthy(kw("include_denied"))) from.push_back(k_dirs[3]);
  } else if (act == "reject") {
    from.push_back(k_dirs[0]);
    if (truthy(kw("include_accepted"))) from.push_back(k_dirs[2]);
    if (truthy(kw("include_denied"))) from.push_back(k_dirs[3]);
  } else {
    for (const auto& d : k_dirs) from.push_back(d);
  }
  std::vector<std::string> changed;
  for (const auto& [dir, st] : from) {
    if (!matches.contains(dir)) continue;
    for (const auto& idv : matches[dir]) {
      const std::string id = idv.get<std::string>();
      if (!pki::valid_id(ks.dir() / dir, id)) continue;
      result<void> r;
      if (act == "delete") r = ks.remove(st, id);
      else r = ks.move(id, st, act == "accept" ? pki::key_state::accepted : pki::key_state::rejected);
      if (!r) {
        spdlog::warn("reactor wheel {}: {} {}: {}", fun, dir, id, r.error().message());
        continue;
      }
      if (std::find(changed.begin(), changed.end(), id) == changed.end()) changed.push_back(id);
    }
  }
  if (!changed.empty() && notify) notify(act, changed);
  out.ret = name_match(ks, globs);
  return out;
}

// ---- runner hook

namespace {
class runner_log_reply final : public cli_reply {
 public:
  explicit runner_log_reply(std::string fun) : fun_(std::move(fun)) {}
  void reply(value body) override {
    auto d = ipc::decode_runner_reply(body);
    if (!d) {
      spdlog::warn("reactor: runner {}: unreadable reply: {}", fun_, d.error);
      return;
    }
    if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
      spdlog::warn("reactor: runner {} not run: {}", fun_, e->error);
    } else if (auto* r = std::get_if<ipc::runner_reply>(&*d)) {
      if (r->retcode != 0)
        spdlog::warn("reactor: runner {} failed (retcode {}): {}", fun_, r->retcode, text_of(r->ret));
      else
        spdlog::info("reactor: runner {} returned {}", fun_, r->ret.dump(-1, ' ', false, value::error_handler_t::replace));
    }
  }
  bool push(value) override { return true; }
  bool alive() const override { return true; }

 private:
  std::string fun_;
};
}  // namespace

std::function<bool(const std::string&, const value&, const value&)> reactor_runner_via_cli(
    std::function<void(const value& body, std::shared_ptr<cli_reply> out)> handle) {
  return [handle = std::move(handle)](const std::string& fun, const value& arg, const value& kwarg) {
    ipc::runner r;
    r.fun = fun;
    r.arg = arg;
    r.kwarg = kwarg;
    handle(ipc::encode(r), std::make_shared<runner_log_reply>(fun));
    return true;
  };
}

// ---- reactor

reactor_options reactor_options::from(const value& raw) {
  reactor_options o;
  if (!raw.is_object()) return o;
  if (const value* m = wire::find(raw, "reactor")) {
    if (m->is_array() || m->is_string()) o.map = *m;
    else if (!m->is_null()) spdlog::error("reactor: the option 'reactor' must be a list or a string (a file); ignored");
  }
  auto integer = [&](const char* name, int& out, std::int64_t lo, std::int64_t hi) {
    const value* v = wire::find(raw, name);
    if (!v || v->is_null()) return;
    std::optional<std::int64_t> n;
    if (v->is_number_integer() && !v->is_boolean()) n = v->get<std::int64_t>();
    else if (auto t = wire::as_text(*v)) {
      try {
        std::size_t used = 0;
        long long x = std::stoll(std::string(*t), &used);
        if (used == t->size()) n = x;
      } catch (const std::exception&) {
      }
    }
    if (!n || *n < lo || *n > hi) {
      spdlog::error("reactor: the option '{}' must be an integer from {} to {}; using {}", name, lo, hi, out);
      return;
    }
    out = static_cast<int>(*n);
  };
  integer("reactor_refresh_interval", o.refresh_interval, 0, INT32_MAX);
  integer("reactor_worker_threads", o.worker_threads, 1, 1024);
  integer("reactor_worker_hwm", o.worker_hwm, 1, INT32_MAX);
  integer("reactor_render_timeout", o.render_timeout, 1, 86400);
  return o;
}

reactor::reactor(const config::master_config& cfg, render::renderer& rend, hooks h)
    : cfg_(cfg), opt_(reactor_options::from(cfg.raw)), rend_(rend), h_(std::move(h)) {
  enabled_ = (opt_.map.is_array() && !opt_.map.empty()) || opt_.map.is_string();
}

reactor::~reactor() { stop(); }

void reactor::start(event_hub& hub) {
  if (!enabled_ || hub_) return;
  hub_ = &hub;
  {
    std::lock_guard lk(mu_);
    stopping_ = false;
  }
  const int n = std::max(1, opt_.worker_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  sub_ = hub.subscribe_local([this](const std::string& tag, const value& data) { on_event(tag, data); });
  spdlog::info("reactor: {} reactor entr{}, {} thread(s), queue bound {}",
               opt_.map.is_array() ? opt_.map.size() : 1, opt_.map.is_array() && opt_.map.size() == 1 ? "y" : "ies",
               n, opt_.worker_hwm);
}

void reactor::stop() {
  if (hub_) {
    hub_->unsubscribe(sub_);
    hub_ = nullptr;
  }
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    q_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

reactor_stats reactor::stats() const {
  reactor_stats s;
  s.events = events_.load();
  s.matched = matched_.load();
  s.shed = shed_.load();
  s.reactions = reactions_.load();
  s.actions = actions_.load();
  s.errors = errors_.load();
  return s;
}

wire::value reactor::reactor_map() {
  if (!opt_.map.is_string()) return opt_.map;
  // Salt reads the file at every event; it is re-read here when its mtime changes.
  const fs::path p = opt_.map.get<std::string>();
  std::lock_guard lk(map_mu_);
  std::error_code ec;
  auto mt = fs::last_write_time(p, ec);
  if (ec) {
    if (file_loaded_ || file_mtime_ == fs::file_time_type{}) {
      spdlog::error("Failed to read reactor map: \"{}\"", p.string());
      file_loaded_ = false;
      file_mtime_ = fs::file_time_type::min();
    }
    file_map_ = value::array();
    return file_map_;
  }
  if (file_loaded_ && mt == file_mtime_) return file_map_;
  file_mtime_ = mt;
  file_loaded_ = true;
  file_map_ = value::array();
  auto text = util::read_file(p);
  if (!text) {
    spdlog::error("Failed to read reactor map: \"{}\"", p.string());
    return file_map_;
  }
  auto v = config::parse_yaml(*text);
  if (!v) {
    spdlog::error("Failed to parse YAML in reactor map: \"{}\"", p.string());
    return file_map_;
  }
  if (v->is_array()) file_map_ = std::move(*v);
  return file_map_;
}

std::vector<std::string> reactor::list_reactors(const std::string& tag) {
  std::vector<std::string> out;
  value from_file;
  if (opt_.map.is_string()) from_file = reactor_map();
  const value& map = opt_.map.is_string() ? from_file : opt_.map;  // no copy per event
  if (!map.is_array()) return out;
  for (const auto& ropt : map) {
    if (!ropt.is_object() || ropt.size() != 1) continue;
    const std::string key = ropt.begin().key();
    const value& val = ropt.begin().value();
    if (!tag_fnmatch(key, tag)) continue;
    if (auto t = wire::as_text(val)) {
      out.emplace_back(*t);
    } else if (val.is_array()) {
      for (const auto& v : val)
        if (auto s = wire::as_text(v)) out.emplace_back(*s);
    }
  }
  return out;
}

void reactor::on_event(const std::string& tag, const value& data) {
  events_.fetch_add(1, std::memory_order_relaxed);
  // Salt: skip all events fired by ourselves (the runner/wheel calls and error reports).
  if (auto u = wire::get_text(data, "user"); u && *u == reactor_user) return;
  auto files = list_reactors(tag);
  if (files.empty()) return;
  matched_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    if (q_.size() >= static_cast<std::size_t>(opt_.worker_hwm)) {
      shed_.fetch_add(1, std::memory_order_relaxed);
      if (auto n = shed_log_.hit())
        spdlog::warn("reactor: queue full (reactor_worker_hwm {}): {} event(s) shed in the last 10 s, {} in all; "
                     "consider tuning reactor_worker_threads and/or reactor_worker_hwm",
                     opt_.worker_hwm, n, shed_.load());
      return;
    }
    q_.push_back({tag, data, std::move(files)});
  }
  cv_.notify_one();
}

void reactor::work() {
  for (;;) {
    queued job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !q_.empty(); });
      if (stopping_) return;
      job = std::move(q_.front());
      q_.pop_front();
    }
    try {
      react(job.tag, job.data, job.files);
    } catch (const std::exception& e) {
      report(job.tag, job.files, std::string("Exception encountered while compiling reactions: ") + e.what());
    }
  }
}

std::vector<fs::path> reactor::resolve(const std::string& ref) {
  std::string path = ref;
  if (path.starts_with("salt://")) {
    // cp.cache_file from the master's file roots (base environment), first root wins.
    std::string rel = path.substr(7);
    if (auto q = rel.find('?'); q != std::string::npos) rel = rel.substr(0, q);
    path.clear();
    if (rel.find("..") == std::string::npos) {
      if (auto it = cfg_.file_roots.find("base"); it != cfg_.file_roots.end())
        for (const auto& root : it->second) {
          std::error_code ec;
          fs::path p = fs::path(root) / rel;
          if (fs::is_regular_file(p, ec)) {
            path = p.string();
            break;
          }
        }
    }
    if (path.empty()) return {};
  }
  // glob.glob: every component may hold a pattern.
  if (path.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (fs::exists(path, ec)) return {fs::path(path)};
    return {};
  }
  std::vector<fs::path> cur = {path.starts_with("/") ? fs::path("/") : fs::path(".")};
  fs::path rel = fs::path(path).relative_path();
  for (const auto& comp : rel) {
    std::vector<fs::path> next;
    const std::string c = comp.string();
    for (const auto& base : cur) {
      if (c.find_first_of("*?[") == std::string::npos) {
        std::error_code ec;
        if (fs::exists(base / c, ec)) next.push_back(base / c);
        continue;
      }
      std::error_code ec;
      std::vector<fs::path> found;
      for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(".") && !c.starts_with(".")) continue;
        if (tag_fnmatch(c, name)) found.push_back(it->path());
      }
      std::sort(found.begin(), found.end());
      next.insert(next.end(), found.begin(), found.end());
    }
    cur = std::move(next);
    if (cur.empty()) break;
  }
  return cur;
}

reactor_compiled reactor::reactions(const std::string& tag, const value& data, const std::vector<std::string>& files) {
  reactor_compiled out;
  value high = value::object();
  const value clean = wire::decode_embedded_strs(data);
  for (const auto& ref : files) {
    auto found = resolve(ref);
    if (found.empty()) {
      out.errors.push_back("Can not render SLS " + ref + " for tag " + tag + ". File missing or not found.");
      continue;
    }
    for (const auto& fn : found) {
      render::request rq;
      rq.path = fs::absolute(fn);
      rq.saltenv = "base";
      if (auto it = cfg_.file_roots.find("base"); it != cfg_.file_roots.end())
        for (const auto& r : it->second) rq.roots.emplace_back(r);
      rq.default_pipe = cfg_.renderer;
      rq.blacklist = cfg_.renderer_blacklist;
      rq.whitelist = cfg_.renderer_whitelist;
      value ctx = value::object();
      ctx["opts"] = cfg_.raw.is_object() ? cfg_.raw : value::object();
      ctx["grains"] = value::object();
      ctx["pillar"] = value::object();
      ctx["saltenv"] = "base";
      ctx["sls"] = "";
      ctx["tag"] = tag;
      ctx["data"] = clean;
      rq.context = std::move(ctx);
      rq.timeout = std::chrono::seconds(opt_.render_timeout);
      render::outcome o;
      try {
        o = rend_.render(rq);
      } catch (const std::exception& e) {
        o.st = render::outcome::status::unavailable;
        o.error = e.what();
      }
      if (!o.ok()) {
        out.errors.push_back("Failed to render \"" + fn.string() + "\": " + o.error);
        continue;
      }
      if (!o.data.is_object()) {
        if (o.data.is_null() || (o.data.is_string() && o.data.get<std::string>().empty()) ||
            (o.data.is_array() && o.data.empty()))
          continue;  // an empty reaction
        out.errors.push_back("Failed to render \"" + fn.string() + "\": the rendered data is a " +
                             python_type(o.data) + ", not a dictionary");
        continue;
      }
      // Salt: render_template pads the functions, then `for name in res:
      // res[name]["__sls__"] = fn_` fails the whole file for a body that is not a dict.
      value one = std::move(o.data);
      pad_funcs(one);
      bool bad = false;
      for (auto it = one.begin(); it != one.end(); ++it) {
        if (!it.value().is_object()) {
          out.errors.push_back("Failed to render \"" + fn.string() + "\": ID '" + it.key() +
                               "' is not a dictionary (" + python_type(it.value()) + ")");
          bad = true;
          break;
        }
        it.value()["__sls__"] = fn.string();
      }
      if (bad) continue;
      for (auto it = one.begin(); it != one.end(); ++it) high[it.key()] = it.value();
    }
  }
  if (high.empty()) return out;
  auto compiled = compile_reactions(std::move(high));
  if (!compiled.errors.empty()) {
    std::string all;
    for (const auto& e : compiled.errors) all += (all.empty() ? "" : "; ") + e;
    std::string names;
    for (const auto& f : files) names += (names.empty() ? "" : ", ") + f;
    out.errors.push_back("Unable to render reactions for event " + tag + " due to errors (" + all +
                         ") in one or more of the sls files (" + names + ")");
    return out;
  }
  out.chunks = std::move(compiled.chunks);
  return out;
}

void reactor::report(const std::string& tag, const std::vector<std::string>& files, const std::string& error) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  std::string key = files.empty() ? std::string("-") : files.front();
  std::uint64_t n = 0;
  {
    std::lock_guard lk(log_mu_);
    auto it = error_logs_.find(key);
    if (it == error_logs_.end()) {
      if (error_logs_.size() >= 1024) error_logs_.clear();
      it = error_logs_.emplace(key, std::make_unique<util::log_limiter>()).first;
    }
    n = it->second->hit();
  }
  if (n) spdlog::error("reactor: {}{}", error, n > 1 ? " (" + std::to_string(n) + " such error(s) in the last 10 s)" : "");
  if (h_.fire) {
    value d = value::object();
    d["tag"] = tag;
    d["sls"] = files;
    d["error"] = error;
    d["user"] = reactor_user;
    h_.fire(reactor_error_tag, d);
  }
}

void reactor::react(const std::string& tag, const value& data, const std::vector<std::string>& files) {
  auto compiled = reactions(tag, data, files);
  for (const auto& e : compiled.errors) report(tag, files, e);
  if (compiled.chunks.empty()) return;
  reactions_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& chunk : compiled.chunks) {
    std::string err;
    try {
      err = call(chunk);
    } catch (const std::exception& e) {
      err = "Reactor '" + text_of(chunk["__id__"]) + "' failed to execute " + text_of(chunk["state"]) + " '" +
            text_of(chunk["fun"]) + "': " + e.what();
    }
    if (!err.empty()) {
      std::vector<std::string> sls = files;
      if (auto s = wire::get_text(chunk, "__sls__")) sls = {std::string(*s)};
      report(tag, sls, err);
    }
  }
}

std::string reactor::call(const value& chunk) {
  std::string state = text_of(chunk["state"]);
  if (state == "cmd") state = "local";  // Reactor.aliases
  const std::string fun = text_of(chunk["fun"]);
  const std::string id = text_of(chunk["__id__"]);
  auto failed = [&](const std::string& why) {
    return "Reactor '" + id + "' failed to execute " + state + " '" + fun + "': " + why;
  };
  if (state != "local" && state != "runner" && state != "wheel")
    return "Reactor '" + id + "': the action type '" + state + "' (" + state + "." + fun +
           ") is not supported by sylvite's reactor (supported: local, runner, wheel)";
  // The arguments: new style `args` (every entry a keyword), else `arg`/`kwarg`.
  value arg = value::array();
  value kwarg = value::object();
  if (const value* args = wire::find(chunk, "args")) {
    for (const char* item : {"arg", "kwarg"})
      if (chunk.contains(item))
        spdlog::warn("Reactor '{}' is ignoring '{}' param {} due to presence of 'args' param. Check the Reactor "
                     "System documentation for the correct argument format.",
                     id, item, text_of(chunk[item]));
    if (args->is_object()) {
      kwarg = *args;
    } else {
      auto r = repack_dictlist(*args);
      if (!r || r->empty())
        return failed("Incorrect argument format, check the Reactor System documentation for the correct format.");
      kwarg = std::move(*r);
    }
  } else {
    if (const value* a = wire::find(chunk, "arg")) {
      if (!a->is_array()) return failed("'arg' must be a list");
      arg = *a;
    }
    if (const value* k = wire::find(chunk, "kwarg")) {
      if (!k->is_object()) return failed("'kwarg' must be a dictionary");
      kwarg = *k;
    } else if (state != "local") {
      // Legacy runner/wheel: the chunk's other keys are the function's keyword arguments.
      for (auto it = chunk.begin(); it != chunk.end(); ++it)
        if (!k_internal.contains(it.key()) && !it.key().starts_with("__")) kwarg[it.key()] = it.value();
    }
  }
  if (state == "local") {
    const value* tgt = wire::find(chunk, "tgt");
    if (!tgt) return failed("local takes at least 3 arguments (2 given)");
    if (!h_.publish) return failed("publishing is not available");
    publish_request req;
    req.tgt = *tgt;
    if (auto t = wire::get_text(chunk, "tgt_type")) req.tgt_type = std::string(*t);
    req.fun = fun;
    req.arg = std::move(arg);
    req.kwarg = std::move(kwarg);
    if (auto r = wire::get_text(chunk, "ret")) req.ret = std::string(*r);
    if (auto j = wire::get_text(chunk, "jid")) req.jid = std::string(*j);
    if (auto d = wire::get_text(chunk, "delimiter")) req.delimiter = std::string(*d);
    for (const char* k : {"metadata", "ret_config", "ret_kwargs", "module_executors", "executor_opts"})
      if (const value* v = wire::find(chunk, k)) req.kwargs[k] = *v;
    auto res = h_.publish(req);
    if (!res.error.empty()) return failed(res.error);
    actions_.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("reactor '{}': published {} as job {} to {} minion(s)", id, fun, res.jid, res.minions.size());
    return {};
  }
  if (state == "runner") {
    if (!h_.runner) return failed("runners are not available");
    if (!h_.runner(fun, arg, kwarg)) return failed("the runner could not be started (master busy or stopping)");
    actions_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  // wheel
  if (!h_.wheel) return failed("wheel functions are not available");
  if (fun != "key.accept" && fun != "key.reject" && fun != "key.delete")
    return failed("the wheel function '" + fun +
                  "' is not supported by sylvite's reactor (supported: key.accept, key.reject, key.delete)");
  auto w = h_.wheel(fun, arg, kwarg);
  if (!w.error.empty()) return failed(w.error);
  actions_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

}  // namespace sylvite::master
