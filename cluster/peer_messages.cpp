// sylvite::cluster typed peer-bus messages (see peer_messages.hpp).
#include "cluster/peer_messages.hpp"

#include "core/pki/key_store.hpp"

namespace sylvite::cluster {

using wire::value;

const std::string* find_pem(const id_pems& m, std::string_view id) {
  for (const auto& [k, v] : m)
    if (k == id) return &v;
  return nullptr;
}

const value* msg::cluster_key::sealed_for(std::string_view id) const {
  for (const auto& [k, v] : sealed)
    if (k == id) return &v;
  return nullptr;
}

namespace {
value pems_value(const id_pems& m) {
  value out = value::object();
  for (const auto& [id, pem] : m) out[id] = pem;
  return out;
}

// ---- encode: one function per type, keys in the order earlier versions built them -----------
value body_of(const msg::publish& m) {
  value b = value::object();
  b["jid"] = m.jid;
  b["frame"] = wire::make_bin(m.frame);
  b["targets"] = m.targets ? value(*m.targets) : value(nullptr);
  return b;
}
value body_of(const msg::ret& m) {
  value b = value::object();
  b["jid"] = m.jid;
  b["id"] = m.id;
  b["load"] = m.load;
  return b;
}
value body_of(const msg::aes& m) {
  value b = value::object();
  b["why"] = m.why;
  if (m.key) b["key"] = *m.key;
  if (m.gen) b["gen"] = *m.gen;
  return b;
}
value body_of(const msg::aes_rotate& m) { return value{{"why", m.why}}; }
value body_of(const msg::key_event& m) {
  value b = value::object();
  b["act"] = m.act;
  b["ids"] = value(m.ids);
  b["local"] = m.local;
  if (m.pubs) b["pubs"] = pems_value(*m.pubs);
  return b;
}
value body_of(const msg::cluster_key& m) {
  value sealed = value::object();
  for (const auto& [id, box] : m.sealed) sealed[id] = box;
  value b = value::object();
  b["pub"] = m.pub;
  b["sealed"] = std::move(sealed);
  return b;
}
value body_of(const msg::key_sync& m) {
  value b = value::object();
  if (m.asker) b["for"] = *m.asker;
  if (m.seq) b["seq"] = *m.seq;
  return b;
}
value body_of(const msg::keys& m) {
  value b = value::object();
  b["accepted"] = pems_value(m.accepted);
  b["rejected"] = pems_value(m.rejected);
  if (m.asker) b["for"] = *m.asker;
  if (m.seq) b["seq"] = *m.seq;
  if (m.aes) b["aes"] = *m.aes;
  if (m.aes_gen) b["aes_gen"] = *m.aes_gen;
  if (m.share) b["share"] = true;
  if (!m.pending.empty()) {
    value p = value::array();
    for (const auto& id : m.pending) p.push_back(id);
    b["pending"] = std::move(p);
  }
  return b;
}
value body_of(const msg::join& m) {
  value b = value::object();
  b["id"] = m.id;
  b["pub"] = m.pub;
  b["addr"] = m.addr;
  b["local"] = m.local;
  return b;
}
value body_of(const msg::leave& m) { return value{{"id", m.id}}; }
value body_of(const msg::event& m) {
  value b = value::object();
  b["tag"] = m.tag;
  b["data"] = m.data;
  b["origin"] = m.origin;
  if (m.eid) b["eid"] = *m.eid;
  return b;
}
value body_of(const msg::presence& m) {
  value mins = value::object();
  for (const auto& i : m.minions) mins[i.id] = value::array({value(i.connected), value(i.last_ms)});
  value b = value::object();
  b["full"] = m.full;
  b["minions"] = std::move(mins);
  if (m.aes) b["aes"] = *m.aes;
  return b;
}

// ---- decode helpers: each returns false with the reason in why -------------------------------
struct reader {
  const value& body;
  std::string& why;

  bool fail(std::string w) {
    why = std::move(w);
    return false;
  }
  bool text(const char* k, std::string& out) {
    const value* v = wire::find(body, k);
    if (!v) return fail(std::string("no ") + k);
    auto t = wire::as_text(*v);
    if (!t) return fail(std::string(k) + " is not text");
    out = std::string(*t);
    return true;
  }
  bool opt_text(const char* k, std::optional<std::string>& out) {
    const value* v = wire::find(body, k);
    if (!v) return true;
    auto t = wire::as_text(*v);
    if (!t) return fail(std::string(k) + " is not text");
    out = std::string(*t);
    return true;
  }
  bool opt_text(const char* k, std::string& out) {
    std::optional<std::string> t;
    if (!opt_text(k, t)) return false;
    out = t.value_or("");
    return true;
  }
  bool opt_bool(const char* k, bool& out) {
    const value* v = wire::find(body, k);
    if (!v) return true;
    if (!v->is_boolean()) return fail(std::string(k) + " is not a bool");
    out = v->get<bool>();
    return true;
  }
  bool opt_int(const char* k, std::optional<std::int64_t>& out) {
    const value* v = wire::find(body, k);
    if (!v) return true;
    auto i = wire::get_int(body, k);
    if (!i) return fail(std::string(k) + " is not an integer");
    out = *i;
    return true;
  }
  bool text_list(const value& v, const char* k, std::vector<std::string>& out) {
    if (!v.is_array()) return fail(std::string(k) + " is not a list");
    for (const auto& x : v) {
      auto t = wire::as_text(x);
      if (!t) return fail(std::string(k) + " holds a non-text entry");
      out.emplace_back(*t);
    }
    return true;
  }
  bool pems(const value& v, const char* k, id_pems& out) {
    if (!v.is_object()) return fail(std::string(k) + " is not a map");
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto t = wire::as_text(it.value());
      if (!t) return fail(std::string(k) + "[" + it.key() + "] is not text");
      out.emplace_back(it.key(), std::string(*t));
    }
    return true;
  }
  bool opt_pems(const char* k, id_pems& out) {
    const value* v = wire::find(body, k);
    return !v || pems(*v, k, out);
  }
};

bool read(reader& r, msg::publish& m) {
  if (!r.text("jid", m.jid)) return false;
  const value* f = wire::find(r.body, "frame");
  auto frame = f ? wire::as_bytes(*f) : std::nullopt;
  if (!frame) return r.fail("no frame");
  m.frame = std::string(*frame);
  const value* t = wire::find(r.body, "targets");
  if (t && !t->is_null()) {
    m.targets.emplace();
    if (!r.text_list(*t, "targets", *m.targets)) return false;
  }
  return true;
}
bool read(reader& r, msg::ret& m) {
  if (!r.text("jid", m.jid) || !r.text("id", m.id)) return false;
  if (!pki::valid_id(m.id)) return r.fail("invalid minion id");
  const value* load = wire::find(r.body, "load");
  if (!load) return r.fail("no load");
  m.load = *load;
  return true;
}
bool read(reader& r, msg::aes& m) {
  if (!r.opt_text("why", m.why) || !r.opt_text("key", m.key) || !r.opt_int("gen", m.gen)) return false;
  if (m.gen && *m.gen < 0) return r.fail("gen is negative");
  return true;
}
bool read(reader& r, msg::aes_rotate& m) { return r.opt_text("why", m.why); }
bool read(reader& r, msg::key_event& m) {
  if (!r.text("act", m.act)) return false;
  const value* ids = wire::find(r.body, "ids");
  if (!ids) return r.fail("no ids");
  if (!r.text_list(*ids, "ids", m.ids) || !r.opt_bool("local", m.local)) return false;
  if (const value* p = wire::find(r.body, "pubs")) {
    m.pubs.emplace();
    if (!r.pems(*p, "pubs", *m.pubs)) return false;
  }
  return true;
}
bool read(reader& r, msg::cluster_key& m) {
  if (!r.text("pub", m.pub)) return false;
  if (m.pub.empty()) return r.fail("empty pub");
  if (const value* s = wire::find(r.body, "sealed")) {
    if (!s->is_object()) return r.fail("sealed is not a map");
    for (auto it = s->begin(); it != s->end(); ++it) m.sealed.emplace_back(it.key(), it.value());
  }
  return true;
}
bool read(reader& r, msg::key_sync& m) { return r.opt_text("for", m.asker) && r.opt_int("seq", m.seq); }
bool read(reader& r, msg::keys& m) {
  if (!r.opt_pems("accepted", m.accepted) || !r.opt_pems("rejected", m.rejected) || !r.opt_text("for", m.asker) ||
      !r.opt_int("seq", m.seq) || !r.opt_text("aes", m.aes) || !r.opt_int("aes_gen", m.aes_gen) ||
      !r.opt_bool("share", m.share))
    return false;
  if (const value* p = wire::find(r.body, "pending"); p && !r.text_list(*p, "pending", m.pending)) return false;
  if (m.aes_gen && *m.aes_gen < 0) return r.fail("aes_gen is negative");
  return true;
}
bool read(reader& r, msg::join& m) {
  return r.text("id", m.id) && r.text("pub", m.pub) && r.opt_text("addr", m.addr) && r.opt_bool("local", m.local);
}
bool read(reader& r, msg::leave& m) { return r.text("id", m.id); }
bool read(reader& r, msg::event& m) {
  if (!r.text("tag", m.tag) || !r.text("origin", m.origin)) return false;
  if (m.tag.empty() || m.tag.size() > 512) return r.fail("tag is empty or longer than 512 bytes");
  if (m.tag.find('\0') != std::string::npos) return r.fail("tag holds a NUL byte");
  if (!pki::valid_id(m.origin)) return r.fail("invalid origin master id");
  if (!r.opt_text("eid", m.eid)) return false;
  if (m.eid && m.eid->size() > 128) return r.fail("eid longer than 128 bytes");
  const value* d = wire::find(r.body, "data");
  if (!d) return r.fail("no data");
  if (!d->is_object()) return r.fail("data is not a map");
  m.data = *d;
  return true;
}
bool read(reader& r, msg::presence& m) {
  if (!r.opt_bool("full", m.full) || !r.opt_text("aes", m.aes)) return false;
  if (m.aes && m.aes->size() > 128) return r.fail("aes longer than 128 bytes");
  const value* mins = wire::find(r.body, "minions");
  if (!mins) return r.fail("no minions");
  if (!mins->is_object()) return r.fail("minions is not a map");
  for (auto it = mins->begin(); it != mins->end(); ++it) {
    if (!pki::valid_id(it.key())) return r.fail("invalid minion id");
    const value& e = it.value();
    if (!e.is_array() || e.size() != 2 || !e[0].is_boolean() || !e[1].is_number_integer())
      return r.fail("minions[" + it.key() + "] is not [connected, last_ms]");
    m.minions.push_back({it.key(), e[0].get<bool>(), e[1].get<std::int64_t>()});
  }
  return true;
}

template <std::size_t I>
std::optional<peer_msg> decode_as(const value& body, std::string& why) {
  std::variant_alternative_t<I, peer_msg> m;
  reader r{body, why};
  if (!read(r, m)) return std::nullopt;
  return peer_msg(std::in_place_index<I>, std::move(m));
}

template <std::size_t... I>
std::optional<peer_msg> decode_kind(std::size_t k, const value& body, std::string& why, std::index_sequence<I...>) {
  std::optional<peer_msg> out;
  ((k == I ? (out = decode_as<I>(body, why), true) : false) || ...);
  return out;
}
}  // namespace

peer_message encode(const peer_msg& m) {
  return peer_message{std::string(type_of(kind_of(m))), std::visit([](const auto& x) { return body_of(x); }, m)};
}

std::optional<peer_msg> decode(std::string_view type, const value& body, std::string& why) {
  auto k = kind_of(type);
  if (!k) {
    why = "unknown message type";
    return std::nullopt;
  }
  if (!body.is_object()) {
    why = "body is not a map";
    return std::nullopt;
  }
  return decode_kind(static_cast<std::size_t>(*k), body, why, std::make_index_sequence<std::variant_size_v<peer_msg>>{});
}

}  // namespace sylvite::cluster
