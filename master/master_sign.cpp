// sylvite::master master_sign: see master_sign.hpp. Salt quirks kept:
//  - the signature covers the pub_key string exactly as it goes into the reply
//    (clean_key form: no trailing newline), with the *minion's* sig_algo from its _auth load;
//  - the computed pub_sig is bytes with b2a_base64's trailing newline, the pre-computed
//    one is text without it (clean_key of the file);
//  - master_sign.pem is generated when missing (Salt's find_or_create_keys), so a
//    master started with master_sign_pubkey and no key makes its own pair: copy the
//    shared pair in *before* the first start.
// Improvement over Salt: the signature is computed once per algorithm, not per auth.
#include "master/master_sign.hpp"

#include <spdlog/spdlog.h>

#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"

namespace sylvite::master {

std::string pubkey_signature_name(const config::master_config& cfg) {
  if (cfg.master_pubkey_signature && !cfg.master_pubkey_signature->empty()) return *cfg.master_pubkey_signature;
  return cfg.id + "_pubkey_signature";
}

result<std::string> compute_pub_sig(const crypto::rsa_key& sign_key, std::string_view pub_clean,
                                    crypto::sig_algo algo) {
  auto sig = crypto::sign(sign_key, pub_clean, algo);
  if (!sig) return sig.error();
  return crypto::base64_encode(*sig) + "\n";
}

result<std::unique_ptr<master_signer>> master_signer::load(const config::master_config& cfg) {
  if (cfg.master_use_pubkey_signature) {
    const auto path = cfg.pki_dir / pubkey_signature_name(cfg);
    auto text = util::read_file(path);
    if (!text) {
      spdlog::error(
          "Signing the master.pub key with a signature is enabled but no signature file found at the defined "
          "location {}",
          path.string());
      spdlog::error("The signature-file may be either named differently or has to be created with "
                    "'salt-key --gen-signature'");
      return text.error();
    }
    std::string sig = crypto::clean_key(*text);
    if (sig.empty() || !crypto::base64_decode(sig)) {
      spdlog::error("{} does not hold a base64 signature", path.string());
      return util::errc::invalid_argument;
    }
    spdlog::info("Read {}'s signature from {}", pubkey_signature_name(cfg), path.string());
    return from_signature(std::move(sig));
  }
  const int bits = cfg.master_sign_keysize > 0 ? cfg.master_sign_keysize : cfg.keysize;
  auto key = pki::load_or_generate_keypair(cfg.pki_dir, cfg.master_sign_key_name, bits);
  if (!key) {
    spdlog::error("cannot load or generate the signing key {}/{}.pem: {}", cfg.pki_dir.string(),
                  cfg.master_sign_key_name, key.error().message());
    return key.error();
  }
  spdlog::info("master.pub will be signed with {}/{}.pem in auth replies", cfg.pki_dir.string(),
               cfg.master_sign_key_name);
  return from_key(std::move(*key));
}

std::unique_ptr<master_signer> master_signer::from_key(crypto::rsa_key sign_key) {
  std::unique_ptr<master_signer> s(new master_signer());
  s->key_ = std::move(sign_key);
  return s;
}

std::unique_ptr<master_signer> master_signer::from_signature(std::string signature_text) {
  std::unique_ptr<master_signer> s(new master_signer());
  s->precomputed_ = std::move(signature_text);
  return s;
}

result<wire::value> master_signer::pub_sig(std::string_view pub_clean, crypto::sig_algo algo) const {
  if (precomputed_) return wire::value(*precomputed_);
  std::lock_guard lk(mu_);
  auto k = std::make_pair(std::string(pub_clean), static_cast<int>(algo));
  auto it = cache_.find(k);
  if (it == cache_.end()) {
    auto s = compute_pub_sig(*key_, pub_clean, algo);
    if (!s) return s.error();
    it = cache_.emplace(std::move(k), std::move(*s)).first;
  }
  return wire::make_bin(it->second);
}

}  // namespace sylvite::master
