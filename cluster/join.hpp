// sylvite::cluster join handshake (sans-I/O): how a new master J joins a running cluster
// through one configured peer P on cluster_pool_port, gated by cluster_secret. Salt
// 3008's discover/join (salt-ha-internals 7.2) with its gaps closed (7.3, 8.2): every
// message signed by its sender's own master key, fresh tokens echoed and checked, replies
// verified, secrets encrypted to the recipient, the secret compared in constant time,
// empty secrets refused unless allowed, ids validated, pending joins expire.
//
//   J -> P  {cmd: "cluster/discover", v: 1, cluster_id, from: J, pub: J's master.pub PEM,
//            addr: "host:port" J's bus listens on, nonce: 32 hex, ts, sig by J's key}
//           (self-signed: proves J holds the key it names; J is not trusted yet)
//   P -> J  {cmd: "cluster/discover-reply", v: 1, from: P, to: J, nonce (echo), token: 32 hex
//            (pending for J, k_join_token_ttl_s, one per joiner), peer_pub: P's master.pub,
//            cluster_pub: cluster.pub PEM, endorsement: sig by the CLUSTER key over
//            msgpack [P, peer_pub, J, token], sig by P's own key}
//           J pins cluster_pub (cluster_pub_fingerprint, or the cluster.pub of a readable
//           shared cluster_pki_dir; neither = refusal), then checks the endorsement with
//           cluster_pub (P holds the cluster key: it is a member) and sig with peer_pub.
//   J -> P  {cmd: "cluster/join", v: 1, from: J, token (echo), proof: HMAC-SHA256(key
//            cluster_secret, msgpack ["sylvite-join-proof", J, J's pub, P's pub, token]),
//            sig by J's key (the one pending since discover)}
//           P consumes the token (replay and expiry refused), checks sig, computes the
//           proof with its own secret and compares constant-time. The secret itself never
//           travels: a removed master that still holds cluster.pem and answers a discover
//           learns only a proof bound to its own key and token (an offline guess of a
//           weak secret remains possible; docs/security.md section 6). No private-key work.
//   P -> J  {cmd: "cluster/join-reply", v: 1, from: P, to: J, token, cluster_key: sealed
//            cluster.pem, aes: sealed .aes key, peers: {id: pub PEM} of every member
//            (J included), addrs: {id: "host:port"} bus addresses P knows, sig by P}
//           sealed = {k: OAEP(J's pub, fresh Crypticle key), d: Crypticle.dumps(text)}.
//   Any refusal: {error: reason} in the clear.
// Thread-safety: free functions; pending_joins is not synchronised (one owner).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cluster {

constexpr std::int64_t k_join_token_ttl_s = 30;
constexpr std::int64_t k_discover_window_s = 120;
constexpr std::size_t k_max_pending_joins = 64;
// Pending joins one source address may hold (docs/security.md section 5).
constexpr std::size_t k_max_pending_per_source = 4;

// ---- per-source rate limit (P's side, before any RSA or file work) ---------------------------
// A token bucket per key (the sender's address): `burst` requests at once, then `per_s`
// a second. At most `max_keys` buckets: when full, buckets that are full again (idle
// senders) are forgotten first; if none is, the new key is refused (a flood from many
// addresses cannot grow the table). Not synchronised (the caller locks).
class rate_limiter {
 public:
  rate_limiter(double per_s, double burst, std::size_t max_keys = 4096)
      : per_s_(per_s), burst_(burst), max_keys_(max_keys) {}
  bool allow(const std::string& key, std::int64_t now_ms);
  std::size_t size() const { return buckets_.size(); }

 private:
  struct bucket {
    double tokens;
    std::int64_t at_ms;
  };
  double per_s_;
  double burst_;
  std::size_t max_keys_;
  std::map<std::string, bucket> buckets_;
};

// ---- discover -------------------------------------------------------------------------------
wire::value make_discover(const std::string& cluster_id, const std::string& my_id, const std::string& my_pub_pem,
                          const std::string& my_addr, const crypto::rsa_key& my_priv, const std::string& nonce,
                          std::int64_t now);

struct discover_info {
  std::string from;
  std::string pub_pem;
  std::string addr;
  std::string nonce;
};
// P's side: cluster_id, id (valid_peer_id, not P itself), ts window, self-signature.
std::optional<discover_info> verify_discover(const wire::value& body, const std::string& my_cluster_id,
                                             const std::string& my_id, std::int64_t now, std::string& why);

// ---- pending joins (P's side) ---------------------------------------------------------------
class pending_joins {
 public:
  struct entry {
    std::string token;
    std::string pub_pem;
    std::string addr;
    std::int64_t expires = 0;
    std::string source;  // the address the discover came from
  };
  // A fresh token for `d.from` asked from address `source`. Nothing is ever evicted to
  // make room (an unauthenticated sender must not push out a real joiner's token):
  // refused (nullopt, why set) when k_max_pending_joins are pending, when `source` holds
  // k_max_pending_per_source already, or when `d.from` is pending under ANOTHER key. A
  // discover of the same id and key replaces its pending token (the joiner retrying).
  std::optional<std::string> add(const discover_info& d, const std::string& source, std::int64_t now,
                                 std::string& why);
  // Whether add() would refuse for capacity alone (checked before any private-key work).
  bool full_for(const discover_info& d, const std::string& source, std::int64_t now, std::string& why);
  // add() from an unnamed source; "" when refused (tests, tools).
  std::string add(const discover_info& d, std::int64_t now);
  // Consume the pending join of `id` if `token` matches and has not expired. A consumed,
  // expired or unknown token is refused (why set). A wrong token does not consume.
  std::optional<entry> take(const std::string& id, const std::string& token, std::int64_t now, std::string& why);
  // The pending join `take` would return, without consuming it (a join whose signature
  // does not verify must not burn the joiner's token: the token travels in the clear).
  const entry* peek(const std::string& id, const std::string& token, std::int64_t now, std::string& why);
  // Records a discover's nonce; false if it was seen within the discover window (a
  // replayed discover must not replace the joiner's pending token). Bounded.
  bool fresh_nonce(const std::string& nonce, std::int64_t now);
  std::size_t size() const { return by_id_.size(); }

 private:
  void expire(std::int64_t now);
  std::map<std::string, entry> by_id_;
  std::map<std::string, std::int64_t> nonces_;  // nonce -> forget after
};

// ---- discover-reply -------------------------------------------------------------------------
wire::value make_discover_reply(const std::string& my_id, const crypto::rsa_key& my_priv,
                                const crypto::rsa_key& cluster_priv, const discover_info& d,
                                const std::string& token);

// How J pins the cluster key.
struct cluster_pin {
  std::string fingerprint;      // cluster_pub_fingerprint ("" unset): sha256 hex of the PEM
  std::string shared_pub_pem;   // cluster.pub of a readable shared cluster_pki_dir ("" none)
};
// sha256 hex of the PEM text (Salt 3008), ':' and case ignored; the salt-key -F style
// fingerprint of the PEM body is accepted too.
bool fingerprint_matches(const std::string& pem, const std::string& fingerprint);

struct discover_reply_info {
  std::string from;
  std::string token;
  std::string peer_pub_pem;
  std::string cluster_pub_pem;
};
std::optional<discover_reply_info> verify_discover_reply(const wire::value& body, const std::string& my_id,
                                                         const std::string& nonce, const cluster_pin& pin,
                                                         std::string& why);

// ---- join -----------------------------------------------------------------------------------
wire::value make_join(const std::string& my_id, const crypto::rsa_key& my_priv, const discover_reply_info& r,
                      const std::string& secret);

struct join_request {
  std::string from;
  std::string pub_pem;
  std::string addr;
  std::string token;
};
// P's side: consumes the pending token, checks J's signature with the pub from discover,
// and checks the proof against `my_secret` (empty or unset refused unless allow_empty).
// my_priv is P's own key (its public half is bound into the proof).
std::optional<join_request> verify_join(const wire::value& body, const crypto::rsa_key& my_priv,
                                        const std::optional<std::string>& my_secret, bool allow_empty,
                                        pending_joins& pending, std::int64_t now, std::string& why);

// Constant time (both sides hashed, crypto::constant_time_equal). Empty or unset on either side is
// refused unless allow_empty.
bool secret_matches(const std::optional<std::string>& mine, const std::optional<std::string>& theirs,
                    bool allow_empty, std::string& why);

// ---- join-reply -----------------------------------------------------------------------------
struct cluster_identity {
  std::string cluster_pem;
  std::string cluster_pub_pem;
  std::string aes;                                // Crypticle key string (.aes)
  std::map<std::string, std::string> peers;       // id -> pub PEM
  // id -> "host:port" of its bus, as the accepting peer knows them (itself included), so
  // the joiner links to every member at once instead of waiting for them to dial in.
  std::map<std::string, std::string> addrs;
};
wire::value make_join_reply(const std::string& my_id, const crypto::rsa_key& my_priv, const join_request& j,
                            const cluster_identity& ident);
// J's side: sender == expected_from, to == me, token echo, sig with peer_pub, sealed parts
// decrypt, cluster.pem matches the pinned cluster_pub, every peer id valid, J's own entry
// (if present) is J's key.
std::optional<cluster_identity> verify_join_reply(const wire::value& body, const std::string& my_id,
                                                  const crypto::rsa_key& my_priv, const discover_reply_info& r,
                                                  std::string& why);

// ---- install (J's side) ---------------------------------------------------------------------
// All-or-nothing: every part is checked first; then cluster.pem, cluster.pub, .aes and
// peers/<id>.pub are created exclusively (a file already there with the same content is
// kept, a different one is a refusal); on any failure every file this call created is
// removed. `why` names the failure.
result<void> install_identity(const std::filesystem::path& dir, const cluster_identity& ident, std::string& why);

// install_identity() leaves this file in a cluster_pki_dir it had to create cluster.pem
// in: a local copy of the cluster's directory, not the share. Such a master mirrors the
// minion keys and the AES key over the peer bus (master.cpp, "local copy").
constexpr const char* k_local_copy_marker = ".sylvite-local-copy";
bool is_local_copy(const std::filesystem::path& dir);

// Whether `dir` makes master `id` a member already: cluster.pem and peers/<id>.pub are
// there. A shared cluster_pki_dir without peers/<id>.pub (a new master on the cluster's
// shared file system) is not membership: that master joins through the handshake too.
bool is_member_dir(const std::filesystem::path& dir, const std::string& id);

// Hybrid seal of `plain` to a public key ({k: OAEP-SHA1(pub, fresh Crypticle key),
// d: Crypticle.dumps(plain)}) and its opening (nullopt on any failure). The join reply
// and salt-run cluster.rotate_key send private keys this way.
wire::value seal_to(const crypto::rsa_key& pub, const std::string& plain);
std::optional<std::string> open_sealed(const crypto::rsa_key& priv, const wire::value* sealed);

}  // namespace sylvite::cluster
