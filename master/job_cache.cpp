// sylvite::master job cache, byte-compatible with Salt's returners/local_cache.py.
// Layout: cachedir/jobs/<h[:2]>/<h[2:]>/{jid, .load.p, .minions.p, <id>/return.p, <id>/out.p}
// with h = hex hash_type(jid). Files are msgpack with frame packing (salt.payload.dump uses
// use_bin_type=True). Every write goes through util::write_file_atomic_nosync (temp +
// rename, no fsync); the first return for (jid, id) is decided by
// util::create_exclusive_nosync on <id>/return.p (link(2) with EEXIST), which also holds
// between masters sharing the cache on GlusterFS. Durability is a group commit
// (util::group_syncer: one syncfs per batch, off the request path); see job_cache.hpp. Salt decides
// it with mkdir(<id>), which loses the return for good if the writer dies between the
// mkdir and the write; the O_EXCL file does not have that window.
// .minions.p is a read-merge-write (sorted union, as Salt's save_minions); it is
// serialised by a process mutex plus an fcntl lock on .minions.lock (cross-process).
// Thread-safety: every method may be called from any thread. Nothing here throws.
#include "master/job_cache.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>

#include "core/crypto/rsa.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/detail.hpp"

namespace sylvite::master {
namespace fs = std::filesystem;

namespace {

constexpr const char* load_p = ".load.p";
constexpr const char* minions_p = ".minions.p";
constexpr const char* return_p = "return.p";
constexpr const char* out_p = "out.p";
constexpr const char* jid_file = "jid";

std::mutex& minions_mutex() {
  static std::mutex m;
  return m;
}

// Read and unpack a msgpack file; nullopt if missing, unreadable or not complete msgpack
// (a half-written file from a foreign writer, or corruption).
std::optional<wire::value> read_packed(const fs::path& p) {
  // No symlinks: the cache is on a filesystem other masters (or a planted link) write.
  auto data = util::read_file_nofollow(p);
  if (!data) {
    if (data.error() != util::errc::not_found)
      spdlog::warn("job cache: skipping {}: {} (not a regular file?)", p.string(), data.error().message());
    return std::nullopt;
  }
  auto v = wire::unpack(*data);
  if (!v) {
    spdlog::warn("job cache: skipping unreadable file {}: {}", p.string(), v.error().message());
    return std::nullopt;
  }
  return std::move(*v);
}

std::string text_or_empty(const wire::value& v) {
  auto t = wire::as_text(v);
  return t ? std::string(*t) : std::string();
}

// As Salt: a return for a jid that is not in the cache is refused with this error.
void log_unknown_job(const std::string& id, const std::string& jid) {
  spdlog::error("job cache: a return from {} has job id {} that is not present in the local cache",
                detail::printable(id), detail::printable(jid));
}

void add_ids(std::set<std::string>& out, const wire::value& v) {
  if (!v.is_array()) return;
  for (const auto& e : v)
    if (auto t = wire::as_text(e)) out.emplace(*t);
}

result<void> merge_minions(const fs::path& dir, const std::vector<std::string>& minions) {
  std::lock_guard<std::mutex> g(minions_mutex());
  if (auto r = util::make_dirs(dir); !r) return r;
  util::file_lock lk(dir / ".minions.lock");  // a failure to lock: merged without it, as before
  std::set<std::string> all(minions.begin(), minions.end());
  if (auto old = read_packed(dir / minions_p)) add_ids(all, *old);
  wire::value list = wire::value::array();
  for (const auto& id : all) list.push_back(id);  // sorted, as Salt's sorted(union)
  return util::write_file_atomic_nosync(dir / minions_p, wire::pack(list, wire::packing::frame));
}

}  // namespace

std::string new_jid() {
  static std::mutex m;
  static std::int64_t last = 0;
  auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  std::int64_t us;
  {
    std::lock_guard<std::mutex> g(m);
    us = now > last ? now : last + 1;
    last = us;
  }
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d%02d%02d%02d%06d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us % 1000000));
  return buf;
}

namespace {
// Index of recent jobs (async mode): entries idle longer than this are dropped (a late
// return re-reads the directory), and at most kMaxIndexedJobs are kept.
constexpr auto kIndexIdle = std::chrono::seconds(10);
constexpr std::size_t kMaxIndexedJobs = 64;
// Queue bound: past it, save_return writes in the caller (back-pressure). Journal mode
// keeps it smaller: its writer runs only on idle CPU, and the queue holds the returns.
constexpr std::size_t kMaxQueued = 200000;
constexpr std::size_t kMaxQueuedJournal = 20000;
// Journal writer pacing (run_writer).
constexpr auto kQuietGap = std::chrono::milliseconds(20);
constexpr auto kMaxLag = std::chrono::milliseconds(250);
constexpr std::size_t kWriteAnywayQueued = 5000;
constexpr std::size_t kJournalChunk = 8;
constexpr std::size_t kReleaseEvery = 4096;
// The journal: bounded (past it a return is written on the request path, as sync mode),
// in small segments (a start replays at most about one segment that was written already).
constexpr std::uint64_t kJournalMaxBytes = 64ull << 20;
constexpr std::uint64_t kJournalSegmentBytes = 4ull << 20;

}  // namespace

fs::path job_cache::journal_dir(const fs::path& cachedir) { return cachedir / "return_journal"; }

// Body of a journal record (after the jid, spool.hpp keyed_payload): u32 length + id,
// u8 has_out, u32 length + return.p bytes, then out.p bytes (the rest).
std::string job_cache::journal_body(const std::string& id, const return_files& f) {
  std::string b;
  b.reserve(13 + id.size() + f.rec.size() + f.out.size());
  put_u32(b, static_cast<std::uint32_t>(id.size()));
  b += id;
  b.push_back(f.has_out ? '\1' : '\0');
  put_u32(b, static_cast<std::uint32_t>(f.rec.size()));
  b += f.rec;
  b += f.out;
  return b;
}

std::string job_cache::journal_payload(const std::string& jid, const std::string& id, const wire::value& ret_load) {
  return keyed_payload(jid, journal_body(id, pack_return(ret_load)));
}

void job_cache::replay_journal() {
  std::uint64_t after = 0, seen = 0, bad = 0, written = 0;
  for (;;) {
    auto recs = journal_->read_after(after, 10000, 16u << 20);
    if (recs.empty()) break;
    for (const auto& r : recs) {
      after = r.seq;
      ++seen;
      std::string_view jid, body;
      std::size_t off = 0;
      std::uint32_t idn = 0, recn = 0;
      return_files f;
      std::string id;
      bool ok = r.kind == 'R' && split_keyed_payload(r.payload, jid, body) && read_u32(body, off, idn) &&
                body.size() - off >= idn;
      if (ok) {
        id.assign(body.substr(off, idn));
        off += idn;
        ok = off < body.size();
      }
      if (ok) {
        f.has_out = body[off++] != 0;
        ok = read_u32(body, off, recn) && body.size() - off >= recn;
      }
      if (!ok || !pki::valid_id(id)) {
        ++bad;
        continue;
      }
      f.rec.assign(body.substr(off, recn));
      f.out.assign(body.substr(off + recn));
      // exists: written before the crash (or first by another return); job_gone: the
      // job was cleaned since. Both are skipped.
      if (auto w = write_return(job_dir(std::string(jid)), id, f); w && *w == return_write::written) ++written;
    }
  }
  if (written) syncer_->flush();
  if (bad) spdlog::error("job cache journal: {} record(s) that are not returns were skipped", bad);
  if (written)
    spdlog::info("job cache journal: {} return(s) written into the job cache at start ({} record(s) read)",
                 written, seen);
  replayed_ = written;
  journal_->release(journal_->last_seq());
}

job_cache::job_cache(fs::path cachedir, std::string hash_type, write_mode mode)
    : dir_(std::move(cachedir) / "jobs"), hash_type_(std::move(hash_type)), mode_(mode) {
  syncer_ = util::group_syncer::shared_for(dir_);
  if (!crypto::hash_hex("", hash_type_)) {
    spdlog::error("job cache: unknown hash_type '{}', using sha256", hash_type_);
    hash_type_ = "sha256";
  }
  if (mode_ == write_mode::journal) {
    auto sp = spool::open(journal_dir(dir_.parent_path()), kJournalMaxBytes, kJournalSegmentBytes,
                          "job cache journal");
    if (sp) {
      journal_ = std::move(*sp);
      replay_journal();
    } else {
      spdlog::error("job cache: the journal in {} cannot be used: returns are written before the ack (sync mode)",
                    journal_dir(dir_.parent_path()).string());
      mode_ = write_mode::sync;
    }
  }
  if (mode_ != write_mode::sync) writer_ = std::thread([this] { run_writer(); });
}

job_cache::~job_cache() {
  {
    std::lock_guard lk(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void job_cache::drain() const {
  if (mode_ == write_mode::sync) return;
  std::unique_lock lk(q_mu_);
  // Write what the writer has not taken yet here, at the caller's priority (the journal
  // mode's writer runs only on idle CPU), then wait for the batches being written.
  while (!q_.empty()) write_queued(lk, SIZE_MAX);
  idle_cv_.wait(lk, [this] { return q_.empty() && !writing_ && inflight_.empty(); });
}

std::size_t job_cache::write_queued(std::unique_lock<std::mutex>& lk, std::size_t max) const {
  std::deque<pending_write> batch;
  if (q_.size() <= max) {
    batch.swap(q_);
  } else {
    for (std::size_t i = 0; i < max; ++i) {
      batch.push_back(std::move(q_.front()));
      q_.pop_front();
    }
  }
  if (batch.empty()) return 0;
  const std::uint64_t first = batch.front().seq;
  inflight_.push_back(first);
  lk.unlock();
  for (const auto& w : batch) write_one(w);
  syncer_->note();  // one group commit for the whole batch
  lk.lock();
  inflight_.erase(std::find(inflight_.begin(), inflight_.end(), first));
  idle_cv_.notify_all();
  return batch.size();
}

void job_cache::note_activity() const {
  last_activity_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

std::chrono::steady_clock::time_point job_cache::last_activity() const {
  return std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_activity_ns_.load(std::memory_order_relaxed)));
}

std::size_t job_cache::indexed_jobs() const {
  std::lock_guard lk(idx_mu_);
  return idx_.size();
}

void job_cache::run_writer() {
  if (mode_ == write_mode::journal) {
    // Acknowledged already and in the journal: the layout may trail, so the writer takes
    // only CPU nothing else wants (drain() and the queue bound write in the caller).
    struct sched_param sp {};
    if (::sched_setscheduler(0, SCHED_IDLE, &sp) != 0)
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
  } else {
    // Below the request threads: under CPU contention the acks (and sign-ins) go first
    // and the writes trail (they were acked already; drain() covers readers).
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  }
  std::unique_lock lk(q_mu_);
  std::size_t unreleased = 0;  // journal: records written since the last release
  for (;;) {
    q_cv_.wait(lk, [this] { return stop_ || !q_.empty(); });
    if (q_.empty()) return;  // stopping, everything written
    writing_ = true;
    if (journal_) {
      // Write between bursts: a mkdir can hold a core for a while in the kernel, even at
      // SCHED_IDLE, so the writer waits until no job was published and no return queued
      // for kQuietGap (unless the queue is long), and writes small chunks.
      // A return waits at most kMaxLag for that (a steady trickle has no quiet moment).
      while (!stop_ && !q_.empty() && q_.size() < kWriteAnywayQueued) {
        const auto now = std::chrono::steady_clock::now();
        const auto idle = now - last_activity();
        const auto lag = now - q_.front().queued_at;
        if (idle >= kQuietGap || lag >= kMaxLag) break;
        lk.unlock();
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kQuietGap - idle, kMaxLag - lag));
        lk.lock();
      }
      unreleased += write_queued(lk, stop_ ? SIZE_MAX : kJournalChunk);
      if (q_.empty() || unreleased >= kReleaseEvery) {
        // Release the journal up to the first record not yet written (queued, or in a
        // batch a reader is writing); what is written so far is durable after the flush.
        std::uint64_t upto = journal_->last_seq();
        if (!q_.empty()) upto = std::min(upto, q_.front().seq - 1);
        for (auto f : inflight_) upto = std::min(upto, f - 1);
        unreleased = 0;
        lk.unlock();
        syncer_->flush();
        journal_->release(upto);
        lk.lock();
      }
    } else {
      if (!stop_) {
        // Let the burst of a fan-out gather (fewer wake-ups and syncs); readers that
        // drain() write what is queued themselves.
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        lk.lock();
      }
      write_queued(lk, SIZE_MAX);
    }
    writing_ = false;
    idle_cv_.notify_all();
  }
}

job_cache::return_files job_cache::pack_return(const wire::value& ret_load) {
  return_files f;
  wire::value rec = wire::value::object();
  if (ret_load.is_object()) {
    for (const char* k : {"return", "retcode", "success"})
      if (auto it = ret_load.find(k); it != ret_load.end()) rec[k] = *it;
    if (auto it = ret_load.find("out"); it != ret_load.end()) {
      f.out = wire::pack(*it, wire::packing::frame);
      f.has_out = true;
    }
  }
  f.rec = wire::pack(rec, wire::packing::frame);
  return f;
}

result<job_cache::return_write> job_cache::write_return(const fs::path& dir, const std::string& id,
                                                        const return_files& f) {
  // One mkdir (EEXIST when the minion returned before): no stat chain per return.
  const fs::path id_dir = dir / id;
  if (::mkdir(id_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    if (errno == ENOENT) return return_write::job_gone;  // cleaned, by us or another master
    spdlog::error("job cache: cannot create {}: {}", id_dir.string(), std::strerror(errno));
    return util::errc::io_error;
  }
  auto r = util::create_exclusive_nosync(id_dir / return_p, f.rec);
  if (!r) {
    if (r.error() == util::errc::already_exists) return return_write::exists;
    spdlog::error("job cache: cannot write {}", (id_dir / return_p).string());
    return r.error();
  }
  if (f.has_out) {
    if (auto o = util::write_file_atomic_nosync(id_dir / out_p, f.out); !o)
      spdlog::error("job cache: cannot write {}", (id_dir / out_p).string());
  }
  return return_write::written;
}

void job_cache::write_one(const pending_write& w) const {
  auto r = write_return(w.dir, w.id, w.files);
  if (!r) return;
  switch (*r) {
    case return_write::written:
      break;
    case return_write::exists:
      // Another process (or a restart race) stored one first: it wins, as on disk.
      conflicts_++;
      spdlog::debug("job cache: return.p of {} in {} already written by another writer", w.id, w.dir.string());
      break;
    case return_write::job_gone:
      spdlog::error("job cache: cannot create {}: {}", (w.dir / w.id).string(), std::strerror(ENOENT));
      break;
  }
}

// Under idx_mu_: add (or refresh) the index entry of a job. fresh: the job was just
// created by this process (no returns on disk yet); otherwise the directory is read.
void job_cache::index_job(const std::string& jid, const fs::path& dir, bool fresh) {
  const auto now = std::chrono::steady_clock::now();
  if (idx_.count(jid)) return;
  // Drop idle entries (and the oldest ones past the bound) before adding.
  for (auto it = idx_.begin(); it != idx_.end();) {
    if (now - it->second.used > kIndexIdle) it = idx_.erase(it);
    else ++it;
  }
  while (idx_.size() >= kMaxIndexedJobs) {
    auto oldest = idx_.begin();
    for (auto it = idx_.begin(); it != idx_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    idx_.erase(oldest);
  }
  job_entry e;
  e.used = now;
  if (!fresh) {
    e.nocache = ::access((dir / "nocache").c_str(), F_OK) == 0;
    if (mode_ == write_mode::sync) {  // sync mode decides first-wins on disk: no id list
      idx_.emplace(jid, std::move(e));
      return;
    }
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      if (::access((it->path() / return_p).c_str(), F_OK) == 0) e.ids.insert(std::move(name));
    }
  }
  idx_.emplace(jid, std::move(e));
}

bool job_cache::known_job(const std::string& jid, const fs::path& dir, bool& nocache) {
  {
    std::lock_guard lk(idx_mu_);
    if (auto it = idx_.find(jid); it != idx_.end()) {
      it->second.used = std::chrono::steady_clock::now();
      nocache = it->second.nocache;
      return true;
    }
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  std::lock_guard lk(idx_mu_);
  index_job(jid, dir, false);
  nocache = idx_[jid].nocache;
  return true;
}

fs::path job_cache::job_dir(const std::string& jid) const {
  // Every return of a job asks for its directory (a digest of the jid and a path built
  // from it): the last one is kept per thread, for this cache's directory and hash type.
  struct last_dir {
    std::string root, hash_type, jid;
    fs::path dir;
  };
  thread_local last_dir last;
  if (!jid.empty() && last.jid == jid && last.hash_type == hash_type_ && last.root == dir_.native()) return last.dir;
  auto d = crypto::hash_hex(jid, hash_type_);
  const std::string h = d ? *d : std::string(64, '0');
  fs::path dir = dir_ / h.substr(0, 2) / h.substr(2);
  if (d) last = last_dir{dir_.native(), hash_type_, jid, dir};
  return dir;
}

result<void> job_cache::save_load(const std::string& jid, const wire::value& load,
                                  const std::vector<std::string>& minions) {
  note_activity();  // a publish: its returns follow (the journal writer waits)
  try {
    fs::path dir = job_dir(jid);
    if (auto r = util::make_dirs(dir); !r) {
      spdlog::error("job cache: cannot create {}", dir.string());
      return r;
    }
    // Salt's prep_jid writes the jid file once; keep an existing one.
    auto j = util::create_exclusive_nosync(dir / jid_file, jid);
    if (!j && j.error() != util::errc::already_exists) {
      spdlog::error("job cache: cannot write {}", (dir / jid_file).string());
      return j;
    }
    if (auto r = util::write_file_atomic_nosync(dir / load_p, wire::pack(load, wire::packing::frame)); !r) {
      spdlog::error("job cache: cannot write {}", (dir / load_p).string());
      return r;
    }
    auto m = merge_minions(dir, minions);
    syncer_->note();
    {
      // A new job has no returns yet (jid file created just now); an existing one is read.
      const bool fresh = static_cast<bool>(j);
      std::lock_guard lk(idx_mu_);
      index_job(jid, dir, fresh);
    }
    return m;
  } catch (const std::exception& e) {
    spdlog::error("job cache: save_load {}: {}", jid, e.what());
    return util::errc::io_error;
  }
}

result<void> job_cache::add_minions(const std::string& jid, const std::vector<std::string>& minions) {
  try {
    auto m = merge_minions(job_dir(jid), minions);
    syncer_->note();
    return m;
  } catch (const std::exception& e) {
    spdlog::error("job cache: add_minions {}: {}", jid, e.what());
    return util::errc::io_error;
  }
}

bool is_jid(const std::string& jid) {
  if (jid.size() != 20 && (jid.size() <= 21 || jid[20] != '_')) return false;
  for (int i = 0; i < 20; ++i) {
    if (jid[i] < '0' || jid[i] > '9') return false;
  }
  return true;
}

result<return_record> job_cache::record_return(const std::string& jid, const std::string& id,
                                               const wire::value& ret_load) {
  if (jid == "nocache") return return_record::not_kept;
  bool known = false;
  if (mode_ != write_mode::sync) {  // a job in the index needs no stat
    std::lock_guard lk(idx_mu_);
    known = idx_.count(jid) != 0;
  }
  std::error_code ec;
  if (!known) known = std::filesystem::is_directory(job_dir(jid), ec);
  if (!known && is_jid(jid)) {
    // Salt's store_job calls prep_jid(passed_jid=jid) first, so returns of jobs this
    // master did not publish (minion schedules, cleaned jobs) are kept too.
    known = static_cast<bool>(add_minions(jid, {}));
  }
  auto r = save_return(jid, id, ret_load);
  if (!r) return r.error();
  if (*r) return return_record::stored;
  return known ? return_record::duplicate : return_record::not_kept;
}

result<bool> job_cache::save_return(const std::string& jid, const std::string& id, const wire::value& ret_load) {
  try {
    if (!pki::valid_id(id)) {
      spdlog::warn("job cache: refusing return for jid {} from invalid id '{}'", detail::printable(jid),
                   detail::printable(id));
      return util::errc::invalid_argument;
    }
    if (mode_ == write_mode::journal) return save_return_async(jid, id, ret_load);  // bounded there
    if (mode_ == write_mode::async) {
      std::size_t queued;
      {
        std::lock_guard lk(q_mu_);
        queued = q_.size();
      }
      if (queued < queue_bound()) return save_return_async(jid, id, ret_load);
      drain();  // back-pressure: the writer is far behind
    }
    return save_return_sync(jid, id, ret_load);
  } catch (const std::exception& e) {
    spdlog::error("job cache: save_return {} {}: {}", jid, id, e.what());
    return util::errc::io_error;
  }
}

std::size_t job_cache::queue_bound() const noexcept {
  return mode_ == write_mode::journal ? kMaxQueuedJournal : kMaxQueued;
}

bool job_cache::records_without_io(const std::string& jid) const {
  if (mode_ == write_mode::sync) return false;
  {
    std::lock_guard lk(q_mu_);
    if (q_.size() >= queue_bound()) return false;
  }
  std::lock_guard lk(idx_mu_);
  return idx_.count(jid) != 0;
}

// Under save_return's try: id checked, queue below its bound.
result<bool> job_cache::save_return_async(const std::string& jid, const std::string& id,
                                          const wire::value& ret_load) {
  fs::path dir = job_dir(jid);
  bool indexed;
  {
    std::lock_guard lk(idx_mu_);
    indexed = idx_.count(jid) != 0;
  }
  if (!indexed) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      log_unknown_job(id, jid);
      return false;
    }
    drain();  // returns of an evicted entry still queued must be on disk before reading it
    std::lock_guard lk(idx_mu_);
    index_job(jid, dir, false);
  }
  {
    std::lock_guard lk(idx_mu_);
    auto it = idx_.find(jid);
    if (it == idx_.end()) {  // evicted meanwhile (bound reached by other jobs)
      index_job(jid, dir, false);
      it = idx_.find(jid);
    }
    auto& e = it->second;
    e.used = std::chrono::steady_clock::now();
    if (e.nocache) return false;
    if (!e.ids.insert(id).second) {
      spdlog::debug("job cache: duplicate return from {} for jid {} ignored", id, jid);
      return false;
    }
  }
  pending_write w;
  w.files = pack_return(ret_load);
  w.dir = std::move(dir);
  w.id = id;
  std::string record;
  if (journal_) record = keyed_payload(jid, journal_body(id, w.files));
  note_activity();
  bool wake = false;
  bool journaled = true;
  {
    std::lock_guard lk(q_mu_);
    if (journal_) {
      // In the journal before the ack; appended and queued under one lock, so the queue
      // is in journal order (the writer releases records by sequence). Past the queue's
      // bound (the writer is far behind: no idle CPU for long) the return is written
      // here instead, as in sync mode.
      if (q_.size() >= queue_bound()) journaled = false;
      else if (auto seq = journal_->append('R', record)) w.seq = *seq;
      else journaled = false;
    }
    if (journaled) {
      // Wake the writer only when it sleeps on an empty queue: while it writes a batch
      // it looks at the queue again before sleeping (one wake-up per batch, not per return).
      wake = q_.empty() && !writing_;
      w.queued_at = std::chrono::steady_clock::now();
      q_.push_back(std::move(w));
    }
  }
  if (!journaled) {
    // The queue is at its bound, or the journal is full or failing: written here,
    // before the ack, as in sync mode.
    if (auto n = journal_refused_log_.hit())
      spdlog::warn("job cache journal: {} return(s) written before the ack instead (the writer is behind, or the "
                   "journal fails)",
                   n);
    auto r = write_return(w.dir, w.id, w.files);
    if (!r) return result<bool>(boost::system::in_place_error, r.error());
    syncer_->note();
    return *r == return_write::written;
  }
  if (wake) q_cv_.notify_one();
  return true;
}

// Under save_return's try: id checked.
result<bool> job_cache::save_return_sync(const std::string& jid, const std::string& id,
                                         const wire::value& ret_load) {
  fs::path dir = job_dir(jid);
  bool nocache = false;
  if (!known_job(jid, dir, nocache)) {
    log_unknown_job(id, jid);
    return false;
  }
  // The marker is checked on every return (it may be added after the job was indexed).
  (void)nocache;
  if (::access((dir / "nocache").c_str(), F_OK) == 0) return false;
  auto w = write_return(dir, id, pack_return(ret_load));
  if (!w) return result<bool>(boost::system::in_place_error, w.error());
  switch (*w) {
    case return_write::written:
      break;
    case return_write::exists:
      spdlog::debug("job cache: duplicate return from {} for jid {} ignored", id, jid);
      return false;
    case return_write::job_gone: {
      {
        std::lock_guard lk(idx_mu_);
        idx_.erase(jid);
      }
      log_unknown_job(id, jid);
      return false;
    }
  }
  syncer_->note();
  return true;
}

void job_cache::flush() {
  drain();
  syncer_->flush();
}

std::optional<wire::value> job_cache::get_load(const std::string& jid) const {
  drain();
  try {
    return read_packed(job_dir(jid) / load_p);
  } catch (const std::exception& e) {
    spdlog::error("job cache: get_load {}: {}", jid, e.what());
    return std::nullopt;
  }
}

std::vector<std::string> job_cache::get_minions(const std::string& jid) const {
  drain();
  try {
    fs::path dir = job_dir(jid);
    std::set<std::string> all;
    // .minions.p plus syndic lists .minions.<syndic>.p, as Salt's get_load.
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name == minions_p || (name.starts_with(".minions.") && name.ends_with(".p") && name.size() > 11))
        if (auto v = read_packed(it->path())) add_ids(all, *v);
    }
    return {all.begin(), all.end()};
  } catch (const std::exception& e) {
    spdlog::error("job cache: get_minions {}: {}", jid, e.what());
    return {};
  }
}

wire::value job_cache::get_returns(const std::string& jid) const {
  drain();
  wire::value out = wire::value::object();
  try {
    fs::path dir = job_dir(jid);
    std::vector<std::string> ids;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      std::error_code ec2;
      if (name.empty() || name[0] == '.' || !it->is_directory(ec2)) continue;
      ids.push_back(std::move(name));
    }
    std::sort(ids.begin(), ids.end());
    for (const auto& id : ids) {
      auto data = read_packed(dir / id / return_p);
      if (!data) continue;  // not written yet, or unreadable: skip
      wire::value rec;
      if (data->is_object() && data->contains("return")) {
        rec = std::move(*data);
      } else {  // Salt's old format: return.p held the bare return
        rec = wire::value::object();
        rec["return"] = std::move(*data);
      }
      if (auto o = read_packed(dir / id / out_p)) rec["out"] = std::move(*o);
      out[id] = std::move(rec);
    }
  } catch (const std::exception& e) {
    spdlog::error("job cache: get_returns {}: {}", jid, e.what());
  }
  return out;
}

std::vector<job_summary> job_cache::list_jobs(std::size_t max) const {
  drain();
  std::vector<job_summary> jobs;
  try {
    std::error_code ec;
    for (fs::directory_iterator top(dir_, ec), end; !ec && top != end; top.increment(ec)) {
      std::error_code ec2;
      for (fs::directory_iterator fin(top->path(), ec2), end2; !ec2 && fin != end2; fin.increment(ec2)) {
        auto load = read_packed(fin->path() / load_p);
        if (!load || !load->is_object() || load->empty()) continue;
        std::string jid;
        if (auto j = wire::find(*load, "jid")) jid = text_or_empty(*j);
        if (jid.empty()) {
          auto f = util::read_file_nofollow(fin->path() / jid_file, 4096);
          if (!f) continue;
          jid = *f;
        }
        if (jid.empty()) continue;
        job_summary s;
        s.jid = std::move(jid);
        s.load = std::move(*load);
        jobs.push_back(std::move(s));
      }
    }
    // jids are fixed-width digit strings: text order is time order. Newest first.
    std::sort(jobs.begin(), jobs.end(), [](const job_summary& a, const job_summary& b) { return a.jid > b.jid; });
    if (max != 0 && jobs.size() > max) jobs.resize(max);
    for (auto& j : jobs) j.minions = get_minions(j.jid);
  } catch (const std::exception& e) {
    spdlog::error("job cache: list_jobs: {}", e.what());
  }
  return jobs;
}

std::size_t job_cache::clean_old(std::chrono::seconds keep) {
  // As Salt: keep_jobs_seconds == 0 disables cleaning.
  if (keep.count() <= 0) return 0;
  drain();
  {
    std::lock_guard lk(idx_mu_);  // removed jobs must not stay indexed
    idx_.clear();
  }
  std::size_t removed = 0;
  try {
    const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const std::int64_t cutoff_us = now_us - static_cast<std::int64_t>(keep.count()) * 1000000;
    auto mtime_old = [&](const fs::path& p) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) return false;
      return static_cast<std::int64_t>(st.st_mtime) * 1000000 < cutoff_us;
    };
    std::error_code ec;
    std::vector<fs::path> tops;
    for (fs::directory_iterator top(dir_, ec), end; !ec && top != end; top.increment(ec)) tops.push_back(top->path());
    for (const auto& t : tops) {
      std::vector<fs::path> finals;
      std::error_code ec2;
      for (fs::directory_iterator fin(t, ec2), end2; !ec2 && fin != end2; fin.increment(ec2))
        finals.push_back(fin->path());
      for (const auto& f : finals) {
        // Age by the jid's own timestamp (the jid file, else the load's jid). A dir with
        // neither is a half-created or corrupt entry: removed once its mtime is old too
        // (a fresh one may be mid-creation by another master).
        std::optional<std::int64_t> t_us;
        if (auto j = util::read_file_nofollow(f / jid_file, 4096)) t_us = detail::jid_micros(*j);
        if (!t_us)
          if (auto l = read_packed(f / load_p))
            if (auto j = wire::get_text(*l, "jid")) t_us = detail::jid_micros(*j);
        bool old = t_us ? *t_us < cutoff_us : mtime_old(f);
        if (!old) continue;
        std::error_code ec3;
        fs::remove_all(f, ec3);
        if (ec3) {
          spdlog::error("job cache: unable to remove {}: {}", f.string(), ec3.message());
          continue;
        }
        ++removed;
      }
      // The hash bucket itself stays, empty or not (Salt removes empty ones): on a shared
      // cache another master may be creating a job in it right now, and masters must not
      // race to create it again (docs/gluster.md, section 4).
    }
  } catch (const std::exception& e) {
    spdlog::error("job cache: clean_old: {}", e.what());
  }
  return removed;
}

}  // namespace sylvite::master
