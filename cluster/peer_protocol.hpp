// sylvite::cluster peer protocol (sans-I/O): the messages masters exchange on
// cluster_pool_port. Not Salt's pool protocol: Salt's links are clear TCP with an
// unsigned envelope (salt-ha-internals 8.2); this one is authenticated and encrypted.
//
// Handshake (request/reply over one TCP connection, initiator A, acceptor B):
//   A -> B  {cmd: "cluster/hello", v: 1, cluster_id, from: A, addr: "host:port" A listens
//            on, nonce: 32 hex, ts: unix seconds, sig}
//           sig = PKCS#1 v1.5 (SHA-224) by A's own master key over msgpack of the map
//           without "sig" (key order as sent). B checks cluster_id, A's id, |ts - now| <=
//           120 s, a nonce not seen in that window (replay), and sig with peers/A.pub.
//   B -> A  {cmd: "cluster/welcome", v: 1, from: B, to: A, nonce (echo), link: 32 hex,
//            key: OAEP-SHA1(A's key, link key), sig by B's own key}
//           A checks to == A, the nonce echo, and sig with peers/B.pub; decrypts the link
//           key (a Crypticle key string: AES-CBC + HMAC-SHA256).
// Messages (A -> B only; B talks to A over its own link to A):
//   A -> B  {cmd: "cluster/msg", link, data: Crypticle(link key).dumps({seq, msgs:
//            [{type, body}, ...]})}; seq starts at 1 and grows by one per request: a
//            replayed or reordered request is refused.
//   B -> A  {ok: true, seq} sealed the same way, or {error: "..."} in the clear
//            ("unknown link": A makes a new handshake).
// Thread-safety: free functions and a link_state owned by one strand.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <deque>
#include <utility>
#include <vector>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cluster {

// Every signed cluster message (hello, welcome, discover, join, ...): the signature
// (PKCS#1 v1.5 SHA-224, the sender's own master key) covers the msgpack of the map
// without its "sig" entry, and is stored as bytes under "sig".
void sign_message(wire::value& m, const crypto::rsa_key& priv);
bool verify_message(const wire::value& m, const crypto::rsa_key& pub);
// m[k] as text, "" if absent or not text.
std::string text_field(const wire::value& m, const char* k);

constexpr std::int64_t k_hello_window_s = 120;

// Public key of a master by id (peers/<id>.pub), nullopt if unknown.
using key_lookup = std::function<std::optional<crypto::rsa_key>(const std::string& id)>;

wire::value make_hello(const std::string& cluster_id, const std::string& my_id, const std::string& my_addr,
                       const crypto::rsa_key& my_priv, const std::string& nonce, std::int64_t now);

struct hello_info {
  std::string from;
  std::string addr;
  std::string nonce;
};
// Acceptor side. `why` gets the refusal reason (logged by the caller, once per peer).
std::optional<hello_info> verify_hello(const wire::value& body, const std::string& my_cluster_id,
                                       const std::string& my_id, const key_lookup& keys, std::int64_t now,
                                       std::string& why);

// Remembers hello nonces for the replay window.
class nonce_cache {
 public:
  // false if nonce was seen within the window (a replay).
  bool insert(const std::string& nonce, std::int64_t now);

 private:
  std::deque<std::pair<std::int64_t, std::string>> order_;
  std::set<std::string> seen_;
};

wire::value make_welcome(const std::string& my_id, const crypto::rsa_key& my_priv, const hello_info& h,
                         const crypto::rsa_key& peer_pub, const std::string& link_id, const std::string& link_key);

struct welcome_info {
  std::string from;
  std::string link;
  std::string key;  // link key string
};
std::optional<welcome_info> verify_welcome(const wire::value& body, const std::string& my_id,
                                           const crypto::rsa_key& my_priv, const std::string& nonce,
                                           const key_lookup& keys, std::string& why);

struct peer_message {
  std::string type;
  wire::value body;
};
wire::value seal_batch(const crypto::crypticle& k, const std::string& link, std::uint64_t seq,
                       const std::vector<peer_message>& msgs);
// Acceptor side: decrypt and check seq == expected_seq. errc-free: reason in why.
std::optional<std::vector<peer_message>> open_batch(const crypto::crypticle& k, const wire::value& body,
                                                    std::uint64_t expected_seq, std::string& why);
wire::value seal_ack(const crypto::crypticle& k, std::uint64_t seq);
bool open_ack(const crypto::crypticle& k, const wire::value& body, std::uint64_t seq, std::string& why);

}  // namespace sylvite::cluster
