// sylvite::minion connection state machine (see connection.hpp for the rules).
#include "minion/connection.hpp"

#include <algorithm>
#include <random>

namespace sylvite::minion {

std::string_view to_string(conn_state s) {
  switch (s) {
    case conn_state::idle: return "idle";
    case conn_state::authenticating: return "authenticating";
    case conn_state::waiting_acceptance: return "waiting_acceptance";
    case conn_state::backoff: return "backoff";
    case conn_state::connecting_pub: return "connecting_pub";
    case conn_state::starting: return "starting";
    case conn_state::serving: return "serving";
    case conn_state::exiting: return "exiting";
    case conn_state::stopped: return "stopped";
  }
  return "unknown";
}

connection_fsm::connection_fsm(connection_settings s, std::function<int(int, int)> jitter)
    : s_(std::move(s)), jitter_(std::move(jitter)), backoff_(s_.backoff_initial), acceptance_(s_.acceptance_wait) {
  if (!jitter_) {
    jitter_ = [](int lo, int hi) {
      static thread_local std::mt19937 rng{std::random_device{}()};
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
  }
  if (s_.auth_tries < 1) s_.auth_tries = 1;
}

conn_action connection_fsm::send_auth() {
  state_ = conn_state::authenticating;
  ++attempts_;
  conn_action a;
  a.type = conn_action::kind::send_auth;
  a.delay = s_.auth_timeout;
  return a;
}

conn_action connection_fsm::fail_connection() {
  state_ = conn_state::backoff;
  attempts_ = 0;
  conn_action a;
  a.type = conn_action::kind::wait;
  a.delay = backoff_;
  a.drop_connection = true;
  const ms cap = std::max(s_.acceptance_wait, s_.backoff_initial);
  backoff_ = std::min(backoff_ * 2, cap);
  return a;
}

conn_action connection_fsm::handle(const conn_event& ev) {
  using K = conn_event::kind;
  if (state_ == conn_state::stopped || state_ == conn_state::exiting) return {};
  if (ev.type == K::stop) {
    state_ = conn_state::stopped;
    return {};
  }
  switch (state_) {
    case conn_state::idle:
      if (ev.type == K::start) {
        attempts_ = 0;
        return send_auth();
      }
      break;

    case conn_state::authenticating:
      switch (ev.type) {
        case K::auth_result:
          switch (ev.status) {
            case auth_status::accepted: {
              attempts_ = 0;
              acceptance_ = s_.acceptance_wait;
              publish_port_ = ev.publish_port;
              if (s_.publish_port_override && *s_.publish_port_override != 4506)
                publish_port_ = *s_.publish_port_override;
              state_ = conn_state::connecting_pub;
              conn_action a;
              a.type = conn_action::kind::connect_pub;
              a.port = publish_port_;
              return a;
            }
            case auth_status::pending:
            case auth_status::rejected_retry: {
              state_ = conn_state::waiting_acceptance;
              attempts_ = 0;
              conn_action a;
              a.type = conn_action::kind::wait;
              a.delay = acceptance_;
              if (acceptance_ < s_.acceptance_wait_max) acceptance_ += acceptance_;
              return a;
            }
            case auth_status::rejected: {
              state_ = conn_state::exiting;
              conn_action a;
              a.type = conn_action::kind::exit;
              a.exit_code = 77;  // EX_NOPERM
              a.delay = ms(1000 * jitter_(10, 20));
              return a;
            }
            case auth_status::finger_mismatch: {
              state_ = conn_state::exiting;
              conn_action a;
              a.type = conn_action::kind::exit;
              a.exit_code = 42;
              return a;
            }
            case auth_status::full:
            case auth_status::bad_algo:
            case auth_status::failed:
              return fail_connection();
          }
          break;
        case K::auth_timeout:
          if (attempts_ < s_.auth_tries) return send_auth();
          return fail_connection();
        case K::auth_io_error:
          return fail_connection();
        default:
          break;
      }
      break;

    case conn_state::waiting_acceptance:
    case conn_state::backoff:
      if (ev.type == K::timer) {
        attempts_ = 0;
        return send_auth();
      }
      break;

    case conn_state::connecting_pub:
      if (ev.type == K::pub_connected) {
        state_ = conn_state::starting;
        conn_action a;
        a.type = conn_action::kind::start_session;
        a.first_session = sessions_ == 0;
        return a;
      }
      if (ev.type == K::pub_failed) return fail_connection();
      break;

    case conn_state::starting:
      if (ev.type == K::session_ok) {
        ++sessions_;
        backoff_ = s_.backoff_initial;
        state_ = conn_state::serving;
        conn_action a;
        a.type = conn_action::kind::serve;
        return a;
      }
      if (ev.type == K::session_failed || ev.type == K::pub_closed) return fail_connection();
      break;

    case conn_state::serving:
      if (ev.type == K::pub_closed) return fail_connection();
      break;

    case conn_state::exiting:
    case conn_state::stopped:
      break;
  }
  // An event that does not apply to the current state: keep going as we were. The driver
  // only reports events for the action it performed, so this is a programming error.
  return {};
}

}  // namespace sylvite::minion
