// sylvite::master job store on PostgreSQL (master_job_cache: pgjsonb), in the tables of
// Salt's pgjsonb returner (jids, salt_returns, salt_events; pg_sql.hpp), and the
// event_return: pgjsonb sink. libpq, no ORM.
//   Writes: every save_load / add_minions / record_return is appended to the local spool
//     (pg_spool.hpp) before it returns, so a minion's ack follows a durable write (as the
//     file cache: in the page cache at once, group-synced a few ms later); one writer
//     thread sends the spool to PostgreSQL in order, in batches (INSERT ... ON CONFLICT
//     for jids, COPY for salt_returns), one transaction per batch that also moves the
//     spool's checkpoint. While the database is away the spool grows (bounded by
//     pgjsonb_spool_max_mb) and is replayed, exactly once, when it is back.
//   Reads (get_load, get_returns, list_jobs, ...): from PostgreSQL through a bounded pool
//     of connections, after waiting (pgjsonb_read_wait_ms at most) for this master's
//     queued writes; so every master of a cluster reads every master's jobs.
//   First return wins per (jid, id) within this master's recent jobs (memory); Salt's
//     pgjsonb keeps every return it is given.
//   keep_jobs_seconds: Salt's purge (or archive_jobs) every pgjsonb_clean_interval.
// Thread-safety: every method from any thread; reads and flush block (workers only).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "master/job_store.hpp"
#include "master/pg_spool.hpp"
#include "master/pg_sql.hpp"

namespace sylvite::master::pg {

class connection;
class pool;

class job_store_pg final : public job_store {
 public:
  struct counters {
    std::atomic<std::uint64_t> batches{0}, records{0}, returns{0}, failed_batches{0}, skipped_records{0},
        reconnects{0}, spool_refused{0}, cleaned{0};
  };
  // Opens the spool (refuses when it cannot) and starts the writer; the database may be
  // down (the spool takes the writes).
  static result<std::unique_ptr<job_store_pg>> create(const options& o);
  ~job_store_pg() override;  // the writer sends what it can for a moment, then stops

  result<void> save_load(const std::string& jid, const wire::value& load,
                         const std::vector<std::string>& minions) override;
  result<void> add_minions(const std::string& jid, const std::vector<std::string>& minions) override;
  result<return_record> record_return(const std::string& jid, const std::string& id,
                                      const wire::value& ret_load) override;
  std::optional<wire::value> get_load(const std::string& jid) const override;
  std::vector<std::string> get_minions(const std::string& jid) const override;
  wire::value get_returns(const std::string& jid) const override;
  std::vector<job_summary> list_jobs(std::size_t max = 0) const override;
  std::size_t clean_old(std::chrono::seconds keep) override;
  void flush() override;

  // Until every spooled record up to now is committed in PostgreSQL, or timeout.
  bool wait_committed(std::chrono::milliseconds timeout) const;
  std::uint64_t committed_seq() const noexcept { return committed_.load(); }
  const counters& stats() const noexcept { return stats_; }
  spool& spooled() noexcept { return *spool_; }

 private:
  explicit job_store_pg(options o);
  void run_writer();
  void wake_writer();
  // One batch in one transaction; false when the connection broke (retry later).
  enum class batch_result { ok, conn_error, data_error };
  batch_result write_batch(connection& c, const std::vector<spool_record>& batch);
  bool ensure_schema(connection& c);
  std::size_t clean_with(connection& c, std::chrono::seconds keep);
  bool first_return(const std::string& jid, const std::string& id);
  void log_read_error(const char* what, const std::string& err) const;

  options o_;
  std::unique_ptr<spool> spool_;
  std::unique_ptr<pool> pool_;
  mutable counters stats_;
  std::atomic<std::uint64_t> committed_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable work_cv_;       // the writer: new records, stop
  mutable std::condition_variable committed_cv_;  // readers: a batch committed
  bool stop_ = false;
  std::thread writer_;
  // First-return-wins among recent jobs: jid -> ids that returned.
  std::mutex idx_mu_;
  std::unordered_map<std::string, std::unordered_set<std::string>> idx_;
  std::deque<std::string> idx_order_;
  mutable std::atomic<std::int64_t> read_err_log_ms_{0};
};

}  // namespace sylvite::master::pg
