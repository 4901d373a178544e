// sylvite::master worker pool: see worker_pool.hpp. Tasks must not throw; an escaping
// exception is caught and logged so one bad request cannot take a worker down.
#include "master/worker_pool.hpp"

#include <spdlog/spdlog.h>

#include <exception>

namespace sylvite::master {

namespace {
thread_local std::chrono::steady_clock::duration tl_waited{};
}

std::chrono::steady_clock::duration worker_pool::current_task_waited() { return tl_waited; }

worker_pool::worker_pool(std::size_t threads, std::size_t max_queue) : max_queue_(max_queue) {
  if (threads == 0) threads = 1;
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

worker_pool::~worker_pool() { stop(); }

bool worker_pool::submit(std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    if (stopping_ || q_.size() >= max_queue_) return false;
    q_.push_back(item{std::move(task), std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
  return true;
}

std::size_t worker_pool::queued() const {
  std::lock_guard lk(mu_);
  return q_.size();
}

void worker_pool::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

void worker_pool::run() {
  for (;;) {
    item task;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping and drained
      task = std::move(q_.front());
      q_.pop_front();
    }
    tl_waited = std::chrono::steady_clock::now() - task.queued_at;
    struct reset {
      ~reset() { tl_waited = {}; }
    } reset_waited;
    try {
      task.fn();
    } catch (const std::exception& e) {
      spdlog::error("worker task failed: {}", e.what());
    } catch (...) {
      spdlog::error("worker task failed with an unknown exception");
    }
  }
}

}  // namespace sylvite::master
