// sylvite::minion auth: the sans-I/O half of Salt's AsyncAuth (salt/crypt.py, 3008):
// builds the clear `_auth` sign-in request (protocol version 3) and verifies the master's
// reply exactly as handle_signin_response/verify_master/decrypt_aes do:
//   - trust on first use of minion_master.pub, refusal when the master key changed,
//   - X9.31 `sig` over the hex SHA-256 of the AES key, token echo when we sent one,
//   - PKCS#1 v1.5 signature over the raw `load` bytes with our own signing_algorithm,
//   - nonce echo, v3 `session` key, master_finger pinning, optional master_sign.pub.
// No sockets and no timers: the minion's master_channel (master_channel.cpp) sends request.body and feeds the reply.
// Files touched: <pki_dir>/minion.pem, minion.pub (created if missing), minion_master.pub
// (TOFU write), master_sign.pub (read).
// Thread-safety: make_request()/handle_reply() must be called from one thread at a time
// (the driver's io thread); the accessors of the immutable key material are thread-safe.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "core/config/config.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

// What a successful sign-in yields (Salt's "creds").
struct auth_creds {
  std::string aes;          // publish AES key string (76 chars)
  std::string session;      // v3 per-minion session key string
  int publish_port = 0;     // as reported by the master
  std::string master_pub;   // clean PEM of the master key
};

enum class auth_status {
  accepted,         // creds valid
  pending,          // ret True: key cached on the master, not accepted yet -> wait and retry
  rejected,         // ret False, rejected_retry off -> Salt sleeps 10-20 s and exits 77
  rejected_retry,   // ret False, rejected_retry on -> wait and retry
  full,             // ret "full": master at max_minions -> connection failure
  bad_algo,         // "bad enc algo" / "bad sig algo" (unsigned) -> connection failure
  failed,           // malformed reply, invalid master key / signature / nonce
  finger_mismatch,  // master_finger does not match -> Salt exits 42
};
std::string_view to_string(auth_status s);

struct auth_result {
  auth_status status = auth_status::failed;
  auth_creds creds;       // only for accepted
  std::string message;    // Salt's log text for non-accepted outcomes
};

struct sign_in_request {
  wire::value body;       // frame body: {"enc": "clear", "load": {...}, "version": 3}
  std::string nonce;      // 32 hex chars, must come back in the signed reply
  bool sent_token = false;
};

struct auth_settings {
  std::string id;
  std::filesystem::path pki_dir;
  int keysize = 2048;
  crypto::enc_algo enc = crypto::enc_algo::oaep_sha1;
  crypto::sig_algo sig = crypto::sig_algo::pkcs1v15_sha1;
  std::string enc_name = "OAEP-SHA1";
  std::string sig_name = "PKCS1v15-SHA1";
  bool open_mode = false;
  bool rejected_retry = false;
  std::string master_finger;
  std::string hash_type = "sha256";
  bool verify_master_pubkey_sign = false;
  bool always_verify_signature = false;
  std::string master_sign_key_name = "master_sign";
  int acceptance_wait_time = 10;
  std::optional<wire::value> autosign_grains;  // map grain -> value, sent if configured

  // From a minion config (+ grains for autosign_grains). Errors: unknown algorithm names.
  static result<auth_settings> from_config(const config::minion_config& cfg, const wire::value& grains);
};

class auth_client {
 public:
  // Loads <pki_dir>/minion.pem (generating minion.pem/minion.pub with keysize if absent).
  static result<auth_client> create(auth_settings s);
  // Same, with an already loaded key (tests).
  auth_client(auth_settings s, crypto::rsa_key key);

  // A fresh sign-in request (new nonce). Includes `token` when minion_master.pub exists.
  sign_in_request make_request() const;
  // Verify the master's reply body (frame body) for `req`.
  auth_result handle_reply(const sign_in_request& req, const wire::value& reply_body) const;

  const crypto::rsa_key& key() const noexcept { return key_; }
  const std::string& pub_clean() const noexcept { return pub_clean_; }
  // X9.31 token over "salt" (load field `tok` on every v3 request and in the publish hello).
  const std::string& tok() const noexcept { return tok_; }
  const auth_settings& settings() const noexcept { return s_; }
  std::filesystem::path master_pub_path() const { return s_.pki_dir / "minion_master.pub"; }
  // The cached master key (minion_master.pub), if present and parseable.
  std::optional<crypto::rsa_key> master_key() const;

 private:
  // Salt's verify_master: returns the AES key string or "" (reason in *why).
  std::string verify_master(const wire::value& payload, bool master_pub, std::string* why) const;
  // decrypt_aes: {aes, token} or empty strings.
  std::pair<std::string, std::string> decrypt_aes(const wire::value& payload, bool master_pub) const;
  std::string extract_aes(const wire::value& payload, bool master_pub, std::string* why) const;
  bool check_auth_deps(const wire::value& payload, std::string* why) const;
  bool verify_signing_master(const wire::value& payload, std::string* why) const;

  auth_settings s_;
  crypto::rsa_key key_;
  std::string pub_clean_;
  std::string tok_;
  std::string token_;  // random Crypticle-style string, once per process (Salt's self.token)
};

// Message Salt logs (critical) before exiting 42 on a master_finger mismatch.
std::string finger_fail_message(std::string_view configured, std::string_view actual);

}  // namespace sylvite::minion
