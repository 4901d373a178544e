// sylvite::minion session state machine (see session.hpp for the rules).
#include "minion/session.hpp"

#include <algorithm>
#include <utility>

namespace sylvite::minion {

std::string_view to_string(session_phase p) {
  switch (p) {
    case session_phase::idle: return "idle";
    case session_phase::delaying: return "delaying";
    case session_phase::resolving: return "resolving";
    case session_phase::attempting: return "attempting";
    case session_phase::serving: return "serving";
    case session_phase::exiting: return "exiting";
    case session_phase::stopped: return "stopped";
  }
  return "unknown";
}

session_fsm::session_fsm(session_settings s) : s_(std::move(s)) {}

session_action session_fsm::act(session_action::kind k) const {
  session_action a;
  a.type = k;
  a.gen = gen_;
  return a;
}

void session_fsm::log(out& o, mm_log_level l, std::string text) const {
  session_action a = act(session_action::kind::log);
  a.level = l;
  a.text = std::move(text);
  o.push_back(std::move(a));
}

void session_fsm::report(out& o, mm_event::kind k, mm_time now, bool follow_up) const {
  session_action a = act(session_action::kind::report);
  a.event = mm_event::make(k, now, s_.index);
  a.follow_up = follow_up;
  o.push_back(std::move(a));
}

void session_fsm::wait(out& o, mm_ms delay, timer_use use) {
  timer_ = use;
  session_action a = act(session_action::kind::wait);
  a.delay = delay;
  a.seq = ++seq_;
  o.push_back(std::move(a));
}

// Forget this connection: a new generation, nothing held, no timer.
void session_fsm::close(out& o) {
  ++gen_;
  phase_ = session_phase::idle;
  conn_.reset();
  timer_ = timer_use::none;
  pub_lost_ = false;
  reauth_pending_ = false;
  flushing_ = false;
  held_.clear();
  o.push_back(act(session_action::kind::close));
}

void session_fsm::resolve(out& o) {
  phase_ = session_phase::resolving;
  o.push_back(act(session_action::kind::resolve));
}

void session_fsm::attempt_failed(out& o, const session_event& ev) {
  phase_ = session_phase::idle;
  conn_.reset();
  report(o, mm_event::kind::connect_failed, ev.now);
}

// Performs connection_fsm's action `a` (the attempt's next step).
void session_fsm::step(out& o, const conn_action& a, const session_event& ev) {
  using K = conn_action::kind;
  switch (a.type) {
    case K::none:
      // An event connection_fsm does not expect: the attempt ends (the driver reports only
      // the events of the action it performed, so this does not happen).
      phase_ = session_phase::idle;
      conn_.reset();
      return;
    case K::send_auth: {
      sign_in_timeout_ = a.delay;
      session_action s = act(session_action::kind::sign_in);
      s.delay = a.delay;
      o.push_back(std::move(s));
      return;
    }
    case K::wait:
      if (a.drop_connection) {
        // A failed attempt: masters_fsm decides the retry (hot) or the next master (failover).
        log(o, mm_log_level::info, "Master " + s_.label + " is not reachable");
        attempt_failed(o, ev);
        return;
      }
      log(o, mm_log_level::info, "Waiting " + std::to_string(a.delay.count() / 1000) + " seconds before retry.");
      wait(o, a.delay, timer_use::attempt_wait);
      return;
    case K::connect_pub: {
      pub_lost_ = false;
      session_action c = act(session_action::kind::connect_pub);
      c.port = a.port;
      o.push_back(std::move(c));
      return;
    }
    case K::start_session: {
      session_action st = act(session_action::kind::start);
      st.first = s_.failover ? !ev.minion_served : !ever_served_;
      o.push_back(std::move(st));
      return;
    }
    case K::serve:
      // Only reached from on_started, which handles it.
      return;
    case K::exit: {
      phase_ = session_phase::exiting;
      session_action x = act(session_action::kind::exit);
      x.code = a.exit_code;
      x.delay = a.delay;
      o.push_back(std::move(x));
      return;
    }
  }
}

void session_fsm::feed_conn(out& o, conn_event::kind k, const session_event& ev) {
  if (!conn_) return;
  conn_event ce;
  ce.type = k;
  ce.status = ev.status;
  ce.publish_port = ev.publish_port;
  step(o, conn_->handle(ce), ev);
}

void session_fsm::schedule_reauth(out& o, mm_time at, mm_time now) {
  if (phase_ != session_phase::serving) return;
  reauth_pending_ = true;
  const mm_ms delay = std::max(mm_ms(0), std::chrono::duration_cast<mm_ms>(at - now));
  if (delay > mm_ms(0))
    log(o, mm_log_level::info,
        "The master " + s_.label + " rotated its AES key; re-authenticating in " + std::to_string(delay.count()) +
            " ms");
  wait(o, delay, timer_use::reauth);
}

void session_fsm::hold(out& o, wire::value body) {
  if (held_.size() >= s_.max_held) {
    log(o, mm_log_level::error, "Too many publishes from " + s_.label + " waiting for re-authentication; dropping one");
    return;
  }
  held_.push_back(std::move(body));
}

void session_fsm::on_timer(out& o, const session_event& ev) {
  if (ev.seq != seq_ || timer_ == timer_use::none) return;  // replaced or cancelled
  const timer_use use = timer_;
  timer_ = timer_use::none;
  switch (use) {
    case timer_use::none: return;
    case timer_use::connect_delay:
      if (phase_ == session_phase::delaying) resolve(o);
      return;
    case timer_use::attempt_wait:
      if (phase_ == session_phase::attempting) feed_conn(o, conn_event::kind::timer, ev);
      return;
    case timer_use::reauth:
      o.push_back(act(session_action::kind::reauth));
      return;
  }
}

void session_fsm::on_signed_in(out& o, const session_event& ev) {
  if (phase_ != session_phase::attempting) return;
  switch (ev.outcome) {
    case sign_in_outcome::timeout:
      log(o, mm_log_level::warning,
          "SaltReqTimeoutError: the master at " + s_.label + " did not answer the sign-in in " +
              std::to_string(sign_in_timeout_.count() / 1000) + " s");
      feed_conn(o, conn_event::kind::auth_timeout, ev);
      return;
    case sign_in_outcome::io_error:
      feed_conn(o, conn_event::kind::auth_io_error, ev);
      return;
    case sign_in_outcome::result:
      break;
  }
  const bool fatal = ev.status == auth_status::rejected || ev.status == auth_status::finger_mismatch;
  if (!s_.single && fatal) {
    // With several masters one refusal is not the minion's end: masters_fsm retries it later.
    log(o, mm_log_level::critical,
        "Master " + s_.label + " " +
            (ev.status == auth_status::rejected ? "rejected this minion's key" : "does not match master_finger") +
            "; trying it again later");
    attempt_failed(o, ev);
    return;
  }
  const bool pending = ev.status == auth_status::pending || ev.status == auth_status::rejected_retry;
  if (s_.failover && !s_.single && pending) {
    log(o, mm_log_level::warning,
        "Master " + s_.label + " has not accepted this minion's key yet; trying the next master");
    attempt_failed(o, ev);
    return;
  }
  feed_conn(o, conn_event::kind::auth_result, ev);
}

void session_fsm::on_started(out& o, const session_event& ev) {
  if (phase_ != session_phase::attempting || !conn_) return;
  conn_event ce;
  ce.type = conn_event::kind::session_ok;
  const conn_action a = conn_->handle(ce);
  if (a.type != conn_action::kind::serve) {
    step(o, a, ev);
    return;
  }
  if (pub_lost_ || !ev.pub_up) {
    attempt_failed(o, ev);
    return;
  }
  if (!ev.minion_served) log(o, mm_log_level::info, "Minion is ready to receive requests!");
  phase_ = session_phase::serving;
  ever_served_ = true;
  session_action r = act(session_action::kind::report);
  r.event = mm_event::make(mm_event::kind::connected, ev.now, s_.index);
  r.event.ip = ip_;
  o.push_back(std::move(r));
  // From now on the publish socket's pub_closed reports the loss.
}

void session_fsm::on_fatal(out& o, const session_event& ev) {
  if (s_.single) {
    log(o, mm_log_level::critical, "Fatal sign-in outcome; the minion exits with code " + std::to_string(ev.code));
    phase_ = session_phase::exiting;
    session_action x = act(session_action::kind::exit);
    x.code = ev.code;
    o.push_back(std::move(x));
    return;
  }
  if (ev.gen != gen_ || phase_ != session_phase::serving) return;
  log(o, mm_log_level::critical,
      "Master " + s_.label + " " + (ev.code == 77 ? "rejected this minion's key" : "does not match master_finger"));
  phase_ = session_phase::idle;
  session_action r = act(session_action::kind::report);
  r.event = mm_event::make(mm_event::kind::connection_lost, ev.now, s_.index);
  r.event.reason = loss_reason::eof;
  o.push_back(std::move(r));
}

std::vector<session_action> session_fsm::handle(const session_event& ev) {
  using K = session_event::kind;
  out o;
  if (phase_ == session_phase::stopped) return o;
  // Results of an older connection (the driver's late callbacks) change nothing.
  switch (ev.type) {
    case K::resolved: case K::resolve_failed: case K::signed_in: case K::pub_connected: case K::pub_failed:
    case K::started: case K::start_failed: case K::pub_closed: case K::reauth_done: case K::publish:
    case K::publish_rotated: case K::rotation_reported: case K::flush_done:
      if (ev.gen != gen_) return o;
      break;
    default:
      break;
  }
  switch (ev.type) {
    case K::connect: {
      close(o);
      const auto delay = std::chrono::duration_cast<mm_ms>(ev.at - ev.now);
      if (delay <= mm_ms(0)) {
        resolve(o);
      } else {
        phase_ = session_phase::delaying;
        log(o, mm_log_level::info, "Connecting to master " + s_.label + " in " + std::to_string(delay.count()) + " ms");
        wait(o, delay, timer_use::connect_delay);
      }
      break;
    }
    case K::timer:
      on_timer(o, ev);
      break;
    case K::resolved: {
      if (phase_ != session_phase::resolving) break;
      ip_ = ev.ip;
      session_action r = act(session_action::kind::report);
      r.event = mm_event::make(mm_event::kind::dns_resolved, ev.now, s_.index);
      r.event.ip = ev.ip;
      o.push_back(std::move(r));
      session_action op = act(session_action::kind::open);
      op.ip = ev.ip;
      o.push_back(std::move(op));
      phase_ = session_phase::attempting;
      conn_.emplace(s_.conn, s_.jitter);
      feed_conn(o, conn_event::kind::start, ev);
      break;
    }
    case K::resolve_failed:
      if (phase_ != session_phase::resolving) break;
      log(o, mm_log_level::error, "Master hostname: '" + s_.host + "' not found or not responsive. Retrying.");
      phase_ = session_phase::idle;
      report(o, mm_event::kind::dns_failed, ev.now);
      break;
    case K::signed_in:
      on_signed_in(o, ev);
      break;
    case K::pub_connected:
    case K::pub_failed:
      if (phase_ == session_phase::attempting)
        feed_conn(o, ev.type == K::pub_connected ? conn_event::kind::pub_connected : conn_event::kind::pub_failed, ev);
      break;
    case K::started:
      on_started(o, ev);
      break;
    case K::start_failed:
      if (phase_ == session_phase::attempting) feed_conn(o, conn_event::kind::session_failed, ev);
      break;
    case K::pub_closed: {
      pub_lost_ = true;
      if (phase_ != session_phase::serving) break;  // the attempt in progress sees pub_lost
      phase_ = session_phase::idle;
      session_action r = act(session_action::kind::report);
      r.event = mm_event::make(mm_event::kind::connection_lost, ev.now, s_.index);
      r.event.reason = ev.reason;
      o.push_back(std::move(r));
      break;
    }
    case K::fatal:
      on_fatal(o, ev);
      break;
    case K::disconnect:
      log(o, mm_log_level::debug, "Closing the connection to master " + s_.label + " (" + ev.why + ")");
      close(o);
      break;
    case K::stop:
      close(o);
      phase_ = session_phase::stopped;
      break;
    case K::reauth:
      schedule_reauth(o, ev.at, ev.now);
      break;
    case K::reauth_done: {
      reauth_pending_ = false;
      std::vector<wire::value> held(std::make_move_iterator(held_.begin()), std::make_move_iterator(held_.end()));
      held_.clear();
      if (!ev.ok) {
        log(o, mm_log_level::error,
            "Re-authentication with master " + s_.label + " failed; " + std::to_string(held.size()) +
                " publish(es) dropped");
        break;
      }
      if (held.empty()) break;
      session_action r = act(session_action::kind::replay);
      r.bodies = std::move(held);
      o.push_back(std::move(r));
      break;
    }
    case K::publish:
      if (!ev.has_creds || reauth_pending_) {
        hold(o, ev.body);
        if (!reauth_pending_) schedule_reauth(o, ev.now, ev.now);
        break;
      }
      {
        session_action d = act(session_action::kind::decode);
        d.bodies.push_back(ev.body);
        o.push_back(std::move(d));
      }
      break;
    case K::publish_rotated:
      // The master rotated its AES key (or, with verify_master_pubkey_sign, its key pair):
      // re-authenticate, jittered by masters_fsm (C5), then decode what was held.
      hold(o, ev.body);
      report(o, mm_event::kind::aes_rotated, ev.now, true);
      break;
    case K::rotation_reported:
      if (!reauth_pending_) schedule_reauth(o, ev.now, ev.now);
      break;
    case K::heartbeat:
      if (phase_ != session_phase::serving) break;
      if (samples_.size() < 64) samples_.insert(samples_.end(), ev.samples.begin(), ev.samples.end());
      if (pinging_) break;
      if (ev.now - ev.last_ok < s_.heartbeat_interval) {
        report(o, mm_event::kind::heartbeat_ok, ev.now);
        o.back().event.answered = ev.last_ok;
        o.back().event.samples = std::exchange(samples_, {});
        break;
      }
      pinging_ = true;
      {
        session_action p = act(session_action::kind::ping);
        p.delay = std::min(s_.heartbeat_interval * 4 / 5, s_.probe_timeout);
        o.push_back(std::move(p));
      }
      break;
    case K::ping_done:
      pinging_ = false;
      if (ev.gen != gen_ || phase_ != session_phase::serving) break;
      if (!ev.ok) log(o, mm_log_level::debug, "Heartbeat to master " + s_.label + " missed");
      report(o, ev.ok ? mm_event::kind::heartbeat_ok : mm_event::kind::heartbeat_missed, ev.now);
      if (ev.ok) {
        o.back().event.rtt = ev.rtt;
        o.back().event.samples = std::exchange(samples_, {});
      }
      break;
    case K::probe: {
      session_action p = act(session_action::kind::probe);
      p.delay = ev.timeout > mm_ms(0) ? ev.timeout : s_.probe_timeout;
      p.on_channel = phase_ == session_phase::serving;
      o.push_back(std::move(p));
      break;
    }
    case K::probe_done:
      log(o, mm_log_level::debug,
          "Probe of master " + s_.label + ": " + (ev.ok ? std::string("answered") : std::string("no answer")));
      report(o, ev.ok ? mm_event::kind::probe_ok : mm_event::kind::probe_failed, ev.now);
      if (ev.ok) o.back().event.rtt = ev.rtt;
      break;
    case K::flush:
      if (flushing_ || phase_ != session_phase::serving || ev.queued == 0) break;
      flushing_ = true;
      o.push_back(act(session_action::kind::flush));
      break;
    case K::flush_done:
      flushing_ = false;
      // Returns queued while this flush ran go out with the next one.
      if (ev.sent > 0 && ev.queued > 0 && phase_ == session_phase::serving) {
        flushing_ = true;
        o.push_back(act(session_action::kind::flush));
      }
      break;
  }
  return o;
}

}  // namespace sylvite::minion
