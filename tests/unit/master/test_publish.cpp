// Publishing: targets, topic filtering, payload wrapping (decoded like a Salt minion
// does: salt_payload unpack, signature over the load bytes, Crypticle loads), serials.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/util/pub_serial.hpp"
#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

using wire::value;

struct PublishFixture : ::testing::Test {
  temp_dir tmp;
  std::unique_ptr<master::master_core> core;
  fake_sink sink;

  void SetUp() override {
    auto c = master::master_core::create(make_config(tmp.path));
    ASSERT_TRUE(c) << c.error().message();
    core = std::move(*c);
    core->set_pub_sink(&sink);
    for (auto id : {"web1", "web2", "db1"}) {
      ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, id, cached_key(1).public_pem()));
    }
    ASSERT_TRUE(core->key_store().write(pki::key_state::pending, "web9", cached_key(1).public_pem()));
  }

  // Decode a frame like a minion: returns the load (serial kept).
  value open(const std::string& frame_bytes, value* payload_out = nullptr) {
    wire::frame_parser p;
    p.feed(frame_bytes);
    auto f = p.next();
    EXPECT_TRUE(f && *f);
    if (!f || !*f) return nullptr;
    EXPECT_EQ((*f)->head, value::object());
    auto body = wire::as_bytes((*f)->body);
    EXPECT_TRUE(body);
    auto payload = wire::unpack(*body);
    EXPECT_TRUE(payload);
    if (payload_out) *payload_out = *payload;
    EXPECT_EQ((*payload)["enc"], "aes");
    auto lb = wire::as_bytes((*payload)["load"]);
    auto sig = wire::as_bytes((*payload)["sig"]);
    EXPECT_EQ((*payload)["sig_algo"], "PKCS1v15-SHA1");
    EXPECT_TRUE(sig && crypto::verify(core->mkeys()->pub(), *lb, *sig));
    // loads() strips "serial"; decrypt by hand to see it.
    auto plain = core->aes().current()->crypt.decrypt(*lb);
    EXPECT_TRUE(plain);
    if (!plain) return nullptr;
    EXPECT_EQ(plain->substr(0, 8), "pickle::");
    auto load = wire::unpack(plain->substr(8));
    EXPECT_TRUE(load);
    return load ? *load : value(nullptr);
  }
};

TEST_F(PublishFixture, glob_targets_accepted_keys_only_and_uses_topics) {
  master::publish_request req;
  req.tgt = "web*";
  req.fun = "test.ping";
  auto r = core->publish(req);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.minions, (std::vector<std::string>{"web1", "web2"}));
  EXPECT_EQ(r.jid.size(), 20u);
  auto sent = sink.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].all);
  EXPECT_EQ(sent[0].ids, r.minions);
  auto load = open(*sent[0].frame);
  std::vector<std::string> order;
  for (auto it = load.begin(); it != load.end(); ++it) order.push_back(it.key());
  EXPECT_EQ(order, (std::vector<std::string>{"fun", "arg", "tgt", "jid", "ret", "tgt_type", "user", "serial"}));
  EXPECT_EQ(load["fun"], "test.ping");
  EXPECT_EQ(load["arg"], value::array());
  EXPECT_EQ(load["jid"], r.jid);
  EXPECT_EQ(load["ret"], "");
  // The serial is the master's clock in microseconds (also read as a Salt counter).
  ASSERT_TRUE(load["serial"].is_number_integer());
  const auto serial = load["serial"].get<std::int64_t>();
  EXPECT_TRUE(util::serial_is_time(serial));
  EXPECT_LE(std::llabs(util::now_micros() - serial), 60'000'000);
  auto saved = core->jobs().get_load(r.jid);
  ASSERT_TRUE(saved);
  EXPECT_EQ((*saved)["fun"], "test.ping");
  EXPECT_EQ(core->jobs().get_minions(r.jid), r.minions);
}

TEST_F(PublishFixture, kwargs_become_a_trailing_kwarg_map_and_serial_increases) {
  master::publish_request req;
  req.tgt = "db1";
  req.fun = "cmd.run";
  req.arg = value::array({"ls -l"});
  req.kwarg = value{{"cwd", "/tmp"}};
  core->publish(req);
  core->publish(req);
  auto sent = sink.take();
  ASSERT_EQ(sent.size(), 2u);
  auto l1 = open(*sent[0].frame);
  auto l2 = open(*sent[1].frame);
  EXPECT_EQ(l1["arg"], (value::array({"ls -l", value{{"__kwarg__", true}, {"cwd", "/tmp"}}})));
  EXPECT_LT(l1["serial"].get<std::int64_t>(), l2["serial"].get<std::int64_t>());
}

TEST_F(PublishFixture, list_and_pcre_targets) {
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = value::array({"web1", "nope"});
  req.tgt_type = "list";
  auto r = core->publish(req);
  EXPECT_EQ(r.minions, std::vector<std::string>{"web1"});
  EXPECT_EQ(r.missing, std::vector<std::string>{"nope"});
  req.tgt = "web1,db1";
  EXPECT_EQ(core->publish(req).minions, (std::vector<std::string>{"db1", "web1"}));
  req.tgt = "w.b[12]";
  req.tgt_type = "pcre";
  EXPECT_EQ(core->publish(req).minions, (std::vector<std::string>{"web1", "web2"}));
}

TEST_F(PublishFixture, grain_target_is_broadcast_and_greedy) {
  core->minion_data().store("web1", value{{"os", "Debian"}}, value::object());
  core->minion_data().store("web2", value{{"os", "RedHat"}}, value::object());
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = "os:Debian";
  req.tgt_type = "grain";
  auto r = core->publish(req);
  // db1 has no cached data: greedy includes it
  EXPECT_EQ(r.minions, (std::vector<std::string>{"db1", "web1"}));
  auto sent = sink.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].all);
}

TEST_F(PublishFixture, no_match_is_an_error_and_nothing_is_sent) {
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = "zzz*";
  auto r = core->publish(req);
  EXPECT_FALSE(r.error.empty());
  EXPECT_TRUE(sink.take().empty());
}

TEST_F(PublishFixture, serial_keeps_increasing_across_a_rotation) {
  // Salt restarts its counter at 1 with a new AES key; a time serial never goes back, so
  // a minion that has not re-authenticated yet drops nothing either.
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = "web1";
  core->publish(req);
  core->publish(req);
  auto before = sink.take();
  ASSERT_EQ(before.size(), 2u);
  const auto s2 = open(*before[1].frame)["serial"].get<std::int64_t>();
  ASSERT_TRUE(core->rotate_aes("test"));
  core->publish(req);
  auto sent = sink.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_GT(open(*sent[0].frame)["serial"].get<std::int64_t>(), s2);
}

TEST(PubSerial, strictly_increasing_when_the_clock_stalls_or_steps_back) {
  const std::int64_t t = 1'700'000'000'000'000;
  EXPECT_EQ(util::next_time_serial(0, t), t);
  EXPECT_EQ(util::next_time_serial(t, t), t + 1);          // same microsecond
  EXPECT_EQ(util::next_time_serial(t + 5, t), t + 6);      // clock stepped back
  EXPECT_EQ(util::next_time_serial(t, t + 10), t + 10);
  EXPECT_TRUE(util::serial_is_time(t));
  EXPECT_FALSE(util::serial_is_time(1));                   // a Salt master's counter
  EXPECT_FALSE(util::serial_is_time(999'999'999'999'999));
}

// Cluster relay: a peer's frame is passed on when its serial is above this master's last
// one, else re-wrapped (new serial, same load, valid signature): each connection sees
// increasing serials whichever master published.
TEST_F(PublishFixture, relayed_frame_passes_or_is_rewrapped_with_a_higher_serial) {
  auto peer_frame = [&](std::int64_t serial, const char* jid) {
    value load{{"fun", "test.ping"}, {"arg", value::array()}, {"tgt", "*"}, {"jid", jid},
               {"ret", ""}, {"tgt_type", "glob"}, {"user", "root"}, {"serial", serial}};
    auto body = master::wrap_publish_payload(load, core->aes().current()->crypt, &core->mkeys()->priv(),
                                             "PKCS1v15-SHA1");
    return wire::pack_frame(value::object(), wire::make_bin(body));
  };
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = "web1";
  core->publish(req);
  auto local = sink.take();
  ASSERT_EQ(local.size(), 1u);
  const auto s_local = open(*local[0].frame)["serial"].get<std::int64_t>();

  // A peer whose clock is ahead: passed on byte for byte, and this master continues above it.
  const std::int64_t ahead = s_local + 5'000'000;
  auto f1 = peer_frame(ahead, "20990101000000000001");
  auto out1 = core->relay_frame(f1);
  EXPECT_EQ(*out1, f1);
  // An older one (a peer behind, or a publish that crossed ours): re-wrapped above `ahead`.
  auto f2 = peer_frame(s_local - 1'000'000, "20990101000000000002");
  auto out2 = core->relay_frame(f2);
  EXPECT_NE(*out2, f2);
  auto l2 = open(*out2);  // checks the signature too
  EXPECT_EQ(l2["jid"], "20990101000000000002");
  EXPECT_GT(l2["serial"].get<std::int64_t>(), ahead);
  // One without a serial (a master that sends none): given one.
  value bare{{"fun", "test.ping"}, {"tgt", "*"}, {"jid", "20990101000000000003"}};
  auto body3 = master::wrap_publish_payload(bare, core->aes().current()->crypt, &core->mkeys()->priv(),
                                            "PKCS1v15-SHA1");
  auto out3 = core->relay_frame(wire::pack_frame(value::object(), wire::make_bin(body3)));
  EXPECT_GT(open(*out3)["serial"].get<std::int64_t>(), l2["serial"].get<std::int64_t>());
  // The next local publish continues above the relayed ones.
  core->publish(req);
  auto again = sink.take();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_GT(open(*again[0].frame)["serial"].get<std::int64_t>(), l2["serial"].get<std::int64_t>());
  // Garbage from a peer is passed on as it was (and logged), never a crash.
  auto junk = core->relay_frame("not msgpack");
  EXPECT_EQ(*junk, "not msgpack");
}

TEST_F(PublishFixture, unsigned_when_sign_pub_messages_off) {
  auto aes = crypto::crypticle::from_key_string(crypto::crypticle::generate_key_string());
  auto bytes = master::wrap_publish_payload(value{{"fun", "x"}}, *aes, nullptr, "PKCS1v15-SHA1");
  auto p = wire::unpack(bytes);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->contains("sig"));
  EXPECT_FALSE(p->contains("sig_algo"));
  // Old-spec packing: no str8 (0xd9) / bin (0xc4..0xc6) markers at the top level.
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x82);
}

}  // namespace
}  // namespace sylvite::test

namespace sylvite::test {
namespace {

TEST_F(PublishFixture, topic_target_without_identified_connection_is_broadcast_if_unidentified_exist) {
  master::publish_request req;
  req.fun = "test.ping";
  req.tgt = "web*";
  sink.connected = {"web1"};
  sink.connections = 1;
  core->publish(req);  // web2 not connected, no unidentified connection: topic send
  auto sent = sink.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].all);
  sink.connections = 3;  // two connections whose hello failed (stale AES key)
  core->publish(req);
  sent = sink.take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].all);
}

}  // namespace
}  // namespace sylvite::test
