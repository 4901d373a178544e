// sylvite::cluster outbound peer link state machine (see peer_link.hpp for the rules).
#include "cluster/peer_link.hpp"

#include <algorithm>

namespace sylvite::cluster {

using std::chrono::milliseconds;

std::string_view to_string(link_status s) {
  switch (s) {
    case link_status::connecting: return "connecting";
    case link_status::up: return "up";
    case link_status::backoff: return "backoff";
    case link_status::self: return "self";
    case link_status::duplicate: return "duplicate";
    case link_status::removed: return "removed";
  }
  return "?";
}

peer_link::peer_link(link_settings s) : s_(std::move(s)), rng_(s_.seed) {}

bool peer_link::sendable() const noexcept {
  return !stopped_ && status_ != link_status::self && status_ != link_status::duplicate &&
         status_ != link_status::removed;
}

void peer_link::log(out& o, link_log_level l, std::string text) {
  link_action a;
  a.type = link_action::kind::log;
  a.level = l;
  a.text = std::move(text);
  o.push_back(std::move(a));
}

namespace {
link_action act(link_action::kind k) {
  link_action a;
  a.type = k;
  return a;
}
}  // namespace

void peer_link::wait(out& o, milliseconds d) {
  link_action a = act(link_action::kind::arm_timer);
  a.delay = d;
  o.push_back(std::move(a));
}

void peer_link::finish(out& o) {
  phase_ = phase::over;
  o.push_back(act(link_action::kind::finish));
}

// L1, L2, L4: a new handshake (the old link, if any, is forgotten).
void peer_link::handshake(out& o) {
  phase_ = phase::handshaking;
  link_id_.clear();
  in_flight_ = 0;
  o.push_back(act(link_action::kind::connect));
  o.push_back(act(link_action::kind::send_hello));
}

// L3, L4: send what is queued, or wait idle.
void peer_link::next_after_up(out& o) {
  if (q_.empty()) {
    phase_ = phase::up_idle;
    return wait(o, s_.idle_wait);
  }
  phase_ = phase::sending;
  in_flight_ = std::min(q_.size(), s_.batch);
  link_action a = act(link_action::kind::send_batch);
  a.link_id = link_id_;
  a.seq = seq_;
  a.batch.assign(q_.begin(), q_.begin() + static_cast<std::ptrdiff_t>(in_flight_));
  o.push_back(std::move(a));
}

// L2
void peer_link::on_handshake_failed(out& o, const std::string& why) {
  if (why.find("a hello from myself") != std::string::npos) {
    status_ = link_status::self;
    peer_id_ = s_.self_id;
    q_.clear();
    log(o, link_log_level::debug, "cluster peer address " + s_.addr + " is this master; ignored");
    o.push_back(act(link_action::kind::close));
    return finish(o);
  }
  status_ = link_status::backoff;
  if (last_error_ != why) log(o, link_log_level::warning, "cluster link to " + s_.addr + " failed: " + why);
  last_error_ = why;
  o.push_back(act(link_action::kind::close));
  backoff_ = backoff_.count() == 0 ? s_.backoff_initial : std::min(s_.backoff_max, backoff_ * 2);
  const auto half = backoff_.count() / 2;
  const auto jitter = std::uniform_int_distribution<std::int64_t>(0, half)(rng_);
  phase_ = phase::backoff;
  wait(o, milliseconds(half + jitter));
}

// L3
void peer_link::on_welcome(out& o, const link_event& ev) {
  if (ev.duplicate) {
    status_ = link_status::duplicate;
    link_action h = act(link_action::kind::hand_over);
    h.peer_id = ev.peer_id;
    o.push_back(std::move(h));
    log(o, link_log_level::debug,
        "cluster peer " + ev.peer_id + " at " + s_.addr + " is already linked at another address");
    o.push_back(act(link_action::kind::close));
    return finish(o);
  }
  peer_id_ = ev.peer_id;
  status_ = link_status::up;
  last_error_.clear();
  link_id_ = ev.link_id;
  seq_ = 1;
  backoff_ = milliseconds(0);
  log(o, link_log_level::info, "cluster link to " + ev.peer_id + " (" + s_.addr + ") is up");
  link_action up = act(link_action::kind::report_up);
  up.peer_id = ev.peer_id;
  o.push_back(std::move(up));
  next_after_up(o);
}

std::vector<link_action> peer_link::resume(const link_event& ev) {
  using k = link_event::kind;
  out o;
  // External events: never a waiting action.
  switch (ev.type) {
    case k::removed:  // L6
      if (phase_ == phase::over || !sendable()) return o;
      status_ = link_status::removed;
      phase_ = phase::removed;
      q_.clear();
      in_flight_ = 0;
      link_id_.clear();
      o.push_back(act(link_action::kind::close));
      o.push_back(act(link_action::kind::wake));
      return o;
    case k::revived:
      if (phase_ == phase::over || status_ != link_status::removed) return o;
      status_ = link_status::connecting;
      phase_ = phase::idle;
      o.push_back(act(link_action::kind::wake));
      return o;
    case k::stop:  // L7
      if (phase_ == phase::over || stopped_) return o;
      stopped_ = true;
      o.push_back(act(link_action::kind::close));
      o.push_back(act(link_action::kind::wake));
      return o;
    default:
      break;
  }
  // Driver events: exactly one waiting action, last.
  if (phase_ == phase::over || stopped_) {  // L7 (stop closed the connection already)
    finish(o);
    return o;
  }
  switch (ev.type) {
    case k::start:
      handshake(o);
      break;
    case k::connect_failed:
    case k::welcome_refused:
      if (phase_ == phase::removed) {  // a late answer to the handshake of a removed link
        if (last_error_ != ev.why) log(o, link_log_level::warning, "cluster link to " + s_.addr + " failed: " + ev.why);
        last_error_ = ev.why;
        o.push_back(act(link_action::kind::close));
        wait(o, s_.removed_wait);
      } else {
        on_handshake_failed(o, ev.why);
      }
      break;
    case k::welcome:
      if (phase_ == phase::removed) {
        o.push_back(act(link_action::kind::close));
        wait(o, s_.removed_wait);
      } else {
        on_welcome(o, ev);
      }
      break;
    case k::ack:
      if (phase_ == phase::sending && ev.seq == seq_) {  // L4
        for (std::size_t i = 0; i < in_flight_ && !q_.empty(); ++i) q_.pop_front();
        sent_ += in_flight_;
        in_flight_ = 0;
        warned_full_ = false;
        ++seq_;
        next_after_up(o);
        break;
      }
      if (phase_ == phase::sending) {  // not this batch's ack: the link is out of step
        link_event f = link_event::make(k::ack_failed, "ack seq mismatch");
        return resume(f);
      }
      if (phase_ == phase::removed) wait(o, s_.removed_wait);
      else handshake(o);  // revived meanwhile: a new link
      break;
    case k::ack_failed:  // L4: reconnect at once, the queue kept
      if (last_error_ != ev.why)
        log(o, link_log_level::warning,
            "cluster link to " + peer_id_ + " (" + s_.addr + "): " + ev.why + "; reconnecting");
      last_error_ = ev.why;
      if (status_ == link_status::up) status_ = link_status::connecting;
      in_flight_ = 0;
      link_id_.clear();
      o.push_back(act(link_action::kind::close));
      if (phase_ == phase::removed) wait(o, s_.removed_wait);
      else handshake(o);
      break;
    case k::timer_fired:
      switch (phase_) {
        case phase::up_idle: next_after_up(o); break;
        case phase::removed: wait(o, s_.removed_wait); break;
        case phase::sending: next_after_up(o); break;  // not expected: resend the batch
        case phase::idle:
        case phase::handshaking:
        case phase::backoff: handshake(o); break;
        case phase::over: finish(o); break;
      }
      break;
    default:
      break;
  }
  return o;
}

peer_link::offer_result peer_link::offer(peer_message m) {
  offer_result r;
  if (!sendable()) return r;
  if (q_.size() >= s_.max_queue) {  // L5
    ++dropped_;
    if (!warned_full_) {
      warned_full_ = true;
      log(r.actions, link_log_level::error,
          "cluster peer " + (peer_id_.empty() ? std::string("?") : peer_id_) + " (" + s_.addr + "): queue full (" +
              std::to_string(q_.size()) + " messages); dropping messages until it drains");
    }
    return r;
  }
  q_.push_back(std::move(m));
  r.queued = true;
  if (phase_ == phase::up_idle || phase_ == phase::backoff) r.actions.push_back(act(link_action::kind::wake));
  return r;
}

std::deque<peer_message> peer_link::take_queue() {
  std::deque<peer_message> q;
  q.swap(q_);
  in_flight_ = 0;
  return q;
}

std::vector<link_action> peer_link::adopt(std::deque<peer_message> q) {
  out o;
  if (!sendable() || q.empty()) return o;
  for (auto& m : q) q_.push_back(std::move(m));
  if (phase_ == phase::up_idle || phase_ == phase::backoff) o.push_back(act(link_action::kind::wake));
  return o;
}

}  // namespace sylvite::cluster
