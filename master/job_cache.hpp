// sylvite::master job cache in Salt's local_cache layout (master_job_cache: local_cache):
//   cachedir/jobs/<h[0:2]>/<h[2:]>/   h = hex hash_type(jid) (sha256 default)
//     jid              the jid as text
//     .load.p          msgpack (frame packing) of the publish load
//     .minions.p       msgpack list of expected minion ids
//     <id>/return.p    msgpack {"return", "retcode", "success"} (keys present only)
//     <id>/out.p       msgpack of the "out" string, if any
// Every file is written atomically (temp + rename/link); a second return for the same
// (jid, id) is refused (first one wins, as Salt). Readers tolerate half-written/missing
// files (skip them).
// Durability (group commit): writes are not fsynced one by one. A write is complete in
// the page cache before the call returns (so the minion's ack, which follows, survives a
// master crash or SIGKILL), and one background thread per filesystem makes every write
// durable with one syncfs(2) per batch, normally a few ms later (util::group_syncer).
// An OS crash or power loss inside that window can lose the last returns or leave an
// empty return.p (skipped by readers). Salt's local_cache never fsyncs and writes in
// place; flush() waits until everything written so far is on disk.
// Write modes:
//   sync  (master cluster on a shared cache; or job_cache_journal: False): save_return
//         writes return.p before it answers; the first return for (jid, id) is decided by
//         link(2) on disk, across processes and masters.
//   journal (default for a single master): save_return decides first-wins in memory (an
//         index of the ids that returned, per recent jid, seeded from the directory after
//         a restart or eviction), appends the return to the journal (a spool of
//         checksummed records in cachedir/return_journal, master/spool.hpp: one write(2),
//         complete before it answers, so before the minion's ack; the same group commit
//         makes it durable) and queues it for the writer thread, which writes it into
//         the layout above at idle priority (SCHED_IDLE: it takes only CPU nothing else
//         wants), in small chunks, between bursts (after 20 ms without a publish or a
//         return, or once a return waited 250 ms). A reader that waits for it writes the
//         queue itself; past 20,000 queued returns (or a full journal) a return is
//         written before the ack, as in sync mode. Once a batch is written and synced its journal records are
//         released (whole segments removed). At start the journal is replayed into the
//         layout (a record already there is skipped: the first return.p wins), so an
//         acknowledged return survives a master crash or SIGKILL as in sync mode. Costs
//         about one small write(2) per return on the request path instead of a mkdir, a
//         link and a few more system calls (docs/benchmarks.md, goal 1).
//   async (job_cache_async: True; single master): as journal without the journal: it
//         answers at once and a master killed (SIGKILL) can lose the returns still
//         queued (normally < 1 ms of writes; acked, so the minion will not resend).
// In journal and async mode readers in this process (get_*, list_jobs, clean_old, flush)
// first write what is queued (read-your-writes); the writer uses temp + link, so no
// half-written file is ever visible.
// On a shared filesystem (cluster) several masters use the same cache concurrently.
// Thread-safety: all methods are safe to call from any thread; they do blocking disk
// I/O, so call them from the worker pool, never from an io thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/util/files.hpp"
#include "core/util/rate_limit.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/job_store.hpp"
#include "master/spool.hpp"

namespace sylvite::master {

// Salt jid: UTC now as %Y%m%d%H%M%S%f (20 digits). Strictly increasing within a process
// (bumped by 1 microsecond on collision).
std::string new_jid();

class job_cache final : public job_store {
 public:
  enum class write_mode { sync, async, journal };
  job_cache(std::filesystem::path cachedir, std::string hash_type = "sha256", write_mode mode = write_mode::sync);
  ~job_cache();  // writes queued in async mode are written first
  job_cache(const job_cache&) = delete;
  job_cache& operator=(const job_cache&) = delete;
  std::filesystem::path job_dir(const std::string& jid) const;

  // Save the publish load and the expected minions (creates the job dir).
  result<void> save_load(const std::string& jid, const wire::value& load,
                         const std::vector<std::string>& minions) override;
  // Add minions to .minions.p (e.g. a peer's minions in cluster mode).
  result<void> add_minions(const std::string& jid, const std::vector<std::string>& minions) override;
  // Store one return (load as sent by the minion: return/retcode/success/out...).
  // Returns false (no error) if a return for (jid, id) already exists.
  result<bool> save_return(const std::string& jid, const std::string& id, const wire::value& ret_load);
  // job_store: save_return, after making the job of a well-formed jid this cache does not
  // hold (Salt's prep_jid(passed_jid)); "nocache" is not kept.
  result<return_record> record_return(const std::string& jid, const std::string& id,
                                      const wire::value& ret_load) override;
  std::optional<wire::value> get_load(const std::string& jid) const override;
  std::vector<std::string> get_minions(const std::string& jid) const override;
  // id -> {"return", "retcode", "success", "out"?} for every stored return.
  wire::value get_returns(const std::string& jid) const override;
  // Every job (newest first) with its load; limited to `max` (0 = all).
  std::vector<job_summary> list_jobs(std::size_t max = 0) const override;
  // Remove jobs older than keep_seconds (by jid time). Returns how many were removed.
  std::size_t clean_old(std::chrono::seconds keep) override;

  // Journal and async mode, a job in the index, the queue below its bound: the return is
  // queued (and journaled) without a file of the layout touched.
  bool records_without_io(const std::string& jid) const override;
  // Block until every write made so far is durable (group commit; see above).
  void flush() override;
  util::group_syncer& syncer() noexcept { return *syncer_; }
  // Journal and async mode: everything queued so far is written into the layout (by the
  // caller, when the writer thread has not taken it yet).
  void drain() const;
  write_mode mode() const noexcept { return mode_; }
  // The journal (cachedir/return_journal) and the payload of one return record in it
  // (tests write records as a crashed master left them).
  static std::filesystem::path journal_dir(const std::filesystem::path& cachedir);
  static std::string journal_payload(const std::string& jid, const std::string& id, const wire::value& ret_load);
  std::uint64_t replayed() const noexcept { return replayed_; }  // returns written from the journal at start
  std::uint64_t write_conflicts() const noexcept { return conflicts_; }  // lost link races (async)
  std::size_t indexed_jobs() const;                                      // tests

 private:
  // The files of one return, packed: <id>/return.p and, if the load has "out", out.p.
  struct return_files {
    std::string rec;
    std::string out;
    bool has_out = false;
  };
  struct pending_write {
    std::filesystem::path dir;
    std::string id;
    return_files files;
    std::uint64_t seq = 0;  // its journal record (journal mode)
    std::chrono::steady_clock::time_point queued_at;
  };
  // How write_return ended when it did not fail.
  enum class return_write { written, exists, job_gone };
  struct job_entry {
    bool nocache = false;
    std::unordered_set<std::string> ids;
    std::chrono::steady_clock::time_point used;
  };
  result<bool> save_return_sync(const std::string& jid, const std::string& id, const wire::value& ret_load);
  result<bool> save_return_async(const std::string& jid, const std::string& id, const wire::value& ret_load);
  void index_job(const std::string& jid, const std::filesystem::path& dir, bool fresh);
  // Sync mode: (known, nocache) of a job from the index (no system call), else stat it.
  bool known_job(const std::string& jid, const std::filesystem::path& dir, bool& nocache);
  static return_files pack_return(const wire::value& ret_load);
  // Creates <dir>/<id>/ and return.p (first one wins: `exists`), then out.p. job_gone: dir
  // itself is missing. Logs its failures (errors); the caller logs exists/job_gone.
  static result<return_write> write_return(const std::filesystem::path& dir, const std::string& id,
                                           const return_files& f);
  void write_one(const pending_write& w) const;
  // Under q_mu_ (lk): takes up to max queued returns and writes them (lk unlocked
  // meanwhile). How many it wrote.
  std::size_t write_queued(std::unique_lock<std::mutex>& lk, std::size_t max) const;
  // A publish or a return just now (the journal writer waits for a quiet moment).
  void note_activity() const;
  std::chrono::steady_clock::time_point last_activity() const;
  void run_writer();
  void replay_journal();
  // How many returns may wait for the writer (async or journal mode); past it save_return
  // writes in the caller.
  std::size_t queue_bound() const noexcept;
  static std::string journal_body(const std::string& id, const return_files& f);

  std::filesystem::path dir_;
  std::string hash_type_;
  std::shared_ptr<util::group_syncer> syncer_;
  write_mode mode_;
  mutable std::mutex idx_mu_;
  std::unordered_map<std::string, job_entry> idx_;
  std::unique_ptr<spool> journal_;  // journal mode
  util::log_limiter journal_refused_log_;
  std::uint64_t replayed_ = 0;
  mutable std::mutex q_mu_;
  mutable std::condition_variable q_cv_;     // work for the writer
  mutable std::condition_variable idle_cv_;  // queue written
  mutable std::deque<pending_write> q_;      // journal mode: seq ascending
  mutable std::vector<std::uint64_t> inflight_;  // first seq of each batch being written
  bool writing_ = false;  // the writer thread gathers or writes a batch
  bool stop_ = false;
  mutable std::atomic<std::uint64_t> conflicts_{0};
  mutable std::atomic<std::int64_t> last_activity_ns_{0};
  std::thread writer_;
};

}  // namespace sylvite::master
