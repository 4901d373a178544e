// Unit tests for the Crypticle cipher layer (key strings, encrypt/decrypt, failures).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "core/crypto/crypticle.hpp"
#include "test_helpers.hpp"

using namespace sylvite;
using namespace sylvite::crypto;

namespace {

crypticle make() {
  auto c = crypticle::from_key_string(crypticle::generate_key_string());
  EXPECT_TRUE(c);
  return *c;
}

// IV || AES-192-CBC(blocks, no padding added) || HMAC: lets a test forge authentic
// messages with arbitrary final bytes.
std::string seal_raw(const std::string& key_string, const std::string& blocks) {
  std::string raw = *base64_decode(key_string);
  std::string aes = raw.substr(0, 24), mac_key = raw.substr(24);
  std::string iv = random_bytes(16);
  std::string ct(blocks.size() + 16, '\0');
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int n1 = 0, n2 = 0;
  EVP_EncryptInit_ex(ctx, EVP_aes_192_cbc(), nullptr, reinterpret_cast<const unsigned char*>(aes.data()),
                     reinterpret_cast<const unsigned char*>(iv.data()));
  EVP_CIPHER_CTX_set_padding(ctx, 0);
  EVP_EncryptUpdate(ctx, reinterpret_cast<unsigned char*>(ct.data()), &n1,
                    reinterpret_cast<const unsigned char*>(blocks.data()), static_cast<int>(blocks.size()));
  EVP_EncryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(ct.data()) + n1, &n2);
  EVP_CIPHER_CTX_free(ctx);
  ct.resize(static_cast<std::size_t>(n1 + n2));
  std::string body = iv + ct;
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), mac_key.data(), static_cast<int>(mac_key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &len);
  return body + std::string(reinterpret_cast<char*>(mac), len);
}

}  // namespace

TEST(Crypticle, KeyString) {
  std::string ks = crypticle::generate_key_string();
  EXPECT_EQ(ks.size(), 76u);
  EXPECT_EQ(base64_decode(ks)->size(), 56u);
  EXPECT_NE(ks, crypticle::generate_key_string());
  auto c = crypticle::from_key_string(ks);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->key_string(), ks);
  EXPECT_TRUE(crypticle::from_key_string(ks + "\n"));  // a key file's trailing newline
}

TEST(Crypticle, BadKeyStrings) {
  EXPECT_EQ(crypticle::from_key_string("").error(), make_error_code(errc::bad_key));
  EXPECT_EQ(crypticle::from_key_string("not base64!").error(), make_error_code(errc::bad_format));
  EXPECT_EQ(crypticle::from_key_string(base64_encode(random_bytes(55))).error(),
            make_error_code(errc::bad_key));
  EXPECT_EQ(crypticle::from_key_string(base64_encode(random_bytes(57))).error(),
            make_error_code(errc::bad_key));
  EXPECT_EQ(crypticle::from_key_string(base64_encode(random_bytes(32))).error(),
            make_error_code(errc::bad_key));  // a 256-bit key_size is not used by Salt
}

TEST(Crypticle, RoundTripAllLengths) {
  const crypticle c = make();
  for (std::size_t n = 0; n <= 100; ++n) {
    std::string plain = random_bytes(n);
    std::string ct = c.encrypt(plain);
    EXPECT_EQ(ct.size(), 16 + (n / 16 + 1) * 16 + 32) << n;
    auto p = c.decrypt(ct);
    ASSERT_TRUE(p) << n;
    EXPECT_EQ(*p, plain);
  }
  EXPECT_NE(c.encrypt("same"), c.encrypt("same"));  // random IV
  std::string big = random_bytes(1 << 20);
  EXPECT_EQ(*c.decrypt(c.encrypt(big)), big);
}

TEST(Crypticle, CopyKeepsKeys) {
  const crypticle c = make();
  crypticle d(c);
  crypticle e;
  e = c;
  std::string ct = c.encrypt("x");
  EXPECT_EQ(*d.decrypt(ct), "x");
  EXPECT_EQ(*e.decrypt(ct), "x");
  EXPECT_EQ(e.key_string(), c.key_string());
}

TEST(Crypticle, WrongKeyIsBadMac) {
  const crypticle c = make(), other = make();
  EXPECT_EQ(other.decrypt(c.encrypt("payload")).error(), make_error_code(errc::bad_mac));
  // Same AES key, different HMAC key: still refused before decrypting.
  std::string raw = *base64_decode(c.key_string());
  raw[40] = static_cast<char>(raw[40] ^ 1);
  auto half = crypticle::from_key_string(base64_encode(raw));
  ASSERT_TRUE(half);
  EXPECT_EQ(half->decrypt(c.encrypt("payload")).error(), make_error_code(errc::bad_mac));
}

TEST(Crypticle, TruncatedAtEveryLength) {
  const crypticle c = make();
  const std::string ct = c.encrypt(std::string(40, 'p'));  // 16 + 48 + 32 = 96
  for (std::size_t n = 0; n < ct.size(); ++n) {
    auto r = c.decrypt(ct.substr(0, n));
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error(), make_error_code(n < 64 ? errc::bad_format : errc::bad_mac)) << n;
  }
  EXPECT_EQ(c.decrypt(ct + "x").error(), make_error_code(errc::bad_mac));
  EXPECT_EQ(c.decrypt(ct.substr(1)).error(), make_error_code(errc::bad_mac));
}

TEST(Crypticle, FlippedBitAnywhereIsBadMac) {
  const crypticle c = make();
  const std::string ct = c.encrypt("a publish payload");
  for (std::size_t i = 0; i < ct.size(); ++i) {
    for (int bit : {0, 7}) {
      std::string t = ct;
      t[i] = static_cast<char>(t[i] ^ (1 << bit));
      EXPECT_EQ(c.decrypt(t).error(), make_error_code(errc::bad_mac)) << i;
    }
  }
}

TEST(Crypticle, EmptyCrypticle) {
  const crypticle c;
  EXPECT_EQ(c.encrypt("x"), "");
  EXPECT_EQ(c.decrypt(std::string(64, 'x')).error(), make_error_code(errc::bad_key));
}

TEST(Crypticle, AuthenticPaddingQuirks) {
  const crypticle c = make();
  const std::string ks = c.key_string();
  // Salt strips last-byte-many bytes without checking the others: accepted.
  std::string block(15, 'A');
  EXPECT_EQ(*c.decrypt(seal_raw(ks, block + '\x01')), block);
  EXPECT_EQ(*c.decrypt(seal_raw(ks, std::string(8, 'B') + std::string(7, 'Z') + '\x08')),
            std::string(8, 'B'));
  EXPECT_EQ(*c.decrypt(seal_raw(ks, std::string(15, 'Q') + '\x10')), "");
  // Lengths PKCS#7 cannot produce are refused.
  EXPECT_EQ(c.decrypt(seal_raw(ks, block + '\x00')).error(), make_error_code(errc::decrypt_failed));
  EXPECT_EQ(c.decrypt(seal_raw(ks, std::string(31, 'A') + '\x11')).error(),
            make_error_code(errc::decrypt_failed));
  // Authentic but not whole blocks.
  std::string partial = seal_raw(ks, std::string(32, 'A'));
  std::string raw = *base64_decode(ks);
  std::string body = partial.substr(0, partial.size() - 32 - 1);  // drop one ct byte
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), raw.data() + 24, 32, reinterpret_cast<const unsigned char*>(body.data()),
       body.size(), mac, &len);
  EXPECT_EQ(c.decrypt(body + std::string(reinterpret_cast<char*>(mac), 32)).error(),
            make_error_code(errc::decrypt_failed));
}

// Standard PKCS#7 opening with fresh OpenSSL contexts: an independent check of encrypt().
std::optional<std::string> open_reference(const std::string& key_string, const std::string& msg) {
  std::string raw = *base64_decode(key_string);
  if (msg.size() < 64) return std::nullopt;
  const std::string body = msg.substr(0, msg.size() - 32);
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), raw.data() + 24, 32, reinterpret_cast<const unsigned char*>(body.data()), body.size(),
       mac, &len);
  if (std::string(reinterpret_cast<char*>(mac), 32) != msg.substr(msg.size() - 32)) return std::nullopt;
  std::string out(body.size(), '\0');
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int n1 = 0, n2 = 0;
  const bool ok =
      EVP_DecryptInit_ex(ctx, EVP_aes_192_cbc(), nullptr, reinterpret_cast<const unsigned char*>(raw.data()),
                         reinterpret_cast<const unsigned char*>(body.data())) == 1 &&
      EVP_DecryptUpdate(ctx, reinterpret_cast<unsigned char*>(out.data()), &n1,
                        reinterpret_cast<const unsigned char*>(body.data()) + 16,
                        static_cast<int>(body.size() - 16)) == 1 &&
      EVP_DecryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(out.data()) + n1, &n2) == 1;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok) return std::nullopt;
  out.resize(static_cast<std::size_t>(n1 + n2));
  return out;
}

// encrypt/decrypt reuse one OpenSSL context per thread and direction, re-keyed per call:
// messages of several keys interleaved on several threads, with failures in between,
// must come out exactly as with fresh contexts.
TEST(Crypticle, ThreadContextsServeInterleavedKeysAndSurviveFailures) {
  std::vector<crypticle> keys;
  for (int i = 0; i < 4; ++i) keys.push_back(make());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const crypticle& k = keys[static_cast<std::size_t>((i + t) % 4)];
        const crypticle& other = keys[static_cast<std::size_t>((i + t + 1) % 4)];
        const std::string plain = random_bytes(static_cast<std::size_t>((i * 7 + t) % 100));
        const std::string ct = k.encrypt(plain);
        if (open_reference(k.key_string(), ct) != plain) bad++;
        if (other.decrypt(ct).has_value()) bad++;  // refused with the wrong key,
        auto opened = k.decrypt(ct);                // then the right key still opens it
        if (!opened || *opened != plain) bad++;
        if (i % 10 == 0) {  // an authentic message with impossible padding, then a good one
          if (k.decrypt(seal_raw(k.key_string(), std::string(15, 'A') + '\x00')).has_value()) bad++;
          auto good = k.decrypt(seal_raw(k.key_string(), std::string(15, 'A') + '\x01'));
          if (!good || *good != std::string(15, 'A')) bad++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// ---- Salt's own ciphertexts (tests/fixtures/vectors/crypto.json) ----------------------------

TEST(CrypticleVectors, DecryptSaltEncrypt) {
  const auto& v = test::vectors()["crypticle"];
  auto c = crypticle::from_key_string(v["key_string"].get<std::string>());
  ASSERT_TRUE(c);
  int n = 0;
  for (const auto& e : v["raw"]) {
    auto p = c->decrypt(test::unhex(e["cipher"].get<std::string>()));
    ASSERT_TRUE(p);
    EXPECT_EQ(hex(*p), e["plain"].get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 30);
  // Salt's loads would return {} for a plaintext without "pickle::"; the cipher layer
  // itself opens it.
  EXPECT_EQ(*c->decrypt(test::unhex(v["no_pickle"]["cipher"].get<std::string>())), "not a pickle");
}
