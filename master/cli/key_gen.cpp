// sylvite::cli salt-key --gen-keys / --gen-signature (see key_gen.hpp). Texts are Salt
// 3008.5's (salt/key.py gen_keys_signature, salt/crypt.py gen_signature).
#include "master/cli/key_gen.hpp"

#include <filesystem>
#include <ostream>

#include "core/crypto/rsa.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"

namespace sylvite::cli::keys {

namespace fs = std::filesystem;

wire::value gen_keys(const gen_keys_options& o) {
  std::error_code ec;
  fs::create_directories(o.dir, ec);  // Salt's __create_keys_dir
  // Salt's find_or_create_keys: an existing NAME.pem is loaded, not replaced.
  auto key = pki::load_or_generate_keypair(o.dir, o.name, o.keysize);
  if (!key) return "Unable to read key: " + (fs::path(o.dir) / (o.name + ".pem")).string() + "; " + key.error().message();
  // The fingerprint salt-key -F prints and a minion's master_finger takes (sha256 of
  // the PEM body: salt.utils.crypt.pem_finger).
  auto fp = crypto::pem_fingerprint(key->public_pem(), "sha256");
  if (!fp) return "cannot compute the fingerprint: " + fp.error().message();
  return *fp;
}

wire::value gen_signature(const gen_signature_options& o, const config::master_config& cfg, std::ostream& err) {
  std::error_code ec;
  fs::path pub = o.pub;
  if (!o.pub.empty()) {
    if (!fs::is_regular_file(pub, ec)) return "Public-key " + o.pub + " does not exist";
  } else if (fs::is_regular_file(cfg.pki_dir / "master.pub", ec)) {
    pub = cfg.pki_dir / "master.pub";
  }
  fs::path priv_path = o.priv;
  if (!o.priv.empty()) {
    if (!fs::is_regular_file(priv_path, ec)) return "Private-key " + o.priv + " does not exist";
  } else if (fs::is_regular_file(cfg.pki_dir / "master_sign.pem", ec)) {
    priv_path = cfg.pki_dir / "master_sign.pem";
  }

  std::optional<crypto::rsa_key> priv;
  if (!priv_path.empty()) {
    auto text = util::read_file(priv_path);
    if (!text) return "Unable to read key: " + priv_path.string() + "; " + text.error().message();
    auto k = crypto::rsa_key::from_private_pem(*text);
    if (!k) return "Unable to read key: " + priv_path.string() + "; file may be corrupt";
    priv = std::move(*k);
  } else if (o.auto_create) {
    // Salt re-creates <master_sign_key_name>.pem/.pub in pki_dir (force=True).
    const int bits = o.keysize ? *o.keysize : cfg.keysize;
    auto k = crypto::rsa_key::generate(bits);
    if (!k) return "cannot generate the signing key: " + k.error().message();
    const fs::path pem = cfg.pki_dir / (cfg.master_sign_key_name + ".pem");
    const fs::path pubf = cfg.pki_dir / (cfg.master_sign_key_name + ".pub");
    if (auto w = util::write_file_atomic(pem, k->private_pem(), 0400); !w)
      return "cannot write " + pem.string() + ": " + w.error().message();
    if (auto w = util::write_file_atomic(pubf, k->public_pem(), 0644); !w)
      return "cannot write " + pubf.string() + ": " + w.error().message();
    priv = std::move(*k);
  } else {
    return "No usable private-key found";
  }
  if (pub.empty()) return "No usable public-key found";
  auto pub_text = util::read_file(pub);
  if (!pub_text) return "No usable public-key found";
  auto pub_key = crypto::rsa_key::from_public_pem(*pub_text);
  if (!pub_key) return "No usable public-key found";

  const std::string name = cfg.master_pubkey_signature && !cfg.master_pubkey_signature->empty()
                               ? *cfg.master_pubkey_signature
                               : cfg.id + "_pubkey_signature";
  const fs::path dir = o.signature_path.empty() ? cfg.pki_dir : fs::path(o.signature_path);
  const fs::path target = dir / name;
  if (fs::exists(target, ec)) {
    err << "[ERROR   ] " << (o.signature_path.empty() ? name : (fs::path(o.signature_path) / name).string())
        << " already exists at expected location\n";
    return false;
  }
  auto algo = crypto::parse_sig_algo(cfg.publish_signing_algorithm);
  if (!algo) return "unknown publish_signing_algorithm " + cfg.publish_signing_algorithm;
  // Sign what the minion verifies: the SPKI PEM after clean_key (Salt #66259).
  auto sig = crypto::sign(*priv, crypto::clean_key(pub_key->public_pem()), *algo);
  if (!sig) return "signing failed: " + sig.error().message();
  fs::create_directories(dir, ec);
  // 0400 like the other files of Salt's key cache (localfs_key).
  if (auto w = util::write_file_atomic(target, crypto::base64_encode(*sig) + "\n", 0400); !w)
    return "cannot write " + target.string() + ": " + w.error().message();
  return true;
}

}  // namespace sylvite::cli::keys
