// Unit tests for master/cli_wait (job_wait): every rule W1..W7 and the edges between the
// phases, with injected time and no sockets.
#include <gtest/gtest.h>

#include "master/cli_wait.hpp"

namespace {

using namespace sylvite::master;
using sylvite::wire::value;
using kind = wait_event::kind;
using act = wait_action::kind;
using namespace std::chrono_literals;

const std::string J = "20240101010101010101";
const std::string F = "20240101010101010999";

wait_time at(std::int64_t ms) { return wait_time(wait_ms(ms)); }

struct fixture {
  job_wait w{wait_settings{J, 5000ms, 10000ms}};

  std::vector<wait_action> start(std::vector<std::string> minions, std::int64_t now = 0) {
    auto e = wait_event::make(kind::start, at(now));
    e.minions = std::move(minions);
    return w.resume(e);
  }
  std::vector<wait_action> ret(const std::string& id, std::int64_t now, value load = value{{"return", true}}) {
    auto e = wait_event::make(kind::return_arrived, at(now));
    e.id = id;
    e.load = std::move(load);
    return w.resume(e);
  }
  std::vector<wait_action> timer(std::int64_t now) { return w.resume(wait_event::make(kind::timer_fired, at(now))); }
  std::vector<wait_action> published(std::vector<std::string> reached, std::int64_t now, std::string jid = F) {
    auto e = wait_event::make(kind::find_job_published, at(now));
    e.jid = std::move(jid);
    e.minions = std::move(reached);
    return w.resume(e);
  }
  std::vector<wait_action> find_reply(const std::string& id, bool running, std::int64_t now, std::string jid = F) {
    auto e = wait_event::make(kind::find_job_reply, at(now));
    e.id = id;
    e.jid = std::move(jid);
    e.running = running;
    return w.resume(e);
  }
  // wait phase -> deadline -> find round with `asked` reached
  void to_find(std::vector<std::string> asked, std::int64_t now = 5000) {
    auto a = timer(now);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(a[0].type, act::publish_find_job);
    auto b = published(std::move(asked), now);
    ASSERT_EQ(w.state(), job_wait::phase::find);
  }
};

void expect_finish(const std::vector<wait_action>& a, std::vector<std::string> no_return) {
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back().type, act::finish);
  EXPECT_EQ(a.back().ids, no_return);
}

void expect_arm(const std::vector<wait_action>& a, std::int64_t ms) {
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back().type, act::arm_timer);
  EXPECT_EQ(a.back().at, at(ms));
}

TEST(CliWait, W1StartArmsTimeout) {
  fixture f;
  auto a = f.start({"a", "b"}, 100);
  ASSERT_EQ(a.size(), 1u);
  expect_arm(a, 5100);
  EXPECT_EQ(f.w.state(), job_wait::phase::wait);
  EXPECT_EQ(f.w.missing(), (std::vector<std::string>{"a", "b"}));
}

TEST(CliWait, W1StartWithoutMinionsFinishes) {
  fixture f;
  expect_finish(f.start({}), {});
  EXPECT_TRUE(f.w.finished());
}

TEST(CliWait, EventsBeforeStartAreIgnored) {
  fixture f;
  EXPECT_TRUE(f.ret("a", 0).empty());
  EXPECT_TRUE(f.timer(99999).empty());
  EXPECT_EQ(f.w.state(), job_wait::phase::idle);
  f.start({"a"});
  auto a = f.start({"b"});  // a second start changes nothing
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(f.w.missing(), std::vector<std::string>{"a"});
}

TEST(CliWait, W2ReturnsPushedOnceThenFinish) {
  fixture f;
  f.start({"a", "b"});
  auto a = f.ret("a", 10, value{{"return", 1}, {"jid", J}});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].type, act::push_return);
  EXPECT_EQ(a[0].id, "a");
  EXPECT_EQ(a[0].load, (value{{"return", 1}, {"jid", J}}));
  EXPECT_TRUE(f.ret("a", 20).empty());  // duplicate dropped
  auto b = f.ret("b", 30);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].type, act::push_return);
  expect_finish(b, {});
  EXPECT_TRUE(f.w.finished());
}

TEST(CliWait, W2UnexpectedMinionPushedButNotAwaited) {
  fixture f;
  f.start({"a"});
  auto a = f.ret("x", 10);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].type, act::push_return);
  EXPECT_FALSE(f.w.finished());
  expect_finish(f.ret("a", 20), {});
}

TEST(CliWait, ReturnWithoutIdIgnored) {
  fixture f;
  f.start({"a"});
  EXPECT_TRUE(f.ret("", 1).empty());
}

TEST(CliWait, StaleTimerIgnored) {
  fixture f;
  f.start({"a"}, 0);
  EXPECT_TRUE(f.timer(4999).empty());
  EXPECT_EQ(f.w.state(), job_wait::phase::wait);
}

TEST(CliWait, W3DeadlineAsksMissingMinions) {
  fixture f;
  f.start({"a", "b", "c"});
  f.ret("b", 10);
  auto a = f.timer(5000);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].type, act::publish_find_job);
  EXPECT_EQ(a[0].ids, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(f.w.state(), job_wait::phase::asking);
  EXPECT_TRUE(f.timer(6000).empty());  // no timer while asking
}

TEST(CliWait, W4NobodyReachedFinishes) {
  fixture f;
  f.start({"a"});
  f.timer(5000);
  expect_finish(f.published({}, 5000), {"a"});
}

TEST(CliWait, W4PublishFailedFinishes) {
  fixture f;
  f.start({"a"});
  f.timer(5000);
  expect_finish(f.published({"a"}, 5000, ""), {"a"});
}

TEST(CliWait, W4FindRoundArmsGatherJobTimeout) {
  fixture f;
  f.start({"a", "b"});
  f.timer(5000);
  auto a = f.published({"a", "b"}, 5001);
  expect_arm(a, 15001);
  EXPECT_EQ(f.w.state(), job_wait::phase::find);
  EXPECT_EQ(f.w.find_jid(), F);
  EXPECT_EQ(f.w.pending(), (std::set<std::string>{"a", "b"}));
}

TEST(CliWait, W4ReturnedWhileAskingNotPending) {
  fixture f;
  f.start({"a", "b"});
  f.timer(5000);
  f.ret("a", 5000);
  f.published({"a", "b"}, 5001);
  EXPECT_EQ(f.w.pending(), std::set<std::string>{"b"});
}

TEST(CliWait, PublishedOutsideAskingIgnored) {
  fixture f;
  f.start({"a"});
  EXPECT_TRUE(f.published({"a"}, 10).empty());
  EXPECT_EQ(f.w.state(), job_wait::phase::wait);
}

TEST(CliWait, W5W6AllNotRunningFinishes) {
  fixture f;
  f.start({"a", "b"});
  f.to_find({"a", "b"});
  EXPECT_TRUE(f.find_reply("a", false, 5100).empty());
  expect_finish(f.find_reply("b", false, 5200), {"a", "b"});
}

TEST(CliWait, W5W6RunningKeepsWaiting) {
  fixture f;
  f.start({"a", "b"});
  f.to_find({"a", "b"});
  f.find_reply("a", true, 5100);
  EXPECT_EQ(f.w.running(), std::set<std::string>{"a"});
  auto a = f.find_reply("b", false, 5200);
  expect_arm(a, 10200);  // back to waiting `timeout`
  EXPECT_EQ(f.w.state(), job_wait::phase::wait);
  // the next deadline asks again, both still missing
  auto b = f.timer(10200);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].ids, (std::vector<std::string>{"a", "b"}));
}

TEST(CliWait, W5OldFindJidIgnored) {
  fixture f;
  f.start({"a"});
  f.to_find({"a"});
  EXPECT_TRUE(f.find_reply("a", true, 5100, "old").empty());
  EXPECT_EQ(f.w.pending(), std::set<std::string>{"a"});
  EXPECT_TRUE(f.find_reply("", true, 5100).empty());
}

TEST(CliWait, FindReplyOutsideFindIgnored) {
  fixture f;
  f.start({"a"});
  EXPECT_TRUE(f.find_reply("a", true, 10).empty());
  EXPECT_TRUE(f.w.running().empty());
}

TEST(CliWait, W6DeadlineWithRunningGoesBackToWait) {
  fixture f;
  f.start({"a", "b"});
  f.to_find({"a", "b"}, 5000);
  f.find_reply("a", true, 5100);  // b never answers
  EXPECT_TRUE(f.timer(14999).empty());
  auto a = f.timer(15000);
  expect_arm(a, 20000);
  EXPECT_EQ(f.w.state(), job_wait::phase::wait);
  EXPECT_TRUE(f.w.pending().empty());
}

TEST(CliWait, W6DeadlineWithoutRunningFinishes) {
  fixture f;
  f.start({"a", "b"});
  f.to_find({"a", "b"}, 5000);
  f.find_reply("a", false, 5100);
  expect_finish(f.timer(15000), {"a", "b"});
}

TEST(CliWait, W6RunningMinionThatReturnedDoesNotKeepWaiting) {
  fixture f;
  f.start({"a", "b"});
  f.to_find({"a", "b"}, 5000);
  f.find_reply("a", true, 5100);
  f.ret("a", 5200);  // a finished after all
  EXPECT_TRUE(f.w.running().empty());
  expect_finish(f.timer(15000), {"b"});
}

TEST(CliWait, ReturnOfLastPendingEndsRound) {
  fixture f;
  f.start({"a", "b", "c"});
  f.to_find({"a", "b"}, 5000);  // c is not connected: not asked
  f.find_reply("a", true, 5100);
  auto a = f.ret("b", 5200);  // b answers with its return: nobody pending any more
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].type, act::push_return);
  expect_arm(a, 10200);
}

TEST(CliWait, AllReturnedDuringFindFinishes) {
  fixture f;
  f.start({"a"});
  f.to_find({"a"});
  auto a = f.ret("a", 6000);
  ASSERT_EQ(a.size(), 2u);
  expect_finish(a, {});
}

TEST(CliWait, W7ClientGoneFinishesInEveryPhase) {
  for (int ph = 0; ph < 4; ++ph) {
    fixture f;
    f.start({"a"});
    if (ph >= 1) f.timer(5000);                 // asking
    if (ph >= 2) f.published({"a"}, 5000);      // find
    if (ph >= 3) f.find_reply("a", true, 5100);  // back to wait
    expect_finish(f.w.resume(wait_event::make(kind::client_gone, at(5200))), {"a"});
    EXPECT_TRUE(f.w.finished());
  }
}

TEST(CliWait, W7StoppingFinishes) {
  fixture f;
  f.start({"a", "b"});
  f.ret("a", 1);
  expect_finish(f.w.resume(wait_event::make(kind::stopping, at(2))), {"b"});
}

TEST(CliWait, NothingAfterFinish) {
  fixture f;
  f.start({"a"});
  f.w.resume(wait_event::make(kind::client_gone, at(1)));
  EXPECT_TRUE(f.ret("a", 2).empty());
  EXPECT_TRUE(f.timer(99999).empty());
  EXPECT_TRUE(f.w.resume(wait_event::make(kind::stopping, at(3))).empty());
}

TEST(CliWait, GatherJobTimeoutAtLeastOneSecond) {
  job_wait w(wait_settings{J, 0ms, 0ms});
  auto s = wait_event::make(kind::start, at(0));
  s.minions = {"a"};
  expect_arm(w.resume(s), 0);  // timeout 0: ask at once
  w.resume(wait_event::make(kind::timer_fired, at(0)));
  auto p = wait_event::make(kind::find_job_published, at(0));
  p.jid = F;
  p.minions = {"a"};
  expect_arm(w.resume(p), 1000);
}

TEST(CliWait, FindJobRunning) {
  EXPECT_TRUE(find_job_running(value{{"return", value{{"jid", J}, {"fun", "test.sleep"}}}}));
  EXPECT_FALSE(find_job_running(value{{"return", value::object()}}));
  EXPECT_FALSE(find_job_running(value{{"return", "x"}}));
  EXPECT_FALSE(find_job_running(value::object()));
  EXPECT_FALSE(find_job_running(value::array()));
}

}  // namespace
