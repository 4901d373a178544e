// peer_protocol: the handshake refuses what it must (cluster, signature, staleness, replay,
// wrong recipient, nonce echo) and sealed batches are sequenced.
#include <gtest/gtest.h>

#include <map>

#include "cluster/peer_protocol.hpp"

using namespace sylvite;
using cluster::key_lookup;
using wire::value;

namespace {
struct PeersFixture : ::testing::Test {
  static crypto::rsa_key& a() {
    static auto k = crypto::rsa_key::generate(1024).value();
    return k;
  }
  static crypto::rsa_key& b() {
    static auto k = crypto::rsa_key::generate(1024).value();
    return k;
  }
  static crypto::rsa_key& evil() {
    static auto k = crypto::rsa_key::generate(1024).value();
    return k;
  }
  key_lookup keys = [](const std::string& id) -> std::optional<crypto::rsa_key> {
    if (id == "a") return crypto::rsa_key::from_public_pem(a().public_pem()).value();
    if (id == "b") return crypto::rsa_key::from_public_pem(b().public_pem()).value();
    return std::nullopt;
  };
  const std::string nonce = std::string(32, 'n');
  const std::int64_t now = 1'800'000'000;
};
}  // namespace

TEST_F(PeersFixture, HelloAndWelcomeRoundTrip) {
  value h = cluster::make_hello("c1", "a", "10.0.0.1:4520", a(), nonce, now);
  std::string why;
  auto info = cluster::verify_hello(h, "c1", "b", keys, now + 5, why);
  ASSERT_TRUE(info) << why;
  EXPECT_EQ(info->from, "a");
  EXPECT_EQ(info->addr, "10.0.0.1:4520");
  const std::string link(32, 'l');
  const std::string lkey = crypto::crypticle::generate_key_string();
  value w = cluster::make_welcome("b", b(), *info, *keys("a"), link, lkey);
  auto wi = cluster::verify_welcome(w, "a", a(), nonce, keys, why);
  ASSERT_TRUE(wi) << why;
  EXPECT_EQ(wi->from, "b");
  EXPECT_EQ(wi->link, link);
  EXPECT_EQ(wi->key, lkey);
}

TEST_F(PeersFixture, HelloRefusals) {
  std::string why;
  value h = cluster::make_hello("c1", "a", "10.0.0.1:4520", a(), nonce, now);
  EXPECT_FALSE(cluster::verify_hello(h, "other-cluster", "b", keys, now, why));
  EXPECT_EQ(why, "another cluster_id");
  EXPECT_FALSE(cluster::verify_hello(h, "c1", "b", keys, now + 1000, why));
  EXPECT_EQ(why, "stale hello");
  EXPECT_FALSE(cluster::verify_hello(h, "c1", "a", keys, now, why));
  EXPECT_EQ(why, "a hello from myself");
  value tampered = h;
  tampered["addr"] = "6.6.6.6:4520";
  EXPECT_FALSE(cluster::verify_hello(tampered, "c1", "b", keys, now, why));
  EXPECT_EQ(why, "bad signature");
  value forged = cluster::make_hello("c1", "a", "10.0.0.1:4520", evil(), nonce, now);  // not a's key
  EXPECT_FALSE(cluster::verify_hello(forged, "c1", "b", keys, now, why));
  EXPECT_EQ(why, "bad signature");
  value unknown = cluster::make_hello("c1", "zed", "10.0.0.9:4520", evil(), nonce, now);
  EXPECT_FALSE(cluster::verify_hello(unknown, "c1", "b", keys, now, why));
  EXPECT_EQ(why, "no peers/zed.pub");
  value traversal = cluster::make_hello("c1", "../a", "10.0.0.1:4520", a(), nonce, now);
  EXPECT_FALSE(cluster::verify_hello(traversal, "c1", "b", keys, now, why));
  EXPECT_EQ(why, "invalid peer id");
  EXPECT_FALSE(cluster::verify_hello(value("junk"), "c1", "b", keys, now, why));
}

TEST_F(PeersFixture, NonceCacheRefusesReplaysInTheWindow) {
  cluster::nonce_cache c;
  EXPECT_TRUE(c.insert("x", now));
  EXPECT_FALSE(c.insert("x", now + 10));
  EXPECT_TRUE(c.insert("y", now + 10));
  EXPECT_TRUE(c.insert("x", now + 10 * cluster::k_hello_window_s));  // long expired
}

TEST_F(PeersFixture, WelcomeRefusals) {
  std::string why;
  value h = cluster::make_hello("c1", "a", "10.0.0.1:4520", a(), nonce, now);
  auto info = cluster::verify_hello(h, "c1", "b", keys, now, why).value();
  const std::string link(32, 'l');
  value w = cluster::make_welcome("b", b(), info, *keys("a"), link, crypto::crypticle::generate_key_string());
  EXPECT_FALSE(cluster::verify_welcome(w, "c", a(), nonce, keys, why));
  EXPECT_EQ(why, "welcome addressed to another master");
  EXPECT_FALSE(cluster::verify_welcome(w, "a", a(), std::string(32, 'x'), keys, why));
  EXPECT_EQ(why, "nonce not echoed");
  value forged = cluster::make_welcome("b", evil(), info, *keys("a"), link, crypto::crypticle::generate_key_string());
  EXPECT_FALSE(cluster::verify_welcome(forged, "a", a(), nonce, keys, why));
  EXPECT_EQ(why, "bad signature");
  EXPECT_FALSE(cluster::verify_welcome(value{{"error", "no peers/a.pub"}}, "a", a(), nonce, keys, why));
  EXPECT_EQ(why, "refused: no peers/a.pub");
}

TEST_F(PeersFixture, SealedBatchesAreSequenced) {
  auto k = crypto::crypticle::from_key_string(crypto::crypticle::generate_key_string()).value();
  auto other = crypto::crypticle::from_key_string(crypto::crypticle::generate_key_string()).value();
  std::vector<cluster::peer_message> msgs{{"publish", value{{"jid", "1"}}}, {"return", value{{"jid", "2"}}}};
  value sealed = cluster::seal_batch(k, "link", 7, msgs);
  std::string why;
  auto opened = cluster::open_batch(k, sealed, 7, why);
  ASSERT_TRUE(opened) << why;
  ASSERT_EQ(opened->size(), 2u);
  EXPECT_EQ((*opened)[1].type, "return");
  EXPECT_EQ((*opened)[1].body["jid"], "2");
  EXPECT_FALSE(cluster::open_batch(k, sealed, 8, why));  // replayed after seq 7
  EXPECT_EQ(why, "sequence mismatch (replay?)");
  EXPECT_FALSE(cluster::open_batch(other, sealed, 7, why));  // another link's key
  value ack = cluster::seal_ack(k, 7);
  EXPECT_TRUE(cluster::open_ack(k, ack, 7, why));
  EXPECT_FALSE(cluster::open_ack(k, ack, 8, why));
  EXPECT_FALSE(cluster::open_ack(k, value{{"error", "unknown link"}}, 7, why));
  EXPECT_EQ(why, "unknown link");
}
