// sylvite::master job store on PostgreSQL (master_job_cache: pgjsonb), in the tables of
// Salt's pgjsonb returner (jids, salt_returns, salt_events; pg_sql.hpp), and the
// event_return: pgjsonb sink. libpq, no ORM.
//   Writes: every save_load / add_minions / record_return is appended to the local spool
//     (spool.hpp) before it returns, so a minion's ack follows a durable write (as the
//     file cache: in the page cache at once, group-synced a few ms later); one writer
//     thread sends the spool to PostgreSQL in order, in batches (INSERT ... ON CONFLICT
//     for jids, COPY for salt_returns), one transaction per batch that also moves the
//     spool's checkpoint. While the database is away the spool grows (bounded by
//     pgjsonb_spool_max_mb) and is replayed, exactly once, when it is back.
//   Reads (get_load, get_returns, list_jobs, ...): from PostgreSQL through a bounded pool
//     of connections, after waiting (pgjsonb_read_wait_ms at most, not while the writer
//     finds the database away) for this master's queued writes; so every master of a
//     cluster reads every master's jobs. Merged with the pending view: this master's
//     spooled records not yet committed (kept in memory by jid, as spooled, removed once
//     committed; at start the spool's retained records are loaded), so a job or return
//     acknowledged while the database is away is read back at once, and when the database
//     cannot be reached at all the reads answer from the view alone. Its cost is bounded:
//     at most pgjsonb_pending_view_mb of payload (64; past it a record stays spooled and
//     is replayed but not seen by reads until then, logged every 10 s); a read parses only
//     its job's records, list_jobs every pending job's load (a database down for long:
//     up to that bound per list_jobs).
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
#include "master/spool.hpp"
#include "master/pg_sql.hpp"

namespace sylvite::master::pg {

class connection;
class pool;

class job_store_pg final : public job_store {
 public:
  struct counters {
    std::atomic<std::uint64_t> batches{0}, records{0}, returns{0}, failed_batches{0}, skipped_records{0},
        reconnects{0}, spool_refused{0}, cleaned{0}, view_skipped{0};
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
  // Spooled records the reads can see (not yet committed), and their payload bytes.
  std::size_t pending_records() const;
  std::size_t pending_bytes() const;
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
  // The pending view (spooled, not yet committed records, by jid).
  struct pending_record {
    std::uint64_t seq;
    char kind;
    std::string payload;  // as spooled
  };
  struct pending_job {
    std::uint64_t last_seq = 0;
    std::size_t bytes = 0;
    std::vector<pending_record> records;
  };
  void note_pending(std::uint64_t seq, char kind, const std::string& jid, std::string payload);
  void note_committed(std::uint64_t seq);  // committed_ moved to seq: prunes the view
  std::vector<pending_record> pending_of(const std::string& jid) const;
  void wait_for_writes() const;  // reads: wait_committed unless the database is away
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
  // The writer's view of the database: 0 not tried yet, 1 up, 2 away (reads do not wait).
  std::atomic<int> db_state_{0};
  mutable std::mutex pend_mu_;
  std::unordered_map<std::string, pending_job> pending_;
  std::deque<std::pair<std::uint64_t, std::string>> pending_order_;  // (last seq noted, jid)
  std::size_t pending_bytes_ = 0, pending_count_ = 0;
  std::atomic<std::int64_t> view_log_ms_{0};
};

}  // namespace sylvite::master::pg
