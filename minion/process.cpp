// sylvite::minion process runner (see process.hpp).
// Exit status follows Python's subprocess: exit code, or -signal for a killed child (Salt
// reports proc.returncode as is). On timeout the process group is killed with SIGKILL, the
// pipes are drained and the child reaped.
#include "minion/process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sylvite::minion {

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

process_result run_process(const process_spec& spec) {
  process_result r;
  if (spec.argv.empty()) {
    r.exec_errno = EINVAL;
    return r;
  }
  // Everything the child needs is prepared before fork (no allocation after fork).
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, in_p[2] = {-1, -1}, exec_p[2] = {-1, -1};
  auto cleanup = [&] {
    for (int* p : {out_p, err_p, in_p, exec_p}) {
      close_fd(p[0]);
      close_fd(p[1]);
    }
  };
  if (::pipe2(out_p, O_CLOEXEC) != 0 || (!spec.merge_stderr && ::pipe2(err_p, O_CLOEXEC) != 0) ||
      (spec.stdin_data && ::pipe2(in_p, O_CLOEXEC) != 0) || ::pipe2(exec_p, O_CLOEXEC) != 0) {
    r.exec_errno = errno;
    cleanup();
    return r;
  }
  int devnull = spec.stdin_data ? -1 : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const char* path_env = nullptr;
  for (const auto& e : spec.env)
    if (e.rfind("PATH=", 0) == 0) path_env = e.c_str() + 5;
  const bool search = spec.argv[0].find('/') == std::string::npos;
  // Candidate paths for a PATH search, built before fork.
  std::vector<std::string> candidates;
  if (search) {
    std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    for (;;) {
      auto pos = path.find(':', start);
      std::string dir = path.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
      candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + spec.argv[0]);
      if (pos == std::string::npos) break;
      start = pos + 1;
    }
  } else {
    candidates.push_back(spec.argv[0]);
  }

  pid_t pid = ::fork();
  if (pid < 0) {
    r.exec_errno = errno;
    cleanup();
    if (devnull >= 0) ::close(devnull);
    return r;
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    // close_fds=True: nothing but 0/1/2 survives exec (the error pipe is already CLOEXEC).
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      long maxfd = ::sysconf(_SC_OPEN_MAX);
      for (int fd = 3; fd < (maxfd > 0 ? maxfd : 1024); ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    int in_fd = spec.stdin_data ? in_p[0] : devnull;
    if (in_fd >= 0) ::dup2(in_fd, 0);
    ::dup2(out_p[1], 1);
    ::dup2(spec.merge_stderr ? out_p[1] : err_p[1], 2);
    int err = 0;
    if (spec.umask) ::umask(*spec.umask);
    if (spec.gid && ::setgid(*spec.gid) != 0) err = errno;
    if (!err && spec.uid && spec.user && ::initgroups(spec.user->c_str(), spec.gid ? *spec.gid : 0) != 0) err = errno;
    if (!err && spec.uid && ::setuid(*spec.uid) != 0) err = errno;
    if (!err && ::chdir(spec.cwd.c_str()) != 0) err = errno;
    if (!err) {
      for (const auto& c : candidates) {
        ::execve(c.c_str(), argv.data(), envp.data());
        if (errno != ENOENT && errno != ENOTDIR) err = errno;
      }
      if (!err) err = errno ? errno : ENOENT;
    }
    ssize_t w = ::write(exec_p[1], &err, sizeof err);
    (void)w;
    ::_exit(127);
  }
  // Parent.
  ::setpgid(pid, pid);  // no race with the child's own setpgid
  r.pid = pid;
  if (devnull >= 0) ::close(devnull);
  close_fd(out_p[1]);
  close_fd(err_p[1]);
  close_fd(in_p[0]);
  close_fd(exec_p[1]);
  {
    int child_err = 0;
    ssize_t n;
    do n = ::read(exec_p[0], &child_err, sizeof child_err);
    while (n < 0 && errno == EINTR);
    close_fd(exec_p[0]);
    if (n == static_cast<ssize_t>(sizeof child_err)) {
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      r.exec_errno = child_err;
      cleanup();
      return r;
    }
  }
  r.started = true;
  if (in_p[1] >= 0) ::fcntl(in_p[1], F_SETFL, O_NONBLOCK);
  std::size_t in_off = 0;
  if (in_p[1] >= 0 && spec.stdin_data->empty()) close_fd(in_p[1]);

  using clock = std::chrono::steady_clock;
  const auto deadline = spec.timeout ? clock::now() + *spec.timeout : clock::time_point::max();
  bool killed = false;
  char buf[65536];
  while (out_p[0] >= 0 || err_p[0] >= 0) {
    pollfd fds[3];
    int n = 0;
    int idx_out = -1, idx_err = -1, idx_in = -1;
    if (out_p[0] >= 0) { fds[n] = {out_p[0], POLLIN, 0}; idx_out = n++; }
    if (err_p[0] >= 0) { fds[n] = {err_p[0], POLLIN, 0}; idx_err = n++; }
    if (in_p[1] >= 0) { fds[n] = {in_p[1], POLLOUT, 0}; idx_in = n++; }
    int wait_ms = -1;
    if (!killed && spec.timeout) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      wait_ms = left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000LL * 3600));
    } else if (killed) {
      wait_ms = 2000;  // drain what the killed group left; do not hang on escaped children
    }
    int pr = ::poll(fds, static_cast<nfds_t>(n), wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pr == 0) {
      if (killed) break;
      if (spec.timeout && clock::now() >= deadline) {
        ::kill(-pid, SIGKILL);
        killed = true;
        r.timed_out = true;
        close_fd(in_p[1]);
      }
      continue;
    }
    auto drain = [&](int idx, int& fd, std::string& into) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
      ssize_t got = ::read(fd, buf, sizeof buf);
      if (got > 0) into.append(buf, static_cast<std::size_t>(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN)) close_fd(fd);
    };
    drain(idx_out, out_p[0], r.out);
    drain(idx_err, err_p[0], r.err);
    if (idx_in >= 0 && (fds[idx_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const std::string& data = *spec.stdin_data;
      ssize_t w = ::write(in_p[1], data.data() + in_off, data.size() - in_off);
      if (w > 0) in_off += static_cast<std::size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) close_fd(in_p[1]);
      if (in_off >= data.size()) close_fd(in_p[1]);
    }
  }
  int st = 0;
  if (killed) ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  cleanup();
  if (WIFEXITED(st)) r.retcode = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) r.retcode = -WTERMSIG(st);
  return r;
}

std::optional<std::vector<std::string>> shlex_split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  enum { none, single, dbl } q = none;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (q == single) {
      if (c == '\'') q = none;
      else cur.push_back(c);
      continue;
    }
    if (q == dbl) {
      if (c == '"') q = none;
      else if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '"' || s[i + 1] == '\\' || s[i + 1] == '$' || s[i + 1] == '`')) cur.push_back(s[++i]);
      else cur.push_back(c);
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) out.push_back(std::move(cur));
      cur.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') q = single;
    else if (c == '"') q = dbl;
    else if (c == '\\') {
      if (i + 1 >= s.size()) return std::nullopt;
      cur.push_back(s[++i]);
    } else {
      cur.push_back(c);
    }
  }
  if (q != none) return std::nullopt;
  if (in_word) out.push_back(std::move(cur));
  return out;
}

}  // namespace sylvite::minion
