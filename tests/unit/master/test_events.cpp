// The master's event bus (issue 18, events part): _stamp on every local event, non-map
// data refused, fire_jid_only, Salt's _minion_event payloads (tag form: the whole load;
// events form: each event's data), salt/key from key events, presence_events, and the
// cluster's "event" peer message routed with origin peer (never forwarded again).
#include <gtest/gtest.h>

#include <cctype>


#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core/util/files.hpp"
#include "master/cluster_node.hpp"
#include "master/event_hub.hpp"
#include "core_fixture.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

namespace fs = std::filesystem;
using wire::value;

// The request fixture with a renderer that renders nothing, recording every hub event.
struct EventFixture : master_core_test {
  std::vector<std::pair<std::string, value>> seen;

  std::unique_ptr<render::renderer> make_renderer() override { return std::make_unique<null_renderer>(); }
  void SetUp() override {
    master_core_test::SetUp();
    if (HasFatalFailure()) return;
    core->hub().subscribe_all([this](const std::string& tag, const value& d) { seen.emplace_back(tag, d); });
  }
  std::vector<std::pair<std::string, value>> with_prefix(const std::string& p) const {
    std::vector<std::pair<std::string, value>> out;
    for (const auto& e : seen)
      if (e.first.rfind(p, 0) == 0) out.push_back(e);
    return out;
  }
};

TEST(EventHub, local_events_get_a_python_isoformat_stamp) {
  master::event_hub hub;
  value got;
  hub.subscribe_all([&](const std::string&, const value& d) { got = d; });
  hub.fire("a/b", value{{"x", 1}});
  ASSERT_TRUE(got.contains("_stamp"));
  EXPECT_EQ(got["x"], 1);
  // YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00 (checked by hand: std::regex trips GCC 12's
  // -Wmaybe-uninitialized in the sanitizer build)
  auto iso = [](const std::string& s) {
    const std::string shape = s.size() == 32 ? "dddd-dd-ddTdd:dd:dd.dddddd+00:00" : "dddd-dd-ddTdd:dd:dd+00:00";
    if (s.size() != shape.size()) return false;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != shape[i]) return false;
    return true;
  };
  EXPECT_TRUE(iso(got["_stamp"].get<std::string>())) << got.dump();
  // a peer's event keeps its master's stamp
  hub.fire("a/b", value{{"_stamp", "2020-01-01T00:00:00.000001+00:00"}}, {}, master::event_hub::origin::peer);
  EXPECT_EQ(got["_stamp"], "2020-01-01T00:00:00.000001+00:00");
  EXPECT_EQ(hub.fired(), 2u);
}

TEST(EventHub, non_map_data_is_refused_and_counted) {
  master::event_hub hub;
  int n = 0;
  hub.subscribe_all([&](const std::string&, const value&) { ++n; });
  hub.fire("a", value("text"));
  hub.fire("a", value(nullptr));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(hub.refused(), 2u);
}

TEST(EventHub, fire_jid_only_reaches_the_jid_subscribers_only) {
  master::event_hub hub;
  int all = 0, jid = 0;
  hub.subscribe_all([&](const std::string&, const value&) { ++all; });
  hub.subscribe_jid("123", [&](const std::string&, const value&) { ++jid; });
  hub.fire_jid_only("salt/job/123/ret/m1", value::object(), "123");
  EXPECT_EQ(all, 0);
  EXPECT_EQ(jid, 1);
}

TEST(EventHub, subscribe_local_does_not_see_peer_events) {
  master::event_hub hub;
  int local = 0, all = 0;
  hub.subscribe_local([&](const std::string&, const value&) { ++local; });
  hub.subscribe_all([&](const std::string&, const value&) { ++all; });
  hub.fire("x", value::object());
  hub.fire("y", value::object(), {}, master::event_hub::origin::peer);
  EXPECT_EQ(local, 1);
  EXPECT_EQ(all, 2);
}

// A subscriber that wants nothing for now (the event bus socket without clients) gets
// nothing; the others and the jid waits still do, and every event is counted.
TEST(EventHub, a_subscriber_that_wants_nothing_is_skipped) {
  master::event_hub hub;
  bool wanted = false;
  int idle = 0, jid = 0;
  hub.subscribe_all([&](const std::string&, const value&) { ++idle; }, [&] { return wanted; });
  hub.subscribe_jid("123", [&](const std::string&, const value& d) {
    ++jid;
    EXPECT_TRUE(d.contains("_stamp"));
  });
  hub.fire("salt/job/123/ret/m1", value::object(), "123");
  hub.fire("other", value::object());
  EXPECT_EQ(idle, 0);
  EXPECT_EQ(jid, 1);
  wanted = true;
  hub.fire("other", value::object());
  EXPECT_EQ(idle, 1);
  EXPECT_EQ(hub.fired(), 3u);
}

// masterapi._minion_event: the tag form fires the whole load (tok and nonce removed).
TEST_F(EventFixture, minion_event_tag_form_fires_the_load) {
  login(m1);
  seen.clear();
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"pretag", nullptr}, {"data", value{{"a", 1}}},
                           {"tag", "my/tag"}}),
            value(nullptr));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "my/tag");
  const value& d = seen[0].second;
  EXPECT_EQ(d["id"], "m1");
  EXPECT_EQ(d["cmd"], "_minion_event");
  EXPECT_EQ(d["tag"], "my/tag");
  EXPECT_EQ(d["data"], (value{{"a", 1}}));
  EXPECT_TRUE(d.contains("_stamp"));
  EXPECT_FALSE(d.contains("tok"));
  EXPECT_FALSE(d.contains("nonce"));
}

TEST_F(EventFixture, minion_event_events_form_fires_each_data) {
  login(m1);
  seen.clear();
  value evs = value::array();
  evs.push_back(value{{"tag", "t/1"}, {"data", value{{"k", "v"}}}});
  evs.push_back(value{{"tag", "t/2"}, {"other", 2}});  // no data: the event itself
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"events", evs}}), value(nullptr));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, "t/1");
  EXPECT_EQ(seen[0].second["k"], "v");
  EXPECT_EQ(seen[1].first, "t/2");
  EXPECT_EQ(seen[1].second["other"], 2);
  EXPECT_EQ(seen[1].second["tag"], "t/2");
}

TEST_F(EventFixture, minion_event_without_tag_fires_nothing_and_answers_none) {
  login(m1);
  seen.clear();
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"data", value::object()}}), value(nullptr));
  EXPECT_TRUE(seen.empty());
}

TEST_F(EventFixture, auth_fires_salt_auth) {
  accept_key(*core, m1);
  seen.clear();
  auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
  auto ev = with_prefix("salt/auth");
  ASSERT_EQ(ev.size(), 1u);
  const value& d = ev[0].second;
  auto it = d.begin();
  EXPECT_EQ(it.key(), "result");
  EXPECT_EQ((++it).key(), "act");
  EXPECT_EQ((++it).key(), "id");
  EXPECT_EQ((++it).key(), "pub");
  EXPECT_EQ(d["act"], "accept");
  EXPECT_EQ(d["id"], "m1");
  EXPECT_EQ(d["result"], true);
}

TEST_F(EventFixture, key_events_fire_salt_key) {
  accept_key(*core, m1);
  seen.clear();
  core->key_event("accept", {"m1"});
  auto ev = with_prefix("salt/key");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].second["act"], "accept");
  EXPECT_EQ(ev[0].second["id"], "m1");
  EXPECT_EQ(ev[0].second["result"], true);
  EXPECT_TRUE(ev[0].second.contains("pub"));
  seen.clear();
  core->key_event("delete", {"m1"});
  ev = with_prefix("salt/key");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].second["act"], "delete");
  EXPECT_FALSE(ev[0].second.contains("pub"));
}

TEST_F(EventFixture, publish_fires_job_new) {
  login(m1);
  seen.clear();
  master::publish_request req;
  req.tgt = "*";
  req.fun = "test.ping";
  auto res = core->publish(req);
  ASSERT_TRUE(res.error.empty()) << res.error;
  auto ev = with_prefix("salt/job/" + res.jid + "/new");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].second["fun"], "test.ping");
  EXPECT_EQ(ev[0].second["jid"], res.jid);
  EXPECT_TRUE(ev[0].second.contains("minions"));
  // Salt's ClearFuncs.publish: salt/job/<jid>/publish carries _prep_pub's load.
  auto pub = with_prefix("salt/job/" + res.jid + "/publish");
  ASSERT_EQ(pub.size(), 1u);
  for (const char* k : {"fun", "arg", "tgt", "jid", "ret", "tgt_type", "user", "_stamp"})
    EXPECT_TRUE(pub[0].second.contains(k)) << k;
  EXPECT_FALSE(pub[0].second.contains("minions"));
  EXPECT_EQ(pub[0].second["jid"], res.jid);
}

TEST_F(EventFixture, presence_events_off_by_default) {
  core->on_presence("m1", true);
  EXPECT_TRUE(with_prefix("salt/presence/").empty());
}

struct PresenceFixture : EventFixture {
  void customize(config::master_config& c) override {
    c.raw["presence_events"] = true;
    c.raw["loop_interval"] = 60;
  }
};

TEST_F(PresenceFixture, connect_and_disconnect_fire_change_and_present) {
  core->on_presence("m1", true);
  core->on_presence("m1", true);  // a second connection of m1: nothing new
  core->on_presence("m1", false);
  auto ev = with_prefix("salt/presence/");
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].first, "salt/presence/change");
  EXPECT_EQ(ev[0].second["new"], value::array({"m1"}));
  EXPECT_EQ(ev[1].first, "salt/presence/present");
  EXPECT_EQ(ev[1].second["present"], value::array({"m1"}));
  EXPECT_EQ(ev[2].second["lost"], value::array({"m1"}));
  EXPECT_EQ(ev[3].second["present"], value::array());
}

TEST_F(PresenceFixture, maintenance_fires_present_every_loop_interval) {
  const auto t0 = master::sys_clock::now();
  core->maintenance(t0);
  core->maintenance(t0 + std::chrono::seconds(5));
  core->maintenance(t0 + std::chrono::seconds(61));
  auto ev = with_prefix("salt/presence/present");
  EXPECT_EQ(ev.size(), 2u);
}

struct RefreshFixture : EventFixture {
  void customize(config::master_config& c) override {
    c.minion_data_cache = true;
    c.raw["minion_data_cache_events"] = true;
  }
};

TEST_F(RefreshFixture, pillar_request_fires_minion_refresh) {
  login(m1);
  seen.clear();
  // (the reply is send_private: not opened here)
  core->handle_request(
      m1.aes_body(value{{"cmd", "_pillar"}, {"grains", value{{"os", "x"}}}, {"saltenv", "base"}, {"ver", "2"}},
                  kNonce, m1.session),
      "test");
  auto ev = with_prefix("minion/refresh/m1");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].second["Minion data cache refresh"], "m1");
}

TEST(ClusterEvents, forwarded_tags) {
  EXPECT_TRUE(master::cluster_node::forwarded_tag("salt/job/1/new"));
  EXPECT_TRUE(master::cluster_node::forwarded_tag("salt/auth"));
  EXPECT_TRUE(master::cluster_node::forwarded_tag("my/custom"));
  EXPECT_FALSE(master::cluster_node::forwarded_tag("key"));
  EXPECT_FALSE(master::cluster_node::forwarded_tag("salt/presence/present"));
}

TEST_F(EventFixture, peer_event_is_fired_with_origin_peer_and_refused_when_origin_lies) {
  int local = 0;
  core->hub().subscribe_local([&](const std::string&, const value&) { ++local; });
  seen.clear();
  value body{{"tag", "from/peer"}, {"data", value{{"a", 1}, {"_stamp", "s"}}}, {"origin", "m2"}};
  core->handle_peer("m2", "event", body);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "from/peer");
  EXPECT_EQ(seen[0].second["_stamp"], "s");
  EXPECT_EQ(local, 0);
  // origin is not the sender, data not a map, no tag: refused
  core->handle_peer("m3", "event", body);
  core->handle_peer("m2", "event", value{{"tag", "x"}, {"data", 5}, {"origin", "m2"}});
  core->handle_peer("m2", "event", value{{"data", value::object()}, {"origin", "m2"}});
  EXPECT_EQ(seen.size(), 1u);
}

// A batch sent again after a link reconnect carries the same event ids: fired once.
TEST_F(EventFixture, peer_event_sent_twice_is_fired_once) {
  seen.clear();
  value body{{"tag", "dup/t"}, {"data", value{{"a", 1}}}, {"origin", "m2"}, {"eid", "boot-7"}};
  core->handle_peer("m2", "event", body);
  core->handle_peer("m2", "event", body);
  body["eid"] = "boot-8";
  core->handle_peer("m2", "event", body);
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(core->cluster_status()["events"]["duplicates"], 1);
}

}  // namespace
}  // namespace sylvite::test
