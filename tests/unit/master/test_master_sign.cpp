// Master-side master_sign (salt-ha-internals 5.6) and ClearFuncs.ping:
//  - the master's pub_sig is verified by the sylvite minion's own auth code
//    (minion/auth.cpp verify_signing_master) in a full sign-in through handle_request,
//    including the "key changed but signed" failover case and a wrong signing key;
//  - the pre-computed signature file variant (master_use_pubkey_signature);
//  - a cross-check with Salt's own crypto (tests/vectors/master_sign_check.py) when
//    SYLVITE_PYTHON is set;
//  - a clear {"cmd": "ping"} is echoed.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/master_sign.hpp"
#include "minion/auth.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

namespace fs = std::filesystem;
using wire::value;

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// Key indexes in cached_key(): 0 = master A (make_config), 1..3 minions elsewhere;
// here 10 = master B, 11 = shared master_sign, 12 = a wrong master_sign, 13 = minion.
const crypto::rsa_key& master_b() { return cached_key(10); }
const crypto::rsa_key& sign_key() { return cached_key(11); }
const crypto::rsa_key& wrong_sign_key() { return cached_key(12); }
const crypto::rsa_key& minion_key() { return cached_key(13); }

struct master_box {
  temp_dir tmp;
  std::unique_ptr<master::master_core> core;
  fake_sink sink;
  // key: master.pem to use (null = make_config's key 0); signer: master_sign.pem to
  // install (null = let the master generate one).
  master_box(const crypto::rsa_key* key, const crypto::rsa_key* signer, bool sign_on = true,
             const std::string& min_id = "mn1") {
    auto cfg = make_config(tmp.path);
    if (key) {
      util::write_file_atomic(cfg.pki_dir / "master.pem", key->private_pem(), 0400);
      util::write_file_atomic(cfg.pki_dir / "master.pub", key->public_pem(), 0644);
    }
    if (signer) {
      util::write_file_atomic(cfg.pki_dir / "master_sign.pem", signer->private_pem(), 0400);
      util::write_file_atomic(cfg.pki_dir / "master_sign.pub", signer->public_pem(), 0644);
    }
    cfg.master_sign_pubkey = sign_on;
    cfg.keysize = 2048;
    auto c = master::master_core::create(cfg);
    if (!c) throw std::runtime_error("master_core::create: " + c.error().message());
    core = std::move(*c);
    core->set_pub_sink(&sink);
    (void)core->key_store().write(pki::key_state::accepted, min_id, crypto::clean_key(minion_key().public_pem()));
  }
};

struct minion_box {
  temp_dir tmp;
  std::optional<minion::auth_client> client;
  explicit minion_box(bool verify, const crypto::rsa_key* sign_pub) {
    minion::auth_settings s;
    s.id = "mn1";
    s.pki_dir = tmp.path;
    s.verify_master_pubkey_sign = verify;
    if (sign_pub) util::write_file_atomic(tmp.path / "master_sign.pub", sign_pub->public_pem(), 0644);
    client.emplace(std::move(s), minion_key());
  }
  minion::auth_result sign_in(master::master_core& m) {
    auto req = client->make_request();
    auto reply = m.handle_request(req.body, "test");
    return client->handle_reply(req, reply);
  }
};

// The decoded accept payload of a signed v3 reply.
value payload_of(const value& reply) {
  auto l = wire::as_bytes(*wire::find(reply, "load"));
  if (!l) return value();
  auto v = wire::unpack(*l);
  return v ? *v : value();
}

TEST(MasterSign, reply_carries_pub_sig_that_the_minion_verifies) {
  master_box a(nullptr, &sign_key());
  minion_box mn(true, &sign_key());
  auto req = mn.client->make_request();
  auto reply = a.core->handle_request(req.body, "test");
  auto p = payload_of(reply);
  ASSERT_TRUE(p.is_object()) << reply.dump();
  const value* ps = wire::find(p, "pub_sig");
  ASSERT_NE(ps, nullptr) << p.dump();
  auto text = wire::as_bytes(*ps);
  ASSERT_TRUE(text);
  ASSERT_FALSE(text->empty());
  EXPECT_EQ(text->back(), '\n');  // b2a_base64
  auto raw = crypto::base64_decode(text->substr(0, text->size() - 1));
  ASSERT_TRUE(raw);
  EXPECT_TRUE(crypto::verify(sign_key(), crypto::clean_key(cached_key(0).public_pem()), *raw));
  // Key order as Salt's ret dict: pub_sig right after publish_port.
  std::vector<std::string> keys;
  for (auto it = p.begin(); it != p.end(); ++it) keys.push_back(it.key());
  ASSERT_GE(keys.size(), 4u);
  EXPECT_EQ(keys[0], "enc");
  EXPECT_EQ(keys[1], "pub_key");
  EXPECT_EQ(keys[2], "publish_port");
  EXPECT_EQ(keys[3], "pub_sig");

  auto r = mn.client->handle_reply(req, reply);
  EXPECT_EQ(r.status, minion::auth_status::accepted) << r.message;
  EXPECT_TRUE(fs::exists(mn.tmp.path / "minion_master.pub"));
}

TEST(MasterSign, failover_to_a_master_with_another_key_is_accepted_when_signed) {
  master_box a(nullptr, &sign_key());
  master_box b(&master_b(), &sign_key());
  minion_box mn(true, &sign_key());
  ASSERT_EQ(mn.sign_in(*a.core).status, minion::auth_status::accepted);
  auto r = mn.sign_in(*b.core);
  EXPECT_EQ(r.status, minion::auth_status::accepted) << r.message;
  // the minion now caches B's key
  auto cached = util::read_file(mn.tmp.path / "minion_master.pub");
  ASSERT_TRUE(cached);
  EXPECT_EQ(crypto::clean_key(*cached), crypto::clean_key(master_b().public_pem()));
}

TEST(MasterSign, wrong_signing_key_is_refused_by_the_minion) {
  master_box b(&master_b(), &wrong_sign_key());
  minion_box mn(true, &sign_key());
  auto r = mn.sign_in(*b.core);
  EXPECT_NE(r.status, minion::auth_status::accepted);
}

TEST(MasterSign, without_master_sign_a_changed_key_is_refused) {
  // The control: the same failover with signing off on the masters fails.
  master_box a(nullptr, nullptr, false);
  master_box b(&master_b(), nullptr, false);
  minion_box mn(false, nullptr);
  ASSERT_EQ(mn.sign_in(*a.core).status, minion::auth_status::accepted);
  EXPECT_NE(mn.sign_in(*b.core).status, minion::auth_status::accepted);
}

TEST(MasterSign, signing_master_and_non_verifying_minion_disagree_as_salt) {
  master_box a(nullptr, &sign_key());
  minion_box mn(false, nullptr);
  EXPECT_NE(mn.sign_in(*a.core).status, minion::auth_status::accepted);  // check_auth_deps
}

TEST(MasterSign, missing_sign_key_is_generated_like_salt) {
  master_box a(nullptr, nullptr);
  EXPECT_TRUE(fs::exists(a.core->cfg().pki_dir / "master_sign.pem"));
  EXPECT_TRUE(fs::exists(a.core->cfg().pki_dir / "master_sign.pub"));
  auto pub = util::read_file(a.core->cfg().pki_dir / "master_sign.pub");
  ASSERT_TRUE(pub);
  auto k = crypto::rsa_key::from_public_pem(*pub);
  ASSERT_TRUE(k);
  minion_box mn(true, &*k);
  EXPECT_EQ(mn.sign_in(*a.core).status, minion::auth_status::accepted);
}

TEST(MasterSign, precomputed_signature_file_is_sent_as_text) {
  temp_dir tmp;
  auto cfg = make_config(tmp.path);
  cfg.master_sign_pubkey = true;
  cfg.master_use_pubkey_signature = true;
  // missing file: the master refuses to start (Salt exits)
  EXPECT_FALSE(master::master_core::create(cfg));
  EXPECT_EQ(master::pubkey_signature_name(cfg), "testmaster_pubkey_signature");
  auto sig = master::compute_pub_sig(sign_key(), crypto::clean_key(cached_key(0).public_pem()),
                                     crypto::sig_algo::pkcs1v15_sha1);
  ASSERT_TRUE(sig);
  util::write_file_atomic(cfg.pki_dir / "testmaster_pubkey_signature", *sig, 0400);
  auto c = master::master_core::create(cfg);
  ASSERT_TRUE(c) << c.error().message();
  auto& core = **c;
  (void)core.key_store().write(pki::key_state::accepted, "mn1", crypto::clean_key(minion_key().public_pem()));
  minion_box mn(true, &sign_key());
  auto req = mn.client->make_request();
  auto reply = core.handle_request(req.body, "test");
  auto p = payload_of(reply);
  const value* ps = wire::find(p, "pub_sig");
  ASSERT_NE(ps, nullptr);
  EXPECT_TRUE(ps->is_string());  // text, clean_key'd: no trailing newline
  EXPECT_EQ(ps->get<std::string>(), sig->substr(0, sig->size() - 1));
  EXPECT_EQ(mn.client->handle_reply(req, reply).status, minion::auth_status::accepted);
  // a custom file name
  cfg.master_pubkey_signature = "other_sig";
  EXPECT_EQ(master::pubkey_signature_name(cfg), "other_sig");
}

TEST(MasterSign, signature_uses_the_minions_sig_algo) {
  auto signer = master::master_signer::from_key(sign_key());
  const std::string pub = crypto::clean_key(cached_key(0).public_pem());
  auto s1 = signer->pub_sig(pub, crypto::sig_algo::pkcs1v15_sha1);
  auto s224 = signer->pub_sig(pub, crypto::sig_algo::pkcs1v15_sha224);
  ASSERT_TRUE(s1 && s224);
  auto b1 = std::string(*wire::as_bytes(*s1));
  auto b224 = std::string(*wire::as_bytes(*s224));
  EXPECT_NE(b1, b224);
  EXPECT_TRUE(crypto::verify(sign_key(), pub, *crypto::base64_decode(b224.substr(0, b224.size() - 1)),
                             crypto::sig_algo::pkcs1v15_sha224));
  // cached: same bytes again
  EXPECT_EQ(std::string(*wire::as_bytes(*signer->pub_sig(pub, crypto::sig_algo::pkcs1v15_sha1))), b1);
}

// Salt's own crypto verifies our pub_sig and computes the same bytes.
TEST(MasterSign, python_salt_agrees) {
  const char* py = std::getenv("SYLVITE_PYTHON");
  if (!py || !*py || !fs::exists(py)) GTEST_SKIP() << "SYLVITE_PYTHON unset or missing: no Salt python";
  temp_dir tmp;
  const std::string pub = crypto::clean_key(cached_key(0).public_pem());
  value cases = value::array();
  for (auto algo : {crypto::sig_algo::pkcs1v15_sha1, crypto::sig_algo::pkcs1v15_sha224}) {
    auto s = master::compute_pub_sig(sign_key(), pub, algo);
    ASSERT_TRUE(s);
    cases.push_back(value{{"algo", std::string(crypto::to_string(algo))}, {"pub_sig", *s}});
  }
  value doc{{"sign_pem", sign_key().private_pem()},
            {"sign_pub", sign_key().public_pem()},
            {"master_pub", cached_key(0).public_pem()},
            {"pub_key", pub},
            {"cases", cases}};
  const auto json_path = tmp.path / "master_sign.json";
  std::ofstream(json_path) << doc.dump();
  int status = -1;
  std::string cmd = std::string(py) + " " + SYLVITE_SOURCE_DIR + "/tests/vectors/master_sign_check.py " +
                    json_path.string() + " 2>&1";
  std::string out = run(cmd, &status);
  EXPECT_EQ(status, 0) << out;
  std::cout << out;
}

// ---------------------------------------------------------------- ClearFuncs.ping
TEST(ClearPing, load_is_echoed) {
  temp_dir tmp;
  auto c = master::master_core::create(make_config(tmp.path));
  ASSERT_TRUE(c);
  auto& core = **c;
  value load{{"cmd", "ping"}};
  EXPECT_EQ(core.handle_request(value{{"enc", "clear"}, {"load", load}, {"version", 3}}, "t"), load);
  value load2{{"cmd", "ping"}, {"id", "mn1"}, {"ts", 1700000000}, {"extra", value::array({1, "x"})}};
  EXPECT_EQ(core.handle_request(value{{"enc", "clear"}, {"load", load2}, {"version", 3}}, "t"), load2);
  EXPECT_EQ(core.counters().clear_pings.load(), 2u);
  EXPECT_EQ(core.counters().refused.load(), 0u);
  // other clear commands still answer {}
  EXPECT_EQ(core.handle_request(value{{"enc", "clear"}, {"load", value{{"cmd", "publish"}}}, {"version", 3}}, "t"),
            value::object());
  // below minimum_auth_version it is refused like any request (Salt checks first)
  EXPECT_EQ(core.handle_request(value{{"enc", "clear"}, {"load", load}}, "t"), value("bad load"));
}

TEST(ClearPing, frame_roundtrip_is_byte_identical) {
  // The reply body packs to the very bytes of the request's load (msgpack golden).
  temp_dir tmp;
  auto c = master::master_core::create(make_config(tmp.path));
  ASSERT_TRUE(c);
  value load{{"cmd", "ping"}, {"id", "mn1"}};
  auto reply = (*c)->handle_request(value{{"enc", "clear"}, {"load", load}, {"version", 3}}, "t");
  EXPECT_EQ(wire::pack(reply, wire::packing::frame), wire::pack(load, wire::packing::frame));
  EXPECT_EQ(wire::pack(reply, wire::packing::frame), std::string("\x82\xa3" "cmd\xa4ping\xa2id\xa3mn1"));
}

}  // namespace
}  // namespace sylvite::test
