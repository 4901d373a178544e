// presence_table (master/presence.hpp): last seen per minion, the peers' reports, the
// merged view salt-run sylvite.minions prints, and the ISO time format.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "master/presence.hpp"

using namespace sylvite::master;

TEST(Presence, seen_keeps_the_latest_time) {
  presence_table t;
  EXPECT_EQ(t.last_seen("m1"), 0);
  t.seen("m1", 100);
  t.seen("m1", 50);  // an older stamp (another thread was late) never moves it back
  EXPECT_EQ(t.last_seen("m1"), 100);
  t.seen("m1", 200);
  EXPECT_EQ(t.last_seen("m1"), 200);
  t.seen("", 300);  // nothing for an empty id
  EXPECT_EQ(t.size(), 1u);
}

TEST(Presence, changes_only_when_tracked) {
  presence_table single;  // a single master sends nothing: no change set kept
  single.seen("m1", 1);
  EXPECT_TRUE(single.take_changes({}).empty());

  presence_table t(true);
  t.seen("m1", 10);
  t.seen("m2", 20);
  t.seen("m1", 30);
  auto c = t.take_changes([](const std::string& id) { return id == "m2"; });
  ASSERT_EQ(c.size(), 2u);
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.id < b.id; });
  EXPECT_EQ(c[0].id, "m1");
  EXPECT_EQ(c[0].last_ms, 30);
  EXPECT_FALSE(c[0].connected);
  EXPECT_TRUE(c[1].connected);
  EXPECT_TRUE(t.take_changes({}).empty());  // cleared
  t.seen("m2", 40);
  EXPECT_EQ(t.take_changes({}).size(), 1u);
}

TEST(Presence, snapshot_has_connected_ids_never_heard) {
  presence_table t;
  t.seen("m1", 10);
  auto s = t.snapshot({"m1", "m9"});
  std::sort(s.begin(), s.end(), [](auto& a, auto& b) { return a.id < b.id; });
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].connected);
  EXPECT_EQ(s[0].last_ms, 10);
  EXPECT_EQ(s[1].id, "m9");
  EXPECT_TRUE(s[1].connected);
  EXPECT_EQ(s[1].last_ms, 0);
}

TEST(Presence, view_merges_peers) {
  presence_table t(true);
  t.seen("m1", 100);
  t.seen("m2", 100);
  // m2 is connected to b, which heard it later than we did; c reports m3.
  t.apply_peer("b", true, {{"m2", true, 500}, {"m1", false, 50}}, 1000);
  t.apply_peer("c", true, {{"m3", true, 700}}, 1000);
  auto v = t.view("a", {"m1"}, 1500);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v["m1"].masters, std::vector<std::string>{"a"});
  EXPECT_EQ(v["m1"].last_ms, 100);
  EXPECT_EQ(v["m2"].masters, std::vector<std::string>{"b"});
  EXPECT_EQ(v["m2"].last_ms, 500);  // the max over the cluster
  EXPECT_EQ(v["m3"].masters, std::vector<std::string>{"c"});

  // A delta: m2 left b (its last seen moves on); a full report replaces.
  t.apply_peer("b", false, {{"m2", false, 900}}, 2000);
  v = t.view("a", {"m1"}, 2000);
  EXPECT_TRUE(v["m2"].masters.empty());
  EXPECT_EQ(v["m2"].last_ms, 900);
  t.apply_peer("c", true, {}, 2000);
  v = t.view("a", {}, 2000);
  EXPECT_FALSE(v.contains("m3"));

  // A peer silent for longer than stale_after holds no connection; times stay.
  t.apply_peer("c", true, {{"m3", true, 700}}, 2000);
  v = t.view("a", {}, 2000 + presence_table::k_stale_after_ms + 1);
  EXPECT_TRUE(v["m3"].masters.empty());
  EXPECT_EQ(v["m3"].last_ms, 700);
  t.forget_peer("c");
  v = t.view("a", {}, 2000);
  EXPECT_FALSE(v.contains("m3"));
  // A report claiming to be this master is ignored.
  t.apply_peer("a", true, {{"m7", true, 1}}, 2000);
  EXPECT_FALSE(t.view("a", {}, 2000).contains("m7"));
}

TEST(Presence, prune_keeps_accepted_ids) {
  presence_table t(true);
  t.seen("m1", 1);
  t.seen("gone", 1);
  t.apply_peer("b", true, {{"gone", true, 5}, {"m1", true, 5}}, 10);
  t.prune({"m1"});
  EXPECT_EQ(t.size(), 1u);
  auto v = t.view("a", {}, 10);
  EXPECT_FALSE(v.contains("gone"));
  EXPECT_EQ(v["m1"].masters, std::vector<std::string>{"b"});
  for (const auto& c : t.take_changes({})) EXPECT_NE(c.id, "gone");
}

TEST(Presence, concurrent_seen) {
  presence_table t(true);
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&t, k] {
      for (int i = 0; i < 2000; ++i) t.seen("m" + std::to_string(i % 50), k * 10000 + i);
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(t.size(), 50u);
  EXPECT_EQ(t.take_changes({}).size(), 50u);
}

TEST(Presence, iso_utc_ms) {
  EXPECT_EQ(iso_utc_ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(iso_utc_ms(1795811242123), "2026-11-27T20:27:22.123Z");
  EXPECT_GT(wall_ms(), 1700000000000);
}
