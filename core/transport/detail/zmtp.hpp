// sylvite::transport::zmtp servers: the master's ZeroMQ ports spoken natively, a ROUTER
// on the request port and an XPUB on the publish port, on the same Asio sessions as
// Salt's TCP transport (its limits, pre-authentication rules, write queues and sweeper).
// The protocol itself (ZMTP 3.1, NULL mechanism) is in detail/zmtp_codec.hpp.
// Thread-safety: every public method is thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/transport/detail/server.hpp"
#include "core/transport/detail/zmtp_codec.hpp"

namespace sylvite::transport::zmtp {

// ZMTP heartbeats sent by a server: a PING to every connection each ivl_ms; one left
// unanswered (nothing received since) for timeout_ms closes the connection. 0: off.
struct heartbeat {
  int ivl_ms = 0;
  int timeout_ms = 0;
};

// The request port's ROUTER. Each request reaches the handler with a responder whose
// reply() goes back on the same connection with the request's envelope; peer().address
// is the client's IP without the port (as libzmq's Peer-Address).
class router_server {
 public:
  router_server(asio::io_context& io, endpoint ep, options opt, heartbeat hb, request_handler h);
  ~router_server();
  result<void> start();
  void stop();
  std::uint16_t bound_port() const;
  std::size_t connection_count() const;
  std::uint64_t refused() const;  // connections refused at accept or closed for bad input

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

// The publish port's XPUB. send() queues one message on every connection with a
// subscription that is a prefix of its first frame (ZeroMQ's filtering, done here); a
// connection whose queue holds options::max_queue_frames messages drops the message
// (high-water mark). Subscriptions longer than 255 bytes are ignored.
class xpub_server {
 public:
  xpub_server(asio::io_context& io, endpoint ep, options opt, heartbeat hb);
  ~xpub_server();
  result<void> start();
  void stop();
  std::uint16_t bound_port() const;
  void send(const std::vector<std::string>& frames);
  std::size_t connection_count() const;
  std::vector<std::string> peer_addresses() const;  // IPs with a connection past the handshake
  std::vector<std::string> topics() const;          // subscribed by at least one connection

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace sylvite::transport::zmtp
