// sylvite::minion multi-master state machine; the rules are in masters.hpp.
// Thread-safety: none (one owner thread).
#include "minion/masters.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/config/config.hpp"

namespace sylvite::minion {

std::string_view to_string(loss_reason r) {
  switch (r) {
    case loss_reason::rst: return "rst";
    case loss_reason::eof: return "eof";
    case loss_reason::timeout: return "timeout";
  }
  return "eof";
}

masters_settings masters_settings_from(const config::minion_config& c, std::uint64_t seed) {
  masters_settings s;
  s.masters = c.master;
  s.mode = c.master_type == "failover" ? mm_mode::failover : mm_mode::hot;
  s.minion_id = c.id;
  s.shuffle = c.random_master || c.master_shuffle;
  s.failback = c.master_failback;
  using std::chrono::seconds;
  if (c.master_alive_interval > 0) s.alive_window = seconds(c.master_alive_interval);
  if (c.master_failback_interval > 0) {
    s.failback_interval = seconds(c.master_failback_interval);
  } else if (c.master_alive_interval > 0) {
    s.failback_interval = seconds(c.master_alive_interval);  // Salt's eval_master does this
  }
  s.random_reauth_delay = seconds(std::max(0, c.random_reauth_delay));
  s.heartbeat_misses = std::max(1, c.master_alive_misses);
  s.probe_timeout = seconds(std::max(1, c.master_probe_timeout));
  s.failback_probes = std::max(1, c.master_failback_probes);
  s.backoff_max = seconds(std::max({1, c.acceptance_wait_time, c.acceptance_wait_time_max}));
  s.retry_dns = seconds(std::max(0, c.retry_dns));
  s.seed = seed;
  return s;
}

masters_fsm::masters_fsm(masters_settings s) : s_(std::move(s)), rng_(s_.seed), m_(s_.masters.size()) {
  if (s_.heartbeat_misses < 1) s_.heartbeat_misses = 1;
  if (s_.failback_probes < 1) s_.failback_probes = 1;
  if (s_.backoff_initial < mm_ms(1)) s_.backoff_initial = mm_ms(1);
  if (s_.backoff_max < s_.backoff_initial) s_.backoff_max = s_.backoff_initial;
  if (s_.alive_window <= mm_ms(0)) s_.alive_window = mm_ms(30000);
  if (s_.failback_interval <= mm_ms(0)) s_.failback_interval = mm_ms(60000);
  for (std::size_t i = 0; i < m_.size(); ++i) original_.push_back(i);
  if (s_.mode == mm_mode::failover && s_.shuffle && original_.size() > 1) {
    // F1: with failback only the secondaries are shuffled. Fisher-Yates by hand: the
    // result must not depend on the standard library's shuffle algorithm.
    std::size_t first = s_.failback ? 1 : 0;
    for (std::size_t i = original_.size() - 1; i > first; --i) {
      std::uniform_int_distribution<std::size_t> d(first, i);
      std::swap(original_[i], original_[d(rng_)]);
    }
  }
  order_ = original_;
}

bool masters_fsm::is_up(std::size_t i) const noexcept {
  return i < m_.size() && m_[i].state == master::st::up;
}

mm_ms masters_fsm::heartbeat_interval() const noexcept {
  return std::max(mm_ms(1), s_.alive_window / s_.heartbeat_misses);
}

void masters_fsm::arm(out& o, timer_id id, mm_time at) {
  armed_[id] = at;
  mm_action a;
  a.type = mm_action::kind::schedule;
  a.timer = id;
  a.index = id.index;
  a.at = at;
  o.push_back(std::move(a));
}

void masters_fsm::log(out& o, mm_log_level l, std::string msg) {
  mm_action a;
  a.type = mm_action::kind::log;
  a.level = l;
  a.text = std::move(msg);
  o.push_back(std::move(a));
}

mm_ms masters_fsm::jitter_upto(mm_ms n) {
  if (n <= mm_ms(0)) return mm_ms(0);
  std::uniform_int_distribution<std::int64_t> d(0, n.count());
  return mm_ms(d(rng_));
}

// C1: b doubles (from backoff_initial) up to backoff_max; the wait is b/2 + uniform(0..b/2).
mm_ms masters_fsm::next_backoff(mm_ms& b) {
  b = b <= mm_ms(0) ? s_.backoff_initial : std::min(s_.backoff_max, b * 2);
  mm_ms half = b / 2;
  return half + jitter_upto(b - half);
}

void masters_fsm::note_ip(out& o, std::size_t i, const std::string& ip) {
  if (ip.empty()) return;
  std::string& last = s_.mode == mm_mode::failover ? last_ip_ : m_[i].ip;
  if (!last.empty() && last != ip) {
    log(o, mm_log_level::warning, "Master ip address changed from " + last + " to " + ip);
  }
  last = ip;
}

std::vector<mm_action> masters_fsm::handle(const mm_event& ev) {
  out o;
  using k = mm_event::kind;
  const bool per_master = ev.type != k::start && ev.type != k::timer && ev.type != k::job_started &&
                          ev.type != k::job_finished;
  if (per_master && ev.index >= m_.size()) {
    log(o, mm_log_level::debug, "multi-master: event for unknown master index " + std::to_string(ev.index));
    return o;
  }
  if (!started_ && ev.type != k::start && ev.type != k::job_started && ev.type != k::job_finished) return o;
  const std::size_t i = ev.index;
  switch (ev.type) {
    case k::start:
      if (started_) break;
      started_ = true;
      if (m_.empty()) {
        log(o, mm_log_level::error, "No master configured");
        break;
      }
      if (s_.mode == mm_mode::hot) {
        for (std::size_t j = 0; j < m_.size(); ++j) {  // H1
          m_[j].state = master::st::connecting;
          mm_action a;
          a.type = mm_action::kind::connect;
          a.index = j;
          a.at = ev.now;
          o.push_back(std::move(a));
        }
      } else {
        start_pass(o, ev.now, false);  // F1
      }
      break;
    case k::connected: on_connected(o, ev); break;
    case k::connect_failed: on_attempt_failed(o, i, ev.now, "connect failed", false); break;
    case k::dns_failed: on_attempt_failed(o, i, ev.now, "DNS resolution failed", true); break;
    case k::dns_resolved: note_ip(o, i, ev.ip); break;
    case k::connection_lost:
      if (m_[i].state == master::st::up) {
        on_dead(o, i, ev.now, std::string(to_string(ev.reason)));
      } else {
        on_attempt_failed(o, i, ev.now, "connection lost (" + std::string(to_string(ev.reason)) + ")", false);
      }
      break;
    case k::heartbeat_ok:
      on_answer(o, i, ev.answered == mm_time{} ? ev.now : std::min(ev.answered, ev.now), ev.rtt, ev.samples);
      break;
    case k::heartbeat_missed: on_heartbeat_missed(o, i, ev.now); break;
    case k::probe_ok: on_probe(o, i, ev.now, true, ev.rtt); break;
    case k::probe_failed: on_probe(o, i, ev.now, false); break;
    case k::timer: on_timer(o, ev); break;
    case k::job_started: jobs_.insert(ev.jid); break;
    case k::job_finished:
      jobs_.erase(ev.jid);
      if (started_ && jobs_.empty() && failback_pending_) maybe_failback(o, ev.now);
      break;
    case k::aes_rotated: on_aes(o, i, ev.now); break;
  }
  return o;
}

void masters_fsm::on_timer(out& o, const mm_event& ev) {
  auto it = armed_.find(ev.timer);
  if (it == armed_.end() || ev.now < it->second) return;  // stale or re-armed later
  armed_.erase(it);
  const std::size_t i = ev.timer.index;
  switch (ev.timer.type) {
    case timer_id::kind::retry:  // H2
      if (i < m_.size() && m_[i].state == master::st::backoff) {
        m_[i].state = master::st::connecting;
        mm_action a;
        a.type = mm_action::kind::connect;
        a.index = i;
        a.at = ev.now;
        o.push_back(std::move(a));
      }
      break;
    case timer_id::kind::cycle:  // F4
      if (s_.mode == mm_mode::failover && !active_ && !attempt_) start_pass(o, ev.now, false);
      break;
    case timer_id::kind::failback:  // F5
      if (s_.mode == mm_mode::failover && s_.failback && active_ && *active_ != primary()) {
        failback_probe_out_ = true;
        mm_action a;
        a.type = mm_action::kind::send_probe;
        a.index = primary();
        a.timeout = s_.probe_timeout;
        o.push_back(std::move(a));
        arm(o, timer_id{timer_id::kind::probe_deadline, primary()}, ev.now + s_.probe_timeout);
        arm(o, timer_id{timer_id::kind::failback, 0}, ev.now + s_.failback_interval);
      }
      break;
    case timer_id::kind::probe_deadline:
      if (i < m_.size()) {
        if (m_[i].probing && m_[i].state == master::st::up) {
          on_probe(o, i, ev.now, false);
        } else if (failback_probe_out_ && i == primary()) {
          on_probe(o, i, ev.now, false);
        }
      }
      break;
    case timer_id::kind::suspect:  // C2: nothing answered for the whole window
      if (i < m_.size() && m_[i].state == master::st::up && !m_[i].probing &&
          ev.now - m_[i].last_answer >= s_.alive_window)
        suspect(o, i, ev.now,
                "no answer for " + std::to_string((ev.now - m_[i].last_answer).count()) + " ms");
      break;
  }
}

void masters_fsm::on_connected(out& o, const mm_event& ev) {
  const std::size_t i = ev.index;
  master& m = m_[i];
  if (s_.mode == mm_mode::failover && (!attempt_ || *attempt_ != i)) {
    mm_action a;  // a late answer from an abandoned attempt: not ours any more
    a.type = mm_action::kind::disconnect;
    a.index = i;
    a.text = "superseded";
    o.push_back(std::move(a));
    return;
  }
  if (s_.mode == mm_mode::hot && m.state != master::st::connecting) {
    if (m.state != master::st::up) {  // an answer after we gave up on the attempt
      mm_action a;
      a.type = mm_action::kind::disconnect;
      a.index = i;
      a.text = "superseded";
      o.push_back(std::move(a));
    }
    return;
  }
  note_ip(o, i, ev.ip);
  const bool reconnect = s_.mode == mm_mode::hot ? m.ever_up : ever_connected_;
  m.state = master::st::up;
  m.backoff = mm_ms(0);
  m.misses.clear();
  m.probing = false;
  m.ever_up = true;
  m.last_answer = ev.now;
  arm(o, timer_id{timer_id::kind::suspect, i}, ev.now + s_.alive_window);
  std::string reason = "reconnect";
  std::string prev;
  if (s_.mode == mm_mode::failover) {
    attempt_.reset();
    active_ = i;
    cycle_backoff_ = mm_ms(0);
    ever_connected_ = true;
    if (!switch_reason_.empty()) reason = switch_reason_;
    if (previous_ && *previous_ != i) {
      prev = s_.masters[*previous_];
      if (reason == "reconnect") reason = "failover";
    }
    switch_reason_.clear();
    failback_ok_ = 0;
    failback_probe_out_ = false;
    failback_pending_ = false;
    if (s_.failback && i != primary()) arm(o, timer_id{timer_id::kind::failback, 0}, ev.now + s_.failback_interval);
  }
  log(o, mm_log_level::info, "Connected to master " + s_.masters[i]);
  if (reconnect) {
    mm_action a;  // C4
    a.type = mm_action::kind::fire_event;
    a.text = "salt/minion/" + s_.minion_id + "/reconnect";
    a.data = {{"master", s_.masters[i]}, {"reason", reason}};
    if (!prev.empty()) a.data["previous"] = prev;
    o.push_back(std::move(a));
  }
  mm_action f;
  f.type = mm_action::kind::return_queue_flush;
  f.index = i;
  o.push_back(std::move(f));
}

void masters_fsm::on_attempt_failed(out& o, std::size_t i, mm_time now, const std::string& why, bool dns) {
  master& m = m_[i];
  if (s_.mode == mm_mode::hot) {
    if (m.state == master::st::up) {
      on_dead(o, i, now, why);
      return;
    }
    if (m.state != master::st::connecting) return;
    m.state = master::st::backoff;
    mm_ms wait = next_backoff(m.backoff);
    if (dns && s_.retry_dns > mm_ms(0)) wait = std::max(wait, s_.retry_dns);
    log(o, mm_log_level::warning,
        "Master " + s_.masters[i] + ": " + why + ", retrying in " + std::to_string(wait.count()) + " ms");
    arm(o, timer_id{timer_id::kind::retry, i}, now + wait);
    return;
  }
  if (active_ && *active_ == i) {  // e.g. dns_failed while up: the connection still works
    if (!dns) on_dead(o, i, now, why);
    return;
  }
  if (!attempt_ || *attempt_ != i) return;
  m.state = master::st::idle;
  attempt_.reset();
  log(o, dns ? mm_log_level::error : mm_log_level::warning,
      "Master " + s_.masters[i] + ": " + why + ", trying the next master");  // F2
  if (pos_ + 1 < order_.size()) {
    try_position(o, pos_ + 1, now);
    return;
  }
  mm_ms wait = next_backoff(cycle_backoff_);  // F4
  log(o, mm_log_level::error,
      "No master could be reached, next pass in " + std::to_string(wait.count()) + " ms");
  arm(o, timer_id{timer_id::kind::cycle, 0}, now + wait);
}

void masters_fsm::on_dead(out& o, std::size_t i, mm_time now, const std::string& why) {
  master& m = m_[i];
  m.state = master::st::idle;
  m.misses.clear();
  m.probing = false;
  m.reauth_pending = false;
  mm_action d;
  d.type = mm_action::kind::disconnect;
  d.index = i;
  d.text = why;
  o.push_back(std::move(d));
  log(o, mm_log_level::warning, "Connection to master " + s_.masters[i] + " lost (" + why + ")");
  if (s_.mode == mm_mode::hot) {
    m.state = master::st::backoff;  // H2
    m.backoff = mm_ms(0);
    arm(o, timer_id{timer_id::kind::retry, i}, now + next_backoff(m.backoff));
    return;
  }
  if (!active_ || *active_ != i) return;
  previous_ = i;
  active_.reset();
  switch_reason_ = "failover";
  failback_probe_out_ = false;
  failback_pending_ = false;
  failback_ok_ = 0;
  // F3: the failed master goes to the end (Salt #35041), the pass starts at the new head.
  auto it = std::find(order_.begin(), order_.end(), i);
  if (it != order_.end()) std::rotate(it, it + 1, order_.end());
  start_pass(o, now, true);
}

void masters_fsm::on_heartbeat_missed(out& o, std::size_t i, mm_time now) {
  master& m = m_[i];
  if (m.state != master::st::up) return;
  m.misses.push_back(now);
  while (!m.misses.empty() && m.misses.front() + s_.alive_window < now) m.misses.pop_front();
  if (static_cast<int>(m.misses.size()) < s_.heartbeat_misses || m.probing) return;
  suspect(o, i, now, std::to_string(m.misses.size()) + " heartbeats missed");
}

// Every answer from an up master goes through here, with the round trips it measured (the
// accrual detector's samples): `rtt` of this answer (-1: none) and `samples` of other light
// requests since the last report.
void masters_fsm::on_answer(out& o, std::size_t i, mm_time at, std::chrono::microseconds rtt,
                            std::span<const std::chrono::microseconds> samples) {
  master& m = m_[i];
  if (m.state != master::st::up) return;
  for (auto r : samples) m.rtt.add(r);
  if (rtt.count() >= 0) m.rtt.add(rtt);
  m.misses.clear();
  m.probing = false;  // alive: the probe's deadline finds nothing to do
  if (at > m.last_answer) {
    m.last_answer = at;
    arm(o, timer_id{timer_id::kind::suspect, i}, at + s_.alive_window);
  }
}

mm_ms masters_fsm::probe_timeout_of(std::size_t i) const {
  if (i >= m_.size()) return s_.probe_timeout;
  auto t = m_[i].rtt.timeout();
  if (!t) return s_.probe_timeout;
  auto ms = std::chrono::ceil<mm_ms>(*t);
  return std::clamp(ms, std::min(s_.probe_floor, s_.probe_timeout), s_.probe_timeout);
}

// C2: one probe; the master is dead at its deadline only if it then answered nothing for
// the whole window.
void masters_fsm::suspect(out& o, std::size_t i, mm_time now, const std::string& why) {
  master& m = m_[i];
  m.probing = true;
  const mm_ms accrual = probe_timeout_of(i);
  const mm_time deadline = std::max(now + accrual, m.last_answer + s_.alive_window);
  log(o, mm_log_level::warning,
      "Master " + s_.masters[i] + ": " + why + ", probing (answer within " +
          std::to_string((deadline - now).count()) + " ms)");
  mm_action a;
  a.type = mm_action::kind::send_probe;
  a.index = i;
  a.timeout = deadline - now;
  o.push_back(std::move(a));
  arm(o, timer_id{timer_id::kind::probe_deadline, i}, deadline);
}

void masters_fsm::on_probe(out& o, std::size_t i, mm_time now, bool ok, std::chrono::microseconds rtt) {
  master& m = m_[i];
  if (m.probing && m.state == master::st::up) {  // C2 liveness probe
    if (ok) {
      on_answer(o, i, now, rtt);
      armed_.erase(timer_id{timer_id::kind::probe_deadline, i});
      return;
    }
    // A probe that failed early (its connection broke) waits for the deadline: dead only
    // after a whole window without an answer.
    if (now - m.last_answer < s_.alive_window) return;
    m.probing = false;
    m.misses.clear();
    armed_.erase(timer_id{timer_id::kind::probe_deadline, i});
    on_dead(o, i, now, "heartbeat");
    return;
  }
  if (s_.mode != mm_mode::failover || !s_.failback || i != primary() || !failback_probe_out_) return;
  failback_probe_out_ = false;  // F5 failback probe
  armed_.erase(timer_id{timer_id::kind::probe_deadline, i});
  if (!ok) {
    failback_ok_ = 0;
    failback_pending_ = false;
    return;
  }
  ++failback_ok_;
  if (failback_ok_ >= s_.failback_probes) maybe_failback(o, now);
}

void masters_fsm::maybe_failback(out& o, mm_time now) {
  if (!active_ || *active_ == primary() || failback_ok_ < s_.failback_probes) {
    failback_pending_ = false;
    return;
  }
  if (!jobs_.empty()) {
    if (!failback_pending_) {
      log(o, mm_log_level::info, "Primary master " + s_.masters[primary()] + " is back; failback waits for " +
                                     std::to_string(jobs_.size()) + " running job(s)");
    }
    failback_pending_ = true;
    return;
  }
  if (last_failback_ && now - *last_failback_ < s_.failback_interval) {
    failback_pending_ = false;  // rate limit: the next probe asks again
    return;
  }
  failback_pending_ = false;
  last_failback_ = now;
  const std::size_t from = *active_;
  m_[from].state = master::st::idle;
  m_[from].misses.clear();
  m_[from].probing = false;
  m_[from].reauth_pending = false;
  mm_action d;
  d.type = mm_action::kind::disconnect;
  d.index = from;
  d.text = "failback";
  o.push_back(std::move(d));
  log(o, mm_log_level::info, "Failing back from master " + s_.masters[from] + " to primary master " +
                                 s_.masters[primary()]);
  previous_ = from;
  active_.reset();
  switch_reason_ = "failback";
  failback_ok_ = 0;
  order_ = original_;
  start_pass(o, now, true);
}

void masters_fsm::on_aes(out& o, std::size_t i, mm_time now) {
  master& m = m_[i];
  if (m.state != master::st::up) return;
  if (m.reauth_pending && now < m.reauth_until) return;  // C5: one pending reauth
  m.reauth_pending = true;
  m.reauth_until = now + jitter_upto(s_.random_reauth_delay);
  mm_action a;
  a.type = mm_action::kind::reauth;
  a.index = i;
  a.at = m.reauth_until;
  o.push_back(std::move(a));
}

void masters_fsm::start_pass(out& o, mm_time now, bool jitter) {
  try_position(o, 0, jitter ? now + jitter_upto(s_.random_reauth_delay) : now);
}

void masters_fsm::try_position(out& o, std::size_t pos, mm_time at) {
  pos_ = pos;
  const std::size_t i = order_[pos];
  attempt_ = i;
  m_[i].state = master::st::connecting;
  log(o, mm_log_level::info, "Trying master " + s_.masters[i]);
  mm_action a;
  a.type = mm_action::kind::connect;
  a.index = i;
  a.at = at;
  o.push_back(std::move(a));
}

void rtt_accrual::add(std::chrono::microseconds rtt) {
  us_[next_] = static_cast<double>(std::max<std::int64_t>(0, rtt.count()));
  next_ = (next_ + 1) % kSamples;
  n_ = std::min(n_ + 1, kSamples);
}

std::optional<std::chrono::microseconds> rtt_accrual::timeout() const {
  if (n_ < kMinSamples) return std::nullopt;
  double sum = 0;
  for (std::size_t k = 0; k < n_; ++k) sum += us_[k];
  const double mean = sum / static_cast<double>(n_);
  double var = 0;
  for (std::size_t k = 0; k < n_; ++k) var += (us_[k] - mean) * (us_[k] - mean);
  const double sigma = std::max(std::sqrt(var / static_cast<double>(n_)), 25'000.0);
  return std::chrono::microseconds(static_cast<std::int64_t>(mean + 5.61 * sigma));
}

}  // namespace sylvite::minion
