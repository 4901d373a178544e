// sylvite::util publish serials read as time. A sylvite master numbers its publishes with
// microseconds since the Unix epoch, kept strictly increasing (next_time_serial): the
// number is still a Salt serial (a real Salt minion only requires it to grow per
// connection) and it also tells a sylvite minion when the publish was made, so a captured
// publish can be refused once it is older than the minion's publish_replay_window,
// whichever master of a cluster (or of a hot multi-master set) made it. A real Salt
// master counts 1, 2, 3...; serials below k_time_serial_floor are read as such counters.
// Pure functions; thread-safe.
#pragma once
#include <chrono>
#include <cstdint>

namespace sylvite::util {

// 10^15 us after the epoch is 2001-09-09: no Salt counter gets there, every clock does.
inline constexpr std::int64_t k_time_serial_floor = 1'000'000'000'000'000;

inline std::int64_t now_micros() noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The serial after `last` at wall time now_us: now_us, or last + 1 when the clock has not
// moved on (or stepped back), so serials never repeat or decrease.
inline constexpr std::int64_t next_time_serial(std::int64_t last, std::int64_t now_us) noexcept {
  return now_us > last ? now_us : last + 1;
}

inline constexpr bool serial_is_time(std::int64_t serial) noexcept { return serial >= k_time_serial_floor; }

}  // namespace sylvite::util
