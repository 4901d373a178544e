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
struct harness {
  masters_fsm fsm;
  mm_time now = at_ms(0);
  std::map<timer_id, mm_time> timers;
  std::vector<mm_action> all;

  explicit harness(masters_settings s) : fsm(std::move(s)) {}

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
      if (next == timers.end() || next->second > t) break;
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
};

TEST(MastersFailover, BlackholeDetectedWithinAliveIntervalPlusOneProbe) {
  for (auto c : {blackhole_case{30, 3, 5000}, blackhole_case{10, 2, 2000}, blackhole_case{6, 6, 1000},
                 blackhole_case{60, 1, 5000}}) {
    SCOPED_TRACE(c.alive_s);
    auto s = settings(2, mm_mode::failover);
    s.alive_window = std::chrono::seconds(c.alive_s);
    s.heartbeat_misses = c.misses;
    s.probe_timeout = mm_ms(c.probe_ms);
    harness h(s);
    h.ev(K::start);
    h.connected(0);
    const mm_ms hb = h.fsm.heartbeat_interval();
    EXPECT_EQ(hb, s.alive_window / c.misses);
    // The master silently vanishes right after t=0: every heartbeat from now on misses,
    // the probe is never answered.
    std::optional<mm_time> dead_at;
    bool probe_sent = false;
    for (mm_time t = at_ms(0) + hb; t <= at_ms(0) + 3 * s.alive_window && !dead_at; t += hb) {
      h.advance(t);
      auto a = h.ev(K::heartbeat_missed, 0);
      if (find(a, A::send_probe)) {
        probe_sent = true;
        auto fired = h.advance(h.now + s.probe_timeout);  // the probe is never answered
        if (find(fired, A::disconnect)) dead_at = h.now;
      }
    }
    ASSERT_TRUE(probe_sent);
    ASSERT_TRUE(dead_at.has_value());
    EXPECT_LE(*dead_at - at_ms(0), s.alive_window + s.probe_timeout);
    EXPECT_EQ(h.fsm.attempting(), 1u);
  }
}

TEST(MastersFailover, HeartbeatOkOrProbeOkKeepsTheMaster) {
  auto s = settings(2, mm_mode::failover);
  s.alive_window = 30s;
  s.heartbeat_misses = 3;
  harness h(s);
  h.ev(K::start);
  h.connected(0);
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
  // a failed probe kills it at once
  for (int i = 0; i < 3; ++i) h.ev(K::heartbeat_missed, 0);
  a = h.ev(K::probe_failed, 0);
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
  h.ev(K::heartbeat_missed, 0);
  auto a = h.ev(K::heartbeat_missed, 0);
  ASSERT_EQ(count(a, A::send_probe), 1u);
  auto fired = h.advance(h.now + s.probe_timeout);
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
