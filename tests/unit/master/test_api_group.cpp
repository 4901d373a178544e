// Unit tests of the master group (master/api/api_group.hpp, issue 19 point 3): the HMAC
// signing and its refusals (missing, malformed, stale, wrong, replayed), the assignment
// of matched minions to exactly one member, member URLs, the signed internal endpoint
// refusing an unsigned call, and the master_group option block's refusals.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/config/config.hpp"
#include "master/api/api_group.hpp"

using namespace sylvite::master::api;
using sylvite::wire::value;
namespace fs = std::filesystem;

namespace {

const std::string kSecret = "0123456789abcdef-shared";
const std::string kNonce = "00112233445566778899aabbccddeeff";

TEST(GroupSign, VerifiesOwnSignatureOnce) {
  group_verifier v(kSecret, "g1");
  const std::int64_t now = 1800000000;
  std::string t = std::to_string(now), sig = group_signature(kSecret, "g1", "POST", "/group/v1/run", now, kNonce, "{}");
  EXPECT_EQ(sig.size(), 64u);
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{}", now), group_auth::ok);
  // The same nonce again: a replay.
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{}", now + 1), group_auth::replayed);
}

TEST(GroupSign, RefusesWrongOrMissingOrStale) {
  group_verifier v(kSecret, "g1");
  const std::int64_t now = 1800000000;
  std::string t = std::to_string(now);
  std::string sig = group_signature(kSecret, "g1", "POST", "/group/v1/run", now, kNonce, "{}");
  EXPECT_EQ(v.verify("POST", "/group/v1/run", nullptr, &kNonce, &sig, "{}", now), group_auth::missing);
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, nullptr, "{}", now), group_auth::missing);
  // Body, path, method, group id or secret changed: bad signature.
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{\"a\":1}", now), group_auth::bad_signature);
  EXPECT_EQ(v.verify("POST", "/group/v1/view", &t, &kNonce, &sig, "{}", now), group_auth::bad_signature);
  EXPECT_EQ(v.verify("GET", "/group/v1/run", &t, &kNonce, &sig, "{}", now), group_auth::bad_signature);
  std::string other = group_signature(kSecret, "g2", "POST", "/group/v1/run", now, kNonce, "{}");
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &other, "{}", now), group_auth::bad_signature);
  other = group_signature("another-secret-of-16+", "g1", "POST", "/group/v1/run", now, kNonce, "{}");
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &other, "{}", now), group_auth::bad_signature);
  // Stale: outside the replay window either way (checked before the signature).
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{}", now + kReplayWindow + 1), group_auth::stale);
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{}", now - kReplayWindow - 1), group_auth::stale);
  // Malformed headers.
  std::string bad_t = "12x", short_nonce = "abc", bad_sig = "zz";
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &bad_t, &kNonce, &sig, "{}", now), group_auth::malformed);
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &short_nonce, &sig, "{}", now), group_auth::malformed);
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &bad_sig, "{}", now), group_auth::malformed);
  // None of the refusals consumed the nonce: the good call still passes.
  EXPECT_EQ(v.verify("POST", "/group/v1/run", &t, &kNonce, &sig, "{}", now), group_auth::ok);
}

member_view view(std::set<std::string> matched, std::set<std::string> connected, bool reachable = true) {
  member_view v;
  v.reachable = reachable;
  v.matched = std::move(matched);
  v.connected = std::move(connected);
  return v;
}

TEST(GroupAssign, EachMinionOnceOnAConnectedMember) {
  // m0: A (hot), B (failover, here); m1: A (hot), C; B's key is on both.
  std::vector<member_view> vs = {view({"A", "B"}, {"A", "B"}), view({"A", "B", "C"}, {"A", "C"})};
  auto s0 = assign_minions(vs, 0);
  EXPECT_EQ(s0[0], (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(s0[1], (std::vector<std::string>{"C"}));
  // Received by m1: the hot minion goes to m1, the failover one stays where it is connected.
  auto s1 = assign_minions(vs, 1);
  EXPECT_EQ(s1[0], (std::vector<std::string>{"B"}));
  EXPECT_EQ(s1[1], (std::vector<std::string>{"A", "C"}));
}

TEST(GroupAssign, NotConnectedAnywhereGoesToFirstMatchingMember) {
  std::vector<member_view> vs = {view({"D"}, {}), view({"D", "E"}, {}), view({"E"}, {"E"})};
  auto s = assign_minions(vs, 1);
  EXPECT_EQ(s[0], std::vector<std::string>{});
  EXPECT_EQ(s[1], (std::vector<std::string>{"D"}));
  EXPECT_EQ(s[2], (std::vector<std::string>{"E"}));
}

TEST(GroupAssign, UnreachableMemberGetsNothing) {
  std::vector<member_view> vs = {view({"A"}, {"A"}, false), view({"A"}, {})};
  auto s = assign_minions(vs, 0);
  EXPECT_TRUE(s[0].empty());
  EXPECT_EQ(s[1], (std::vector<std::string>{"A"}));
  size_t total = 0;
  for (const auto& x : assign_minions({view({"A", "B"}, {"A", "B"}), view({"A", "B"}, {"A", "B"}),
                                       view({"B", "C"}, {"B", "C"})},
                                      2))
    total += x.size();
  EXPECT_EQ(total, 3u);  // A, B, C once each
}

TEST(GroupUrl, Parses) {
  auto u = parse_group_url("https://m1.example:8000/");
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "m1.example");
  EXPECT_EQ(u->port, "8000");
  auto v6 = parse_group_url("http://[::1]:8001");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_FALSE(parse_group_url("ftp://x:1"));
  EXPECT_FALSE(parse_group_url("http://x"));
  EXPECT_FALSE(parse_group_url("http://x:99999"));
  EXPECT_FALSE(parse_group_url("http://x:80/path"));
}

struct GroupConfig : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("sylvite-group-cfg-" + std::to_string(rd()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  sylvite::config::config_result<sylvite::config::master_config> load(const std::string& group_yaml) {
    std::ofstream(dir / "master") << "root_dir: " << dir.string() << "\nrest_cherrypy: {port: 8001, disable_ssl: true}\n"
                                  << group_yaml;
    return sylvite::config::load_master_config(dir);
  }
};

TEST_F(GroupConfig, Accepts) {
  auto c = load("master_group: {id: g, secret: 0123456789abcdef, masters: ['http://127.0.0.1:8001', "
                "'http://127.0.0.1:8002/'], timeout: 3}\n");
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->master_group);
  EXPECT_EQ(c->master_group->masters[1], "http://127.0.0.1:8002");
  EXPECT_EQ(c->master_group->timeout, 3);
  EXPECT_EQ(c->raw["master_group"]["secret"], "<hidden>");
}

TEST_F(GroupConfig, Refuses) {
  for (const char* bad : {
           "master_group: [1]\n",
           "master_group: {secret: 0123456789abcdef, masters: ['http://a:1', 'http://b:1']}\n",
           "master_group: {id: g, masters: ['http://a:1', 'http://b:1']}\n",
           "master_group: {id: g, secret: short, masters: ['http://a:1', 'http://b:1']}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a:1']}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a', 'http://b:1']}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a:1', 'http://a:1']}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a:1', 'http://b:1'], timeout: 0}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a:1', 'http://b:1'], self: 'http://c:1'}\n",
           "master_group: {id: g, secret: 0123456789abcdef, masters: ['http://a:1', 'http://b:1'], colour: red}\n",
           "master_group: {id: g, secret_file: /nonexistent/x, masters: ['http://a:1', 'http://b:1']}\n",
       }) {
    auto c = load(bad);
    ASSERT_FALSE(c) << bad;
    EXPECT_NE(c.error().message.find("master_group"), std::string::npos) << c.error().message;
  }
}

TEST(GroupInternal, UnsignedCallIs401) {
  sylvite::config::master_config cfg;
  cfg.id = "m1";
  cfg.master_group = sylvite::config::master_config::group_config{};
  cfg.master_group->id = "g";
  cfg.master_group->secret = kSecret;
  cfg.master_group->masters = {"http://127.0.0.1:8001", "http://127.0.0.1:8002"};
  group_services s;
  s.cfg = &cfg;
  s.local = std::make_shared<lowstate_runner>(lowstate_services{});
  s.api_port = 8001;
  std::string err;
  auto g = master_group::create(s, err);
  ASSERT_TRUE(g) << err;
  EXPECT_TRUE(g->members()[0].self);
  api_request rq;
  rq.method = "POST";
  rq.path = "/group/v1/view";
  rq.body = "{}";
  EXPECT_EQ(g->handle_internal(rq).status, 401u);
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  rq.headers[kGroupTimeHeader] = std::to_string(now);
  rq.headers[kGroupNonceHeader] = kNonce;
  rq.headers[kGroupSignatureHeader] = group_signature(kSecret, "g", "POST", "/group/v1/view", now, kNonce, "{}");
  auto ok = g->handle_internal(rq);
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_NE(ok.body.find("\"m1\""), std::string::npos);
  EXPECT_EQ(g->handle_internal(rq).status, 401u);  // replayed
  // Not this master's port and no self: refused at start.
  s.api_port = 9000;
  EXPECT_FALSE(master_group::create(s, err));
  EXPECT_NE(err.find("master_group.self"), std::string::npos);
}

}  // namespace
