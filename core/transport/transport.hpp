// sylvite::transport: Boost.Asio TCP (and Unix-socket) servers and clients that move
// Salt frames ({head, body}, see core/wire/frame.hpp). No Salt commands here: the
// master/minion layers give handlers; this layer owns sockets, framing, deadlines,
// bounded write queues, keepalive and shutdown.
//
// Threading: one io_context per daemon run by N threads. Each connection owns a strand;
// handlers are invoked on that strand and must not block (post RSA/disk work to a
// thread pool and answer later through the responder, from any thread).
// Every write queue is bounded (frames and bytes); a peer that does not drain is
// disconnected and logged once. Malformed input closes the connection, logged once with
// the peer address.
#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/frame.hpp"

namespace sylvite::transport {

namespace asio = boost::asio;

enum class errc {
  ok = 0,
  timeout = 1,        // deadline passed (connect, request)
  disconnected,       // connection closed before the reply
  resolve_failed,     // DNS/host lookup failed
  connect_failed,
  queue_full,         // bounded write queue overflow
  bad_frame,          // peer sent something that is not a frame
  closed,             // object closed by the owner
};
const boost::system::error_category& transport_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), transport_category()}; }

// Where a server listens / a client connects.
struct endpoint {
  std::string host;        // TCP: address or name; empty + unix_path set -> Unix socket
  std::uint16_t port = 0;  // 0 on a server = pick a free port (see bound_port())
  std::string unix_path;   // Unix socket path (server: created 0600, stale file replaced)
};

// A byte allowance shared by many connections (e.g. every unauthenticated connection of
// a master, on all its ports). Thread-safe.
class byte_budget {
 public:
  explicit byte_budget(std::size_t cap) : cap_(cap) {}
  // Take n bytes; false (nothing taken) if that would pass the cap.
  bool take(std::size_t n) noexcept;
  void give(std::size_t n) noexcept;
  std::size_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  std::size_t cap() const noexcept { return cap_; }

 private:
  const std::size_t cap_;
  std::atomic<std::size_t> used_{0};
};

struct options {
  std::size_t max_frame_size = 100u << 20;  // after authentication (max_message_size)
  std::size_t max_queue_bytes = 64u << 20;  // per connection write queue
  std::size_t max_queue_frames = 100000;
  // Server side: a frame that does not fit a connection's write queue is dropped (and
  // counted in the log) instead of disconnecting the peer: ZeroMQ PUB's high-water mark.
  bool drop_when_full = false;
  bool tcp_keepalive = true;
  int keepalive_idle = 300;   // seconds (TCP_KEEPIDLE); <=0 -> OS default
  int keepalive_intvl = -1;   // seconds (TCP_KEEPINTVL); <=0 -> OS default
  int keepalive_cnt = -1;     // probes (TCP_KEEPCNT); <=0 -> OS default
  int user_timeout_ms = 0;    // TCP_USER_TIMEOUT; 0 -> OS default
  std::chrono::milliseconds connect_timeout{5000};

  // ---- Server side: limits before a connection is authenticated (the handler calls
  // responder::mark_authenticated(), or pub_server::identify()). Zero = off; the
  // defaults keep a plain server unlimited, the master sets them from its config.
  bool authenticated_from_start = false;   // e.g. the CLI Unix socket (mode 0600)
  std::size_t pre_auth_max_frame_size = 0; // bytes per frame until authenticated (0: max_frame_size)
  std::size_t pre_auth_max_nodes = 0;      // msgpack objects per frame until authenticated
  std::size_t pre_auth_max_depth = 0;      // nesting until authenticated
  // Frames above pre_auth_max_frame_size (up to max_frame_size) on an unauthenticated
  // connection take the excess from this shared budget while they are received (a
  // minion's large return as the first frame of a new connection); none left -> closed.
  // Null: such frames are refused.
  std::shared_ptr<byte_budget> pre_auth_budget;
  std::size_t pre_auth_max_pending = 0;    // req: requests unanswered per unauthenticated connection
                                           // before its reads pause (0: no pause)
  // A frame that has started must complete within frame_timeout on an unauthenticated
  // connection; on an authenticated one, bytes must keep arriving within it. 0 = off.
  std::chrono::milliseconds frame_timeout{0};
  // An unauthenticated connection that has sent nothing at all is closed after this. 0 = off.
  std::chrono::milliseconds pre_auth_idle_timeout{0};
  std::size_t max_connections = 0;                     // per listener, all connections; 0 = no cap
  std::size_t pre_auth_max_connections = 0;            // unauthenticated, per listener
  std::size_t pre_auth_max_connections_per_source = 0; // unauthenticated, per source address
  // Refuse new connections while fewer than this many descriptors are left under
  // RLIMIT_NOFILE (the daemon's own files keep working). 0 = off.
  std::size_t reserved_fds = 0;
  // Server side, TCP: accept on this already listening socket (inherited from the master
  // by a publish process) instead of binding the endpoint. The server owns it then. -1 = off.
  int listen_fd = -1;
  // Server side: accepted connections are spread over these io_contexts, one after the
  // other; each is meant to be run by one thread, so a connection's reads, writes and
  // inline handlers stay on that thread, with no hand-over between threads. They must
  // outlive the server. Empty or null: the server's own io_context.
  std::shared_ptr<const std::vector<asio::io_context*>> session_contexts;
};

// Bind and listen on a TCP endpoint as a server would (SO_REUSEADDR, the OS backlog), and
// hand over the listening socket's descriptor (close-on-exec set) for options::listen_fd.
result<int> open_tcp_listener(const endpoint& ep);
// n listening sockets on one TCP endpoint (SO_REUSEPORT): the kernel spreads new
// connections evenly over them by their addresses. Fails (address_in_use) when anything
// else holds the port, also another group of the same user. Port 0: one free port for all.
result<std::vector<int>> open_tcp_listener_group(const endpoint& ep, int n);

// Raise the RLIMIT_NOFILE soft limit to the hard limit. Returns the soft limit now in
// force (unchanged if raising failed; logged).
std::uint64_t raise_open_files_limit() noexcept;

struct peer_info {
  std::string address;  // "1.2.3.4:5678" or "unix"
  std::uint64_t conn_id = 0;
  // Unix sockets: the connecting process's credentials (SO_PEERCRED at accept), which
  // the kernel vouches for; nullopt on TCP or if the query failed.
  std::optional<std::uint32_t> uid, gid;
};

// Answers one request. reply() may be called once from any thread; push() sends a
// non-final frame (head gets "more": true) for streaming answers (CLI event waits).
// If the responder is destroyed without reply(), nothing is sent (Salt clients retry).
// reply()/push() after the connection closed are dropped silently; a reply that does not
// fit the write queue disconnects the peer (logged once).
class responder {
 public:
  virtual ~responder() = default;
  virtual void reply(wire::value body) = 0;
  virtual bool push(wire::value body) = 0;   // false if the connection is gone/full
  virtual bool alive() const = 0;            // connection still open
  virtual const peer_info& peer() const = 0;
  // The request proved the peer is who it claims (an accepted minion's AES request or
  // _auth, a peer handshake): the connection's pre-authentication limits are lifted.
  // Thread-safe; idempotent.
  virtual void mark_authenticated() {}
};
using request_handler = std::function<void(wire::value body, std::shared_ptr<responder>)>;

// Request/reply server (Salt ret_port 4506, and the local CLI socket).
class req_server {
 public:
  req_server(asio::io_context& io, endpoint ep, options opt, request_handler h);
  ~req_server();
  // bind + listen + accept loop. Unix socket: a stale socket file is replaced; fails
  // with address_in_use if a server answers there, EEXIST if the path is not a socket.
  result<void> start();
  // Stop accepting, close every connection (asynchronously: frames already read may
  // still reach the handler), remove the Unix socket file it created. Thread-safe.
  void stop();
  std::uint16_t bound_port() const;
  std::size_t connection_count() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

// Publish server (Salt publish_port 4505). A connection becomes "identified" when the
// hello handler returns a minion id for a frame it sent; glob/list publishes go only to
// identified connections of the named ids, broadcasts to every connection.
class pub_server {
 public:
  // Called on the connection strand for every frame a minion sends; return the minion
  // id to identify the connection, nullopt to ignore the frame (or to decide later, off
  // the strand, and call identify(peer.conn_id, id)).
  using hello_handler = std::function<std::optional<std::string>(const wire::value& body, const peer_info&)>;
  // Presence: id connected (first identified socket) / disconnected (last one closed).
  using presence_handler = std::function<void(const std::string& id, bool connected)>;

  pub_server(asio::io_context& io, endpoint ep, options opt, hello_handler h, presence_handler p = {});
  ~pub_server();
  result<void> start();
  // Closes the listener and every connection. It waits for a hello or presence call in
  // progress, and once it returns neither handler runs again (the connections it closes
  // report no presence), so the handlers may capture what the owner destroys next. Not to
  // be called from inside either handler.
  void stop();
  std::uint16_t bound_port() const;

  // frame = complete encoded frame bytes (wire::pack_frame), shared by all sends.
  void publish_all(std::shared_ptr<const std::string> frame);
  void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids);
  // Close every publish connection identified as id (key deleted or rejected); the
  // presence handler reports the disconnect. Returns how many were closed.
  std::size_t disconnect(const std::string& id);
  // Identify connection conn_id (peer_info::conn_id) as id, from any thread: a hello
  // checked off the strand. False if the connection is gone meanwhile.
  bool identify(std::uint64_t conn_id, const std::string& id);
  std::vector<std::string> connected_ids() const;  // sorted, unique
  bool is_connected(const std::string& id) const;
  std::size_t connections_of(const std::string& id) const;  // identified connections of id
  std::size_t connection_count() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

// Request client: one connection, many requests in flight matched by head.mid (uuid4).
// Reconnects lazily on the next request after a failure. Errors: errc::timeout (request
// deadline or connect_timeout), resolve_failed, connect_failed, disconnected (connection
// lost while pending), queue_full (request does not fit the write queue), bad_frame (body
// cannot be encoded), closed (after close(); also for requests made later).
// Completions are posted to the awaiting coroutine's executor; the client itself runs on
// its own strand, so any thread may call it.
class req_client : public std::enable_shared_from_this<req_client> {
 public:
  static std::shared_ptr<req_client> create(asio::any_io_executor ex, endpoint ep, options opt = {});
  virtual ~req_client() = default;
  // Send body, wait for the reply body. errc::timeout / disconnected / connect_failed.
  virtual asio::awaitable<result<wire::value>> request(wire::value body, std::chrono::milliseconds timeout) = 0;
  // Streaming: every non-final frame goes to on_item; returns the final body.
  virtual asio::awaitable<result<wire::value>> request_stream(
      wire::value body, std::function<void(const wire::value&)> on_item, std::chrono::milliseconds timeout) = 0;
  virtual void close() = 0;
  virtual const endpoint& remote() const = 0;
};

// Publish client (minion side): connects, sends the hello frame given by the caller,
// then delivers each received frame body. on_closed fires once per lost connection
// (error says why: eof, connection_reset, timed_out from keepalive/TCP_USER_TIMEOUT,
// errc::bad_frame, errc::queue_full); the owner decides when to reconnect (call connect()
// again). close() and a new connect() replace the connection silently (no on_closed).
// Handlers run on the client's strand.
class pub_client : public std::enable_shared_from_this<pub_client> {
 public:
  using message_handler = std::function<void(wire::value body)>;
  using closed_handler = std::function<void(error_code why)>;
  static std::shared_ptr<pub_client> create(asio::any_io_executor ex, options opt = {});
  virtual ~pub_client() = default;
  virtual asio::awaitable<result<void>> connect(endpoint ep, wire::value hello_body,
                                                message_handler on_msg, closed_handler on_closed) = 0;
  // Send one more frame on the publish socket (e.g. a heartbeat); false if not connected.
  virtual bool send(wire::value body) = 0;
  virtual bool connected() const = 0;
  virtual void close() = 0;
};

// Blocking helper for CLIs: run one request on a private io_context.
result<wire::value> request_once(const endpoint& ep, const wire::value& body,
                                 std::chrono::milliseconds timeout, const options& opt = {});
result<wire::value> request_stream_once(const endpoint& ep, const wire::value& body,
                                        const std::function<void(const wire::value&)>& on_item,
                                        std::chrono::milliseconds timeout, const options& opt = {});

}  // namespace sylvite::transport

template <>
struct boost::system::is_error_code_enum<sylvite::transport::errc> : std::true_type {};
