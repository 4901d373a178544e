// peer_link: every transition of the outbound peer link machine (peer_link.hpp rules L1-L7),
// without sockets or sleeps: events in, actions out; the back-off jitter is seeded.
#include <gtest/gtest.h>

#include <algorithm>

#include "cluster/peer_link.hpp"

using namespace sylvite;
using namespace sylvite::cluster;
using std::chrono::milliseconds;
using ak = link_action::kind;
using ek = link_event::kind;
using acts = std::vector<link_action>;

namespace {
link_settings settings(std::size_t batch = 256, std::size_t max_queue = 100000) {
  link_settings s;
  s.addr = "10.0.0.2:4520";
  s.self_id = "me";
  s.batch = batch;
  s.max_queue = max_queue;
  s.seed = 42;
  return s;
}

std::vector<ak> kinds(const acts& a) {
  std::vector<ak> k;
  for (const auto& x : a) k.push_back(x.type);
  return k;
}
bool waiting(ak k) { return k == ak::send_hello || k == ak::send_batch || k == ak::arm_timer || k == ak::finish; }
// A driver event yields exactly one waiting action, last.
void expect_one_wait(const acts& a) {
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(waiting(a.back().type));
  EXPECT_EQ(std::count_if(a.begin(), a.end(), [](const link_action& x) { return waiting(x.type); }), 1);
}
const link_action* find(const acts& a, ak k) {
  for (const auto& x : a)
    if (x.type == k) return &x;
  return nullptr;
}
std::vector<std::string> logs(const acts& a, link_log_level l) {
  std::vector<std::string> out;
  for (const auto& x : a)
    if (x.type == ak::log && x.level == l) out.push_back(x.text);
  return out;
}
peer_message pm(int i) { return peer_message{"publish", wire::value{{"n", i}}}; }

// The driver's side: feed an event, check the invariant, return the actions.
struct rig {
  peer_link l;
  explicit rig(link_settings s = settings()) : l(std::move(s)) {}
  acts feed(const link_event& e) {
    auto a = l.resume(e);
    expect_one_wait(a);
    return a;
  }
  acts start() { return feed(link_event::make(ek::start)); }
  acts fail(std::string why = "Connection refused") { return feed(link_event::make(ek::connect_failed, why)); }
  acts refuse(std::string why) { return feed(link_event::make(ek::welcome_refused, why)); }
  acts welcome(std::string peer = "b", std::string link = "L1", bool dup = false) {
    return feed(link_event::welcome(peer, link, dup));
  }
  acts ack(std::uint64_t seq) { return feed(link_event::ack(seq)); }
  acts ack_failed(std::string why) { return feed(link_event::make(ek::ack_failed, why)); }
  acts timer() { return feed(link_event::make(ek::timer_fired)); }
  acts external(ek k) {
    auto a = l.resume(link_event::make(k));
    for (const auto& x : a) EXPECT_FALSE(waiting(x.type));
    return a;
  }
  bool offer(int i) { return l.offer(pm(i)).queued; }
  acts up(std::string peer = "b") {
    start();
    return welcome(peer);
  }
};
}  // namespace

// L1
TEST(PeerLink, start_handshakes_at_once) {
  rig r;
  EXPECT_EQ(r.l.status(), link_status::connecting);
  EXPECT_EQ(kinds(r.start()), (std::vector<ak>{ak::connect, ak::send_hello}));
  EXPECT_EQ(r.l.status(), link_status::connecting);
  EXPECT_TRUE(r.l.sendable());
  EXPECT_FALSE(r.l.linked());
}

// L2: log once per reason, close, jittered back-off doubling to the cap.
TEST(PeerLink, failed_handshake_backs_off_with_growth_and_cap) {
  rig r;
  r.start();
  auto a = r.fail("Connection refused");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::arm_timer}));
  EXPECT_EQ(logs(a, link_log_level::warning),
            std::vector<std::string>{"cluster link to 10.0.0.2:4520 failed: Connection refused"});
  EXPECT_EQ(r.l.status(), link_status::backoff);
  EXPECT_EQ(r.l.last_error(), "Connection refused");
  const long expect_b[] = {500, 1000, 2000, 4000, 8000, 10000, 10000, 10000};
  for (int i = 0; i < 8; ++i) {
    if (i > 0) {
      EXPECT_EQ(kinds(r.timer()), (std::vector<ak>{ak::connect, ak::send_hello}));  // the wait ends: a new attempt
      EXPECT_EQ(r.l.status(), link_status::backoff);  // shown until a welcome, as before
      a = r.fail("Connection refused");
      EXPECT_TRUE(logs(a, link_log_level::warning).empty());  // same reason: logged once
    }
    EXPECT_EQ(r.l.backoff(), milliseconds(expect_b[i]));
    const auto d = a.back().delay;
    EXPECT_GE(d, milliseconds(expect_b[i] / 2)) << i;
    EXPECT_LE(d, milliseconds(expect_b[i])) << i;
  }
  // Another reason is logged.
  r.timer();
  a = r.fail("Connection timed out");
  EXPECT_EQ(logs(a, link_log_level::warning).size(), 1u);
  EXPECT_EQ(r.l.backoff(), milliseconds(10000));
}

TEST(PeerLink, backoff_jitter_is_seeded) {
  rig a, b;
  a.start();
  b.start();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(a.fail().back().delay, b.fail().back().delay);
    a.timer();
    b.timer();
  }
}

// L2: a refused welcome is a failed handshake too.
TEST(PeerLink, refused_handshake_backs_off) {
  rig r;
  r.start();
  auto a = r.refuse("refused: another cluster_id");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::arm_timer}));
  EXPECT_EQ(logs(a, link_log_level::warning),
            std::vector<std::string>{"cluster link to 10.0.0.2:4520 failed: refused: another cluster_id"});
  EXPECT_EQ(r.l.status(), link_status::backoff);
  EXPECT_TRUE(r.l.sendable());  // messages wait for the link
  EXPECT_TRUE(r.offer(1));
}

// L2: the address is this master.
TEST(PeerLink, hello_from_myself_ends_the_link) {
  rig r;
  r.offer(1);
  r.start();
  auto a = r.refuse("refused: a hello from myself");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::finish}));
  EXPECT_EQ(logs(a, link_log_level::debug),
            std::vector<std::string>{"cluster peer address 10.0.0.2:4520 is this master; ignored"});
  EXPECT_EQ(r.l.status(), link_status::self);
  EXPECT_EQ(r.l.peer_id(), "me");
  EXPECT_EQ(r.l.queued(), 0u);
  EXPECT_FALSE(r.l.sendable());
  EXPECT_FALSE(r.offer(2));
  EXPECT_TRUE(r.external(ek::removed).empty());  // a self link is never removed
  EXPECT_EQ(kinds(r.timer()), std::vector<ak>{ak::finish});
}

// L3
TEST(PeerLink, welcome_brings_the_link_up) {
  rig r;
  r.start();
  r.fail("Connection refused");
  r.timer();
  auto a = r.welcome("b", "L1");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::report_up, ak::arm_timer}));
  EXPECT_EQ(logs(a, link_log_level::info), std::vector<std::string>{"cluster link to b (10.0.0.2:4520) is up"});
  EXPECT_EQ(find(a, ak::report_up)->peer_id, "b");
  EXPECT_EQ(a.back().delay, milliseconds(60000));  // idle: nothing queued
  EXPECT_EQ(r.l.status(), link_status::up);
  EXPECT_EQ(r.l.peer_id(), "b");
  EXPECT_EQ(r.l.last_error(), "");
  EXPECT_EQ(r.l.backoff(), milliseconds(0));
  EXPECT_TRUE(r.l.linked());
  EXPECT_EQ(r.l.seq(), 1u);
  // Idle wait over, still nothing: wait again.
  EXPECT_EQ(kinds(r.timer()), std::vector<ak>{ak::arm_timer});
}

TEST(PeerLink, welcome_sends_what_was_queued) {
  rig r;
  r.start();
  EXPECT_TRUE(r.offer(1));
  EXPECT_TRUE(r.offer(2));
  auto a = r.welcome("b", "L1");
  ASSERT_EQ(a.back().type, ak::send_batch);
  EXPECT_EQ(a.back().link_id, "L1");
  EXPECT_EQ(a.back().seq, 1u);
  ASSERT_EQ(a.back().batch.size(), 2u);
  EXPECT_EQ(a.back().batch[0].body["n"], 1);
  EXPECT_EQ(a.back().batch[1].body["n"], 2);
}

// L3: a back-off after the link was up starts again from the initial value.
TEST(PeerLink, welcome_resets_the_backoff) {
  rig r;
  r.start();
  for (int i = 0; i < 4; ++i) {
    r.fail();
    r.timer();
  }
  EXPECT_EQ(r.l.backoff(), milliseconds(4000));
  r.welcome();
  r.timer();  // idle
  r.offer(1);
  r.timer();  // woken: sends
  r.ack_failed("unknown link");
  r.fail();
  EXPECT_EQ(r.l.backoff(), milliseconds(500));
}

// L3: another address of a peer already linked.
TEST(PeerLink, duplicate_welcome_hands_the_queue_over) {
  rig r, other;
  other.up("b");
  EXPECT_EQ(kinds(other.timer()), std::vector<ak>{ak::arm_timer});
  r.start();
  r.offer(1);
  r.offer(2);
  auto a = r.welcome("b", "L2", true);
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::hand_over, ak::log, ak::close, ak::finish}));
  EXPECT_EQ(find(a, ak::hand_over)->peer_id, "b");
  EXPECT_EQ(logs(a, link_log_level::debug),
            std::vector<std::string>{"cluster peer b at 10.0.0.2:4520 is already linked at another address"});
  EXPECT_EQ(r.l.status(), link_status::duplicate);
  EXPECT_FALSE(r.l.sendable());
  EXPECT_FALSE(r.offer(3));
  EXPECT_TRUE(r.l.peer_id().empty());  // as before: a duplicate link never names its peer
  auto q = r.l.take_queue();
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(r.l.queued(), 0u);
  // The other link takes them (woken: it was idle) and sends them in order.
  EXPECT_EQ(kinds(other.l.adopt(std::move(q))), std::vector<ak>{ak::wake});
  EXPECT_EQ(other.l.queued(), 2u);
  auto s = other.timer();
  ASSERT_EQ(s.back().type, ak::send_batch);
  EXPECT_EQ(s.back().batch.size(), 2u);
}

// L4: a batch holds at most `batch` messages; each ack sends the next one at once.
TEST(PeerLink, batches_are_limited_and_acknowledged_in_order) {
  rig r(settings(3));
  r.start();
  for (int i = 0; i < 7; ++i) r.offer(i);
  auto a = r.welcome();
  ASSERT_EQ(a.back().type, ak::send_batch);
  EXPECT_EQ(a.back().seq, 1u);
  ASSERT_EQ(a.back().batch.size(), 3u);
  EXPECT_EQ(a.back().batch[0].body["n"], 0);
  EXPECT_TRUE(r.offer(7));  // while a batch is out: queued, no wake (the ack sends it)
  EXPECT_TRUE(r.l.offer(pm(8)).actions.empty());
  a = r.ack(1);
  EXPECT_EQ(kinds(a), std::vector<ak>{ak::send_batch});
  EXPECT_EQ(a.back().seq, 2u);
  EXPECT_EQ(a.back().batch[0].body["n"], 3);
  EXPECT_EQ(r.l.sent(), 3u);
  EXPECT_EQ(r.l.queued(), 6u);
  a = r.ack(2);
  EXPECT_EQ(a.back().seq, 3u);
  EXPECT_EQ(a.back().batch.size(), 3u);
  EXPECT_EQ(a.back().batch[2].body["n"], 8);
  a = r.ack(3);
  EXPECT_EQ(kinds(a), std::vector<ak>{ak::arm_timer});  // drained: idle
  EXPECT_EQ(r.l.sent(), 9u);
  EXPECT_EQ(r.l.queued(), 0u);
  EXPECT_EQ(r.l.seq(), 4u);
  // A message while idle wakes the driver; the wait ends and it goes out.
  auto o = r.l.offer(pm(9));
  EXPECT_TRUE(o.queued);
  EXPECT_EQ(kinds(o.actions), std::vector<ak>{ak::wake});
  a = r.timer();
  ASSERT_EQ(a.back().type, ak::send_batch);
  EXPECT_EQ(a.back().seq, 4u);
}

// L4: an ack for another seq is a failure (the link is out of step).
TEST(PeerLink, ack_of_another_seq_reconnects) {
  rig r;
  r.start();
  r.offer(1);
  r.welcome();
  auto a = r.ack(5);
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::connect, ak::send_hello}));
  EXPECT_EQ(r.l.last_error(), "ack seq mismatch");
  EXPECT_EQ(r.l.queued(), 1u);
  EXPECT_EQ(r.l.sent(), 0u);
}

// L4: "unknown link" (the peer restarted): a new handshake at once, the batch sent again
// with a new link and seq 1.
TEST(PeerLink, unknown_link_resets_the_link) {
  rig r(settings(2));
  r.start();
  r.offer(1);
  r.offer(2);
  r.offer(3);
  r.welcome("b", "L1");
  r.ack(1);  // 1, 2 acknowledged; 3 out with seq 2
  auto a = r.ack_failed("unknown link");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::connect, ak::send_hello}));  // no back-off
  EXPECT_EQ(logs(a, link_log_level::warning),
            std::vector<std::string>{"cluster link to b (10.0.0.2:4520): unknown link; reconnecting"});
  EXPECT_EQ(r.l.status(), link_status::connecting);
  EXPECT_FALSE(r.l.linked());
  EXPECT_EQ(r.l.queued(), 1u);
  a = r.welcome("b", "L2");
  ASSERT_EQ(a.back().type, ak::send_batch);
  EXPECT_EQ(a.back().link_id, "L2");
  EXPECT_EQ(a.back().seq, 1u);
  ASSERT_EQ(a.back().batch.size(), 1u);
  EXPECT_EQ(a.back().batch[0].body["n"], 3);
  // The same failure twice in a row is logged once.
  r.ack_failed("unknown link");
  r.welcome("b", "L3");  // clears last_error: the next one is logged again
  a = r.ack_failed("unknown link");
  EXPECT_EQ(logs(a, link_log_level::warning).size(), 1u);
  a = r.fail("Connection refused");  // then the handshake fails: back-off
  EXPECT_EQ(r.l.status(), link_status::backoff);
}

// L2: a message offered during the back-off wakes the wait (an immediate attempt), as the
// coroutine always did.
TEST(PeerLink, offer_during_backoff_wakes) {
  rig r;
  r.start();
  r.fail();
  auto o = r.l.offer(pm(1));
  EXPECT_TRUE(o.queued);
  EXPECT_EQ(kinds(o.actions), std::vector<ak>{ak::wake});
  EXPECT_EQ(kinds(r.timer()), (std::vector<ak>{ak::connect, ak::send_hello}));
  // During the handshake: queued, nothing to wake.
  o = r.l.offer(pm(2));
  EXPECT_TRUE(o.queued);
  EXPECT_TRUE(o.actions.empty());
}

// L5
TEST(PeerLink, full_queue_drops_and_warns_once_until_drained) {
  rig r(settings(256, 2));
  r.start();
  EXPECT_TRUE(r.offer(1));
  EXPECT_TRUE(r.offer(2));
  auto o = r.l.offer(pm(3));
  EXPECT_FALSE(o.queued);
  EXPECT_EQ(logs(o.actions, link_log_level::error),
            std::vector<std::string>{
                "cluster peer ? (10.0.0.2:4520): queue full (2 messages); dropping messages until it drains"});
  o = r.l.offer(pm(4));
  EXPECT_FALSE(o.queued);
  EXPECT_TRUE(o.actions.empty());  // warned already
  EXPECT_EQ(r.l.dropped(), 2u);
  EXPECT_EQ(r.l.queued(), 2u);
  r.welcome("b");
  o = r.l.offer(pm(5));  // still full while the batch is out
  EXPECT_TRUE(o.actions.empty());
  r.ack(1);  // drained: the next overflow warns again, with the peer's id
  EXPECT_TRUE(r.offer(6));
  EXPECT_TRUE(r.offer(7));
  o = r.l.offer(pm(8));
  EXPECT_EQ(logs(o.actions, link_log_level::error),
            std::vector<std::string>{
                "cluster peer b (10.0.0.2:4520): queue full (2 messages); dropping messages until it drains"});
  EXPECT_EQ(r.l.dropped(), 4u);
}

// L6
TEST(PeerLink, removed_drops_the_queue_and_waits_until_revived) {
  rig r;
  r.up("b");
  r.offer(1);
  auto a = r.timer();  // sending
  ASSERT_EQ(a.back().type, ak::send_batch);
  a = r.external(ek::removed);
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::close, ak::wake}));
  EXPECT_EQ(r.l.status(), link_status::removed);
  EXPECT_EQ(r.l.queued(), 0u);
  EXPECT_FALSE(r.l.sendable());
  EXPECT_FALSE(r.offer(2));
  EXPECT_FALSE(r.l.linked());
  EXPECT_TRUE(r.external(ek::removed).empty());  // once
  // The batch in flight fails (its connection was closed): logged, then 2 s rounds.
  a = r.ack_failed("Operation canceled");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::arm_timer}));
  EXPECT_EQ(a.back().delay, milliseconds(2000));
  EXPECT_EQ(r.l.status(), link_status::removed);
  a = r.timer();
  EXPECT_EQ(kinds(a), std::vector<ak>{ak::arm_timer});
  EXPECT_EQ(a.back().delay, milliseconds(2000));
  // Revived (joined again): woken, then a new handshake.
  EXPECT_EQ(kinds(r.external(ek::revived)), std::vector<ak>{ak::wake});
  EXPECT_EQ(kinds(r.timer()), (std::vector<ak>{ak::connect, ak::send_hello}));
}

TEST(PeerLink, revived_link_handshakes_again) {
  rig r;
  r.up("b");
  r.external(ek::removed);
  r.timer();  // the idle wait woken: removed rounds
  EXPECT_TRUE(r.external(ek::revived).size() == 1u);
  EXPECT_EQ(r.l.status(), link_status::connecting);
  EXPECT_TRUE(r.l.sendable());
  EXPECT_TRUE(r.offer(1));
  EXPECT_TRUE(r.external(ek::revived).empty());  // only a removed link is revived
  EXPECT_EQ(kinds(r.timer()), (std::vector<ak>{ak::connect, ak::send_hello}));
  auto a = r.welcome("b", "L9");
  ASSERT_EQ(a.back().type, ak::send_batch);
  EXPECT_EQ(a.back().seq, 1u);
}

TEST(PeerLink, removed_during_a_handshake) {
  rig r;
  r.start();
  r.external(ek::removed);
  // A welcome that was on its way does not bring the link back.
  auto a = r.welcome("b", "L1");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::close, ak::arm_timer}));
  EXPECT_EQ(r.l.status(), link_status::removed);
  EXPECT_EQ(a.back().delay, milliseconds(2000));
  // A failure that was on its way: logged, no back-off growth.
  rig q;
  q.start();
  q.external(ek::removed);
  a = q.fail("Operation canceled");
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::log, ak::close, ak::arm_timer}));
  EXPECT_EQ(a.back().delay, milliseconds(2000));
  EXPECT_EQ(q.l.backoff(), milliseconds(0));
  // An ack that was on its way after removal then revival: nothing popped, a new handshake.
  rig s;
  s.up("b");
  s.offer(1);
  s.timer();
  s.external(ek::removed);
  s.external(ek::revived);
  EXPECT_TRUE(s.offer(2));
  a = s.ack(1);
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::connect, ak::send_hello}));
  EXPECT_EQ(s.l.queued(), 1u);
}

// L7
TEST(PeerLink, stop_closes_and_finishes) {
  rig r;
  r.up("b");
  auto a = r.external(ek::stop);
  EXPECT_EQ(kinds(a), (std::vector<ak>{ak::close, ak::wake}));
  EXPECT_TRUE(r.l.stopped());
  EXPECT_FALSE(r.l.sendable());
  EXPECT_FALSE(r.offer(1));
  EXPECT_TRUE(r.external(ek::stop).empty());
  EXPECT_EQ(kinds(r.timer()), std::vector<ak>{ak::finish});
  EXPECT_EQ(kinds(r.timer()), std::vector<ak>{ak::finish});  // over stays over
  EXPECT_TRUE(r.external(ek::removed).empty());
}

TEST(PeerLink, stop_during_requests_and_before_start) {
  for (int where = 0; where < 4; ++where) {
    rig r;
    if (where == 0) {  // before the driver started
      r.external(ek::stop);
      EXPECT_EQ(kinds(r.start()), std::vector<ak>{ak::finish});
      continue;
    }
    r.start();
    if (where == 1) {  // hello in flight
      r.external(ek::stop);
      EXPECT_EQ(kinds(r.fail("Operation canceled")), std::vector<ak>{ak::finish});
      continue;
    }
    r.offer(1);
    r.welcome();
    r.external(ek::stop);  // batch in flight
    if (where == 2) EXPECT_EQ(kinds(r.ack_failed("Operation canceled")), std::vector<ak>{ak::finish});
    else EXPECT_EQ(kinds(r.ack(1)), std::vector<ak>{ak::finish});
  }
}

TEST(PeerLink, status_names) {
  EXPECT_EQ(to_string(link_status::connecting), "connecting");
  EXPECT_EQ(to_string(link_status::up), "up");
  EXPECT_EQ(to_string(link_status::backoff), "backoff");
  EXPECT_EQ(to_string(link_status::self), "self");
  EXPECT_EQ(to_string(link_status::duplicate), "duplicate");
  EXPECT_EQ(to_string(link_status::removed), "removed");
}
