// sylvite::crypto crypticle: Salt's AES-192-CBC + HMAC-SHA256 layer (salt.crypt.Crypticle).
// Thread-safety: keys are immutable after construction; encrypt/decrypt/dumps use OpenSSL
// contexts of the calling thread (one each for AES encryption, AES decryption and HMAC,
// re-keyed per call); loads() moves the serial with a CAS loop on an atomic.
#include "core/crypto/crypticle.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sylvite::crypto {

namespace {

constexpr std::size_t aes_key_size = 24;   // AES-192 (Salt: key_size=192 everywhere)
constexpr std::size_t hmac_key_size = 32;  // SHA-256 digest size
constexpr std::size_t block = 16;
constexpr std::size_t mac_size = 32;
constexpr std::size_t max_len = static_cast<std::size_t>(INT32_MAX) - 64;

struct cipher_ctx_free {
  void operator()(EVP_CIPHER_CTX* c) const noexcept { EVP_CIPHER_CTX_free(c); }
};
using cipher_ctx_ptr = std::unique_ptr<EVP_CIPHER_CTX, cipher_ctx_free>;
struct mac_ctx_free {
  void operator()(EVP_MAC_CTX* c) const noexcept { EVP_MAC_CTX_free(c); }
};
using mac_ctx_ptr = std::unique_ptr<EVP_MAC_CTX, mac_ctx_free>;

const unsigned char* u8(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* u8(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

// Fetch the provider implementation once (EVP_aes_192_cbc() would re-fetch per init).
const EVP_CIPHER* aes_192_cbc() {
  static EVP_CIPHER* c = EVP_CIPHER_fetch(nullptr, "AES-192-CBC", nullptr);
  return c;
}

// The calling thread's AES contexts, one per direction: EVP_{En,De}cryptInit_ex2 with the
// cipher, key and IV resets one completely (the padding setting of each stays as its
// direction wants it), so a context is allocated once per thread instead of per message.
EVP_CIPHER_CTX* thread_cipher_ctx(bool encrypt) {
  thread_local cipher_ctx_ptr enc(EVP_CIPHER_CTX_new());
  thread_local cipher_ctx_ptr dec(EVP_CIPHER_CTX_new());
  return encrypt ? enc.get() : dec.get();
}

// The calling thread's HMAC-SHA256 context, re-keyed per call. OpenSSL 3's one-shot HMAC()
// fetches the MAC and the digest and builds a context on every call. build/bin/
// sylvite-bench-crypto compares both paths (docs/benchmarks.md, issue 21 goal 1, session 21).
EVP_MAC_CTX* thread_hmac_ctx() {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  thread_local mac_ctx_ptr ctx = []() -> mac_ctx_ptr {
    if (mac == nullptr) return nullptr;
    mac_ctx_ptr c(EVP_MAC_CTX_new(mac));
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    if (c && EVP_MAC_CTX_set_params(c.get(), params) != 1) c.reset();
    return c;
  }();
  return ctx.get();
}

bool hmac_sha256(std::string_view key, std::string_view data, unsigned char out[mac_size]) {
  if (EVP_MAC_CTX* c = thread_hmac_ctx()) {
    std::size_t len = 0;
    return EVP_MAC_init(c, u8(key), key.size(), nullptr) == 1 &&
           EVP_MAC_update(c, u8(data), data.size()) == 1 && EVP_MAC_final(c, out, &len, mac_size) == 1 &&
           len == mac_size;
  }
  unsigned int len = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), u8(data), data.size(), out,
              &len) != nullptr &&
         len == mac_size;
}

}  // namespace

crypticle::crypticle(const crypticle& o)
    : key_string_(o.key_string_),
      aes_key_(o.aes_key_),
      hmac_key_(o.hmac_key_),
      last_serial_(o.last_serial_.load()) {}

crypticle& crypticle::operator=(const crypticle& o) {
  if (this != &o) {
    key_string_ = o.key_string_;
    aes_key_ = o.aes_key_;
    hmac_key_ = o.hmac_key_;
    last_serial_.store(o.last_serial_.load());
  }
  return *this;
}

std::string crypticle::generate_key_string() {
  return base64_encode(random_bytes(aes_key_size + hmac_key_size));
}

result<crypticle> crypticle::from_key_string(std::string_view key_string) {
  // Errors: bad_format (not base64), bad_key (not 56 bytes once decoded).
  auto raw = base64_decode(key_string);
  if (!raw) return errc::bad_format;
  if (raw->size() != aes_key_size + hmac_key_size) return errc::bad_key;
  crypticle c;
  c.key_string_ = std::string(key_string);
  c.aes_key_ = raw->substr(0, aes_key_size);
  c.hmac_key_ = raw->substr(aes_key_size);
  return c;
}

std::string crypticle::encrypt(std::string_view plain) const {
  // IV || AES-192-CBC(PKCS#7(plain)) || HMAC-SHA256(IV || CT). Returns "" only if this
  // crypticle has no key or OpenSSL fails (neither happens with a valid key).
  if (aes_key_.size() != aes_key_size || aes_192_cbc() == nullptr) return {};
  if (plain.size() > max_len) return {};  // EVP takes int lengths
  std::string out = random_bytes(block);
  out.resize(block + (plain.size() / block + 1) * block + mac_size);
  EVP_CIPHER_CTX* ctx = thread_cipher_ctx(true);
  int n1 = 0, n2 = 0;
  // EVP's default padding is PKCS#7 (always 1..16 bytes), as Salt pads by hand.
  if (ctx == nullptr || EVP_EncryptInit_ex2(ctx, aes_192_cbc(), u8(aes_key_), u8(out), nullptr) != 1 ||
      EVP_EncryptUpdate(ctx, u8(out) + block, &n1, u8(plain), static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx, u8(out) + block + n1, &n2) != 1) {
    ERR_clear_error();
    return {};
  }
  const std::size_t body = block + static_cast<std::size_t>(n1) + static_cast<std::size_t>(n2);
  if (!hmac_sha256(hmac_key_, std::string_view(out.data(), body), u8(out) + body)) {
    ERR_clear_error();
    return {};
  }
  out.resize(body + mac_size);
  return out;
}

result<std::string> crypticle::decrypt(std::string_view data) const {
  // Errors: bad_key (empty crypticle), bad_format (shorter than IV + one block + MAC),
  // bad_mac (HMAC mismatch, checked before anything else is looked at), decrypt_failed
  // (authentic but not whole blocks, or a padding length of 0 or > 16; Salt would return a
  // truncated or empty string there, only a key holder can produce it).
  if (aes_key_.size() != aes_key_size || aes_192_cbc() == nullptr) return errc::bad_key;
  if (data.size() < block + block + mac_size) return errc::bad_format;
  if (data.size() > max_len) return errc::bad_format;  // EVP takes int lengths
  const std::string_view signed_part = data.substr(0, data.size() - mac_size);
  const std::string_view mac = data.substr(data.size() - mac_size);
  unsigned char expect[mac_size];
  if (!hmac_sha256(hmac_key_, signed_part, expect)) {
    ERR_clear_error();
    return errc::openssl_error;
  }
  if (!constant_time_equal(mac, std::string_view(reinterpret_cast<const char*>(expect), mac_size)))
    return errc::bad_mac;
  const std::string_view iv = signed_part.substr(0, block);
  const std::string_view ct = signed_part.substr(block);
  if (ct.size() % block != 0) return errc::decrypt_failed;
  std::string out(ct.size() + block, '\0');
  EVP_CIPHER_CTX* ctx = thread_cipher_ctx(false);
  int n1 = 0, n2 = 0;
  if (ctx == nullptr || EVP_DecryptInit_ex2(ctx, aes_192_cbc(), u8(aes_key_), u8(iv), nullptr) != 1 ||
      EVP_CIPHER_CTX_set_padding(ctx, 0) != 1 ||
      EVP_DecryptUpdate(ctx, u8(out), &n1, u8(ct), static_cast<int>(ct.size())) != 1 ||
      EVP_DecryptFinal_ex(ctx, u8(out) + n1, &n2) != 1) {
    ERR_clear_error();
    return errc::decrypt_failed;
  }
  out.resize(static_cast<std::size_t>(n1 + n2));
  // Salt strips data[-1] bytes without checking the other padding bytes; we do the same
  // but refuse lengths PKCS#7 cannot produce.
  const auto pad = static_cast<unsigned char>(out.back());
  if (pad == 0 || pad > block) return errc::decrypt_failed;
  out.resize(out.size() - pad);
  return out;
}

}  // namespace sylvite::crypto
