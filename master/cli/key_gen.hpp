// sylvite::cli salt-key's key generation options, as Salt 3008.5's salt/key.py
// (Key.gen_keys, Key.gen_keys_signature) and salt/crypt.py (MasterKeys.gen_signature):
//   --gen-keys NAME [--gen-keys-dir DIR] [--keysize N]  -> DIR/NAME.pem (0400) + NAME.pub
//   --gen-signature [--pub F] [--priv F] [--signature-path DIR] [--auto-create]
//       -> <pki_dir or DIR>/<master_pubkey_signature>: base64(PKCS#1 v1.5 sign(priv,
//          clean_key(pub PEM), publish_signing_algorithm)) + "\n", the file
//          master_use_pubkey_signature sends (master/master_sign.hpp).
// Both print Salt's {"return": ...} through the outputter (nested unless --out).
// Checked against real salt-key 3008.5: --gen-signature's texts, exit codes and file
// (mode 0400) are identical, the signature bytes too. Its --gen-keys writes the pair and
// then fails in pem_finger (a traceback on stderr, nothing on stdout, exit 0); sylvite
// prints the fingerprint Salt meant to print.
// Thread-safety: single-threaded.
#pragma once
#include <iosfwd>
#include <optional>
#include <string>

#include "core/config/config.hpp"
#include "core/output/output.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cli::keys {

struct gen_keys_options {
  std::string name;         // --gen-keys
  std::string dir = ".";    // --gen-keys-dir
  int keysize = 2048;       // --keysize (2048..32768, checked by the caller)
};
// Salt's return value: the new (or existing: never overwritten) key's fingerprint, or an
// error text. Errors are values, as in Salt (the exit code stays 0).
wire::value gen_keys(const gen_keys_options& o);

struct gen_signature_options {
  std::string pub;             // --pub  ("" -> <pki_dir>/master.pub)
  std::string priv;            // --priv ("" -> <pki_dir>/master_sign.pem)
  std::string signature_path;  // --signature-path ("" -> pki_dir)
  bool auto_create = false;    // --auto-create: make the signing pair when there is none
  std::optional<int> keysize;  // --keysize given
};
// Salt's return value: true (written), false (a signature file is there already: err
// gets Salt's error line) or a text saying which key is missing.
wire::value gen_signature(const gen_signature_options& o, const config::master_config& cfg, std::ostream& err);

}  // namespace sylvite::cli::keys
