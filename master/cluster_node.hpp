// sylvite::master cluster node: this master as a member of a master cluster. It takes
// the peers' messages off the bus and hands each to the service that owns its rule
// (publish/return -> job service; aes, key, aes-rotate, key-sync, keys, cluster-key ->
// key service), reports the peer links (salt-run cluster.peers), removes a peer
// (salt-run cluster.remove) and keeps the load balancer in step (cluster_lb_admin).
// Which thread runs each message type is declared once, in cluster/peer_messages.hpp
// (lane_of); the daemon follows it: relay (publish/return) on the bus thread, the others
// (they touch the shared file system) on the control thread.
// Events: every event this master fires first (event_hub::subscribe_local) goes to every
// peer ("event" message; the peer bus queues it per peer while a link is down or
// reconnecting, bounded, shed ones counted in cluster.peers' "dropped"; a batch sent
// again after a reconnect is recognised by the events' ids, the last 200,000 kept); an
// event from a peer is fired here with origin peer (never forwarded again: each master's bus carries
// each event of the cluster once). Not forwarded: "key" (each master fires its own AES
// rotation notice) and salt/presence/* (a master's own connections).
// Presence (salt-run sylvite.minions, master/presence.hpp): presence_sync() (the
// maintenance tick) sends this master's minion presence to the peers ("presence"
// message: the changes every tick, the whole table every 30 s and when a link comes up);
// a peer's message goes into the presence table.
// status() (salt-run cluster.peers) also says: aes_epoch (the AES key this master serves:
// key_id, the same on every master in step, a local generation count, since when),
// join (how this master became a member: founder (it made the cluster key pair), joined
// through a peer, member (it found the key, or was one already when it started),
// standalone), health (uptime, minions connected here,
// request counters, per peer link: state, last heard, AES key in step).
// Thread-safety: every method is safe from any thread; handle_peer blocks (files).
#pragma once
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>
#include <cstdint>
#include <string>
#include <utility>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/job_service.hpp"
#include "master/key_service.hpp"
#include "master/presence.hpp"
#include "master/services.hpp"

namespace sylvite::master {

class cluster_node {
 public:
  cluster_node(const config::master_config& cfg, master_links& links, master_counters& counters, key_service& keys,
               job_service& jobs, event_hub& hub, presence_table& presence);
  ~cluster_node();
  cluster_node(const cluster_node&) = delete;
  cluster_node& operator=(const cluster_node&) = delete;
  // Whether a locally fired tag goes to the peers.
  static bool forwarded_tag(const std::string& tag);

  // One message from a peer: decoded (cluster/peer_messages.hpp: an unknown or malformed
  // message is refused, logged at a limited rate) and routed. Never throws.
  void handle_peer(const std::string& from, const std::string& type, const wire::value& body);
  // {id, cluster_id, peers: [link state...], events, aes_epoch, join, health}
  // (salt-run cluster.peers; docs/operations.md).
  wire::value status() const;
  // How this master came to be a member (master_core::create; the daemon adds the peer
  // it joined through). state: founder | joined | member | standalone.
  void set_join(std::string state, std::int64_t since_ms);
  void set_joined_via(std::string peer_id);
  // Maintenance tick: send this master's presence changes (or the whole table) to the
  // peers. No-op outside a cluster.
  void presence_sync(std::int64_t now_ms);
  // The id of the AES key this master serves (a hash: not the key).
  std::string aes_key_id() const;
  // salt-run cluster.remove <id>: out of the load balancer, peers told, peers/<id>.pub
  // deleted, its links dropped, the AES key rotated. The runner's return and retcode.
  std::pair<wire::value, int> remove_peer(const std::string& id);
  // Load balancer (cluster_lb_admin): add a master that joined through this one to the
  // HAProxy backends through the runtime API, or log the exact lines to add. Blocking (a
  // socket round trip): run on a worker.
  void lb_add_joined(const std::string& id, const std::string& bus_addr);
  // Take a master out of the load balancer: "" when done, else why not.
  std::string lb_remove(const std::string& id);

 private:
  void route(const std::string& from, const cluster::msg::publish& m);
  void route(const std::string& from, const cluster::msg::ret& m);
  void route(const std::string& from, const cluster::msg::aes& m);
  void route(const std::string& from, const cluster::msg::aes_rotate& m);
  void route(const std::string& from, const cluster::msg::key_event& m);
  void route(const std::string& from, const cluster::msg::cluster_key& m);
  void route(const std::string& from, const cluster::msg::key_sync& m);
  void route(const std::string& from, const cluster::msg::keys& m);
  void route(const std::string& from, const cluster::msg::join& m);
  void route(const std::string& from, const cluster::msg::leave& m);
  void route(const std::string& from, const cluster::msg::event& m);
  void route(const std::string& from, const cluster::msg::presence& m);
  void forward(const std::string& tag, const wire::value& data);

  const config::master_config& cfg_;
  master_links& links_;
  master_counters& counters_;
  key_service& keys_;
  job_service& jobs_;
  event_hub& hub_;
  std::uint64_t sub_ = 0;
  std::atomic<std::uint64_t> events_forwarded_{0};
  std::atomic<std::uint64_t> events_received_{0};
  std::atomic<std::uint64_t> events_refused_{0};
  std::atomic<std::uint64_t> events_duplicate_{0};
  std::string boot_;                      // this run's prefix of the event ids it sends
  std::atomic<std::uint64_t> next_eid_{1};
  std::mutex seen_mu_;                    // event ids received lately (a resent batch)
  std::unordered_set<std::string> seen_;
  std::deque<std::string> seen_order_;
  // presence and health
  presence_table& presence_;
  const std::int64_t started_ms_;
  mutable std::mutex info_mu_;
  std::string join_state_ = "standalone";  // under info_mu_
  std::string joined_via_;
  std::int64_t join_since_ms_ = 0;
  std::map<std::string, std::int64_t> heard_ms_;       // peer -> last message from it
  std::map<std::string, std::string> peer_aes_;        // peer -> the AES key id it said it serves
  std::set<std::string> linked_;                       // peers whose link was up at the last sync
  std::int64_t last_full_ms_ = 0;
};

}  // namespace sylvite::master
