// Cross-checks against Salt's own Python (salt.crypt, salt.utils.rsax931,
// salt.utils.crypt) and `cryptography`: tests/fixtures/vectors/crypto.json, made by
// tests/vectors/crypto_vectors.py with the fixed keys in tests/fixtures/keys/.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "core/crypto/rsa.hpp"
#include "test_helpers.hpp"

using namespace sylvite;
using namespace sylvite::crypto;
using test::unhex;

namespace {

struct key_pair {
  rsa_key priv, pub;
};

const key_pair& keys(const std::string& name) {
  static std::map<std::string, key_pair> cache;
  static std::mutex m;
  std::lock_guard lock(m);
  auto it = cache.find(name);
  if (it == cache.end()) {
    const auto& k = test::vectors()["keys"][name];
    key_pair kp;
    kp.priv = *rsa_key::from_private_pem(test::key_file(k["pem"].get<std::string>()));
    kp.pub = *rsa_key::from_public_pem(test::key_file(k["pub"].get<std::string>()));
    it = cache.emplace(name, kp).first;
  }
  return it->second;
}

std::string s(const nlohmann::json& j) { return j.get<std::string>(); }

}  // namespace

TEST(Vectors, KeysMatchSaltSerialization) {
  for (auto& [name, k] : test::vectors()["keys"].items()) {
    const key_pair& kp = keys(name);
    EXPECT_EQ(kp.priv.size_bytes(), k["size"].get<std::size_t>());
    // private_pem() is byte-identical to cryptography's TraditionalOpenSSL output.
    EXPECT_EQ(kp.priv.private_pem(), s(k["private_pem_pkcs1"])) << name;
    EXPECT_EQ(kp.priv.public_pem(), test::key_file(s(k["pub"]))) << name;
    auto pk1 = rsa_key::from_public_pem(s(k["pub_pkcs1"]));
    ASSERT_TRUE(pk1);
    EXPECT_EQ(pk1->public_pem(), test::key_file(s(k["pub"])));
  }
}

TEST(Vectors, Pkcs1v15SignaturesEqualSalts) {
  int n = 0;
  for (const auto& v : test::vectors()["sign"]) {
    const key_pair& kp = keys(s(v["key"]));
    auto a = parse_sig_algo(s(v["algo"]));
    ASSERT_TRUE(a);
    const std::string msg = unhex(s(v["msg"])), sig = unhex(s(v["sig"]));
    auto mine = sign(kp.priv, msg, *a);
    ASSERT_TRUE(mine);
    EXPECT_EQ(hex(*mine), s(v["sig"])) << s(v["algo"]) << " " << s(v["msg"]).substr(0, 16);
    EXPECT_TRUE(verify(kp.pub, msg, sig, *a));
    ++n;
  }
  EXPECT_EQ(n, 20);
}

TEST(Vectors, X931EqualsSaltRsax931) {
  int n = 0, twisted = 0;
  for (const auto& v : test::vectors()["x931"]) {
    const key_pair& kp = keys(s(v["key"]));
    const std::string msg = unhex(s(v["msg"])), sig = unhex(s(v["sig"]));
    auto mine = x931_sign(kp.priv, msg);
    ASSERT_TRUE(mine);
    EXPECT_EQ(hex(*mine), s(v["sig"])) << s(v["msg"]);
    auto r = x931_recover(kp.pub, sig);
    if (v["recoverable"].get<bool>()) {
      ASSERT_TRUE(r) << s(v["msg"]);
      EXPECT_EQ(*r, msg);
    } else {
      EXPECT_EQ(r.error(), make_error_code(errc::bad_signature));
    }
    if (v["twisted"].get<bool>()) ++twisted;  // OpenSSL emitted n - s, not s
    ++n;
  }
  EXPECT_EQ(n, 64);
  EXPECT_GT(twisted, 0);  // both halves of min(s, n - s) are covered
  EXPECT_LT(twisted, n);
}

TEST(Vectors, OaepCiphertextsFromPythonDecrypt) {
  int n = 0;
  for (const auto& v : test::vectors()["oaep"]) {
    const key_pair& kp = keys(s(v["key"]));
    auto a = parse_enc_algo(s(v["algo"]));
    ASSERT_TRUE(a);
    auto p = oaep_decrypt(kp.priv, unhex(s(v["cipher"])), *a);
    ASSERT_TRUE(p) << s(v["algo"]);
    EXPECT_EQ(hex(*p), s(v["plain"]));
    ++n;
  }
  EXPECT_EQ(n, 16);
}

TEST(Vectors, PemFingerEqualsSalts) {
  int n = 0;
  for (const auto& v : test::vectors()["pem_finger"]) {
    auto f = pem_fingerprint(s(v["text"]), s(v["hash"]));
    ASSERT_TRUE(f);
    EXPECT_EQ(*f, s(v["finger"])) << s(v["hash"]) << " " << testing::PrintToString(s(v["text"]));
    ++n;
  }
  EXPECT_GT(n, 60);
}

TEST(Vectors, CleanKeyEqualsSalts) {
  for (const auto& v : test::vectors()["clean_key"])
    EXPECT_EQ(clean_key(s(v["text"])), s(v["clean"])) << testing::PrintToString(s(v["text"]));
}

TEST(Vectors, Base64EqualsPythons) {
  for (const auto& v : test::vectors()["base64"]) {
    EXPECT_EQ(base64_encode(unhex(s(v["bytes"]))), s(v["text"]));
    EXPECT_EQ(hex(*base64_decode(s(v["text"]))), s(v["bytes"]));
  }
}
