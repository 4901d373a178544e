// sylvite::master worker pool: a fixed set of threads with a bounded FIFO queue for RSA
// and disk work, so io threads never block. submit() refuses (returns false) when the
// queue is full; the caller counts and drops (the minion retries).
// Each task remembers when it was queued: a task can ask how long it waited
// (current_task_waited()), so work whose client has surely given up (a sign-in older than
// the minion's auth_timeout) is dropped before its RSA work is done.
// Thread-safety: submit() from any thread; stop() once (joins; pending tasks still run).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sylvite::master {

class worker_pool {
 public:
  worker_pool(std::size_t threads, std::size_t max_queue);
  ~worker_pool();
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  bool submit(std::function<void()> task);
  void stop();
  std::size_t queued() const;

  // On a pool thread, inside a task: how long that task waited in the queue (submit ->
  // start). Elsewhere: zero.
  static std::chrono::steady_clock::duration current_task_waited();

 private:
  struct item {
    std::function<void()> fn;
    std::chrono::steady_clock::time_point queued_at;
  };
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<item> q_;
  std::vector<std::thread> threads_;
  std::size_t max_queue_;
  bool stopping_ = false;
};

}  // namespace sylvite::master
