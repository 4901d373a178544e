// sylvite::util child processes (spawn.hpp).
#include "core/util/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sylvite::util {

std::filesystem::path program_beside_self(std::string_view name) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::filesystem::path(name);
  return self.parent_path() / name;
}

pid_t spawn_child(const child_spec& spec) {
  // Everything the child needs is made before fork: after it, only async-signal-safe calls.
  const std::string path = spec.program.string();
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int keep_below = 3;  // stdio
  for (const auto& m : spec.fds) keep_below = std::max(keep_below, m.second + 1);
  const int park = keep_below + 16;  // above every target: parking never clobbers one
  const rlim_t as_limit = static_cast<rlim_t>(spec.address_space_limit);

  const pid_t pid = ::fork();
  if (pid != 0) return pid;

  // Child.
  ::setsid();
  int parked[64];
  const std::size_t n = std::min<std::size_t>(spec.fds.size(), 64);
  if (n != spec.fds.size()) ::_exit(126);
  for (std::size_t i = 0; i < n; ++i) {
    parked[i] = ::fcntl(spec.fds[i].first, F_DUPFD, park);  // no CLOEXEC on the copy
    if (parked[i] < 0) ::_exit(126);
  }
  for (std::size_t i = 0; i < n; ++i)
    if (::dup2(parked[i], spec.fds[i].second) < 0) ::_exit(126);  // dup2 clears CLOEXEC
  // Below the highest target: every number from 3 that is not a target (close_range below
  // takes the rest).
  for (int fd = 3; fd < keep_below; ++fd) {
    bool target = false;
    for (std::size_t i = 0; i < n; ++i) target = target || spec.fds[i].second == fd;
    if (!target) ::close(fd);
  }
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(keep_below), ~0U, 0U) != 0)
#endif
  {
    long maxfd = ::sysconf(_SC_OPEN_MAX);
    for (long fd = keep_below; fd < (maxfd > 0 ? maxfd : 1024); ++fd) ::close(static_cast<int>(fd));
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (as_limit > 0) {
    rlimit rl{as_limit, as_limit};
    ::setrlimit(RLIMIT_AS, &rl);
  }
  ::execv(path.c_str(), argv.data());
  ::_exit(127);
}

}  // namespace sylvite::util
