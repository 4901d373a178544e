// sylvite::minion event module (salt/modules/event.py, 3008.5): event.send,
// event.fire_master, event.fire.
//   event.send tag [data] [preload] [with_env] [with_grains] [with_pillar] [with_env_opts]
//     [**kwargs]: data = {environ?, grains?, pillar?, saltenv?, pillarenv?, kwargs...,
//     data...} (Salt's order of updates), sent to the master as a `_minion_event`; the
//     master fires the whole load under tag (master/request_router.cpp). True when sent.
//     --local / file_client local / master_type disable (without use_master_when_local):
//     event.fire (below), as Salt.
//   event.fire_master data tag [preload]: the same request with data as given. Local mode:
//     False and a warning, as Salt.
//   event.fire data tag: Salt fires on the minion's own event bus (minion_event_<hash>_pub.ipc)
//     for the minion's engines/beacons. The sylvite minion has no local event bus (no
//     beacons, engines or minion-side reactor): the event is logged at info and False is
//     returned, so that callers see it went nowhere.
// The load's keys follow Salt: salt-call (ctx.pub.tgt == "salt-call") sends
// {id, tag, data, cmd} + preload (salt/modules/event.py fire_master); a job of the minion
// daemon sends {id, cmd, pretag, data, tag} (salt/minion.py _fire_master_prepare).
// Thread-safety: handlers run on job threads; the master link is thread-safe.
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "minion/modules.hpp"

extern char** environ;  // NOLINT

namespace sylvite::minion {

using wire::value;

namespace {

bool truthy(const value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<long long>() != 0;
  if (auto t = wire::as_text(v)) return !t->empty();
  return !v.empty();
}

std::string text_of(const value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_null()) return "";
  return v.dump();
}

// _dict_subset: the listed keys that exist, in the list's order.
value dict_subset(const value& keys, const value& from) {
  value out = value::object();
  for (const auto& k : keys) {
    auto name = wire::as_text(k);
    if (!name) continue;
    if (const value* v = wire::find(from, *name)) out[std::string(*name)] = *v;
  }
  return out;
}

value environ_map() {
  value out = value::object();
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

bool cfg_true(const call_context& ctx, const char* key) {
  if (!ctx.cfg) return false;
  const value* v = wire::find(ctx.cfg->raw, key);
  return v && truthy(*v);
}

bool local_mode(const call_context& ctx) {
  if (ctx.local || !ctx.master) return true;
  return ctx.cfg && ctx.cfg->file_client == "local";
}

bool from_salt_call(const call_context& ctx) { return wire::get_text(ctx.pub, "tgt").value_or("") == "salt-call"; }

fn_result fire_local(const value& data, const std::string& tag) {
  spdlog::info("event.fire: the sylvite minion has no local event bus; event '{}' not fired ({})", tag,
               data.dump(-1, ' ', false, value::error_handler_t::replace));
  return value(false);
}

fn_result send_to_master(call_context& ctx, const value& data, const std::string& tag, const value& preload) {
  value load = value::object();
  if (from_salt_call(ctx)) {
    load["id"] = ctx.cfg ? ctx.cfg->id : std::string();
    load["tag"] = tag;
    load["data"] = data;
    load["cmd"] = "_minion_event";
    if (preload.is_object())
      for (auto it = preload.begin(); it != preload.end(); ++it) load[it.key()] = it.value();
  } else {
    if (tag.empty()) return value(false);  // _fire_master_prepare: nothing to send
    load["id"] = ctx.cfg ? ctx.cfg->id : std::string();
    load["cmd"] = "_minion_event";
    load["pretag"] = nullptr;
    load["data"] = truthy(data) ? data : value::object();
    load["tag"] = tag;
  }
  auto r = ctx.master->send(std::move(load), std::chrono::seconds(60), 1);
  if (!r) {
    spdlog::info("fire_master failed: {}", r.error().message());
    return value(false);
  }
  return value(true);
}

}  // namespace

void register_event_module(module_registry& r) {
  r.add({"event.send",
         {{"tag", {}},
          {"data", value()},
          {"preload", value()},
          {"with_env", value(false)},
          {"with_grains", value(false)},
          {"with_pillar", value(false)},
          {"with_env_opts", value(false)}},
         false,
         true,
         "Send an event to the Salt Master",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           value d = value::object();
           if (truthy(a["with_env"])) d["environ"] = a["with_env"].is_array() ? dict_subset(a["with_env"], environ_map())
                                                                               : environ_map();
           if (truthy(a["with_grains"]))
             d["grains"] = a["with_grains"].is_array() ? dict_subset(a["with_grains"], *ctx.grains) : *ctx.grains;
           if (truthy(a["with_pillar"]))
             d["pillar"] = a["with_pillar"].is_array() ? dict_subset(a["with_pillar"], *ctx.pillar) : *ctx.pillar;
           if (truthy(a["with_env_opts"])) {
             const value* se = ctx.cfg ? wire::find(ctx.cfg->raw, "saltenv") : nullptr;
             const value* pe = ctx.cfg ? wire::find(ctx.cfg->raw, "pillarenv") : nullptr;
             d["saltenv"] = se ? *se : value();
             d["pillarenv"] = pe ? *pe : value();
           }
           for (auto it = a.kwargs.begin(); it != a.kwargs.end(); ++it) d[it.key()] = it.value();
           if (a["data"].is_object())
             for (auto it = a["data"].begin(); it != a["data"].end(); ++it) d[it.key()] = it.value();
           const std::string tag = text_of(a["tag"]);
           if (local_mode(ctx) && !cfg_true(ctx, "use_master_when_local")) return fire_local(d, tag);
           if (!ctx.master) return fire_local(d, tag);
           return send_to_master(ctx, d, tag, a["preload"]);
         }});
  r.add({"event.fire_master",
         {{"data", {}}, {"tag", {}}, {"preload", value()}},
         false,
         false,
         "Fire an event off up to the master server",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           const std::string tag = text_of(a["tag"]);
           if (local_mode(ctx) && !cfg_true(ctx, "use_master_when_local")) {
             spdlog::warn("Local mode detected. Event with tag {} will NOT be sent.", tag);
             return value(false);
           }
           if (!ctx.master) return value(false);
           return send_to_master(ctx, a["data"], tag, a["preload"]);
         }});
  r.add({"event.fire",
         {{"data", {}}, {"tag", {}}},
         false,
         false,
         "Fire an event on the local minion event bus. Data must be formed as a dict.",
         {},
         [](call_context&, const bound_args& a) -> fn_result { return fire_local(a["data"], text_of(a["tag"])); }});
}

}  // namespace sylvite::minion
