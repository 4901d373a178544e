// sylvite::cli batch execution (batch.hpp): Salt 3008.5's salt/utils/batch_state.py
// progress_batch as batch_machine, and salt/cli/batch.py Batch.run + salt/cli/salt.py
// _run_batch as run_batch, over the master's CLI IPC. Salt's lines, verbatim:
//   stdout  "Minion <id> did not respond. No job will be sent."   (down at the gather)
//           "\nExecuting run on ['a', 'b']\n"                      (each window)
//           "Minion '<id>' failed to respond to job sent"          (missing in a window)
//           "No minions matched the target."                       (gather matched none)
//           "\nNOTICE: Too many minions targeted, switching to batch execution."
//   stderr  "[ERROR   ] Batch run stopped due to failhard", "ERROR: No return received"
// Each return prints as Salt's CLIOutput.on_minion_return: {"retcode", "jid", <id>: ret}.
#include "master/cli/batch.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace sylvite::cli {

using wire::value;
namespace ipc = master::ipc;

// ---- sizing ------------------------------------------------------------------------------

// Python float(): optional blanks, sign, digits with one '.', exponent; inf/nan words.
std::optional<double> py_float_text(const std::string& text) {
  std::size_t b = text.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return std::nullopt;
  std::size_t e = text.find_last_not_of(" \t\n\r\f\v");
  std::string t = text.substr(b, e - b + 1);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  // strtod takes hex floats ("0x1p3"), Python does not
  if (t.find_first_of("xX") != std::string::npos) return std::nullopt;
  return d;
}

// Python int() of text: optional blanks and sign, decimal digits (underscores between).
std::optional<long long> py_int_text(const std::string& text) {
  std::size_t b = text.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return std::nullopt;
  std::size_t e = text.find_last_not_of(" \t\n\r\f\v");
  std::string t = text.substr(b, e - b + 1);
  bool neg = false;
  std::size_t i = 0;
  if (t[0] == '+' || t[0] == '-') neg = t[0] == '-', i = 1;
  if (i >= t.size()) return std::nullopt;
  long long v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c == '_' && prev_digit && i + 1 < t.size() && t[i + 1] >= '0' && t[i + 1] <= '9') {
      prev_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (1LL << 60)) return std::nullopt;  // absurd sizes: refuse rather than overflow
    v = v * 10 + (c - '0');
    prev_digit = true;
  }
  return neg ? -v : v;
}

namespace {
// Python's str.strip("%")
std::string strip_percent(const std::string& s) {
  std::size_t b = s.find_first_not_of('%');
  if (b == std::string::npos) return "";
  std::size_t e = s.find_last_not_of('%');
  return s.substr(b, e - b + 1);
}
}  // namespace

std::optional<long long> batch_bnum(const std::string& spec, std::size_t n_minions) {
  if (spec.find('%') != std::string::npos) {
    auto pct = py_float_text(strip_percent(spec));
    if (!pct || !std::isfinite(*pct)) return std::nullopt;
    double res = *pct / 100.0 * static_cast<double>(n_minions);
    if (res < 1) return static_cast<long long>(std::ceil(res));
    return static_cast<long long>(res);
  }
  return py_int_text(spec);
}

std::optional<std::size_t> batch_size_of(const std::string& spec, std::size_t n_minions) {
  auto b = batch_bnum(spec, n_minions);
  if (!b) return std::nullopt;
  return static_cast<std::size_t>(std::max<long long>(1, *b));
}

std::optional<std::vector<std::vector<std::string>>> batch_windows(const std::string& spec,
                                                                   const std::vector<std::string>& up) {
  auto size = batch_size_of(spec, up.size());
  if (!size) return std::nullopt;
  std::vector<std::vector<std::string>> out;
  for (std::size_t i = 0; i < up.size(); i += *size)
    out.emplace_back(up.begin() + static_cast<std::ptrdiff_t>(i),
                     up.begin() + static_cast<std::ptrdiff_t>(std::min(up.size(), i + *size)));
  return out;
}

std::string py_list_repr(const std::vector<std::string>& items) {
  value l = value::array();
  for (auto& i : items) l.push_back(i);
  return output::py_repr(l);
}

// ---- the state machine -------------------------------------------------------------------

batch_machine::batch_machine(std::vector<std::string> minions, settings s) : s_(s), pending_(std::move(minions)) {
  if (s_.batch_size == 0) s_.batch_size = 1;
}

batch_action batch_machine::progress(const std::vector<std::pair<std::string, batch_return>>& new_returns,
                                     const std::vector<std::string>& timed_out, clock::time_point now) {
  batch_action act;
  const bool bwait = s_.batch_wait.count() > 0;
  bool trip = false;
  for (const auto& [id, r] : new_returns) {
    if (done_.count(id) || failed_.count(id)) continue;  // duplicate: ignored
    active_.erase(id);
    if (r.failed) failed_[id] = "failed";
    else done_.insert(id);
    act.finished.push_back(id);
    if (bwait) wait_.push_back(now + s_.batch_wait);
    if (s_.failhard && (r.failed || r.retcode > 0)) trip = true;
  }
  for (const auto& id : timed_out) {
    if (done_.count(id) || failed_.count(id)) continue;
    active_.erase(id);
    failed_[id] = "timeout";
    act.timed_out.push_back(id);
    if (bwait) wait_.push_back(now + s_.batch_wait);
  }
  const auto window = s_.timeout + s_.gather_job_timeout;
  for (auto it = active_.begin(); it != active_.end();) {
    if (now - it->second >= window) {
      failed_[it->first] = "timeout";
      act.timed_out.push_back(it->first);
      if (bwait) wait_.push_back(now + s_.batch_wait);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(wait_, [&](clock::time_point t) { return t <= now; });
  std::sort(wait_.begin(), wait_.end());
  if (trip) halted_ = true;
  if (!halted_) {
    long long free_slots = static_cast<long long>(s_.batch_size) - static_cast<long long>(active_.size()) -
                           static_cast<long long>(wait_.size());
    while (free_slots > 0 && !pending_.empty()) {
      std::string id = pending_.front();
      pending_.erase(pending_.begin());
      active_[id] = now;
      act.publish.push_back(std::move(id));
      --free_slots;
    }
  }
  act.halted = halted_;
  return act;
}

std::optional<batch_machine::clock::time_point> batch_machine::next_due() const {
  std::optional<clock::time_point> due;
  auto take = [&](clock::time_point t) {
    if (!due || t < *due) due = t;
  };
  if (!wait_.empty()) take(wait_.front());
  const auto window = s_.timeout + s_.gather_job_timeout;
  for (const auto& [id, ts] : active_) take(ts + window);
  return due;
}

// ---- the driver --------------------------------------------------------------------------

namespace {

// What the window threads hand to the driver.
struct stream_event {
  enum class kind { item, final_reply, failure } type = kind::item;
  std::size_t window = 0;
  value body;         // item / final_reply
  std::string error;  // failure: the transport's text (master down or timed out)
};

struct event_queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<stream_event> q;
  void push(stream_event e) {
    {
      std::lock_guard lk(mu);
      q.push_back(std::move(e));
    }
    cv.notify_one();
  }
};

struct window {
  std::vector<std::string> minions;
  bool active = true;
  std::thread thread;  // joined once its stream has ended (or detached at the end)
};

// The master bounds each wait itself (timeout + find_job rounds while the job runs); ours
// only guards against a master that stops answering altogether, as salt_main's.
constexpr auto kStreamGuard = std::chrono::hours(24);

}  // namespace

std::optional<int> run_batch(const batch_request& req, const batch_output& out, const config::master_config& cfg,
                             cli_env& env) {
  std::ostream& so = *env.out;
  std::ostream& se = *env.err;
  auto out_for = [&](const std::string& fallback) { return out.flags.out.empty() ? fallback : out.flags.out; };

  // ---- gather (Salt's Batch.gather_minions): test.ping to the target -------------------
  ipc::publish ping;
  ping.tgt = req.job.tgt;
  ping.tgt_type = req.job.tgt_type;
  ping.fun = "test.ping";
  ping.arg = value::array();
  ping.timeout = req.timeout;
  ping.user = req.job.user;
  ping.delimiter = req.job.delimiter;
  ping.wait = true;
  std::vector<std::string> matched;  // Salt's nret: whom the master published the ping to
  std::set<std::string> answered;    // fret
  std::vector<std::string> answered_order;
  auto g = env.request_stream(
      cfg, ipc::encode(ping),
      [&](const value& body) {
        auto d = ipc::decode_publish_push(body);
        if (!d) return;
        if (auto* it = std::get_if<ipc::return_item>(&*d)) {
          if (answered.insert(it->id).second) answered_order.push_back(it->id);
        } else {
          const auto& head = std::get<ipc::publish_head>(*d);
          matched.insert(matched.end(), head.minions.begin(), head.minions.end());
        }
      },
      kStreamGuard);
  if (!g.body) {
    so << g.error << "\n";
    return ex_client_error;
  }
  std::string gather_error;
  if (auto fin = ipc::decode_publish_final(*g.body)) {
    if (auto* e = std::get_if<ipc::error_reply>(&*fin)) gather_error = e->error;
  }

  if (req.safe_limit > 1) {
    // Salt's _preview_target counts the matched minions (answering or not).
    if (static_cast<long long>(matched.size()) < req.safe_limit) return std::nullopt;
    so << "\nNOTICE: Too many minions targeted, switching to batch execution.\n";
  }
  if (!gather_error.empty()) {
    // LocalClient._check_pub_data prints the master's message even in quiet mode.
    so << gather_error << "\n";
    if (!req.quiet) so << "No minions matched the target.\n";
  }
  std::vector<std::string> minions(answered.begin(), answered.end());  // sorted
  std::vector<std::string> down;
  for (auto& id : matched)
    if (!answered.count(id)) down.push_back(id);
  std::sort(down.begin(), down.end());
  down.erase(std::unique(down.begin(), down.end()), down.end());

  auto no_return = [&] {
    if (req.quiet) emit(out.flags, output::display(out_for("nested"), value::object(), out.opt), so);
    se << "ERROR: No return received\n";
    return ex_client_error;
  };
  if (minions.empty()) return no_return();

  auto size = batch_size_of(req.spec, minions.size());
  if (!size) {
    // Salt's get_batch_size raises SaltInvocationError out of Batch.run (after the
    // gather); Salt's global handler prints it with a traceback and exits 1.
    se << "[ERROR   ] An un-handled exception was caught by Salt's global exception handler:\n"
       << "SaltInvocationError: Invalid batch specification " << output::py_repr(value(req.spec))
       << ": must be an integer or percentage string like '10' or '25%'.\n";
    return ex_generic;
  }
  if (!req.quiet) {
    for (auto& id : down) so << "Minion " << id << " did not respond. No job will be sent.\n";
    so << std::flush;
  }

  batch_machine::settings ms;
  ms.batch_size = *size;
  ms.failhard = req.failhard;
  ms.batch_wait = std::chrono::milliseconds(static_cast<long long>(std::max(0.0, req.batch_wait) * 1000.0));
  ms.timeout = std::chrono::seconds(std::max(1, req.timeout));
  ms.gather_job_timeout = std::chrono::seconds(std::max(1, req.gather_job_timeout));
  batch_machine m(minions, ms);

  // ---- windows ------------------------------------------------------------------------
  auto q = std::make_shared<event_queue>();
  std::vector<window> windows;
  std::string batch_jid;  // the first window's jid; later windows publish under it
  std::set<std::string> seen;
  std::set<std::string> items_seen;  // ids whose return arrived
  int retcode = 0;
  value all = value::object();  // --static
  const config::master_config cfg_copy = cfg;
  auto stream_fn = env.request_stream;

  auto start_window = [&](const std::vector<std::string>& ids) {
    ipc::publish p = req.job;
    p.tgt = value::array();
    for (auto& id : ids) p.tgt.push_back(id);
    p.tgt_type = "list";
    p.timeout = req.timeout;
    p.wait = true;
    if (!batch_jid.empty()) p.jid = batch_jid;
    const std::size_t idx = windows.size();
    windows.emplace_back();
    windows.back().minions = ids;
    value body = ipc::encode(p);
    try {
      windows.back().thread = std::thread([q, idx, body, stream_fn, cfg_copy] {
        auto r = stream_fn(
            cfg_copy, body, [&](const value& item) { q->push({stream_event::kind::item, idx, item, {}}); },
            kStreamGuard);
        if (r.body) q->push({stream_event::kind::final_reply, idx, *r.body, {}});
        else q->push({stream_event::kind::failure, idx, nullptr, r.error});
      });
    } catch (const std::system_error& e) {
      q->push({stream_event::kind::failure, idx, nullptr, std::string("cannot start a window: ") + e.what()});
    }
  };

  while (true) {
    std::deque<stream_event> events;
    {
      std::unique_lock lk(q->mu);
      std::swap(events, q->q);
    }
    std::vector<std::pair<std::string, batch_return>> new_returns;
    std::map<std::string, ipc::return_item> items;
    std::vector<std::string> timed_out;
    for (auto& ev : events) {
      window& w = windows[ev.window];
      if (ev.type == stream_event::kind::item) {
        auto d = ipc::decode_publish_push(ev.body);
        if (!d) continue;  // not a message of this protocol: skipped
        if (auto* it = std::get_if<ipc::return_item>(&*d)) {
          if (!seen.insert(it->id).second) continue;  // another window's stream saw it first
          new_returns.push_back({it->id, {ipc::retcode_of(*it), false}});
          items.emplace(it->id, *it);
          items_seen.insert(it->id);
        } else {
          const auto& head = std::get<ipc::publish_head>(*d);
          if (batch_jid.empty()) batch_jid = head.jid;
          for (auto& id : head.missing) {
            // Salt's _iter_failed_missing_returns: {id: {"failed": True}}
            if (std::find(w.minions.begin(), w.minions.end(), id) == w.minions.end()) continue;
            if (!seen.insert(id).second) continue;
            new_returns.push_back({id, {0, true}});
          }
        }
        continue;
      }
      // The window's stream ended: whoever of it did not return timed out.
      w.active = false;
      if (w.thread.joinable()) w.thread.join();  // it pushed its last event: ends at once
      if (ev.type == stream_event::kind::failure) {
        so << ev.error << "\n";
      } else if (auto fin = ipc::decode_publish_final(ev.body)) {
        if (auto* e = std::get_if<ipc::error_reply>(&*fin)) so << e->error << "\n";
        else if (batch_jid.empty()) batch_jid = std::get<ipc::publish_done>(*fin).jid;
      }
      for (auto& id : w.minions) {
        if (!seen.count(id)) {
          seen.insert(id);
          timed_out.push_back(id);
        }
      }
    }

    auto act = m.progress(new_returns, timed_out, batch_machine::clock::now());
    if (!act.publish.empty()) {
      if (!req.quiet) {
        std::vector<std::string> sorted = act.publish;
        std::sort(sorted.begin(), sorted.end());
        so << "\nExecuting run on " << py_list_repr(sorted) << "\n\n" << std::flush;
      }
      start_window(act.publish);
    }
    bool halted_mid = false;
    for (auto& [id, r] : new_returns) {
      if (r.failed) {
        if (!req.quiet) so << "Minion '" << id << "' failed to respond to job sent\n" << std::flush;
      } else {
        const auto& it = items.at(id);
        retcode = std::max(retcode, r.retcode);
        if (req.quiet) {
          all[id] = it.ret;
        } else {
          // CLIOutput.on_minion_return: the return dict with "ret" renamed to the id
          // and "out" taken out as the outputter: {"retcode", "jid", id}.
          value data = value::object();
          data["retcode"] = it.retcode;
          data["jid"] = it.jid;
          data[id] = it.ret;
          std::string outname = "nested";
          if (it.out && output::known(*it.out)) outname = *it.out;
          emit(out.flags, output::display(out_for(outname), data, out.opt), so);
        }
      }
      if (m.halted()) {
        halted_mid = true;
        break;
      }
    }
    if (halted_mid) {
      if (req.log_errors) se << "[ERROR   ] Batch run stopped due to failhard\n" << std::flush;
      break;
    }
    for (auto& id : timed_out) {
      // Salt yields {id: {}} with retcode 0 for a minion its window gave up on; only
      // --static shows it.
      if (req.quiet) all[id] = value::object();
    }
    if (m.done()) break;

    std::unique_lock lk(q->mu);
    auto due = m.next_due();
    auto ready = [&] { return !q->q.empty(); };
    if (due) q->cv.wait_until(lk, *due, ready);
    else q->cv.wait(lk, ready);
  }

  // Salt exits as soon as the batch is done or halted, without waiting for windows whose
  // minions were given up on (timeout sweep) or for the rest after --failhard: their
  // returns still reach the job cache. A stream still open keeps running detached (it
  // owns what it touches: the queue, a copy of the config and of the request function).
  // A window all of whose minions returned gets its final reply at once: joined.
  for (auto& w : windows) {
    if (!w.thread.joinable()) continue;
    const bool all_back = std::all_of(w.minions.begin(), w.minions.end(),
                                      [&](const std::string& id) { return items_seen.count(id) > 0; });
    if (all_back) w.thread.join();
    else w.thread.detach();
  }

  if (req.quiet) {
    if (all.empty()) return no_return();
    emit(out.flags, output::display(out_for("nested"), all, out.opt), so);
    return ex_ok;
  }
  return retcode;
}

}  // namespace sylvite::cli
