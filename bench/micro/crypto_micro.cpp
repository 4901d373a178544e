// sylvite-bench-crypto: per-message cost of Salt's AES layer (crypticle) and of small random
// requests, against OpenSSL's one-shot calls (HMAC(), a new EVP_CIPHER_CTX per message,
// RAND_bytes per request: what crypticle did before session 21), in the same process.
// Usage: sylvite-bench-crypto [messages=200000] [bytes=300]
// Prints one JSON line (ns per operation, medians of 5 passes).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/crypto/crypticle.hpp"

namespace {

using clk = std::chrono::steady_clock;

double ns_per_op(int n, const std::function<void()>& f) {
  std::vector<double> v;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t = clk::now();
    for (int i = 0; i < n; ++i) f();
    v.push_back(std::chrono::duration<double, std::nano>(clk::now() - t).count() / n);
  }
  std::sort(v.begin(), v.end());
  return v[2];
}

// The old path: IV from RAND_bytes, a fresh cipher context, HMAC() one-shot.
std::string seal_oneshot(const std::string& aes, const std::string& mac_key, const std::string& plain) {
  std::string out(16 + (plain.size() / 16 + 1) * 16 + 32, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (RAND_bytes(o, 16) != 1) std::abort();
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  int n1 = 0, n2 = 0;
  EVP_EncryptInit_ex2(c, EVP_aes_192_cbc(), reinterpret_cast<const unsigned char*>(aes.data()), o, nullptr);
  EVP_EncryptUpdate(c, o + 16, &n1, reinterpret_cast<const unsigned char*>(plain.data()),
                    static_cast<int>(plain.size()));
  EVP_EncryptFinal_ex(c, o + 16 + n1, &n2);
  EVP_CIPHER_CTX_free(c);
  const std::size_t body = 16 + static_cast<std::size_t>(n1 + n2);
  unsigned int len = 0;
  HMAC(EVP_sha256(), mac_key.data(), static_cast<int>(mac_key.size()), o, body, o + body, &len);
  out.resize(body + 32);
  return out;
}

// The old opening: HMAC() one-shot, then a fresh cipher context.
std::size_t open_oneshot(const std::string& aes, const std::string& mac_key, const std::string& msg) {
  const auto* m = reinterpret_cast<const unsigned char*>(msg.data());
  const std::size_t body = msg.size() - 32;
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), mac_key.data(), static_cast<int>(mac_key.size()), m, body, mac, &len);
  if (CRYPTO_memcmp(mac, m + body, 32) != 0) std::abort();
  std::string out(body, '\0');
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  int n1 = 0, n2 = 0;
  EVP_DecryptInit_ex2(c, EVP_aes_192_cbc(), reinterpret_cast<const unsigned char*>(aes.data()), m, nullptr);
  EVP_CIPHER_CTX_set_padding(c, 0);
  EVP_DecryptUpdate(c, reinterpret_cast<unsigned char*>(out.data()), &n1, m + 16, static_cast<int>(body - 16));
  EVP_DecryptFinal_ex(c, reinterpret_cast<unsigned char*>(out.data()) + n1, &n2);
  EVP_CIPHER_CTX_free(c);
  return static_cast<std::size_t>(n1 + n2);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sylvite::crypto;
  const char* usage =
      "usage: sylvite-bench-crypto [MESSAGES] [BYTES]\n"
      "  per-message cost of Salt's AES layer and of 16 random bytes, against OpenSSL's\n"
      "  one-shot calls; MESSAGES per pass (default 200000, 1..100000000), BYTES per\n"
      "  message (default 300, 0..1048576); prints one JSON line\n";
  auto arg = [&](int i, long dflt, long lo, long hi) -> long {
    if (argc <= i) return dflt;
    char* end = nullptr;
    const long v = std::strtol(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || v < lo || v > hi) {
      std::fprintf(stderr, "sylvite-bench-crypto: bad argument '%s'\n%s", argv[i], usage);
      std::exit(2);
    }
    return v;
  };
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (argc > 3) {
    std::fputs(usage, stderr);
    return 2;
  }
  const int n = static_cast<int>(arg(1, 200000, 1, 100000000));
  const auto bytes = static_cast<std::size_t>(arg(2, 300, 0, 1 << 20));
  const std::string ks = crypticle::generate_key_string();
  const crypticle c = *crypticle::from_key_string(ks);
  const std::string raw = *base64_decode(ks);
  const std::string aes = raw.substr(0, 24), mac_key = raw.substr(24);
  const std::string plain(bytes, 'x');
  const std::string ct = c.encrypt(plain);
  std::size_t sink = 0;
  const double enc = ns_per_op(n, [&] { sink += c.encrypt(plain).size(); });
  const double dec = ns_per_op(n, [&] { sink += c.decrypt(ct)->size(); });
  const double enc_old = ns_per_op(n, [&] { sink += seal_oneshot(aes, mac_key, plain).size(); });
  const double dec_old = ns_per_op(n, [&] { sink += open_oneshot(aes, mac_key, ct); });
  const double rnd = ns_per_op(n, [&] { sink += random_bytes(16).size(); });
  const double rnd_old = ns_per_op(n, [&] {
    std::string s(16, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), 16) != 1) std::abort();
    sink += s.size();
  });
  const double mac_old = ns_per_op(n, [&] {
    unsigned char m[32];
    unsigned int len = 0;
    HMAC(EVP_sha256(), mac_key.data(), 32, reinterpret_cast<const unsigned char*>(ct.data()), ct.size(), m, &len);
    sink += len;
  });
  std::printf(
      "{\"bytes\": %zu, \"messages\": %d, \"encrypt_ns\": %.0f, \"encrypt_oneshot_ns\": %.0f, \"decrypt_ns\": %.0f, \"decrypt_oneshot_ns\": %.0f, "
      "\"hmac_oneshot_ns\": %.0f, \"random16_ns\": %.0f, \"rand_bytes16_ns\": %.0f, \"sink\": %zu}\n",
      bytes, n, enc, enc_old, dec, dec_old, mac_old, rnd, rnd_old, sink % 10);
  return 0;
}
