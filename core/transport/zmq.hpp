// sylvite::transport over ZeroMQ: Salt's default transport (`transport: zeromq`), byte
// compatible with salt/transport/zeromq.py (3007, 3008). The master's two ports speak
// ZMTP natively on the TCP transport's Asio sessions by default (zmq_engine: native,
// detail/zmtp.hpp), or use libzmq sockets (zmq_engine: libzmq); clients use libzmq unless
// zmq_options::client_engine is native (zmtp_client.cpp: a minion's zmq_engine, the
// swarm). This layer owns the sockets, Salt's framing on top of ZMTP, limits and the Asio
// integration.
//
// Salt's framing (docs/wire-format.md, "ZeroMQ"):
//   request port (ret_port): the client is a REQ socket, the master a ROUTER (Salt puts a
//     DEALER and REP workers behind it; nothing of that is visible on the wire). One ZMTP
//     message per request and per reply, one frame: salt.payload.dumps(load), the same
//     map as the `body` of a TCP frame but packed as a Salt payload (wire::pack_payload,
//     not the frame packer: tests/unit/golden/test_golden_zmq.cpp). No head, no mid:
//     REQ/REP pairs the reply with its request.
//   publish port: the master is a PUB socket, minions SUB. zmq_filtering off (default):
//     one frame, salt.payload.dumps({enc, load, sig...}), every minion subscribed to "".
//     zmq_filtering on: two frames [topic, payload]; topic = sha1 hex of the minion id
//     for glob/pcre/list targets (one message per target), "broadcast" otherwise; a minion
//     subscribes to "broadcast" and to its own topic.
//
// Threading (libzmq engine and clients): sockets are driven on an Asio strand through ZMQ_FD (readiness of libzmq's
// mailbox; edge-triggered, so every operation re-checks ZMQ_EVENTS). libzmq's own I/O runs
// on the process-wide context's thread(s). Public methods may be called from any thread.
#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/transport/transport.hpp"

namespace sylvite::transport {

enum class kind { zeromq, tcp };
// "zeromq" / "tcp" (Salt's option values); nullopt for anything else.
std::optional<kind> parse_kind(std::string_view s);
const char* kind_name(kind k);

// What speaks ZMTP: sylvite's own codec on the Asio sessions of the TCP transport
// (native: detail/zmtp.hpp for the master's ports, zmtp_client.cpp for clients), or
// libzmq sockets.
enum class zmq_engine { native, libzmq };
std::optional<zmq_engine> parse_engine(std::string_view s);  // "native" / "libzmq"

namespace zmtp {
class router_server;
class xpub_server;
}  // namespace zmtp

// The ZeroMQ options of Salt's master and minion configs.
struct zmq_options {
  zmq_engine engine = zmq_engine::native;  // zmq_engine (sylvite): master's ports only
  zmq_engine client_engine = zmq_engine::libzmq;  // zmq_engine in a minion's config: its clients
  bool filtering = false;          // zmq_filtering
  bool monitor = false;            // zmq_monitor: log every socket event (debugging)
  int pub_hwm = 1000;              // pub_hwm: messages queued per subscriber (master PUB)
  int backlog = 1000;              // zmq_backlog: listen() backlog
  int rcv_hwm = 0;                 // request port: messages queued per client (0 = libzmq's 1000)
  int heartbeat_ivl_ms = 10000;    // zmq_heartbeat_ivl: ZMTP PING interval (0 = off)
  int heartbeat_timeout_ms = 30000;// zmq_heartbeat_timeout
  int recon_default_ms = 1000;     // recon_default (minion)
  int recon_max_ms = 10000;        // recon_max
  bool recon_randomize = true;     // recon_randomize
  bool ipv6 = false;               // ipv6: dual-stack sockets
  bool connect_events = true;      // clients: watch connect/disconnect (a monitor socket: 2 more
                                   // descriptors per socket). Off: connect() returns at once, no on_closed
};

// ---- Salt's framing, as pure functions (unit tested against frames from real Salt) ----
namespace zmq_framing {

// zmq_filtering topic of a minion id: sha1 hex (40 lowercase chars).
std::string topic_of(std::string_view minion_id);
inline constexpr std::string_view broadcast_topic = "broadcast";

// The ZMTP messages the master's PUB socket sends for one publish payload. targets: the
// minion ids of a glob/pcre/list publish, nullptr for a broadcast. Without filtering the
// result is one single-frame message whatever the targets.
std::vector<std::vector<std::string>> publish_messages(const std::string& payload,
                                                       const std::vector<std::string>* targets, bool filtering);

// A message received on a minion's SUB socket: the payload frame if it is for this minion
// (hexid = topic_of(own id)), nullopt if it carries another minion's topic; an error for
// 0 or more than 2 frames.
result<std::optional<std::string>> accept_publish(std::vector<std::string>&& frames, std::string_view hexid);

// A request as the master's ROUTER socket receives it: [routing id, (more envelope)...,
// "", payload] (REQ adds the empty delimiter). The reply goes back as envelope + payload.
struct routed_message {
  std::vector<std::string> envelope;  // every frame up to and including the empty one
  std::string payload;
};
result<routed_message> split_routed(std::vector<std::string>&& frames);

}  // namespace zmq_framing

// Publish server (master, publish_port): a PUB socket (XPUB, to see subscriptions).
// publish payloads are salt.payload bytes (the body of a TCP publish frame).
class zmq_pub_server {
 public:
  zmq_pub_server(asio::io_context& io, endpoint ep, options opt, zmq_options zopt);
  ~zmq_pub_server();
  result<void> start();
  void stop();
  std::uint16_t bound_port() const;
  void publish_all(std::shared_ptr<const std::string> payload);
  void publish_to(std::shared_ptr<const std::string> payload, const std::vector<std::string>& ids);
  // Connected subscribers (accepted minus disconnected TCP connections).
  std::size_t connection_count() const;
  // Addresses (IP only) with at least one connected subscriber.
  std::vector<std::string> peer_addresses() const;
  // Topics subscribed by at least one connected subscriber (sha1 hex ids with
  // zmq_filtering; "" or "broadcast" otherwise).
  std::vector<std::string> topics() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
  std::shared_ptr<zmtp::xpub_server> native_;
  bool filtering_ = false;
};

// Request server (master, ret_port): a ROUTER socket. Each request reaches the handler
// with a responder whose reply() may be called once, from any thread; push() is not
// supported (false). peer().address is the client's IP (libzmq's Peer-Address: no port).
// Native engine: the TCP transport's connection rules apply as they are (pre-auth
// limits, budget, pending cap, timeouts, admission caps); a message over the limits or not
// shaped as a REQ request closes its connection, counted in refused(). libzmq engine: the
// pre-auth limits apply per message (libzmq hides connections); such messages are
// refused unread-by-the-core and logged once per interval; max_frame_size is
// ZMQ_MAXMSGSIZE (libzmq drops the peer).
class zmq_req_server {
 public:
  zmq_req_server(asio::io_context& io, endpoint ep, options opt, zmq_options zopt, request_handler h);
  ~zmq_req_server();
  result<void> start();
  void stop();
  std::uint16_t bound_port() const;
  std::size_t connection_count() const;
  // Requests refused before the handler (too large/deep before auth, not a request).
  std::uint64_t refused() const;

  struct impl;  // internal (zmq_server.cpp)

 private:
  std::shared_ptr<impl> impl_;
  std::shared_ptr<zmtp::router_server> native_;
};

// Clients (minion side): same interfaces as the TCP ones (transport.hpp), so the minion
// picks one at start. req_client: a small pool of REQ sockets, one request in flight on
// each (Salt's minion opens one REQ socket per channel); a socket whose request timed out
// is discarded. With connect_events, a request fails with errc::connect_failed as soon
// as libzmq reports the connection refused instead of waiting for its timeout.
std::shared_ptr<req_client> make_zmq_req_client(asio::any_io_executor ex, endpoint ep, options opt,
                                                zmq_options zopt);
// pub_client: a SUB socket. connect() waits for the TCP connection (connect_timeout);
// the hello body is not sent (a SUB socket cannot send; Salt's zeromq minion sends none);
// on_closed fires when libzmq reports the connection lost (including a ZMTP heartbeat
// timeout), after which the socket is closed: the owner reconnects as with TCP.
// send() always returns false. minion_id sets ZMQ_IDENTITY and the filtering topic.
std::shared_ptr<pub_client> make_zmq_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                std::string minion_id);
// The same clients without libzmq (zmtp_client.cpp): ZMTP 3.1 on the TCP transport's
// client connections, the bytes of libzmq's REQ and SUB sockets. Differences: a lost
// connection fails the request in flight at once (errc::disconnected); zmq_monitor logs
// nothing (there is no socket monitor).
std::shared_ptr<req_client> make_zmtp_req_client(asio::any_io_executor ex, endpoint ep, options opt,
                                                 zmq_options zopt);
std::shared_ptr<pub_client> make_zmtp_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                 std::string minion_id);

// Factories over both transports (minion, swarm, salt-call); zeromq clients use
// zopt.client_engine.
std::shared_ptr<req_client> make_req_client(kind k, asio::any_io_executor ex, endpoint ep, options opt,
                                            const zmq_options& zopt);
std::shared_ptr<pub_client> make_pub_client(kind k, asio::any_io_executor ex, options opt,
                                            const zmq_options& zopt, const std::string& minion_id);

// libzmq's version, "4.3.4".
std::string zmq_version();

}  // namespace sylvite::transport
