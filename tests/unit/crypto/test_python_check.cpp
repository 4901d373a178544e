// Reverse cross-check: C++-made ciphertexts, signatures, keys and encodings are handed to
// Salt's own Python (tests/vectors/crypto_check.py) to decrypt/verify. Needs the Salt venv
// python in $SYLVITE_PYTHON (e.g. build/venv/bin/python or /tmp/saltvenv/3008/bin/python);
// skipped when unset or missing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "test_helpers.hpp"

using namespace sylvite;
using namespace sylvite::crypto;
using json = nlohmann::json;

TEST(PythonCheck, SaltAcceptsWhatWeMake) {
  const char* py = std::getenv("SYLVITE_PYTHON");
  struct stat st {};
  if (py == nullptr || *py == '\0' || ::stat(py, &st) != 0)
    GTEST_SKIP() << "SYLVITE_PYTHON unset or missing: no Salt python to check against";

  json doc;
  std::map<std::string, rsa_key> privs;
  auto gen = rsa_key::generate(2048);
  ASSERT_TRUE(gen);
  privs["gen"] = *gen;
  privs["a"] = *rsa_key::from_private_pem(test::key_file("crypto_a.pem"));
  privs["b"] = *rsa_key::from_private_pem(test::key_file("crypto_b.pem"));
  for (auto& [name, k] : privs) {
    doc["keys"][name] = {{"private_pem", k.private_pem()}, {"public_pem", k.public_pem()}};
  }
  doc["keys"]["gen"]["bits"] = 2048;

  doc["oaep"] = json::array();
  doc["sign"] = json::array();
  doc["x931"] = json::array();
  doc["finger"] = json::array();
  doc["clean_key"] = json::array();
  for (auto& [name, k] : privs) {
    auto pub = rsa_key::from_public_pem(k.public_pem());
    ASSERT_TRUE(pub);
    const std::size_t size = k.size_bytes();
    for (enc_algo a : {enc_algo::oaep_sha1, enc_algo::oaep_sha224}) {
      const std::size_t hlen = a == enc_algo::oaep_sha1 ? 20 : 28;
      for (const std::string& plain : {std::string(), crypticle::generate_key_string(),
                                       random_bytes(size - 2 * hlen - 2)}) {
        auto c = oaep_encrypt(*pub, plain, a);
        ASSERT_TRUE(c);
        doc["oaep"].push_back({{"key", name}, {"algo", to_string(a)}, {"plain", hex(plain)},
                               {"cipher", hex(*c)}});
      }
    }
    for (sig_algo a : {sig_algo::pkcs1v15_sha1, sig_algo::pkcs1v15_sha224}) {
      for (const std::string& msg : {std::string(), std::string("load bytes"), random_bytes(3000)}) {
        auto s = sign(k, msg, a);
        ASSERT_TRUE(s);
        doc["sign"].push_back({{"key", name}, {"algo", to_string(a)}, {"msg", hex(msg)},
                               {"sig", hex(*s)}});
      }
    }
    std::vector<std::string> xmsgs = {"salt", sha256_hex(crypticle::generate_key_string()),
                                      random_bytes(size - 2), random_bytes(1)};
    for (int i = 0; i < 12; ++i) xmsgs.push_back(random_bytes(static_cast<std::size_t>(i * 7 + 2)));
    for (const std::string& msg : xmsgs) {
      auto s = x931_sign(k, msg);
      ASSERT_TRUE(s);
      doc["x931"].push_back({{"key", name}, {"msg", hex(msg)}, {"sig", hex(*s)}});
    }
    for (const char* h : {"sha256", "sha1", "sha224", "sha384", "sha512", "md5"}) {
      auto f = pem_fingerprint(k.public_pem(), h);
      ASSERT_TRUE(f);
      doc["finger"].push_back({{"key", name}, {"hash", h}, {"finger", *f}});
    }
    std::string crlf;
    for (char c : k.public_pem()) {
      if (c == '\n') crlf += '\r';
      crlf += c;
    }
    for (const std::string& t : {k.public_pem(), crlf, " \n" + k.public_pem() + "\n\t "})
      doc["clean_key"].push_back({{"text", t}, {"clean", clean_key(t)}});
  }

  const crypticle c = *crypticle::from_key_string(crypticle::generate_key_string());
  doc["crypticle"]["key_string"] = c.key_string();
  doc["crypticle"]["raw"] = json::array();
  for (std::size_t n : {0, 1, 15, 16, 17, 31, 32, 33, 1000}) {
    std::string plain = random_bytes(n);
    doc["crypticle"]["raw"].push_back({{"plain", hex(plain)}, {"cipher", hex(c.encrypt(plain))}});
  }
  doc["crypticle"]["dumps"] = json::array();
  wire::value job = wire::value::object();
  job["fun"] = "test.ping";
  job["arg"] = wire::value::array({1, "two", nullptr, true, 3.5, -7, 1ull << 40});
  job["kwarg"] = wire::value::object({{"a", "b"}});
  for (const std::string& nonce : {std::string(), uuid4_hex()}) {
    doc["crypticle"]["dumps"].push_back(
        {{"nonce", nonce.empty() ? json(nullptr) : json(nonce)}, {"cipher", hex(c.dumps(job, nonce))},
         {"expect", json(job)}});
  }
  wire::value with_serial = job;
  with_serial["serial"] = 9;
  doc["crypticle"]["dumps"].push_back(
      {{"nonce", nullptr}, {"cipher", hex(c.dumps(with_serial))}, {"expect", json(job)}});

  doc["uuid4"] = json::array();
  doc["uuid4_hex"] = json::array();
  for (int i = 0; i < 20; ++i) {
    doc["uuid4"].push_back(uuid4());
    doc["uuid4_hex"].push_back(uuid4_hex());
  }
  doc["base64"] = json::array();
  for (std::size_t n = 0; n < 12; ++n) {
    std::string b = random_bytes(n);
    doc["base64"].push_back({{"bytes", hex(b)}, {"text", base64_encode(b)}});
  }

  const std::string dir = testing::TempDir();
  const std::string path = dir + "/sylvite_crypto_check.json";
  const std::string out = dir + "/sylvite_crypto_check.out";
  {
    std::ofstream f(path);
    f << doc.dump();
  }
  const std::string cmd = std::string("'") + py + "' '" +
                          test::source_path("tests/vectors/crypto_check.py") + "' '" + path +
                          "' > '" + out + "' 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << test::read_file(out);
  std::cout << test::read_file(out);
  std::remove(path.c_str());
  std::remove(out.c_str());
  std::remove(path.c_str());
  std::remove(out.c_str());
}
