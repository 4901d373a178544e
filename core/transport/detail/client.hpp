// sylvite::transport client internals: resolve + connect with a deadline (connector)
// and a client connection (socket, parser, bounded write queue) used by req_client and
// pub_client. Thread-safety: everything runs on the owning client's strand.
#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/transport/detail/common.hpp"
#include "core/transport/detail/input_codec.hpp"

namespace sylvite::transport::detail {

using client_strand = asio::strand<asio::any_io_executor>;
using client_socket = asio::generic::stream_protocol::socket;

// One connect attempt: resolve (TCP names), try every address, give up at
// opt.connect_timeout. done(ec, socket) runs once on the strand; ec is
// errc::resolve_failed / connect_failed / timeout / closed (cancel()). TCP options
// (nodelay, keepalive, user timeout) are applied to the connected socket.
class connector : public std::enable_shared_from_this<connector> {
 public:
  using done_fn = std::function<void(error_code, client_socket)>;
  connector(client_strand strand, endpoint ep, options opt);
  void start(done_fn done);  // on the strand
  void cancel();             // on the strand

 private:
  void try_next();
  void finish(error_code ec);

  client_strand strand_;
  endpoint ep_;
  options opt_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  client_socket sock_;
  std::vector<asio::generic::stream_protocol::endpoint> targets_;
  std::size_t next_ = 0;
  error_code last_error_;
  done_fn done_;
  bool finished_ = false;
};

// A connected client socket with an input codec (Salt's framing unless another is given,
// e.g. ZMTP's client roles) and a bounded write queue. The owner drives it from its
// strand: start_read() then write() frames; on_frame / on_lost are called on the strand;
// on_lost at most once (not after close()). What the codec sends by itself (a greeting, a
// PONG) is written when start_read() begins and after each read.
class client_conn : public std::enable_shared_from_this<client_conn> {
 public:
  using frame_fn = std::function<void(wire::frame&&)>;
  using lost_fn = std::function<void(error_code)>;
  client_conn(client_socket sock, const options& opt, std::string peer,
              std::unique_ptr<input_codec> codec = nullptr);
  void start_read(frame_fn on_frame, lost_fn on_lost);
  // Heartbeat (ZMTP's ZMQ_HEARTBEAT_IVL/TIMEOUT): every ivl write ping; when nothing was
  // read for timeout, the connection is lost with asio::error::timed_out. After start_read.
  void start_heartbeat(std::chrono::milliseconds ivl, std::chrono::milliseconds timeout, std::string ping);
  // false if closed or the queue would overflow (nothing queued then).
  bool write(std::shared_ptr<const std::string> frame);
  void close();  // silent: on_lost is not called
  bool open() const noexcept { return !closed_; }
  std::size_t queued_bytes() const noexcept { return queued_bytes_; }
  const std::string& peer() const noexcept { return peer_; }

 private:
  void read_more();
  void write_pending();
  bool finish_write(const error_code& ec);  // accounts the frames in writing_; false: stop writing
  void lose(error_code ec);
  void flush_codec_output();
  void heartbeat_tick();

  client_socket sock_;
  std::unique_ptr<input_codec> codec_;
  std::unique_ptr<asio::steady_timer> hb_timer_;
  std::chrono::milliseconds hb_ivl_{0}, hb_timeout_{0};
  std::shared_ptr<const std::string> hb_ping_;
  std::chrono::steady_clock::time_point last_read_;
  std::string peer_;
  std::size_t max_queue_bytes_;
  std::size_t max_queue_frames_;
  std::vector<char> rbuf_;
  std::vector<std::shared_ptr<const std::string>> queue_, writing_;
  std::size_t queued_bytes_ = 0;
  bool write_active_ = false;
  bool write_now_ = false;  // the socket is non-blocking: write_pending tries a write at once
  bool closed_ = false;
  frame_fn on_frame_;
  lost_fn on_lost_;
};

}  // namespace sylvite::transport::detail
