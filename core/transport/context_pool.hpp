// sylvite::transport: io_contexts run by one thread each. The master hands its ports'
// connections to them (options::session_contexts), the swarm its simulated minions: a
// connection's reads, handlers and writes then stay on one thread, with no hand-over and
// no wake-up between threads.
// Lifecycle: construct (each context kept alive by a work guard), start() (one thread
// per context), release() (run() returns once a context has no work left), stop() (ends
// run() at once), join(). The destructor stops and joins.
// Thread-safety: at(), size() and contexts() from any thread; the lifecycle calls from
// one thread (release() also from a handler on another io_context).
#pragma once
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

namespace sylvite::transport {

class context_pool {
 public:
  explicit context_pool(std::size_t n);  // n io_contexts (0: none; at() needs n > 0)
  ~context_pool();
  context_pool(const context_pool&) = delete;
  context_pool& operator=(const context_pool&) = delete;

  std::size_t size() const noexcept { return ios_.size(); }
  boost::asio::io_context& at(std::size_t k) { return *ios_[k % ios_.size()]; }
  // For options::session_contexts (they must outlive the servers given it).
  const std::shared_ptr<const std::vector<boost::asio::io_context*>>& contexts() const noexcept { return list_; }

  void start();
  void release();
  void stop();
  void join();

 private:
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  std::shared_ptr<const std::vector<boost::asio::io_context*>> list_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
};

}  // namespace sylvite::transport
