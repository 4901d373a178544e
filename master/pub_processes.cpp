// sylvite::master pub_process_group (pub_processes.hpp): the publish port served by
// `sylvite-publisher` child processes.
#include "master/pub_processes.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/util/rate_limit.hpp"
#include "core/util/spawn.hpp"
#include "core/wire/msgpack.hpp"
#include "master/pub_link.hpp"

namespace sylvite::master {

namespace asio = boost::asio;
using wire::value;
using clock_type = std::chrono::steady_clock;

namespace {

// What may wait on one link before publishes to that child are dropped (a child that
// stopped reading; it is logged, and the child is not killed for it).
constexpr std::size_t k_max_link_queue = 256u << 20;
constexpr auto k_backoff_min = std::chrono::milliseconds(500);
constexpr auto k_backoff_max = std::chrono::seconds(30);
constexpr auto k_stable = std::chrono::seconds(60);
// Liveness: every child is pinged this often over its link and must answer ('K') from its
// io thread; one that leaves a ping unanswered for k_hung_after (stopped, deadlocked, in a
// loop) is killed and started again, so its minions reconnect to a working process.
constexpr auto k_ping_every = std::chrono::seconds(5);
constexpr auto k_hung_after = std::chrono::seconds(30);

std::size_t share(std::size_t total, int n) {
  if (total == 0 || n <= 1) return total;
  return (total + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
}

std::string exit_text(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st));
  return "ended";
}

}  // namespace

struct pub_process_group::impl : std::enable_shared_from_this<impl> {
  using strand_type = asio::strand<asio::io_context::executor_type>;
  using link_socket = asio::basic_stream_socket<asio::local::stream_protocol, strand_type>;

  struct proc {
    proc(asio::io_context& io, int i) : strand(asio::make_strand(io)), link(strand), index(i) {}
    strand_type strand;
    link_socket link;
    const int index;
    pid_t pid = -1;
    clock_type::time_point started;
    std::array<char, 64 * 1024> rbuf{};
    pub_link::reader reader;
    // On the strand.
    std::deque<std::shared_ptr<const std::string>> q;
    bool gone = false;
    std::atomic<std::size_t> queued{0};
    // Guarded by impl::mu_.
    std::unordered_set<std::string> ids;
    std::size_t conns = 0;
    bool ready = false;
    bool reaped = false;
    bool ping_out = false;  // a ping waits for its answer since ping_at (queued, then written)
    clock_type::time_point ping_at;
  };
  using proc_ptr = std::shared_ptr<proc>;

  impl(asio::io_context& io, transport::endpoint ep, pub_process_settings s, hello_fn hello, presence_fn presence)
      : io_(io), ep_(std::move(ep)), s_(std::move(s)), hello_(std::move(hello)), presence_(std::move(presence)),
        watch_timer_(io) {
    if (s_.exe.empty()) s_.exe = util::program_beside_self("sylvite-publisher");
    s_.count = std::max(1, s_.count);
    slots_.resize(static_cast<std::size_t>(s_.count));
    for (int i = 0; i < s_.count; ++i) {
      timers_.push_back(std::make_unique<asio::steady_timer>(io_));
      backoff_.push_back(k_backoff_min);
    }
  }

  ~impl() {
    for (int fd : listen_fds_) ::close(fd);
  }

  // ---- setup

  result<void> start() {
    if (::access(s_.exe.c_str(), X_OK) != 0) {
      spdlog::critical("publish_processes: cannot run {}: {}", s_.exe.string(), std::strerror(errno));
      return error_code(errno, boost::system::system_category());
    }
    auto fds = transport::open_tcp_listener_group(ep_, s_.count);
    if (!fds) return fds.error();
    listen_fds_ = std::move(*fds);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(listen_fds_.front(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) port_ = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      if (ss.ss_family == AF_INET6) port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
    link_limit_ = s_.topt.max_frame_size + (16u << 20);
    init_msg_ = std::make_shared<const std::string>(pub_link::encode_value('O', init_settings()));
    return {};
  }

  value init_settings() const {
    const auto& o = s_.topt;
    const int n = s_.count;
    value v = value::object();
    v["log_level"] = s_.log_level;
    v["link_limit"] = s_.topt.max_frame_size + (16u << 20);
    v["log_file"] = s_.log_file;
    v["log_level_logfile"] = s_.log_level_logfile;
    v["max_frame_size"] = o.max_frame_size;
    v["max_queue_bytes"] = o.max_queue_bytes;
    v["max_queue_frames"] = o.max_queue_frames;
    v["tcp_keepalive"] = o.tcp_keepalive;
    v["keepalive_idle"] = o.keepalive_idle;
    v["keepalive_intvl"] = o.keepalive_intvl;
    v["keepalive_cnt"] = o.keepalive_cnt;
    v["user_timeout_ms"] = o.user_timeout_ms;
    v["pre_auth_max_frame_size"] = o.pre_auth_max_frame_size;
    v["pre_auth_max_nodes"] = o.pre_auth_max_nodes;
    v["pre_auth_max_depth"] = o.pre_auth_max_depth;
    v["pre_auth_budget"] = o.pre_auth_budget ? share(o.pre_auth_budget->cap(), n) : 0;
    v["frame_timeout_ms"] = o.frame_timeout.count();
    v["pre_auth_idle_timeout_ms"] = o.pre_auth_idle_timeout.count();
    v["max_connections"] = share(o.max_connections, n);
    v["pre_auth_max_connections"] = share(o.pre_auth_max_connections, n);
    // Per process, not shared out: one address's connections land unevenly (by hash), and
    // a share would refuse some of them below the configured cap.
    v["pre_auth_max_connections_per_source"] = o.pre_auth_max_connections_per_source;
    v["reserved_fds"] = o.reserved_fds;
    return v;
  }

  void launch() {
    for (int i = 0; i < s_.count; ++i) spawn(i);
    watch();
  }

  // ---- liveness

  void watch() {
    std::lock_guard lk(timer_mu_);
    if (stopping_) return;
    watch_timer_.expires_after(k_ping_every);
    watch_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->stopping_) return;
      self->check_alive();
      self->watch();
    });
  }

  // Runs from the watch timer only (one at a time).
  void check_alive() {
    std::vector<proc_ptr> to_ping, hung;
    const auto now = clock_type::now();
    // The master itself was held up (overload, a debugger, SIGSTOP): answers may be waiting
    // unread behind this timer. The outstanding pings get a fresh 30 s instead.
    const bool master_late = last_check_ != clock_type::time_point{} && now - last_check_ > 2 * k_ping_every;
    last_check_ = now;
    {
      std::lock_guard lk(mu_);
      if (stopping_) return;  // stop() is draining the children
      for (const auto& p : slots_) {
        // Also a child that has not reported ready: the ping follows its init message.
        if (!p || p->gone) continue;
        if (p->ping_out && master_late) {
          p->ping_at = now;
        } else if (!p->ping_out) {
          p->ping_out = true;
          p->ping_at = now;
          to_ping.push_back(p);
        } else if (now - p->ping_at >= k_hung_after && !p->reaped) {
          ::kill(p->pid, SIGKILL);  // not reaped yet: the pid is still this child's
          hung.push_back(p);
        }
      }
    }
    for (const auto& p : to_ping) send(p, ping_msg_);
    for (const auto& p : hung) {
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(k_hung_after).count();
      spdlog::error("publish process {} (pid {}) has not answered the master for {} s (stopped or hung); killed",
                    p->index, p->pid, secs);
      asio::post(p->strand, [self = shared_from_this(), p, secs] {
        self->on_exit(p, "it did not answer for " + std::to_string(secs) + " s");
      });
    }
  }

  // ---- children

  void spawn(int index) {
    int lfd = -1;
    {
      // A copy of the listener, so that stop() closing the master's own meanwhile cannot
      // hand the child another descriptor of the same number.
      std::lock_guard lk(mu_);
      if (stopping_ || listen_fds_.empty()) return;
      lfd = ::fcntl(listen_fds_[static_cast<std::size_t>(index)], F_DUPFD_CLOEXEC, 0);
    }
    int sv[2];
    if (lfd < 0 || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      spdlog::error("publish process {}: cannot start: {}", index, std::strerror(errno));
      if (lfd >= 0) ::close(lfd);
      return retry_later(index);
    }
    // Link on 3, listener on 4, stdio kept; its own session (a signal to the master's group
    // is the master's to handle; the child ends with its link, or PDEATHSIG).
    util::child_spec spec;
    spec.program = s_.exe;
    spec.argv = {"sylvite-publisher", "--index", std::to_string(index)};
    spec.fds = {{sv[1], 3}, {lfd, 4}};
    const pid_t pid = util::spawn_child(spec);
    if (pid < 0) {
      spdlog::error("publish process {}: fork: {}", index, std::strerror(errno));
      ::close(sv[0]);
      ::close(sv[1]);
      ::close(lfd);
      return retry_later(index);
    }
    ::close(sv[1]);
    ::close(lfd);
    auto p = std::make_shared<proc>(io_, index);
    p->reader.set_max(link_limit_);
    p->pid = pid;
    p->started = clock_type::now();
    error_code ec;
    p->link.assign(asio::local::stream_protocol(), sv[0], ec);
    if (ec) {
      ::close(sv[0]);
      spdlog::error("publish process {}: link: {}", index, ec.message());
    }
    // The init message first on the strand, before any publish can be queued.
    asio::post(p->strand, [self = shared_from_this(), p] {
      self->send_on_strand(p, self->init_msg_);
      self->read(p);
    });
    {
      std::lock_guard lk(mu_);
      if (!stopping_) {
        slots_[static_cast<std::size_t>(index)] = p;
        spdlog::debug("publish process {} started (pid {})", index, pid);
        return;
      }
    }
    // stop() ran meanwhile and did not see this one.
    asio::post(p->strand, [self = shared_from_this(), p] { self->on_exit(p, "the master is stopping"); });
  }

  void retry_later(int index) {
    std::lock_guard lk(timer_mu_);
    if (stopping_) return;
    auto& t = *timers_[static_cast<std::size_t>(index)];
    auto& b = backoff_[static_cast<std::size_t>(index)];
    const auto wait = b;
    b = std::min<clock_type::duration>(b * 2, k_backoff_max);
    t.expires_after(wait);
    t.async_wait([self = shared_from_this(), index](const error_code& ec) {
      if (!ec) self->spawn(index);
    });
  }

  void read(const proc_ptr& p) {
    p->link.async_read_some(asio::buffer(p->rbuf), [self = shared_from_this(), p](const error_code& ec, std::size_t n) {
      if (ec) return self->on_exit(p, ec == asio::error::eof ? "closed its link" : ec.message());
      p->reader.feed(std::string_view(p->rbuf.data(), n));
      for (;;) {
        auto m = p->reader.next();
        if (!m) return self->on_exit(p, "sent a malformed message");
        if (!*m) break;
        self->handle(p, **m);
      }
      self->read(p);
    });
  }

  void handle(const proc_ptr& p, const pub_link::message& m) {
    switch (m.op) {
      case 'Y': {
        {
          std::lock_guard lk(mu_);
          p->ready = true;
        }
        spdlog::info("publish process {} (pid {}) is accepting on port {}", p->index, p->pid, port_);
        return;
      }
      case 'H':
        return on_hello(p, m.payload);
      case 'K': {
        std::lock_guard lk(mu_);
        p->ping_out = false;
        return;
      }
      case 'U':
      case 'W':
        return on_presence(p, m.payload, m.op == 'U');
      case 'C': {
        auto v = wire::unpack(m.payload);
        if (v && v->is_number_unsigned()) {
          std::lock_guard lk(mu_);
          p->conns = v->get<std::size_t>();
        }
        return;
      }
      default:
        if (const auto k = bad_log_.hit())
          spdlog::warn("publish process {}: ignored {} message(s) of unknown type '{}'", p->index, k, m.op);
    }
  }

  void on_hello(const proc_ptr& p, const std::string& payload) {
    auto v = wire::unpack(payload);
    if (!v || !v->is_array() || v->size() != 3 || !(*v)[0].is_number_unsigned() || !(*v)[1].is_string()) {
      if (const auto k = bad_log_.hit())
        spdlog::warn("publish process {}: ignored {} malformed hello message(s)", p->index, k);
      return;
    }
    const auto conn = (*v)[0].get<std::uint64_t>();
    std::weak_ptr<proc> wp = p;
    std::weak_ptr<impl> wself = weak_from_this();
    auto identified = [wself, wp, conn](const std::string& id) {
      auto self = wself.lock();
      auto q = wp.lock();
      if (!self || !q) return;
      value a = value::array();
      a.push_back(conn);
      a.push_back(id);
      self->send(q, std::make_shared<const std::string>(pub_link::encode_value('I', a)));
    };
    std::optional<std::string> id;
    try {
      id = hello_ ? hello_((*v)[2], (*v)[1].get<std::string>(), identified) : std::nullopt;
    } catch (const std::exception& e) {
      spdlog::error("publish hello from {} failed: {}", (*v)[1].get<std::string>(), e.what());
    }
    if (id && !id->empty()) identified(*id);
  }

  void on_presence(const proc_ptr& p, const std::string& id, bool up) {
    std::lock_guard pl(presence_mu_);
    bool changed = false;
    {
      std::lock_guard lk(mu_);
      if (p->gone) return;
      if (up) {
        if (p->ids.insert(id).second) changed = (++count_[id] == 1);
      } else if (p->ids.erase(id)) {
        auto it = count_.find(id);
        if (it != count_.end() && --it->second == 0) {
          count_.erase(it);
          changed = true;
        }
      }
    }
    if (changed) notify(id, up);
  }

  void notify(const std::string& id, bool connected) {
    if (!presence_) return;
    try {
      presence_(id, connected);
    } catch (const std::exception& e) {
      spdlog::error("presence handler failed for {}: {}", id, e.what());
    }
  }

  // On p's strand: the link ended (the child exited, or is made to).
  void on_exit(const proc_ptr& p, const std::string& why) {
    std::vector<std::string> down;
    {
      std::lock_guard pl(presence_mu_);
      {
        std::lock_guard lk(mu_);
        if (p->gone) return;
        p->gone = true;
        for (const auto& id : p->ids) {
          auto it = count_.find(id);
          if (it != count_.end() && --it->second == 0) {
            count_.erase(it);
            down.push_back(id);
          }
        }
        p->ids.clear();
        p->conns = 0;
        auto& slot = slots_[static_cast<std::size_t>(p->index)];
        if (slot == p) slot.reset();
        error_code ec;
        p->link.close(ec);  // under mu_: stop() shuts links down under it too
      }
      for (const auto& id : down) notify(id, false);
    }
    p->q.clear();
    reap_later(p, why, down.size(), 0);
  }

  // The child exits by itself once its link is gone: poll for its status every 20 ms
  // without blocking an io thread; after 1 s it is killed. Then (unless stopping) it is
  // started again.
  void reap_later(const proc_ptr& p, std::string why, std::size_t lost, int tries) {
    int st = 0;
    std::string status;
    {
      std::lock_guard lk(mu_);
      if (p->reaped) return;  // stop() took it
      const pid_t r = ::waitpid(p->pid, &st, WNOHANG);
      if (r == p->pid) {
        status = exit_text(st);
      } else if (r < 0 && errno != EINTR) {
        status = "ended";  // reaped elsewhere (ECHILD)
      } else if (tries == 50) {
        ::kill(p->pid, SIGKILL);
      }
      if (!status.empty()) p->reaped = true;
    }
    if (status.empty()) {
      auto t = std::make_shared<asio::steady_timer>(p->strand, std::chrono::milliseconds(20));
      t->async_wait([self = shared_from_this(), p, t, why = std::move(why), lost, tries](const error_code&) mutable {
        self->reap_later(p, std::move(why), lost, tries + 1);
      });
      return;
    }
    if (stopping_) return;
    const bool stable = clock_type::now() - p->started >= k_stable;
    clock_type::duration wait;
    {
      std::lock_guard lk(timer_mu_);
      if (stable) backoff_[static_cast<std::size_t>(p->index)] = k_backoff_min;
      wait = backoff_[static_cast<std::size_t>(p->index)];
    }
    spdlog::error("publish process {} (pid {}) {} ({}); {} minion(s) lost their publish connection; starting it again "
                  "in {} ms",
                  p->index, p->pid, status, why, lost, std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
    retry_later(p->index);
  }

  // ---- sending

  void send(const proc_ptr& p, std::shared_ptr<const std::string> msg) {
    if (msg->size() > link_limit_ + 5) {
      if (const auto k = big_log_.hit())
        spdlog::error("publish process {}: dropped {} message(s) larger than the link allows ({} bytes: "
                      "max_message_size plus 16 MiB)",
                      p->index, k, link_limit_);
      return;
    }
    // Control messages (an id, a drop) are small and always queued.
    const bool control = msg->size() < 4096 && (*msg)[4] != 'A' && (*msg)[4] != 'T';
    if (!control && p->queued.load(std::memory_order_relaxed) + msg->size() > k_max_link_queue) {
      if (const auto k = slow_log_.hit())
        spdlog::error("publish process {} is not keeping up ({} MiB waiting): dropped {} message(s) in the last "
                      "interval",
                      p->index, k_max_link_queue >> 20, k);
      return;
    }
    p->queued.fetch_add(msg->size(), std::memory_order_relaxed);
    asio::post(p->strand, [self = shared_from_this(), p, msg = std::move(msg)]() mutable {
      p->queued.fetch_sub(msg->size(), std::memory_order_relaxed);
      self->send_on_strand(p, std::move(msg));
    });
  }

  void send_on_strand(const proc_ptr& p, std::shared_ptr<const std::string> msg) {
    if (p->gone) return;
    p->queued.fetch_add(msg->size(), std::memory_order_relaxed);
    p->q.push_back(std::move(msg));
    if (p->q.size() == 1) write(p);
  }

  void write(const proc_ptr& p) {
    asio::async_write(p->link, asio::buffer(*p->q.front()), [self = shared_from_this(), p](const error_code& ec, std::size_t) {
      if (p->gone) return;
      if (ec) return self->on_exit(p, "link write failed: " + ec.message());
      if (p->q.front() == self->ping_msg_) {  // the child's 30 s start when it can read the ping
        std::lock_guard lk(self->mu_);
        p->ping_at = clock_type::now();
      }
      p->queued.fetch_sub(p->q.front()->size(), std::memory_order_relaxed);
      p->q.pop_front();
      if (!p->q.empty()) self->write(p);
    });
  }

  std::vector<proc_ptr> live() const {
    std::vector<proc_ptr> out;
    std::lock_guard lk(mu_);
    for (const auto& p : slots_)
      if (p && !p->gone) out.push_back(p);
    return out;
  }

  // ---- stop

  void stop() {
    {
      std::lock_guard lk(timer_mu_);
      if (stopping_.exchange(true)) return;
      for (auto& t : timers_) t->cancel();
      watch_timer_.cancel();
    }
    std::vector<proc_ptr> procs;
    {
      // EOF on every link: each child stops accepting, closes its connections and exits.
      // (Under mu_: on_exit closes a link under it, so the descriptor is still the link's.)
      std::lock_guard lk(mu_);
      for (const auto& p : slots_)
        if (p) {
          procs.push_back(p);
          if (p->link.is_open()) ::shutdown(p->link.native_handle(), SHUT_RDWR);
        }
    }
    const auto deadline = clock_type::now() + std::chrono::seconds(3);
    for (const auto& p : procs) {
      {
        std::lock_guard lk(mu_);
        if (p->reaped) continue;
        p->reaped = true;
      }
      int st = 0;
      for (;;) {
        const pid_t r = ::waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid || (r < 0 && errno != EINTR)) break;
        if (clock_type::now() >= deadline) {
          spdlog::warn("publish process {} (pid {}) did not exit within 3 s; killed", p->index, p->pid);
          ::kill(p->pid, SIGKILL);
          while (::waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {
          }
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    for (const auto& p : procs) asio::post(p->strand, [p] {
      error_code ec;
      p->link.close(ec);
    });
    std::lock_guard lk(mu_);
    for (int fd : listen_fds_) ::close(fd);
    listen_fds_.clear();
  }

  asio::io_context& io_;
  const transport::endpoint ep_;
  pub_process_settings s_;
  hello_fn hello_;
  presence_fn presence_;
  std::vector<int> listen_fds_;  // one per child (SO_REUSEPORT group), kept across its restarts
  std::uint16_t port_ = 0;
  std::shared_ptr<const std::string> init_msg_;
  std::atomic<bool> stopping_{false};
  std::mutex timer_mu_;  // guards timers_, watch_timer_, backoff_ and the stopping_ check before arming
  std::vector<std::unique_ptr<asio::steady_timer>> timers_;
  asio::steady_timer watch_timer_;
  clock_type::time_point last_check_{};  // check_alive only
  const std::shared_ptr<const std::string> ping_msg_ = std::make_shared<const std::string>(pub_link::encode('P', "alive?"));
  std::vector<clock_type::duration> backoff_;
  util::log_limiter slow_log_, bad_log_, big_log_;
  std::size_t link_limit_ = pub_link::k_max_message;  // max_message_size + 16 MiB (start())
  std::mutex presence_mu_;  // before mu_
  mutable std::mutex mu_;
  std::vector<proc_ptr> slots_;            // guarded by mu_
  std::map<std::string, std::size_t> count_;  // id -> children holding it; guarded by mu_
};

pub_process_group::pub_process_group(asio::io_context& io, transport::endpoint ep, pub_process_settings s,
                                     hello_fn hello, presence_fn presence)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(s), std::move(hello), std::move(presence))) {}

pub_process_group::~pub_process_group() { impl_->stop(); }

result<void> pub_process_group::start() { return impl_->start(); }

void pub_process_group::launch() {
  asio::post(impl_->io_, [i = impl_] { i->launch(); });
}

void pub_process_group::stop() { impl_->stop(); }

void pub_process_group::reopen_logs() {
  auto msg = std::make_shared<const std::string>(pub_link::encode('R', {}));
  for (const auto& p : impl_->live()) impl_->send(p, msg);
}

std::uint16_t pub_process_group::bound_port() const { return impl_->port_; }

std::vector<pid_t> pub_process_group::pids() const {
  std::vector<pid_t> out;
  for (const auto& p : impl_->live()) out.push_back(p->pid);
  return out;
}

void pub_process_group::publish_all(std::shared_ptr<const std::string> frame) {
  if (!frame) return;
  auto procs = impl_->live();
  if (procs.empty()) return;
  auto msg = std::make_shared<const std::string>(pub_link::encode('A', *frame));
  for (const auto& p : procs) impl_->send(p, msg);
}

void pub_process_group::publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) {
  if (!frame || ids.empty()) return;
  std::vector<std::pair<impl::proc_ptr, std::vector<std::string>>> plan;
  {
    std::lock_guard lk(impl_->mu_);
    for (const auto& p : impl_->slots_) {
      if (!p || p->gone) continue;
      std::vector<std::string> mine;
      for (const auto& id : ids)
        if (p->ids.count(id)) mine.push_back(id);
      if (!mine.empty()) plan.emplace_back(p, std::move(mine));
    }
  }
  for (auto& [p, mine] : plan)
    impl_->send(p, std::make_shared<const std::string>(pub_link::encode_to(mine, *frame)));
}

std::vector<std::string> pub_process_group::connected_ids() const {
  std::vector<std::string> out;
  std::lock_guard lk(impl_->mu_);
  out.reserve(impl_->count_.size());
  for (const auto& [id, n] : impl_->count_) out.push_back(id);
  return out;
}

bool pub_process_group::is_connected(const std::string& id) const {
  std::lock_guard lk(impl_->mu_);
  return impl_->count_.count(id) != 0;
}

std::size_t pub_process_group::connection_count() const {
  std::size_t n = 0;
  std::lock_guard lk(impl_->mu_);
  for (const auto& p : impl_->slots_)
    if (p) n += p->conns;
  return n;
}

void pub_process_group::disconnect(const std::string& id) {
  std::vector<impl::proc_ptr> holders;
  {
    std::lock_guard lk(impl_->mu_);
    for (const auto& p : impl_->slots_)
      if (p && !p->gone && p->ids.count(id)) holders.push_back(p);
  }
  auto msg = std::make_shared<const std::string>(pub_link::encode('D', id));
  for (const auto& p : holders) impl_->send(p, msg);
}

}  // namespace sylvite::master
