// sylvite::util::log_limiter: "log once per interval, with a count of what happened
// since" for events an attacker can repeat at will (refused connections, shed requests,
// exhausted descriptors). hit() counts one event and returns, at most once per interval,
// how many events the line about to be logged stands for (this one included); the
// caller logs only when it returns non-zero.
// Thread-safety: hit() is thread-safe (atomics; two threads racing at an interval edge
// may each log once).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace sylvite::util {

class log_limiter {
 public:
  explicit log_limiter(std::chrono::steady_clock::duration interval = std::chrono::seconds(10))
      : interval_(interval.count()) {}

  // Count one event; non-zero (events since the last line, this one included) when a
  // line should be logged now.
  std::uint64_t hit() noexcept {
    const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    count_.fetch_add(1, std::memory_order_relaxed);
    std::int64_t last = last_.load(std::memory_order_relaxed);
    if (last != 0 && now - last < interval_) return 0;
    if (!last_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return 0;
    return count_.exchange(0, std::memory_order_relaxed);
  }
  // Events counted over the whole lifetime are not kept here; callers keep totals.

 private:
  const std::int64_t interval_;
  std::atomic<std::int64_t> last_{0};
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace sylvite::util
