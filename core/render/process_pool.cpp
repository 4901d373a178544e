// sylvite::render process pool (render.hpp): N `sylvite-render` worker processes, started
// lazily (fork + exec), each talking over one AF_UNIX socketpair as its stdin/stdout
// (send with MSG_NOSIGNAL: a dead worker never raises SIGPIPE in the master). Frames are
// a 4-byte big-endian length + JSON; while a file renders the worker may send calls
// (render.hpp call_handler) that are answered on the same socket. A render holds one
// worker for its whole duration; a worker that times out, dies, answers garbage or makes
// a call that is not allowed is SIGKILLed (its process group: cmd.run children too),
// reaped and replaced by the next render.
// Thread-safety: render() may be called from any thread; the pool's state is under mu_.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "core/render/render.hpp"
#include "core/render/render_protocol.hpp"
#include "core/util/spawn.hpp"

namespace sylvite::render {
namespace {

using clock = std::chrono::steady_clock;

// AddressSanitizer reserves terabytes of address space: no RLIMIT_AS in such builds.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool sanitized_build = true;
#else
constexpr bool sanitized_build = false;
#endif
#else
constexpr bool sanitized_build = false;
#endif

struct worker_proc {
  pid_t pid = -1;
  int fd = -1;  // our end of the socketpair
};

void kill_and_reap(worker_proc& w) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  if (w.pid > 0) {
    ::kill(-w.pid, SIGKILL);  // the worker is its own process group leader (setsid)
    ::kill(w.pid, SIGKILL);
    while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  w.pid = -1;
}

// Why a worker ended, for the message: "exited with status 3" / "killed by signal 9".
std::string reap_reason(worker_proc& w) {
  std::string why = "worker process " + std::to_string(w.pid);
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  ::kill(-w.pid, SIGKILL);
  ::kill(w.pid, SIGKILL);
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(w.pid, &st, 0)) < 0 && errno == EINTR) {
  }
  if (r == w.pid && WIFEXITED(st))
    why += " exited with status " + std::to_string(WEXITSTATUS(st));
  else if (r == w.pid && WIFSIGNALED(st))
    why += " was killed by signal " + std::to_string(WTERMSIG(st));
  w.pid = -1;
  return why;
}

// An idle worker that exited (reaped now), or that someone else already reaped (a
// SIGCHLD handler elsewhere in the process, SIGCHLD ignored): ECHILD.
bool idle_worker_gone(pid_t pid) {
  pid_t r = ::waitpid(pid, nullptr, WNOHANG);
  return r == pid || (r < 0 && errno == ECHILD);
}

// ms left until the deadline (>= 0), for poll.
int ms_left(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

enum class io_result { ok, timeout, closed, error };

// Waits until fd is ready for `events` (or a signal interrupts): ok means "try again".
io_result wait_ready(int fd, short events, clock::time_point deadline) {
  pollfd p{fd, events, 0};
  const int left = ms_left(deadline);
  if (left == 0) return io_result::timeout;
  const int r = ::poll(&p, 1, left);
  if (r == 0) return io_result::timeout;
  if (r < 0 && errno != EINTR) return io_result::error;
  return io_result::ok;
}

io_result send_all(int fd, const std::string& buf, clock::time_point deadline) {
  std::size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto w = wait_ready(fd, POLLOUT, deadline); w != io_result::ok) return w;
      continue;
    }
    return (n < 0 && (errno == EPIPE || errno == ECONNRESET)) ? io_result::closed : io_result::error;
  }
  return io_result::ok;
}

io_result recv_exact(int fd, char* out, std::size_t len, clock::time_point deadline) {
  std::size_t off = 0;
  while (off < len) {
    ssize_t n = ::recv(fd, out + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return io_result::closed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (auto w = wait_ready(fd, POLLIN, deadline); w != io_result::ok) return w;
      continue;
    }
    return errno == ECONNRESET ? io_result::closed : io_result::error;
  }
  return io_result::ok;
}

class process_pool final : public renderer {
 public:
  explicit process_pool(const pool_options& opt) : opt_(opt) {
    if (opt_.worker.empty()) opt_.worker = util::program_beside_self("sylvite-render");
    if (opt_.workers == 0) opt_.workers = 1;
  }
  ~process_pool() override {
    std::unique_lock lk(mu_);
    for (auto& w : idle_) kill_and_reap(w);
    idle_.clear();
  }

  outcome render(const request& r) override {
    const auto deadline = clock::now() + r.timeout;
    worker_proc w;
    {
      std::unique_lock lk(mu_);
      // Waiting for a free worker counts against this file's time too.
      bool got = cv_.wait_until(lk, deadline, [&] { return !idle_.empty() || live_ < opt_.workers; });
      if (!got) return fail(outcome::status::timeout, "timeout",
                            "rendering " + r.path.string() + " timed out after " + ms_text(r.timeout) +
                                " waiting for a free render worker");
      if (!idle_.empty()) {
        w = idle_.back();
        idle_.pop_back();
      } else {
        ++live_;
      }
    }
    if (w.pid > 0 && idle_worker_gone(w.pid)) {
      // Died while idle (OOM killer, an operator's kill): start a fresh one in its slot.
      spdlog::info("render: idle render worker {} had exited; starting a new one", w.pid);
      ::close(w.fd);
      w = worker_proc{};
    }
    if (w.pid < 0) {
      std::string err;
      if (!spawn(w, err)) {
        release_dead();
        return fail(outcome::status::unavailable, "spawn", err);
      }
    }
    bool reusable = false;
    outcome o = exchange(w, r, deadline, reusable);
    if (reusable) {
      std::lock_guard lk(mu_);
      idle_.push_back(w);
      cv_.notify_one();
    } else {
      if (w.pid > 0) kill_and_reap(w);
      release_dead();
    }
    return o;
  }

 private:
  static std::string ms_text(std::chrono::milliseconds ms) {
    auto c = ms.count();
    if (c % 1000 == 0) return std::to_string(c / 1000) + " s";
    return std::to_string(c) + " ms";
  }

  void release_dead() {
    std::lock_guard lk(mu_);
    --live_;
    cv_.notify_one();
  }

  // Logs a problem of this kind once at warning level (later ones at debug), returns o.
  outcome fail(outcome::status st, const std::string& kind, std::string msg) {
    bool first;
    {
      std::lock_guard lk(log_mu_);
      first = logged_.insert(kind).second;
    }
    if (first)
      spdlog::warn("render: {}", msg);
    else
      spdlog::debug("render: {}", msg);
    outcome o;
    o.st = st;
    o.error = std::move(msg);
    return o;
  }

  bool spawn(worker_proc& w, std::string& err) {
    if (::access(opt_.worker.c_str(), X_OK) != 0) {
      err = "cannot start the render worker " + opt_.worker.string() + ": " + std::strerror(errno);
      return false;
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      err = std::string("cannot start a render worker: socketpair: ") + std::strerror(errno);
      return false;
    }
    // The socketpair is its stdin and stdout; stderr stays (the worker logs there).
    util::child_spec spec;
    spec.program = opt_.worker;
    spec.argv = {"sylvite-render"};
    spec.fds = {{sv[1], 0}, {sv[1], 1}};
    if (!sanitized_build) spec.address_space_limit = static_cast<std::uint64_t>(opt_.worker_memory_mb) * 1024 * 1024;
    const pid_t pid = util::spawn_child(spec);
    if (pid < 0) {
      err = std::string("cannot start a render worker: fork: ") + std::strerror(errno);
      ::close(sv[0]);
      ::close(sv[1]);
      return false;
    }
    ::close(sv[1]);
    w.pid = pid;
    w.fd = sv[0];
    return true;
  }

  outcome exchange(worker_proc& w, const request& r, clock::time_point deadline, bool& reusable) {
    reusable = false;
    std::string body = encode_request(r, opt_.max_output_bytes);
    std::string frame = frame_header(body.size()) + body;
    const std::string file = r.path.string();
    auto timed_out = [&] {
      return fail(outcome::status::timeout, "timeout",
                  "rendering " + file + " timed out after " + ms_text(r.timeout) +
                      "; the render worker was killed");
    };
    auto died = [&](const std::string& what) {
      std::string why = reap_reason(w);
      return fail(outcome::status::unavailable, "died",
                  "render worker failed while rendering " + file + ": " + what + " (" + why + ")");
    };
    switch (send_all(w.fd, frame, deadline)) {
      case io_result::ok: break;
      case io_result::timeout: return timed_out();
      default: return died("cannot send the request");
    }
    unsigned calls = 0;
    std::string reply;
    for (;;) {
      char hdr[4];
      switch (recv_exact(w.fd, hdr, 4, deadline)) {
        case io_result::ok: break;
        case io_result::timeout: return timed_out();
        default: return died("no reply");
      }
      std::uint32_t len = (std::uint32_t(std::uint8_t(hdr[0])) << 24) | (std::uint32_t(std::uint8_t(hdr[1])) << 16) |
                          (std::uint32_t(std::uint8_t(hdr[2])) << 8) | std::uint32_t(std::uint8_t(hdr[3]));
      // The worker refuses oversized data itself; this bound only guards against garbage.
      const std::uint64_t limit = std::max<std::uint64_t>(std::uint64_t(opt_.max_output_bytes) + 4096,
                                                          opt_.max_call_bytes);
      if (len > limit) {
        return fail(outcome::status::render_error, "oversized",
                    "rendering " + file + " produced " + std::to_string(len) +
                        " bytes, more than the limit of " + std::to_string(opt_.max_output_bytes) + " bytes");
      }
      reply.assign(len, '\0');
      switch (recv_exact(w.fd, reply.data(), len, deadline)) {
        case io_result::ok: break;
        case io_result::timeout: return timed_out();
        default: return died("truncated reply");
      }
      worker_call call;
      std::string cerr;
      if (!decode_call(reply, call, cerr)) {
        if (!cerr.empty())
          return fail(outcome::status::unavailable, "garbage",
                      "render worker sent an invalid call while rendering " + file + ": " + cerr);
        break;  // the reply
      }
      // A call back from the template: only the known names, bounded in size and number.
      bool known = false;
      for (auto f : callable_functions) known = known || f == call.fun;
      if (!known || len > opt_.max_call_bytes)
        return fail(outcome::status::unavailable, "garbage",
                    "render worker sent a call that is not allowed while rendering " + file + ": '" +
                        call.fun.substr(0, 64) + "' (" + std::to_string(len) + " bytes)");
      call_result res;
      if (++calls > opt_.max_calls) {
        res = {false, {}, call.fun + ": more than " + std::to_string(opt_.max_calls) + " calls in one file"};
      } else if (!r.call) {
        res = {false, {}, call.fun + " is not available here"};
      } else {
        try {
          res = r.call(call.fun, call.args);
        } catch (const std::exception& e) {
          res = {false, {}, call.fun + " failed: " + e.what()};
        }
      }
      std::string out = encode_call_result(res);
      if (out.size() > opt_.max_output_bytes)
        out = encode_call_result({false, {}, call.fun + ": the result is larger than " +
                                                 std::to_string(opt_.max_output_bytes) + " bytes"});
      switch (send_all(w.fd, frame_header(out.size()) + out, deadline)) {
        case io_result::ok: break;
        case io_result::timeout: return timed_out();
        default: return died("cannot send a call result");
      }
    }
    outcome o;
    std::string perr;
    if (!decode_reply(reply, o, perr)) {
      return fail(outcome::status::unavailable, "garbage",
                  "render worker sent an invalid reply while rendering " + file + ": " + perr);
    }
    reusable = true;
    return o;
  }

  pool_options opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<worker_proc> idle_;
  unsigned live_ = 0;  // started workers: idle + busy
  std::mutex log_mu_;
  std::set<std::string> logged_;
};

}  // namespace

std::unique_ptr<renderer> make_process_pool(const pool_options& opt) { return std::make_unique<process_pool>(opt); }

}  // namespace sylvite::render
