// sylvite::transport client plumbing: connector (resolve + connect with a deadline) and
// client_conn (read loop into a frame_parser, bounded write queue).
// Thread-safety: strand-confined, see detail/client.hpp.
#include <boost/asio/ip/address.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>
#include <sys/un.h>

#include "core/transport/detail/client.hpp"
#include "core/transport/detail/write_now.hpp"

namespace sylvite::transport::detail {

namespace {
constexpr std::size_t initial_read_buffer = 4096;
constexpr std::size_t max_read_buffer = 64 * 1024;
}  // namespace

// ---------------------------------------------------------------------------------
// connector

connector::connector(client_strand strand, endpoint ep, options opt)
    : strand_(strand), ep_(std::move(ep)), opt_(std::move(opt)), resolver_(strand), timer_(strand), sock_(strand) {}

void connector::start(done_fn done) {
  done_ = std::move(done);
  timer_.expires_after(opt_.connect_timeout);
  timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (!ec) self->finish(make_error_code(errc::timeout));
  });
  if (is_unix(ep_)) {
    if (ep_.unix_path.size() >= sizeof(sockaddr_un::sun_path)) {
      last_error_ = error_code(ENAMETOOLONG, boost::system::system_category());
      finish(make_error_code(errc::connect_failed));
      return;
    }
    targets_.emplace_back(asio::local::stream_protocol::endpoint(ep_.unix_path));
    try_next();
    return;
  }
  const std::string host = ep_.host.empty() ? std::string("127.0.0.1") : ep_.host;
  error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (!ec) {
    targets_.emplace_back(asio::ip::tcp::endpoint(addr, ep_.port));
    try_next();
    return;
  }
  resolver_.async_resolve(host, std::to_string(ep_.port),
                          [self = shared_from_this()](const error_code& rec,
                                                      asio::ip::tcp::resolver::results_type results) {
                            if (self->finished_) return;
                            if (rec || results.empty()) {
                              self->last_error_ = rec;
                              spdlog::debug("transport: cannot resolve {}: {}", self->ep_.host,
                                            rec ? rec.message() : "no address");
                              self->finish(make_error_code(errc::resolve_failed));
                              return;
                            }
                            for (const auto& r : results) self->targets_.emplace_back(r.endpoint());
                            self->try_next();
                          });
}

void connector::try_next() {
  if (finished_) return;
  if (next_ >= targets_.size()) {
    spdlog::debug("transport: connect to {} failed: {}", describe(ep_), last_error_.message());
    finish(make_error_code(errc::connect_failed));
    return;
  }
  error_code ec;
  sock_.close(ec);
  const auto target = targets_[next_++];
  sock_.async_connect(target, [self = shared_from_this()](const error_code& cec) {
    if (self->finished_) return;
    if (cec) {
      self->last_error_ = cec;
      self->try_next();
      return;
    }
    self->finish({});
  });
}

void connector::cancel() { finish(make_error_code(errc::closed)); }

void connector::finish(error_code ec) {
  if (finished_) return;
  finished_ = true;
  timer_.cancel();
  resolver_.cancel();
  if (ec) {
    error_code ignored;
    sock_.close(ignored);
  } else if (!is_unix(ep_)) {
    apply_tcp_options(sock_.native_handle(), opt_);
  }
  auto done = std::move(done_);
  done_ = nullptr;
  if (done) done(ec, std::move(sock_));
}

// ---------------------------------------------------------------------------------
// client_conn

client_conn::client_conn(client_socket sock, const options& opt, std::string peer, std::unique_ptr<input_codec> codec)
    : sock_(std::move(sock)),
      codec_(codec ? std::move(codec) : make_salt_codec()),
      peer_(std::move(peer)),
      max_queue_bytes_(opt.max_queue_bytes),
      max_queue_frames_(opt.max_queue_frames) {
  wire::limits lim = codec_->get_limits();
  lim.max_bytes = opt.max_frame_size;
  codec_->set_limits(lim);
  error_code ec;
  sock_.non_blocking(true, ec);
  write_now_ = !ec;  // write_pending writes at once only on a non-blocking socket
}

void client_conn::start_read(frame_fn on_frame, lost_fn on_lost) {
  on_frame_ = std::move(on_frame);
  on_lost_ = std::move(on_lost);
  rbuf_.resize(initial_read_buffer);
  last_read_ = std::chrono::steady_clock::now();
  flush_codec_output();
  if (!closed_) read_more();
}

void client_conn::flush_codec_output() {
  std::string out = codec_->take_output();
  if (out.empty() || closed_) return;
  // Protocol output (a greeting, a PONG) is small and must not be refused by a full
  // queue of owner frames: it bypasses the bounds.
  auto f = std::make_shared<const std::string>(std::move(out));
  queued_bytes_ += f->size();
  queue_.push_back(std::move(f));
  if (!write_active_) write_pending();
}

void client_conn::start_heartbeat(std::chrono::milliseconds ivl, std::chrono::milliseconds timeout, std::string ping) {
  if (closed_ || ivl.count() <= 0) return;
  hb_ivl_ = ivl;
  hb_timeout_ = timeout.count() > 0 ? timeout : ivl * 3;
  hb_ping_ = std::make_shared<const std::string>(std::move(ping));
  hb_timer_ = std::make_unique<asio::steady_timer>(sock_.get_executor());
  heartbeat_tick();
}

void client_conn::heartbeat_tick() {
  hb_timer_->expires_after(hb_ivl_);
  hb_timer_->async_wait([self = shared_from_this()](const error_code& ec) {
    if (ec || self->closed_) return;
    if (std::chrono::steady_clock::now() - self->last_read_ > self->hb_timeout_) {
      self->lose(asio::error::timed_out);
      return;
    }
    self->write(self->hb_ping_);
    self->heartbeat_tick();
  });
}

void client_conn::read_more() {
  sock_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
    if (self->closed_) return;
    if (ec) {
      self->lose(ec);
      return;
    }
    self->last_read_ = std::chrono::steady_clock::now();
    self->codec_->feed(std::string_view(self->rbuf_.data(), n));
    for (;;) {
      auto r = self->codec_->next();
      if (!r) {
        spdlog::warn("transport: closing connection to {}: malformed input ({})", self->peer_, r.error().message());
        self->lose(make_error_code(errc::bad_frame));
        return;
      }
      if (!*r) break;
      if (self->on_frame_) self->on_frame_(std::move(**r));
      if (self->closed_) return;
    }
    self->flush_codec_output();
    // Grow on demand: a full buffer means more is probably waiting.
    if (n == self->rbuf_.size() && self->rbuf_.size() < max_read_buffer) self->rbuf_.resize(self->rbuf_.size() * 2);
    self->read_more();
  });
}

bool client_conn::write(std::shared_ptr<const std::string> frame) {
  if (closed_ || !frame) return false;
  if (queued_bytes_ + frame->size() > max_queue_bytes_ || queue_.size() + writing_.size() + 1 > max_queue_frames_) {
    return false;
  }
  queued_bytes_ += frame->size();
  queue_.push_back(std::move(frame));
  if (!write_active_) write_pending();
  return true;
}

// The socket is non-blocking (constructor): frames are written at once, and only what
// the socket buffer cannot take goes to async_write (detail/write_now.hpp).
void client_conn::write_pending() {
  while (!queue_.empty() && !closed_) {
    writing_.swap(queue_);
    auto bufs = frame_buffers(writing_);
    write_active_ = true;
    error_code ec;
    auto rest = write_now_ ? write_now(sock_, bufs, ec) : std::move(bufs);
    if (!rest.empty()) {
      asio::async_write(sock_, std::move(rest), [self = shared_from_this()](const error_code& wec, std::size_t) {
        if (self->finish_write(wec)) self->write_pending();
      });
      return;
    }
    if (!finish_write(ec)) return;
  }
}

bool client_conn::finish_write(const error_code& ec) {
  for (const auto& f : writing_) queued_bytes_ -= f->size();
  writing_.clear();
  write_active_ = false;
  if (closed_) return false;
  if (ec) {
    lose(ec);
    return false;
  }
  return true;
}

void client_conn::lose(error_code ec) {
  if (closed_) return;
  if (ec == asio::error::eof || ec == asio::error::operation_aborted) {
    spdlog::debug("transport: connection to {} closed: {}", peer_, ec.message());
  } else {
    spdlog::info("transport: connection to {} lost: {}", peer_, ec.message());
  }
  auto cb = std::move(on_lost_);
  close();
  if (cb) cb(ec);
}

void client_conn::close() {
  if (closed_) return;
  closed_ = true;
  error_code ec;
  sock_.shutdown(asio::socket_base::shutdown_both, ec);
  sock_.close(ec);
  if (hb_timer_) hb_timer_->cancel();
  queue_.clear();
  // on_frame_ may be running right now (close() from inside it): keep the callbacks;
  // owners capture weak pointers, so this makes no cycle.
}

}  // namespace sylvite::transport::detail
