// sylvite::transport::zmq_detail: see zmq_socket.hpp.
#include "core/transport/zmq_socket.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/crypto/rsa.hpp"

namespace sylvite::transport {

std::string zmq_version() {
  int a = 0, b = 0, c = 0;
  ::zmq_version(&a, &b, &c);
  return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
}

namespace zmq_detail {

void* context() {
  static void* ctx = [] {
    // libzmq numbers the ROUTER peers that announce no routing id from rand(), which
    // nothing seeds: every process starts at 0x006b8b4567 and counts up. A peer that
    // announces the next number as its own id makes libzmq abort (an assertion in
    // router_t::identify_peer when the generated id collides), in Salt's master too.
    // A random start makes the next number unguessable (docs/security.md, ZeroMQ).
    {
      const std::string r = crypto::random_bytes(sizeof(unsigned));
      unsigned seed = 0;
      std::memcpy(&seed, r.data(), std::min(r.size(), sizeof seed));
      std::srand(seed ^ static_cast<unsigned>(::getpid()));
    }
    void* c = zmq_ctx_new();
    if (!c) {
      spdlog::critical("libzmq: cannot create a context: {}", zmq_strerror(errno));
      std::abort();
    }
    zmq_ctx_set(c, ZMQ_IO_THREADS, 1);
    // Default cap is 1023 sockets per context: a master with many CLI calls, or the bench
    // swarm (two sockets per simulated minion), needs more.
    const int limit = zmq_ctx_get(c, ZMQ_SOCKET_LIMIT);
    zmq_ctx_set(c, ZMQ_MAX_SOCKETS, limit > 0 ? limit : 65535);
    zmq_ctx_set(c, ZMQ_BLOCKY, 0);
    return c;
  }();
  return ctx;
}

const char* event_name(std::uint16_t e) {
  switch (e) {
    case ZMQ_EVENT_CONNECTED: return "connected";
    case ZMQ_EVENT_CONNECT_DELAYED: return "connect delayed";
    case ZMQ_EVENT_CONNECT_RETRIED: return "connect retried";
    case ZMQ_EVENT_LISTENING: return "listening";
    case ZMQ_EVENT_BIND_FAILED: return "bind failed";
    case ZMQ_EVENT_ACCEPTED: return "accepted";
    case ZMQ_EVENT_ACCEPT_FAILED: return "accept failed";
    case ZMQ_EVENT_CLOSED: return "closed";
    case ZMQ_EVENT_CLOSE_FAILED: return "close failed";
    case ZMQ_EVENT_DISCONNECTED: return "disconnected";
    case ZMQ_EVENT_MONITOR_STOPPED: return "monitor stopped";
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: return "handshake failed";
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: return "handshake succeeded";
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: return "handshake failed (protocol)";
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: return "handshake failed (auth)";
    default: return "event";
  }
}

zsock::zsock(zstrand strand, int type, std::string what)
    : strand_(std::move(strand)), what_(std::move(what)), sd_(strand_), msd_(strand_) {
  s_ = zmq_socket(context(), type);
  if (!s_) {
    spdlog::error("{}: cannot create a ZeroMQ socket: {}", what_, zmq_strerror(errno));
    return;
  }
  int fd = -1;
  std::size_t sz = sizeof fd;
  if (zmq_getsockopt(s_, ZMQ_FD, &fd, &sz) != 0) {
    spdlog::error("{}: ZMQ_FD: {}", what_, zmq_strerror(errno));
    zmq_close(s_);
    s_ = nullptr;
    return;
  }
  boost::system::error_code ec;
  sd_.assign(fd, ec);
  if (ec) {
    spdlog::error("{}: cannot watch the ZeroMQ socket: {}", what_, ec.message());
    zmq_close(s_);
    s_ = nullptr;
  }
}

zsock::~zsock() { close(); }

bool zsock::set_int(int opt, int v) {
  if (!s_) return false;
  if (zmq_setsockopt(s_, opt, &v, sizeof v) == 0) return true;
  spdlog::warn("{}: ZeroMQ option {} = {} refused: {}", what_, opt, v, zmq_strerror(errno));
  return false;
}

bool zsock::set_bytes(int opt, const std::string& v) {
  if (!s_) return false;
  if (zmq_setsockopt(s_, opt, v.data(), v.size()) == 0) return true;
  spdlog::warn("{}: ZeroMQ option {} refused: {}", what_, opt, zmq_strerror(errno));
  return false;
}

void zsock::apply_common(const options& opt, const zmq_options& zopt, bool heartbeats) {
  if (!s_) return;
  set_int(ZMQ_LINGER, 0);
  // Salt: zmq.TCP_KEEPALIVE = tcp_keepalive (1/0), then idle/cnt/intvl as given (-1 =
  // the OS default).
  set_int(ZMQ_TCP_KEEPALIVE, opt.tcp_keepalive ? 1 : 0);
  if (opt.tcp_keepalive) {
    set_int(ZMQ_TCP_KEEPALIVE_IDLE, opt.keepalive_idle > 0 ? opt.keepalive_idle : -1);
    set_int(ZMQ_TCP_KEEPALIVE_CNT, opt.keepalive_cnt > 0 ? opt.keepalive_cnt : -1);
    set_int(ZMQ_TCP_KEEPALIVE_INTVL, opt.keepalive_intvl > 0 ? opt.keepalive_intvl : -1);
  }
  if (zopt.ipv6) set_int(ZMQ_IPV6, 1);
  if (heartbeats && zopt.heartbeat_ivl_ms > 0) {
    set_int(ZMQ_HEARTBEAT_IVL, zopt.heartbeat_ivl_ms);
    set_int(ZMQ_HEARTBEAT_TIMEOUT, zopt.heartbeat_timeout_ms > 0 ? zopt.heartbeat_timeout_ms : zopt.heartbeat_ivl_ms * 3);
  }
  const std::int64_t max = opt.max_frame_size ? static_cast<std::int64_t>(opt.max_frame_size) : -1;
  if (zmq_setsockopt(s_, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0)
    spdlog::warn("{}: ZMQ_MAXMSGSIZE refused: {}", what_, zmq_strerror(errno));
}

result<void> zsock::bind(const std::string& uri) {
  if (!s_) return make_error_code(errc::closed);
  if (zmq_bind(s_, uri.c_str()) != 0) return error_code(errno, boost::system::system_category());
  return {};
}

result<void> zsock::connect(const std::string& uri) {
  if (!s_) return make_error_code(errc::closed);
  if (zmq_connect(s_, uri.c_str()) != 0) return error_code(errno, boost::system::system_category());
  return {};
}

std::string zsock::last_endpoint() const {
  if (!s_) return {};
  char buf[256];
  std::size_t sz = sizeof buf;
  if (zmq_getsockopt(s_, ZMQ_LAST_ENDPOINT, buf, &sz) != 0 || sz == 0) return {};
  return std::string(buf, strnlen(buf, sz));
}

namespace {

// One whole multipart message, without blocking. 1: got one; 0: none ready; -1: error.
int recv_message(void* s, message& out) {
  out.frames.clear();
  out.peer.clear();
  out.size = 0;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    const int n = zmq_msg_recv(&m, s, ZMQ_DONTWAIT);
    if (n < 0) {
      const int e = errno;
      zmq_msg_close(&m);
      if (e == EAGAIN && out.frames.empty()) return 0;
      if (e == EAGAIN) continue;  // the rest of a multipart message is always there
      return -1;
    }
    // Not only the first frame: a ROUTER's routing-id frame carries no metadata when the
    // message was prefetched by a ZMQ_EVENTS check (always, here), the frames after it do.
    if (out.peer.empty()) {
      if (const char* pa = zmq_msg_gets(&m, "Peer-Address")) out.peer = pa;
    }
    out.frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    out.size += zmq_msg_size(&m);
    const bool more = zmq_msg_more(&m) != 0;
    zmq_msg_close(&m);
    if (!more) return 1;
  }
}

constexpr int k_batch = 256;  // messages handled before yielding the strand

}  // namespace

void zsock::start(on_message_fn on_msg) {
  on_msg_ = std::move(on_msg);
  // The first pump on the strand: a server starts its sockets from another thread while
  // the io threads may already run, and a wait completing on the strand during a pump on
  // that thread would find in_pump_ set and never re-arm (a socket that stops reading).
  asio::dispatch(strand_, [self = shared_from_this()] { self->pump(); });
}

void zsock::arm() {
  if (waiting_ || closed_) return;
  waiting_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_read,
                 asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
                   self->waiting_ = false;
                   if (ec || self->closed_) return;
                   self->pump();
                 }));
}

void zsock::pump() {
  if (closed_ || in_pump_ || !on_msg_) return;
  in_pump_ = true;
  // Queue the wait first. A non-blocking receive that finds nothing processes libzmq's
  // command mailbox (and so consumes every ZMQ_FD signal sent before it); a signal sent
  // after the wait was queued completes the wait. So the loop may stop at the first
  // EAGAIN, with no ZMQ_EVENTS query: each one processes the mailbox unthrottled (a
  // poll(2) and a getpid(2)), and one per message and two per pass were most of this
  // socket's system calls (docs/benchmarks.md, "Goal 1, session 22").
  arm();
  int handled = 0;
  message m;
  while (!closed_) {
    if (handled++ >= k_batch) {  // let other work on the strand run; continue later
      in_pump_ = false;
      asio::post(strand_, [self = shared_from_this()] { self->pump(); });
      return;
    }
    if (recv_message(s_, m) <= 0) break;
    on_msg_(std::move(m));
  }
  in_pump_ = false;
}

bool zsock::send_frames(const std::vector<std::string>& frames) {
  if (!s_ || closed_ || frames.empty()) return false;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(s_, frames[i].data(), frames[i].size(), flags) < 0) {
      // libzmq sends multipart messages atomically once the first frame is accepted.
      if (i != 0) spdlog::warn("{}: ZeroMQ send failed in a multipart message: {}", what_, zmq_strerror(errno));
      return false;
    }
  }
  return true;
}

bool zsock::send(const std::vector<std::string>& frames) {
  if (!s_ || closed_) return false;
  const bool ok = send_frames(frames);
  // A send may have processed libzmq's mailbox and so consumed the edge of ZMQ_FD that
  // announced input: look for input once more.
  pump();
  return ok;
}

std::size_t zsock::send_many(const std::vector<std::vector<std::string>>& messages) {
  if (!s_ || closed_) return messages.size();
  std::size_t failed = 0;
  for (const auto& m : messages)
    if (!send_frames(m)) failed++;
  pump();  // once for the batch (see send())
  return failed;
}

bool zsock::watch(int events_mask, on_event_fn on_event) {
  if (!s_ || mon_) return false;
  static std::atomic<std::uint64_t> seq{0};
  const std::string uri = "inproc://sylvite-monitor-" + std::to_string(++seq);
  if (zmq_socket_monitor(s_, uri.c_str(), events_mask) != 0) {
    spdlog::warn("{}: cannot monitor the socket: {}", what_, zmq_strerror(errno));
    return false;
  }
  mon_ = zmq_socket(context(), ZMQ_PAIR);
  if (!mon_ || zmq_connect(mon_, uri.c_str()) != 0) {
    spdlog::warn("{}: cannot connect the socket monitor: {}", what_, zmq_strerror(errno));
    if (mon_) zmq_close(mon_);
    mon_ = nullptr;
    zmq_socket_monitor(s_, nullptr, 0);
    return false;
  }
  int fd = -1;
  std::size_t sz = sizeof fd;
  boost::system::error_code ec;
  if (zmq_getsockopt(mon_, ZMQ_FD, &fd, &sz) == 0) msd_.assign(fd, ec);
  on_event_ = std::move(on_event);
  asio::dispatch(strand_, [self = shared_from_this()] { self->pump_monitor(); });
  return true;
}

void zsock::arm_monitor() {
  if (mwaiting_ || closed_ || !mon_) return;
  mwaiting_ = true;
  msd_.async_wait(asio::posix::stream_descriptor::wait_read,
                  asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
                    self->mwaiting_ = false;
                    if (ec || self->closed_) return;
                    self->pump_monitor();
                  }));
}

void zsock::pump_monitor() {
  auto mevents = [this] {
    int ev = 0;
    std::size_t sz = sizeof ev;
    if (!mon_ || zmq_getsockopt(mon_, ZMQ_EVENTS, &ev, &sz) != 0) return 0;
    return ev;
  };
  for (;;) {
    while (!closed_ && (mevents() & ZMQ_POLLIN)) {
      message m;
      if (recv_message(mon_, m) <= 0) break;
      if (m.frames.size() != 2 || m.frames[0].size() < 6) continue;
      socket_event e;
      std::memcpy(&e.event, m.frames[0].data(), 2);
      std::memcpy(&e.value, m.frames[0].data() + 2, 4);
      e.endpoint = std::move(m.frames[1]);
      if (on_event_) on_event_(e);
    }
    if (closed_) return;
    arm_monitor();
    if (!(mevents() & ZMQ_POLLIN)) return;
  }
}

void zsock::close() {
  if (closed_) return;
  closed_ = true;
  on_msg_ = nullptr;
  on_event_ = nullptr;
  boost::system::error_code ec;
  if (mon_) {
    if (s_) zmq_socket_monitor(s_, nullptr, 0);
    if (msd_.is_open()) {
      msd_.cancel(ec);
      (void)msd_.release();
    }
    int zero = 0;
    zmq_setsockopt(mon_, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(mon_);
    mon_ = nullptr;
  }
  if (s_) {
    if (sd_.is_open()) {
      sd_.cancel(ec);
      (void)sd_.release();
    }
    int zero = 0;
    zmq_setsockopt(s_, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s_);
    s_ = nullptr;
  }
}

std::string tcp_uri(const std::string& host, std::uint16_t port, bool bind) {
  std::string h = host;
  if (h.empty() || (bind && h == "0.0.0.0")) h = bind ? "*" : "127.0.0.1";
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return "tcp://" + h + ":" + (bind && port == 0 ? std::string("*") : std::to_string(port));
}

}  // namespace zmq_detail
}  // namespace sylvite::transport
