// sylvite::util files: atomic writes and tolerant reads.
// Every write is temp-file + fsync + rename (+ fsync of the directory), so a reader
// (possibly another master on a shared filesystem) sees the old or the new content,
// never a half-written file. create_exclusive() uses O_EXCL for once-only creates.
// Thread-safety: free functions, safe to call concurrently on different paths.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/result.hpp"

namespace sylvite::util {

// Read a whole file. errc::not_found if missing, errc::io_error otherwise.
result<std::string> read_file(const std::filesystem::path& p);

// read_file for files a writer on a shared filesystem could replace (key files, session
// keys, job cache files): the last path component must be a regular file, not a symlink
// (O_NOFOLLOW: ELOOP) nor a FIFO/device (opened O_NONBLOCK, then fstat: EINVAL), and at
// most max_bytes long (EFBIG). errc::not_found if missing.
result<std::string> read_file_nofollow(const std::filesystem::path& p, std::size_t max_bytes = 64u << 20);

// Atomically replace p with data (mode applied to the temp file before rename).
// Creates parent directories (0700) if missing.
result<void> write_file_atomic(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);

// Create p with data only if it does not exist yet (O_EXCL on a temp + link(2), so the
// content is complete the moment the name appears). errc::already_exists if it exists.
result<void> create_exclusive(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);

// The same two writes without any fsync (Salt's local_cache durability, plus atomicity):
// temp file + rename/link, so every reader on this OS sees the whole content or nothing,
// and a killed process never leaves a half-written file; but after an OS crash or power
// loss a file written in the last moments may be missing or empty (readers must skip an
// empty/unparsable file). Pair with group_syncer to bound that window.
// Parent directories are created (0700) if missing, as above.
result<void> write_file_atomic_nosync(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);
result<void> create_exclusive_nosync(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);

// An exclusive POSIX record lock (fcntl F_SETLKW) on a lock file, created if missing, held
// for the object's lifetime (closing the file releases it). It excludes processes, also on
// other GlusterFS mounts, not threads of one process. locked() false: the file could not
// be opened or locked (error() has the errno).
class file_lock {
 public:
  explicit file_lock(const std::filesystem::path& p);
  ~file_lock();
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;
  bool locked() const noexcept { return fd_ >= 0; }
  error_code error() const noexcept { return err_; }

 private:
  int fd_ = -1;
  error_code err_;
};

// Directories under a top directory that several masters share (a GlusterFS volume),
// each {path relative to top, mode}, created with their parents under an fcntl lock on
// top/.sylvite-layout.lock. GlusterFS can leave a directory that two clients create (or
// look up while another creates it) at the same moment in gfid split brain: EIO on every
// mount until healed by hand. Masters starting together therefore take turns; the lock
// is held for a stat per directory once they exist. top itself is created if missing,
// unlocked (deploy/gluster/layout.sh makes it beforehand).
result<void> make_shared_dirs(const std::filesystem::path& top,
                              const std::vector<std::pair<std::filesystem::path, unsigned>>& dirs);

// Group commit for the *_nosync writes: writers call note() after a write; one background
// thread makes everything noted so far durable with one syncfs(2) of the filesystem per
// batch (all writes that arrive while a sync runs share the next one). wait(ticket)
// blocks until a sync that started after note() returned `ticket` has finished.
// note() wakes the thread only when it sleeps with nothing to do: the writes of a burst
// that arrive while it gathers or syncs cost no wake-up (a futex call and a context
// switch each, on the request path).
// One instance per filesystem per process: shared_for(path).
// Thread-safety: every method from any thread; the destructor does a last sync and joins.
class group_syncer {
 public:
  explicit group_syncer(const std::filesystem::path& any_path_on_fs,
                        std::chrono::milliseconds gather = std::chrono::milliseconds(5));
  ~group_syncer();
  group_syncer(const group_syncer&) = delete;
  group_syncer& operator=(const group_syncer&) = delete;

  // The process-wide syncer of the filesystem holding p (created on first use).
  static std::shared_ptr<group_syncer> shared_for(const std::filesystem::path& p);

  std::uint64_t note();                 // a write happened; returns its ticket
  void wait(std::uint64_t ticket);      // until that write is durable
  void flush() { wait(note()); }
  std::uint64_t syncs() const;          // syncfs calls made so far
  std::uint64_t noted() const;          // notes so far
  std::uint64_t durable() const;        // highest ticket known durable
  std::uint64_t wakes() const;          // times note() woke the thread

 private:
  void run();
  int fd_ = -1;
  std::chrono::milliseconds gather_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work for the thread
  std::condition_variable done_cv_;  // a sync finished
  std::uint64_t noted_ = 0;
  std::uint64_t durable_ = 0;
  std::uint64_t syncs_ = 0;
  std::uint64_t wakes_ = 0;
  bool idle_ = false;  // the thread waits for a note (mu_)
  bool stop_ = false;
  std::thread thread_;
};

// Remove a file; missing is not an error.
result<void> remove_file(const std::filesystem::path& p);

// mkdir -p with mode for created dirs.
result<void> make_dirs(const std::filesystem::path& p, unsigned mode = 0755);

// Regular file names in a directory, sorted; missing dir -> empty.
std::vector<std::string> list_dir(const std::filesystem::path& p);

}  // namespace sylvite::util
