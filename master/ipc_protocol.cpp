// sylvite::master CLI IPC messages (see ipc_protocol.hpp). The key order of every
// encoder is the order the CLIs and the master built by hand before these structs
// existed (maps are ordered: the bytes on the socket are unchanged).
#include "master/ipc_protocol.hpp"

#include <algorithm>

namespace sylvite::master::ipc {

using wire::value;

namespace {

// Field readers: nullopt value = absent; an error string = present with the wrong type.
struct field_error {
  std::string why;
};

// Text member: absent -> nullopt; present but not str/bin -> error.
std::optional<std::string> text_field(const value& m, const char* key, const std::string& cmd,
                                      std::optional<field_error>& err) {
  const value* v = wire::find(m, key);
  if (!v) return std::nullopt;
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (!err) err = field_error{cmd + ": " + key + " must be a string"};
  return std::nullopt;
}

std::optional<std::int64_t> int_field(const value& m, const char* key, const std::string& cmd,
                                      std::optional<field_error>& err) {
  const value* v = wire::find(m, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return wire::get_int(m, key);
  if (!err) err = field_error{cmd + ": " + key + " must be an integer"};
  return std::nullopt;
}

std::optional<bool> bool_field(const value& m, const char* key, const std::string& cmd,
                               std::optional<field_error>& err) {
  const value* v = wire::find(m, key);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  if (!err) err = field_error{cmd + ": " + key + " must be true or false"};
  return std::nullopt;
}

// A member of the given shape (array / object); absent -> nullopt.
std::optional<value> shaped_field(const value& m, const char* key, bool want_array, const std::string& cmd,
                                  std::optional<field_error>& err) {
  const value* v = wire::find(m, key);
  if (!v) return std::nullopt;
  if (want_array ? v->is_array() : v->is_object()) return *v;
  if (!err) err = field_error{cmd + ": " + key + (want_array ? " must be a list" : " must be a map")};
  return std::nullopt;
}

// A list of text; absent -> empty.
std::vector<std::string> text_list(const value& m, const char* key, const std::string& what,
                                   std::optional<field_error>& err) {
  std::vector<std::string> out;
  const value* v = wire::find(m, key);
  if (!v) return out;
  if (!v->is_array()) {
    if (!err) err = field_error{what + ": " + key + " must be a list"};
    return out;
  }
  for (const auto& i : *v) {
    if (auto t = wire::as_text(i)) out.emplace_back(*t);
    else if (!err) err = field_error{what + ": " + key + " must hold strings only"};
  }
  return out;
}

bool is_text_or_text_list(const value& v) {
  if (wire::as_text(v)) return true;
  if (!v.is_array()) return false;
  return std::all_of(v.begin(), v.end(), [](const value& i) { return wire::as_text(i).has_value(); });
}

decoded<request> decode_publish(const value& b) {
  const std::string cmd = "publish";
  std::optional<field_error> err;
  publish p;
  const value* tgt = wire::find(b, "tgt");
  if (!tgt) return decoded<request>::refuse("publish: tgt missing");
  if (!is_text_or_text_list(*tgt)) return decoded<request>::refuse("publish: tgt must be a string or a list of ids");
  p.tgt = wire::as_text(*tgt) ? value(std::string(*wire::as_text(*tgt))) : *tgt;
  const value* fun = wire::find(b, "fun");
  if (!fun) return decoded<request>::refuse("publish: fun missing");
  if (!is_text_or_text_list(*fun)) return decoded<request>::refuse("publish: fun must be a string or a list");
  p.fun = wire::as_text(*fun) ? value(std::string(*wire::as_text(*fun))) : *fun;
  if (auto s = text_field(b, "tgt_type", cmd, err)) p.tgt_type = *s;
  if (auto a = shaped_field(b, "arg", true, cmd, err)) p.arg = std::move(*a);
  p.kwarg = shaped_field(b, "kwarg", false, cmd, err);
  if (auto s = text_field(b, "ret", cmd, err)) p.ret = *s;
  p.timeout = int_field(b, "timeout", cmd, err);
  if (auto s = text_field(b, "user", cmd, err)) p.user = *s;
  if (auto s = text_field(b, "delimiter", cmd, err); s && !s->empty()) p.delimiter = *s;
  p.jid = text_field(b, "jid", cmd, err);
  if (p.jid && p.jid->empty()) p.jid.reset();
  p.wait = bool_field(b, "wait", cmd, err).value_or(false);
  // Publish options: any value (Salt passes them through to the minion's load).
  auto opt = [&](const char* k) -> std::optional<value> {
    if (const value* v = wire::find(b, k)) return *v;
    return std::nullopt;
  };
  p.ret_config = opt("ret_config");
  p.ret_kwargs = opt("ret_kwargs");
  p.metadata = opt("metadata");
  p.module_executors = opt("module_executors");
  p.executor_opts = opt("executor_opts");
  p.start_event = bool_field(b, "start_event", cmd, err).value_or(false);
  p.kwargs = shaped_field(b, "kwargs", false, cmd, err);
  if (err) return decoded<request>::refuse(err->why);
  return decoded<request>::ok(std::move(p));
}

decoded<request> decode_runner(const value& b) {
  const std::string cmd = "runner";
  std::optional<field_error> err;
  runner r;
  auto fun = text_field(b, "fun", cmd, err);
  if (err) return decoded<request>::refuse(err->why);
  if (!fun || fun->empty()) return decoded<request>::refuse("runner: fun missing");
  r.fun = *fun;
  if (auto a = shaped_field(b, "arg", true, cmd, err)) r.arg = std::move(*a);
  if (auto k = shaped_field(b, "kwarg", false, cmd, err)) r.kwarg = std::move(*k);
  r.timeout = int_field(b, "timeout", cmd, err);
  r.jid = text_field(b, "jid", cmd, err);
  r.user = text_field(b, "user", cmd, err);
  if (err) return decoded<request>::refuse(err->why);
  return decoded<request>::ok(std::move(r));
}

decoded<request> decode_key_event(const value& b) {
  std::optional<field_error> err;
  key_event k;
  auto act = text_field(b, "act", "key_event", err);
  if (!act || (*act != "accept" && *act != "reject" && *act != "delete"))
    return decoded<request>::refuse("key_event: act must be accept, reject or delete");
  k.act = *act;
  if (!wire::find(b, "ids")) return decoded<request>::refuse("key_event: ids missing");
  k.ids = text_list(b, "ids", "key_event", err);
  k.rotate = bool_field(b, "rotate", "key_event", err);
  if (err) return decoded<request>::refuse(err->why);
  return decoded<request>::ok(std::move(k));
}

decoded<request> decode_local_return(const value& b) {
  local_return l;
  l.load = b;
  l.load.erase("cmd");
  if (!wire::find(l.load, "jid")) l.load["jid"] = "req";
  auto id = wire::get_text(l.load, "id");
  auto jid = wire::get_text(l.load, "jid");
  // The master also checks the id as a minion id (pki::valid_id): it names job cache files.
  if (!id || id->empty() || !wire::find(l.load, "return") || !jid)
    return decoded<request>::refuse("local_return needs a valid id and a return");
  l.id = std::string(*id);
  l.jid = std::string(*jid);
  return decoded<request>::ok(std::move(l));
}

template <class T>
decoded<T> refuse_not_map(const char* what) {
  return decoded<T>::refuse(std::string(what) + ": reply is not a map");
}

std::optional<error_reply> error_of(const value& body) {
  if (const value* e = wire::find(body, "error")) {
    if (auto t = wire::as_text(*e)) return error_reply{std::string(*t)};
    return error_reply{e->dump()};
  }
  return std::nullopt;
}

}  // namespace

// ---- requests ---------------------------------------------------------------------------

value encode(const ping&) { return value{{"cmd", "ping"}}; }

value encode(const publish& p) {
  value b = value::object();
  b["cmd"] = "publish";
  b["tgt"] = p.tgt;
  b["tgt_type"] = p.tgt_type;
  b["fun"] = p.fun;
  b["arg"] = p.arg;
  if (p.kwarg) b["kwarg"] = *p.kwarg;
  b["ret"] = p.ret;
  if (p.timeout) b["timeout"] = *p.timeout;
  b["user"] = p.user;
  b["delimiter"] = p.delimiter;
  if (p.jid) b["jid"] = *p.jid;
  b["wait"] = p.wait;
  if (p.ret_config) b["ret_config"] = *p.ret_config;
  if (p.ret_kwargs) b["ret_kwargs"] = *p.ret_kwargs;
  if (p.metadata) b["metadata"] = *p.metadata;
  if (p.module_executors) b["module_executors"] = *p.module_executors;
  if (p.executor_opts) b["executor_opts"] = *p.executor_opts;
  if (p.start_event) b["start_event"] = true;
  if (p.kwargs) b["kwargs"] = *p.kwargs;
  return b;
}

value encode(const runner& r) {
  value b = {{"cmd", "runner"}, {"fun", r.fun}, {"arg", r.arg}, {"kwarg", r.kwarg}};
  if (r.timeout) b["timeout"] = *r.timeout;
  if (r.jid) b["jid"] = *r.jid;
  if (r.user) b["user"] = *r.user;
  return b;
}

value encode(const key_event& k) {
  value b = {{"cmd", "key_event"}, {"act", k.act}, {"ids", k.ids}};
  if (k.rotate) b["rotate"] = *k.rotate;
  return b;
}

value encode(const local_return& l) {
  value b = value::object();
  b["cmd"] = "local_return";
  if (l.load.is_object()) {
    for (const auto& [k, v] : l.load.items()) {
      if (k != "cmd") b[k] = v;
    }
  }
  b["id"] = l.id;
  b["jid"] = l.jid;
  return b;
}

value encode(const request& r) {
  return std::visit([](const auto& m) { return encode(m); }, r);
}

std::string command_of(const value& body) {
  auto c = wire::get_text(body, "cmd");
  return c ? std::string(*c) : std::string();
}

decoded<request> decode_request(const value& body) {
  if (!body.is_object()) return decoded<request>::refuse("bad request: the body is not a map");
  const std::string cmd = command_of(body);
  if (cmd == "ping") return decoded<request>::ok(ping{});
  if (cmd == "publish") return decode_publish(body);
  if (cmd == "runner") return decode_runner(body);
  if (cmd == "key_event") return decode_key_event(body);
  if (cmd == "local_return") return decode_local_return(body);
  return decoded<request>::refuse("unknown command '" + cmd + "'");
}

// ---- replies ----------------------------------------------------------------------------

int retcode_of(const return_item& r) {
  const value& rc = r.retcode;
  if (rc.is_number_integer()) return static_cast<int>(rc.get<std::int64_t>());
  if (rc.is_object() || rc.is_array()) {
    int m = 0;
    for (const auto& v : rc)
      if (v.is_number_integer()) m = std::max(m, static_cast<int>(v.get<std::int64_t>()));
    return m;
  }
  return 0;
}

return_item return_item_of(const std::string& id, const std::string& jid, const value& load) {
  return_item item;
  item.id = id;
  item.jid = jid;
  if (const value* r = wire::find(load, "return")) item.ret = *r;
  item.retcode = wire::get_int(load, "retcode").value_or(0);
  if (const value* s = wire::find(load, "success")) item.success = *s;
  if (auto o = wire::get_text(load, "out")) item.out = std::string(*o);
  return item;
}

value encode(const error_reply& e) { return value{{"error", e.error}}; }
value encode(const ping_reply& p) { return value{{"ok", true}, {"id", p.id}}; }

value encode(const publish_head& h) {
  value b = value::object();
  b["jid"] = h.jid;
  b["minions"] = h.minions;
  b["missing"] = h.missing;
  return b;
}

value encode(const return_item& r) {
  value b = value::object();
  b["id"] = r.id;
  b["jid"] = r.jid;
  b["return"] = r.ret;
  b["retcode"] = r.retcode;
  b["success"] = r.success;
  if (r.out) b["out"] = *r.out;
  return b;
}

value encode(const publish_done& d) {
  return value{{"done", true}, {"jid", d.jid}, {"no_return", d.no_return}};
}

value encode(const runner_reply& r) { return value{{"return", r.ret}, {"retcode", r.retcode}}; }
value encode(const key_event_reply& k) { return value{{"ok", true}, {"rotated", k.rotated}}; }
value encode(const local_return_reply& l) { return value{{"ok", true}, {"jid", l.jid}}; }
value encode(const event_item& e) { return value{{"tag", e.tag}, {"data", e.data}}; }

decoded<event_item> decode_event_item(const value& body) {
  if (!body.is_object()) return decoded<event_item>::refuse("state.event item is not a map");
  auto tag = wire::get_text(body, "tag");
  const value* data = wire::find(body, "data");
  if (!tag || !data) return decoded<event_item>::refuse("state.event item without tag or data");
  return decoded<event_item>::ok(event_item{std::string(*tag), *data});
}

decoded<ping_result> decode_ping_reply(const value& body) {
  if (!body.is_object()) return refuse_not_map<ping_result>("ping");
  if (auto e = error_of(body)) return decoded<ping_result>::ok(*e);
  std::optional<field_error> err;
  ping_reply p;
  if (auto s = text_field(body, "id", "ping", err)) p.id = *s;
  if (err) return decoded<ping_result>::refuse(err->why);
  return decoded<ping_result>::ok(p);
}

namespace {
decoded<publish_head> decode_head(const value& body) {
  std::optional<field_error> err;
  publish_head h;
  auto jid = text_field(body, "jid", "publish", err);
  if (!jid && !err) return decoded<publish_head>::refuse("publish: jid missing");
  if (jid) h.jid = *jid;
  h.minions = text_list(body, "minions", "publish", err);
  h.missing = text_list(body, "missing", "publish", err);
  if (err) return decoded<publish_head>::refuse(err->why);
  return decoded<publish_head>::ok(std::move(h));
}
}  // namespace

decoded<async_publish_result> decode_async_publish_reply(const value& body) {
  if (!body.is_object()) return refuse_not_map<async_publish_result>("publish");
  if (auto e = error_of(body)) return decoded<async_publish_result>::ok(*e);
  auto h = decode_head(body);
  if (!h) return decoded<async_publish_result>::refuse(h.error);
  return decoded<async_publish_result>::ok(std::move(*h));
}

decoded<publish_push> decode_publish_push(const value& body) {
  if (!body.is_object()) return refuse_not_map<publish_push>("publish");
  if (wire::find(body, "id")) {
    std::optional<field_error> err;
    auto id = text_field(body, "id", "return", err);
    if (!id) return decoded<publish_push>::refuse(err ? err->why : "return: id missing");
    return_item r;
    r.id = *id;
    if (auto j = text_field(body, "jid", "return", err)) r.jid = *j;
    if (const value* v = wire::find(body, "return")) r.ret = *v;
    if (const value* v = wire::find(body, "retcode")) r.retcode = *v;
    if (const value* v = wire::find(body, "success")) r.success = *v;
    r.out = text_field(body, "out", "return", err);
    if (err) return decoded<publish_push>::refuse(err->why);
    return decoded<publish_push>::ok(std::move(r));
  }
  auto h = decode_head(body);
  if (!h) return decoded<publish_push>::refuse(h.error);
  return decoded<publish_push>::ok(std::move(*h));
}

decoded<publish_final> decode_publish_final(const value& body) {
  if (!body.is_object()) return refuse_not_map<publish_final>("publish");
  if (auto e = error_of(body)) return decoded<publish_final>::ok(*e);
  std::optional<field_error> err;
  publish_done d;
  if (auto j = text_field(body, "jid", "publish", err)) d.jid = *j;
  d.no_return = text_list(body, "no_return", "publish", err);
  if (err) return decoded<publish_final>::refuse(err->why);
  return decoded<publish_final>::ok(std::move(d));
}

decoded<runner_result> decode_runner_reply(const value& body) {
  if (!body.is_object()) return refuse_not_map<runner_result>("runner");
  if (auto e = error_of(body)) return decoded<runner_result>::ok(*e);
  std::optional<field_error> err;
  runner_reply r;
  if (const value* v = wire::find(body, "return")) r.ret = *v;
  r.retcode = int_field(body, "retcode", "runner", err).value_or(0);
  if (err) return decoded<runner_result>::refuse(err->why);
  return decoded<runner_result>::ok(std::move(r));
}

decoded<key_event_result> decode_key_event_reply(const value& body) {
  if (!body.is_object()) return refuse_not_map<key_event_result>("key_event");
  if (auto e = error_of(body)) return decoded<key_event_result>::ok(*e);
  std::optional<field_error> err;
  key_event_reply k;
  k.rotated = bool_field(body, "rotated", "key_event", err).value_or(false);
  if (err) return decoded<key_event_result>::refuse(err->why);
  return decoded<key_event_result>::ok(k);
}

decoded<local_return_result> decode_local_return_reply(const value& body) {
  if (!body.is_object()) return refuse_not_map<local_return_result>("local_return");
  if (auto e = error_of(body)) return decoded<local_return_result>::ok(*e);
  std::optional<field_error> err;
  local_return_reply l;
  if (auto j = text_field(body, "jid", "local_return", err)) l.jid = *j;
  if (err) return decoded<local_return_result>::refuse(err->why);
  return decoded<local_return_result>::ok(std::move(l));
}

}  // namespace sylvite::master::ipc
