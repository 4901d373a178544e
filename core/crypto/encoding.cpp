// sylvite::crypto helpers without keys: error category, hashes, hex/base64, randomness,
// uuids, constant-time compare, Salt's clean_key and pem_finger.
// Thread-safety: plain functions; small random requests come from a per-thread buffer.
#include <fcntl.h>
#include <pthread.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto/rsa.hpp"

namespace sylvite::crypto {

namespace {

class crypto_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.crypto"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::bad_key: return "bad or unusable RSA key";
      case errc::encrypt_failed: return "encryption failed";
      case errc::decrypt_failed: return "decryption failed";
      case errc::bad_signature: return "signature does not verify";
      case errc::bad_mac: return "message authentication failed";
      case errc::bad_format: return "malformed input";
      case errc::bad_nonce: return "nonce verification failed";
      case errc::stale_serial: return "message serial not newer than the last one";
      case errc::unsupported_algo: return "unsupported algorithm";
      case errc::openssl_error: return "OpenSSL error";
    }
    return "unknown crypto error";
  }
};

const EVP_MD* md_by_name(std::string_view name) {
  if (name == "sha256") return EVP_sha256();
  if (name == "sha1") return EVP_sha1();
  if (name == "sha224") return EVP_sha224();
  if (name == "sha384") return EVP_sha384();
  if (name == "sha512") return EVP_sha512();
  if (name == "md5") return EVP_md5();
  return nullptr;
}

bool digest(const EVP_MD* md, std::string_view data, std::string& out) {
  unsigned char buf[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), buf, &len, md, nullptr) != 1) return false;
  out.assign(reinterpret_cast<const char*>(buf), len);
  return true;
}

// Python bytes.isspace() / bytes.strip() whitespace.
bool is_bytes_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}
// Python str.isspace() for ASCII (str.strip() also removes \x1c-\x1f).
bool is_str_space(char c) { return is_bytes_space(c) || (c >= '\x1c' && c <= '\x1f'); }
// Python str.splitlines() boundaries in the ASCII range (\r\n counts as one).
bool is_line_break(char c) {
  return c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c' || c == '\x1c' || c == '\x1d' ||
         c == '\x1e';
}

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

const boost::system::error_category& crypto_category() noexcept {
  static const crypto_category_impl cat;
  return cat;
}

std::string clean_key(std::string_view pem) {
  // "\n".join(key.strip().splitlines())
  std::size_t b = 0, e = pem.size();
  while (b < e && is_str_space(pem[b])) ++b;
  while (e > b && is_str_space(pem[e - 1])) --e;
  std::string out;
  out.reserve(e - b);
  for (std::size_t i = b; i < e; ++i) {
    char c = pem[i];
    if (is_line_break(c)) {
      if (c == '\r' && i + 1 < e && pem[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

result<std::string> pem_fingerprint(std::string_view pem, std::string_view hash_type) {
  // salt.utils.crypt.pem_finger(path=...): the file's lines (split on \n, each keeping
  // it), blank lines dropped, then the first and last remaining lines dropped, joined,
  // "\r\n" -> "\n", hashed, hex with ':' between pairs.
  const EVP_MD* md = md_by_name(hash_type);
  if (md == nullptr) return errc::unsupported_algo;
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < pem.size()) {
    std::size_t nl = pem.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? pem.size() : nl + 1;
    std::string_view line = pem.substr(pos, end - pos);
    bool blank = true;
    for (char c : line) {
      if (!is_bytes_space(c)) {
        blank = false;
        break;
      }
    }
    if (!blank) lines.push_back(line);
    pos = end;
  }
  std::string body;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) body.append(lines[i]);
  std::string norm;
  norm.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\r' && i + 1 < body.size() && body[i + 1] == '\n') continue;
    norm.push_back(body[i]);
  }
  std::string raw;
  if (!digest(md, norm, raw)) return errc::openssl_error;
  std::string h = hex(raw);
  std::string out;
  out.reserve(h.size() * 3 / 2);
  for (std::size_t i = 0; i < h.size(); i += 2) {
    if (i) out.push_back(':');
    out.append(h, i, 2);
  }
  return out;
}

std::string sha256(std::string_view data) {
  std::string out;
  if (!digest(EVP_sha256(), data, out)) out.clear();
  return out;
}

std::string sha256_hex(std::string_view data) { return hex(sha256(data)); }

result<std::string> hash_hex(std::string_view data, std::string_view hash_type) {
  const EVP_MD* md = md_by_name(hash_type);
  if (md == nullptr) return errc::unsupported_algo;
  std::string out;
  if (!digest(md, data, out)) return errc::openssl_error;
  return hex(out);
}

result<std::string> file_hash_hex(const std::filesystem::path& p, std::string_view hash_type) {
  const EVP_MD* md = md_by_name(hash_type);
  if (md == nullptr) return errc::unsupported_algo;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) return errc::openssl_error;
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_code(errno, boost::system::system_category());
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return error_code(e, boost::system::system_category());
    }
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf, static_cast<std::size_t>(n)) != 1) {
      ::close(fd);
      return errc::openssl_error;
    }
  }
  ::close(fd);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) return errc::openssl_error;
  return hex(std::string_view(reinterpret_cast<const char*>(out), len));
}

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // HMAC() wants a non-null key pointer even for an empty key.
  static const unsigned char empty_key = 0;
  const void* k = key.empty() ? static_cast<const void*>(&empty_key) : static_cast<const void*>(key.data());
  if (!HMAC(EVP_sha256(), k, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
            data.size(), out, &len))
    return {};
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = digits[b >> 4];
    out[2 * i + 1] = digits[b & 0x0f];
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out.push_back(alphabet[v & 63]);
  }
  std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    std::uint32_t v = at(i) << 16;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.append("==");
  } else if (rest == 2) {
    std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

result<std::string> base64_decode(std::string_view text) {
  // Standard alphabet, '=' padding required (as Python's b64decode). ASCII whitespace
  // (a key file's trailing newline) is skipped; any other character is refused
  // (Python would silently drop it; we are stricter on purpose).
  std::string clean;
  clean.reserve(text.size());
  for (char c : text) {
    if (is_bytes_space(c)) continue;
    if (c != '=' && b64_value(c) < 0) return errc::bad_format;
    clean.push_back(c);
  }
  if (clean.size() % 4 != 0) return errc::bad_format;
  std::size_t pad = 0;
  if (!clean.empty() && clean.back() == '=') ++pad;
  if (clean.size() >= 2 && clean[clean.size() - 2] == '=') ++pad;
  for (std::size_t k = 0; k + pad < clean.size(); ++k)
    if (clean[k] == '=') return errc::bad_format;  // '=' only at the end
  std::string out;
  out.reserve(clean.size() / 4 * 3);
  for (std::size_t i = 0; i < clean.size(); i += 4) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      int d = clean[i + k] == '=' ? 0 : b64_value(clean[i + k]);
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    out.push_back(static_cast<char>((v >> 16) & 0xff));
    out.push_back(static_cast<char>((v >> 8) & 0xff));
    out.push_back(static_cast<char>(v & 0xff));
  }
  out.resize(out.size() - pad);
  return out;
}

namespace {

[[noreturn]] void rand_failed() {
  // Handing out predictable key material would be worse than stopping: the DRBG only
  // fails when the OS entropy source is gone.
  std::fputs("sylvite: OpenSSL RAND_bytes failed, aborting\n", stderr);
  std::abort();
}

void rand_or_abort(unsigned char* p, std::size_t n) {
  if (RAND_bytes(p, static_cast<int>(n)) != 1) rand_failed();
}

// Small requests (IVs, nonces, session keys: one or more per message) are served from a
// buffer of the calling thread, filled by one RAND_bytes call per 4 KiB: a RAND_bytes call
// costs about 0.7 us whatever its size up to there (the DRBG's per-call work), and the
// request path makes one or two per message. Bytes are wiped from the buffer as they are
// handed out. A forked child drops the buffer it inherited (pthread_atfork bumps the
// generation), so parent and child never hand out the same bytes.
constexpr std::size_t kPoolSize = 4096;
constexpr std::size_t kPooledMax = 64;
std::atomic<std::uint64_t> g_fork_gen{0};

struct rand_pool {
  unsigned char buf[kPoolSize];
  std::size_t left = 0;
  std::uint64_t gen = 0;
  rand_pool() = default;
  rand_pool(const rand_pool&) = delete;
  rand_pool& operator=(const rand_pool&) = delete;
  ~rand_pool() { OPENSSL_cleanse(buf, sizeof buf); }
};

void pooled_random(unsigned char* out, std::size_t n) {
  static const bool registered = [] {
    return pthread_atfork(nullptr, nullptr, [] { g_fork_gen.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  thread_local rand_pool pool;
  const std::uint64_t gen = g_fork_gen.load(std::memory_order_relaxed);
  if (!registered) {
    rand_or_abort(out, n);
    return;
  }
  if (pool.gen != gen || pool.left < n) {
    rand_or_abort(pool.buf, kPoolSize);
    pool.left = kPoolSize;
    pool.gen = gen;
  }
  unsigned char* src = pool.buf + (kPoolSize - pool.left);
  std::memcpy(out, src, n);
  OPENSSL_cleanse(src, n);
  pool.left -= n;
}

}  // namespace

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (n == 0) return out;
  auto* p = reinterpret_cast<unsigned char*>(out.data());
  if (n <= kPooledMax) {
    pooled_random(p, n);
  } else {
    rand_or_abort(p, n);
  }
  return out;
}

namespace {
// 16 random bytes with the version (4) and variant (10xx) bits of a random UUID, as hex.
std::string uuid4_hex_digits() {
  unsigned char r[16];
  pooled_random(r, sizeof r);
  r[6] = static_cast<unsigned char>((r[6] & 0x0f) | 0x40);
  r[8] = static_cast<unsigned char>((r[8] & 0x3f) | 0x80);
  return hex(std::string_view(reinterpret_cast<const char*>(r), sizeof r));
}
}  // namespace

std::string uuid4() {
  std::string h = uuid4_hex_digits();
  for (std::size_t at : {8, 13, 18, 23}) h.insert(at, 1, '-');
  return h;
}

std::string uuid4_hex() { return uuid4_hex_digits(); }

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace sylvite::crypto
