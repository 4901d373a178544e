// sylvite::cluster peer bus: the links between the masters of a cluster on
// cluster_pool_port (protocol: peer_protocol.hpp). Each master accepts links from its
// peers and keeps one outbound link to every peer it knows: the addresses in
// cluster_peers, plus any peer that linked to it (its hello carries the address it
// listens on), so a new master is linked both ways as soon as it reaches one peer.
// Outbound messages wait in a bounded per-peer queue while the link is down or being
// (re)established, and are sent in order, in batches, each batch acknowledged; a link
// that fails reconnects with jittered back-off (0.5 s doubling to 10 s; the rules are the
// sans-I/O peer_link machine, peer_link.hpp, driven here by one coroutine). A peer whose
// peers/<id>.pub disappears is dropped (its links closed, its queue discarded), checked
// every 2 s; a peers/<id>.pub that reappears for a peer seen removed is ignored until that
// id completes a join again (a removed master restarting cannot recreate its membership).
// RSA and file reads run on the bus's own thread, never on an io thread. cluster/discover
// and cluster/join (unauthenticated senders) are rate-limited per source address on the
// io thread, before any RSA or file work, and handled on a separate bounded join thread,
// so a discover flood cannot delay the publish/return relay (docs/security.md section 5).
// Thread-safety: every public member may be called from any thread.
#pragma once
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/peer_messages.hpp"
#include "cluster/peer_protocol.hpp"
#include "core/transport/transport.hpp"

namespace sylvite::cluster {

struct bus_settings {
  std::string id;                        // this master's id
  std::string cluster_id;
  std::string bind_host;                 // interface
  std::uint16_t port = 4520;             // cluster_pool_port (0: pick one, tests)
  std::string advertise;                 // "host:port" peers dial; default bind_host:port
  std::vector<std::string> peers;        // cluster_peers ("host" or "host:port")
  std::filesystem::path pki_dir;         // cluster_pki_dir (peers/<id>.pub)
  bool local_copy = false;               // pki_dir is a local copy (is_local_copy, fixed at start)
  crypto::rsa_key priv;                  // this master's own key
  std::size_t max_queue = 100000;        // messages per peer
  std::size_t batch = 256;               // messages per request
  std::chrono::milliseconds request_timeout{10000};
  transport::options topt;
  // Joins accepted on the pool port (cluster/discover, cluster/join; cluster/join.hpp).
  std::optional<std::string> secret;     // cluster_secret
  bool allow_empty_secret = false;       // cluster_allow_empty_secret
  // Called (on the bus thread; keep it short) after this master accepted a join:
  // the new master's id and its bus address "host:port".
  std::function<void(const std::string& id, const std::string& addr)> on_joined;
  // Called on the watcher thread (keep it short: post work elsewhere) when peers/<id>.pub
  // files of known peers disappeared, after those peers were dropped from the bus; one
  // call per watcher pass (2 s), so a burst of deletions is one call. Not called for
  // drop_peer() (salt-run cluster.remove rotates itself).
  std::function<void(const std::vector<std::string>& ids)> on_removed;
  // Where the ids of removed peers are kept across restarts (one per line; "" = memory
  // only): the master's own pki_dir, not the share a removed master may still write.
  std::filesystem::path removed_file;
};

// Joiner side: discover/join through the configured peers, one at a time, before the bus
// starts; installs the cluster identity into pki_dir all-or-nothing.
struct join_settings {
  std::string id;
  std::string cluster_id;
  std::string advertise;                 // "host:port" this master's bus will listen on
  std::vector<std::string> peers;        // cluster_peers
  std::uint16_t default_port = 4520;
  std::filesystem::path pki_dir;         // cluster_pki_dir (local or shared)
  crypto::rsa_key priv;                  // this master's own key
  std::optional<std::string> secret;
  std::string fingerprint;               // cluster_pub_fingerprint
  std::chrono::milliseconds timeout{5000};
  transport::options topt;
  // Filled on success: the bus addresses of the other members ("host:port"), for
  // bus_settings::peers, so the new master links to all of them at once.
  std::vector<std::string>* member_addrs = nullptr;
  // Filled on success: the id of the member it joined through (cluster.peers "join").
  std::string* joined_via = nullptr;
};
// true: joined (files installed); false: no peer was a reachable member; error: refused
// (the reason is logged and in `why`), nothing installed.
result<bool> join_cluster(const join_settings& s, std::string& why);

class peer_bus {
 public:
  // Inbound messages, in order per sending peer, on the bus thread (may block briefly);
  // membership messages (join, leave) are the bus's own and never reach it. Decode them
  // with decode() (peer_messages.hpp); lane_of(type) says which thread runs each type.
  using handler = std::function<void(const std::string& from, const std::string& type, const wire::value& body)>;
  // A peer came up (first successful link) or was removed.
  using peer_event = std::function<void(const std::string& id, bool up)>;

  peer_bus(boost::asio::io_context& io, bus_settings s, handler h, peer_event ev = {});
  ~peer_bus();
  result<void> start();
  // Stop accepting and sending (non-blocking: safe from an io thread / signal handler).
  void stop();
  // stop() and wait for the bus's own threads (after the io_context has stopped).
  void join();
  std::uint16_t bound_port() const;

  // Queue for every known peer (a peer not linked yet gets it once linked).
  void broadcast(const peer_msg& m);
  void broadcast(const std::string& type, const wire::value& body);  // encoded (peer_messages.hpp)
  // Queue for one peer by id; false if no link to that id is known.
  bool send(const std::string& peer_id, const peer_msg& m);
  bool send(const std::string& peer_id, const std::string& type, const wire::value& body);
  // [{id, address, state, queued, sent, received, last_error}] for operators.
  wire::value status() const;
  std::vector<std::string> linked_peers() const;
  // Close a removed peer's links and discard what was queued for it, now (the watcher
  // would within 2 s).
  void drop_peer(const std::string& id);

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sylvite::cluster
