// sylvite::master event_return: pgjsonb (pg_events.hpp).
#include "master/pg_events.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "master/pg_conn.hpp"

namespace sylvite::master::pg {

pg_event_sink::pg_event_sink(options o, event_hub& hub) : o_(std::move(o)), hub_(hub) {
  thread_ = std::thread([this] { run(); });
  sub_ = hub_.subscribe_local([this](const std::string& tag, const wire::value& data) {
    if (!event_wanted(o_, tag)) return;
    std::unique_lock lk(mu_);
    if (stop_) return;
    if (q_.size() >= static_cast<std::size_t>(o_.event_queue_max)) {
      lk.unlock();
      dropped_++;
      const auto now = now_ms();
      auto last = drop_log_ms_.load();
      if (now - last >= 10000 && drop_log_ms_.compare_exchange_strong(last, now))
        spdlog::warn("pgjsonb event_return: queue full ({} events): {} event(s) dropped so far",
                     o_.event_queue_max, dropped_.load());
      return;
    }
    const bool wake = q_.empty();
    q_.push_back({tag, data, now_us()});
    lk.unlock();
    if (wake) cv_.notify_one();
  });
}

pg_event_sink::~pg_event_sink() {
  hub_.unsubscribe(sub_);
  (void)drain(std::chrono::milliseconds(2000));
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::size_t pg_event_sink::queued() const {
  std::lock_guard lk(mu_);
  return q_.size();
}

bool pg_event_sink::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [this] { return (q_.empty() && !writing_) || stop_; });
}

void pg_event_sink::run() {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_ptr<connection> c;
  auto backoff = std::chrono::milliseconds(100);
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
    if (stop_) return;
    writing_ = true;
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let a burst gather
    lk.lock();
    const std::size_t n = std::min<std::size_t>(q_.size(), 5000);
    std::vector<ev> batch;
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(q_.front()));
      q_.pop_front();
    }
    lk.unlock();
    std::string data;
    for (const auto& e : batch) append_event_line(data, e.tag, json_text(e.data), o_.master_id, e.unix_us);
    bool ok = false;
    if (!c || !c->ok()) c = std::make_unique<connection>(o_);
    if (c->ok()) {
      ok = c->copy_in(copy_events_sql, data);
      if (!ok) {
        spdlog::warn("pgjsonb event_return: COPY salt_events failed: {}", c->error());
        if (!c->broken()) {
          // Refused data (never expected: the text is sanitized): dropped, not retried forever.
          dropped_ += batch.size();
          batch.clear();
          ok = true;
        }
      }
    } else {
      log_connect_failure(o_, c->error(), " (event_return: events wait in memory)");
    }
    lk.lock();
    if (ok) {
      stored_ += batch.size();
      backoff = std::chrono::milliseconds(100);
    } else {
      // Back at the front, in order (the queue's bound holds for new events meanwhile).
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) q_.push_front(std::move(*it));
      c.reset();
      writing_ = false;
      if (cv_.wait_for(lk, backoff, [this] { return stop_; })) return;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      continue;
    }
    writing_ = false;
    if (q_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace sylvite::master::pg
