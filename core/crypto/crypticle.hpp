// sylvite::crypto crypticle: Salt's AES layer.
// Key string = base64(56 random bytes) (76 chars): bytes 0-23 AES-192 key, 24-55 HMAC key.
// encrypt: PKCS#7 pad, random IV, AES-192-CBC, out = IV || CT || HMAC-SHA256(IV || CT).
// dumps(obj, nonce): encrypt("pickle::" [+ 32-char nonce] + salt-payload msgpack(obj)).
// loads(data, nonce): decrypt, require "pickle::" (Salt silently yields {} without it:
// we return errc::bad_format and let the caller decide), check nonce, unpack; if the
// result is a map with "serial" it is removed and must be > the last serial seen by this
// object (else errc::stale_serial).
// Thread-safety: encrypt/decrypt/dumps are const and thread-safe; loads() updates the
// serial counter under an internal atomic, safe to call concurrently.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/crypto/rsa.hpp"
#include "core/wire/value.hpp"

namespace sylvite::crypto {

class crypticle {
 public:
  static std::string generate_key_string();
  static result<crypticle> from_key_string(std::string_view key_string);

  const std::string& key_string() const noexcept { return key_string_; }
  std::string encrypt(std::string_view plain) const;
  result<std::string> decrypt(std::string_view data) const;

  std::string dumps(const wire::value& obj, std::string_view nonce = {}) const;
  // serial_out (optional): receives the load's "serial" when it has one (else untouched).
  result<wire::value> loads(std::string_view data, std::string_view nonce = {},
                            bool check_serial = true, std::int64_t* serial_out = nullptr) const;

  crypticle(const crypticle& o);
  crypticle& operator=(const crypticle& o);
  crypticle() = default;

 private:
  std::string key_string_;
  std::string aes_key_;   // 24 bytes
  std::string hmac_key_;  // 32 bytes
  mutable std::atomic<std::int64_t> last_serial_{0};
};

}  // namespace sylvite::crypto
