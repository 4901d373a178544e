// Atomic file writes: temp in the same directory, write, fsync, rename, fsync(dir).
// The temp name carries pid + a counter so concurrent writers (threads or masters on a
// shared filesystem) never share a temp file.
#include "core/util/files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>
#include <map>
#include <cstdio>
#include <string>

namespace sylvite::util {
namespace fs = std::filesystem;

namespace {
std::atomic<unsigned long> temp_counter{0};

std::string temp_name(const fs::path& p) {
  // Host name looked up once per process (it was a uname(2) per write).
  static const std::string host = [] {
    char h[64] = {0};
    ::gethostname(h, sizeof h - 1);
    return std::string(h);
  }();
  return (p.parent_path() / ("." + p.filename().string() + ".tmp." + host + "." + std::to_string(::getpid()) + "." +
                             std::to_string(temp_counter.fetch_add(1))))
      .string();
}

bool write_all(int fd, std::string_view data) {
  const char* ptr = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, ptr, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    ptr += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// The system's error for a failed call (errno saved right after it), so a log line names
// the real cause ("Transport endpoint is not connected", "Read-only file system", ...).
error_code os_error(int err) { return {err != 0 ? err : EIO, boost::system::system_category()}; }

// Write data to a fresh temp file next to p; returns its name, or empty on failure with
// the failing call's errno in err.
std::string write_temp(const fs::path& p, std::string_view data, unsigned mode, int& err, bool sync = true) {
  std::string tmp = temp_name(p);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    err = errno;
    return {};
  }
  bool ok = write_all(fd, data) && ::fchmod(fd, mode) == 0 && (!sync || ::fsync(fd) == 0);
  if (!ok) err = errno;
  if (::close(fd) != 0 && ok) {
    err = errno;
    ok = false;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return {};
  }
  return tmp;
}
}  // namespace

namespace {
// Reads fd to its end and closes it; EFBIG once more than max_bytes were read.
result<std::string> read_all_and_close(int fd, std::size_t max_bytes) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return os_error(err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {  // grew while read
      ::close(fd);
      return os_error(EFBIG);
    }
  }
  ::close(fd);
  return out;
}
}  // namespace

result<std::string> read_file(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? make_error_code(errc::not_found) : os_error(errno);
  return read_all_and_close(fd, std::numeric_limits<std::size_t>::max());
}

result<std::string> read_file_nofollow(const fs::path& p, std::size_t max_bytes) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT ? make_error_code(errc::not_found) : os_error(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return os_error(EINVAL);
  }
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return os_error(EFBIG);
  }
  return read_all_and_close(fd, max_bytes);
}

result<void> make_dirs(const fs::path& p, unsigned mode) {
  if (p.empty()) return {};
  std::error_code ec;
  if (fs::is_directory(p, ec)) return {};
  auto parent = p.parent_path();
  if (!parent.empty() && parent != p) {
    auto r = make_dirs(parent, mode);
    if (!r) return r;
  }
  if (::mkdir(p.c_str(), mode) != 0 && errno != EEXIST) return os_error(errno);
  return {};
}

file_lock::file_lock(const fs::path& p) {
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    err_ = os_error(errno);
    return;
  }
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  int rc;
  while ((rc = ::fcntl(fd_, F_SETLKW, &fl)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    err_ = os_error(errno);
    ::close(fd_);
    fd_ = -1;
  }
}

file_lock::~file_lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

result<void> make_shared_dirs(const fs::path& top, const std::vector<std::pair<fs::path, unsigned>>& dirs) {
  if (auto r = make_dirs(top, 0700); !r) return r;
  file_lock lk(top / ".sylvite-layout.lock");
  if (!lk.locked()) return lk.error();
  for (const auto& [rel, mode] : dirs)
    if (auto r = make_dirs(top / rel, mode); !r) return r;
  return {};
}

result<void> write_file_atomic(const fs::path& p, std::string_view data, unsigned mode) {
  if (auto r = make_dirs(p.parent_path(), 0700); !r) return r;
  int err = 0;
  std::string tmp = write_temp(p, data, mode, err);
  if (tmp.empty()) return os_error(err);
  if (::rename(tmp.c_str(), p.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return os_error(err);
  }
  fsync_dir(p.parent_path());
  return {};
}

result<void> create_exclusive(const fs::path& p, std::string_view data, unsigned mode) {
  if (auto r = make_dirs(p.parent_path(), 0700); !r) return r;
  int werr = 0;
  std::string tmp = write_temp(p, data, mode, werr);
  if (tmp.empty()) return os_error(werr);
  // link(2) fails with EEXIST if the name exists: the complete file appears atomically
  // and only one racer wins (works on local filesystems and GlusterFS).
  int rc = ::link(tmp.c_str(), p.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0) return err == EEXIST ? make_error_code(errc::already_exists) : os_error(err);
  fsync_dir(p.parent_path());
  return {};
}

result<void> write_file_atomic_nosync(const fs::path& p, std::string_view data, unsigned mode) {
  int err = 0;
  std::string tmp = write_temp(p, data, mode, err, false);
  if (tmp.empty()) {
    // Parent missing (first write in a new dir): create it and retry once. The common
    // case costs no stat.
    if (err != ENOENT) return os_error(err);
    if (auto r = make_dirs(p.parent_path(), 0700); !r) return r;
    tmp = write_temp(p, data, mode, err, false);
    if (tmp.empty()) return os_error(err);
  }
  if (::rename(tmp.c_str(), p.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return os_error(err);
  }
  return {};
}

namespace {
// O_TMPFILE variant: an unnamed inode in p's directory, written, then linked as p
// (linkat through /proc/self/fd, no privilege needed). No temp name to create and remove.
// 1 = linked, 0 = p exists, -1 = not possible here (no O_TMPFILE/proc: use the temp
// name), -2 = error (errno in err).
std::atomic<bool> tmpfile_unsupported{false};

int create_exclusive_tmpfile(const fs::path& p, std::string_view data, unsigned mode, int& err) {
#ifdef O_TMPFILE
  if (tmpfile_unsupported.load(std::memory_order_relaxed)) return -1;
  const fs::path dir = p.parent_path();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) tmpfile_unsupported = true;
    return -1;  // also ENOENT (parent missing): the caller's path creates it
  }
  bool ok = write_all(fd, data) && ::fchmod(fd, mode) == 0;
  if (!ok) {
    err = errno;
    ::close(fd);
    return -2;
  }
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  int rc = ::linkat(AT_FDCWD, proc, AT_FDCWD, p.c_str(), AT_SYMLINK_FOLLOW);
  err = errno;
  ::close(fd);
  if (rc == 0) return 1;
  if (err == EEXIST) return 0;
  if (err == ENOENT || err == EPERM || err == EOPNOTSUPP) {  // no /proc, or the fs refuses
    tmpfile_unsupported = true;
    return -1;
  }
  return -2;
#else
  (void)p, (void)data, (void)mode, (void)err;
  return -1;
#endif
}
}  // namespace

result<void> create_exclusive_nosync(const fs::path& p, std::string_view data, unsigned mode) {
  int err = 0;
  switch (create_exclusive_tmpfile(p, data, mode, err)) {
    case 1:
      return {};
    case 0:
      return errc::already_exists;
    case -2:
      return os_error(err);
    default:
      break;
  }
  std::string tmp = write_temp(p, data, mode, err, false);
  if (tmp.empty()) {
    if (err != ENOENT) return os_error(err);
    if (auto r = make_dirs(p.parent_path(), 0700); !r) return r;
    tmp = write_temp(p, data, mode, err, false);
    if (tmp.empty()) return os_error(err);
  }
  int rc = ::link(tmp.c_str(), p.c_str());
  err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0) return err == EEXIST ? make_error_code(errc::already_exists) : os_error(err);
  return {};
}

// ---------------------------------------------------------------- group_syncer
namespace {
// p, or its nearest existing ancestor (the directory may not exist yet).
fs::path existing_ancestor(fs::path p) {
  struct stat st {};
  if (p.empty()) p = ".";
  while (::stat(p.c_str(), &st) != 0 && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p;
}
}  // namespace

group_syncer::group_syncer(const fs::path& any_path_on_fs, std::chrono::milliseconds gather) : gather_(gather) {
  fd_ = ::open(existing_ancestor(any_path_on_fs).c_str(), O_RDONLY | O_CLOEXEC);
  thread_ = std::thread([this] { run(); });
}

group_syncer::~group_syncer() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<group_syncer> group_syncer::shared_for(const fs::path& p) {
  static std::mutex m;
  static std::map<std::uint64_t, std::weak_ptr<group_syncer>> by_dev;
  struct stat st {};
  std::uint64_t dev = ::stat(existing_ancestor(p).c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_dev) : 0;
  std::lock_guard lk(m);
  if (auto s = by_dev[dev].lock()) return s;
  auto s = std::make_shared<group_syncer>(p);
  by_dev[dev] = s;
  return s;
}

std::uint64_t group_syncer::note() {
  std::uint64_t t;
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    t = ++noted_;
    if (idle_) {  // otherwise the thread looks at noted_ before it sleeps again
      idle_ = false;
      wake = true;
      ++wakes_;
    }
  }
  if (wake) cv_.notify_one();
  return t;
}

void group_syncer::wait(std::uint64_t ticket) {
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [&] { return durable_ >= ticket; });
}

std::uint64_t group_syncer::syncs() const {
  std::lock_guard lk(mu_);
  return syncs_;
}
std::uint64_t group_syncer::noted() const {
  std::lock_guard lk(mu_);
  return noted_;
}
std::uint64_t group_syncer::durable() const {
  std::lock_guard lk(mu_);
  return durable_;
}
std::uint64_t group_syncer::wakes() const {
  std::lock_guard lk(mu_);
  return wakes_;
}

void group_syncer::run() {
  // Durability work trails the request path: lower priority than the callers' threads.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock lk(mu_);
  for (;;) {
    idle_ = true;
    cv_.wait(lk, [&] { return stop_ || noted_ > durable_; });
    idle_ = false;
    if (noted_ <= durable_) return;  // stopping, nothing left
    // Let a burst gather (many returns of one fan-out share one sync); notes meanwhile
    // do not wake the thread (idle_ is false), only the destructor does.
    if (!stop_ && gather_.count() > 0) cv_.wait_for(lk, gather_, [&] { return stop_; });
    const std::uint64_t upto = noted_;  // every write noted before the sync starts
    lk.unlock();
    if (fd_ >= 0) ::syncfs(fd_);
    else ::sync();
    lk.lock();
    durable_ = upto;
    ++syncs_;
    done_cv_.notify_all();
  }
}

result<void> remove_file(const fs::path& p) {
  if (::unlink(p.c_str()) != 0 && errno != ENOENT) return os_error(errno);
  return {};
}

std::vector<std::string> list_dir(const fs::path& p) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    auto name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // skip temp files and hidden markers
    if (it->is_regular_file(ec2)) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sylvite::util
