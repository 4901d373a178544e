// sylvite::master event_return: pgjsonb: every event this master fires is stored in
// Salt's salt_events table (tag, data jsonb, master_id, alter_time), as Salt's
// EventReturn + pgjsonb.event_return. subscribe_local: in a cluster each event is stored
// once, by the master that fired it (Salt also skips events carrying __peer_id).
// event_return_whitelist / event_return_blacklist filter tags (globs). Events wait in a
// bounded queue (pgjsonb_event_queue_max; past it they are dropped, counted and logged
// every 10 s) and go in batches (COPY) from one thread with its own connection; while the
// database is away the queue holds them (then drops new ones). Events are not spooled:
// Salt drops them too when the database is down.
// Thread-safety: every method from any thread; the hub's handler only queues.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/pg_sql.hpp"

namespace sylvite::master::pg {

class pg_event_sink {
 public:
  pg_event_sink(options o, event_hub& hub);
  ~pg_event_sink();  // unsubscribes, sends what is queued for a moment, stops
  pg_event_sink(const pg_event_sink&) = delete;
  pg_event_sink& operator=(const pg_event_sink&) = delete;
  std::uint64_t stored() const noexcept { return stored_.load(); }
  std::uint64_t dropped() const noexcept { return dropped_.load(); }
  std::size_t queued() const;
  // Until the queue is empty and written, or timeout (tests, shutdown).
  bool drain(std::chrono::milliseconds timeout);

 private:
  struct ev {
    std::string tag;
    wire::value data;
    std::int64_t unix_us;
  };
  void run();
  options o_;
  event_hub& hub_;
  std::uint64_t sub_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<ev> q_;
  bool writing_ = false;
  bool stop_ = false;
  std::atomic<std::uint64_t> stored_{0}, dropped_{0};
  std::atomic<std::int64_t> drop_log_ms_{0};
  std::thread thread_;
};

}  // namespace sylvite::master::pg
