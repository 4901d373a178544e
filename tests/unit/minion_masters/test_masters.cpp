// Unit tests for minion/masters.hpp: the multi-master / failover state machine.
// Deterministic: fixed RNG seeds, synthetic time (no clock, no sleeps).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "minion/masters.hpp"

using namespace sylvite::minion;
using K = mm_event::kind;
using A = mm_action::kind;
using namespace std::chrono_literals;

namespace {

mm_time at_ms(std::int64_t t) { return mm_time(mm_ms(t)); }

masters_settings settings(std::size_t n, mm_mode mode) {
  masters_settings s;
  for (std::size_t i = 0; i < n; ++i) s.masters.push_back("m" + std::to_string(i));
  s.mode = mode;
  s.minion_id = "minion1";
  s.random_reauth_delay = 0ms;
  s.seed = 42;
  return s;
}

std::size_t count(const std::vector<mm_action>& v, A k) {
  return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [k](const mm_action& a) { return a.type == k; }));
}
const mm_action* find(const std::vector<mm_action>& v, A k) {
  for (const auto& a : v)
    if (a.type == k) return &a;
  return nullptr;
}
bool has_log(const std::vector<mm_action>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(),
                     [&](const mm_action& a) { return a.type == A::log && a.text.find(needle) != std::string::npos; });
}

// Drives the FSM with synthetic time; remembers armed timers and fires them in order.
// While time advances, every connected master not in `silent` answers a heartbeat every
// heartbeat_interval (as the driver reports it; their actions are not returned): C2's
// suspicion timer then never fires on a healthy master. `beats = false` turns that off.
struct harness {
  masters_fsm fsm;
  mm_time now = at_ms(0);
  std::map<timer_id, mm_time> timers;
  std::vector<mm_action> all;
  bool beats = true;
  std::set<std::size_t> silent;
  mm_time next_beat;

  explicit harness(masters_settings s) : fsm(std::move(s)), next_beat(now + fsm.heartbeat_interval()) {}

  std::vector<mm_action> feed(mm_event e) {
    e.now = now;
    auto out = fsm.handle(e);
    for (const auto& a : out)
      if (a.type == A::schedule) timers[a.timer] = a.at;
    all.insert(all.end(), out.begin(), out.end());
    return out;
  }
  std::vector<mm_action> ev(K k, std::size_t i = 0) { return feed(mm_event::make(k, now, i)); }
  std::vector<mm_action> connected(std::size_t i, std::string ip = {}) {
    auto e = mm_event::make(K::connected, now, i);
    e.ip = std::move(ip);
    return feed(e);
  }
  std::vector<mm_action> lost(std::size_t i, loss_reason r) {
    auto e = mm_event::make(K::connection_lost, now, i);
    e.reason = r;
    return feed(e);
  }
  std::vector<mm_action> job(K k, std::string jid) {
    auto e = mm_event::make(k, now);
    e.jid = std::move(jid);
    return feed(e);
  }
  // Advance to t, firing every timer due on the way (in time order). Returns their actions.
  std::vector<mm_action> advance(mm_time t) {
    std::vector<mm_action> out;
    for (;;) {
      auto next = std::min_element(timers.begin(), timers.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
      const bool timer_due = next != timers.end() && next->second <= t;
      if (beats && next_beat <= t && (!timer_due || next_beat <= next->second)) {
        now = std::max(now, next_beat);
        next_beat += fsm.heartbeat_interval();
        for (std::size_t i = 0; i < fsm.size(); ++i)
          if (fsm.is_up(i) && !silent.count(i)) (void)feed(mm_event::make(K::heartbeat_ok, now, i));
        continue;
      }
      if (!timer_due) break;
      timer_id id = next->first;
      now = std::max(now, next->second);
      timers.erase(next);
      auto e = mm_event::make(K::timer, now);
      e.timer = id;
      auto r = feed(e);
      out.insert(out.end(), r.begin(), r.end());
    }
    now = t;
    return out;
  }
};

}  // namespace

// ---------------------------------------------------------------- failover: F1, F2, F3

TEST(MastersFailover, StartsInListOrderFirstResponderWins) {
  harness h(settings(3, mm_mode::failover));
  auto a = h.ev(K::start);
  ASSERT_EQ(count(a, A::connect), 1u);
  EXPECT_EQ(find(a, A::connect)->index, 0u);
  EXPECT_EQ(find(a, A::connect)->at, h.now);
  a = h.ev(K::connect_failed, 0);
  ASSERT_EQ(count(a, A::connect), 1u);
  EXPECT_EQ(find(a, A::connect)->index, 1u);
  EXPECT_EQ(count(a, A::schedule), 0u);  // next master at once, no waiting
  a = h.connected(1, "10.0.0.2");
  EXPECT_EQ(h.fsm.active(), 1u);
  EXPECT_TRUE(h.fsm.is_up(1));
  EXPECT_EQ(count(a, A::fire_event), 0u);  // the first connection is no "reconnect"
  ASSERT_NE(find(a, A::return_queue_flush), nullptr);
  EXPECT_EQ(find(a, A::return_queue_flush)->index, 1u);
}

TEST(MastersFailover, DnsFailureMovesOnImmediately) {
  harness h(settings(3, mm_mode::failover));
  h.ev(K::start);
  auto a = h.ev(K::dns_failed, 0);  // retry_dns forced to 0 (Salt #21082)
  ASSERT_NE(find(a, A::connect), nullptr);
  EXPECT_EQ(find(a, A::connect)->index, 1u);
  EXPECT_EQ(count(a, A::schedule), 0u);
}

TEST(MastersFailover, PrimaryDiesSecondaryTakesOverForEveryLossReason) {
  for (loss_reason r : {loss_reason::rst, loss_reason::eof, loss_reason::timeout}) {
    SCOPED_TRACE(std::string(to_string(r)));
    harness h(settings(3, mm_mode::failover));
    h.ev(K::start);
    h.connected(0, "10.0.0.1");
    h.now = at_ms(5000);
    auto a = h.lost(0, r);
    const mm_action* d = find(a, A::disconnect);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->index, 0u);
    EXPECT_EQ(d->text, to_string(r));
    ASSERT_NE(find(a, A::connect), nullptr);
    EXPECT_EQ(find(a, A::connect)->index, 1u);
    EXPECT_EQ(find(a, A::connect)->at, h.now);  // random_reauth_delay 0
    EXPECT_EQ(h.fsm.order(), (std::vector<std::size_t>{1, 2, 0}));  // failed one to the end
    EXPECT_TRUE(has_log(a, "Connection to master m0 lost"));
    a = h.connected(1, "10.0.0.2");
    EXPECT_TRUE(has_log(a, "Master ip address changed from 10.0.0.1 to 10.0.0.2"));
    const mm_action* ev = find(a, A::fire_event);
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->text, "salt/minion/minion1/reconnect");
    EXPECT_EQ(ev->data.at("master"), "m1");
    EXPECT_EQ(ev->data.at("previous"), "m0");
    EXPECT_EQ(ev->data.at("reason"), "failover");
    EXPECT_NE(find(a, A::return_queue_flush), nullptr);
  }
}

TEST(MastersFailover, ThreeMasterRotationHasNoDeadLoop) {  // Salt #35041
  harness h(settings(3, mm_mode::failover));
  h.ev(K::start);
  h.connected(0);
  h.lost(0, loss_reason::rst);
  h.connected(1);
  auto a = h.lost(1, loss_reason::rst);
  EXPECT_EQ(find(a, A::connect)->index, 2u);
  EXPECT_EQ(h.fsm.order(), (std::vector<std::size_t>{2, 0, 1}));
  h.connected(2);
  a = h.lost(2, loss_reason::eof);
  EXPECT_EQ(find(a, A::connect)->index, 0u);  // back round to the first one, every master visited
}

// ---------------------------------------------------------------- C2: heartbeats

struct blackhole_case {
  int alive_s;
  int misses;
  int probe_ms;
  int rtt_us;  // the measured round trip before the cut (<0: none measured)
};

// Started and connected to master 0, with no automatic heartbeats: the test reports them.
harness connected_to_first(masters_settings s) {
  harness h(std::move(s));
  h.beats = false;
  h.ev(K::start);
  h.connected(0);
  return h;
}

mm_event beat(mm_time now, std::size_t i, std::chrono::microseconds rtt) {
  auto e = mm_event::make(K::heartbeat_ok, now, i);
  e.rtt = rtt;
  return e;
}

// The master answers pings (round trip rtt) until `cut`, then vanishes silently: every
// heartbeat misses and probes are never answered. Time moves in 10 ms steps, so the
// disconnect is seen within 10 ms of when the FSM decided it. Returns that time.
std::optional<mm_time> run_blackhole(harness& h, const masters_settings& s, mm_time cut, int rtt_us) {
  const mm_ms hb = h.fsm.heartbeat_interval();
  mm_time next_tick = at_ms(0) + hb;
  for (mm_time t = at_ms(0) + 10ms; t <= cut + 3 * s.alive_window; t += 10ms) {
    for (auto& a : h.advance(t))
      if (a.type == A::disconnect) return h.now;
    if (t < next_tick) continue;
    next_tick += hb;
    std::vector<mm_action> r;
    if (t <= cut && rtt_us >= 0) r = h.feed(beat(h.now, 0, std::chrono::microseconds(rtt_us)));
    else if (t > cut) r = h.ev(K::heartbeat_missed, 0);
    else r = h.ev(K::heartbeat_ok, 0);
    if (find(r, A::disconnect)) return h.now;
  }
  return std::nullopt;
}

TEST(MastersFailover, BlackholeDetectedWithinAliveIntervalPlusAccrualTimeout) {
  for (auto c : {blackhole_case{30, 3, 5000, 400}, blackhole_case{10, 2, 2000, 2000}, blackhole_case{6, 6, 1000, 300},
                 blackhole_case{60, 1, 5000, 900}, blackhole_case{2, 3, 5000, 150}}) {
    SCOPED_TRACE(c.alive_s);
    auto s = settings(2, mm_mode::failover);
    s.alive_window = std::chrono::seconds(c.alive_s);
    s.heartbeat_misses = c.misses;
    s.probe_timeout = mm_ms(c.probe_ms);
    harness h = connected_to_first(s);
    EXPECT_EQ(h.fsm.heartbeat_interval(), s.alive_window / c.misses);
    // The cut falls anywhere between two heartbeats.
    const mm_time cut = at_ms(0) + 5 * h.fsm.heartbeat_interval() + mm_ms(137);
    auto dead_at = run_blackhole(h, s, cut, c.rtt_us);
    ASSERT_TRUE(dead_at.has_value());
    EXPECT_TRUE(has_log(h.all, "probing (answer within"));
    EXPECT_GT(*dead_at, cut);  // never while it still answered
    // Left within the window + the accrual timeout: the floor (250 ms) for round trips of
    // a LAN, never the fixed probe_timeout; the goal is alive_window + 1 s.
    EXPECT_LE(*dead_at - cut, s.alive_window + std::min(s.probe_floor, s.probe_timeout));
    EXPECT_LE(*dead_at - cut, s.alive_window + 1s);
    EXPECT_EQ(h.fsm.attempting(), 1u);
    EXPECT_EQ(find(h.all, A::disconnect)->text, "heartbeat");
  }
}

TEST(MastersFailover, WithoutMeasuredRoundTripsTheProbeGetsProbeTimeout) {
  auto s = settings(2, mm_mode::failover);
  s.alive_window = 10s;
  s.probe_timeout = 3s;
  harness h = connected_to_first(s);
  EXPECT_EQ(h.fsm.probe_timeout_of(0), 3s);
  // Silent from the start: the suspicion timer alone (no heartbeat_missed) probes at the
  // end of the window; the probe gets probe_timeout; then the master is left.
  auto fired = h.advance(at_ms(0) + 10s);
  ASSERT_NE(find(fired, A::send_probe), nullptr);
  EXPECT_EQ(find(fired, A::send_probe)->timeout, 3s);
  EXPECT_TRUE(has_log(fired, "no answer for 10000 ms"));
  fired = h.advance(at_ms(0) + 13s - 1ms);
  EXPECT_EQ(find(fired, A::disconnect), nullptr);
  fired = h.advance(at_ms(0) + 13s);
  ASSERT_NE(find(fired, A::disconnect), nullptr);
  EXPECT_EQ(find(fired, A::disconnect)->text, "heartbeat");
}

TEST(MastersFailover, RttAccrualTimeoutFollowsMeasuredRoundTrips) {
  using us = std::chrono::microseconds;
  rtt_accrual a;
  EXPECT_FALSE(a.timeout().has_value());
  a.add(us(1000));
  a.add(us(1000));
  EXPECT_FALSE(a.timeout().has_value());
  a.add(us(1000));
  // mean 1 ms, sigma floored at 25 ms: 1 + 5.61 * 25 = 141.25 ms
  EXPECT_EQ(a.timeout()->count(), 141250);
  rtt_accrual slow;  // a loaded master: 0.8 .. 1.2 s
  for (int k = 0; k < 100; ++k) slow.add(us(k % 2 ? 1'200'000 : 800'000));
  EXPECT_NEAR(static_cast<double>(slow.timeout()->count()), 1e6 + 5.61 * 2e5, 1.0);
  EXPECT_EQ(slow.size(), rtt_accrual::kSamples);  // a sliding window
  auto s = settings(1, mm_mode::hot);
  s.probe_timeout = 5s;
  harness h = connected_to_first(s);
  for (int k = 0; k < 5; ++k) h.feed(beat(h.now, 0, us(300)));
  EXPECT_EQ(h.fsm.probe_timeout_of(0), 250ms);  // the floor
  for (int k = 0; k < 64; ++k) h.feed(beat(h.now, 0, us(k % 2 ? 1'200'000 : 800'000)));
  EXPECT_EQ(h.fsm.probe_timeout_of(0), 2122ms);
  for (int k = 0; k < 64; ++k) h.feed(beat(h.now, 0, us(k % 2 ? 4'000'000 : 2'000'000)));
  EXPECT_EQ(h.fsm.probe_timeout_of(0), 5s);  // the ceiling: probe_timeout
}

TEST(MastersFailover, LoadedMasterThatAnswersWithinTheWindowIsKept) {
  // Round trips of ~1 ms, then the master stalls: pings time out (misses) but it answers
  // again before a whole window passed. The early probe waits for the window's end and
  // the late answer keeps the master.
  auto s = settings(2, mm_mode::failover);
  s.alive_window = 9s;
  s.heartbeat_misses = 3;
  harness h = connected_to_first(s);
  for (int k = 1; k <= 10; ++k) {
    h.advance(at_ms(0) + k * 3s);
    h.feed(beat(h.now, 0, std::chrono::microseconds(1000)));
  }
  const mm_time stall = h.now;  // last answer at 30 s
  std::vector<mm_action> a;
  for (int k = 1; k <= 3; ++k) {
    h.advance(stall + k * 2500ms);
    auto r = h.ev(K::heartbeat_missed, 0);
    a.insert(a.end(), r.begin(), r.end());
  }
  const mm_action* p = find(a, A::send_probe);
  ASSERT_NE(p, nullptr);  // 3 misses: a probe...
  EXPECT_EQ(h.now + p->timeout, stall + 9s);  // ...whose deadline is the window's end
  EXPECT_EQ(count(h.ev(K::probe_failed, 0), A::disconnect), 0u);  // an early failure waits
  h.advance(stall + 8900ms);
  auto late = h.feed(beat(h.now, 0, std::chrono::microseconds(8'900'000)));  // answered late
  EXPECT_EQ(count(late, A::disconnect), 0u);
  auto fired = h.advance(stall + 20s);
  EXPECT_EQ(count(fired, A::disconnect), 0u) << "the deadline found an answer";
  EXPECT_EQ(h.fsm.active(), 0u);
  EXPECT_EQ(count(h.all, A::disconnect), 0u);
}

TEST(MastersFailover, HeartbeatOkOrProbeOkKeepsTheMaster) {
  auto s = settings(2, mm_mode::failover);
  s.alive_window = 30s;
  s.heartbeat_misses = 3;
  harness h = connected_to_first(s);
  // two misses, one ok, two misses: never 3 in a row -> no probe
  for (K k : {K::heartbeat_missed, K::heartbeat_missed, K::heartbeat_ok, K::heartbeat_missed, K::heartbeat_missed}) {
    h.now += 10s;
    EXPECT_EQ(count(h.ev(k, 0), A::send_probe), 0u);
  }
  // misses spread wider than the window do not add up
  harness w(s);
  w.ev(K::start);
  w.connected(0);
  for (int i = 0; i < 5; ++i) {
    w.now += 16s;
    EXPECT_EQ(count(w.ev(K::heartbeat_missed, 0), A::send_probe), 0u);
  }
  // the third miss probes; the probe answers; the master stays
  h.now += 10s;
  auto a = h.ev(K::heartbeat_missed, 0);
  ASSERT_EQ(count(a, A::send_probe), 1u);
  EXPECT_EQ(find(a, A::send_probe)->index, 0u);
  a = h.ev(K::probe_ok, 0);
  EXPECT_EQ(count(a, A::disconnect), 0u);
  auto fired = h.advance(h.now + 10s);  // the probe deadline is stale now
  EXPECT_EQ(count(fired, A::disconnect), 0u);
  EXPECT_EQ(h.fsm.active(), 0u);
  // a failed probe kills it once a whole window passed without an answer (the probe
  // answered at 60 s: not at 70 s, at 90 s)
  h.now += 10s;
  for (int i = 0; i < 3; ++i) h.ev(K::heartbeat_missed, 0);
  a = h.ev(K::probe_failed, 0);
  EXPECT_EQ(find(a, A::disconnect), nullptr);
  a = h.advance(h.now + 20s);
  ASSERT_NE(find(a, A::disconnect), nullptr);
  EXPECT_EQ(find(a, A::disconnect)->text, "heartbeat");
  EXPECT_EQ(find(a, A::connect)->index, 1u);
}

// ---------------------------------------------------------------- F4: all down

TEST(MastersFailover, AllDownCyclesWithGrowingJitteredBoundedBackoff) {
  auto s = settings(3, mm_mode::failover);
  s.backoff_initial = 1000ms;
  s.backoff_max = 8000ms;
  harness h(s);
  auto a = h.ev(K::start);
  std::vector<mm_ms> waits;
  std::vector<std::size_t> tried;
  for (int pass = 0; pass < 8; ++pass) {
    for (int k = 0; k < 3; ++k) {
      const mm_action* c = find(a, A::connect);
      ASSERT_NE(c, nullptr);
      tried.push_back(c->index);
      a = h.ev(K::connect_failed, c->index);
    }
    const mm_action* sc = find(a, A::schedule);
    ASSERT_NE(sc, nullptr);
    EXPECT_EQ(sc->timer.type, timer_id::kind::cycle);
    waits.push_back(sc->at - h.now);
    EXPECT_EQ(count(h.advance(sc->at - 1ms), A::connect), 0u);  // nothing before the wait is over
    a = h.advance(sc->at);
  }
  EXPECT_EQ(tried.size(), 24u);
  for (std::size_t i = 0; i < tried.size(); ++i) EXPECT_EQ(tried[i], i % 3);  // list order each pass
  mm_ms b = 1000ms;
  for (std::size_t i = 0; i < waits.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_GE(waits[i], b / 2);
    EXPECT_LE(waits[i], b);
    EXPECT_LE(waits[i], s.backoff_max);
    b = std::min(b * 2, s.backoff_max);
  }
  EXPECT_GT(waits[3], waits[0]);  // grows
  std::set<std::int64_t> tail;
  for (std::size_t i = 3; i < waits.size(); ++i) tail.insert(waits[i].count());
  EXPECT_GT(tail.size(), 1u);  // jittered at the cap

  // master 2 returns: the pass reaches it and connects; the back-off resets.
  ASSERT_EQ(find(a, A::connect)->index, 0u);
  a = h.ev(K::connect_failed, 0);
  a = h.ev(K::connect_failed, 1);
  ASSERT_EQ(find(a, A::connect)->index, 2u);
  a = h.connected(2);
  EXPECT_EQ(h.fsm.active(), 2u);
  EXPECT_NE(find(a, A::return_queue_flush), nullptr);
  h.lost(2, loss_reason::rst);
  h.ev(K::connect_failed, 0);
  h.ev(K::connect_failed, 1);
  a = h.ev(K::connect_failed, 2);
  const mm_action* sc = find(a, A::schedule);
  ASSERT_NE(sc, nullptr);
  EXPECT_LE(sc->at - h.now, 1000ms);
}

// ---------------------------------------------------------------- F5: failback

namespace {
// Start on the secondary (primary down at start). Returns the harness.
harness on_secondary(masters_settings s) {
  harness h(std::move(s));
  h.ev(K::start);
  h.ev(K::connect_failed, 0);
  h.connected(1);
  return h;
}
}  // namespace

TEST(MastersFailback, SwitchesBackOnlyAfterNConsecutiveProbes) {
  for (int n : {1, 2, 3, 5}) {
    SCOPED_TRACE(n);
    auto s = settings(3, mm_mode::failover);
    s.failback = true;
    s.failback_interval = 10s;
    s.failback_probes = n;
    harness h = on_secondary(s);
    int probes = 0;
    std::optional<mm_time> switched;
    while (!switched && probes < 20) {
      auto fired = h.advance(h.now + 10s);
      const mm_action* p = find(fired, A::send_probe);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->index, 0u);
      ++probes;
      auto a = h.ev(K::probe_ok, 0);
      if (const mm_action* d = find(a, A::disconnect)) {
        EXPECT_EQ(d->index, 1u);
        EXPECT_EQ(d->text, "failback");
        ASSERT_NE(find(a, A::connect), nullptr);
        EXPECT_EQ(find(a, A::connect)->index, 0u);
        switched = h.now;
      }
    }
    EXPECT_EQ(probes, n);
    auto a = h.connected(0);
    EXPECT_EQ(find(a, A::fire_event)->data.at("reason"), "failback");
    EXPECT_EQ(h.fsm.order(), (std::vector<std::size_t>{0, 1, 2}));
    // on the primary: no more failback probes
    EXPECT_EQ(count(h.advance(h.now + 60s), A::send_probe), 0u);
  }
}

TEST(MastersFailback, FailedProbeResetsTheCount) {
  auto s = settings(2, mm_mode::failover);
  s.failback = true;
  s.failback_interval = 10s;
  s.failback_probes = 3;
  harness h = on_secondary(s);
  for (K r : {K::probe_ok, K::probe_ok, K::probe_failed, K::probe_ok, K::probe_ok}) {
    h.advance(h.now + 10s);
    EXPECT_EQ(count(h.ev(r, 0), A::disconnect), 0u);
  }
  EXPECT_EQ(h.fsm.failback_ok_count(), 2);
  // an unanswered probe counts as failed
  h.advance(h.now + 10s);
  h.advance(h.now + 9s);  // deadline (5 s) passes
  EXPECT_EQ(h.fsm.failback_ok_count(), 0);
}

TEST(MastersFailback, NoSwitchWhileAJobReturnIsInFlight) {
  auto s = settings(2, mm_mode::failover);
  s.failback = true;
  s.failback_interval = 10s;
  s.failback_probes = 3;
  harness h = on_secondary(s);
  h.job(K::job_started, "20250101000000000001");
  h.job(K::job_started, "20250101000000000002");
  for (int i = 0; i < 3; ++i) {
    h.advance(h.now + 10s);
    EXPECT_EQ(count(h.ev(K::probe_ok, 0), A::disconnect), 0u);
  }
  EXPECT_EQ(h.fsm.active(), 1u);
  h.now += 1s;
  EXPECT_EQ(count(h.job(K::job_finished, "20250101000000000001"), A::disconnect), 0u);
  auto a = h.job(K::job_finished, "20250101000000000002");
  ASSERT_NE(find(a, A::disconnect), nullptr);
  EXPECT_EQ(find(a, A::disconnect)->index, 1u);
  EXPECT_EQ(find(a, A::connect)->index, 0u);
}

TEST(MastersFailback, FailedProbeWhileWaitingForJobsCancelsThePendingSwitch) {
  auto s = settings(2, mm_mode::failover);
  s.failback = true;
  s.failback_interval = 10s;
  s.failback_probes = 1;
  harness h = on_secondary(s);
  h.job(K::job_started, "j1");
  h.advance(h.now + 10s);
  h.ev(K::probe_ok, 0);
  h.advance(h.now + 10s);
  h.ev(K::probe_failed, 0);
  EXPECT_EQ(count(h.job(K::job_finished, "j1"), A::disconnect), 0u);
}

TEST(MastersFailback, FlappingPrimaryAtMostOneSwitchBackPerInterval) {
  for (int n : {1, 3}) {
    for (std::int64_t period_ms : {1000, 1300, 7000}) {
      SCOPED_TRACE(std::to_string(n) + " / " + std::to_string(period_ms));
      auto s = settings(2, mm_mode::failover);
      s.failback = true;
      s.failback_interval = 10s;
      s.failback_probes = n;
      s.probe_timeout = 2s;
      // the primary is up during the first half of each period (starts up), the secondary always
      auto primary_up = [&](mm_time t) { return (t.time_since_epoch().count() / period_ms) % 2 == 0; };
      harness h(s);
      std::vector<mm_time> failbacks;
      std::vector<mm_action> pending = h.ev(K::start);
      for (std::int64_t t = 0; t <= 60000; t += 100) {
        auto fired = h.advance(at_ms(t));
        pending.insert(pending.end(), fired.begin(), fired.end());
        // the driver answers what it was asked
        for (std::size_t guard = 0; !pending.empty() && guard < 100; ++guard) {
          std::vector<mm_action> now_do;
          now_do.swap(pending);
          for (const auto& a : now_do) {
            std::vector<mm_action> r;
            if (a.type == A::disconnect && a.text == "failback") failbacks.push_back(h.now);
            if (a.type == A::connect) {
              bool up = a.index == 1 || primary_up(h.now);
              r = up ? h.connected(a.index) : h.ev(K::connect_failed, a.index);
            } else if (a.type == A::send_probe) {
              r = h.ev(primary_up(h.now) || a.index == 1 ? K::probe_ok : K::probe_failed, a.index);
            }
            pending.insert(pending.end(), r.begin(), r.end());
          }
        }
        if (h.fsm.active() == 0u && !primary_up(h.now)) {
          auto r = h.lost(0, loss_reason::rst);
          pending.insert(pending.end(), r.begin(), r.end());
        }
      }
      for (std::size_t i = 1; i < failbacks.size(); ++i) EXPECT_GE(failbacks[i] - failbacks[i - 1], s.failback_interval);
      EXPECT_LE(failbacks.size(), 6u);
      if (n == 1 && period_ms == 7000) {
        EXPECT_GE(failbacks.size(), 1u);  // the scenario does fail back (the bound is not vacuous)
      }
      if (period_ms == 1000) {
        EXPECT_LE(failbacks.size(), n == 1 ? 6u : 1u);
      }
    }
  }
}

// ---------------------------------------------------------------- F1: shuffle

TEST(MastersShuffle, FailbackKeepsThePrimaryFirst) {
  std::set<std::vector<std::size_t>> seen;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    auto s = settings(4, mm_mode::failover);
    s.shuffle = true;
    s.failback = true;
    s.seed = seed;
    masters_fsm f(s);
    ASSERT_EQ(f.order().front(), 0u);
    EXPECT_EQ(f.primary(), 0u);
    auto sorted = f.order();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::size_t>{0, 1, 2, 3}));
    seen.insert(f.order());
  }
  EXPECT_EQ(seen.size(), 6u);  // every order of the 3 secondaries occurs
}

TEST(MastersShuffle, WithoutFailbackTheWholeListIsShuffledDeterministically) {
  std::set<std::size_t> firsts;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    auto s = settings(4, mm_mode::failover);
    s.shuffle = true;
    s.seed = seed;
    masters_fsm a(s), b(s);
    EXPECT_EQ(a.order(), b.order());  // same seed, same order
    firsts.insert(a.order().front());
  }
  EXPECT_EQ(firsts.size(), 4u);
  auto s = settings(4, mm_mode::failover);
  masters_fsm plain(s);
  EXPECT_EQ(plain.order(), (std::vector<std::size_t>{0, 1, 2, 3}));
}

// ---------------------------------------------------------------- C5 / F3: reauth jitter

TEST(MastersReauth, AesRotationJitterSpreadOverAThousandMinions) {
  const mm_ms n = 10s;
  std::set<std::int64_t> distinct;
  std::int64_t sum = 0;
  for (std::uint64_t seed = 1; seed <= 1000; ++seed) {
    auto s = settings(1, mm_mode::hot);
    s.random_reauth_delay = n;
    s.seed = seed;
    harness h(s);
    h.ev(K::start);
    h.connected(0);
    h.now = at_ms(100000);
    auto a = h.ev(K::aes_rotated, 0);
    const mm_action* r = find(a, A::reauth);
    ASSERT_NE(r, nullptr);
    mm_ms d = r->at - h.now;
    ASSERT_GE(d, 0ms);
    ASSERT_LE(d, n);
    distinct.insert(d.count());
    sum += d.count();
    // a second rotation before the reauth happened adds nothing
    h.now += 1ms;
    if (r->at > h.now) {
      EXPECT_EQ(count(h.ev(K::aes_rotated, 0), A::reauth), 0u);
    }
  }
  EXPECT_GT(distinct.size(), 900u);
  const double mean = static_cast<double>(sum) / 1000.0;
  EXPECT_NEAR(mean, 5000.0, 500.0);
}

TEST(MastersReauth, ConnectAfterASwitchIsJittered) {
  const mm_ms n = 10s;
  std::set<std::int64_t> distinct;
  for (std::uint64_t seed = 1; seed <= 1000; ++seed) {
    auto s = settings(2, mm_mode::failover);
    s.random_reauth_delay = n;
    s.seed = seed;
    harness h(s);
    auto a = h.ev(K::start);
    ASSERT_EQ(find(a, A::connect)->at, h.now);  // no delay at start
    h.connected(0);
    h.now = at_ms(50000);
    a = h.lost(0, loss_reason::rst);
    const mm_action* c = find(a, A::connect);
    ASSERT_NE(c, nullptr);
    ASSERT_GE(c->at - h.now, 0ms);
    ASSERT_LE(c->at - h.now, n);
    distinct.insert((c->at - h.now).count());
  }
  EXPECT_GT(distinct.size(), 900u);
}

TEST(MastersReauth, AesRotationOnADownMasterIsIgnored) {
  harness h(settings(2, mm_mode::failover));
  h.ev(K::start);
  h.connected(0);
  EXPECT_EQ(count(h.ev(K::aes_rotated, 1), A::reauth), 0u);
  EXPECT_EQ(count(h.ev(K::aes_rotated, 0), A::reauth), 1u);
}

// ---------------------------------------------------------------- hot mode

TEST(MastersHot, EveryMasterConnectsIndependently) {
  auto s = settings(3, mm_mode::hot);
  s.shuffle = true;  // ignored in hot mode
  harness h(s);
  auto a = h.ev(K::start);
  ASSERT_EQ(count(a, A::connect), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].type, A::connect);
    EXPECT_EQ(a[i].index, i);
    EXPECT_EQ(a[i].at, h.now);
  }
  // master 0 down: only its own retry timer; 1 and 2 are connected at once
  a = h.ev(K::connect_failed, 0);
  EXPECT_EQ(count(a, A::connect), 0u);
  ASSERT_NE(find(a, A::schedule), nullptr);
  EXPECT_EQ(find(a, A::schedule)->timer, (timer_id{timer_id::kind::retry, 0}));
  h.connected(1);
  h.connected(2);
  EXPECT_FALSE(h.fsm.is_up(0));
  EXPECT_TRUE(h.fsm.is_up(1));
  EXPECT_TRUE(h.fsm.is_up(2));
  // master 0 keeps retrying with a growing back-off; the others are untouched
  std::vector<mm_ms> waits;
  for (int i = 0; i < 5; ++i) {
    mm_time due = h.timers.at(timer_id{timer_id::kind::retry, 0});
    waits.push_back(due - h.now);
    auto fired = h.advance(due);
    ASSERT_EQ(count(fired, A::connect), 1u);
    EXPECT_EQ(find(fired, A::connect)->index, 0u);
    EXPECT_EQ(count(fired, A::disconnect), 0u);
    h.ev(K::connect_failed, 0);
  }
  EXPECT_GT(waits.back(), waits.front());
  for (auto w : waits) EXPECT_LE(w, s.backoff_max);
  // master 1 drops: disconnect + its own retry; master 2 still up, master 0 unaffected
  a = h.lost(1, loss_reason::eof);
  EXPECT_EQ(find(a, A::disconnect)->index, 1u);
  EXPECT_EQ(count(a, A::connect), 0u);
  EXPECT_EQ(find(a, A::schedule)->timer, (timer_id{timer_id::kind::retry, 1}));
  EXPECT_TRUE(h.fsm.is_up(2));
  // master 0 finally comes up (1's shorter retry is due first); reconnect of 1 fires the event
  auto fired = h.advance(h.timers.at(timer_id{timer_id::kind::retry, 0}));
  ASSERT_EQ(count(fired, A::connect), 2u);
  a = h.connected(0);
  EXPECT_EQ(count(a, A::fire_event), 0u);  // first time up
  a = h.connected(1);
  ASSERT_NE(find(a, A::fire_event), nullptr);
  EXPECT_EQ(find(a, A::fire_event)->data.at("reason"), "reconnect");
}

TEST(MastersHot, DnsFailureWaitsRetryDnsForThatMasterOnly) {
  auto s = settings(2, mm_mode::hot);
  s.retry_dns = 30s;
  harness h(s);
  h.ev(K::start);
  auto a = h.ev(K::dns_failed, 0);
  ASSERT_NE(find(a, A::schedule), nullptr);
  EXPECT_GE(find(a, A::schedule)->at - h.now, 30s);
  a = h.connected(1);
  EXPECT_TRUE(h.fsm.is_up(1));
}

TEST(MastersHot, HeartbeatDeathRetriesThatMaster) {
  auto s = settings(2, mm_mode::hot);
  s.heartbeat_misses = 2;
  harness h(s);
  h.ev(K::start);
  h.connected(0);
  h.connected(1);
  h.silent = {0};  // master 1 answers its heartbeats, master 0 nothing
  h.advance(h.now + 10s);
  h.ev(K::heartbeat_missed, 0);
  auto a = h.ev(K::heartbeat_missed, 0);
  ASSERT_EQ(count(a, A::send_probe), 1u);
  auto fired = h.advance(at_ms(0) + s.alive_window);
  ASSERT_NE(find(fired, A::disconnect), nullptr);
  EXPECT_EQ(find(fired, A::disconnect)->text, "heartbeat");
  EXPECT_FALSE(h.fsm.is_up(0));
  EXPECT_TRUE(h.fsm.is_up(1));
}

TEST(MastersHot, IpChangeIsPerMaster) {
  harness h(settings(2, mm_mode::hot));
  h.ev(K::start);
  auto a = h.connected(0, "10.0.0.1");
  a = h.connected(1, "10.0.0.2");
  EXPECT_FALSE(has_log(a, "ip address changed"));
  h.lost(0, loss_reason::rst);
  auto e = mm_event::make(K::dns_resolved, h.now, 0);
  e.ip = "10.0.0.9";
  a = h.feed(e);
  EXPECT_TRUE(has_log(a, "Master ip address changed from 10.0.0.1 to 10.0.0.9"));
}

// ---------------------------------------------------------------- robustness

TEST(MastersRobustness, UnknownIndexStaleTimersAndLateAnswers) {
  harness h(settings(3, mm_mode::failover));
  EXPECT_TRUE(h.ev(K::connected, 0).empty());  // before start: nothing
  h.ev(K::start);
  auto a = h.ev(K::connection_lost, 99);
  EXPECT_EQ(count(a, A::connect) + count(a, A::disconnect), 0u);
  a = h.ev(K::connect_failed, 0);  // now attempting 1
  a = h.connected(0);              // late answer from the abandoned attempt
  ASSERT_NE(find(a, A::disconnect), nullptr);
  EXPECT_EQ(find(a, A::disconnect)->text, "superseded");
  EXPECT_EQ(h.fsm.active(), std::nullopt);
  EXPECT_EQ(h.fsm.attempting(), 1u);
  harness hot(settings(2, mm_mode::hot));
  hot.ev(K::start);
  hot.ev(K::connect_failed, 0);
  a = hot.connected(0);  // late answer while backing off
  ASSERT_NE(find(a, A::disconnect), nullptr);
  EXPECT_FALSE(hot.fsm.is_up(0));
  auto e = mm_event::make(K::timer, h.now);
  e.timer = timer_id{timer_id::kind::cycle, 0};  // never armed
  EXPECT_TRUE(h.feed(e).empty());
  h.connected(1);
  EXPECT_EQ(h.fsm.active(), 1u);
  EXPECT_EQ(count(h.ev(K::probe_failed, 2), A::disconnect), 0u);  // nobody asked
  EXPECT_EQ(count(h.ev(K::heartbeat_missed, 2), A::send_probe), 0u);
}

TEST(MastersRobustness, EmptyMasterList) {
  masters_settings s;
  s.mode = mm_mode::failover;
  masters_fsm f(s);
  auto a = f.handle(mm_event::make(K::start, at_ms(0)));
  EXPECT_EQ(count(a, A::connect), 0u);
}

TEST(MastersSettings, FromSaltConfig) {
  sylvite::config::minion_config c;
  c.master = {"a", "b:4510"};
  c.master_type = "failover";
  c.id = "web1";
  c.master_alive_interval = 20;
  c.master_failback = true;
  c.master_failback_interval = 0;
  c.master_shuffle = true;
  c.random_reauth_delay = 7;
  c.acceptance_wait_time = 10;
  c.acceptance_wait_time_max = 40;
  auto s = masters_settings_from(c, 9);
  EXPECT_EQ(s.mode, mm_mode::failover);
  EXPECT_EQ(s.masters.size(), 2u);
  EXPECT_EQ(s.minion_id, "web1");
  EXPECT_TRUE(s.shuffle);
  EXPECT_TRUE(s.failback);
  EXPECT_EQ(s.alive_window, 20s);
  EXPECT_EQ(s.failback_interval, 20s);  // Salt: 0 -> master_alive_interval
  EXPECT_EQ(s.random_reauth_delay, 7s);
  EXPECT_EQ(s.backoff_max, 40s);
  EXPECT_EQ(s.seed, 9u);
  c.master_type = "str";
  c.master_alive_interval = 0;
  c.acceptance_wait_time_max = 0;
  s = masters_settings_from(c, 0);
  EXPECT_EQ(s.mode, mm_mode::hot);
  EXPECT_EQ(s.alive_window, 30s);
  EXPECT_EQ(s.failback_interval, 60s);
  EXPECT_EQ(s.backoff_max, 10s);
}
