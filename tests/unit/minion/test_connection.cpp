// connection_fsm: feed events, check actions (no sockets, no sleeps).
#include <gtest/gtest.h>

#include "minion/connection.hpp"

namespace mn = sylvite::minion;
using K = mn::conn_event::kind;
using A = mn::conn_action::kind;
using std::chrono::milliseconds;

namespace {

mn::connection_settings settings() {
  mn::connection_settings s;
  s.auth_tries = 3;
  s.auth_timeout = milliseconds(5000);
  s.acceptance_wait = milliseconds(10000);
  s.acceptance_wait_max = milliseconds(0);
  s.backoff_initial = milliseconds(1000);
  return s;
}

mn::conn_event auth(mn::auth_status st, int port = 4505) {
  mn::conn_event e{K::auth_result};
  e.status = st;
  e.publish_port = port;
  return e;
}

mn::connection_fsm make(mn::connection_settings s = settings()) {
  return mn::connection_fsm(std::move(s), [](int lo, int) { return lo; });
}

}  // namespace

TEST(ConnectionFsm, HappyPath) {
  auto f = make();
  auto a = f.handle({K::start});
  EXPECT_EQ(a.type, A::send_auth);
  EXPECT_EQ(a.delay, milliseconds(5000));
  a = f.handle(auth(mn::auth_status::accepted, 4510));
  EXPECT_EQ(a.type, A::connect_pub);
  EXPECT_EQ(a.port, 4510);
  a = f.handle({K::pub_connected});
  EXPECT_EQ(a.type, A::start_session);
  EXPECT_TRUE(a.first_session);
  a = f.handle({K::session_ok});
  EXPECT_EQ(a.type, A::serve);
  EXPECT_EQ(f.state(), mn::conn_state::serving);
}

TEST(ConnectionFsm, PendingWaitsAcceptanceTime) {
  auto s = settings();
  s.acceptance_wait_max = milliseconds(30000);
  auto f = make(s);
  f.handle({K::start});
  auto a = f.handle(auth(mn::auth_status::pending));
  EXPECT_EQ(a.type, A::wait);
  EXPECT_EQ(a.delay, milliseconds(10000));
  EXPECT_FALSE(a.drop_connection);
  EXPECT_EQ(f.handle({K::timer}).type, A::send_auth);
  a = f.handle(auth(mn::auth_status::pending));
  EXPECT_EQ(a.delay, milliseconds(20000));  // doubles up to acceptance_wait_time_max
  f.handle({K::timer});
  a = f.handle(auth(mn::auth_status::pending));
  EXPECT_EQ(a.delay, milliseconds(40000));  // Salt adds once more while below max
  f.handle({K::timer});
  a = f.handle(auth(mn::auth_status::pending));
  EXPECT_EQ(a.delay, milliseconds(40000));
  f.handle({K::timer});
  EXPECT_EQ(f.handle(auth(mn::auth_status::accepted)).type, A::connect_pub);
}

TEST(ConnectionFsm, RejectedExits77AfterPause) {
  auto f = make();
  f.handle({K::start});
  auto a = f.handle(auth(mn::auth_status::rejected));
  EXPECT_EQ(a.type, A::exit);
  EXPECT_EQ(a.exit_code, 77);
  EXPECT_EQ(a.delay, milliseconds(10000));
  // rejected_retry: keep waiting instead.
  auto s = settings();
  s.rejected_retry = true;
  auto g = make(s);
  g.handle({K::start});
  EXPECT_EQ(g.handle(auth(mn::auth_status::rejected_retry)).type, A::wait);
}

TEST(ConnectionFsm, FingerMismatchExits42) {
  auto f = make();
  f.handle({K::start});
  auto a = f.handle(auth(mn::auth_status::finger_mismatch));
  EXPECT_EQ(a.type, A::exit);
  EXPECT_EQ(a.exit_code, 42);
}

TEST(ConnectionFsm, TimeoutsRetryThenBackoff) {
  auto f = make();
  f.handle({K::start});
  EXPECT_EQ(f.handle({K::auth_timeout}).type, A::send_auth);
  EXPECT_EQ(f.handle({K::auth_timeout}).type, A::send_auth);
  auto a = f.handle({K::auth_timeout});  // third attempt of auth_tries=3 timed out
  EXPECT_EQ(a.type, A::wait);
  EXPECT_TRUE(a.drop_connection);
  EXPECT_EQ(a.delay, milliseconds(1000));
}

TEST(ConnectionFsm, BackoffGrowsToAcceptanceWaitAndResets) {
  auto f = make();
  f.handle({K::start});
  std::vector<long long> delays;
  for (int i = 0; i < 6; ++i) {
    auto a = f.handle({K::auth_io_error});
    ASSERT_EQ(a.type, A::wait);
    delays.push_back(a.delay.count());
    ASSERT_EQ(f.handle({K::timer}).type, A::send_auth);
  }
  EXPECT_EQ(delays, (std::vector<long long>{1000, 2000, 4000, 8000, 10000, 10000}));
  f.handle(auth(mn::auth_status::accepted));
  f.handle({K::pub_connected});
  f.handle({K::session_ok});
  // Serving resets the backoff; a lost publish socket re-authenticates after 1 s.
  auto a = f.handle({K::pub_closed});
  EXPECT_EQ(a.type, A::wait);
  EXPECT_TRUE(a.drop_connection);
  EXPECT_EQ(a.delay, milliseconds(1000));
  EXPECT_EQ(f.handle({K::timer}).type, A::send_auth);
  EXPECT_EQ(f.handle(auth(mn::auth_status::accepted)).type, A::connect_pub);
  a = f.handle({K::pub_connected});
  EXPECT_EQ(a.type, A::start_session);
  EXPECT_FALSE(a.first_session);  // reconnect: only salt/minion/<id>/start
}

TEST(ConnectionFsm, FailuresAndOverrides) {
  auto s = settings();
  s.publish_port_override = 4999;
  auto f = make(s);
  f.handle({K::start});
  EXPECT_EQ(f.handle(auth(mn::auth_status::accepted, 4505)).port, 4999);
  EXPECT_EQ(f.handle({K::pub_failed}).type, A::wait);
  f.handle({K::timer});
  f.handle(auth(mn::auth_status::accepted));
  f.handle({K::pub_connected});
  EXPECT_EQ(f.handle({K::session_failed}).type, A::wait);
  // publish_port 4506 in the config means "use the master's".
  auto s2 = settings();
  s2.publish_port_override = 4506;
  auto g = make(s2);
  g.handle({K::start});
  EXPECT_EQ(g.handle(auth(mn::auth_status::accepted, 4505)).port, 4505);
  for (auto st : {mn::auth_status::failed, mn::auth_status::full, mn::auth_status::bad_algo}) {
    auto h = make();
    h.handle({K::start});
    EXPECT_EQ(h.handle(auth(st)).type, A::wait);
  }
  // Stop from any state.
  auto h = make();
  h.handle({K::start});
  EXPECT_EQ(h.handle({K::stop}).type, A::none);
  EXPECT_EQ(h.state(), mn::conn_state::stopped);
  EXPECT_EQ(h.handle({K::timer}).type, A::none);
}
