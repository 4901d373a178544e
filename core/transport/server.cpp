// sylvite::transport server side shared by req_server and pub_server: per-connection
// sessions (strand, read loop, bounded write queue) and the listener/accept loop.
// Thread-safety: see detail/server.hpp.
//
// Memory: an idle connection holds no read buffer. The read loop waits for readability
// with a 1-byte MSG_PEEK receive (Asio's speculative path keeps the edge-triggered epoll
// reactor correct, which async_wait would not), then drains the socket into a
// per-thread 64 KB buffer that is fed to the frame_parser. The parser's own buffer only
// holds partial frames. The write queue is two vectors of shared frame pointers (pub
// fan-out shares one buffer between all connections).
//
// Before a connection is authenticated (see options): its frames are limited in bytes,
// msgpack objects and depth; a frame above pre_auth_max_frame_size takes the excess from
// a shared byte budget while it arrives and until the request it became is answered;
// with pre_auth_max_pending requests unanswered its reads pause (TCP pushes back on the
// peer). A sweeper per server closes connections whose frame stalls (frame_timeout) or
// that never send (pre_auth_idle_timeout), reading only atomics of each session.
// Admission (on accept): total, unauthenticated and per-source caps, and a descriptor
// reserve tested on the accepted descriptor's number (the kernel hands out the lowest
// free number, so fd >= limit - reserve means at least that many are open).
#include "core/transport/detail/server.hpp"
#include "core/transport/detail/write_now.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "core/util/rate_limit.hpp"

namespace sylvite::transport::detail {

namespace {

constexpr std::size_t read_chunk = 64 * 1024;
// Reads per readiness notification before going back through the reactor, so one busy
// connection cannot monopolise an io thread.
constexpr int max_reads_per_wakeup = 16;

bool is_normal_close(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor;
}

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t to_ns(std::chrono::milliseconds d) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// "1.2.3.4:5678" -> "1.2.3.4", "[::1]:5678" -> "::1", "unix" -> "unix".
std::string source_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const auto end = address.find(']');
    return end == std::string::npos ? address : address.substr(1, end - 1);
  }
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::size_t count_open_fds() noexcept {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    if (n > 0) --n;  // the directory's own descriptor
  }
  return n;
}

// Process-wide: floods of these come from many connections at once.
util::log_limiter malformed_log;
util::log_limiter budget_log;
util::log_limiter drop_log;

// The TCP endpoint a server binds: a literal address, else the first resolved one.
result<asio::ip::tcp::endpoint> listen_endpoint(asio::io_context& io, const endpoint& ep) {
  error_code ec;
  const std::string host = ep.host.empty() ? std::string("0.0.0.0") : ep.host;
  auto addr = asio::ip::make_address(host, ec);
  if (!ec) return asio::ip::tcp::endpoint(addr, ep.port);
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(ep.port), asio::ip::resolver_base::passive, ec);
  if (ec || results.empty()) {
    spdlog::error("transport: cannot resolve listen address {}: {}", host, ec ? ec.message() : "no address");
    return make_error_code(errc::resolve_failed);
  }
  return results.begin()->endpoint();
}

}  // namespace

// ---------------------------------------------------------------------------------
// server_session

server_session::server_session(server_socket sock, std::shared_ptr<const options> opt, peer_info peer,
                               std::weak_ptr<session_hooks> hooks, std::unique_ptr<input_codec> codec)
    : sock_(std::move(sock)),
      opt_(std::move(opt)),
      parser_(codec ? std::move(codec) : make_salt_codec()),
      peer_(std::move(peer)),
      hooks_(std::move(hooks)),
      max_queue_bytes_(opt_->max_queue_bytes),
      max_queue_frames_(opt_->max_queue_frames),
      created_ns_(now_ns()) {
  authenticated_.store(opt_->authenticated_from_start, std::memory_order_release);
  parser_->set_limits(current_limits());
}

server_session::~server_session() { release_budget(); }

wire::limits server_session::current_limits() const noexcept {
  wire::limits l;
  l.max_bytes = opt_->max_frame_size;
  if (!authenticated()) {
    // With a budget the scanner allows max_frame_size and charge_pre_auth() meters the
    // excess; without one the pre-auth size is a hard limit.
    if (opt_->pre_auth_max_frame_size > 0 && !opt_->pre_auth_budget)
      l.max_bytes = std::min(l.max_bytes, opt_->pre_auth_max_frame_size);
    if (opt_->pre_auth_max_nodes > 0) l.max_nodes = opt_->pre_auth_max_nodes;
    if (opt_->pre_auth_max_depth > 0) l.max_depth = std::min(l.max_depth, opt_->pre_auth_max_depth);
  }
  return l;
}

void server_session::release_budget() noexcept {
  if (!opt_->pre_auth_budget) return;
  const std::size_t n = budget_charged_ + held_charge_.exchange(0);
  budget_charged_ = 0;
  if (n) opt_->pre_auth_budget->give(n);
}

void server_session::start() {
  asio::dispatch(sock_.get_executor(), [self = shared_from_this()] {
    error_code ec;
    self->sock_.non_blocking(true, ec);
    if (ec) {
      spdlog::warn("transport: cannot make socket from {} non-blocking: {}", self->peer_.address, ec.message());
      self->do_close();
      return;
    }
    self->send_codec_output();  // a greeting
    if (!self->close_done_) self->wait_readable();
  });
}

void server_session::send_codec_output() {
  std::string out = parser_->take_output();
  if (!out.empty()) send(std::make_shared<const std::string>(std::move(out)));
}

void server_session::mark_authenticated() {
  if (authenticated_.exchange(true, std::memory_order_acq_rel)) return;
  asio::post(sock_.get_executor(), [self = shared_from_this()] {
    if (self->close_done_) return;
    self->parser_->set_limits(self->current_limits());
    if (self->opt_->pre_auth_budget && self->budget_charged_) {
      self->opt_->pre_auth_budget->give(self->budget_charged_);
      self->budget_charged_ = 0;
    }
    if (self->paused_) self->resume_reading();
  });
  if (auto hooks = hooks_.lock()) hooks->on_session_authenticated(shared_from_this());
}

bool server_session::finish_request() {
  const std::size_t left = pending_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if (left == 0 && opt_->pre_auth_budget) {
    if (const std::size_t n = held_charge_.exchange(0)) opt_->pre_auth_budget->give(n);
  }
  return opt_->pre_auth_max_pending > 0 && left < opt_->pre_auth_max_pending && !authenticated();
}

void server_session::post_resume() {
  asio::post(sock_.get_executor(), [self = shared_from_this()] { self->resume_reading(); });
}

void server_session::request_done() {
  if (finish_request()) post_resume();
}

bool server_session::reply_done(std::shared_ptr<const std::string> frame) {
  const bool queued = frame && admit(frame);
  const bool resume = finish_request();
  if (!queued) frame.reset();
  if (!frame && !resume) return queued;
  if (sock_.get_executor().running_in_this_thread()) {
    // A handler answering inline: its frames are being drained further up this stack,
    // so the reads resume from the queue, as request_done() does.
    if (frame) enqueue(std::move(frame));
    if (resume) post_resume();
    return queued;
  }
  asio::post(sock_.get_executor(), [self = shared_from_this(), f = std::move(frame), resume]() mutable {
    if (f) self->enqueue(std::move(f));
    if (resume) self->resume_reading();
  });
  return queued;
}

const char* server_session::expired(std::int64_t now) const noexcept {
  if (closed_.load(std::memory_order_acquire)) return nullptr;
  const bool auth = authenticated();
  if (opt_->frame_timeout.count() > 0) {
    const std::int64_t since = frame_since_ns_.load(std::memory_order_relaxed);
    const std::int64_t limit = to_ns(opt_->frame_timeout);
    if (since != 0) {
      if (!auth && now - since > limit) return "frame not completed within frame_timeout";
      const std::int64_t last = last_rx_ns_.load(std::memory_order_relaxed);
      if (auth && now - std::max(last, since) > limit) return "frame stalled (no bytes within frame_timeout)";
    }
  }
  if (!auth && opt_->pre_auth_idle_timeout.count() > 0 && last_rx_ns_.load(std::memory_order_relaxed) == 0 &&
      now - created_ns_ > to_ns(opt_->pre_auth_idle_timeout))
    return "sent nothing within the pre-authentication idle timeout";
  return nullptr;
}

void server_session::wait_readable() {
  sock_.async_receive(asio::buffer(&peek_byte_, 1), asio::socket_base::message_peek,
                      [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_readable(ec); });
}

bool server_session::drain_frames() {
  bool completed = false;
  for (;;) {
    if (!authenticated() && opt_->pre_auth_max_pending > 0 &&
        pending_.load(std::memory_order_acquire) >= opt_->pre_auth_max_pending) {
      // Unanswered requests at the cap: stop reading until one is answered; the time
      // spent waiting for our own workers is not the peer's stall.
      paused_ = true;
      frame_since_ns_.store(0, std::memory_order_relaxed);
      return false;
    }
    auto r = parser_->next();
    if (!r) {
      if (const auto n = malformed_log.hit()) {
        if (!authenticated() && r.error() == wire::errc::too_large) {
          const auto l = parser_->get_limits();
          spdlog::warn("transport: closing connection from {}: unauthenticated frame over the pre-authentication "
                       "limits ({} bytes, {} msgpack objects; {} such closes in the last interval)",
                       peer_.address, opt_->pre_auth_max_frame_size, l.max_nodes, n);
        } else {
          spdlog::warn("transport: closing connection from {}: malformed input ({}; {} such closes in the last "
                       "interval)",
                       peer_.address, r.error().message(), n);
        }
      }
      if (auto hooks = hooks_.lock()) hooks->on_input_refused(shared_from_this());
      do_close();
      return false;
    }
    if (!*r) break;
    completed = true;
    auto hooks = hooks_.lock();
    if (!hooks) {  // server gone
      do_close();
      return false;
    }
    // The budget taken by this frame's excess stays taken until its request is answered:
    // the decoded body lives that long.
    if (budget_charged_) {
      held_charge_.fetch_add(budget_charged_);
      budget_charged_ = 0;
    }
    try {
      hooks->on_frame(shared_from_this(), std::move(**r));
    } catch (const std::exception& e) {
      spdlog::error("transport: handler failed for a frame from {}: {}", peer_.address, e.what());
    } catch (...) {
      spdlog::error("transport: handler failed for a frame from {}", peer_.address);
    }
    if (pending_.load(std::memory_order_acquire) == 0 && opt_->pre_auth_budget) {
      if (const std::size_t n = held_charge_.exchange(0)) opt_->pre_auth_budget->give(n);
    }
    if (close_done_) return false;
  }
  send_codec_output();
  if (close_done_) return false;
  if (!parser_->in_frame()) {
    frame_since_ns_.store(0, std::memory_order_relaxed);
  } else if (completed || frame_since_ns_.load(std::memory_order_relaxed) == 0) {
    frame_since_ns_.store(now_ns(), std::memory_order_relaxed);
  }
  return true;
}

bool server_session::charge_pre_auth(std::size_t incoming) {
  if (authenticated() || !opt_->pre_auth_budget || opt_->pre_auth_max_frame_size == 0) return true;
  // Charged on the buffer's capacity, the memory it really holds (growth doubles it),
  // before feeding `incoming` more bytes, so the budget is checked before the buffer
  // grows; between frames a big buffer is released rather than kept charged.
  if (!parser_->in_frame() && parser_->capacity() > opt_->pre_auth_max_frame_size) parser_->release_memory();
  const std::size_t held = incoming ? parser_->capacity_after(incoming) : parser_->capacity();
  const std::size_t want = held > opt_->pre_auth_max_frame_size ? held - opt_->pre_auth_max_frame_size : 0;
  if (want > budget_charged_) {
    if (!opt_->pre_auth_budget->take(want - budget_charged_)) {
      if (const auto n = budget_log.hit()) {
        spdlog::warn("transport: closing connection from {}: unauthenticated frame over {} bytes and the shared "
                     "pre-authentication budget ({} bytes, pre_auth_large_frame_budget) is in use ({} such closes "
                     "in the last interval)",
                     peer_.address, opt_->pre_auth_max_frame_size, opt_->pre_auth_budget->cap(), n);
      }
      do_close();
      return false;
    }
    budget_charged_ = want;
  } else if (want < budget_charged_) {
    opt_->pre_auth_budget->give(budget_charged_ - want);
    budget_charged_ = want;
  }
  return true;
}

void server_session::resume_reading() {
  if (close_done_ || !paused_) return;
  if (!authenticated() && opt_->pre_auth_max_pending > 0 &&
      pending_.load(std::memory_order_acquire) >= opt_->pre_auth_max_pending)
    return;
  paused_ = false;
  if (!drain_frames()) return;
  if (!charge_pre_auth(0)) return;
  wait_readable();
}

void server_session::on_readable(const error_code& wait_ec) {
  if (close_done_) return;
  if (wait_ec) {
    if (is_normal_close(wait_ec)) {
      spdlog::debug("transport: connection {} from {} closed: {}", peer_.conn_id, peer_.address, wait_ec.message());
    } else {
      spdlog::info("transport: connection {} from {} lost: {}", peer_.conn_id, peer_.address, wait_ec.message());
    }
    do_close();
    return;
  }
  thread_local std::array<char, read_chunk> buf;
  for (int round = 0; round < max_reads_per_wakeup; ++round) {
    error_code ec;
    std::size_t n = sock_.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) {
      if (is_normal_close(ec)) {
        spdlog::debug("transport: connection {} from {} closed: {}", peer_.conn_id, peer_.address, ec.message());
      } else {
        spdlog::info("transport: connection {} from {} lost: {}", peer_.conn_id, peer_.address, ec.message());
      }
      do_close();
      return;
    }
    last_rx_ns_.store(now_ns(), std::memory_order_relaxed);
    if (!charge_pre_auth(n)) return;
    parser_->feed(std::string_view(buf.data(), n));
    if (!drain_frames()) return;
    if (!charge_pre_auth(0)) return;
    if (n < buf.size()) break;  // drained
  }
  wait_readable();
}

bool server_session::admit(const std::shared_ptr<const std::string>& frame) {
  if (closed_.load(std::memory_order_acquire)) return false;
  const std::size_t sz = frame->size();
  const std::size_t bytes = queued_bytes_.fetch_add(sz) + sz;
  const std::size_t frames = queued_frames_.fetch_add(1) + 1;
  if (bytes > max_queue_bytes_ || frames > max_queue_frames_) {
    queued_bytes_.fetch_sub(sz);
    queued_frames_.fetch_sub(1);
    if (opt_->drop_when_full) {
      if (const auto n = drop_log.hit())
        spdlog::warn("transport: write queue of {} is full ({} frames queued): dropped {} frame(s) in the last "
                     "interval (high-water mark)",
                     peer_.address, frames - 1, n);
      return false;
    }
    if (!overflow_logged_.exchange(true)) {
      spdlog::warn("transport: write queue of {} is full ({} bytes, {} frames queued), disconnecting",
                   peer_.address, bytes - sz, frames - 1);
    }
    close();
    return false;
  }
  return true;
}

bool server_session::send(std::shared_ptr<const std::string> frame) {
  if (!frame || !admit(frame)) return false;
  // On the strand already (a reply from the handler that read the request, a PONG): no
  // hop through the strand's queue. Every enqueue is a whole frame, and a frame sent
  // from elsewhere (a publish) is still posted, so frames never interleave; a REQ
  // connection has one request in flight and a TCP reply is matched by its mid.
  if (sock_.get_executor().running_in_this_thread()) {
    enqueue(std::move(frame));
    return true;
  }
  asio::post(sock_.get_executor(),
             [self = shared_from_this(), f = std::move(frame)]() mutable { self->enqueue(std::move(f)); });
  return true;
}

void server_session::enqueue(std::shared_ptr<const std::string> frame) {
  if (close_done_) {
    queued_bytes_.fetch_sub(frame->size());
    queued_frames_.fetch_sub(1);
    return;
  }
  queue_.push_back(std::move(frame));
  if (!write_active_) write_pending();
}

// The socket is non-blocking: the queued frames are written at once (one sendmsg), and
// only what the socket buffer cannot take goes to async_write. A frame that fits (nearly
// every reply and publish) completes here, without a completion queued on the io_context.
void server_session::write_pending() {
  while (!queue_.empty() && !close_done_) {
    writing_.swap(queue_);
    auto bufs = frame_buffers(writing_);
    write_active_ = true;
    error_code ec;
    auto rest = write_now(sock_, bufs, ec);
    if (!rest.empty()) {
      asio::async_write(sock_, std::move(rest),
                        [self = shared_from_this()](const error_code& wec, std::size_t) { self->on_written(wec); });
      return;
    }
    if (!finish_write(ec)) return;
  }
  if (queue_.capacity() > 256) queue_.shrink_to_fit();
}

void server_session::on_written(const error_code& ec) {
  if (finish_write(ec)) write_pending();
}

bool server_session::finish_write(const error_code& ec) {
  std::size_t bytes = 0;
  for (const auto& f : writing_) bytes += f->size();
  queued_bytes_.fetch_sub(bytes);
  queued_frames_.fetch_sub(writing_.size());
  writing_.clear();
  if (writing_.capacity() > 256) writing_.shrink_to_fit();
  write_active_ = false;
  if (close_done_) return false;
  if (ec) {
    if (is_normal_close(ec)) {
      spdlog::debug("transport: write to {} failed: {}", peer_.address, ec.message());
    } else {
      spdlog::info("transport: write to {} failed: {}", peer_.address, ec.message());
    }
    do_close();
    return false;
  }
  return true;
}

void server_session::close() {
  closed_.store(true, std::memory_order_release);
  asio::post(sock_.get_executor(), [self = shared_from_this()] { self->do_close(); });
}

void server_session::do_close() {
  if (close_done_) return;
  close_done_ = true;
  closed_.store(true, std::memory_order_release);
  error_code ec;
  sock_.shutdown(asio::socket_base::shutdown_both, ec);
  sock_.close(ec);
  std::size_t bytes = 0;
  for (const auto& f : queue_) bytes += f->size();
  queued_bytes_.fetch_sub(bytes);
  queued_frames_.fetch_sub(queue_.size());
  queue_.clear();
  queue_.shrink_to_fit();
  if (opt_->pre_auth_budget && budget_charged_) {
    opt_->pre_auth_budget->give(budget_charged_);
    budget_charged_ = 0;
  }
  parser_->clear();  // free a partial frame now, not at the last responder
  if (auto hooks = hooks_.lock()) {
    try {
      hooks->on_session_closed(shared_from_this());
    } catch (...) {
      spdlog::error("transport: close hook failed for {}", peer_.address);
    }
  }
}

// ---------------------------------------------------------------------------------
// server_base

server_base::server_base(asio::io_context& io, endpoint ep, options opt, const char* kind)
    : io_(io),
      opt_(std::move(opt)),
      sopt_(std::make_shared<const options>(opt_)),
      kind_(kind),
      sweep_timer_(io),
      ep_(std::move(ep)),
      acceptor_(io),
      retry_timer_(io) {}

server_base::~server_base() {
  error_code ec;
  acceptor_.close(ec);
  if (spare_fd_ >= 0) ::close(spare_fd_);
  if (created_unix_) {
    struct stat st{};
    if (::lstat(ep_.unix_path.c_str(), &st) == 0 && st.st_dev == unix_dev_ && st.st_ino == unix_ino_) {
      ::unlink(ep_.unix_path.c_str());
    }
  }
}

result<void> server_base::prepare_unix_path() {
  const std::string& path = ep_.unix_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    spdlog::error("transport: Unix socket path too long: {}", path);
    return error_code(ENAMETOOLONG, boost::system::system_category());
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    error_code ec(errno, boost::system::system_category());
    spdlog::error("transport: cannot stat {}: {}", path, ec.message());
    return ec;
  }
  if (!S_ISSOCK(st.st_mode)) {
    spdlog::error("transport: {} exists and is not a socket; refusing to replace it", path);
    return error_code(EEXIST, boost::system::system_category());
  }
  // A socket file: stale unless something is listening there.
  asio::local::stream_protocol::socket probe(io_);
  error_code ec;
  probe.open(asio::local::stream_protocol(), ec);
  if (!ec) probe.non_blocking(true, ec);
  if (!ec) probe.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec || ec == asio::error::would_block || ec == asio::error::try_again) {
    spdlog::error("transport: another server is listening on {}", path);
    return make_error_code(asio::error::address_in_use);
  }
  if (ec != asio::error::connection_refused) {
    spdlog::error("transport: cannot probe {}: {}", path, ec.message());
    return ec;
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    error_code uec(errno, boost::system::system_category());
    spdlog::error("transport: cannot remove stale socket {}: {}", path, uec.message());
    return uec;
  }
  spdlog::debug("transport: removed stale socket file {}", path);
  return {};
}

result<void> server_base::start() {
  if (started_.exchange(true)) return make_error_code(asio::error::already_started);
  std::lock_guard lk(acc_mu_);
  error_code ec;
  if (opt_.listen_fd >= 0) return adopt_listener();
  asio::generic::stream_protocol::endpoint gep;
  if (is_unix(ep_)) {
    if (auto r = prepare_unix_path(); !r) return r;
    gep = asio::local::stream_protocol::endpoint(ep_.unix_path);
    is_tcp_ = false;
  } else {
    auto tep = listen_endpoint(io_, ep_);
    if (!tep) return tep.error();
    gep = *tep;
    is_tcp_ = true;
  }
  acceptor_.open(gep.protocol(), ec);
  if (!ec && is_tcp_) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(gep, ec);
  if (ec) {
    spdlog::error("transport: {} server cannot bind {}: {}", kind_, describe(ep_), ec.message());
    error_code ignored;
    acceptor_.close(ignored);
    return ec;
  }
  if (!is_tcp_) {
    // Not listening yet, so nobody can connect before the mode is 0600.
    created_unix_ = true;
    struct stat st{};
    if (::chmod(ep_.unix_path.c_str(), 0600) != 0 || ::lstat(ep_.unix_path.c_str(), &st) != 0) {
      error_code cec(errno, boost::system::system_category());
      spdlog::error("transport: cannot chmod 0600 {}: {}", ep_.unix_path, cec.message());
      error_code ignored;
      acceptor_.close(ignored);
      ::unlink(ep_.unix_path.c_str());
      created_unix_ = false;
      return cec;
    }
    unix_dev_ = st.st_dev;
    unix_ino_ = st.st_ino;
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::error("transport: {} server cannot listen on {}: {}", kind_, describe(ep_), ec.message());
    error_code ignored;
    acceptor_.close(ignored);
    return ec;
  }
  if (is_tcp_) {
    auto local = acceptor_.local_endpoint(ec);
    if (!ec) port_ = port_of(local.data(), local.size());
  }
  spdlog::debug("transport: {} server listening on {}", kind_,
                is_tcp_ ? describe(endpoint{ep_.host, port_.load(), {}}) : ep_.unix_path);
  begin_accepting();
  return {};
}

// acc_mu_ held.
void server_base::begin_accepting() {
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) fd_limit_ = rl.rlim_cur;
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  error_code ec;
  acceptor_.native_non_blocking(true, ec);  // accept4() in on_listener_ready must not block
  if (ec) spdlog::error("transport: {} server: listener not non-blocking: {}", kind_, ec.message());
  accept_next();
  if (opt_.frame_timeout.count() > 0 || opt_.pre_auth_idle_timeout.count() > 0) arm_sweep();
}

// options::listen_fd: a TCP socket already listening (acc_mu_ held).
result<void> server_base::adopt_listener() {
  const int fd = opt_.listen_fd;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int listening = 0;
  socklen_t ll = sizeof listening;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ||
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0 || !listening) {
    spdlog::error("transport: {} server: descriptor {} is not a listening TCP socket", kind_, fd);
    return make_error_code(asio::error::bad_descriptor);
  }
  error_code ec;
  acceptor_.assign(asio::generic::stream_protocol(ss.ss_family, IPPROTO_TCP), fd, ec);
  if (ec) {
    spdlog::error("transport: {} server cannot use listening descriptor {}: {}", kind_, fd, ec.message());
    return ec;
  }
  is_tcp_ = true;
  port_ = port_of(&ss, len);
  spdlog::debug("transport: {} server accepting on inherited listener {} (port {})", kind_, fd, port_.load());
  begin_accepting();
  return {};
}


void server_base::arm_sweep() {  // acc_mu_ held
  auto shortest = std::chrono::milliseconds::max();
  if (opt_.frame_timeout.count() > 0) shortest = std::min(shortest, opt_.frame_timeout);
  if (opt_.pre_auth_idle_timeout.count() > 0) shortest = std::min(shortest, opt_.pre_auth_idle_timeout);
  const auto every = std::clamp(shortest / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  sweep_timer_.expires_after(every);
  sweep_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->stopped_) return;
    self->sweep();
    std::lock_guard lk(self->acc_mu_);
    if (!self->stopped_) self->arm_sweep();
  });
}

void server_base::sweep() {
  const std::int64_t now = now_ns();
  std::vector<std::pair<std::shared_ptr<server_session>, const char*>> victims;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, w] : conns_) {
      auto s = w.lock();
      if (!s) continue;
      if (const char* why = s->expired(now)) victims.emplace_back(std::move(s), why);
    }
  }
  for (auto& [s, why] : victims) {
    spdlog::debug("transport: {} server closing connection {} from {}: {}", kind_, s->id(), s->peer().address, why);
    s->close();
  }
  if (victims.empty()) return;
  for (std::size_t i = 0; i < victims.size(); ++i) {
    if (const auto n = sweep_log_.hit()) {
      spdlog::info("transport: {} server on {} closed {} stalled or silent connection(s) in the last interval "
                   "(e.g. {}: {})",
                   kind_, describe(endpoint{ep_.host, port_.load(), ep_.unix_path}), n, victims[i].first->peer().address,
                   victims[i].second);
    }
  }
}

std::string server_base::refuse_reason_locked(const std::string& source, int fd) const {
  if (opt_.reserved_fds > 0 && fd_limit_ > 0 && fd >= 0 &&
      static_cast<std::uint64_t>(fd) + opt_.reserved_fds >= fd_limit_)
    return "fd";
  if (opt_.max_connections > 0 && conns_.size() >= opt_.max_connections)
    return fmt::format("{} connections open (max_connections {})", conns_.size(), opt_.max_connections);
  if (opt_.authenticated_from_start) return {};
  if (opt_.pre_auth_max_connections > 0 && unauth_total_ >= opt_.pre_auth_max_connections)
    return fmt::format("{} unauthenticated connections open (pre_auth_max_connections {})", unauth_total_,
                       opt_.pre_auth_max_connections);
  if (opt_.pre_auth_max_connections_per_source > 0) {
    auto it = unauth_by_source_.find(source);
    if (it != unauth_by_source_.end() && it->second >= opt_.pre_auth_max_connections_per_source)
      return fmt::format("{} unauthenticated connections from {} (pre_auth_max_connections_per_source {})",
                         it->second, source, opt_.pre_auth_max_connections_per_source);
  }
  return {};
}

void server_base::shed_backlog() {  // acc_mu_ held
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
    spare_fd_ = -1;
  }
  error_code ec;
  acceptor_.native_non_blocking(true, ec);
  std::size_t shed = 0;
  if (!ec) {
    for (; shed < 256; ++shed) {
      const int fd = ::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      ::close(fd);
    }
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  refused_ += shed;
  if (fd_log_.hit()) {
    spdlog::error("transport: descriptors exhausted: {} open, limit {}; refusing new connections on {} ({} closed "
                  "unanswered)",
                  count_open_fds(), fd_limit_, describe(endpoint{ep_.host, port_.load(), ep_.unix_path}), shed);
  }
}

void server_base::accept_next() {
  acceptor_.async_wait(asio::socket_base::wait_read,
                       [self = shared_from_this()](const error_code& ec) { self->on_listener_ready(ec); });
}

void server_base::on_listener_ready(const error_code& ec) {
  if (ec) {
    on_accept_error(ec);
    return;
  }
  // Up to kBatch connections per turn, then a post: the other handlers on io_ get their
  // turn during a storm. The wait resumes only once accept4() says EAGAIN (the reactor is
  // edge-triggered; a new wait re-arms it).
  constexpr int kBatch = 32;
  for (int n = 0; n < kBatch; ++n) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = -1, err = 0;
    {
      std::lock_guard lk(acc_mu_);
      if (!acceptor_.is_open() || stopped_) return;
      fd = ::accept4(acceptor_.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) {
          accept_next();
          return;
        }
      }
    }
    if (fd >= 0) {
      on_accepted(fd, addr, len);
      continue;
    }
    // accept(2): errors of the new connection itself (it is gone) are retried at once.
    switch (err) {
      case EINTR: case ECONNABORTED: case EPROTO: case EPERM: case ENETDOWN: case ENOPROTOOPT:
      case EHOSTDOWN: case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH:
        continue;
      default:
        on_accept_error(error_code(err, asio::error::get_system_category()));
        return;
    }
  }
  asio::post(io_, [self = shared_from_this()] { self->on_listener_ready({}); });
}

void server_base::on_accept_error(const error_code& ec) {
  if (ec == asio::error::operation_aborted || stopped_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_accept_log_ > std::chrono::seconds(1)) {
    last_accept_log_ = now;
    spdlog::warn("transport: {} server accept failed on {}: {}", kind_, describe(ep_), ec.message());
  }
  const bool no_fds = ec == asio::error::no_descriptors || ec.value() == ENFILE;
  const bool backoff = no_fds || ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
  std::lock_guard lk(acc_mu_);
  if (!acceptor_.is_open()) return;
  if (no_fds) shed_backlog();
  if (backoff) {
    retry_timer_.expires_after(std::chrono::milliseconds(100));
    retry_timer_.async_wait([self = shared_from_this()](const error_code& tec) {
      if (tec) return;
      std::lock_guard lk2(self->acc_mu_);
      if (self->acceptor_.is_open()) self->accept_next();
    });
  } else {
    accept_next();
  }
}

void server_base::on_accepted(int fd, const sockaddr_storage& addr, socklen_t addr_len) {
  peer_info peer;
  peer.conn_id = next_conn_id_.fetch_add(1);
  peer.address = addr_len > 0 ? format_peer(&addr, addr_len) : std::string("unknown");
  if (!is_tcp_) {
    // The CLI socket: who is calling, as the kernel knows it (publisher_acl needs the
    // caller's uid, not the user name the client claims).
    struct ucred cr {};
    socklen_t crlen = sizeof cr;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0 && crlen == sizeof cr) {
      peer.uid = static_cast<std::uint32_t>(cr.uid);
      peer.gid = static_cast<std::uint32_t>(cr.gid);
    }
  }
  std::string source = source_of(peer.address);
  std::string refused;
  std::shared_ptr<server_session> s;
  {
    std::lock_guard lk(mu_);
    if (!stopped_) {
      refused = refuse_reason_locked(source, fd);
      if (refused.empty()) {
        asio::io_context* ctx = &io_;
        if (const auto& cs = opt_.session_contexts; cs && !cs->empty())
          ctx = (*cs)[next_context_.fetch_add(1, std::memory_order_relaxed) % cs->size()];
        server_socket sock(asio::make_strand(*ctx));
        error_code aec;
        sock.assign(asio::generic::stream_protocol(addr.ss_family, is_tcp_ ? IPPROTO_TCP : 0), fd, aec);
        if (aec) {
          ::close(fd);
          if (fd_log_.hit()) spdlog::error("transport: {} server cannot take a connection: {}", kind_, aec.message());
          return;
        }
        s = std::make_shared<server_session>(std::move(sock), sopt_, std::move(peer), weak_from_this(), make_codec());
        if (!opt_.authenticated_from_start) {
          ++unauth_total_;
          ++unauth_by_source_[source];
          s->unauth_counted = true;
        }
        s->set_source(std::move(source));
        conns_.emplace(s->id(), s);
      }
    }
  }
  if (!refused.empty()) {
    // Closed at once: the refusal costs one accept and one close, and is logged once
    // per interval with a count.
    ::close(fd);
    ++refused_;
    if (refused == "fd") {
      if (fd_log_.hit()) {
        spdlog::error("transport: descriptors exhausted: {} open, limit {}; refusing new connections on {} "
                      "(reserved_fds {})",
                      count_open_fds(), fd_limit_, describe(endpoint{ep_.host, port_.load(), ep_.unix_path}),
                      opt_.reserved_fds);
      }
    } else if (const auto n = refuse_log_[refused.find("per_source") != std::string::npos        ? 2
                                         : refused.find("pre_auth_max_connections") != std::string::npos ? 1
                                                                                                          : 0]
                                   .hit()) {
      spdlog::warn("transport: {} server on {} refused connection from {}: {} ({} refused in the last interval)",
                   kind_, describe(endpoint{ep_.host, port_.load(), ep_.unix_path}), peer.address, refused, n);
    }
  } else if (s && is_tcp_) {
    apply_tcp_options(s->native_handle(), opt_);
  }
  if (s) {
    spdlog::debug("transport: {} server accepted connection {} from {}", kind_, s->id(), s->peer().address);
    s->start();
  } else if (refused.empty()) {
    ::close(fd);  // the server stopped meanwhile
  }
}

void server_base::on_session_closed(const std::shared_ptr<server_session>& s) {
  std::lock_guard lk(mu_);
  conns_.erase(s->id());
  uncount_unauth_locked(*s);
}

void server_base::on_session_authenticated(const std::shared_ptr<server_session>& s) {
  std::lock_guard lk(mu_);
  uncount_unauth_locked(*s);
}

void server_base::uncount_unauth_locked(server_session& s) {
  if (!s.unauth_counted) return;
  s.unauth_counted = false;
  --unauth_total_;
  auto it = unauth_by_source_.find(s.source());
  if (it != unauth_by_source_.end() && --it->second == 0) unauth_by_source_.erase(it);
}

void server_base::stop() {
  stopped_ = true;
  {
    std::lock_guard lk(acc_mu_);
    error_code ec;
    acceptor_.close(ec);
    retry_timer_.cancel();
    sweep_timer_.cancel();
    if (created_unix_) {
      struct stat st{};
      if (::lstat(ep_.unix_path.c_str(), &st) == 0 && st.st_dev == unix_dev_ && st.st_ino == unix_ino_) {
        ::unlink(ep_.unix_path.c_str());
      }
      created_unix_ = false;
    }
  }
  std::vector<std::shared_ptr<server_session>> live;
  {
    std::lock_guard lk(mu_);
    live.reserve(conns_.size());
    for (auto& [id, w] : conns_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->close();
}

std::size_t server_base::connection_count() const {
  std::lock_guard lk(mu_);
  return conns_.size();
}

std::size_t server_base::unauthenticated_count() const {
  std::lock_guard lk(mu_);
  return unauth_total_;
}

}  // namespace sylvite::transport::detail

namespace sylvite::transport {

namespace {

// bind (+ listen) one socket; its descriptor, close-on-exec.
result<int> bind_one(asio::io_context& io, const asio::ip::tcp::endpoint& tep, bool reuse_port, bool listen) {
  error_code ec;
  asio::ip::tcp::acceptor acc(io);
  // Close-on-exec from the start: a program another thread spawns must not inherit it.
  const int raw = ::socket(tep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (raw < 0) return error_code(errno, boost::system::system_category());
  acc.assign(tep.protocol(), raw, ec);
  if (ec) {
    ::close(raw);
    return ec;
  }
  acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && reuse_port) {
    const int one = 1;
    if (::setsockopt(acc.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
      ec = error_code(errno, boost::system::system_category());
  }
  if (!ec) acc.bind(tep, ec);
  if (!ec && listen) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return ec;
  const int fd = acc.release(ec);
  if (ec) return ec;
  return fd;
}

}  // namespace

result<int> open_tcp_listener(const endpoint& ep) {
  asio::io_context io;
  auto tep = detail::listen_endpoint(io, ep);
  if (!tep) return tep.error();
  auto fd = bind_one(io, *tep, false, true);
  if (!fd) spdlog::error("transport: cannot listen on {}: {}", detail::describe(ep), fd.error().message());
  return fd;
}

result<std::vector<int>> open_tcp_listener_group(const endpoint& ep, int n) {
  asio::io_context io;
  auto tep = detail::listen_endpoint(io, ep);
  if (!tep) return tep.error();
  std::vector<int> fds;
  auto fail = [&](const error_code& ec) -> result<std::vector<int>> {
    spdlog::error("transport: cannot listen on {}: {}", detail::describe(ep), ec.message());
    for (int fd : fds) ::close(fd);
    return ec;
  };
  // A plain bind first: a port held by anyone (also a SO_REUSEPORT group of this user,
  // which the group's own binds would silently join) is refused here.
  if (tep->port() != 0) {
    auto probe = bind_one(io, *tep, false, false);
    if (!probe) return fail(probe.error());
    ::close(*probe);
  }
  for (int i = 0; i < std::max(1, n); ++i) {
    auto fd = bind_one(io, *tep, true, true);
    if (!fd) return fail(fd.error());
    fds.push_back(*fd);
    if (tep->port() == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (::getsockname(*fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) tep->port(detail::port_of(&ss, len));
    }
  }
  return fds;
}

}  // namespace sylvite::transport
