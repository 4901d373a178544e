// sylvite::master service seams: what the master's services see of each other and of
// the outside. master_core (master.hpp) is the composition root that makes one of each
// service and wires them through these:
//   pub_sink      the publish port (transport::pub_server over TCP, or zmq_pub_server)
//   cli_reply     one CLI connection (the Unix-socket IPC)
//   peer_sink     the cluster peer bus
//   master_links  the sinks in force (set by the daemon once its servers run; null in tests
//                 that run no server)
//   master_counters  operator counters (health endpoint, benchmarks)
// Thread-safety: sinks are called from any thread; their implementations lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/peer_messages.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

// The publish server as the core sees it (transport::pub_server, or zmq_pub_server for
// ZeroMQ). Frames are complete TCP frames ({head, body}); the ZeroMQ sink sends the body.
class pub_sink {
 public:
  virtual ~pub_sink() = default;
  virtual void publish_all(std::shared_ptr<const std::string> frame) = 0;
  virtual void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) = 0;
  virtual std::vector<std::string> connected_ids() const = 0;
  virtual bool is_connected(const std::string& id) const = 0;
  virtual std::size_t connection_count() const = 0;  // identified or not
  // True when each connection is known by minion id (TCP: the hello). ZeroMQ's PUB socket
  // does not know its subscribers: connected_ids() is then an estimate (see daemon.cpp)
  // and publish_to() is a broadcast unless zmq_filtering is on.
  virtual bool identifies_connections() const { return true; }
  // Close every publish connection identified as id (key deleted/rejected).
  virtual void disconnect(const std::string& id) = 0;
};

// One CLI connection (implemented over transport::responder).
class cli_reply {
 public:
  virtual ~cli_reply() = default;
  virtual void reply(wire::value body) = 0;       // final frame, once
  virtual bool push(wire::value body) = 0;        // non-final frame; false if gone
  virtual bool alive() const = 0;
  // The caller's uid from the Unix socket's peer credentials (SO_PEERCRED); nullopt when
  // not known (an in-process caller). publisher_acl decides on it, never on the "user"
  // the client writes in its request.
  virtual std::optional<std::uint32_t> peer_uid() const { return std::nullopt; }
};

// The cluster peer bus as the core sees it (implemented over cluster::peer_bus).
class peer_sink {
 public:
  virtual ~peer_sink() = default;
  virtual void broadcast(const std::string& type, const wire::value& body) = 0;
  // false when no link to that peer is known (the caller broadcasts instead).
  virtual bool send(const std::string& peer_id, const std::string& type, const wire::value& body) = 0;
  virtual wire::value status() const = 0;
  virtual void drop_peer(const std::string& id) = 0;  // removed: send it nothing more
  // Typed messages (cluster/peer_messages.hpp), encoded for the two calls above.
  void broadcast(const cluster::peer_msg& m) {
    auto e = cluster::encode(m);
    broadcast(e.type, e.body);
  }
  bool send(const std::string& peer_id, const cluster::peer_msg& m) {
    auto e = cluster::encode(m);
    return send(peer_id, e.type, e.body);
  }
};

// The sinks in force. Set before serving and cleared after the servers stop (the daemon);
// services read them on every use.
struct master_links {
  std::atomic<pub_sink*> pub{nullptr};
  std::atomic<peer_sink*> peers{nullptr};
};

struct master_counters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> refused{0};        // any "bad load"-style refusal
  std::atomic<std::uint64_t> auth_requests{0};
  std::atomic<std::uint64_t> auth_accepted{0};
  std::atomic<std::uint64_t> rsa_private_ops{0};  // counted where the core causes them
  std::atomic<std::uint64_t> returns{0};
  std::atomic<std::uint64_t> publishes{0};
  std::atomic<std::uint64_t> hellos{0};
  std::atomic<std::uint64_t> hellos_refused{0};
  std::atomic<std::uint64_t> dropped{0};        // queue full
  std::atomic<std::uint64_t> clear_pings{0};    // ClearFuncs.ping (heartbeats, failback probes)
};

}  // namespace sylvite::master
