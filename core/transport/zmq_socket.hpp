// sylvite::transport::zmq_detail: libzmq sockets driven on an Asio strand.
//   context()   the process-wide libzmq context (one I/O thread; socket cap raised).
//   zsock       one libzmq socket, its ZMQ_FD watched by an Asio descriptor. pump() queues
//               the wait, then reads until libzmq says EAGAIN. ZMQ_FD is edge triggered
//               and Asio's descriptor waits are not speculative: a signal sent before the
//               wait was queued is consumed by that last receive (it processes libzmq's
//               mailbox), one sent after it completes the wait, so none is lost.
//   monitor     zmq_socket_monitor's PAIR end on the same strand, decoded into events.
// Thread-safety: a zsock and its monitor are used only on their strand (libzmq sockets
// are not thread-safe); the strand serialises and fences every call.
#pragma once
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/strand.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/transport/transport.hpp"
#include "core/transport/zmq.hpp"

namespace sylvite::transport::zmq_detail {

using zstrand = asio::strand<asio::any_io_executor>;

void* context();  // never null (aborts if libzmq cannot make one)

// A received multipart message; peer = libzmq's "Peer-Address" of its first frame ("" if
// unknown), size = bytes over all frames.
struct message {
  std::vector<std::string> frames;
  std::string peer;
  std::size_t size = 0;
};

struct socket_event {
  std::uint16_t event = 0;  // ZMQ_EVENT_*
  std::int32_t value = 0;   // fd, errno or interval, per event
  std::string endpoint;
};
const char* event_name(std::uint16_t e);

class zsock : public std::enable_shared_from_this<zsock> {
 public:
  using on_message_fn = std::function<void(message&&)>;
  using on_event_fn = std::function<void(const socket_event&)>;

  // type: ZMQ_PUB/XPUB/ROUTER/REQ/SUB. Null socket (check ok()) if libzmq refuses.
  zsock(zstrand strand, int type, std::string what);
  ~zsock();
  zsock(const zsock&) = delete;
  zsock& operator=(const zsock&) = delete;

  bool ok() const { return s_ != nullptr; }
  void* raw() const { return s_; }
  const zstrand& strand() const { return strand_; }
  const std::string& what() const { return what_; }

  bool set_int(int opt, int v);
  bool set_bytes(int opt, const std::string& v);
  // Apply the options both sides share: keepalive, ipv6, heartbeats, linger, max size.
  void apply_common(const options& opt, const zmq_options& zopt, bool heartbeats);

  // Strand only from here on.
  result<void> bind(const std::string& uri);
  result<void> connect(const std::string& uri);
  std::string last_endpoint() const;
  // Watch connection events (inproc monitor). Call before bind/connect; the monitor is
  // read on the strand.
  bool watch(int events, on_event_fn on_event);
  // Start delivering messages. Callable before the strand runs or from another thread
  // (a server's start()): the first read is dispatched onto the strand.
  void start(on_message_fn on_msg);
  // Non-blocking send of one multipart message; false if libzmq refused (HWM, no peer,
  // closed). Re-checks for input afterwards.
  bool send(const std::vector<std::string>& frames);
  // Several messages, then one look for input; the number libzmq refused.
  std::size_t send_many(const std::vector<std::vector<std::string>>& messages);
  bool send_one(const std::string& frame) { return send(std::vector<std::string>{frame}); }
  void close();  // idempotent; no callbacks after it
  bool closed() const { return closed_; }

 private:
  void pump();
  void arm();
  void pump_monitor();
  void arm_monitor();
  bool send_frames(const std::vector<std::string>& frames);  // no pump

  zstrand strand_;
  void* s_ = nullptr;
  std::string what_;
  asio::posix::stream_descriptor sd_;
  bool waiting_ = false;
  bool in_pump_ = false;
  bool closed_ = false;
  on_message_fn on_msg_;
  // monitor
  void* mon_ = nullptr;
  asio::posix::stream_descriptor msd_;
  bool mwaiting_ = false;
  on_event_fn on_event_;
};

// "tcp://host:port" for libzmq: IPv6 addresses in brackets, "" host -> "*" (bind), port 0
// -> "*" (bind: any free port; see last_endpoint()).
std::string tcp_uri(const std::string& host, std::uint16_t port, bool bind);

}  // namespace sylvite::transport::zmq_detail
