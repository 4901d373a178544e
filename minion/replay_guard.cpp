// sylvite::minion replay_guard (see replay_guard.hpp).
#include "minion/replay_guard.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "core/util/pub_serial.hpp"

namespace sylvite::minion {

namespace {
double secs(std::int64_t us) { return static_cast<double>(us) / 1e6; }
}  // namespace

std::uint64_t replay_guard::log_hit(std::int64_t now_us, const std::string& kind) {
  ++refused_;
  auto it = limiters_.find(kind);
  if (it == limiters_.end())
    it = limiters_.try_emplace(limiters_.size() < k_max_log_kinds ? kind : std::string("(other)")).first;
  auto& l = it->second;
  ++l.unlogged;
  if (l.last_us != 0 && now_us - l.last_us < k_log_interval_us && now_us >= l.last_us) return 0;
  l.last_us = now_us;
  return std::exchange(l.unlogged, 0);
}

replay_check replay_guard::refuse(replay_verdict v, std::string reason, std::int64_t now_us) {
  replay_check r;
  r.verdict = v;
  r.reason = std::move(reason);
  static const char* const names[] = {"ok", "too_old", "from_future", "before_start", "duplicate_jid"};
  r.log_count = log_hit(now_us, std::string("\x01") + names[static_cast<std::size_t>(v)]);
  return r;
}

replay_check replay_guard::check_time(std::optional<std::int64_t> serial, std::int64_t now_us) {
  if (s_.window_us <= 0 || !serial || !util::serial_is_time(*serial)) return {};
  const std::int64_t made = *serial;
  const std::int64_t age = now_us - made;
  if (age > s_.window_us)
    return refuse(replay_verdict::too_old,
                  fmt::format("it was made {:.1f} s ago, outside publish_replay_window ({} s): a replayed "
                              "publish, or this minion's clock is ahead of the master's by that much (check NTP)",
                              secs(age), s_.window_us / 1'000'000),
                  now_us);
  if (-age > s_.window_us)
    return refuse(replay_verdict::from_future,
                  fmt::format("it is dated {:.1f} s in the future, outside publish_replay_window ({} s): the "
                              "master's clock is ahead of this minion's by that much (check NTP)",
                              secs(-age), s_.window_us / 1'000'000),
                  now_us);
  if (made < s_.started_us)
    return refuse(replay_verdict::before_start,
                  fmt::format("it was made {:.3f} s before this minion started: a replayed publish, or the "
                              "master's clock is behind this minion's (check NTP)",
                              secs(s_.started_us - made)),
                  now_us);
  return {};
}

void replay_guard::evict(std::int64_t now_us) {
  // Keep every jid younger than the window and at least min_jids of them; never more
  // than k_max_jids (then the oldest go, and the per-connection serial and the time
  // check still refuse their replays from a sylvite master).
  while (!order_.empty()) {
    const bool over_cap = order_.size() > k_max_jids;
    // Without a window (0) the memory is Salt's: the last min_jids jids.
    const bool expired =
        order_.size() > s_.min_jids && (s_.window_us <= 0 || now_us - order_.front().first > s_.window_us);
    if (!over_cap && !expired) break;
    if (over_cap && !expired && !overflow_logged_) {
      overflow_logged_ = true;
      spdlog::warn("More than {} jids published within publish_replay_window; forgetting the oldest early",
                   k_max_jids);
    }
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
}

replay_check replay_guard::check_jid(const std::string& jid, std::int64_t now_us) {
  if (seen_.count(jid))
    return refuse(replay_verdict::duplicate_jid,
                  "its jid " + jid + " has already run on this minion (a replayed or duplicate publish)", now_us);
  seen_.emplace(jid, now_us);
  order_.emplace_back(now_us, jid);
  evict(now_us);
  return {};
}

}  // namespace sylvite::minion
