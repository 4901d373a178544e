// session_fsm: every transition of one master's connection (minion/session.hpp), no sockets,
// no sleeps: time is the `now` each event carries.
#include <gtest/gtest.h>

#include "minion/session.hpp"

namespace sylvite::minion {
namespace {

using K = session_event::kind;
using A = session_action::kind;

const mm_time t0 = mm_time(mm_ms(1'000'000));

session_settings make_settings(bool single = true, bool failover = false) {
  session_settings s;
  s.index = 1;
  s.label = "m1:4506";
  s.host = "m1";
  s.single = single;
  s.failover = failover;
  s.conn.auth_tries = 2;
  s.conn.auth_timeout = mm_ms(5000);
  s.conn.acceptance_wait = mm_ms(10000);
  s.jitter = [](int lo, int) { return lo; };
  s.heartbeat_interval = mm_ms(10000);
  s.probe_timeout = mm_ms(5000);
  s.max_held = 3;
  return s;
}

struct SessionFsm : ::testing::Test {
  session_fsm fsm{make_settings()};
  std::vector<session_action> last;

  std::vector<session_action>& feed(session_event e) {
    last = fsm.handle(e);
    return last;
  }
  session_event ev(K k, mm_time now = t0) { return session_event::make(k, now, fsm.gen()); }

  static std::vector<A> kinds(const std::vector<session_action>& v) {
    std::vector<A> out;
    for (const auto& a : v) out.push_back(a.type);
    return out;
  }
  static const session_action* find(const std::vector<session_action>& v, A k) {
    for (const auto& a : v)
      if (a.type == k) return &a;
    return nullptr;
  }
  static std::vector<mm_event::kind> reports(const std::vector<session_action>& v) {
    std::vector<mm_event::kind> out;
    for (const auto& a : v)
      if (a.type == A::report) out.push_back(a.event.type);
    return out;
  }
  static bool logged(const std::vector<session_action>& v, mm_log_level l, const std::string& part) {
    for (const auto& a : v)
      if (a.type == A::log && a.level == l && a.text.find(part) != std::string::npos) return true;
    return false;
  }

  // connect now -> resolve -> resolved -> sign_in
  void to_signing_in() {
    auto c = ev(K::connect);
    c.at = t0;
    feed(c);
    auto r = ev(K::resolved);
    r.ip = "10.0.0.1";
    feed(r);
  }
  void signed_in(auth_status st, int port = 4505) {
    auto e = ev(K::signed_in);
    e.outcome = sign_in_outcome::result;
    e.status = st;
    e.publish_port = port;
    feed(e);
  }
  void to_serving(bool minion_served = false) {
    to_signing_in();
    signed_in(auth_status::accepted);
    feed(ev(K::pub_connected));
    auto s = ev(K::started);
    s.minion_served = minion_served;
    feed(s);
  }
};

TEST_F(SessionFsm, connect_now_closes_and_resolves) {
  auto c = ev(K::connect);
  c.at = t0;
  auto& o = feed(c);
  EXPECT_EQ(kinds(o), (std::vector<A>{A::close, A::resolve}));
  EXPECT_EQ(fsm.phase(), session_phase::resolving);
  EXPECT_EQ(fsm.gen(), 1u);
  for (const auto& a : o) EXPECT_EQ(a.gen, 1u);
}

TEST_F(SessionFsm, connect_later_waits_then_resolves) {
  auto c = ev(K::connect);
  c.at = t0 + mm_ms(1500);
  auto& o = feed(c);
  EXPECT_EQ(kinds(o), (std::vector<A>{A::close, A::log, A::wait}));
  EXPECT_TRUE(logged(o, mm_log_level::info, "Connecting to master m1:4506 in 1500 ms"));
  const auto seq = find(o, A::wait)->seq;
  EXPECT_EQ(find(o, A::wait)->delay, mm_ms(1500));
  EXPECT_EQ(fsm.phase(), session_phase::delaying);
  auto stale = ev(K::timer);
  stale.seq = seq + 7;
  EXPECT_TRUE(feed(stale).empty());
  auto t = ev(K::timer, t0 + mm_ms(1500));
  t.seq = seq;
  EXPECT_EQ(kinds(feed(t)), (std::vector<A>{A::resolve}));
  EXPECT_EQ(fsm.phase(), session_phase::resolving);
  // The same timer event again changes nothing.
  EXPECT_TRUE(feed(t).empty());
}

TEST_F(SessionFsm, resolved_reports_opens_and_signs_in) {
  auto c = ev(K::connect);
  c.at = t0;
  feed(c);
  auto r = ev(K::resolved);
  r.ip = "10.0.0.1";
  auto& o = feed(r);
  EXPECT_EQ(kinds(o), (std::vector<A>{A::report, A::open, A::sign_in}));
  EXPECT_EQ(o[0].event.type, mm_event::kind::dns_resolved);
  EXPECT_EQ(o[0].event.ip, "10.0.0.1");
  EXPECT_EQ(o[0].event.index, 1u);
  EXPECT_EQ(o[1].ip, "10.0.0.1");
  EXPECT_EQ(o[2].delay, mm_ms(5000));
  EXPECT_EQ(fsm.phase(), session_phase::attempting);
  ASSERT_TRUE(fsm.attempt());
  EXPECT_EQ(fsm.attempt()->state(), conn_state::authenticating);
}

TEST_F(SessionFsm, resolve_failed_reports_dns_failed) {
  auto c = ev(K::connect);
  c.at = t0;
  feed(c);
  auto& o = feed(ev(K::resolve_failed));
  EXPECT_TRUE(logged(o, mm_log_level::error, "Master hostname: 'm1' not found or not responsive. Retrying."));
  EXPECT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::dns_failed}));
  EXPECT_EQ(fsm.phase(), session_phase::idle);
}

TEST_F(SessionFsm, results_of_an_older_generation_are_ignored) {
  to_signing_in();
  const auto old = fsm.gen();
  auto c = ev(K::connect);
  c.at = t0;
  feed(c);
  EXPECT_EQ(fsm.gen(), old + 1);
  for (auto k : {K::resolved, K::resolve_failed, K::signed_in, K::pub_connected, K::pub_failed, K::started,
                 K::start_failed, K::pub_closed, K::reauth_done, K::publish, K::publish_rotated,
                 K::rotation_reported, K::flush_done}) {
    auto e = session_event::make(k, t0, old);
    EXPECT_TRUE(fsm.handle(e).empty()) << static_cast<int>(k);
  }
  EXPECT_EQ(fsm.phase(), session_phase::resolving);
}

TEST_F(SessionFsm, accepted_connects_the_publish_socket) {
  to_signing_in();
  signed_in(auth_status::accepted, 4605);
  ASSERT_EQ(kinds(last), (std::vector<A>{A::connect_pub}));
  EXPECT_EQ(last[0].port, 4605);
  EXPECT_FALSE(fsm.pub_lost());
}

TEST_F(SessionFsm, publish_port_override_wins) {
  auto s = make_settings();
  s.conn.publish_port_override = 5505;
  fsm = session_fsm(s);
  to_signing_in();
  signed_in(auth_status::accepted, 4505);
  EXPECT_EQ(last.at(0).port, 5505);
}

TEST_F(SessionFsm, pub_connected_starts_the_first_session) {
  to_signing_in();
  signed_in(auth_status::accepted);
  auto& o = feed(ev(K::pub_connected));
  ASSERT_EQ(kinds(o), (std::vector<A>{A::start}));
  EXPECT_TRUE(o[0].first);
}

TEST_F(SessionFsm, started_serves_and_reports_connected) {
  to_signing_in();
  signed_in(auth_status::accepted);
  feed(ev(K::pub_connected));
  auto& o = feed(ev(K::started));
  EXPECT_TRUE(logged(o, mm_log_level::info, "Minion is ready to receive requests!"));
  ASSERT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::connected}));
  EXPECT_EQ(find(o, A::report)->event.ip, "10.0.0.1");
  EXPECT_TRUE(fsm.serving());
  EXPECT_TRUE(fsm.ever_served());
}

TEST_F(SessionFsm, ready_line_only_for_the_minion_first_session) {
  to_serving(true);
  EXPECT_FALSE(logged(last, mm_log_level::info, "ready"));
  EXPECT_TRUE(fsm.serving());
}

TEST_F(SessionFsm, reconnect_is_not_a_first_session_in_hot_mode) {
  to_serving();
  to_signing_in();
  signed_in(auth_status::accepted);
  auto& o = feed(ev(K::pub_connected));
  EXPECT_FALSE(o.at(0).first);
}

TEST_F(SessionFsm, failover_first_session_is_the_minion_first) {
  fsm = session_fsm(make_settings(false, true));
  to_signing_in();
  signed_in(auth_status::accepted);
  auto p = ev(K::pub_connected);
  p.minion_served = true;  // another master served before
  EXPECT_FALSE(feed(p).at(0).first);
  fsm = session_fsm(make_settings(false, true));
  to_signing_in();
  signed_in(auth_status::accepted);
  EXPECT_TRUE(feed(ev(K::pub_connected)).at(0).first);
}

TEST_F(SessionFsm, publish_socket_closed_during_start_fails_the_attempt) {
  to_signing_in();
  signed_in(auth_status::accepted);
  feed(ev(K::pub_connected));
  auto c = ev(K::pub_closed);
  EXPECT_TRUE(feed(c).empty());
  EXPECT_TRUE(fsm.pub_lost());
  auto& o = feed(ev(K::started));
  EXPECT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
  EXPECT_EQ(fsm.phase(), session_phase::idle);
}

TEST_F(SessionFsm, publish_socket_down_at_start_fails_the_attempt) {
  to_signing_in();
  signed_in(auth_status::accepted);
  feed(ev(K::pub_connected));
  auto s = ev(K::started);
  s.pub_up = false;
  EXPECT_EQ(reports(feed(s)), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
  EXPECT_FALSE(fsm.serving());
}

TEST_F(SessionFsm, pub_failed_is_a_failed_attempt) {
  to_signing_in();
  signed_in(auth_status::accepted);
  auto& o = feed(ev(K::pub_failed));
  EXPECT_TRUE(logged(o, mm_log_level::info, "Master m1:4506 is not reachable"));
  EXPECT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
  EXPECT_EQ(fsm.phase(), session_phase::idle);
  EXPECT_FALSE(fsm.attempt());
}

TEST_F(SessionFsm, start_failed_is_a_failed_attempt) {
  to_signing_in();
  signed_in(auth_status::accepted);
  feed(ev(K::pub_connected));
  EXPECT_EQ(reports(feed(ev(K::start_failed))), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
}

TEST_F(SessionFsm, sign_in_timeouts_retry_up_to_auth_tries) {
  to_signing_in();
  auto t = ev(K::signed_in);
  t.outcome = sign_in_outcome::timeout;
  auto& o = feed(t);
  EXPECT_TRUE(logged(o, mm_log_level::warning, "did not answer the sign-in in 5 s"));
  EXPECT_NE(find(o, A::sign_in), nullptr);
  auto& o2 = feed(t);
  EXPECT_EQ(reports(o2), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
}

TEST_F(SessionFsm, sign_in_io_error_is_a_failed_attempt) {
  to_signing_in();
  auto e = ev(K::signed_in);
  e.outcome = sign_in_outcome::io_error;
  EXPECT_EQ(reports(feed(e)), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
}

TEST_F(SessionFsm, failed_sign_in_statuses_are_failed_attempts) {
  for (auto st : {auth_status::failed, auth_status::full, auth_status::bad_algo}) {
    fsm = session_fsm(make_settings());
    to_signing_in();
    signed_in(st);
    EXPECT_EQ(reports(last), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
  }
}

TEST_F(SessionFsm, pending_waits_for_acceptance_then_signs_in_again) {
  to_signing_in();
  signed_in(auth_status::pending);
  EXPECT_TRUE(logged(last, mm_log_level::info, "Waiting 10 seconds before retry."));
  auto* w = find(last, A::wait);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->delay, mm_ms(10000));
  auto t = ev(K::timer, t0 + mm_ms(10000));
  t.seq = w->seq;
  EXPECT_EQ(kinds(feed(t)), (std::vector<A>{A::sign_in}));
}

TEST_F(SessionFsm, pending_moves_on_in_failover_with_several_masters) {
  fsm = session_fsm(make_settings(false, true));
  to_signing_in();
  signed_in(auth_status::rejected_retry);
  EXPECT_TRUE(logged(last, mm_log_level::warning, "has not accepted this minion's key yet"));
  EXPECT_EQ(reports(last), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
}

TEST_F(SessionFsm, pending_waits_in_hot_mode_with_several_masters) {
  fsm = session_fsm(make_settings(false, false));
  to_signing_in();
  signed_in(auth_status::pending);
  EXPECT_NE(find(last, A::wait), nullptr);
  EXPECT_TRUE(reports(last).empty());
}

TEST_F(SessionFsm, rejected_exits_77_after_the_pause_with_one_master) {
  to_signing_in();
  signed_in(auth_status::rejected);
  auto* x = find(last, A::exit);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->code, 77);
  EXPECT_EQ(x->delay, mm_ms(10000));
  EXPECT_EQ(fsm.phase(), session_phase::exiting);
}

TEST_F(SessionFsm, finger_mismatch_exits_42_with_one_master) {
  to_signing_in();
  signed_in(auth_status::finger_mismatch);
  auto* x = find(last, A::exit);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->code, 42);
  EXPECT_EQ(x->delay, mm_ms(0));
}

TEST_F(SessionFsm, rejected_is_retried_later_with_several_masters) {
  fsm = session_fsm(make_settings(false, false));
  to_signing_in();
  signed_in(auth_status::rejected);
  EXPECT_TRUE(logged(last, mm_log_level::critical, "Master m1:4506 rejected this minion's key; trying it again later"));
  EXPECT_EQ(reports(last), (std::vector<mm_event::kind>{mm_event::kind::connect_failed}));
  EXPECT_EQ(find(last, A::exit), nullptr);
  fsm = session_fsm(make_settings(false, true));
  to_signing_in();
  signed_in(auth_status::finger_mismatch);
  EXPECT_TRUE(logged(last, mm_log_level::critical, "does not match master_finger; trying it again later"));
}

TEST_F(SessionFsm, lost_publish_socket_reports_connection_lost) {
  to_serving();
  auto c = ev(K::pub_closed);
  c.reason = loss_reason::rst;
  auto& o = feed(c);
  ASSERT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::connection_lost}));
  EXPECT_EQ(o[0].event.reason, loss_reason::rst);
  EXPECT_FALSE(fsm.serving());
  EXPECT_TRUE(feed(c).empty());  // reported once
}

TEST_F(SessionFsm, fatal_with_one_master_exits_now) {
  to_serving();
  auto f = ev(K::fatal);
  f.code = 42;
  auto& o = feed(f);
  auto* x = find(o, A::exit);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->code, 42);
  EXPECT_EQ(x->delay, mm_ms(0));
  EXPECT_TRUE(logged(o, mm_log_level::critical, "exits with code 42"));
}

TEST_F(SessionFsm, fatal_with_several_masters_drops_this_one) {
  fsm = session_fsm(make_settings(false, false));
  to_serving();
  auto f = ev(K::fatal);
  f.code = 77;
  auto& o = feed(f);
  EXPECT_TRUE(logged(o, mm_log_level::critical, "Master m1:4506 rejected this minion's key"));
  ASSERT_EQ(reports(o), (std::vector<mm_event::kind>{mm_event::kind::connection_lost}));
  EXPECT_EQ(find(o, A::report)->event.reason, loss_reason::eof);
  EXPECT_FALSE(fsm.serving());
  EXPECT_TRUE(feed(f).empty());  // not serving any more
}

TEST_F(SessionFsm, disconnect_closes) {
  to_serving();
  const auto g = fsm.gen();
  auto d = ev(K::disconnect);
  d.why = "heartbeat";
  auto& o = feed(d);
  EXPECT_TRUE(logged(o, mm_log_level::debug, "Closing the connection to master m1:4506 (heartbeat)"));
  EXPECT_NE(find(o, A::close), nullptr);
  EXPECT_EQ(fsm.gen(), g + 1);
  EXPECT_EQ(fsm.phase(), session_phase::idle);
}

TEST_F(SessionFsm, stop_closes_and_ignores_everything_after) {
  to_serving();
  EXPECT_EQ(kinds(feed(ev(K::stop))), (std::vector<A>{A::close}));
  EXPECT_EQ(fsm.phase(), session_phase::stopped);
  auto c = ev(K::connect);
  c.at = t0;
  EXPECT_TRUE(feed(c).empty());
  EXPECT_TRUE(feed(ev(K::probe)).empty());
}

TEST_F(SessionFsm, reauth_waits_then_replays_held_publishes) {
  to_serving();
  auto r = ev(K::reauth);
  r.at = t0 + mm_ms(2500);
  auto& o = feed(r);
  EXPECT_TRUE(logged(o, mm_log_level::info, "re-authenticating in 2500 ms"));
  auto* w = find(o, A::wait);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->delay, mm_ms(2500));
  const auto seq = w->seq;
  EXPECT_TRUE(fsm.reauth_pending());
  auto p = ev(K::publish);
  p.body = "one";
  EXPECT_TRUE(feed(p).empty());  // held
  EXPECT_EQ(fsm.held(), 1u);
  auto t = ev(K::timer, t0 + mm_ms(2500));
  t.seq = seq;
  EXPECT_EQ(kinds(feed(t)), (std::vector<A>{A::reauth}));
  auto d = ev(K::reauth_done);
  d.ok = true;
  auto& o2 = feed(d);
  ASSERT_EQ(kinds(o2), (std::vector<A>{A::replay}));
  EXPECT_EQ(o2[0].bodies, (std::vector<wire::value>{"one"}));
  EXPECT_FALSE(fsm.reauth_pending());
  EXPECT_EQ(fsm.held(), 0u);
}

TEST_F(SessionFsm, failed_reauth_drops_held_publishes) {
  to_serving();
  auto p = ev(K::publish);
  p.has_creds = false;
  p.body = "x";
  auto& o = feed(p);  // no credentials: held, re-auth now (no delay line)
  EXPECT_FALSE(logged(o, mm_log_level::info, "re-authenticating"));
  ASSERT_NE(find(o, A::wait), nullptr);
  EXPECT_EQ(find(o, A::wait)->delay, mm_ms(0));
  auto d = ev(K::reauth_done);
  d.ok = false;
  EXPECT_TRUE(logged(feed(d), mm_log_level::error, "failed; 1 publish(es) dropped"));
  EXPECT_EQ(fsm.held(), 0u);
}

TEST_F(SessionFsm, reauth_without_held_publishes_replays_nothing) {
  to_serving();
  auto d = ev(K::reauth_done);
  d.ok = true;
  EXPECT_TRUE(feed(d).empty());
}

TEST_F(SessionFsm, reauth_is_ignored_when_not_serving) {
  to_signing_in();
  auto r = ev(K::reauth);
  r.at = t0;
  EXPECT_TRUE(feed(r).empty());
  EXPECT_FALSE(fsm.reauth_pending());
  auto p = ev(K::publish);
  p.has_creds = false;
  EXPECT_TRUE(feed(p).empty());  // held, no re-auth
  EXPECT_EQ(fsm.held(), 1u);
}

TEST_F(SessionFsm, publish_with_credentials_is_decoded) {
  to_serving();
  auto p = ev(K::publish);
  p.body = "payload";
  auto& o = feed(p);
  ASSERT_EQ(kinds(o), (std::vector<A>{A::decode}));
  EXPECT_EQ(o[0].bodies.at(0), wire::value("payload"));
}

TEST_F(SessionFsm, held_publishes_are_bounded) {
  to_serving();
  auto r = ev(K::reauth);
  r.at = t0 + mm_ms(1000);
  feed(r);
  auto p = ev(K::publish);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(feed(p).empty());
  EXPECT_TRUE(logged(feed(p), mm_log_level::error, "Too many publishes from m1:4506"));
  EXPECT_EQ(fsm.held(), 3u);
}

TEST_F(SessionFsm, rotation_is_reported_for_the_jittered_reauth) {
  to_serving();
  auto p = ev(K::publish_rotated);
  p.body = "rotated";
  auto& o = feed(p);
  ASSERT_EQ(kinds(o), (std::vector<A>{A::report}));
  EXPECT_EQ(o[0].event.type, mm_event::kind::aes_rotated);
  EXPECT_TRUE(o[0].follow_up);
  EXPECT_EQ(fsm.held(), 1u);
  // masters_fsm scheduled it (reauth(at)): the follow-up adds nothing.
  auto r = ev(K::reauth);
  r.at = t0 + mm_ms(3000);
  feed(r);
  EXPECT_TRUE(feed(ev(K::rotation_reported)).empty());
}

TEST_F(SessionFsm, rotation_without_a_scheduled_reauth_reauths_now) {
  to_serving();
  feed(ev(K::publish_rotated));
  auto& o = feed(ev(K::rotation_reported));
  ASSERT_NE(find(o, A::wait), nullptr);
  EXPECT_EQ(find(o, A::wait)->delay, mm_ms(0));
  EXPECT_TRUE(fsm.reauth_pending());
}

TEST_F(SessionFsm, heartbeat_skips_a_busy_link) {
  to_serving();
  auto h = ev(K::heartbeat);
  h.last_ok = t0 - mm_ms(9000);
  EXPECT_EQ(reports(feed(h)), (std::vector<mm_event::kind>{mm_event::kind::heartbeat_ok}));
  EXPECT_FALSE(fsm.pinging());
}

TEST_F(SessionFsm, heartbeat_pings_an_idle_link) {
  to_serving();
  auto h = ev(K::heartbeat);
  h.last_ok = t0 - mm_ms(10000);
  auto& o = feed(h);
  ASSERT_EQ(kinds(o), (std::vector<A>{A::ping}));
  EXPECT_EQ(o[0].delay, mm_ms(5000));  // min(interval * 4 / 5, probe_timeout)
  EXPECT_TRUE(fsm.pinging());
  EXPECT_TRUE(feed(h).empty());  // one ping at a time
  auto d = ev(K::ping_done);
  d.ok = false;
  auto& o2 = feed(d);
  EXPECT_TRUE(logged(o2, mm_log_level::debug, "Heartbeat to master m1:4506 missed"));
  EXPECT_EQ(reports(o2), (std::vector<mm_event::kind>{mm_event::kind::heartbeat_missed}));
  EXPECT_FALSE(fsm.pinging());
  feed(h);
  d.ok = true;
  EXPECT_EQ(reports(feed(d)), (std::vector<mm_event::kind>{mm_event::kind::heartbeat_ok}));
}

TEST_F(SessionFsm, heartbeat_ping_timeout_is_four_fifths_of_a_short_interval) {
  auto s = make_settings();
  s.heartbeat_interval = mm_ms(2000);
  fsm = session_fsm(s);
  to_serving();
  auto h = ev(K::heartbeat);
  h.last_ok = t0 - mm_ms(5000);
  EXPECT_EQ(feed(h).at(0).delay, mm_ms(1600));
}

TEST_F(SessionFsm, heartbeat_only_while_serving) {
  to_signing_in();
  auto h = ev(K::heartbeat);
  EXPECT_TRUE(feed(h).empty());
  to_serving();
  feed(h);
  EXPECT_TRUE(fsm.pinging());
  auto c = ev(K::pub_closed);
  feed(c);
  auto d = session_event::make(K::ping_done, t0, fsm.gen());
  d.ok = true;
  EXPECT_TRUE(feed(d).empty());  // lost meanwhile: nothing to report
  EXPECT_FALSE(fsm.pinging());
}

TEST_F(SessionFsm, probe_uses_the_channel_only_when_serving) {
  auto& o = feed(ev(K::probe));
  ASSERT_EQ(kinds(o), (std::vector<A>{A::probe}));
  EXPECT_FALSE(o[0].on_channel);
  EXPECT_EQ(o[0].delay, mm_ms(5000));
  to_serving();
  EXPECT_TRUE(feed(ev(K::probe)).at(0).on_channel);
  auto d = ev(K::probe_done);
  d.ok = true;
  EXPECT_EQ(reports(feed(d)), (std::vector<mm_event::kind>{mm_event::kind::probe_ok}));
  d.ok = false;
  auto& o2 = feed(d);
  EXPECT_TRUE(logged(o2, mm_log_level::debug, "Probe of master m1:4506: no answer"));
  EXPECT_EQ(reports(o2), (std::vector<mm_event::kind>{mm_event::kind::probe_failed}));
}

// C2's accrual detector needs when the master answered and how long a ping took.
TEST_F(SessionFsm, heartbeat_reports_carry_the_answer_time_and_round_trip) {
  to_serving();
  auto h = ev(K::heartbeat);
  h.last_ok = t0 - mm_ms(9000);  // busy link: no ping, the last answer is the request's
  auto& o = feed(h);
  ASSERT_NE(find(o, A::report), nullptr);
  EXPECT_EQ(find(o, A::report)->event.answered, t0 - mm_ms(9000));
  EXPECT_LT(find(o, A::report)->event.rtt.count(), 0);
  h.last_ok = t0 - mm_ms(10000);
  feed(h);
  auto d = ev(K::ping_done);
  d.ok = true;
  d.rtt = std::chrono::microseconds(1234);
  auto& o2 = feed(d);
  ASSERT_NE(find(o2, A::report), nullptr);
  EXPECT_EQ(find(o2, A::report)->event.rtt, std::chrono::microseconds(1234));
  auto p = ev(K::probe);
  p.timeout = mm_ms(250);  // masters_fsm's accrual timeout
  EXPECT_EQ(feed(p).at(0).delay, mm_ms(250));
  auto pd = ev(K::probe_done);
  pd.ok = true;
  pd.rtt = std::chrono::microseconds(777);
  auto& o3 = feed(pd);
  ASSERT_NE(find(o3, A::report), nullptr);
  EXPECT_EQ(find(o3, A::report)->event.type, mm_event::kind::probe_ok);
  EXPECT_EQ(find(o3, A::report)->event.rtt, std::chrono::microseconds(777));
}

TEST_F(SessionFsm, flush_one_at_a_time_and_again_while_returns_wait) {
  auto f = ev(K::flush);
  f.queued = 2;
  EXPECT_TRUE(feed(f).empty());  // not serving
  to_serving();
  f.gen = fsm.gen();
  f.queued = 0;
  EXPECT_TRUE(feed(f).empty());  // nothing queued
  f.queued = 2;
  EXPECT_EQ(kinds(feed(f)), (std::vector<A>{A::flush}));
  EXPECT_TRUE(fsm.flushing());
  EXPECT_TRUE(feed(f).empty());  // one flush at a time
  auto d = ev(K::flush_done);
  d.sent = 1;
  d.queued = 1;
  EXPECT_EQ(kinds(feed(d)), (std::vector<A>{A::flush}));
  d.sent = 0;
  EXPECT_TRUE(feed(d).empty());  // nothing went out: wait for the next connected
  EXPECT_FALSE(fsm.flushing());
}

TEST_F(SessionFsm, a_new_connection_forgets_a_running_flush) {
  to_serving();
  auto f = ev(K::flush);
  f.queued = 1;
  feed(f);
  EXPECT_TRUE(fsm.flushing());
  to_serving();  // reconnect (connect closes the old connection)
  EXPECT_FALSE(fsm.flushing());
  f.gen = fsm.gen();
  EXPECT_EQ(kinds(feed(f)), (std::vector<A>{A::flush}));
}

TEST_F(SessionFsm, connect_while_serving_starts_over) {
  to_serving();
  const auto g = fsm.gen();
  auto c = ev(K::connect);
  c.at = t0;
  auto& o = feed(c);
  EXPECT_EQ(kinds(o), (std::vector<A>{A::close, A::resolve}));
  EXPECT_EQ(fsm.gen(), g + 1);
  EXPECT_FALSE(fsm.serving());
  EXPECT_FALSE(fsm.reauth_pending());
  EXPECT_EQ(fsm.held(), 0u);
}

TEST_F(SessionFsm, phase_names) {
  EXPECT_EQ(to_string(session_phase::idle), "idle");
  EXPECT_EQ(to_string(session_phase::serving), "serving");
  EXPECT_EQ(to_string(session_phase::stopped), "stopped");
}

}  // namespace
}  // namespace sylvite::minion
