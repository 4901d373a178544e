// sylvite::crypto RSA: key loading/generation/PEM output, OAEP, PKCS#1 v1.5 signatures and
// the X9.31 raw operations Salt uses for tokens and the AES-key signature.
// Thread-safety: an rsa_key shares one immutable EVP_PKEY; every operation uses its own
// EVP_PKEY_CTX / EVP_MD_CTX (the OAEP and private-key ones cached per thread, see
// thread_ctx), so const operations run concurrently. The X9.31 calls go through the
// legacy RSA object cached inside the EVP_PKEY (OpenSSL fills that cache under
// the key's lock; RSA blinding is per-thread-safe inside OpenSSL).
#include <openssl/bio.h>
#include <openssl/decoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/crypto/rsa.hpp"

namespace sylvite::crypto {

namespace {

struct bio_free {
  void operator()(BIO* b) const noexcept { BIO_free(b); }
};
struct pkey_ctx_free {
  void operator()(EVP_PKEY_CTX* c) const noexcept { EVP_PKEY_CTX_free(c); }
};
struct md_ctx_free {
  void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
};
struct decoder_ctx_free {
  void operator()(OSSL_DECODER_CTX* c) const noexcept { OSSL_DECODER_CTX_free(c); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using pkey_ctx_ptr = std::unique_ptr<EVP_PKEY_CTX, pkey_ctx_free>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, md_ctx_free>;
using decoder_ctx_ptr = std::unique_ptr<OSSL_DECODER_CTX, decoder_ctx_free>;

std::shared_ptr<evp_pkey_st> own(EVP_PKEY* k) {
  return std::shared_ptr<evp_pkey_st>(k, [](EVP_PKEY* p) { EVP_PKEY_free(p); });
}

// Errors are reported through our error codes; never leave stale entries in OpenSSL's
// per-thread queue (they would confuse the next caller on this thread).
template <class E>
E fail(E e) {
  ERR_clear_error();
  return e;
}

bio_ptr mem_bio(std::string_view s) {
  if (s.size() > static_cast<std::size_t>(INT32_MAX)) return nullptr;
  return bio_ptr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size())));
}

std::string bio_string(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  if (n <= 0 || data == nullptr) return {};
  return std::string(data, static_cast<std::size_t>(n));
}

// Never prompt on the terminal for an encrypted PEM: no passphrase -> load fails.
int no_password(char*, int, int, void*) { return -1; }

bool is_rsa(const EVP_PKEY* k) { return k != nullptr && EVP_PKEY_get_base_id(k) == EVP_PKEY_RSA; }

const EVP_MD* enc_md(enc_algo a) { return a == enc_algo::oaep_sha224 ? EVP_sha224() : EVP_sha1(); }
const EVP_MD* sig_md(sig_algo a) { return a == sig_algo::pkcs1v15_sha224 ? EVP_sha224() : EVP_sha1(); }

const unsigned char* u8(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// The legacy RSA* view of the key for RSA_X931_PADDING. OpenSSL 3's RSA signature
// provider refuses X9.31 padding without a digest ("invalid x931 digest"), so the raw
// private-encrypt / public-decrypt Salt calls through ctypes are only reachable via the
// deprecated RSA_* API. These are the same calls salt/utils/rsax931.py makes.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
// The RSA public key PEMs a minion sends ("PUBLIC KEY" = SPKI, "RSA PUBLIC KEY" = PKCS#1)
// through OpenSSL's direct ASN.1 readers: about 30x cheaper than building an OSSL_DECODER
// chain per key (the decoder stays the fallback). An encrypted PEM is refused, never
// asked a password for (no_password).
EVP_PKEY* fast_public_pem(std::string_view pem) {
  const bool spki = pem.find("-----BEGIN PUBLIC KEY-----") != std::string_view::npos;
  const bool pkcs1 = !spki && pem.find("-----BEGIN RSA PUBLIC KEY-----") != std::string_view::npos;
  if (!spki && !pkcs1) return nullptr;
  bio_ptr bio = mem_bio(pem);
  if (!bio) return nullptr;
  RSA* rsa = spki ? PEM_read_bio_RSA_PUBKEY(bio.get(), nullptr, no_password, nullptr)
                  : PEM_read_bio_RSAPublicKey(bio.get(), nullptr, no_password, nullptr);
  if (rsa == nullptr || RSA_test_flags(rsa, RSA_FLAG_TYPE_MASK) != RSA_FLAG_TYPE_RSA) {  // not RSA-PSS
    RSA_free(rsa);
    ERR_clear_error();
    return nullptr;
  }
  EVP_PKEY* k = EVP_PKEY_new();
  if (k == nullptr || EVP_PKEY_assign_RSA(k, rsa) != 1) {
    RSA_free(rsa);
    EVP_PKEY_free(k);
    return nullptr;
  }
  return k;
}

RSA* legacy_rsa(const rsa_key& k) {
  // RSA_private_encrypt takes a non-const RSA*; it only touches the internally locked
  // blinding / Montgomery caches.
  return const_cast<RSA*>(EVP_PKEY_get0_RSA(k.native()));
}
int x931_private_encrypt(std::string_view msg, unsigned char* out, RSA* rsa) {
  return RSA_private_encrypt(static_cast<int>(msg.size()), u8(msg), out, rsa, RSA_X931_PADDING);
}
int x931_public_decrypt(std::string_view sig, unsigned char* out, RSA* rsa) {
  return RSA_public_decrypt(static_cast<int>(sig.size()), u8(sig), out, rsa, RSA_X931_PADDING);
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace

// ---- keys -------------------------------------------------------------------------------

result<rsa_key> rsa_key::generate(int bits) {
  if (bits < 512 || bits > 16384) return errc::bad_key;
  pkey_ctx_ptr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_rsa_keygen_bits(ctx.get(), bits) <= 0)
    return fail(errc::openssl_error);
  // e = 65537 is OpenSSL's default public exponent (Salt: gen_keys(e=65537)).
  EVP_PKEY* k = nullptr;
  if (EVP_PKEY_generate(ctx.get(), &k) <= 0 || k == nullptr) return fail(errc::openssl_error);
  rsa_key out;
  out.pkey_ = own(k);
  out.private_ = true;
  (void)legacy_rsa(out);  // fill OpenSSL's legacy cache now, not on a hot path
  ERR_clear_error();
  return out;
}

result<rsa_key> rsa_key::from_private_pem(std::string_view pem) {
  bio_ptr bio = mem_bio(pem);
  if (!bio) return fail(errc::bad_key);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr);
  if (k == nullptr) return fail(errc::bad_key);
  auto owned = own(k);
  if (!is_rsa(k)) return fail(errc::bad_key);
  rsa_key out;
  out.pkey_ = std::move(owned);
  out.private_ = true;
  if (legacy_rsa(out) == nullptr) return fail(errc::bad_key);
  return out;
}

result<rsa_key> rsa_key::from_public_pem(std::string_view pem) {
  // Like cryptography's load_pem_public_key: SPKI ("PUBLIC KEY") or PKCS#1
  // ("RSA PUBLIC KEY"); a private key PEM is not a public key.
  if (pem.find("PRIVATE KEY-----") != std::string_view::npos) return errc::bad_key;
  if (EVP_PKEY* fast = fast_public_pem(pem)) {
    rsa_key out;
    out.pkey_ = own(fast);
    out.private_ = false;
    return out;
  }
  bio_ptr bio = mem_bio(pem);
  if (!bio) return fail(errc::bad_key);
  EVP_PKEY* k = nullptr;
  decoder_ctx_ptr dctx(OSSL_DECODER_CTX_new_for_pkey(&k, "PEM", nullptr, "RSA",
                                                     OSSL_KEYMGMT_SELECT_PUBLIC_KEY, nullptr,
                                                     nullptr));
  if (!dctx) return fail(errc::openssl_error);
  if (OSSL_DECODER_from_bio(dctx.get(), bio.get()) != 1 || k == nullptr) {
    if (k != nullptr) EVP_PKEY_free(k);
    return fail(errc::bad_key);
  }
  auto owned = own(k);
  if (!is_rsa(k)) return fail(errc::bad_key);
  rsa_key out;
  out.pkey_ = std::move(owned);
  out.private_ = false;
  if (legacy_rsa(out) == nullptr) return fail(errc::bad_key);
  return out;
}

std::string rsa_key::private_pem() const {
  if (!pkey_ || !private_) return {};
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio) return {};
  // PKCS#1 "RSA PRIVATE KEY", unencrypted: cryptography's TraditionalOpenSSL.
  if (PEM_write_bio_PrivateKey_traditional(bio.get(), pkey_.get(), nullptr, nullptr, 0, nullptr,
                                           nullptr) != 1)
    return fail(std::string{});
  return bio_string(bio.get());
}

std::string rsa_key::public_pem() const {
  if (!pkey_) return {};
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio) return {};
  if (PEM_write_bio_PUBKEY(bio.get(), pkey_.get()) != 1) return fail(std::string{});
  return bio_string(bio.get());
}

std::size_t rsa_key::size_bytes() const {
  if (!pkey_) return 0;
  int n = EVP_PKEY_get_size(pkey_.get());
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

// ---- algorithm names --------------------------------------------------------------------

std::optional<enc_algo> parse_enc_algo(std::string_view name) {
  if (name == "OAEP-SHA1") return enc_algo::oaep_sha1;
  if (name == "OAEP-SHA224") return enc_algo::oaep_sha224;
  return std::nullopt;
}

std::optional<sig_algo> parse_sig_algo(std::string_view name) {
  if (name == "PKCS1v15-SHA1") return sig_algo::pkcs1v15_sha1;
  if (name == "PKCS1v15-SHA224") return sig_algo::pkcs1v15_sha224;
  return std::nullopt;
}

std::string_view to_string(enc_algo a) { return a == enc_algo::oaep_sha224 ? "OAEP-SHA224" : "OAEP-SHA1"; }
std::string_view to_string(sig_algo a) {
  return a == sig_algo::pkcs1v15_sha224 ? "PKCS1v15-SHA224" : "PKCS1v15-SHA1";
}

// ---- OAEP -------------------------------------------------------------------------------

namespace {
bool setup_oaep(EVP_PKEY_CTX* ctx, enc_algo a) {
  const EVP_MD* md = enc_md(a);
  // MGF1 with the same hash, empty label (cryptography's OAEP(MGF1(h), h, None)).
  return EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_OAEP_PADDING) > 0 &&
         EVP_PKEY_CTX_set_rsa_oaep_md(ctx, md) > 0 && EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, md) > 0;
}
}  // namespace

namespace {
// A private-key operation on the same key repeats on every sign-in (the master's key: one
// OAEP decrypt of the token, one signature of the reply), and the reply's encryptions to
// the minion's key come three in a row. Creating and initialising an
// EVP_PKEY_CTX each time costs a provider fetch, a key export check and the parameter
// setters, so each thread keeps one initialised context per operation and reuses it while
// the key is the same one: the weak_ptr compares the key's control block, so a freed key
// whose address is reused by another never matches. The context holds a reference to its
// key: each thread keeps the last key it used (the master's, or the last minion's public
// key) until its next call with another key or its exit.
// A failed operation drops the context (the next call starts clean).
struct thread_ctx {
  std::weak_ptr<evp_pkey_st> key;
  int variant = -1;
  pkey_ctx_ptr ctx;

  template <class Init>
  EVP_PKEY_CTX* get(const rsa_key& k, int v, Init init) {
    const auto& sp = k.shared();
    if (ctx && variant == v && !key.expired() && !key.owner_before(sp) && !sp.owner_before(key))
      return ctx.get();
    ctx.reset(EVP_PKEY_CTX_new_from_pkey(nullptr, k.native(), nullptr));
    if (!ctx || !init(ctx.get())) {
      ctx.reset();
      return nullptr;
    }
    key = sp;
    variant = v;
    return ctx.get();
  }
  void drop() noexcept { ctx.reset(); }
};
}  // namespace

result<std::string> oaep_encrypt(const rsa_key& pub, std::string_view plain, enc_algo a) {
  if (!pub.valid()) return errc::bad_key;
  // The auth reply encrypts three values (token, AES key, session key) to one minion key
  // in a row: the context is made once for them (thread_ctx, above).
  thread_local thread_ctx cache;
  EVP_PKEY_CTX* ctx = cache.get(pub, static_cast<int>(a), [a](EVP_PKEY_CTX* c) {
    return EVP_PKEY_encrypt_init(c) > 0 && setup_oaep(c, a);
  });
  if (ctx == nullptr) return fail(errc::openssl_error);
  // The ciphertext is exactly k bytes: one call into a k-byte buffer.
  std::string out(pub.size_bytes(), '\0');
  std::size_t len = out.size();
  if (EVP_PKEY_encrypt(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, u8(plain), plain.size()) <= 0) {
    cache.drop();
    return fail(errc::encrypt_failed);  // e.g. plaintext longer than k - 2*hLen - 2
  }
  out.resize(len);
  return out;
}

result<std::string> oaep_decrypt(const rsa_key& priv, std::string_view cipher, enc_algo a) {
  if (!priv.valid() || !priv.has_private()) return errc::bad_key;
  // cryptography insists on a ciphertext of exactly the modulus length.
  if (cipher.size() != priv.size_bytes()) return errc::decrypt_failed;
  thread_local thread_ctx cache;
  EVP_PKEY_CTX* ctx = cache.get(priv, static_cast<int>(a), [a](EVP_PKEY_CTX* c) {
    return EVP_PKEY_decrypt_init(c) > 0 && setup_oaep(c, a);
  });
  if (ctx == nullptr) return fail(errc::openssl_error);
  // The plaintext is at most k - 2*hLen - 2 bytes: one call into a k-byte buffer.
  std::string out(cipher.size(), '\0');
  std::size_t len = out.size();
  if (EVP_PKEY_decrypt(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, u8(cipher),
                       cipher.size()) <= 0) {
    cache.drop();
    return fail(errc::decrypt_failed);
  }
  out.resize(len);
  return out;
}

// ---- PKCS#1 v1.5 signatures -------------------------------------------------------------

result<std::string> sign(const rsa_key& priv, std::string_view data, sig_algo a) {
  if (!priv.valid() || !priv.has_private()) return errc::bad_key;
  // Hash, then sign the digest with a per-thread context whose signature_md is set: the
  // same PKCS#1 v1.5 signature (DigestInfo of the hash) as EVP_DigestSign.
  unsigned char digest[SHA224_DIGEST_LENGTH > SHA_DIGEST_LENGTH ? SHA224_DIGEST_LENGTH : SHA_DIGEST_LENGTH];
  std::size_t dlen = 0;
  if (a == sig_algo::pkcs1v15_sha224) {
    SHA224(u8(data), data.size(), digest);
    dlen = SHA224_DIGEST_LENGTH;
  } else {
    SHA1(u8(data), data.size(), digest);
    dlen = SHA_DIGEST_LENGTH;
  }
  thread_local thread_ctx cache;
  EVP_PKEY_CTX* ctx = cache.get(priv, static_cast<int>(a), [a](EVP_PKEY_CTX* c) {
    return EVP_PKEY_sign_init(c) > 0 && EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_PADDING) > 0 &&
           EVP_PKEY_CTX_set_signature_md(c, sig_md(a)) > 0;
  });
  if (ctx == nullptr) return fail(errc::openssl_error);
  std::string out(priv.size_bytes(), '\0');
  std::size_t len = out.size();
  if (EVP_PKEY_sign(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, digest, dlen) <= 0) {
    cache.drop();
    return fail(errc::openssl_error);
  }
  out.resize(len);
  return out;
}

bool verify(const rsa_key& pub, std::string_view data, std::string_view sig, sig_algo a) {
  if (!pub.valid()) return false;
  md_ctx_ptr mctx(EVP_MD_CTX_new());
  EVP_PKEY_CTX* pctx = nullptr;
  if (!mctx || EVP_DigestVerifyInit(mctx.get(), &pctx, sig_md(a), nullptr, pub.native()) != 1 ||
      EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0)
    return fail(false);
  if (EVP_DigestVerify(mctx.get(), u8(sig), sig.size(), u8(data), data.size()) != 1)
    return fail(false);
  return true;
}

// ---- X9.31 ------------------------------------------------------------------------------

result<std::string> x931_sign(const rsa_key& priv, std::string_view msg) {
  if (!priv.valid() || !priv.has_private()) return errc::bad_key;
  const std::size_t k = priv.size_bytes();
  // X9.31 needs at least the 0x6A/0x6B header and the 0xCC trailer around the message.
  if (k < 2 || msg.size() > k - 2) return errc::encrypt_failed;
  RSA* rsa = legacy_rsa(priv);
  if (rsa == nullptr) return fail(errc::bad_key);
  std::string out(k, '\0');
  int n = x931_private_encrypt(msg, reinterpret_cast<unsigned char*>(out.data()), rsa);
  if (n < 0) return fail(errc::encrypt_failed);
  out.resize(static_cast<std::size_t>(n));  // always k: OpenSSL left-pads min(s, n-s)
  return out;
}

result<std::string> x931_recover(const rsa_key& pub, std::string_view sig) {
  if (!pub.valid()) return errc::bad_key;
  const std::size_t k = pub.size_bytes();
  // Salt hands any length to RSA_public_decrypt; OpenSSL refuses more than k bytes and
  // reads a shorter input as a big-endian number with leading zeros.
  if (sig.empty() || sig.size() > k) return errc::bad_signature;
  RSA* rsa = legacy_rsa(pub);
  if (rsa == nullptr) return fail(errc::bad_key);
  std::string out(k, '\0');
  int n = x931_public_decrypt(sig, reinterpret_cast<unsigned char*>(out.data()), rsa);
  if (n < 0) return fail(errc::bad_signature);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

}  // namespace sylvite::crypto
