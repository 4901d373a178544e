// publish_intake: a decoded publish's way to the job pool (minion/intake.hpp).
#include <gtest/gtest.h>

#include "minion/intake.hpp"

namespace sylvite::minion {
namespace {

constexpr std::int64_t k_now = 1'700'000'000'000'000;

publish_decoded job(const std::string& jid, const std::string& tgt = "*", std::optional<std::int64_t> serial = {}) {
  publish_decoded d;
  d.verdict = publish_verdict::ok;
  d.load = wire::value::object();
  d.load["tgt"] = tgt;
  d.load["jid"] = jid;
  d.load["fun"] = "test.ping";
  d.load["arg"] = wire::value::array();
  d.serial = serial;
  return d;
}

bool logged(const intake_result& r, mm_log_level l, const std::string& part) {
  for (const auto& [level, text] : r.logs)
    if (level == l && text.find(part) != std::string::npos) return true;
  return false;
}

struct PublishIntake : ::testing::Test {
  wire::value grains = wire::value::object();
  wire::value pillar = wire::value::object();
  target_facts me{"web1", &grains, &pillar};
  replay_settings rs{600'000'000, k_now - 1'000'000, 100};
};

TEST_F(PublishIntake, a_job_for_this_minion_runs_annotated) {
  publish_intake in(rs, true);
  auto r = in.admit("m1", job("20240101000000000001"), me, k_now);
  ASSERT_TRUE(r.run);
  EXPECT_EQ(r.jid, "20240101000000000001");
  EXPECT_EQ(r.load["minion_is_target"], true);
  EXPECT_EQ(r.load["pure_resource_target"], false);
  EXPECT_TRUE(r.load["resource_targets"].is_array());
  EXPECT_TRUE(logged(r, mm_log_level::info, "Executing command test.ping with jid 20240101000000000001"));
}

TEST_F(PublishIntake, the_user_is_named) {
  publish_intake in(rs, true);
  auto d = job("20240101000000000002");
  d.load["user"] = "root";
  auto r = in.admit("m1", std::move(d), me, k_now);
  EXPECT_TRUE(logged(r, mm_log_level::info, "User root Executing command test.ping"));
}

TEST_F(PublishIntake, not_targeted_is_a_debug_line) {
  publish_intake in(rs, true);
  auto r = in.admit("m1", job("20240101000000000003", "db*"), me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::debug, "Publish not targeted at this minion"));
}

TEST_F(PublishIntake, a_repeated_jid_is_a_replay_with_one_master) {
  publish_intake in(rs, true);
  EXPECT_TRUE(in.admit("m1", job("20240101000000000004"), me, k_now).run);
  auto r = in.admit("m1", job("20240101000000000004"), me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::warning, "Refused a publish from master m1"));
}

TEST_F(PublishIntake, a_repeated_jid_is_info_with_several_masters) {
  publish_intake in(rs, false);
  EXPECT_TRUE(in.admit("m1", job("20240101000000000005"), me, k_now).run);
  auto r = in.admit("m2", job("20240101000000000005"), me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::info, "Refused a publish from master m2"));
}

TEST_F(PublishIntake, outside_the_replay_window_is_refused) {
  publish_intake in(rs, true);
  auto r = in.admit("m1", job("20240101000000000006", "*", k_now - 700'000'000), me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::warning, "Refused a publish (jid 20240101000000000006) from master m1"));
}

TEST_F(PublishIntake, dropped_publishes_are_logged_rate_limited) {
  publish_intake in(rs, true);
  publish_decoded d;
  d.verdict = publish_verdict::drop;
  d.reason = "bad signature";
  auto r = in.admit("m1", d, me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::warning, "Discarding publish from m1: bad signature"));
  EXPECT_TRUE(in.admit("m1", d, me, k_now + 1).logs.empty());
  d.verdict = publish_verdict::ignore;
  EXPECT_TRUE(in.admit("m1", d, me, k_now + 2).logs.empty());
}

TEST_F(PublishIntake, multi_function_jobs_are_refused) {
  publish_intake in(rs, true);
  auto d = job("20240101000000000007");
  d.load["fun"] = wire::value::array({"test.ping", "test.echo"});
  auto r = in.admit("m1", std::move(d), me, k_now);
  EXPECT_FALSE(r.run);
  EXPECT_TRUE(logged(r, mm_log_level::error, "Job 20240101000000000007:"));
}

}  // namespace
}  // namespace sylvite::minion
