// The auth decision table (Salt 3008.5 AuthFuncs._auth) row by row, sans-I/O, and the
// success reply decoded by a fake minion built from core/crypto.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/auth.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

namespace fs = std::filesystem;
using master::auth_context;
using master::authenticate;
using pki::key_state;
using wire::value;

const std::string kSession = crypto::crypticle::generate_key_string();

struct AuthFixture : ::testing::Test {
  temp_dir tmp;
  config::master_config cfg = make_config(tmp.path);
  pki::key_store keys{cfg.pki_dir};
  master::master_keys mk = master::master_keys::from_key(cached_key(0));
  master::aes_manager aes{cached_key(0)};
  fake_minion m1{"m1", cached_key(1)};
  fake_minion other{"m1", cached_key(2)};  // same id, different key
  std::vector<std::string> connected;

  void SetUp() override {
    ASSERT_TRUE(keys.ensure_dirs());
    ASSERT_TRUE(aes.rotate());
  }
  auth_context ctx(int version = 3) {
    auth_context c;
    c.cfg = &cfg;
    c.keys = &keys;
    c.mkeys = &mk;
    c.aes = aes.current();
    c.version = version;
    c.session_key = [](const std::string&) -> result<std::string> { return kSession; };
    c.connected_ids = [this] { return connected; };
    return c;
  }
  master::auth_outcome run(const fake_minion& fm, int version = 3, bool token = false) {
    auto out = authenticate(fm.auth_load("0123456789abcdef0123456789abcdef", token ? &mk.pub() : nullptr), ctx(version));
    master::apply_key_actions(keys, out.actions);
    return out;
  }
  // Decode a signed {"ret": x, "nonce"} answer.
  value ret_of(const master::auth_outcome& o) {
    auto r = m1.check_auth_reply(o.reply, "0123456789abcdef0123456789abcdef", mk.pub(), false);
    EXPECT_TRUE(r) << o.reply.dump();
    if (!r) return nullptr;
    const value* ret = wire::find(*r, "ret");
    return ret ? *ret : value("<no ret>");
  }
};

TEST_F(AuthFixture, invalid_id_is_refused_signed) {
  fake_minion bad{"../etc", cached_key(1)};
  auto o = run(bad);
  EXPECT_EQ(o.result, "invalid");
  EXPECT_EQ(ret_of(o), value(false));
  EXPECT_TRUE(o.actions.empty());
}

// Issue 14 item 3: a pub that is not an RSA public key is refused before anything is
// written or signed.
TEST_F(AuthFixture, non_key_pub_writes_nothing_and_is_not_signed) {
  for (std::string junk : {std::string(2 << 20, 'A'), std::string("ssh-rsa AAAA"), std::string()}) {
    value load = m1.auth_load("0123456789abcdef0123456789abcdef");
    load["pub"] = junk;
    auto o = authenticate(load, ctx());
    EXPECT_EQ(o.result, "bad_load");
    EXPECT_TRUE(o.actions.empty());
    EXPECT_TRUE(o.events.empty());
    EXPECT_EQ(o.reply, (value{{"enc", "clear"}, {"load", value{{"ret", false}}}}));
    EXPECT_FALSE(wire::find(o.reply, "sig"));
  }
  EXPECT_TRUE(keys.list(key_state::pending).empty());
}

// Issue 14 item 5: a sign-in that will not be accepted asks for admission before the reply
// is signed; refused -> {} with no key write and no event. Accepted keys never ask.
TEST_F(AuthFixture, unaccepted_sign_ins_over_the_limit_cost_no_signature) {
  int asked = 0;
  auto c = ctx();
  c.admit_unaccepted = [&] { return ++asked <= 1; };
  auto o1 = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef"), c);
  EXPECT_EQ(o1.result, "pend");
  EXPECT_TRUE(wire::find(o1.reply, "sig"));
  fake_minion m2{"m2", cached_key(2)};
  auto o2 = authenticate(m2.auth_load("0123456789abcdef0123456789abcdef"), c);
  EXPECT_EQ(o2.result, "rate_limited");
  EXPECT_EQ(o2.reply, value::object());
  EXPECT_TRUE(o2.actions.empty());
  EXPECT_TRUE(o2.events.empty());
  EXPECT_EQ(asked, 2);
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o3 = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef"), c);
  EXPECT_EQ(o3.result, "accept");
  EXPECT_EQ(asked, 2);  // an accepted minion's sign-in is never charged
}

TEST_F(AuthFixture, pending_cap_stores_nothing_but_answers_pending) {
  auto c = ctx();
  c.pending_full = []() -> std::optional<std::size_t> { return 7; };
  auto o = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef"), c);
  EXPECT_EQ(o.result, "pending_full");
  EXPECT_TRUE(o.actions.empty());
  EXPECT_EQ(ret_of(o), value(true));  // a real minion keeps retrying
}

TEST(SourceLimiter, per_source_bucket) {
  master::source_limiter l(1.0, 3.0, 4);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(master::source_limiter::source_of("10.0.0.1:4506"), "10.0.0.1");
  EXPECT_EQ(master::source_limiter::source_of("[::1]:4506"), "::1");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.take("10.0.0.1:" + std::to_string(1000 + i), t0));
  EXPECT_FALSE(l.take("10.0.0.1:2000", t0));             // burst spent, any port
  EXPECT_TRUE(l.take("10.0.0.2:1", t0));                 // another source is not affected
  EXPECT_TRUE(l.take("10.0.0.1:1", t0 + std::chrono::milliseconds(1100)));  // refilled at 1/s
  EXPECT_FALSE(l.take("10.0.0.1:1", t0 + std::chrono::milliseconds(1200)));
  for (int i = 3; i < 20; ++i) l.take("10.0.0." + std::to_string(i) + ":1", t0);  // bounded table
  SUCCEED();
}

TEST_F(AuthFixture, new_key_goes_to_pending_and_answers_true) {
  auto o = run(m1);
  EXPECT_EQ(o.result, "pend");
  EXPECT_EQ(ret_of(o), value(true));
  EXPECT_TRUE(keys.exists(key_state::pending, "m1"));
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].tag, "salt/auth");
  EXPECT_EQ(o.events[0].data["act"], "pend");
}

TEST_F(AuthFixture, pending_same_key_stays_pending) {
  run(m1);
  auto o = run(m1);
  EXPECT_EQ(o.result, "pend");
  EXPECT_EQ(ret_of(o), value(true));
  EXPECT_FALSE(keys.exists(key_state::denied, "m1"));
}

TEST_F(AuthFixture, pending_different_key_is_denied) {
  run(m1);
  auto o = run(other);
  EXPECT_EQ(o.result, "denied");
  EXPECT_EQ(ret_of(o), value(false));
  EXPECT_TRUE(keys.exists(key_state::denied, "m1"));
  EXPECT_EQ(crypto::clean_key(*keys.read(key_state::pending, "m1")), m1.pub_clean());
}

TEST_F(AuthFixture, accepted_same_key_gets_full_reply) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  auto r = m1.check_auth_reply(o.reply, "0123456789abcdef0123456789abcdef", mk.pub(), false);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["enc"], "pub");
  EXPECT_EQ((*r)["pub_key"], mk.pub_clean());
  EXPECT_EQ((*r)["publish_port"], cfg.publish_port);
  EXPECT_EQ(m1.aes, aes.current()->crypt.key_string());
  EXPECT_EQ(m1.session, kSession);
  EXPECT_FALSE(r->contains("token"));
  // Salt's key order
  std::vector<std::string> order;
  for (auto it = r->begin(); it != r->end(); ++it) order.push_back(it.key());
  EXPECT_EQ(order, (std::vector<std::string>{"enc", "pub_key", "publish_port", "aes", "session", "sig", "nonce"}));
}

TEST_F(AuthFixture, token_is_reencrypted_to_the_minion) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = run(m1, 3, true);
  auto r = m1.check_auth_reply(o.reply, "0123456789abcdef0123456789abcdef", mk.pub(), true);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->contains("token"));
}

TEST_F(AuthFixture, accepted_different_key_is_denied) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = run(other);
  EXPECT_EQ(o.result, "denied");
  EXPECT_EQ(ret_of(o), value(false));
  EXPECT_TRUE(keys.exists(key_state::denied, "m1"));
  EXPECT_TRUE(keys.exists(key_state::accepted, "m1"));
}

TEST_F(AuthFixture, rejected_key_is_refused) {
  ASSERT_TRUE(keys.write(key_state::rejected, "m1", m1.pub_clean()));
  auto o = run(m1);
  EXPECT_EQ(o.result, "reject");
  EXPECT_EQ(ret_of(o), value(false));
}

TEST_F(AuthFixture, auto_accept_accepts_new_key) {
  cfg.auto_accept = true;
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_TRUE(keys.exists(key_state::accepted, "m1"));
  EXPECT_FALSE(keys.exists(key_state::pending, "m1"));
}

TEST_F(AuthFixture, auto_accept_accepts_pending_same_key_and_removes_pending) {
  run(m1);
  cfg.auto_accept = true;
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_TRUE(keys.exists(key_state::accepted, "m1"));
  EXPECT_FALSE(keys.exists(key_state::pending, "m1"));
}

TEST_F(AuthFixture, auto_accept_pending_different_key_is_denied) {
  run(m1);
  cfg.auto_accept = true;
  auto o = run(other);
  EXPECT_EQ(o.result, "denied");
  EXPECT_FALSE(keys.exists(key_state::accepted, "m1"));
}

TEST_F(AuthFixture, autosign_file_glob_and_regex) {
  auto f = tmp.path / "autosign.conf";
  ASSERT_TRUE(util::write_file_atomic(f, "# comment\nweb*\nm[0-9]+\n", 0600));
  cfg.autosign_file = f.string();
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_TRUE(master::signing_line_matches("web12", "web*"));
  EXPECT_TRUE(master::signing_line_matches("m12", "m[0-9]+"));
  EXPECT_FALSE(master::signing_line_matches("m12x", "m[0-9]+"));
}

TEST_F(AuthFixture, autosign_file_world_writable_is_ignored) {
  auto f = tmp.path / "autosign.conf";
  ASSERT_TRUE(util::write_file_atomic(f, "m1\n", 0666));
  fs::permissions(f, fs::perms(0666));
  cfg.autosign_file = f.string();
  auto o = run(m1);
  EXPECT_EQ(o.result, "pend");
}

TEST_F(AuthFixture, autoreject_file_rejects_new_key) {
  auto f = tmp.path / "autoreject.conf";
  ASSERT_TRUE(util::write_file_atomic(f, "m*\n", 0600));
  cfg.autoreject_file = f.string();
  cfg.auto_accept = true;  // autoreject wins
  auto o = run(m1);
  EXPECT_EQ(o.result, "reject");
  EXPECT_EQ(ret_of(o), value(false));
  EXPECT_TRUE(keys.exists(key_state::rejected, "m1"));
}

TEST_F(AuthFixture, autoreject_moves_pending_to_rejected) {
  run(m1);
  auto f = tmp.path / "autoreject.conf";
  ASSERT_TRUE(util::write_file_atomic(f, "m1\n", 0600));
  cfg.autoreject_file = f.string();
  auto o = run(m1);
  EXPECT_EQ(o.result, "reject");
  EXPECT_TRUE(keys.exists(key_state::rejected, "m1"));
  EXPECT_FALSE(keys.exists(key_state::pending, "m1"));
}

TEST_F(AuthFixture, minions_autosign_stub_is_consumed) {
  auto stub = cfg.pki_dir / "minions_autosign" / "m1";
  ASSERT_TRUE(util::write_file_atomic(stub, "", 0600));
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_FALSE(fs::exists(stub));
}

TEST_F(AuthFixture, open_mode_overwrites_accepted_key) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  cfg.open_mode = true;
  auto o = run(other);
  EXPECT_EQ(o.result, "accept");
  EXPECT_EQ(crypto::clean_key(*keys.read(key_state::accepted, "m1")), other.pub_clean());
}

TEST_F(AuthFixture, max_minions_full) {
  cfg.max_minions = 1;
  connected = {"a", "b"};  // Salt: full when more than max_minions are connected
  auto o = run(m1);
  EXPECT_EQ(o.result, "full");
  EXPECT_EQ(ret_of(o), value("full"));
  connected = {"a"};
  EXPECT_EQ(run(m1).result, "pend");
}

TEST_F(AuthFixture, bad_sig_algo_is_unsigned) {
  auto o = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef", nullptr, "OAEP-SHA1", "RSA-MD5"), ctx());
  EXPECT_EQ(o.result, "bad_sig_algo");
  EXPECT_EQ(o.reply, (value{{"enc", "clear"}, {"load", value{{"ret", "bad sig algo"}}}}));
}

TEST_F(AuthFixture, bad_enc_algo_is_unsigned) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef", &mk.pub(), "OAEP-MD5"), ctx());
  EXPECT_EQ(o.result, "bad_enc_algo");
  EXPECT_EQ(o.reply, (value{{"enc", "clear"}, {"load", value{{"ret", "bad enc algo"}}}}));
}

TEST_F(AuthFixture, sha224_algorithms_are_honoured) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = authenticate(m1.auth_load("0123456789abcdef0123456789abcdef", nullptr, "OAEP-SHA224", "PKCS1v15-SHA224"),
                        ctx());
  ASSERT_EQ(o.result, "accept");
  auto lb = wire::as_bytes(o.reply["load"]);
  auto sb = wire::as_bytes(o.reply["sig"]);
  EXPECT_TRUE(crypto::verify(mk.pub(), *lb, *sb, crypto::sig_algo::pkcs1v15_sha224));
  auto l = wire::unpack(*lb);
  auto a = crypto::oaep_decrypt(m1.key, *wire::as_bytes((*l)["aes"]), crypto::enc_algo::oaep_sha224);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, aes.current()->crypt.key_string());
}

TEST_F(AuthFixture, version_one_is_unsigned) {
  auto o = run(m1, 1);
  EXPECT_EQ(o.reply, (value{{"enc", "clear"}, {"load", value{{"ret", true}}}}));
}

TEST_F(AuthFixture, missing_nonce_on_v3_is_an_error) {
  auto l = m1.auth_load("x");
  l.erase("nonce");
  auto o = authenticate(l, ctx());
  EXPECT_EQ(o.reply, value("Some exception handling minion payload"));
}

TEST_F(AuthFixture, aes_signature_is_computed_once_per_key) {
  auto a = aes.current();
  auto r = crypto::x931_recover(mk.pub(), a->sig);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, crypto::sha256_hex(a->crypt.key_string()));
}

}  // namespace
}  // namespace sylvite::test
