// sylvite::minion mine module: mine.update, mine.send, mine.get, mine.delete, mine.flush,
// mine.valid as Salt 3008.5 salt/modules/mine.py + salt/utils/mine.py.
//   - mine_functions come from config.merge("mine_functions"): the minion config, then
//     pillar["master"]["mine_functions"], then pillar["mine_functions"], maps merged with the
//     earlier source winning (Salt's config.merge);
//   - forms: `fun: []` / `fun: [args...]` (list items that are maps are keyword arguments),
//     `alias: [{mine_function: fun}, args...]`, `alias: {mine_function: fun, kw: v}`;
//     allow_tgt/allow_tgt_type wrap the data in Salt's ACL entry
//     {"__saltmine_acl__": 1, "__data__": data, "allow_tgt": ..., "allow_tgt_type": ...};
//   - a function that is not available or fails is logged and left out (as Salt);
//   - remote: `_mine` / `_mine_get` / `_mine_delete` / `_mine_flush` requests to the master
//     the job came from. Salt fires `_minion_mine` on the minion's event bus and answers True
//     whatever happens next; sylvite sends the request itself and answers False when no
//     master took it (logged "Unable to send mine data to master.");
//   - local (file_client: local, salt-call --local): Salt's datastore file
//     (<cachedir>/datastore, msgpack map, key "mine_cache"), the target matched against this
//     minion only.
// mine_interval (the periodic update) is run by the daemon (driver.cpp), not here.
// Thread-safety: job threads; the datastore file is read-modified-written under a mutex.
#include <spdlog/spdlog.h>

#include <mutex>
#include <set>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "core/wire/function_list.hpp"
#include "core/wire/msgpack.hpp"
#include "minion/modules.hpp"

namespace sylvite::minion {

namespace {

constexpr const char* acl_id = "__saltmine_acl__";
constexpr const char* acl_data = "__data__";
constexpr auto mine_timeout = std::chrono::seconds(60);

std::mutex datastore_mu;

bool truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<long long>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (auto t = wire::as_text(v)) return !t->empty();
  return !v.empty();
}

// salt.modules.config.merge(value, {}) for a map option.
wire::value config_merge(const call_context& ctx, const std::string& key) {
  wire::value ret;  // null: not found yet
  auto take = [&](const wire::value* tmp) {
    if (!tmp) return;
    if (ret.is_null()) {
      ret = *tmp;
    } else if (ret.is_object() && tmp->is_object()) {
      wire::value t = *tmp;
      for (auto it = ret.begin(); it != ret.end(); ++it) t[it.key()] = *it;  // tmp.update(ret)
      ret = std::move(t);
    } else if (ret.is_array() && tmp->is_array()) {
      for (const auto& x : *tmp) ret.push_back(x);
    }
  };
  if (ctx.cfg && ctx.cfg->raw.is_object()) take(wire::find(ctx.cfg->raw, key));
  if (ret.is_string()) return ret;
  if (ctx.pillar && ctx.pillar->is_object()) {
    if (const wire::value* m = wire::find(*ctx.pillar, "master"); m && m->is_object()) take(wire::find(*m, key));
    if (ret.is_string()) return ret;
    take(wire::find(*ctx.pillar, key));
  }
  return ret.is_null() ? wire::value::object() : ret;
}

struct function_def {
  std::string name;  // empty: the alias is the function
  wire::value args = wire::value::array();
  wire::value kwargs = wire::value::object();
  wire::value acl = wire::value::object();  // allow_tgt, allow_tgt_type (falsey dropped)
};

// salt.utils.mine.parse_function_definition
function_def parse_definition(const wire::value& def) {
  function_def f;
  if (def.is_object()) {
    f.kwargs = def;
  } else if (def.is_array()) {
    for (const auto& item : def) {
      if (item.is_object())
        for (auto it = item.begin(); it != item.end(); ++it) f.kwargs[it.key()] = *it;
      else
        f.args.push_back(item);
    }
  }
  if (auto it = f.kwargs.find("mine_function"); it != f.kwargs.end()) {
    if (auto t = wire::as_text(*it)) f.name = std::string(*t);
    f.kwargs.erase(it);
  }
  for (const char* k : {"allow_tgt", "allow_tgt_type"}) {
    if (auto it = f.kwargs.find(k); it != f.kwargs.end()) {
      if (truthy(*it)) f.acl[k] = *it;
      f.kwargs.erase(it);
    }
  }
  return f;
}

// salt.utils.mine.wrap_acl_structure
wire::value wrap_acl(wire::value data, const wire::value& allow_tgt, const wire::value& allow_tgt_type) {
  wire::value res = wire::value::object();
  res[acl_data] = std::move(data);
  res[acl_id] = 1;
  if (truthy(allow_tgt)) {
    res["allow_tgt"] = allow_tgt;
    if (truthy(allow_tgt_type)) res["allow_tgt_type"] = allow_tgt_type;
  }
  return res;
}

// Run another execution function with Python-style args/kwargs (salt.utils.functools
// call_function); nullopt when it is not available or raised.
std::optional<wire::value> run_function(call_context& ctx, const std::string& fun, const wire::value& args,
                                        const wire::value& kwargs, const char* caller) {
  const auto& reg = module_registry::builtin();
  if (!reg.find(fun)) {
    spdlog::error("Function {} in mine_functions not available", fun);
    return std::nullopt;
  }
  wire::value arg_list = args.is_array() ? args : wire::value::array();
  if (kwargs.is_object() && !kwargs.empty()) {
    wire::value kw = kwargs;
    kw["__kwarg__"] = true;
    arg_list.push_back(std::move(kw));
  }
  call_context sub = ctx;  // own retcode; no publish data as __pub_* kwargs
  sub.pub = wire::value::object();
  exec_outcome o = reg.call(fun, arg_list, sub);
  if (o.missing || o.error) {
    spdlog::error("Function {} in {} failed to execute", fun, caller);
    if (o.error) spdlog::debug("Error: {}", o.error->message);
    return std::nullopt;
  }
  return std::move(o.ret);
}

bool is_local(const call_context& ctx) { return ctx.local || !ctx.master; }

std::filesystem::path datastore_path(const call_context& ctx) {
  return (ctx.cfg ? ctx.cfg->cachedir : std::filesystem::path("/var/cache/salt/minion")) / "datastore";
}

wire::value datastore_load(const call_context& ctx) {
  auto text = util::read_file(datastore_path(ctx));
  if (!text || text->empty()) return wire::value::object();
  auto v = wire::unpack(*text);
  return v && v->is_object() ? *v : wire::value::object();
}

bool datastore_set(const call_context& ctx, const std::string& key, const wire::value& val) {
  wire::value store = datastore_load(ctx);
  store[key] = val;
  auto r = util::write_file_atomic(datastore_path(ctx), wire::pack(store, wire::packing::frame), 0600);
  if (!r) spdlog::error("cannot write {}: {}", datastore_path(ctx).string(), r.error().message());
  return static_cast<bool>(r);
}

// Sends a load to the master (the job's master). False when no master took it.
bool send_to_master(call_context& ctx, wire::value load) {
  if (ctx.cfg) load["id"] = ctx.cfg->id;
  auto r = ctx.master->send(std::move(load), mine_timeout, std::max(1, ctx.cfg ? ctx.cfg->return_retry_tries : 3));
  if (!r) {
    spdlog::warn("Unable to send mine data to master. ({})", r.error().message());
    return false;
  }
  return true;
}

// _mine_store
fn_result mine_store(call_context& ctx, const wire::value& mine_data, bool clear) {
  if (is_local(ctx)) {
    std::lock_guard lk(datastore_mu);
    wire::value data = mine_data;
    if (!clear) {
      wire::value old = datastore_load(ctx).value("mine_cache", wire::value());
      if (old.is_object()) {
        for (auto it = mine_data.begin(); it != mine_data.end(); ++it) old[it.key()] = *it;
        data = std::move(old);
      }
    }
    return wire::value(datastore_set(ctx, "mine_cache", data));
  }
  wire::value load = wire::value::object();
  load["cmd"] = "_mine";
  load["data"] = mine_data;
  load["clear"] = clear;
  return wire::value(send_to_master(ctx, std::move(load)));
}

std::string text_of(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  return v.is_null() ? std::string() : v.dump();
}

}  // namespace

void register_mine_module(module_registry& r) {
  r.add({"mine.update",
         {{"clear", wire::value(false)}, {"mine_functions", wire::value()}},
         false,
         false,
         "Call the configured functions and send the data back up to the master.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           wire::value funcs = a["mine_functions"];
           if (!truthy(funcs)) {
             funcs = config_merge(ctx, "mine_functions");
             if (!funcs.is_object() || funcs.empty()) return wire::value();  // nothing configured: None
           } else if (funcs.is_array()) {
             wire::value m = wire::value::object();
             for (const auto& f : funcs) m[text_of(f)] = wire::value::object();
             funcs = std::move(m);
           } else if (!funcs.is_object()) {
             return wire::value();
           }
           wire::value mine_data = wire::value::object();
           for (auto it = funcs.begin(); it != funcs.end(); ++it) {
             function_def f = parse_definition(*it);
             const std::string fun = f.name.empty() ? it.key() : f.name;
             auto res = run_function(ctx, fun, f.args, f.kwargs, "mine.update");
             if (!res) continue;
             if (f.acl.contains("allow_tgt"))
               mine_data[it.key()] = wrap_acl(std::move(*res), f.acl["allow_tgt"], f.acl.value("allow_tgt_type", wire::value()));
             else
               mine_data[it.key()] = std::move(*res);
           }
           return mine_store(ctx, mine_data, truthy(a["clear"]));
         }});
  r.add({"mine.send",
         {{"name", {}}},
         true,
         true,
         "Send a specific function and its result to the salt mine.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           const std::string name = text_of(a["name"]);
           wire::value kwargs = wire::value::object();
           for (auto it = a.kwargs.begin(); it != a.kwargs.end(); ++it)
             if (it.key().rfind("__", 0) != 0) kwargs[it.key()] = *it;  // salt.utils.args.clean_kwargs
           auto pop = [&](const char* k) {
             wire::value v;
             if (auto it = kwargs.find(k); it != kwargs.end()) {
               v = *it;
               kwargs.erase(it);
             }
             return v;
           };
           wire::value mine_function = pop("mine_function");
           wire::value allow_tgt = pop("allow_tgt");
           wire::value allow_tgt_type = pop("allow_tgt_type");
           const std::string fun = truthy(mine_function) ? text_of(mine_function) : name;
           auto res = run_function(ctx, fun, a.varargs, kwargs, "mine.send");
           if (!res) return wire::value(false);
           wire::value mine_data = wire::value::object();
           mine_data[name] = truthy(allow_tgt) ? wrap_acl(std::move(*res), allow_tgt, allow_tgt_type) : std::move(*res);
           return mine_store(ctx, mine_data, false);
         }});
  r.add({"mine.get",
         {{"tgt", {}}, {"fun", {}}, {"tgt_type", wire::value("glob")}, {"exclude_minion", wire::value(false)}},
         false,
         false,
         "Get data from the mine.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           const std::string id = ctx.cfg ? ctx.cfg->id : std::string();
           if (is_local(ctx)) {
             wire::value ret = wire::value::object();
             match::minion_facts facts{id, ctx.grains.get(), ctx.pillar.get()};
             if (!match::matches(a["tgt"], text_of(a["tgt_type"]), facts)) return ret;
             wire::value data;
             {
               std::lock_guard lk(datastore_mu);
               data = datastore_load(ctx).value("mine_cache", wire::value());
             }
             if (!data.is_object()) return ret;
             auto fl = wire::function_list(a["fun"]);
             if (!fl) return ret;
             for (const auto& function : fl->functions) {
               auto it = data.find(function);
               if (it == data.end()) continue;
               wire::value res = *it;
               if (it->is_object() && it->contains(acl_id)) res = it->value(acl_data, wire::value());
               if (fl->keyed)
                 ret[function][id] = std::move(res);
               else
                 ret[id] = std::move(res);
             }
             return ret;
           }
           wire::value load = wire::value::object();
           load["cmd"] = "_mine_get";
           load["id"] = id;
           load["tgt"] = a["tgt"];
           load["fun"] = a["fun"];
           load["tgt_type"] = a["tgt_type"];
           auto r = ctx.master->send(std::move(load), mine_timeout, 1);
           if (!r) return exec_error{exec_error::kind::client, "mine.get: the master did not answer: " + r.error().message()};
           wire::value ret = std::move(*r);
           if (truthy(a["exclude_minion"]) && ret.is_object()) ret.erase(id);
           return ret;
         }});
  r.add({"mine.delete", {{"fun", {}}}, false, false, "Remove specific function contents of minion.", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           if (is_local(ctx)) {
             std::lock_guard lk(datastore_mu);
             wire::value data = datastore_load(ctx).value("mine_cache", wire::value());
             if (data.is_object()) data.erase(text_of(a["fun"]));
             return wire::value(datastore_set(ctx, "mine_cache", data));
           }
           wire::value load = wire::value::object();
           load["cmd"] = "_mine_delete";
           load["fun"] = a["fun"];
           return wire::value(send_to_master(ctx, std::move(load)));
         }});
  r.add({"mine.flush", {}, false, false, "Remove all mine contents of minion.", {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           if (is_local(ctx)) {
             std::lock_guard lk(datastore_mu);
             return wire::value(datastore_set(ctx, "mine_cache", wire::value::object()));
           }
           wire::value load = wire::value::object();
           load["cmd"] = "_mine_flush";
           return wire::value(send_to_master(ctx, std::move(load)));
         }});
  r.add({"mine.valid", {}, false, false, "List valid entries in mine configuration.", {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           wire::value funcs = config_merge(ctx, "mine_functions");
           if (!funcs.is_object() || funcs.empty()) return wire::value();
           wire::value out = wire::value::object();
           for (auto it = funcs.begin(); it != funcs.end(); ++it) {
             function_def f = parse_definition(*it);
             const std::string fun = f.name.empty() ? it.key() : f.name;
             if (!module_registry::builtin().find(fun)) {
               spdlog::error("Function {} in mine_functions not available", fun);
               continue;
             }
             if (!f.name.empty()) {
               wire::value l = f.args;
               for (auto k = f.kwargs.begin(); k != f.kwargs.end(); ++k) l.push_back(wire::value::object({{k.key(), *k}}));
               out[it.key()] = wire::value::object({{f.name, std::move(l)}});
             } else {
               out[it.key()] = *it;
             }
           }
           return out;
         }});
}

}  // namespace sylvite::minion
