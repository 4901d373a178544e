// sylvite::master job_wait (see cli_wait.hpp for the rules W1..W7).
#include "master/cli_wait.hpp"

#include <algorithm>

namespace sylvite::master {

bool find_job_running(const wire::value& load) {
  const wire::value* r = wire::find(load, "return");
  return r && r->is_object() && !r->empty();
}

job_wait::job_wait(wait_settings s) : s_(std::move(s)) {
  if (s_.gather_job_timeout < wait_ms(1000)) s_.gather_job_timeout = wait_ms(1000);
  if (s_.timeout < wait_ms(0)) s_.timeout = wait_ms(0);
}

std::vector<std::string> job_wait::missing() const {
  std::vector<std::string> m;
  for (const auto& id : expected_)
    if (!returned_.count(id)) m.push_back(id);
  return m;
}

bool job_wait::all_returned() const {
  return std::all_of(expected_.begin(), expected_.end(), [&](const std::string& id) { return returned_.count(id); });
}

void job_wait::arm(out& o, wait_time at) {
  deadline_ = at;
  wait_action a;
  a.type = wait_action::kind::arm_timer;
  a.at = at;
  o.push_back(std::move(a));
}

void job_wait::finish(out& o) {
  phase_ = phase::done;
  wait_action a;
  a.type = wait_action::kind::finish;
  a.ids = missing();
  o.push_back(std::move(a));
}

void job_wait::end_find_round(out& o, wait_time now) {  // W6
  for (auto it = running_.begin(); it != running_.end();) {
    if (returned_.count(*it)) it = running_.erase(it);
    else ++it;
  }
  pending_.clear();
  if (running_.empty()) {
    finish(o);
    return;
  }
  phase_ = phase::wait;
  arm(o, now + s_.timeout);
}

std::vector<wait_action> job_wait::resume(const wait_event& ev) {
  out o;
  if (phase_ == phase::done) return o;
  using k = wait_event::kind;
  switch (ev.type) {
    case k::start: {  // W1
      if (phase_ != phase::idle) break;
      expected_ = std::set<std::string>(ev.minions.begin(), ev.minions.end());
      if (expected_.empty()) {
        finish(o);
        break;
      }
      phase_ = phase::wait;
      arm(o, ev.now + s_.timeout);
      break;
    }
    case k::return_arrived: {  // W2
      if (phase_ == phase::idle || ev.id.empty()) break;
      if (!returned_.insert(ev.id).second) break;
      running_.erase(ev.id);
      wait_action a;
      a.type = wait_action::kind::push_return;
      a.id = ev.id;
      a.load = ev.load;
      o.push_back(std::move(a));
      if (all_returned()) {
        finish(o);
        break;
      }
      // A pending find_job minion that returned counts as answered.
      if (phase_ == phase::find && pending_.erase(ev.id) && pending_.empty()) end_find_round(o, ev.now);
      break;
    }
    case k::timer_fired: {
      if (ev.now < deadline_) break;  // stale: re-armed later
      if (phase_ == phase::wait) {    // W3
        phase_ = phase::asking;
        wait_action a;
        a.type = wait_action::kind::publish_find_job;
        a.ids = missing();
        o.push_back(std::move(a));
      } else if (phase_ == phase::find) {  // W6 by deadline
        end_find_round(o, ev.now);
      }
      break;
    }
    case k::find_job_published: {  // W4
      if (phase_ != phase::asking) break;
      std::set<std::string> reached;
      for (const auto& id : ev.minions)
        if (!returned_.count(id)) reached.insert(id);
      if (ev.jid.empty() || ev.minions.empty()) {
        finish(o);
        break;
      }
      find_jid_ = ev.jid;
      pending_ = std::move(reached);
      running_.clear();
      phase_ = phase::find;
      arm(o, ev.now + s_.gather_job_timeout);
      if (pending_.empty()) end_find_round(o, ev.now);  // all returned meanwhile
      break;
    }
    case k::find_job_reply: {  // W5
      if (phase_ != phase::find || ev.jid != find_jid_ || ev.id.empty()) break;
      pending_.erase(ev.id);
      if (ev.running && !returned_.count(ev.id)) running_.insert(ev.id);
      if (pending_.empty()) end_find_round(o, ev.now);
      break;
    }
    case k::client_gone:
    case k::stopping:  // W7
      finish(o);
      break;
  }
  return o;
}

}  // namespace sylvite::master
