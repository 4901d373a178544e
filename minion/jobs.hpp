// sylvite::minion jobs: what salt/minion.py does between a decoded publish and the
// `_return` request: target decision (_target_load), jid de-duplication (jid_queue with
// minion_jid_queue_hwm), the `_return` load (7.4) and a bounded worker pool.
// Thread-safety: jid_queue is single-threaded (io thread); job_pool is thread-safe;
// the free functions are pure.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/wire/value.hpp"
#include "minion/modules.hpp"

namespace sylvite::minion {

// Salt's jid_queue: a jid already in the queue is a duplicate; the oldest jid is dropped
// once more than hwm are remembered.
class jid_queue {
 public:
  explicit jid_queue(std::size_t hwm = 100) : hwm_(hwm) {}
  // true if jid was new (and is now remembered); false for a duplicate.
  bool add(const std::string& jid);
  std::size_t size() const noexcept { return q_.size(); }

 private:
  std::size_t hwm_;
  std::deque<std::string> q_;
};

struct target_facts {
  std::string id;
  const wire::value* grains = nullptr;
  const wire::value* pillar = nullptr;
};

// _target_load: the load must have tgt, jid, fun, arg; tgt_type selects the matcher (glob
// when absent; unknown type -> not for us); grain/grain_pcre/pillar use `delimiter`.
bool is_job_for_me(const wire::value& load, const target_facts& me);

// Multi-function jobs (fun is a list) are refused for now: this says why, or "".
std::string unsupported_job_reason(const wire::value& load);

// The `_return` load for a published job (salt/minion.py _thread_return +
// _prepare_return_pub): cmd, id, success, return, retcode, jid, fun, fun_args,
// user/master_id/metadata when the publish had them, out when set.
wire::value make_return_load(const std::string& id, const wire::value& pub, const exec_outcome& o);

// The `_return` load salt-call sends (caller.py: jid "req", no success key).
wire::value make_call_return_load(const std::string& id, const std::string& fun, const wire::value& fun_args,
                                  const exec_outcome& o);

// Salt jid: %Y%m%d%H%M%S%f of UTC now (20 digits).
std::string gen_jid();

// Fixed-size worker pool with a bounded queue. submit() returns false when the queue is
// full or the pool is stopping.
class job_pool {
 public:
  job_pool(std::size_t threads, std::size_t max_queue);
  ~job_pool();
  job_pool(const job_pool&) = delete;
  job_pool& operator=(const job_pool&) = delete;
  bool submit(std::function<void()> fn);
  // Stop taking work, finish what is queued, join the threads.
  void stop();
  std::size_t busy() const;

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  std::size_t max_queue_;
  std::size_t busy_ = 0;
  bool stopping_ = false;
};

}  // namespace sylvite::minion
