// sylvite::cluster peer protocol (see peer_protocol.hpp).
#include "cluster/peer_protocol.hpp"

#include "cluster/cluster_pki.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::cluster {

using wire::value;

namespace {
constexpr crypto::sig_algo k_sig = crypto::sig_algo::pkcs1v15_sha224;

std::string signed_bytes(const value& m) {
  value copy = value::object();
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it.key() != "sig") copy[it.key()] = it.value();
  return wire::pack(copy, wire::packing::frame);
}
}  // namespace

void sign_message(value& m, const crypto::rsa_key& priv) {
  auto sig = crypto::sign(priv, signed_bytes(m), k_sig);
  m["sig"] = wire::make_bin(sig ? *sig : std::string());
}

bool verify_message(const value& m, const crypto::rsa_key& pub) {
  const value* s = wire::find(m, "sig");
  auto sig = s ? wire::as_bytes(*s) : std::nullopt;
  return sig && crypto::verify(pub, signed_bytes(m), *sig, k_sig);
}

std::string text_field(const value& m, const char* k) { return std::string(wire::get_text(m, k).value_or("")); }

value make_hello(const std::string& cluster_id, const std::string& my_id, const std::string& my_addr,
                 const crypto::rsa_key& my_priv, const std::string& nonce, std::int64_t now) {
  value m = value::object();
  m["cmd"] = "cluster/hello";
  m["v"] = 1;
  m["cluster_id"] = cluster_id;
  m["from"] = my_id;
  m["addr"] = my_addr;
  m["nonce"] = nonce;
  m["ts"] = now;
  sign_message(m, my_priv);
  return m;
}

std::optional<hello_info> verify_hello(const value& body, const std::string& my_cluster_id,
                                       const std::string& my_id, const key_lookup& keys, std::int64_t now,
                                       std::string& why) {
  if (!body.is_object()) return why = "not a map", std::nullopt;
  if (text_field(body, "cmd") != "cluster/hello") return why = "not a hello", std::nullopt;
  if (wire::get_int(body, "v").value_or(0) != 1) return why = "unsupported version", std::nullopt;
  if (text_field(body, "cluster_id") != my_cluster_id) return why = "another cluster_id", std::nullopt;
  hello_info h{text_field(body, "from"), text_field(body, "addr"), text_field(body, "nonce")};
  if (!valid_peer_id(h.from)) return why = "invalid peer id", std::nullopt;
  if (h.from == my_id) return why = "a hello from myself", std::nullopt;
  if (h.nonce.size() != 32) return why = "bad nonce", std::nullopt;
  if (h.addr.empty() || h.addr.size() > 300) return why = "bad address", std::nullopt;
  auto ts = wire::get_int(body, "ts");
  if (!ts || *ts < now - k_hello_window_s || *ts > now + k_hello_window_s) return why = "stale hello", std::nullopt;
  auto pub = keys(h.from);
  if (!pub) return why = "no peers/" + h.from + ".pub", std::nullopt;
  if (!verify_message(body, *pub)) return why = "bad signature", std::nullopt;
  return h;
}

bool nonce_cache::insert(const std::string& nonce, std::int64_t now) {
  while (!order_.empty() && order_.front().first < now - 2 * k_hello_window_s) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (!seen_.insert(nonce).second) return false;
  order_.emplace_back(now, nonce);
  return true;
}

value make_welcome(const std::string& my_id, const crypto::rsa_key& my_priv, const hello_info& h,
                   const crypto::rsa_key& peer_pub, const std::string& link_id, const std::string& link_key) {
  value m = value::object();
  m["cmd"] = "cluster/welcome";
  m["v"] = 1;
  m["from"] = my_id;
  m["to"] = h.from;
  m["nonce"] = h.nonce;
  m["link"] = link_id;
  auto enc = crypto::oaep_encrypt(peer_pub, link_key, crypto::enc_algo::oaep_sha1);
  m["key"] = wire::make_bin(enc ? *enc : std::string());
  sign_message(m, my_priv);
  return m;
}

std::optional<welcome_info> verify_welcome(const value& body, const std::string& my_id,
                                           const crypto::rsa_key& my_priv, const std::string& nonce,
                                           const key_lookup& keys, std::string& why) {
  if (!body.is_object()) return why = "not a map", std::nullopt;
  if (auto e = wire::get_text(body, "error")) return why = "refused: " + std::string(*e), std::nullopt;
  if (text_field(body, "cmd") != "cluster/welcome") return why = "not a welcome", std::nullopt;
  welcome_info w{text_field(body, "from"), text_field(body, "link"), {}};
  if (!valid_peer_id(w.from)) return why = "invalid peer id", std::nullopt;
  if (text_field(body, "to") != my_id) return why = "welcome addressed to another master", std::nullopt;
  if (text_field(body, "nonce") != nonce) return why = "nonce not echoed", std::nullopt;
  if (w.link.size() != 32) return why = "bad link id", std::nullopt;
  auto pub = keys(w.from);
  if (!pub) return why = "no peers/" + w.from + ".pub", std::nullopt;
  if (!verify_message(body, *pub)) return why = "bad signature", std::nullopt;
  const value* k = wire::find(body, "key");
  auto enc = k ? wire::as_bytes(*k) : std::nullopt;
  if (!enc) return why = "no key", std::nullopt;
  auto key = crypto::oaep_decrypt(my_priv, *enc, crypto::enc_algo::oaep_sha1);
  if (!key || !crypto::crypticle::from_key_string(*key)) return why = "link key does not decrypt", std::nullopt;
  w.key = std::move(*key);
  return w;
}

value seal_batch(const crypto::crypticle& k, const std::string& link, std::uint64_t seq,
                 const std::vector<peer_message>& msgs) {
  value inner = value::object();
  inner["seq"] = seq;
  value arr = value::array();
  for (const auto& m : msgs) {
    value e = value::object();
    e["type"] = m.type;
    e["body"] = m.body;
    arr.push_back(std::move(e));
  }
  inner["msgs"] = std::move(arr);
  value out = value::object();
  out["cmd"] = "cluster/msg";
  out["link"] = link;
  out["data"] = wire::make_bin(k.dumps(inner));
  return out;
}

std::optional<std::vector<peer_message>> open_batch(const crypto::crypticle& k, const value& body,
                                                    std::uint64_t expected_seq, std::string& why) {
  const value* d = wire::find(body, "data");
  auto data = d ? wire::as_bytes(*d) : std::nullopt;
  if (!data) return why = "no data", std::nullopt;
  auto inner = k.loads(*data, {}, false);
  if (!inner || !inner->is_object()) return why = "does not decrypt", std::nullopt;
  auto seq = wire::get_int(*inner, "seq");
  if (!seq || static_cast<std::uint64_t>(*seq) != expected_seq) return why = "sequence mismatch (replay?)", std::nullopt;
  const value* msgs = wire::find(*inner, "msgs");
  if (!msgs || !msgs->is_array()) return why = "no messages", std::nullopt;
  std::vector<peer_message> out;
  for (const auto& e : *msgs) {
    if (!e.is_object()) return why = "bad message", std::nullopt;
    auto type = wire::get_text(e, "type");
    const value* b = wire::find(e, "body");
    if (!type || !b) return why = "bad message", std::nullopt;
    out.push_back(peer_message{std::string(*type), *b});
  }
  return out;
}

value seal_ack(const crypto::crypticle& k, std::uint64_t seq) {
  value inner = value::object();
  inner["ok"] = true;
  inner["seq"] = seq;
  value out = value::object();
  out["data"] = wire::make_bin(k.dumps(inner));
  return out;
}

bool open_ack(const crypto::crypticle& k, const value& body, std::uint64_t seq, std::string& why) {
  if (!body.is_object()) return why = "not a map", false;
  if (auto e = wire::get_text(body, "error")) return why = std::string(*e), false;
  const value* d = wire::find(body, "data");
  auto data = d ? wire::as_bytes(*d) : std::nullopt;
  if (!data) return why = "no data", false;
  auto inner = k.loads(*data, {}, false);
  if (!inner || !inner->is_object()) return why = "ack does not decrypt", false;
  if (wire::get_int(*inner, "seq").value_or(-1) != static_cast<std::int64_t>(seq)) return why = "ack seq mismatch", false;
  return true;
}

}  // namespace sylvite::cluster
