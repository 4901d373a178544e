// sylvite::minion replay_guard: refuses a publish that was captured and sent again
// (issue 14 item 7). Three checks, on top of Salt's per-connection serial (Crypticle):
//   - time: a sylvite master's serial is its wall clock in microseconds
//     (core/util/pub_serial.hpp); such a publish is refused when it is older than
//     publish_replay_window, further in the future than that (the master's clock is ahead),
//     or older than this minion's own start (jids seen before a restart are forgotten,
//     and a publish made before the minion ran cannot be meant for it);
//   - jids: a jid is remembered for publish_replay_window (at least the last
//     minion_jid_queue_hwm jids, at most k_max_jids) and a second publish of it is refused,
//     whichever master or connection it comes on;
//   - log lines for refusals are rate-limited (one line per k_log_interval with a count),
//     since whoever can inject publishes can repeat them.
// A Salt master's counter serial (or none: a Salt master in cluster mode sends none)
// gets the jid check only. Sans-I/O: the caller passes the wall clock in.
// Thread-safety: none; used on the minion's io thread only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace sylvite::minion {

struct replay_settings {
  std::int64_t window_us = 600'000'000;  // publish_replay_window; 0 turns the time checks off
  std::int64_t started_us = 0;           // this minion's start, wall clock
  std::size_t min_jids = 100;            // minion_jid_queue_hwm
};

enum class replay_verdict { ok, too_old, from_future, before_start, duplicate_jid };

struct replay_check {
  replay_verdict verdict = replay_verdict::ok;
  std::string reason;        // for the log line (empty when ok)
  std::uint64_t log_count = 0;  // 0: do not log now; else refusals this line stands for
};

class replay_guard {
 public:
  static constexpr std::size_t k_max_jids = 100'000;
  static constexpr std::int64_t k_log_interval_us = 10'000'000;

  explicit replay_guard(replay_settings s) : s_(s) {}

  // Time checks on a publish's serial (nullopt when it had none). No state changes
  // except the log limiter.
  replay_check check_time(std::optional<std::int64_t> serial, std::int64_t now_us);
  // Remember jid (true) or refuse a jid already remembered (duplicate_jid).
  replay_check check_jid(const std::string& jid, std::int64_t now_us);

  // Count one refused publish for the rate-limited log; each kind (a verdict here, the
  // reason text for refusals decided elsewhere: bad signature, stale serial) has its own
  // limiter (at most k_max_log_kinds, then one shared). Non-zero: log now, the line
  // standing for that many refusals.
  std::uint64_t log_hit(std::int64_t now_us, const std::string& kind);
  static constexpr std::size_t k_max_log_kinds = 64;

  std::size_t jids_remembered() const noexcept { return order_.size(); }
  std::uint64_t refused() const noexcept { return refused_; }

 private:
  replay_check refuse(replay_verdict v, std::string reason, std::int64_t now_us);
  void evict(std::int64_t now_us);

  replay_settings s_;
  std::unordered_map<std::string, std::int64_t> seen_;    // jid -> when remembered
  std::deque<std::pair<std::int64_t, std::string>> order_;  // oldest first
  struct limiter {
    std::int64_t last_us = 0;
    std::uint64_t unlogged = 0;
  };
  std::unordered_map<std::string, limiter> limiters_;  // per kind
  std::uint64_t refused_ = 0;
  bool overflow_logged_ = false;
};

}  // namespace sylvite::minion
