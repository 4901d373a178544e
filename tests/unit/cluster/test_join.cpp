// join: the discover/join handshake refuses what it must (signatures, tokens, recipients,
// nonces, the cluster-key pin and endorsement, secrets, ids) and installs all-or-nothing.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>

#include "cluster_test_util.hpp"
#include "cluster/join.hpp"
#include "cluster/peer_protocol.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

using namespace sylvite;
using wire::value;
namespace fs = std::filesystem;
using sylvite::test::tmpdir;

namespace {
crypto::rsa_key& key(int i) {
  static crypto::rsa_key k[4] = {crypto::rsa_key::generate(1024).value(), crypto::rsa_key::generate(1024).value(),
                                 crypto::rsa_key::generate(1024).value(), crypto::rsa_key::generate(1024).value()};
  return k[i];
}
crypto::rsa_key& joiner() { return key(0); }
crypto::rsa_key& peer() { return key(1); }
crypto::rsa_key& ckey() { return key(2); }
crypto::rsa_key& evil() { return key(3); }

struct JoinFixture : ::testing::Test {
  const std::int64_t now = 1'800'000'000;
  const std::string nonce = crypto::uuid4_hex();
  cluster::pending_joins pending;
  cluster::cluster_pin pin{crypto::sha256_hex(ckey().public_pem()), ""};
  std::optional<std::string> secret = std::string("s3cret");

  value discover(const std::string& id = "m4") {
    return cluster::make_discover("c1", id, joiner().public_pem(), "127.0.0.1:4520", joiner(), nonce, now);
  }
  // Runs discover -> reply on P's side; returns the reply and J's view of it.
  value reply(cluster::discover_info& d, const std::string& id = "m4") {
    std::string why;
    auto di = cluster::verify_discover(discover(id), "c1", "m1", now, why);
    EXPECT_TRUE(di) << why;
    d = *di;
    const std::string tok = pending.add(d, now);
    return cluster::make_discover_reply("m1", peer(), ckey(), d, tok);
  }
  cluster::discover_reply_info reply_info() {
    cluster::discover_info d;
    std::string why;
    auto r = cluster::verify_discover_reply(reply(d), "m4", nonce, pin, why);
    EXPECT_TRUE(r) << why;
    return *r;
  }
  cluster::cluster_identity ident() {
    cluster::cluster_identity i;
    i.cluster_pem = ckey().private_pem();
    i.cluster_pub_pem = ckey().public_pem();
    i.aes = crypto::crypticle::generate_key_string();
    i.peers["m1"] = peer().public_pem();
    i.peers["m4"] = joiner().public_pem();
    return i;
  }
};

value with(value v, const std::string& k, value x) {
  v[k] = std::move(x);
  return v;
}
}  // namespace

TEST_F(JoinFixture, FullHandshakeAndInstall) {
  auto r = reply_info();
  EXPECT_EQ(r.from, "m1");
  value j = cluster::make_join("m4", joiner(), r, "s3cret");
  std::string why;
  auto jr = cluster::verify_join(j, peer(), secret, false, pending, now + 1, why);
  ASSERT_TRUE(jr) << why;
  EXPECT_EQ(jr->from, "m4");
  EXPECT_EQ(jr->addr, "127.0.0.1:4520");
  auto id = ident();
  id.addrs["m1"] = "10.0.0.1:4520";
  id.addrs["m4"] = "10.0.0.4:4520";       // the joiner itself: dropped
  id.addrs["m7"] = "10.0.0.7:4520";       // not a listed member: dropped
  value rep = cluster::make_join_reply("m1", peer(), *jr, id);
  auto got = cluster::verify_join_reply(rep, "m4", joiner(), r, why);
  ASSERT_TRUE(got) << why;
  EXPECT_EQ(got->aes, id.aes);
  EXPECT_EQ(got->addrs, (std::map<std::string, std::string>{{"m1", "10.0.0.1:4520"}}));
  EXPECT_EQ(got->peers.size(), 2u);
  tmpdir t;
  ASSERT_TRUE(cluster::install_identity(t.p / "cpki", *got, why)) << why;
  EXPECT_TRUE(cluster::is_member_dir(t.p / "cpki", "m4"));
  EXPECT_FALSE(cluster::is_member_dir(t.p / "cpki", "m9"));  // shared dir, no peers/m9.pub: joins
  EXPECT_FALSE(cluster::is_member_dir(t.p / "cpki", "../cpki/peers/m4"));
  EXPECT_TRUE(fs::exists(t.p / "cpki/peers/m1.pub"));
  EXPECT_TRUE(fs::exists(t.p / "cpki/peers/m4.pub"));
  EXPECT_EQ(util::read_file(t.p / "cpki/.aes").value(), id.aes);
  // Idempotent on identical content (shared dir already holding the files).
  EXPECT_TRUE(cluster::install_identity(t.p / "cpki", *got, why)) << why;
  // A shared dir whose .aes was rotated after the reply was made keeps its own key.
  auto newer = crypto::crypticle::generate_key_string();
  ASSERT_TRUE(util::write_file_atomic(t.p / "cpki/.aes", newer, 0600));
  EXPECT_TRUE(cluster::install_identity(t.p / "cpki", *got, why)) << why;
  EXPECT_EQ(util::read_file(t.p / "cpki/.aes").value(), newer);
}

TEST_F(JoinFixture, DiscoverRefusals) {
  std::string why;
  value d = discover();
  EXPECT_FALSE(cluster::verify_discover(d, "other", "m1", now, why));
  EXPECT_EQ(why, "another cluster_id");
  EXPECT_FALSE(cluster::verify_discover(d, "c1", "m1", now + 1000, why));
  EXPECT_EQ(why, "stale discover");
  EXPECT_FALSE(cluster::verify_discover(d, "c1", "m4", now, why));
  EXPECT_EQ(why, "a discover from myself");
  EXPECT_FALSE(cluster::verify_discover(with(d, "addr", value("10.9.9.9:1")), "c1", "m1", now, why));
  EXPECT_EQ(why, "bad signature");
  // A valid signature by another key than the one named in "pub".
  value forged = cluster::make_discover("c1", "m4", joiner().public_pem(), "a:1", evil(), nonce, now);
  EXPECT_FALSE(cluster::verify_discover(forged, "c1", "m1", now, why));
  EXPECT_EQ(why, "bad signature");
  for (const char* bad : {"../etc", "a/b", "..", ".hidden", ""}) {
    value t = cluster::make_discover("c1", bad, joiner().public_pem(), "a:1", joiner(), nonce, now);
    EXPECT_FALSE(cluster::verify_discover(t, "c1", "m1", now, why)) << bad;
    EXPECT_EQ(why, "invalid peer id") << bad;
  }
}

TEST_F(JoinFixture, DiscoverReplyRefusals) {
  cluster::discover_info d;
  value r = reply(d);
  std::string why;
  EXPECT_FALSE(cluster::verify_discover_reply(r, "m5", nonce, pin, why));
  EXPECT_EQ(why, "reply addressed to another master");
  EXPECT_FALSE(cluster::verify_discover_reply(r, "m4", crypto::uuid4_hex(), pin, why));
  EXPECT_EQ(why, "nonce not echoed");
  EXPECT_FALSE(cluster::verify_discover_reply(r, "m4", nonce, {crypto::sha256_hex("other"), ""}, why));
  EXPECT_EQ(why, "the cluster key does not match cluster_pub_fingerprint");
  EXPECT_FALSE(cluster::verify_discover_reply(r, "m4", nonce, {"", evil().public_pem()}, why));
  EXPECT_EQ(why, "the cluster key differs from cluster_pki_dir/cluster.pub");
  EXPECT_FALSE(cluster::verify_discover_reply(r, "m4", nonce, {"", ""}, why));
  EXPECT_EQ(why, "cannot pin the cluster key: set cluster_pub_fingerprint");
  EXPECT_TRUE(cluster::verify_discover_reply(r, "m4", nonce, {"", ckey().public_pem()}, why)) << why;
  // Tampered field -> bad signature by P.
  EXPECT_FALSE(cluster::verify_discover_reply(with(r, "v", value(2)), "m4", nonce, pin, why));
  EXPECT_EQ(why, "bad signature");
  // Endorsed by a key that is not the cluster key (a non-member posing with the real cluster.pub).
  value fake = cluster::make_discover_reply("m1", peer(), evil(), d, std::string(wire::get_text(r, "token").value()));
  fake["cluster_pub"] = ckey().public_pem();
  EXPECT_FALSE(cluster::verify_discover_reply(fake, "m4", nonce, pin, why));
  EXPECT_EQ(why, "endorsement not signed by the cluster key (the peer is not a member)");
  // Endorsement for another joiner cannot be reused.
  value other = cluster::make_discover_reply("m1", peer(), ckey(), d, std::string(wire::get_text(r, "token").value()));
  EXPECT_FALSE(cluster::verify_discover_reply(other, "m5", nonce, pin, why));
  // An error reply is surfaced.
  EXPECT_FALSE(cluster::verify_discover_reply(value{{"error", "not a member"}}, "m4", nonce, pin, why));
  EXPECT_EQ(why, "refused by the peer: not a member");
  // The fingerprint may be given salt-key -F style too.
  EXPECT_TRUE(cluster::fingerprint_matches(ckey().public_pem(), crypto::pem_fingerprint(ckey().public_pem()).value()));
}

TEST_F(JoinFixture, JoinRefusals) {
  std::string why;
  {  // tampered signature: refused, and the joiner's token survives it (it travels in the clear)
    auto r = reply_info();
    value j = with(cluster::make_join("m4", joiner(), r, "s3cret"), "to", value("m2"));
    EXPECT_FALSE(cluster::verify_join(j, peer(), secret, false, pending, now, why));
    EXPECT_EQ(why, "bad signature");
    EXPECT_TRUE(cluster::verify_join(cluster::make_join("m4", joiner(), r, "s3cret"), peer(), secret, false, pending,
                                     now, why)) << why;
  }
  {  // a replayed discover nonce is refused (it would replace the joiner's pending token)
    cluster::pending_joins p;
    EXPECT_TRUE(p.fresh_nonce("n1", now));
    EXPECT_FALSE(p.fresh_nonce("n1", now + 10));
    EXPECT_TRUE(p.fresh_nonce("n2", now + 10));
    EXPECT_TRUE(p.fresh_nonce("n1", now + 2 * cluster::k_discover_window_s + 1));  // forgotten after the window
  }
  {  // replayed token: consumed by the first join
    auto r = reply_info();
    value j = cluster::make_join("m4", joiner(), r, "s3cret");
    ASSERT_TRUE(cluster::verify_join(j, peer(), secret, false, pending, now, why)) << why;
    EXPECT_FALSE(cluster::verify_join(j, peer(), secret, false, pending, now, why));
    EXPECT_EQ(why, "no pending join (unknown, used or expired token)");
  }
  {  // expired token
    auto r = reply_info();
    value j = cluster::make_join("m4", joiner(), r, "s3cret");
    EXPECT_FALSE(cluster::verify_join(j, peer(), secret, false, pending, now + cluster::k_join_token_ttl_s + 1, why));
    EXPECT_TRUE(why == "join token expired" || why.starts_with("no pending join")) << why;
  }
  {  // one pending per joiner: a second discover replaces the first token
    auto r1 = reply_info();
    auto r2 = reply_info();
    EXPECT_EQ(pending.size(), 1u);
    EXPECT_FALSE(cluster::verify_join(cluster::make_join("m4", joiner(), r1, "s3cret"), peer(), secret, false,
                                      pending, now, why));
    EXPECT_EQ(why, "wrong join token");
    EXPECT_TRUE(cluster::verify_join(cluster::make_join("m4", joiner(), r2, "s3cret"), peer(), secret, false,
                                     pending, now, why)) << why;
  }
  {  // wrong secret
    auto r = reply_info();
    EXPECT_FALSE(cluster::verify_join(cluster::make_join("m4", joiner(), r, "nope"), peer(), secret, false, pending,
                                      now, why));
    EXPECT_EQ(why, "wrong cluster_secret");
  }
  {  // signed by another key than the one pending since discover
    auto r = reply_info();
    EXPECT_FALSE(cluster::verify_join(cluster::make_join("m4", evil(), r, "s3cret"), peer(), secret, false, pending,
                                      now, why));
    EXPECT_EQ(why, "bad signature");
  }
  {  // empty secret: refused unless allowed
    auto r = reply_info();
    EXPECT_FALSE(cluster::verify_join(cluster::make_join("m4", joiner(), r, ""), peer(), std::string(), false,
                                      pending, now, why));
    EXPECT_TRUE(why.starts_with("empty or unset cluster_secret")) << why;
    r = reply_info();
    EXPECT_TRUE(cluster::verify_join(cluster::make_join("m4", joiner(), r, ""), peer(), std::nullopt, true, pending,
                                     now, why)) << why;
  }
  {  // path-traversal id
    value j = cluster::make_join("../m4", joiner(), reply_info(), "s3cret");
    EXPECT_FALSE(cluster::verify_join(j, peer(), secret, false, pending, now, why));
    EXPECT_EQ(why, "invalid peer id");
  }
}

TEST_F(JoinFixture, SecretCompare) {
  std::string why;
  EXPECT_TRUE(cluster::secret_matches(std::string("a"), std::string("a"), false, why));
  EXPECT_FALSE(cluster::secret_matches(std::string("a"), std::string("ab"), false, why));
  EXPECT_FALSE(cluster::secret_matches(std::nullopt, std::nullopt, false, why));
  EXPECT_FALSE(cluster::secret_matches(std::string("a"), std::string(""), false, why));
  EXPECT_TRUE(cluster::secret_matches(std::nullopt, std::string(""), true, why));
  EXPECT_FALSE(cluster::secret_matches(std::string("a"), std::string(""), true, why));
}

TEST_F(JoinFixture, PendingTableIsBounded) {
  for (int i = 0; i < 200; ++i) {
    cluster::discover_info d{"j" + std::to_string(i), "pem", "a:1", nonce};
    pending.add(d, now);
  }
  EXPECT_LE(pending.size(), cluster::k_max_pending_joins);
  cluster::discover_info d{"late", "pem", "a:1", nonce};
  pending.add(d, now + 100);  // everything else expired
  EXPECT_EQ(pending.size(), 1u);
}

TEST_F(JoinFixture, JoinReplyRefusals) {
  std::string why;
  auto r = reply_info();
  cluster::join_request jr{"m4", joiner().public_pem(), "a:1", r.token};
  auto id = ident();
  value rep = cluster::make_join_reply("m1", peer(), jr, id);
  EXPECT_FALSE(cluster::verify_join_reply(with(rep, "from", value("m2")), "m4", joiner(), r, why));
  EXPECT_EQ(why, "join-reply from a peer that was not asked");
  EXPECT_FALSE(cluster::verify_join_reply(rep, "m5", joiner(), r, why));
  EXPECT_EQ(why, "reply addressed to another master");
  auto r2 = r;
  r2.token = crypto::uuid4_hex();
  EXPECT_FALSE(cluster::verify_join_reply(rep, "m4", joiner(), r2, why));
  EXPECT_EQ(why, "token not echoed");
  EXPECT_FALSE(cluster::verify_join_reply(with(rep, "v", value(7)), "m4", joiner(), r, why));
  EXPECT_EQ(why, "bad signature");
  // Sealed to another key: does not decrypt.
  EXPECT_FALSE(cluster::verify_join_reply(rep, "m4", evil(), r, why));
  EXPECT_EQ(why, "cluster key does not decrypt");
  // A traversal id in the member list.
  auto bad = id;
  bad.peers["../x"] = peer().public_pem();
  EXPECT_FALSE(cluster::verify_join_reply(cluster::make_join_reply("m1", peer(), jr, bad), "m4", joiner(), r, why));
  EXPECT_EQ(why, "invalid peer id in the member list");
  // Another cluster key than the pinned one.
  auto other = id;
  other.cluster_pem = evil().private_pem();
  EXPECT_FALSE(cluster::verify_join_reply(cluster::make_join_reply("m1", peer(), jr, other), "m4", joiner(), r, why));
  EXPECT_EQ(why, "the cluster key does not match the pinned cluster.pub");
}

TEST_F(JoinFixture, InstallRollsBack) {
  tmpdir t;
  const fs::path dir = t.p / "cpki";
  std::string why;
  auto id = ident();
  // peers/m4.pub already holds another key: nothing this call wrote stays behind.
  ASSERT_TRUE(util::create_exclusive(dir / "peers" / "m4.pub", evil().public_pem()));
  EXPECT_FALSE(cluster::install_identity(dir, id, why));
  EXPECT_NE(why.find("already exists with other content"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(dir / "cluster.pem"));
  EXPECT_FALSE(fs::exists(dir / ".aes"));
  EXPECT_FALSE(fs::exists(dir / "peers" / "m1.pub"));
  EXPECT_TRUE(fs::exists(dir / "peers" / "m4.pub"));  // not ours: kept
  // Traversal id: refused before writing anything.
  tmpdir t2;
  auto bad = id;
  bad.peers["../../evil"] = peer().public_pem();
  EXPECT_FALSE(cluster::install_identity(t2.p / "cpki", bad, why));
  EXPECT_FALSE(fs::exists(t2.p / "cpki"));
  EXPECT_FALSE(fs::exists(t2.p / "evil.pub"));
  // Mismatched key pair: refused before writing.
  auto mism = id;
  mism.cluster_pub_pem = evil().public_pem();
  EXPECT_FALSE(cluster::install_identity(t2.p / "cpki", mism, why));
  EXPECT_FALSE(fs::exists(t2.p / "cpki"));
}

// Issue 14 item 5: tokens handed to unauthenticated senders never push out a real
// joiner's token; the table refuses instead (per source and in total).
TEST_F(JoinFixture, PendingTableRefusesInsteadOfEvicting) {
  std::string why;
  cluster::discover_info real{"real", joiner().public_pem(), "10.0.0.1:4520", nonce};
  auto real_tok = pending.add(real, "10.0.0.1", now, why);
  ASSERT_TRUE(real_tok) << why;
  // one source: k_max_pending_per_source tokens, then refusals
  std::size_t got = 0;
  for (int i = 0; i < 20; ++i) {
    cluster::discover_info d{"f" + std::to_string(i), "pem", "a:1", nonce};
    if (pending.add(d, "10.9.9.9", now, why)) ++got;
  }
  EXPECT_EQ(got, cluster::k_max_pending_per_source);
  EXPECT_EQ(why, "too many pending joins from this address");
  // many sources: the table fills to k_max_pending_joins and refuses the rest
  for (int s = 0; s < 100; ++s)
    for (int i = 0; i < 10; ++i) {
      cluster::discover_info d{"s" + std::to_string(s) + "x" + std::to_string(i), "pem", "a:1", nonce};
      (void)pending.add(d, "10.1.0." + std::to_string(s), now, why);
    }
  EXPECT_EQ(pending.size(), cluster::k_max_pending_joins);
  EXPECT_EQ(why, "too many pending joins; retry in a minute");
  cluster::discover_info late{"late", "pem", "a:1", nonce};
  EXPECT_TRUE(pending.full_for(late, "10.2.0.1", now, why));
  EXPECT_FALSE(pending.add(late, "10.2.0.1", now, why));
  // the real joiner's id under another key does not replace its token
  cluster::discover_info spoof{"real", evil().public_pem(), "10.9.9.8:1", nonce};
  EXPECT_FALSE(pending.add(spoof, "10.9.9.8", now, why));
  EXPECT_EQ(why, "a join of 'real' is pending already (another key)");
  // the real joiner's token survived the flood
  EXPECT_NE(pending.peek("real", *real_tok, now + 1, why), nullptr) << why;
  // the same joiner (same key) retrying gets a fresh token even when the table is full
  auto again = pending.add(real, "10.0.0.1", now + 1, why);
  ASSERT_TRUE(again) << why;
  EXPECT_NE(*again, *real_tok);
  EXPECT_TRUE(pending.take("real", *again, now + 2, why)) << why;
  // tokens expire as before: then there is room again
  EXPECT_TRUE(pending.add(late, "10.2.0.1", now + cluster::k_join_token_ttl_s + 1, why)) << why;
  EXPECT_EQ(pending.size(), 1u);
}

TEST(RateLimiter, BurstThenRefillPerKey) {
  cluster::rate_limiter rl(2.0, 3.0, 8);  // 3 at once, then 2 a second
  std::int64_t t = 1000;
  EXPECT_TRUE(rl.allow("a", t));
  EXPECT_TRUE(rl.allow("a", t));
  EXPECT_TRUE(rl.allow("a", t));
  EXPECT_FALSE(rl.allow("a", t));
  EXPECT_FALSE(rl.allow("a", t + 100));  // 0.2 of a token
  EXPECT_TRUE(rl.allow("b", t));         // another key has its own bucket
  EXPECT_TRUE(rl.allow("a", t + 500));   // one token after 0.5 s
  EXPECT_FALSE(rl.allow("a", t + 500));
  EXPECT_TRUE(rl.allow("a", t + 100000));  // refilled, capped at the burst
  EXPECT_TRUE(rl.allow("a", t + 100000));
  EXPECT_TRUE(rl.allow("a", t + 100000));
  EXPECT_FALSE(rl.allow("a", t + 100000));
  // a clock going backwards neither refills nor underflows
  EXPECT_FALSE(rl.allow("a", t));
}

TEST(RateLimiter, KeyTableIsBounded) {
  cluster::rate_limiter rl(1.0, 1.0, 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(rl.allow("k" + std::to_string(i), 0));
  EXPECT_FALSE(rl.allow("new", 0));  // every bucket is in use: a fifth sender is refused
  EXPECT_EQ(rl.size(), 4u);
  EXPECT_TRUE(rl.allow("new", 5000));  // idle buckets (full again) are forgotten for it
  EXPECT_LE(rl.size(), 4u);
}

// Issue 14 item 6: the join carries a proof, never the secret; the proof is bound to the
// answering member's key, so it is useless with any other member.
TEST_F(JoinFixture, JoinCarriesAProofNotTheSecret) {
  auto r = reply_info();
  const std::string long_secret = "a-long-and-unmistakable-cluster-secret";
  value j = cluster::make_join("m4", joiner(), r, long_secret);
  EXPECT_EQ(wire::find(j, "secret"), nullptr);
  const std::string bytes = wire::pack(j, wire::packing::frame);
  EXPECT_EQ(bytes.find(long_secret), std::string::npos);
  std::string why;
  // checked by another member key than the one it was made for: refused
  EXPECT_FALSE(cluster::verify_join(j, evil(), std::string(long_secret), false, pending, now, why));
  EXPECT_EQ(why, "wrong cluster_secret");
  // a join without a proof (an older joiner) is refused with the reason
  auto r2 = reply_info();
  value j2 = cluster::make_join("m4", joiner(), r2, long_secret);
  j2.erase("proof");
  cluster::sign_message(j2, joiner());
  EXPECT_FALSE(cluster::verify_join(j2, peer(), std::string(long_secret), false, pending, now, why));
  EXPECT_TRUE(why.starts_with("no join proof")) << why;
  auto r3 = reply_info();
  EXPECT_TRUE(cluster::verify_join(cluster::make_join("m4", joiner(), r3, long_secret), peer(),
                                   std::string(long_secret), false, pending, now, why))
      << why;
}
