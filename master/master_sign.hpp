// sylvite::master master_sign: the optional signature of master.pub that lets minions
// accept a changed master key ("failover with per-master keys", Salt's master_sign_pubkey).
// Salt 3008.5 (salt/crypt.py MasterKeys._setup_keys/gen_signature, salt/master.py
// AuthFuncs._auth): with master_sign_pubkey on, every accepting auth reply carries
//   pub_sig = base64(PKCS#1 v1.5 sign(master_sign.pem, <pub_key as sent>, sig_algo)) + "\n"
// (binascii.b2a_base64: bytes, trailing newline; sig_algo = the minion's load sig_algo),
// or, with master_use_pubkey_signature, the pre-computed signature file
// <pki_dir>/<master_pubkey_signature> (default "<id>_pubkey_signature") sent as text after
// clean_key() (whitespace stripped).
// Thread-safety: pub_sig() is safe from many threads (signatures cached under a mutex;
// PKCS#1 v1.5 is deterministic, so one private RSA operation per algorithm per run).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/config/config.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

// The file name of the pre-computed signature inside pki_dir (Salt's
// master_pubkey_signature or "<id>_pubkey_signature").
std::string pubkey_signature_name(const config::master_config& cfg);

// base64 of the PKCS#1 v1.5 signature of `pub_clean` with a trailing "\n", as
// binascii.b2a_base64(sign_key.sign(pub_key, algorithm)). Errors: signing failed.
result<std::string> compute_pub_sig(const crypto::rsa_key& sign_key, std::string_view pub_clean,
                                    crypto::sig_algo algo);

class master_signer {
 public:
  // cfg.master_sign_pubkey must be on. Loads (or generates, like Salt) the signing key
  // pair <pki_dir>/<master_sign_key_name>.pem/.pub, or with master_use_pubkey_signature
  // reads the signature file (missing file -> errc not_found; Salt exits too).
  static result<std::unique_ptr<master_signer>> load(const config::master_config& cfg);
  // Tests: sign with a given key / send a given pre-computed signature text.
  static std::unique_ptr<master_signer> from_key(crypto::rsa_key sign_key);
  static std::unique_ptr<master_signer> from_signature(std::string signature_text);

  // The auth reply's pub_sig for pub_key = pub_clean: bin (computed) or str
  // (pre-computed). Errors: signing failed.
  result<wire::value> pub_sig(std::string_view pub_clean, crypto::sig_algo algo) const;

 private:
  master_signer() = default;
  std::optional<crypto::rsa_key> key_;
  std::optional<std::string> precomputed_;
  mutable std::mutex mu_;
  mutable std::map<std::pair<std::string, int>, std::string> cache_;
};

}  // namespace sylvite::master
