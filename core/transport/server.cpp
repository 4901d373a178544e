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
#include "core/transport/detail/server.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

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

}  // namespace

// ---------------------------------------------------------------------------------
// server_session

server_session::server_session(server_socket sock, const options& opt, peer_info peer,
                               std::weak_ptr<session_hooks> hooks)
    : sock_(std::move(sock)),
      parser_(opt.max_frame_size),
      peer_(std::move(peer)),
      hooks_(std::move(hooks)),
      max_queue_bytes_(opt.max_queue_bytes),
      max_queue_frames_(opt.max_queue_frames) {}

void server_session::start() {
  asio::dispatch(sock_.get_executor(), [self = shared_from_this()] {
    error_code ec;
    self->sock_.non_blocking(true, ec);
    if (ec) {
      spdlog::warn("transport: cannot make socket from {} non-blocking: {}", self->peer_.address, ec.message());
      self->do_close();
      return;
    }
    self->wait_readable();
  });
}

void server_session::wait_readable() {
  sock_.async_receive(asio::buffer(&peek_byte_, 1), asio::socket_base::message_peek,
                      [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_readable(ec); });
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
    parser_.feed(std::string_view(buf.data(), n));
    for (;;) {
      auto r = parser_.next();
      if (!r) {
        spdlog::warn("transport: closing connection from {}: malformed input ({})", peer_.address,
                     r.error().message());
        do_close();
        return;
      }
      if (!*r) break;
      auto hooks = hooks_.lock();
      if (!hooks) {  // server gone
        do_close();
        return;
      }
      try {
        hooks->on_frame(shared_from_this(), std::move(**r));
      } catch (const std::exception& e) {
        spdlog::error("transport: handler failed for a frame from {}: {}", peer_.address, e.what());
      } catch (...) {
        spdlog::error("transport: handler failed for a frame from {}", peer_.address);
      }
      if (close_done_) return;
    }
    if (n < buf.size()) break;  // drained
  }
  wait_readable();
}

bool server_session::send(std::shared_ptr<const std::string> frame) {
  if (!frame || closed_.load(std::memory_order_acquire)) return false;
  const std::size_t sz = frame->size();
  const std::size_t bytes = queued_bytes_.fetch_add(sz) + sz;
  const std::size_t frames = queued_frames_.fetch_add(1) + 1;
  if (bytes > max_queue_bytes_ || frames > max_queue_frames_) {
    queued_bytes_.fetch_sub(sz);
    queued_frames_.fetch_sub(1);
    if (!overflow_logged_.exchange(true)) {
      spdlog::warn("transport: write queue of {} is full ({} bytes, {} frames queued), disconnecting",
                   peer_.address, bytes - sz, frames - 1);
    }
    close();
    return false;
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

void server_session::write_pending() {
  writing_.swap(queue_);
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(writing_.size());
  for (const auto& f : writing_) bufs.emplace_back(asio::buffer(*f));
  write_active_ = true;
  asio::async_write(sock_, bufs,
                    [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_written(ec); });
}

void server_session::on_written(const error_code& ec) {
  std::size_t bytes = 0;
  for (const auto& f : writing_) bytes += f->size();
  queued_bytes_.fetch_sub(bytes);
  queued_frames_.fetch_sub(writing_.size());
  writing_.clear();
  if (writing_.capacity() > 256) writing_.shrink_to_fit();
  write_active_ = false;
  if (close_done_) return;
  if (ec) {
    if (is_normal_close(ec)) {
      spdlog::debug("transport: write to {} failed: {}", peer_.address, ec.message());
    } else {
      spdlog::info("transport: write to {} failed: {}", peer_.address, ec.message());
    }
    do_close();
    return;
  }
  if (!queue_.empty()) {
    write_pending();
  } else if (queue_.capacity() > 256) {
    queue_.shrink_to_fit();
  }
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
    : io_(io), opt_(std::move(opt)), kind_(kind), ep_(std::move(ep)), acceptor_(io), retry_timer_(io) {}

server_base::~server_base() {
  error_code ec;
  acceptor_.close(ec);
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
  asio::generic::stream_protocol::endpoint gep;
  if (is_unix(ep_)) {
    if (auto r = prepare_unix_path(); !r) return r;
    gep = asio::local::stream_protocol::endpoint(ep_.unix_path);
    is_tcp_ = false;
  } else {
    const std::string host = ep_.host.empty() ? std::string("0.0.0.0") : ep_.host;
    auto addr = asio::ip::make_address(host, ec);
    if (!ec) {
      gep = asio::ip::tcp::endpoint(addr, ep_.port);
    } else {
      asio::ip::tcp::resolver resolver(io_);
      auto results = resolver.resolve(host, std::to_string(ep_.port), asio::ip::resolver_base::passive, ec);
      if (ec || results.empty()) {
        spdlog::error("transport: cannot resolve listen address {}: {}", host, ec ? ec.message() : "no address");
        return make_error_code(errc::resolve_failed);
      }
      gep = results.begin()->endpoint();
    }
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
  accept_next();
  return {};
}

void server_base::accept_next() {
  acceptor_.async_accept(asio::make_strand(io_), [self = shared_from_this()](const error_code& ec,
                                                                             server_socket sock) mutable {
    self->on_accept(ec, std::move(sock));
  });
}

void server_base::on_accept(const error_code& ec, server_socket sock) {
  if (ec) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_accept_log_ > std::chrono::seconds(1)) {
      last_accept_log_ = now;
      spdlog::warn("transport: {} server accept failed on {}: {}", kind_, describe(ep_), ec.message());
    }
    const bool backoff = ec == asio::error::no_descriptors || ec.value() == ENFILE ||
                         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
    std::lock_guard lk(acc_mu_);
    if (!acceptor_.is_open()) return;
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
    return;
  }
  peer_info peer;
  peer.conn_id = next_conn_id_.fetch_add(1);
  error_code pec;
  auto rep = sock.remote_endpoint(pec);
  peer.address = pec ? std::string("unknown") : format_peer(rep.data(), rep.size());
  if (is_tcp_) apply_tcp_options(sock.native_handle(), opt_);
  std::shared_ptr<server_session> s;
  {
    std::lock_guard lk(mu_);
    if (!stopped_) {
      s = std::make_shared<server_session>(std::move(sock), opt_, std::move(peer), weak_from_this());
      conns_.emplace(s->id(), s);
    }
  }
  if (s) {
    spdlog::debug("transport: {} server accepted connection {} from {}", kind_, s->id(), s->peer().address);
    s->start();
  }
  std::lock_guard lk(acc_mu_);
  if (acceptor_.is_open()) accept_next();
}

void server_base::on_session_closed(const std::shared_ptr<server_session>& s) {
  std::lock_guard lk(mu_);
  conns_.erase(s->id());
}

void server_base::stop() {
  stopped_ = true;
  {
    std::lock_guard lk(acc_mu_);
    error_code ec;
    acceptor_.close(ec);
    retry_timer_.cancel();
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

}  // namespace sylvite::transport::detail
