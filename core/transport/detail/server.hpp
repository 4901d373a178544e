// sylvite::transport server internals: server_session (one accepted connection: read
// loop into a frame_parser, bounded write queue) and server_base (listener, accept loop,
// connection registry, stop). req_server and pub_server derive their impl from server_base.
// Thread-safety: server_session::send/close/alive/peer are thread-safe; everything else
// in a session runs on its strand. server_base methods are thread-safe; hooks are called
// on the strand of the session concerned.
#pragma once
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/transport/detail/common.hpp"
#include "core/transport/detail/input_codec.hpp"
#include "core/util/rate_limit.hpp"

namespace sylvite::transport::detail {

using server_strand = asio::strand<asio::io_context::executor_type>;
using server_socket = asio::basic_stream_socket<asio::generic::stream_protocol, server_strand>;

class server_session;

// What a session reports to its server. Both calls happen on the session strand.
struct session_hooks {
  virtual ~session_hooks() = default;
  virtual void on_frame(const std::shared_ptr<server_session>& s, wire::frame&& f) = 0;
  // Exactly once for every started session, after the socket was closed.
  virtual void on_session_closed(const std::shared_ptr<server_session>& s) = 0;
  // Once, when an unauthenticated session becomes authenticated (any thread).
  virtual void on_session_authenticated(const std::shared_ptr<server_session>&) {}
  // The codec refused the session's input (malformed, over the limits); the session is
  // being closed.
  virtual void on_input_refused(const std::shared_ptr<server_session>&) {}
};

class server_session : public std::enable_shared_from_this<server_session> {
 public:
  server_session(server_socket sock, std::shared_ptr<const options> opt, peer_info peer,
                 std::weak_ptr<session_hooks> hooks, std::unique_ptr<input_codec> codec = make_salt_codec());
  server_session(const server_session&) = delete;
  server_session& operator=(const server_session&) = delete;
  ~server_session();

  void start();
  // Lift the pre-authentication limits (any thread, idempotent).
  void mark_authenticated();
  bool authenticated() const noexcept { return authenticated_.load(std::memory_order_acquire); }
  // Requests handed to the handler and not answered yet (req server; any thread).
  void request_started() noexcept { pending_.fetch_add(1, std::memory_order_acq_rel); }
  void request_done();
  // A reply that ends its request: send(frame) then request_done() with one hop to the
  // strand instead of two (a reply from a worker thread to an unauthenticated connection,
  // whose reads resume after it). frame may be null (no reply). false as send().
  bool reply_done(std::shared_ptr<const std::string> frame);
  // Timeout check by the server's sweeper (any thread): why the session should be
  // closed now, or nullptr.
  const char* expired(std::int64_t now_ns) const noexcept;
  // Source address without the port ("1.2.3.4", "::1", "unix"); set by the server.
  const std::string& source() const noexcept { return source_; }
  void set_source(std::string s) { source_ = std::move(s); }
  bool unauth_counted = false;  // guarded by the server's mu_
  // Queue a complete frame (any thread). false if the session is closed or the queue
  // overflowed (then the session is being disconnected, logged once).
  bool send(std::shared_ptr<const std::string> frame);
  // Close the connection (any thread); pending writes are dropped.
  void close();
  bool alive() const noexcept { return !closed_.load(std::memory_order_acquire); }
  // steady_clock ns of the last bytes received, 0 if none yet (any thread).
  std::int64_t last_rx_ns() const noexcept { return last_rx_ns_.load(std::memory_order_relaxed); }
  const peer_info& peer() const noexcept { return peer_; }
  std::uint64_t id() const noexcept { return peer_.conn_id; }
  int native_handle() noexcept { return sock_.native_handle(); }

 private:
  void wait_readable();
  void on_readable(const error_code& ec);
  bool drain_frames();       // false: closed or paused
  bool charge_pre_auth(std::size_t incoming);  // false: closed (budget exhausted)
  void release_budget() noexcept;
  void resume_reading();
  void post_resume();  // resume_reading() later, on the strand
  wire::limits current_limits() const noexcept;
  // send()'s admission: counts the frame against the queue bounds; false when closed or
  // over them (then dropped or the session is closed, as options say).
  bool admit(const std::shared_ptr<const std::string>& frame);
  // request_done()'s accounting; true when reads must resume (on the strand).
  bool finish_request();
  void enqueue(std::shared_ptr<const std::string> frame);
  void write_pending();
  void on_written(const error_code& ec);
  bool finish_write(const error_code& ec);  // accounts the frames in writing_; false: stop writing
  void do_close();
  void send_codec_output();

  server_socket sock_;
  const std::shared_ptr<const options> opt_;  // shared with the server
  std::unique_ptr<input_codec> parser_;
  peer_info peer_;
  std::string source_;
  std::weak_ptr<session_hooks> hooks_;
  std::size_t max_queue_bytes_;
  std::size_t max_queue_frames_;
  // Admission counters cover frames posted, queued and being written (any thread).
  std::atomic<std::size_t> queued_bytes_{0};
  std::atomic<std::size_t> queued_frames_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> overflow_logged_{false};
  std::atomic<bool> authenticated_{false};
  std::atomic<std::size_t> pending_{0};
  // Timeout state, written on the strand, read by the sweeper (steady_clock ns).
  const std::int64_t created_ns_;
  std::atomic<std::int64_t> frame_since_ns_{0};  // 0: no partial frame
  std::atomic<std::int64_t> last_rx_ns_{0};      // 0: nothing received yet
  std::size_t budget_charged_ = 0;               // strand: bytes taken from pre_auth_budget
  std::atomic<std::size_t> held_charge_{0};      // budget held by decoded frames until answered
  bool paused_ = false;                          // strand: reads paused (pending requests)
  // Strand-only state.
  std::vector<std::shared_ptr<const std::string>> queue_;
  std::vector<std::shared_ptr<const std::string>> writing_;
  bool write_active_ = false;
  bool close_done_ = false;
  char peek_byte_ = 0;
};

class server_base : public session_hooks, public std::enable_shared_from_this<server_base> {
 public:
  server_base(asio::io_context& io, endpoint ep, options opt, const char* kind);
  ~server_base() override;
  result<void> start();
  void stop();
  std::uint16_t bound_port() const noexcept { return port_.load(); }
  std::size_t connection_count() const;
  std::size_t unauthenticated_count() const;
  std::uint64_t refused_count() const noexcept { return refused_.load(); }

 protected:
  void on_session_closed(const std::shared_ptr<server_session>& s) override;
  void on_session_authenticated(const std::shared_ptr<server_session>& s) override;
  // The codec of a new connection (Salt frames unless overridden).
  virtual std::unique_ptr<input_codec> make_codec() const { return make_salt_codec(); }
  // mu_ held: drop s from the unauthenticated counts if it is in them.
  void uncount_unauth_locked(server_session& s);

  asio::io_context& io_;
  const options opt_;
  const std::shared_ptr<const options> sopt_;  // the same, shared with the sessions
  const char* kind_;  // "req" / "pub", for log lines
  mutable std::mutex mu_;  // guards conns_ (and derived registries)
  std::unordered_map<std::uint64_t, std::weak_ptr<server_session>> conns_;

 private:
  result<void> prepare_unix_path();
  result<void> adopt_listener();  // options::listen_fd (acc_mu_ held)
  void begin_accepting();         // after listen (acc_mu_ held)
  // The accept loop waits for the listener to be readable and calls accept4() itself, then
  // hands each descriptor to a socket on its session context. No pending operation on io_
  // holds an object of a session context, so the contexts may end in any order.
  void accept_next();  // acc_mu_ held
  void on_listener_ready(const error_code& ec);
  void on_accept_error(const error_code& ec);
  void on_accepted(int fd, const sockaddr_storage& addr, socklen_t addr_len);
  // Accepts and closes what waits in the backlog when accept() failed with EMFILE
  // (the spare-descriptor trick), so a full process does not spin on readiness.
  void shed_backlog();
  // Why a new connection from source is refused now (mu_ held), or nullptr.
  std::string refuse_reason_locked(const std::string& source, int fd) const;  // empty: accept
  void arm_sweep();
  void sweep();

  // Unauthenticated connections (guarded by mu_).
  std::size_t unauth_total_ = 0;
  std::unordered_map<std::string, std::size_t> unauth_by_source_;
  std::uint64_t fd_limit_ = 0;  // RLIMIT_NOFILE soft limit seen at start()
  int spare_fd_ = -1;           // acc_mu_: held open to be closed on EMFILE
  asio::steady_timer sweep_timer_;

  endpoint ep_;
  std::mutex acc_mu_;  // guards acceptor_ and retry_timer_
  asio::basic_socket_acceptor<asio::generic::stream_protocol> acceptor_;
  asio::steady_timer retry_timer_;
  bool is_tcp_ = false;
  bool created_unix_ = false;
  unsigned long unix_dev_ = 0, unix_ino_ = 0;
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<std::uint16_t> port_{0};
  std::atomic<std::uint64_t> next_conn_id_{1};
  std::atomic<std::size_t> next_context_{0};  // options::session_contexts, round robin
  std::chrono::steady_clock::time_point last_accept_log_{};
  util::log_limiter refuse_log_[3];  // per reason: max_connections, pre-auth total, per source
  util::log_limiter fd_log_;
  util::log_limiter sweep_log_;
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace sylvite::transport::detail
