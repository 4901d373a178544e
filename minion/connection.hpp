// sylvite::minion connection state machine (sans-I/O) for ONE master.
// The driver performs the action it is given and reports exactly one event back:
//
//   action                      -> events the driver may report
//   send_auth(timeout)          -> auth_result(status) | auth_timeout | auth_io_error
//   wait(delay)                 -> timer
//   connect_pub(port)           -> pub_connected | pub_failed
//   start_session(first)        -> session_ok | session_failed
//                                  (first: _pillar + minion_start + salt/minion/<id>/start;
//                                   reconnect: salt/minion/<id>/start only, as Salt does)
//   serve                       -> pub_closed (the driver handles jobs meanwhile)
//   exit(code, delay)           -> (none; the process exits after delay)
//   any                         -> stop  (SIGTERM)  => action none, state stopped
//
// Rules (Salt 3008 AsyncAuth/_authenticate, MinionManager._connect_minion, 2.1):
//   - auth timeouts are retried immediately up to auth_tries, then it is a connection failure;
//   - pending (key not accepted) waits acceptance_wait_time, doubling up to
//     acceptance_wait_time_max (0 = no growth); rejected exits 77 after 10-20 s unless
//     rejected_retry; master_finger mismatch exits 42;
//   - every connection failure (master down, pub connect/pillar failure, publish socket
//     closed) backs off 1 s, doubling up to acceptance_wait_time, then re-authenticates
//     (a restarted master has a new AES key); the backoff resets once serving.
// Seam for multi-master (later issue): `master_index()` names the master the actions
// apply to; a failover list would advance it on connection failure instead of retrying.
// Thread-safety: none; owned and driven by one thread (the daemon's io thread).
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "minion/auth.hpp"

namespace sylvite::minion {

using ms = std::chrono::milliseconds;

struct connection_settings {
  int auth_tries = 7;
  ms auth_timeout{5000};
  ms acceptance_wait{10000};
  ms acceptance_wait_max{0};
  ms backoff_initial{1000};
  bool rejected_retry = false;
  std::optional<int> publish_port_override;  // minion config publish_port (if != 4506)
};

enum class conn_state { idle, authenticating, waiting_acceptance, backoff, connecting_pub, starting, serving, exiting, stopped };
std::string_view to_string(conn_state s);

struct conn_action {
  enum class kind { none, send_auth, wait, connect_pub, start_session, serve, exit } type = kind::none;
  ms delay{0};              // send_auth: request timeout; wait/exit: how long
  int port = 0;             // connect_pub
  bool first_session = true;  // start_session
  bool drop_connection = false;  // wait: close the publish socket and forget creds first
  int exit_code = 0;        // exit
};

struct conn_event {
  enum class kind { start, auth_result, auth_timeout, auth_io_error, timer, pub_connected, pub_failed,
                    session_ok, session_failed, pub_closed, stop } type = kind::start;
  auth_status status = auth_status::failed;  // auth_result
  int publish_port = 0;                      // auth_result (accepted)
};

class connection_fsm {
 public:
  // jitter(lo, hi) returns a value in [lo, hi] (rejected-exit delay); injectable for tests.
  explicit connection_fsm(connection_settings s, std::function<int(int, int)> jitter = {});

  conn_action handle(const conn_event& ev);

  conn_state state() const noexcept { return state_; }
  std::size_t master_index() const noexcept { return 0; }
  int auth_attempts() const noexcept { return attempts_; }
  ms current_backoff() const noexcept { return backoff_; }
  bool ever_served() const noexcept { return sessions_ > 0; }

 private:
  conn_action send_auth();
  conn_action fail_connection();

  connection_settings s_;
  std::function<int(int, int)> jitter_;
  conn_state state_ = conn_state::idle;
  int attempts_ = 0;
  ms backoff_;
  ms acceptance_;
  int publish_port_ = 0;
  int sessions_ = 0;
};

}  // namespace sylvite::minion
