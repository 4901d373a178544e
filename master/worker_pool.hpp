// sylvite::master worker pool: a fixed set of threads with a bounded FIFO queue for RSA
// and disk work, so io threads never block. submit() refuses (returns false) when the
// queue is full; the caller counts and drops (the minion retries).
// Thread-safety: submit() from any thread; stop() once (joins; pending tasks still run).
#pragma once
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

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  std::size_t max_queue_;
  bool stopping_ = false;
};

}  // namespace sylvite::master
