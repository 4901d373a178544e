// sylvite::minion channel: the sans-I/O message codecs of salt/channel/client.py (3008):
//   - AES requests: v3 envelope {enc, load, version 3, id, enc_algo, sig_algo}; the load
//     gains nonce, ts, tok, id and is Crypticle(session).dumps()'d (no nonce prefix);
//     replies are Crypticle(session).loads(reply, nonce);
//   - pillar replies (send_private, section 4.4): RSA-wrapped one-shot key, signed blob;
//   - the publish-socket hello {enc aes, load AES({id, tok}), version 3};
//   - publishes: optional signature check, AES decrypt, serial check.
// Pure functions over values and keys. Thread-safety: stateless functions are thread-safe;
// a crypticle used for publishes keeps its serial counter (one per AES key).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

struct request_identity {
  std::string id;
  std::string tok;        // X9.31 token over "salt"
  std::string enc_name;   // encryption_algorithm
  std::string sig_name;   // signing_algorithm
};

// The `_pillar` load of Salt's AsyncRemotePillar.compile_pillar (no saltenv/pillarenv,
// no override): what the minion and the benchmark swarm send.
wire::value pillar_load(const std::string& id, const wire::value& grains);

// Adds nonce/ts/tok/id to `load` (a map) and wraps it in the v3 envelope.
wire::value package_aes(wire::value load, const request_identity& who, const crypto::crypticle& session,
                        std::string_view nonce, std::int64_t now_seconds);

// Decrypt a `send` reply. Any failure (text reply such as "bad load", HMAC, nonce,
// missing pickle:: prefix) is errc::bad_reply: the caller re-authenticates and retries once.
// An empty/nil reply decodes to null (Salt: "if data:").
result<wire::value> decode_aes_reply(const wire::value& reply, const crypto::crypticle& session,
                                     std::string_view nonce);

// Decode a send_private pillar reply for a request sent with `nonce`.
// errc::bad_reply when `key` is missing (caller re-auths and asks again), errc::bad_pillar
// for a signature/key/nonce mismatch.
result<wire::value> decode_private_reply(const wire::value& reply, const crypto::rsa_key& minion_key,
                                         crypto::enc_algo enc, const crypto::rsa_key& master_pub,
                                         crypto::sig_algo sig, std::string_view nonce,
                                         std::string_view dictkey = "pillar");

// Body of the publish-socket hello (section 2.4): AES key, no nonce.
wire::value make_hello(const std::string& id, const std::string& tok, const crypto::crypticle& aes);

enum class publish_verdict {
  ok,           // load holds the decoded job
  reauth,       // HMAC failed: re-authenticate, then call decode_publish again (once)
  drop,         // unusable (bad signature, stale serial, garbage); reason logged
  ignore,       // not an aes publish (nothing to do)
};
struct publish_decoded {
  publish_verdict verdict = publish_verdict::drop;
  wire::value load;
  std::string reason;
  std::optional<std::int64_t> serial;  // the load's serial, when it had one (for replay_guard)
};

// body: the publish frame body (bytes of a Salt payload, or already a map).
// require_sig: minion sign_pub_messages. master_pub may be null when require_sig is off.
// reauth_on_bad_sig (verify_master_pubkey_sign): a signature that does not verify with
// master_pub asks for a re-authentication (the cluster key may have been rotated: the
// sign-in accepts a new key only with a valid master_sign signature) instead of a drop;
// the caller decodes again afterwards with it off, so a second failure drops.
publish_decoded decode_publish(const wire::value& body, const crypto::crypticle& aes, bool require_sig,
                               const crypto::rsa_key* master_pub,
                               bool reauth_on_bad_sig = false);

}  // namespace sylvite::minion
