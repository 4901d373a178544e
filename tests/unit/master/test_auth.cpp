// The auth decision table (Salt 3008.5 AuthFuncs._auth) row by row, sans-I/O, and the
// success reply decoded by a fake minion built from core/crypto.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

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


// ---- The decision table, row by row (master::auth_table) --------------------------------
// decide() over hand-made facts: which row wins, and which lazy facts it asked.

using master::auth_table::decide;
using master::auth_table::facts;
using master::auth_table::key_is;
using master::auth_table::lazy;
using master::auth_table::stored_key;
using master::auth_table::verdict;

const std::string kNonce = "0123456789abcdef0123456789abcdef";

// A well-formed v3 sign-in of a new key, nothing configured.
facts new_key_facts() {
  facts f;
  f.signed_reply = true;
  f.has_nonce = true;
  f.nonce = kNonce;
  f.has_id = f.valid_id = true;
  f.id = "m1";
  f.has_pub = true;
  f.pub = "PUB";
  f.sig_algo = crypto::sig_algo::pkcs1v15_sha1;
  f.enc_algo = crypto::enc_algo::oaep_sha1;
  f.bad_pub = lazy<std::string>::known("");
  f.full = lazy<bool>::known(false);
  f.key = lazy<stored_key>::known({});
  f.autoreject = lazy<bool>::known(false);
  f.autosign = lazy<bool>::known(false);
  f.pending_full = lazy<std::optional<std::size_t>>::known(std::nullopt);
  return f;
}

lazy<stored_key> stored(key_is state, bool same = true) { return lazy<stored_key>::known({state, "PUB", same}); }

struct table_case {
  verdict want;
  const char* what;
  void (*set)(facts&);
};

const table_case kTableCases[] = {
    {verdict::not_a_map, "load is not a map", [](facts& f) { f.is_map = false; }},
    {verdict::oversize, "a field out of bounds", [](facts& f) { f.oversize = "nonce longer than 128 bytes"; }},
    {verdict::oversize, "out of bounds beats an invalid id",
     [](facts& f) { f.oversize = "x", f.valid_id = false; }},
    {verdict::no_nonce, "v3 without nonce", [](facts& f) { f.has_nonce = false; }},
    {verdict::invalid_id, "invalid id", [](facts& f) { f.valid_id = false; }},
    {verdict::invalid_id, "v1 without nonce: only the id matters",
     [](facts& f) { f.signed_reply = false, f.has_nonce = false, f.valid_id = false; }},
    {verdict::stale, "waited too long", [](facts& f) { f.stale = true; }},
    {verdict::no_pub, "no pub", [](facts& f) { f.has_pub = false; }},
    {verdict::bad_pub, "pub is not a key", [](facts& f) { f.bad_pub = lazy<std::string>::known("not a key"); }},
    {verdict::full, "max_minions reached", [](facts& f) { f.full = lazy<bool>::known(true); }},
    {verdict::full, "full beats open_mode and a rejected key",
     [](facts& f) { f.full = lazy<bool>::known(true), f.open_mode = true, f.key = stored(key_is::rejected); }},
    {verdict::open_empty_pub, "open_mode, empty pub", [](facts& f) { f.open_mode = true, f.pub = ""; }},
    {verdict::open_accept, "open_mode, rejected key",
     [](facts& f) { f.open_mode = true, f.key = stored(key_is::rejected); }},
    {verdict::open_accept, "open_mode, other accepted key",
     [](facts& f) { f.open_mode = true, f.key = stored(key_is::accepted, false); }},
    {verdict::rejected, "rejected key", [](facts& f) { f.key = stored(key_is::rejected); }},
    {verdict::rejected, "rejected beats auto_accept", [](facts& f) {
       f.key = stored(key_is::rejected, false), f.autosign = lazy<bool>::known(true);
     }},
    {verdict::accepted_other_key, "accepted, other key", [](facts& f) { f.key = stored(key_is::accepted, false); }},
    {verdict::accepted, "accepted, same key", [](facts& f) { f.key = stored(key_is::accepted); }},
    {verdict::new_autoreject, "new key, autoreject", [](facts& f) { f.autoreject = lazy<bool>::known(true); }},
    {verdict::new_autoreject, "autoreject beats autosign",
     [](facts& f) { f.autoreject = lazy<bool>::known(true), f.autosign = lazy<bool>::known(true); }},
    {verdict::new_pending_full, "new key, pending cap reached",
     [](facts& f) { f.pending_full = lazy<std::optional<std::size_t>>::known(7); }},
    {verdict::new_pending, "new key", [](facts&) {}},
    {verdict::new_autosign, "new key, autosign", [](facts& f) { f.autosign = lazy<bool>::known(true); }},
    {verdict::new_autosign, "autosign beats the pending cap", [](facts& f) {
       f.autosign = lazy<bool>::known(true), f.pending_full = lazy<std::optional<std::size_t>>::known(7);
     }},
    {verdict::pending_autoreject, "pending, autoreject",
     [](facts& f) { f.key = stored(key_is::pending), f.autoreject = lazy<bool>::known(true); }},
    {verdict::pending_autoreject, "pending other key, autoreject",
     [](facts& f) { f.key = stored(key_is::pending, false), f.autoreject = lazy<bool>::known(true); }},
    {verdict::pending_other_key, "pending, other key", [](facts& f) { f.key = stored(key_is::pending, false); }},
    {verdict::pending_still, "pending, same key", [](facts& f) { f.key = stored(key_is::pending); }},
    {verdict::pending_still, "pending ignores the pending cap", [](facts& f) {
       f.key = stored(key_is::pending), f.pending_full = lazy<std::optional<std::size_t>>::known(7);
     }},
    {verdict::pending_autosign_other_key, "pending other key, autosign",
     [](facts& f) { f.key = stored(key_is::pending, false), f.autosign = lazy<bool>::known(true); }},
    {verdict::pending_autosign, "pending same key, autosign",
     [](facts& f) { f.key = stored(key_is::pending), f.autosign = lazy<bool>::known(true); }},
};

TEST(AuthTable, each_case_decides_its_row) {
  for (const auto& c : kTableCases) {
    facts f = new_key_facts();
    c.set(f);
    EXPECT_EQ(decide(f, auth_context{}).what, c.want) << c.what;
  }
}

TEST(AuthTable, every_row_has_a_case_and_names_are_unique) {
  std::set<std::string> names;
  for (const auto& r : master::auth_table::rows()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    if (r.what == verdict::well_formed || r.what == verdict::unaccounted) continue;  // pass row; unreachable
    const bool covered = std::any_of(std::begin(kTableCases), std::end(kTableCases),
                                      [&](const table_case& c) { return c.want == r.what; });
    EXPECT_TRUE(covered) << "no table case for row " << r.name;
  }
  // The last row always holds: decide() is total.
  facts f;
  EXPECT_TRUE(master::auth_table::rows().back().when(f));
}

// Salt's "Unaccounted for authentication failure": a state outside accepted/pending/rejected/
// none cannot be stored, so the row is reached only by a forged fact.
TEST(AuthTable, unaccounted_state_is_refused) {
  facts f = new_key_facts();
  f.key = lazy<stored_key>::known({static_cast<key_is>(99), "PUB", true});
  const auto& r = decide(f, auth_context{});
  EXPECT_EQ(r.what, verdict::unaccounted);
  EXPECT_STREQ(r.result, "error");
  EXPECT_STREQ(r.act, "error");
}

// Rows are read top to bottom and a lazy fact is asked only by a row that reaches it: a
// refused request reads no key file, an accepted key never asks autosign (which would
// consume a minions_autosign stub), autoreject comes before autosign.
TEST(AuthTable, lazy_facts_are_asked_only_where_the_flow_reaches) {
  struct counts {
    int bad_pub = 0, full = 0, key = 0, autoreject = 0, autosign = 0, pending_full = 0;
  };
  auto counted = [](counts& n, stored_key k, bool autoreject, bool autosign) {
    facts f = new_key_facts();
    f.bad_pub = lazy<std::string>([&n] { ++n.bad_pub; return std::string(); });
    f.full = lazy<bool>([&n] { ++n.full; return false; });
    f.key = lazy<stored_key>([&n, k] { ++n.key; return k; });
    f.autoreject = lazy<bool>([&n, autoreject] { ++n.autoreject; return autoreject; });
    f.autosign = lazy<bool>([&n, autosign] { ++n.autosign; return autosign; });
    f.pending_full = lazy<std::optional<std::size_t>>([&n] { ++n.pending_full; return std::nullopt; });
    return f;
  };
  {
    counts n;
    facts f = counted(n, {}, false, false);
    f.stale = true;
    EXPECT_EQ(decide(f, auth_context{}).what, verdict::stale);
    EXPECT_EQ(n.bad_pub + n.full + n.key + n.autoreject + n.autosign + n.pending_full, 0);
  }
  {
    counts n;
    facts f = counted(n, {key_is::accepted, "PUB", true}, false, true);
    EXPECT_EQ(decide(f, auth_context{}).what, verdict::accepted);
    EXPECT_EQ(n.bad_pub, 1);
    EXPECT_EQ(n.full, 1);
    EXPECT_EQ(n.key, 1);  // asked by several rows, read once
    EXPECT_EQ(n.autoreject, 0);
    EXPECT_EQ(n.autosign, 0);
  }
  {
    counts n;
    facts f = counted(n, {}, true, true);
    EXPECT_EQ(decide(f, auth_context{}).what, verdict::new_autoreject);
    EXPECT_EQ(n.autoreject, 1);
    EXPECT_EQ(n.autosign, 0);
  }
  {
    counts n;
    facts f = counted(n, {}, false, false);
    EXPECT_EQ(decide(f, auth_context{}).what, verdict::new_pending);
    EXPECT_EQ(n.autosign, 1);  // asked by two rows, once
    EXPECT_EQ(n.pending_full, 1);
  }
  {
    counts n;
    facts f = counted(n, {}, false, false);
    f.open_mode = true;
    EXPECT_EQ(decide(f, auth_context{}).what, verdict::open_accept);
    EXPECT_EQ(n.key + n.autoreject + n.autosign, 0);
  }
}

// ---- The same rows through authenticate(): the effects (writes, events, replies) --------

TEST_F(AuthFixture, row_not_a_map_is_an_error) {
  auto o = authenticate(value("x"), ctx());
  EXPECT_EQ(o.result, "error");
  EXPECT_EQ(o.reply, value("bad load"));
  EXPECT_TRUE(o.id.empty());
  EXPECT_TRUE(o.actions.empty());
}

TEST_F(AuthFixture, row_oversize_fields_are_refused_unsigned) {
  for (int which = 0; which < 3; ++which) {
    value load = m1.auth_load(kNonce, &mk.pub());
    if (which == 0) load["nonce"] = std::string(129, 'n');
    if (which == 1) load["token"] = wire::make_bin(std::string(2049, 't'));
    if (which == 2) load["autosign_grains"] = value{{"big", std::string(70000, 'g')}};
    auto c = ctx();
    int asked = 0;
    c.admit_unaccepted = [&] { return ++asked, false; };
    auto o = authenticate(load, c);
    EXPECT_EQ(o.result, "bad_load") << which;
    EXPECT_TRUE(o.id.empty());
    EXPECT_EQ(o.reply, (value{{"enc", "clear"}, {"load", value{{"ret", false}}}}));
    EXPECT_TRUE(o.actions.empty());
    EXPECT_TRUE(o.events.empty());
    EXPECT_EQ(asked, 0);  // not charged to the source: nothing was signed
  }
}

TEST_F(AuthFixture, row_stale_is_dropped_before_any_work) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto c = ctx();
  c.waited = std::chrono::seconds(6);
  const auto before = master::stale_auth_dropped();
  auto o = authenticate(m1.auth_load(kNonce), c);
  EXPECT_EQ(o.result, "stale");
  EXPECT_EQ(o.id, "m1");
  EXPECT_EQ(o.reply, value::object());
  EXPECT_TRUE(o.events.empty());
  EXPECT_EQ(master::stale_auth_dropped(), before + 1);
  c.stale_after = std::chrono::seconds(0);  // 0 = never stale
  EXPECT_EQ(authenticate(m1.auth_load(kNonce), c).result, "accept");
}

TEST_F(AuthFixture, row_no_pub_is_an_error) {
  value load = m1.auth_load(kNonce);
  load.erase("pub");
  auto o = authenticate(load, ctx());
  EXPECT_EQ(o.result, "error");
  EXPECT_EQ(o.id, "m1");
  EXPECT_EQ(o.reply, value("Some exception handling minion payload"));
}

TEST_F(AuthFixture, row_full_fires_an_event_and_spares_connected_ids) {
  cfg.max_minions = 1;
  connected = {"a", "b"};
  auto o = run(m1);
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "full");
  EXPECT_EQ(o.events[0].data["result"], false);
  EXPECT_EQ(o.events[0].data["id"], "m1");
  connected = {"a", "m1"};  // already connected: not refused
  EXPECT_EQ(run(m1).result, "pend");
  cfg.max_minions = 0;
  connected = {"a", "b", "c"};
  EXPECT_EQ(run(m1).result, "pend");
}

TEST_F(AuthFixture, row_full_v1_is_unsigned) {
  cfg.max_minions = 1;
  connected = {"a", "b"};
  EXPECT_EQ(run(m1, 1).reply, (value{{"enc", "clear"}, {"load", value{{"ret", "full"}}}}));
}

// open_mode moves a pending or rejected key to accepted. (Salt 3008.5 rewrites it only when
// its text differs from the presented key; see the auth.cpp header.)
TEST_F(AuthFixture, row_open_accept_moves_pending_and_rejected_keys) {
  cfg.open_mode = true;
  ASSERT_TRUE(keys.write(key_state::pending, "m1", m1.pub_clean()));
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_TRUE(keys.exists(key_state::accepted, "m1"));
  EXPECT_FALSE(keys.exists(key_state::pending, "m1"));
  fake_minion m2{"m2", cached_key(2)};
  ASSERT_TRUE(keys.write(key_state::rejected, "m2", m2.pub_clean()));
  EXPECT_EQ(run(m2).result, "accept");
  EXPECT_TRUE(keys.exists(key_state::accepted, "m2"));
  EXPECT_FALSE(keys.exists(key_state::rejected, "m2"));
  // an accepted key with the same text is not rewritten
  auto again = authenticate(m1.auth_load(kNonce), ctx());
  EXPECT_EQ(again.result, "accept");
  EXPECT_TRUE(again.actions.empty());
}

TEST_F(AuthFixture, row_rejected_fires_reject_event_and_writes_nothing) {
  ASSERT_TRUE(keys.write(key_state::rejected, "m1", m1.pub_clean()));
  cfg.auto_accept = true;
  auto o = run(m1);
  EXPECT_EQ(o.result, "reject");
  EXPECT_TRUE(o.actions.empty());
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "reject");
  EXPECT_EQ(o.events[0].data["result"], false);
}

TEST_F(AuthFixture, row_accepted_other_key_writes_the_presented_key_to_denied) {
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean()));
  auto o = run(other);
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "denied");
  EXPECT_EQ(crypto::clean_key(*keys.read(key_state::denied, "m1")), other.pub_clean());
  EXPECT_EQ(crypto::clean_key(*keys.read(key_state::accepted, "m1")), m1.pub_clean());
}

// The stored key is compared after clean_key (line endings, surrounding whitespace).
TEST_F(AuthFixture, row_accepted_compares_cleaned_keys) {
  std::string crlf;
  for (char c : m1.key.public_pem()) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  ASSERT_TRUE(keys.write(key_state::accepted, "m1", "\n" + crlf + "\n\n"));
  auto o = run(m1, 3, true);
  EXPECT_EQ(o.result, "accept");
  EXPECT_TRUE(o.actions.empty());
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "accept");
  EXPECT_EQ(o.events[0].data["result"], true);
  EXPECT_TRUE(m1.check_auth_reply(o.reply, kNonce, mk.pub(), true));
}

TEST_F(AuthFixture, row_new_pending_full_fires_no_event) {
  auto c = ctx();
  c.pending_full = []() -> std::optional<std::size_t> { return 3; };
  auto o = authenticate(m1.auth_load(kNonce), c);
  EXPECT_EQ(o.result, "pending_full");
  EXPECT_TRUE(o.events.empty());
  cfg.auto_accept = true;  // autosign is asked first: the cap does not apply
  EXPECT_EQ(authenticate(m1.auth_load(kNonce), c).result, "accept");
}

TEST_F(AuthFixture, row_new_autosign_by_grains) {
  auto dir = tmp.path / "autosign_grains";
  fs::create_directories(dir);
  ASSERT_TRUE(util::write_file_atomic(dir / "os", "# comment\nDebian\n", 0600));
  cfg.raw["autosign_grains_dir"] = dir.string();
  value load = m1.auth_load(kNonce);
  load["autosign_grains"] = value{{"os", "Ubuntu"}};
  EXPECT_EQ(authenticate(load, ctx()).result, "pend");
  load["autosign_grains"] = value{{"os", "Debian"}};
  auto o = authenticate(load, ctx());
  EXPECT_EQ(o.result, "accept");
  ASSERT_EQ(o.actions.size(), 1u);
  EXPECT_EQ(o.actions[0].state, key_state::accepted);
}

TEST_F(AuthFixture, row_pending_autoreject_keeps_the_stored_key) {
  run(m1);
  auto f = tmp.path / "autoreject.conf";
  ASSERT_TRUE(util::write_file_atomic(f, "m1\n", 0600));
  cfg.autoreject_file = f.string();
  auto o = run(other);  // even with another key: the stored one moves
  EXPECT_EQ(o.result, "reject");
  EXPECT_EQ(crypto::clean_key(*keys.read(key_state::rejected, "m1")), m1.pub_clean());
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "reject");
}

TEST_F(AuthFixture, row_pending_still_fires_pend_and_writes_nothing) {
  run(m1);
  auto o = run(m1);
  EXPECT_TRUE(o.actions.empty());
  ASSERT_EQ(o.events.size(), 1u);
  EXPECT_EQ(o.events[0].data["act"], "pend");
  EXPECT_EQ(o.events[0].data["result"], true);
}

TEST_F(AuthFixture, row_pending_autosign_by_stub_accepts_and_consumes_it) {
  run(m1);
  auto stub = cfg.pki_dir / "minions_autosign" / "m1";
  ASSERT_TRUE(util::write_file_atomic(stub, "", 0600));
  auto o = run(m1);
  EXPECT_EQ(o.result, "accept");
  EXPECT_FALSE(fs::exists(stub));
  EXPECT_TRUE(keys.exists(key_state::accepted, "m1"));
  EXPECT_FALSE(keys.exists(key_state::pending, "m1"));
}

// Every row that refuses a well-formed sign-in is admitted first; refused -> {} and nothing
// written or fired. The accepting rows never ask.
TEST_F(AuthFixture, every_refusing_row_asks_admission_first) {
  auto autoreject = tmp.path / "autoreject.conf";
  ASSERT_TRUE(util::write_file_atomic(autoreject, "m1\n", 0600));
  struct scenario {
    const char* name;
    std::function<void()> setup;
    const fake_minion* who;
  };
  const scenario scenarios[] = {
      {"full", [&] { cfg.max_minions = 1, connected = {"a", "b"}; }, &m1},
      {"rejected", [&] { ASSERT_TRUE(keys.write(key_state::rejected, "m1", m1.pub_clean())); }, &m1},
      {"accepted_other_key", [&] { ASSERT_TRUE(keys.write(key_state::accepted, "m1", m1.pub_clean())); }, &other},
      {"new_autoreject", [&] { cfg.autoreject_file = autoreject.string(); }, &m1},
      {"new_pending", [] {}, &m1},
      {"pending_autoreject",
       [&] {
         ASSERT_TRUE(keys.write(key_state::pending, "m1", m1.pub_clean()));
         cfg.autoreject_file = autoreject.string();
       },
       &m1},
      {"pending_other_key", [&] { ASSERT_TRUE(keys.write(key_state::pending, "m1", m1.pub_clean())); }, &other},
      {"pending_still", [&] { ASSERT_TRUE(keys.write(key_state::pending, "m1", m1.pub_clean())); }, &m1},
      {"pending_autosign_other_key",
       [&] {
         ASSERT_TRUE(keys.write(key_state::pending, "m1", m1.pub_clean()));
         cfg.auto_accept = true;
       },
       &other},
  };
  for (const auto& s : scenarios) {
    for (auto st : {key_state::accepted, key_state::pending, key_state::rejected, key_state::denied})
      (void)keys.remove(st, "m1");
    cfg = make_config(tmp.path);
    connected.clear();
    s.setup();
    auto c = ctx();
    int asked = 0;
    c.admit_unaccepted = [&] { return ++asked, false; };
    auto o = authenticate(s.who->auth_load(kNonce), c);
    EXPECT_EQ(o.result, "rate_limited") << s.name;
    EXPECT_EQ(o.reply, value::object()) << s.name;
    EXPECT_TRUE(o.actions.empty()) << s.name;
    EXPECT_TRUE(o.events.empty()) << s.name;
    EXPECT_EQ(asked, 1) << s.name;
  }
}

// The refusals on the wire, byte for byte: {"enc": "clear", "load": <msgpack {"ret", "nonce"}>,
// "sig": PKCS#1 v1.5 of those bytes} (Salt's _clear_signed; salt.payload.dumps packs with
// the old msgpack spec, so the 32-character nonce is a str16 0xda 0x00 0x20).
TEST_F(AuthFixture, refusal_payload_bytes_are_salts) {
  auto expect_load = [&](const master::auth_outcome& o, const std::string& ret_bytes) {
    const std::string want = std::string("\x82\xa3ret") + ret_bytes + std::string("\xa5nonce\xda\x00\x20", 9) + kNonce;
    auto lb = wire::as_bytes(o.reply["load"]);
    ASSERT_TRUE(lb);
    EXPECT_EQ(*lb, want);
    EXPECT_TRUE(crypto::verify(mk.pub(), *lb, *wire::as_bytes(o.reply["sig"]), crypto::sig_algo::pkcs1v15_sha1));
    std::vector<std::string> order;
    for (auto it = o.reply.begin(); it != o.reply.end(); ++it) order.push_back(it.key());
    EXPECT_EQ(order, (std::vector<std::string>{"enc", "load", "sig"}));
  };
  expect_load(run(m1), "\xc3");     // pending: True
  expect_load(run(other), "\xc2");  // denied: False
  cfg.max_minions = 1;
  connected = {"a", "b"};
  fake_minion m3{"m3", cached_key(3)};
  expect_load(run(m3), "\xa4" "full");  // full: "full"
}

}  // namespace
}  // namespace sylvite::test
