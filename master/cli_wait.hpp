// sylvite::master the wait of `salt` for a job's returns, as a state machine (sans-I/O):
// Salt's LocalClient logic (salt/client/__init__.py get_iter_returns / get_cli_event_returns)
// for one published job. No sockets, no clock, no threads: the driver (master/cli_service.cpp)
// feeds events, each carrying `now`, and performs the returned actions in order.
// Thread-safety: none; one machine is driven by one thread at a time.
//
// Events (what the driver reports)                Actions (what the driver does)
//   start(minions)        after the publish         push_return(item)  send one return to the CLI
//   return_arrived(id, load)  a return of the job   publish_find_job(ids)  saltutil.find_job
//   find_job_published(jid, minions)  answer to        [job jid] to those of ids still
//                         publish_find_job: the        connected; the driver answers with
//                         find_job jid and whom it     find_job_published (minions empty:
//                         reached (empty: nobody)      nothing was published)
//   find_job_reply(jid, id, running)  a return of   arm_timer(at)  report timer_fired(now)
//                         a find_job job               at or after `at`
//   timer_fired           (stale ones are ignored)  finish(no_return)  send {"done"}, drop
//   client_gone / stopping  the CLI left or the        the subscriptions; no event after it
//                         master stops                 counts
//
// Rules
//   W1 start: expect the minions; deadline = now + timeout; arm it. No minion -> finish([]).
//   W2 return_arrived of an expected or unexpected minion: push_return once per id
//      (duplicates are dropped). When every expected minion has returned: finish([]).
//   W3 the deadline passes in the wait phase: publish_find_job(expected minions that have not
//      returned); the phase is `asking` until find_job_published.
//   W4 find_job_published(jid, reached): nobody reached -> finish(missing). Otherwise
//      phase find, pending = reached, running = {}, deadline = now + gather_job_timeout.
//   W5 find_job_reply for the current find jid in phase find: the minion is no longer
//      pending; `running` (the return is a non-empty map: the job is in its process
//      list) adds it to the running set. Replies for an older find jid are ignored.
//   W6 the find round ends when nobody is pending or its deadline passes: if no minion
//      that has not returned is running -> finish(missing); else back to the wait phase
//      with deadline = now + timeout (Salt keeps waiting while the job runs).
//   W7 client_gone or stopping: finish(missing) (the driver's reply reaches nobody when
//      the client is gone).
//   After finish every event returns no action.
#pragma once
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master {

using wait_ms = std::chrono::milliseconds;
using wait_time = std::chrono::time_point<std::chrono::steady_clock, wait_ms>;

struct wait_settings {
  std::string jid;                  // the job waited for
  wait_ms timeout{5000};            // Salt's -t / timeout
  wait_ms gather_job_timeout{10000};  // Salt's gather_job_timeout (at least 1 s)
};

struct wait_event {
  enum class kind { start, return_arrived, find_job_published, find_job_reply, timer_fired, client_gone, stopping };
  kind type = kind::start;
  wait_time now{};
  std::string id;                          // return_arrived, find_job_reply
  std::string jid;                         // find_job_published, find_job_reply
  wire::value load;                        // return_arrived: the return's event data
  std::vector<std::string> minions;        // start: expected; find_job_published: reached
  bool running = false;                    // find_job_reply

  static wait_event make(kind k, wait_time now) {
    wait_event e;
    e.type = k;
    e.now = now;
    return e;
  }
};

struct wait_action {
  enum class kind { push_return, publish_find_job, arm_timer, finish };
  kind type = kind::finish;
  std::string id;                    // push_return
  wire::value load;                  // push_return: the return's event data
  std::vector<std::string> ids;      // publish_find_job: candidates; finish: no_return
  wait_time at{};                    // arm_timer
};

// Salt's find_job answer: the job is still running when the return is a non-empty map.
bool find_job_running(const wire::value& find_job_return_load);

class job_wait {
 public:
  enum class phase { idle, wait, asking, find, done };

  explicit job_wait(wait_settings s);

  std::vector<wait_action> resume(const wait_event& ev);

  phase state() const noexcept { return phase_; }
  bool finished() const noexcept { return phase_ == phase::done; }
  const std::string& jid() const noexcept { return s_.jid; }
  const std::string& find_jid() const noexcept { return find_jid_; }
  wait_time deadline() const noexcept { return deadline_; }
  const std::set<std::string>& returned() const noexcept { return returned_; }
  const std::set<std::string>& running() const noexcept { return running_; }
  const std::set<std::string>& pending() const noexcept { return pending_; }
  // Expected minions that have not returned, sorted.
  std::vector<std::string> missing() const;

 private:
  using out = std::vector<wait_action>;
  void arm(out& o, wait_time at);
  void finish(out& o);
  bool all_returned() const;
  void end_find_round(out& o, wait_time now);

  wait_settings s_;
  phase phase_ = phase::idle;
  std::set<std::string> expected_;
  std::set<std::string> returned_;
  std::set<std::string> pending_;   // find round: asked, no answer yet
  std::set<std::string> running_;   // find round: answered "running"
  std::string find_jid_;
  wait_time deadline_{};
};

}  // namespace sylvite::master
