// Auth reply verification (minion/auth.hpp) against replies built here with core/crypto,
// the way a Salt 3008 master's _auth builds them (wire protocol section 5.3).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "minion/auth.hpp"

namespace mn = sylvite::minion;
namespace crypto = sylvite::crypto;
namespace wire = sylvite::wire;
namespace fs = std::filesystem;

namespace {

const crypto::rsa_key& master_key() {
  static const crypto::rsa_key k = *crypto::rsa_key::generate(2048);
  return k;
}
const crypto::rsa_key& other_master_key() {
  static const crypto::rsa_key k = *crypto::rsa_key::generate(2048);
  return k;
}
const crypto::rsa_key& minion_key() {
  static const crypto::rsa_key k = *crypto::rsa_key::generate(2048);
  return k;
}

struct reply_opts {
  const crypto::rsa_key* signer = &master_key();  // key that signs and whose pub is sent
  std::string aes = crypto::crypticle::generate_key_string();
  std::string session = crypto::crypticle::generate_key_string();
  bool with_session = true;
  bool echo_token = true;
  bool tamper_sig = false;
  bool bad_aes_sig = false;
  std::optional<std::string> nonce;  // default: the request's
  std::optional<wire::value> ret;    // non-accept outcome
};

wire::value make_reply(const mn::sign_in_request& req, const reply_opts& o) {
  const auto& mk = *o.signer;
  const auto minion_pub = *crypto::rsa_key::from_public_pem(minion_key().public_pem());
  wire::value p = wire::value::object();
  const std::string nonce = o.nonce.value_or(req.nonce);
  if (o.ret) {
    p["ret"] = *o.ret;
    p["nonce"] = nonce;
  } else {
    p["enc"] = "pub";
    p["pub_key"] = crypto::clean_key(mk.public_pem());
    p["publish_port"] = 4505;
    p["aes"] = wire::make_bin(*crypto::oaep_encrypt(minion_pub, o.aes));
    p["sig"] = wire::make_bin(*crypto::x931_sign(mk, crypto::sha256_hex(o.bad_aes_sig ? o.aes + "x" : o.aes)));
    const wire::value& load = req.body["load"];
    if (o.echo_token && load.contains("token")) {
      auto clear = crypto::oaep_decrypt(mk, *wire::as_bytes(load["token"]));
      if (clear) p["token"] = wire::make_bin(*crypto::oaep_encrypt(minion_pub, *clear));
    }
    if (o.with_session) p["session"] = wire::make_bin(*crypto::oaep_encrypt(minion_pub, o.session));
    p["nonce"] = nonce;
  }
  std::string packed = wire::pack_payload(p);
  std::string sig = *crypto::sign(mk, packed);
  if (o.tamper_sig) sig[10] = static_cast<char>(sig[10] ^ 0x55);
  wire::value body = wire::value::object();
  body["enc"] = "clear";
  body["load"] = wire::make_bin(packed);
  body["sig"] = wire::make_bin(sig);
  return body;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sylvite-auth-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  mn::auth_client client(std::string finger = {}, bool rejected_retry = false) {
    mn::auth_settings s;
    s.id = "m1";
    s.pki_dir = dir_;
    s.master_finger = std::move(finger);
    s.rejected_retry = rejected_retry;
    return mn::auth_client(s, minion_key());
  }
  fs::path dir_;
};

}  // namespace

TEST_F(AuthTest, RequestShape) {
  auto c = client();
  auto req = c.make_request();
  EXPECT_EQ(req.body["enc"], "clear");
  EXPECT_EQ(req.body["version"], 3);
  const auto& load = req.body["load"];
  std::vector<std::string> keys;
  for (const auto& [k, v] : load.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"cmd", "id", "nonce", "enc_algo", "sig_algo", "pub"}));
  EXPECT_EQ(load["cmd"], "_auth");
  EXPECT_EQ(load["enc_algo"], "OAEP-SHA1");
  EXPECT_EQ(load["sig_algo"], "PKCS1v15-SHA1");
  EXPECT_EQ(req.nonce.size(), 32u);
  EXPECT_FALSE(req.sent_token);
  EXPECT_EQ(load["pub"], crypto::clean_key(minion_key().public_pem()));
  // With a cached master key the token is included (before pub, as Salt does).
  ASSERT_TRUE(sylvite::util::write_file_atomic(dir_ / "minion_master.pub", master_key().public_pem()));
  auto req2 = c.make_request();
  EXPECT_TRUE(req2.sent_token);
  EXPECT_TRUE(req2.body["load"].contains("token"));
  EXPECT_NE(req2.nonce, req.nonce);
}

TEST_F(AuthTest, GoodReplyTofuThenToken) {
  auto c = client();
  reply_opts o;
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  ASSERT_EQ(r.status, mn::auth_status::accepted) << r.message;
  EXPECT_EQ(r.creds.aes, o.aes);
  EXPECT_EQ(r.creds.session, o.session);
  EXPECT_EQ(r.creds.publish_port, 4505);
  // TOFU wrote the clean key.
  auto cached = sylvite::util::read_file(dir_ / "minion_master.pub");
  ASSERT_TRUE(cached);
  EXPECT_EQ(*cached, crypto::clean_key(master_key().public_pem()));
  // Second sign-in carries the token; the master echoes it.
  auto req2 = c.make_request();
  ASSERT_TRUE(req2.sent_token);
  auto r2 = c.handle_reply(req2, make_reply(req2, o));
  EXPECT_EQ(r2.status, mn::auth_status::accepted) << r2.message;
}

TEST_F(AuthTest, TokenNotEchoedIsRefused) {
  auto c = client();
  ASSERT_TRUE(sylvite::util::write_file_atomic(dir_ / "minion_master.pub", master_key().public_pem()));
  reply_opts o;
  o.echo_token = false;
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
  EXPECT_NE(r.message.find("Invalid master key"), std::string::npos);
}

TEST_F(AuthTest, TamperedSignature) {
  auto c = client();
  ASSERT_TRUE(sylvite::util::write_file_atomic(dir_ / "minion_master.pub", master_key().public_pem()));
  reply_opts o;
  o.tamper_sig = true;
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
  EXPECT_EQ(r.message, "Invalid signature");
  EXPECT_TRUE(r.creds.aes.empty());
}

TEST_F(AuthTest, WrongNonce) {
  auto c = client();
  reply_opts o;
  o.nonce = std::string(32, 'a');
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
  EXPECT_EQ(r.message, "Invalid nonce");
}

TEST_F(AuthTest, MasterKeyChanged) {
  auto c = client();
  ASSERT_TRUE(sylvite::util::write_file_atomic(dir_ / "minion_master.pub", master_key().public_pem()));
  reply_opts o;
  o.signer = &other_master_key();
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
  EXPECT_NE(r.message.find("master key has changed"), std::string::npos) << r.message;
  // The cached key is not replaced.
  EXPECT_EQ(*sylvite::util::read_file(dir_ / "minion_master.pub"), master_key().public_pem());
}

TEST_F(AuthTest, MissingSession) {
  auto c = client();
  reply_opts o;
  o.with_session = false;
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
  EXPECT_NE(r.message.find("session"), std::string::npos);
}

TEST_F(AuthTest, BadAesSignature) {
  auto c = client();
  reply_opts o;
  o.bad_aes_sig = true;
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, o));
  EXPECT_EQ(r.status, mn::auth_status::failed);
}

TEST_F(AuthTest, PendingRejectedFull) {
  auto c = client();
  auto req = c.make_request();
  reply_opts o;
  o.ret = wire::value(true);
  EXPECT_EQ(c.handle_reply(req, make_reply(req, o)).status, mn::auth_status::pending);
  o.ret = wire::value(false);
  EXPECT_EQ(c.handle_reply(req, make_reply(req, o)).status, mn::auth_status::rejected);
  o.ret = wire::value("full");
  EXPECT_EQ(c.handle_reply(req, make_reply(req, o)).status, mn::auth_status::full);
  auto c2 = client({}, /*rejected_retry=*/true);
  o.ret = wire::value(false);
  EXPECT_EQ(c2.handle_reply(req, make_reply(req, o)).status, mn::auth_status::rejected_retry);
  // A pending reply with a wrong nonce is refused before the ret is looked at.
  o.ret = wire::value(true);
  o.nonce = std::string(32, 'b');
  EXPECT_EQ(c.handle_reply(req, make_reply(req, o)).status, mn::auth_status::failed);
}

TEST_F(AuthTest, BadAlgoAndGarbage) {
  auto c = client();
  auto req = c.make_request();
  wire::value body = wire::value::object();
  body["enc"] = "clear";
  body["load"] = wire::value::object({{"ret", "bad enc algo"}});
  EXPECT_EQ(c.handle_reply(req, body).status, mn::auth_status::bad_algo);
  body["load"] = wire::value::object({{"ret", "bad sig algo"}});
  EXPECT_EQ(c.handle_reply(req, body).status, mn::auth_status::bad_algo);
  EXPECT_EQ(c.handle_reply(req, wire::value("bad load")).status, mn::auth_status::failed);
  body["load"] = wire::make_bin("\xc1garbage");
  body["sig"] = wire::make_bin("x");
  EXPECT_EQ(c.handle_reply(req, body).status, mn::auth_status::failed);
}

TEST_F(AuthTest, MasterFinger) {
  auto finger = *crypto::pem_fingerprint(crypto::clean_key(master_key().public_pem()));
  {
    auto c = client(finger);
    auto req = c.make_request();
    auto r = c.handle_reply(req, make_reply(req, reply_opts{}));
    EXPECT_EQ(r.status, mn::auth_status::accepted) << r.message;
  }
  fs::remove(dir_ / "minion_master.pub");
  auto c = client("00:11:22");
  auto req = c.make_request();
  auto r = c.handle_reply(req, make_reply(req, reply_opts{}));
  EXPECT_EQ(r.status, mn::auth_status::finger_mismatch);
  EXPECT_NE(r.message.find("Does not match the authenticating master's key"), std::string::npos);
}

TEST_F(AuthTest, TokIsX931OfSalt) {
  auto c = client();
  auto rec = crypto::x931_recover(*crypto::rsa_key::from_public_pem(minion_key().public_pem()), c.tok());
  ASSERT_TRUE(rec);
  EXPECT_EQ(*rec, "salt");
}
