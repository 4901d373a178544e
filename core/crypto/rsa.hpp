// sylvite::crypto RSA: keys, PEM, OAEP, PKCS#1 v1.5 signatures, X9.31 raw operations,
// fingerprints, hashing and randomness (OpenSSL 3 EVP). No Asio.
// Thread-safety: rsa_key is an immutable handle (shared EVP_PKEY); const operations may
// run concurrently from many threads.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/util/result.hpp"

struct evp_pkey_st;

namespace sylvite::crypto {

enum class errc {
  ok = 0,
  bad_key = 1,        // PEM does not parse / not RSA / no private part when needed
  encrypt_failed,
  decrypt_failed,     // OAEP or Crypticle padding failure
  bad_signature,      // signature does not verify
  bad_mac,            // Crypticle HMAC mismatch (drives re-auth in Salt)
  bad_format,         // too short, bad base64, missing "pickle::" ...
  bad_nonce,          // Crypticle nonce prefix mismatch
  stale_serial,       // publish serial not greater than the last one
  unsupported_algo,   // algorithm name not one of Salt's four
  openssl_error,
};
const boost::system::error_category& crypto_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), crypto_category()}; }

class rsa_key {
 public:
  rsa_key() = default;
  static result<rsa_key> generate(int bits = 2048);
  static result<rsa_key> from_private_pem(std::string_view pem);  // any PEM private key
  static result<rsa_key> from_public_pem(std::string_view pem);   // SPKI or PKCS#1 public
  bool valid() const noexcept { return static_cast<bool>(pkey_); }
  bool has_private() const noexcept { return private_; }
  // PKCS#1 "-----BEGIN RSA PRIVATE KEY-----" (Salt's TraditionalOpenSSL), trailing \n.
  std::string private_pem() const;
  // SubjectPublicKeyInfo "-----BEGIN PUBLIC KEY-----", trailing \n.
  std::string public_pem() const;
  std::size_t size_bytes() const;  // modulus length k
  evp_pkey_st* native() const noexcept { return pkey_.get(); }
  const std::shared_ptr<evp_pkey_st>& shared() const noexcept { return pkey_; }

 private:
  std::shared_ptr<evp_pkey_st> pkey_;
  bool private_ = false;
};

// Salt's "clean key": strip, split lines, join with \n, no trailing newline.
std::string clean_key(std::string_view pem);

enum class enc_algo { oaep_sha1, oaep_sha224 };
enum class sig_algo { pkcs1v15_sha1, pkcs1v15_sha224 };
std::optional<enc_algo> parse_enc_algo(std::string_view name);  // "OAEP-SHA1" / "OAEP-SHA224"
std::optional<sig_algo> parse_sig_algo(std::string_view name);  // "PKCS1v15-SHA1" / "PKCS1v15-SHA224"
std::string_view to_string(enc_algo a);
std::string_view to_string(sig_algo a);

result<std::string> oaep_encrypt(const rsa_key& pub, std::string_view plain, enc_algo a = enc_algo::oaep_sha1);
result<std::string> oaep_decrypt(const rsa_key& priv, std::string_view cipher, enc_algo a = enc_algo::oaep_sha1);
result<std::string> sign(const rsa_key& priv, std::string_view data, sig_algo a = sig_algo::pkcs1v15_sha1);
bool verify(const rsa_key& pub, std::string_view data, std::string_view sig, sig_algo a = sig_algo::pkcs1v15_sha1);

// X9.31 raw private encrypt / public decrypt (RSA_X931_PADDING, no digest): Salt's minion
// token (message "salt") and the auth reply "sig" (hex SHA-256 of the AES key string).
result<std::string> x931_sign(const rsa_key& priv, std::string_view msg);
result<std::string> x931_recover(const rsa_key& pub, std::string_view sig);

// Fingerprint as `salt-key -F` / master_finger: hash of the PEM body lines (without the
// BEGIN/END lines and blank lines, each keeping its "\n"), hex, ':' between byte pairs.
// hash_type: "sha256" (default), "sha1", "sha224", "sha384", "sha512", "md5".
result<std::string> pem_fingerprint(std::string_view pem, std::string_view hash_type = "sha256");

// Hashes and encodings.
std::string sha256(std::string_view data);      // raw 32 bytes
std::string sha256_hex(std::string_view data);  // 64 lowercase hex chars
// hash_type: Salt's hashlib names (md5, sha1, sha224, sha256, sha384, sha512); any other
// name is errc::unsupported_algo.
result<std::string> hash_hex(std::string_view data, std::string_view hash_type);
// hash_hex of a file's content, read in 64 KiB pieces (never whole in memory). Errors:
// unsupported_algo, the errno of open/read (system category), openssl_error.
result<std::string> file_hash_hex(const std::filesystem::path& p, std::string_view hash_type);
// HMAC-SHA256 of data keyed with key (any length, empty allowed): 32 raw bytes; "" only
// if OpenSSL fails.
std::string hmac_sha256(std::string_view key, std::string_view data);
std::string hex(std::string_view bytes);
std::string base64_encode(std::string_view bytes);  // standard alphabet, padded, no newlines
result<std::string> base64_decode(std::string_view text);

// Randomness (OpenSSL DRBG).
std::string random_bytes(std::size_t n);
std::string uuid4();      // "1b4e28ba-2fa1-41d2-883f-0016d3cca427" (Salt's mid)
std::string uuid4_hex();  // 32 lowercase hex chars (Salt's nonce)

// Constant-time comparison (length leak only).
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace sylvite::crypto

template <>
struct boost::system::is_error_code_enum<sylvite::crypto::errc> : std::true_type {};
