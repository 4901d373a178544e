// replay_guard (issue 14 item 7): time window on a sylvite master's serial, the minion's
// start as a floor, jid memory bounded by time, rate-limited log lines. Sans-I/O: the
// wall clock is passed in.
#include <gtest/gtest.h>

#include <string>

#include "minion/replay_guard.hpp"

namespace sylvite::test {
namespace {

using minion::replay_guard;
using minion::replay_settings;
using minion::replay_verdict;

constexpr std::int64_t s = 1'000'000;             // one second in us
constexpr std::int64_t t0 = 1'700'000'000 * s;    // the minion started here

replay_guard make(std::int64_t window_s = 600, std::size_t hwm = 100) {
  return replay_guard(replay_settings{window_s * s, t0, hwm});
}

TEST(ReplayGuard, fresh_time_serial_passes) {
  auto g = make();
  EXPECT_EQ(g.check_time(t0 + 10 * s, t0 + 10 * s + 3000).verdict, replay_verdict::ok);
  // A little in the future (master clock slightly ahead) is fine too.
  EXPECT_EQ(g.check_time(t0 + 20 * s, t0 + 19 * s).verdict, replay_verdict::ok);
}

TEST(ReplayGuard, older_than_the_window_is_refused_with_the_age_in_the_reason) {
  auto g = make(600);
  const auto made = t0 + 10 * s;
  EXPECT_EQ(g.check_time(made, made + 600 * s).verdict, replay_verdict::ok);  // exactly the window
  auto r = g.check_time(made, made + 600 * s + 1);
  EXPECT_EQ(r.verdict, replay_verdict::too_old);
  EXPECT_NE(r.reason.find("600.0 s ago"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("publish_replay_window (600 s)"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("NTP"), std::string::npos);
  EXPECT_EQ(r.log_count, 1u);
}

TEST(ReplayGuard, further_in_the_future_than_the_window_is_refused) {
  auto g = make(60);
  auto r = g.check_time(t0 + 200 * s, t0 + 100 * s);
  EXPECT_EQ(r.verdict, replay_verdict::from_future);
  EXPECT_NE(r.reason.find("100.0 s in the future"), std::string::npos) << r.reason;
}

TEST(ReplayGuard, made_before_the_minion_started_is_refused) {
  // Inside the window, but the jid memory of before a restart is gone: the start is the floor.
  auto g = make(600);
  auto r = g.check_time(t0 - 2 * s, t0 + 1 * s);
  EXPECT_EQ(r.verdict, replay_verdict::before_start);
  EXPECT_NE(r.reason.find("2.000 s before this minion started"), std::string::npos) << r.reason;
}

TEST(ReplayGuard, salt_counter_serials_and_missing_serials_get_no_time_check) {
  auto g = make(1);
  EXPECT_EQ(g.check_time(1, t0 + 10'000 * s).verdict, replay_verdict::ok);
  EXPECT_EQ(g.check_time(123456, t0 + 10'000 * s).verdict, replay_verdict::ok);
  EXPECT_EQ(g.check_time(std::nullopt, t0 + 10'000 * s).verdict, replay_verdict::ok);
}

TEST(ReplayGuard, window_zero_turns_the_time_checks_off) {
  auto g = make(0);
  EXPECT_EQ(g.check_time(t0 - 1000 * s, t0 + 1000 * s).verdict, replay_verdict::ok);
}

TEST(ReplayGuard, a_jid_is_refused_again_for_the_whole_window_then_forgotten) {
  auto g = make(600, 2);
  EXPECT_EQ(g.check_jid("j1", t0).verdict, replay_verdict::ok);
  // Far more than minion_jid_queue_hwm (2) other jids inside the window: j1 is still known.
  for (int i = 0; i < 500; ++i) EXPECT_EQ(g.check_jid("x" + std::to_string(i), t0 + i * 1000).verdict,
                                          replay_verdict::ok);
  auto r = g.check_jid("j1", t0 + 599 * s);
  EXPECT_EQ(r.verdict, replay_verdict::duplicate_jid);
  EXPECT_NE(r.reason.find("j1"), std::string::npos);
  // Past the window the memory shrinks back to the hwm.
  EXPECT_EQ(g.check_jid("late", t0 + 700 * s).verdict, replay_verdict::ok);
  EXPECT_EQ(g.jids_remembered(), 2u);
  EXPECT_EQ(g.check_jid("j1", t0 + 701 * s).verdict, replay_verdict::ok);
}

TEST(ReplayGuard, without_a_window_the_memory_is_salts_hwm) {
  auto g = make(0, 3);
  for (auto j : {"a", "b", "c", "d"}) EXPECT_EQ(g.check_jid(j, t0).verdict, replay_verdict::ok);
  EXPECT_EQ(g.jids_remembered(), 3u);
  EXPECT_EQ(g.check_jid("a", t0).verdict, replay_verdict::ok);  // evicted: Salt's behaviour
  EXPECT_EQ(g.check_jid("d", t0).verdict, replay_verdict::duplicate_jid);
}

TEST(ReplayGuard, memory_is_capped) {
  auto g = make(600, 1);
  for (std::size_t i = 0; i < replay_guard::k_max_jids + 10; ++i)
    g.check_jid(std::to_string(i), t0 + static_cast<std::int64_t>(i));
  EXPECT_EQ(g.jids_remembered(), replay_guard::k_max_jids);
}

TEST(ReplayGuard, refusals_are_logged_once_per_interval_with_a_count_per_kind) {
  auto g = make(600);
  g.check_jid("j", t0);
  EXPECT_EQ(g.check_jid("j", t0 + 1).log_count, 1u);
  for (int i = 2; i < 12; ++i) EXPECT_EQ(g.check_jid("j", t0 + i).log_count, 0u);
  // Another kind has its own limiter.
  EXPECT_EQ(g.check_time(t0 - 1000 * s, t0 + 5).log_count, 1u);
  // After the interval, one line standing for everything since.
  auto r = g.check_jid("j", t0 + 1 + replay_guard::k_log_interval_us);
  EXPECT_EQ(r.log_count, 11u);
  EXPECT_EQ(g.refused(), 13u);
  // Refusals decided elsewhere: one limiter per reason.
  EXPECT_EQ(g.log_hit(t0 + 2, "no signature"), 1u);
  EXPECT_EQ(g.log_hit(t0 + 3, "no signature"), 0u);
  EXPECT_EQ(g.log_hit(t0 + 4, "bad signature"), 1u);
  // Reasons past k_max_log_kinds share one limiter: the map stays small.
  for (std::size_t i = 0; i < 2 * replay_guard::k_max_log_kinds; ++i) g.log_hit(t0 + 5, "r" + std::to_string(i));
  EXPECT_EQ(g.log_hit(t0 + 6, "yet another"), 0u);
}

}  // namespace
}  // namespace sylvite::test
