// sylvite::cluster join handshake (see join.hpp).
#include "cluster/join.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <vector>

#include "cluster/cluster_pki.hpp"
#include "cluster/peer_protocol.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::cluster {

namespace fs = std::filesystem;
using wire::value;

namespace {
constexpr crypto::sig_algo k_sig = crypto::sig_algo::pkcs1v15_sha224;  // the endorsement

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool is_hex32(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

std::string endorsement_bytes(const std::string& p, const std::string& p_pub, const std::string& j,
                              const std::string& token) {
  value v = value::array({value("sylvite-join-endorsement"), value(p), value(trim(p_pub)), value(j), value(token)});
  return wire::pack(v, wire::packing::frame);
}

// The join proof: HMAC-SHA256 keyed with the secret over what binds it to this join (the
// joiner, its key, the answering member's key, the token). The secret never travels.
std::string join_proof(const std::string& secret, const std::string& j, const std::string& j_pub,
                       const std::string& p_pub, const std::string& token) {
  value v = value::array({value("sylvite-join-proof"), value(j), value(trim(j_pub)), value(trim(p_pub)), value(token)});
  return crypto::hmac_sha256(secret, wire::pack(v, wire::packing::frame));
}


std::string norm_fp(const std::string& f) {
  std::string out;
  for (unsigned char c : f)
    if (c != ':' && !std::isspace(c)) out.push_back(static_cast<char>(std::tolower(c)));
  return out;
}

bool same_pem(const std::string& a, const std::string& b) { return trim(a) == trim(b); }

// The envelope every handshake message shares: a map; for replies, no {error: ...} from
// the peer; `cmd` ("cluster/<name>", refused as "not a <name>"); for requests, v 1.
bool envelope_ok(const value& body, std::string_view cmd, bool reply, std::string& why) {
  if (!body.is_object()) return why = "not a map", false;
  if (reply) {
    if (auto e = wire::get_text(body, "error")) return why = "refused by the peer: " + std::string(*e), false;
  }
  if (text_field(body, "cmd") != cmd) return why = "not a " + std::string(cmd.substr(cmd.find('/') + 1)), false;
  if (!reply && wire::get_int(body, "v").value_or(0) != 1) return why = "unsupported version", false;
  return true;
}
}  // namespace

// Hybrid seal to a public key: a fresh Crypticle key OAEP-encrypted, the text under it.
value seal_to(const crypto::rsa_key& pub, const std::string& plain) {
  const std::string ks = crypto::crypticle::generate_key_string();
  auto c = crypto::crypticle::from_key_string(ks);
  auto k = crypto::oaep_encrypt(pub, ks, crypto::enc_algo::oaep_sha1);
  value out = value::object();
  out["k"] = wire::make_bin(k ? *k : std::string());
  out["d"] = wire::make_bin(c ? c->dumps(value(plain)) : std::string());
  return out;
}

std::optional<std::string> open_sealed(const crypto::rsa_key& priv, const value* sealed) {
  if (!sealed || !sealed->is_object()) return std::nullopt;
  const value* kv = wire::find(*sealed, "k");
  const value* dv = wire::find(*sealed, "d");
  auto k = kv ? wire::as_bytes(*kv) : std::nullopt;
  auto d = dv ? wire::as_bytes(*dv) : std::nullopt;
  if (!k || !d) return std::nullopt;
  auto ks = crypto::oaep_decrypt(priv, *k, crypto::enc_algo::oaep_sha1);
  if (!ks) return std::nullopt;
  auto c = crypto::crypticle::from_key_string(*ks);
  if (!c) return std::nullopt;
  auto v = c->loads(*d, {}, false);
  if (!v) return std::nullopt;
  auto t = wire::as_text(*v);
  if (!t) return std::nullopt;
  return std::string(*t);
}

// ---- discover ---------------------------------------------------------------------------------
value make_discover(const std::string& cluster_id, const std::string& my_id, const std::string& my_pub_pem,
                    const std::string& my_addr, const crypto::rsa_key& my_priv, const std::string& nonce,
                    std::int64_t now) {
  value m = value::object();
  m["cmd"] = "cluster/discover";
  m["v"] = 1;
  m["cluster_id"] = cluster_id;
  m["from"] = my_id;
  m["pub"] = my_pub_pem;
  m["addr"] = my_addr;
  m["nonce"] = nonce;
  m["ts"] = now;
  sign_message(m, my_priv);
  return m;
}

std::optional<discover_info> verify_discover(const value& body, const std::string& my_cluster_id,
                                             const std::string& my_id, std::int64_t now, std::string& why) {
  if (!envelope_ok(body, "cluster/discover", false, why)) return std::nullopt;
  if (text_field(body, "cluster_id") != my_cluster_id) return why = "another cluster_id", std::nullopt;
  discover_info d{text_field(body, "from"), text_field(body, "pub"), text_field(body, "addr"), text_field(body, "nonce")};
  if (!valid_peer_id(d.from)) return why = "invalid peer id", std::nullopt;
  if (d.from == my_id) return why = "a discover from myself", std::nullopt;
  if (!is_hex32(d.nonce)) return why = "bad nonce", std::nullopt;
  if (d.addr.empty() || d.addr.size() > 300) return why = "bad address", std::nullopt;
  auto ts = wire::get_int(body, "ts");
  if (!ts || *ts < now - k_discover_window_s || *ts > now + k_discover_window_s)
    return why = "stale discover", std::nullopt;
  auto pub = crypto::rsa_key::from_public_pem(d.pub_pem);
  if (!pub) return why = "bad public key", std::nullopt;
  if (!verify_message(body, *pub)) return why = "bad signature", std::nullopt;
  return d;
}

// ---- pending joins ----------------------------------------------------------------------------
void pending_joins::expire(std::int64_t now) {
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    if (it->second.expires <= now) it = by_id_.erase(it);
    else ++it;
  }
}

bool pending_joins::full_for(const discover_info& d, const std::string& source, std::int64_t now, std::string& why) {
  expire(now);
  auto it = by_id_.find(d.from);
  if (it != by_id_.end()) {
    if (it->second.pub_pem != d.pub_pem) return why = "a join of '" + d.from + "' is pending already (another key)", true;
    return false;  // the same joiner again: replaces its own token
  }
  if (by_id_.size() >= k_max_pending_joins) return why = "too many pending joins; retry in a minute", true;
  std::size_t mine = 0;
  for (const auto& [id, e] : by_id_) mine += e.source == source ? 1 : 0;
  if (mine >= k_max_pending_per_source) return why = "too many pending joins from this address", true;
  return false;
}

std::optional<std::string> pending_joins::add(const discover_info& d, const std::string& source, std::int64_t now,
                                              std::string& why) {
  if (full_for(d, source, now, why)) return std::nullopt;
  entry e{crypto::uuid4_hex(), d.pub_pem, d.addr, now + k_join_token_ttl_s, source};
  by_id_.insert_or_assign(d.from, e);
  return e.token;
}

std::string pending_joins::add(const discover_info& d, std::int64_t now) {
  std::string why;
  return add(d, "", now, why).value_or("");
}

// ---- rate limiter -----------------------------------------------------------------------------
bool rate_limiter::allow(const std::string& key, std::int64_t now_ms) {
  auto refill = [&](bucket& b) {
    if (now_ms > b.at_ms) b.tokens = std::min(burst_, b.tokens + static_cast<double>(now_ms - b.at_ms) * per_s_ / 1000.0);
    b.at_ms = std::max(b.at_ms, now_ms);
  };
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) {
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        refill(b->second);
        if (b->second.tokens >= burst_) b = buckets_.erase(b);
        else ++b;
      }
      if (buckets_.size() >= max_keys_) return false;
    }
    it = buckets_.emplace(key, bucket{burst_, now_ms}).first;
  }
  refill(it->second);
  if (it->second.tokens < 1.0) return false;
  it->second.tokens -= 1.0;
  return true;
}

const pending_joins::entry* pending_joins::peek(const std::string& id, const std::string& token, std::int64_t now,
                                                std::string& why) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return why = "no pending join (unknown, used or expired token)", nullptr;
  if (it->second.expires <= now) {
    by_id_.erase(it);
    return why = "join token expired", nullptr;
  }
  if (!crypto::constant_time_equal(it->second.token, token)) return why = "wrong join token", nullptr;
  return &it->second;
}

bool pending_joins::fresh_nonce(const std::string& nonce, std::int64_t now) {
  std::erase_if(nonces_, [now](const auto& kv) { return kv.second <= now; });
  if (nonces_.count(nonce)) return false;
  if (nonces_.size() >= 4096) nonces_.erase(std::min_element(nonces_.begin(), nonces_.end(), [](const auto& a, const auto& b) {
    return a.second < b.second;
  }));
  nonces_.emplace(nonce, now + 2 * k_discover_window_s);
  return true;
}

std::optional<pending_joins::entry> pending_joins::take(const std::string& id, const std::string& token,
                                                        std::int64_t now, std::string& why) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return why = "no pending join (unknown, used or expired token)", std::nullopt;
  if (it->second.expires <= now) {
    by_id_.erase(it);
    return why = "join token expired", std::nullopt;
  }
  if (!crypto::constant_time_equal(it->second.token, token)) return why = "wrong join token", std::nullopt;
  entry e = std::move(it->second);
  by_id_.erase(it);
  return e;
}

// ---- discover-reply ---------------------------------------------------------------------------
value make_discover_reply(const std::string& my_id, const crypto::rsa_key& my_priv,
                          const crypto::rsa_key& cluster_priv, const discover_info& d, const std::string& token) {
  const std::string my_pub = my_priv.public_pem();
  value m = value::object();
  m["cmd"] = "cluster/discover-reply";
  m["v"] = 1;
  m["from"] = my_id;
  m["to"] = d.from;
  m["nonce"] = d.nonce;
  m["token"] = token;
  m["peer_pub"] = my_pub;
  m["cluster_pub"] = cluster_priv.public_pem();
  auto e = crypto::sign(cluster_priv, endorsement_bytes(my_id, my_pub, d.from, token), k_sig);
  m["endorsement"] = wire::make_bin(e ? *e : std::string());
  sign_message(m, my_priv);
  return m;
}

bool fingerprint_matches(const std::string& pem, const std::string& fingerprint) {
  const std::string want = norm_fp(fingerprint);
  if (want.empty()) return false;
  for (const std::string& cand : {pem, trim(pem), trim(pem) + "\n"}) {
    if (crypto::constant_time_equal(crypto::sha256_hex(cand), want)) return true;
  }
  if (auto f = crypto::pem_fingerprint(pem, "sha256"); f && norm_fp(*f) == want) return true;
  return false;
}

std::optional<discover_reply_info> verify_discover_reply(const value& body, const std::string& my_id,
                                                         const std::string& nonce, const cluster_pin& pin,
                                                         std::string& why) {
  if (!envelope_ok(body, "cluster/discover-reply", true, why)) return std::nullopt;
  discover_reply_info r{text_field(body, "from"), text_field(body, "token"), text_field(body, "peer_pub"), text_field(body, "cluster_pub")};
  if (!valid_peer_id(r.from)) return why = "invalid peer id", std::nullopt;
  if (r.from == my_id) return why = "a reply from myself", std::nullopt;
  if (text_field(body, "to") != my_id) return why = "reply addressed to another master", std::nullopt;
  if (text_field(body, "nonce") != nonce) return why = "nonce not echoed", std::nullopt;
  if (!is_hex32(r.token)) return why = "bad token", std::nullopt;
  if (!pin.fingerprint.empty()) {
    if (!fingerprint_matches(r.cluster_pub_pem, pin.fingerprint))
      return why = "the cluster key does not match cluster_pub_fingerprint", std::nullopt;
  } else if (!pin.shared_pub_pem.empty()) {
    if (!same_pem(r.cluster_pub_pem, pin.shared_pub_pem))
      return why = "the cluster key differs from cluster_pki_dir/cluster.pub", std::nullopt;
  } else {
    return why = "cannot pin the cluster key: set cluster_pub_fingerprint", std::nullopt;
  }
  auto cpub = crypto::rsa_key::from_public_pem(r.cluster_pub_pem);
  if (!cpub) return why = "bad cluster key", std::nullopt;
  auto ppub = crypto::rsa_key::from_public_pem(r.peer_pub_pem);
  if (!ppub) return why = "bad peer key", std::nullopt;
  const value* ev = wire::find(body, "endorsement");
  auto e = ev ? wire::as_bytes(*ev) : std::nullopt;
  if (!e || !crypto::verify(*cpub, endorsement_bytes(r.from, r.peer_pub_pem, my_id, r.token), *e, k_sig))
    return why = "endorsement not signed by the cluster key (the peer is not a member)", std::nullopt;
  if (!verify_message(body, *ppub)) return why = "bad signature", std::nullopt;
  return r;
}

// ---- join -------------------------------------------------------------------------------------
value make_join(const std::string& my_id, const crypto::rsa_key& my_priv, const discover_reply_info& r,
                const std::string& secret) {
  value m = value::object();
  m["cmd"] = "cluster/join";
  m["v"] = 1;
  m["from"] = my_id;
  m["to"] = r.from;
  m["token"] = r.token;
  m["proof"] = wire::make_bin(join_proof(secret, my_id, my_priv.public_pem(), r.peer_pub_pem, r.token));
  sign_message(m, my_priv);
  return m;
}

bool secret_matches(const std::optional<std::string>& mine, const std::optional<std::string>& theirs,
                    bool allow_empty, std::string& why) {
  const bool empty = !mine || mine->empty() || !theirs || theirs->empty();
  if (empty && !allow_empty) return why = "empty or unset cluster_secret (set cluster_allow_empty_secret to allow)", false;
  const std::string a = crypto::sha256(mine.value_or(""));
  const std::string b = crypto::sha256(theirs.value_or(""));
  if (!crypto::constant_time_equal(a, b)) return why = "wrong cluster_secret", false;
  return true;
}

std::optional<join_request> verify_join(const value& body, const crypto::rsa_key& my_priv,
                                        const std::optional<std::string>& my_secret, bool allow_empty,
                                        pending_joins& pending, std::int64_t now, std::string& why) {
  if (!envelope_ok(body, "cluster/join", false, why)) return std::nullopt;
  join_request j{text_field(body, "from"), {}, {}, text_field(body, "token")};
  if (!valid_peer_id(j.from)) return why = "invalid peer id", std::nullopt;
  const auto* pe = pending.peek(j.from, j.token, now, why);
  if (!pe) return std::nullopt;
  auto pub = crypto::rsa_key::from_public_pem(pe->pub_pem);
  if (!pub || !verify_message(body, *pub)) return why = "bad signature", std::nullopt;  // token kept
  auto e = pending.take(j.from, j.token, now, why);  // single use from here on
  if (!e) return std::nullopt;
  j.pub_pem = e->pub_pem;
  j.addr = e->addr;
  const value* pv = wire::find(body, "proof");
  auto proof = pv ? wire::as_bytes(*pv) : std::nullopt;
  if (!proof || proof->size() != 32) return why = "no join proof (a joiner older than this master?)", std::nullopt;
  const std::string p_pub = my_priv.public_pem();
  auto proves = [&](const std::string& secret) {
    const std::string want = join_proof(secret, j.from, j.pub_pem, p_pub, j.token);
    return crypto::constant_time_equal(want, *proof);
  };
  const bool mine_empty = !my_secret || my_secret->empty();
  if (mine_empty) {
    if (!allow_empty) return why = "empty or unset cluster_secret (set cluster_allow_empty_secret to allow)", std::nullopt;
    if (!proves("")) return why = "wrong cluster_secret", std::nullopt;
    return j;
  }
  if (proves(*my_secret)) return j;
  if (!allow_empty && proves(""))
    return why = "empty or unset cluster_secret (set cluster_allow_empty_secret to allow)", std::nullopt;
  return why = "wrong cluster_secret", std::nullopt;
}

// ---- join-reply -------------------------------------------------------------------------------
value make_join_reply(const std::string& my_id, const crypto::rsa_key& my_priv, const join_request& j,
                      const cluster_identity& ident) {
  auto jpub = crypto::rsa_key::from_public_pem(j.pub_pem);
  value m = value::object();
  m["cmd"] = "cluster/join-reply";
  m["v"] = 1;
  m["from"] = my_id;
  m["to"] = j.from;
  m["token"] = j.token;
  if (jpub) {
    m["cluster_key"] = seal_to(*jpub, ident.cluster_pem);
    m["aes"] = seal_to(*jpub, ident.aes);
  }
  value peers = value::object();
  for (const auto& [id, pem] : ident.peers) peers[id] = pem;
  m["peers"] = std::move(peers);
  value addrs = value::object();
  for (const auto& [id, a] : ident.addrs) addrs[id] = a;
  m["addrs"] = std::move(addrs);
  sign_message(m, my_priv);
  return m;
}

std::optional<cluster_identity> verify_join_reply(const value& body, const std::string& my_id,
                                                  const crypto::rsa_key& my_priv, const discover_reply_info& r,
                                                  std::string& why) {
  if (!envelope_ok(body, "cluster/join-reply", true, why)) return std::nullopt;
  if (text_field(body, "from") != r.from) return why = "join-reply from a peer that was not asked", std::nullopt;
  if (text_field(body, "to") != my_id) return why = "reply addressed to another master", std::nullopt;
  if (text_field(body, "token") != r.token) return why = "token not echoed", std::nullopt;
  auto ppub = crypto::rsa_key::from_public_pem(r.peer_pub_pem);
  if (!ppub || !verify_message(body, *ppub)) return why = "bad signature", std::nullopt;
  cluster_identity ident;
  auto pem = open_sealed(my_priv, wire::find(body, "cluster_key"));
  if (!pem) return why = "cluster key does not decrypt", std::nullopt;
  ident.cluster_pem = std::move(*pem);
  auto aes = open_sealed(my_priv, wire::find(body, "aes"));
  if (!aes) return why = "AES key does not decrypt", std::nullopt;
  ident.aes = trim(std::move(*aes));
  if (!crypto::crypticle::from_key_string(ident.aes)) return why = "bad AES key", std::nullopt;
  auto cpriv = crypto::rsa_key::from_private_pem(ident.cluster_pem);
  if (!cpriv) return why = "bad cluster key", std::nullopt;
  ident.cluster_pub_pem = cpriv->public_pem();
  if (!same_pem(ident.cluster_pub_pem, r.cluster_pub_pem))
    return why = "the cluster key does not match the pinned cluster.pub", std::nullopt;
  const value* pv = wire::find(body, "peers");
  if (!pv || !pv->is_object()) return why = "no peers", std::nullopt;
  for (auto it = pv->begin(); it != pv->end(); ++it) {
    const std::string id = it.key();
    auto t = wire::as_text(it.value());
    if (!valid_peer_id(id)) return why = "invalid peer id in the member list", std::nullopt;
    if (!t || !crypto::rsa_key::from_public_pem(*t)) return why = "bad key for peer " + id, std::nullopt;
    ident.peers[id] = std::string(*t);
  }
  // Bus addresses (optional): only of listed members, printable, bounded; others ignored.
  if (const value* av = wire::find(body, "addrs"); av && av->is_object()) {
    for (auto it = av->begin(); it != av->end(); ++it) {
      auto t = wire::as_text(it.value());
      const std::string id = it.key();
      if (!t || id == my_id || !ident.peers.count(id) || t->empty() || t->size() > 300) continue;
      if (std::any_of(t->begin(), t->end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; }))
        continue;
      ident.addrs[id] = std::string(*t);
    }
  }
  auto pit = ident.peers.find(r.from);
  if (pit == ident.peers.end() || !same_pem(pit->second, r.peer_pub_pem))
    return why = "the member list lacks the accepting peer's key", std::nullopt;
  auto mit = ident.peers.find(my_id);
  if (mit != ident.peers.end() && !same_pem(mit->second, my_priv.public_pem()))
    return why = "the member list holds another key for this master", std::nullopt;
  return ident;
}

// ---- install ----------------------------------------------------------------------------------
result<void> install_identity(const fs::path& dir, const cluster_identity& ident, std::string& why) {
  // Check every part before writing anything.
  auto cpriv = crypto::rsa_key::from_private_pem(ident.cluster_pem);
  if (!cpriv || !same_pem(cpriv->public_pem(), ident.cluster_pub_pem)) {
    why = "cluster.pem and cluster.pub do not match";
    return make_error_code(errc::unreadable);
  }
  if (!crypto::crypticle::from_key_string(ident.aes)) {
    why = "bad AES key";
    return make_error_code(errc::unreadable);
  }
  struct item {
    fs::path path;
    std::string data;
    unsigned mode;
  };
  std::vector<item> items{{dir / "cluster.pem", ident.cluster_pem, 0400},
                          {dir / "cluster.pub", ident.cluster_pub_pem, 0644},
                          {dir / ".aes", ident.aes, 0600}};
  for (const auto& [id, pem] : ident.peers) {
    if (!valid_peer_id(id)) {
      why = "invalid peer id '" + id + "'";
      return make_error_code(errc::bad_id);
    }
    if (!crypto::rsa_key::from_public_pem(pem)) {
      why = "bad key for peer " + id;
      return make_error_code(errc::unreadable);
    }
    items.push_back({dir / "peers" / (id + ".pub"), pem, 0644});
  }
  std::vector<fs::path> created;
  auto rollback = [&] {
    for (auto it = created.rbegin(); it != created.rend(); ++it) (void)util::remove_file(*it);
  };
  bool made_dir = false;
  bool made_peers = false;
  {
    std::error_code ec;
    made_dir = !fs::exists(dir, ec);
    made_peers = !fs::exists(dir / "peers", ec);
  }
  if (auto r = util::make_dirs(dir / "peers", 0700); !r) {
    why = "cannot create " + (dir / "peers").string() + ": " + r.error().message();
    return r.error();
  }
  for (const auto& it : items) {
    auto c = util::create_exclusive(it.path, it.data, it.mode);
    if (c) {
      created.push_back(it.path);
      // A generation left from an earlier membership would outrank the key just written
      // (cluster_pki.hpp aes_file::gen): unknown until the peers tell.
      if (it.path == dir / ".aes") (void)util::remove_file(dir / ".aes.gen");
      continue;
    }
    if (c.error() == util::errc::already_exists) {
      // A shared cluster_pki_dir already holds the cluster's current AES key (it may have
      // been rotated since the reply was made): the file wins, the master reads it.
      if (it.path == dir / ".aes") continue;
      auto cur = util::read_file(it.path);
      if (cur && same_pem(*cur, it.data)) continue;  // already there, same content
      why = it.path.string() + " already exists with other content";
      rollback();
      std::error_code ec;
      if (made_peers) fs::remove(dir / "peers", ec);
      if (made_dir) fs::remove(dir, ec);
      return make_error_code(errc::peer_key_mismatch);
    }
    why = "cannot write " + it.path.string() + ": " + c.error().message();
    rollback();
    std::error_code ec;
    if (made_peers) fs::remove(dir / "peers", ec);
    if (made_dir) fs::remove(dir, ec);
    return c.error();
  }
  // cluster.pem created here: this directory is a local copy, not the share.
  if (std::find(created.begin(), created.end(), dir / "cluster.pem") != created.end())
    (void)util::create_exclusive(dir / k_local_copy_marker, "written by the cluster join: a local copy\n", 0600);
  return {};
}

bool is_local_copy(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / k_local_copy_marker, ec);
}

bool is_member_dir(const fs::path& dir, const std::string& id) {
  std::error_code ec;
  return valid_peer_id(id) && fs::exists(dir / "cluster.pem", ec) && fs::exists(dir / "peers" / (id + ".pub"), ec);
}

}  // namespace sylvite::cluster
