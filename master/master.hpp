// sylvite::master core: the composition root of the master daemon. It makes the
// master's directories and keys (joining a cluster first when asked), then one of each
// service, wired through master/services.hpp, and forwards the daemon's and the tests'
// calls to the service that owns each rule:
//   key_service     keys, AES rotation, key events, publish-port hellos  (key_service.hpp)
//   job_service     publish, returns, owner map, job store               (job_service.hpp)
//   request_router  the request port: envelope, auth, command table      (request_router.hpp)
//   cluster_node    the peers' messages, cluster.remove, load balancer    (cluster_node.hpp)
//   cli_service     the Unix-socket CLI commands, the CLI's job waits     (cli_service.hpp)
// The Asio wiring (daemon.cpp) feeds it request bodies, publish-port hellos, CLI requests
// and timer ticks; it talks back through pub_sink (the publish server), peer_sink (the
// cluster bus) and cli_reply (one CLI connection). Everything here is testable without
// sockets.
// Thread-safety: handle_request/publish/maintenance may run concurrently on worker
// threads; handle_hello on io threads. Shared state is guarded inside each service.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/config/config.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/rate_limit.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/fileserver.hpp"
#include "master/job_cache.hpp"
#include "master/keys.hpp"
#include "master/minion_data.hpp"
#include "master/mine.hpp"
#include "master/pg_events.hpp"
#include "master/pillar.hpp"
#include "master/presence.hpp"
#include "master/reactor.hpp"
#include "master/request_router.hpp"
#include "master/cli_service.hpp"
#include "master/cluster_node.hpp"
#include "master/job_service.hpp"
#include "master/key_service.hpp"
#include "master/request_router.hpp"
#include "master/services.hpp"

namespace sylvite::master {

class master_core {
 public:
  // Creates dirs (pki_dir, cachedir, cachedir/sessions, sock_dir: 0700), loads or
  // generates master.pem/.pub, makes the first AES key.
  // Joins a running cluster (cluster/join.hpp) with this master's own key: true joined,
  // false no configured peer is a reachable member; an error is a refusal (logged).
  using cluster_joiner = std::function<result<bool>(const crypto::rsa_key& own)>;
  static result<std::unique_ptr<master_core>> create(config::master_config cfg);
  // With a joiner: when cluster_secret or cluster_pub_fingerprint is set and cluster_pki_dir
  // holds no cluster.pem yet, join through cluster_peers before serving.
  static result<std::unique_ptr<master_core>> create(config::master_config cfg, const cluster_joiner& join);
  ~master_core();

  void set_pub_sink(pub_sink* sink) { links_.pub = sink; }
  void set_peer_sink(peer_sink* peers) { links_.peers = peers; }
  bool clustered() const noexcept { return cfg_.cluster_id.has_value(); }
  const config::master_config& cfg() const noexcept { return cfg_; }

  // ---- the services (one job each; see the file header)
  key_service& keys() noexcept { return *keys_; }
  job_service& job_svc() noexcept { return *jobs_; }
  request_router& router() noexcept { return *router_; }
  cluster_node& cluster() noexcept { return *cluster_; }
  cli_service& cli() noexcept { return *cli_; }
  reactor& reactions() noexcept { return *reactor_; }  // the reactor (reactor.hpp)
  // The renderer the pillar compiler uses (default: the sylvite-render process pool of
  // render::make_process_pool). Replace it only before serving (tests use a fake).
  void set_renderer(std::unique_ptr<render::renderer> r);

  // ---- request port (blocking work: call from the worker pool): request_router::handle
  // minion_id: set to the requester's id when authenticated (the ZeroMQ port learns which
  // address a minion uses from it).
  // An authenticated request also stamps the minion's last-seen time (presence.hpp).
  wire::value handle_request(const wire::value& body, const std::string& peer, bool* authenticated = nullptr,
                             std::string* minion_id = nullptr);
  // handle_request in two steps, for the io thread that read the request (daemon.cpp):
  // open_request (request_router::open) when inline_requests() and the body is small
  // (request_router::small_request); then run_request inline when
  // request_router::runs_inline says so, else on the worker pool. inline_requests():
  // a single master (a cluster's shared file system can stall any file access).
  bool inline_requests() const noexcept { return !cfg_.cluster_id.has_value(); }
  std::variant<wire::value, request_router::opened_request> open_request(const wire::value& body,
                                                                          const std::string& peer);
  // open_request for the io thread: nullopt when it would read a key file (then
  // open_request on the pool); request_router::open_in_memory.
  std::optional<std::variant<wire::value, request_router::opened_request>> open_request_in_memory(
      const wire::value& body, const std::string& peer) {
    return router_->open_in_memory(body, peer);
  }
  wire::value run_request(request_router::opened_request& r, const std::string& peer, bool* authenticated = nullptr,
                          std::string* minion_id = nullptr);

  // ---- publish port (io thread): key_service::identify_hello. This form may read the
  // accepted key file (tests, tools).
  std::optional<std::string> handle_hello(const wire::value& body, const std::string& peer) {
    return keys_->identify_hello(body, peer, nullptr, nullptr);
  }
  using offload_fn = key_service::offload_fn;
  std::optional<std::string> handle_hello(const wire::value& body, const std::string& peer, const offload_fn& offload,
                                          std::function<void(const std::string&)> identified) {
    return keys_->identify_hello(body, peer, offload, std::move(identified));
  }
  // A publish connection identified (connected) or closed. With presence_events (Salt's
  // option, default False): salt/presence/change {new, lost} and salt/presence/present
  // {present} at once (Salt 3008's TCP publish server), and every loop_interval (default
  // 60 s) from maintenance(): present, and change when the set moved (Salt's
  // Maintenance.handle_presence).
  // Either way the minion's last-seen time is stamped (salt-run sylvite.minions).
  void on_presence(const std::string& id, bool connected);
  // Per-minion last seen here and the peers' reports (salt-run sylvite.minions).
  presence_table& presence() noexcept { return *seen_; }

  // ---- jobs (blocking disk work): job_service
  publish_result publish(const publish_request& req) { return jobs_->publish(req); }
  std::string wrap_publish(wire::value load) { return jobs_->wrap_publish(std::move(load)); }
  std::shared_ptr<const std::string> relay_frame(const std::string& frame) { return jobs_->relay_frame(frame); }
  std::vector<std::string> check_minions(const wire::value& tgt, const std::string& tgt_type,
                                         const std::string& delimiter = ":") {
    return jobs_->check_minions(tgt, tgt_type, delimiter);
  }

  // ---- CLI socket (spawns/uses its own threads for waits; never blocks the caller
  // for long)
  void handle_cli(const wire::value& body, std::shared_ptr<cli_reply> out) { cli_->handle(body, std::move(out)); }

  // ---- key events and AES rotation: key_service
  bool key_event(const std::string& act, const std::vector<std::string>& ids) { return keys_->key_event(act, ids); }
  result<void> rotate_aes(const std::string& why) { return keys_->rotate_aes(why); }
  // Timers: call every few seconds from a worker (rotation, drop file, job cleanup).
  void maintenance(sys_clock::time_point now = sys_clock::now());

  // ---- cluster peer bus (blocking: call from the bus or control thread): cluster_node
  void handle_peer(const std::string& from, const std::string& type, const wire::value& body) {
    cluster_->handle_peer(from, type, body);
  }
  wire::value cluster_status() const { return cluster_->status(); }
  void on_peer_up(const std::string& id) { keys_->on_peer_up(id); }
  bool local_copy() const noexcept { return keys_->local_copy(); }
  void on_peers_removed(const std::vector<std::string>& ids) { keys_->on_peers_removed(ids); }
  void lb_add_joined(const std::string& id, const std::string& bus_addr) { cluster_->lb_add_joined(id, bus_addr); }
  std::string lb_remove(const std::string& id) { return cluster_->lb_remove(id); }
  // This master's own key (cluster mode: peers authenticate it; otherwise = mkeys()).
  const master_keys& own_keys() const noexcept { return keys_->own_keys(); }

  // Components (tests and the daemon).
  event_hub& hub() noexcept { return hub_; }
  job_cache& jobs() noexcept { return *file_jobs_; }  // the file job store (master_job_cache: local_cache)
  job_store& job_store_any() noexcept { return jobs_->store(); }  // whichever master_job_cache is
  const pki::key_store& key_store() const noexcept { return keys_->store(); }
  aes_manager& aes() noexcept { return keys_->aes(); }
  session_store& sessions() noexcept { return keys_->sessions(); }
  std::shared_ptr<const master_keys> mkeys() const { return keys_->mkeys(); }
  accepted_keys& accepted() noexcept { return keys_->accepted(); }
  minion_data_cache& minion_data() noexcept { return *mdata_; }
  mine_store& mine() noexcept { return *mine_; }
  master_counters& counters() noexcept { return counters_; }
  std::vector<std::string> connected_ids() const;

  // Stop CLI wait threads (daemon shutdown).
  void shutdown();

 private:
  explicit master_core(config::master_config cfg);

  // Declaration order is construction order: the shared context first, then the services
  // that use it.
  config::master_config cfg_;
  master_links links_;
  master_counters counters_;
  event_hub hub_;
  std::unique_ptr<minion_data_cache> mdata_;
  std::unique_ptr<key_service> keys_;
  job_cache* file_jobs_ = nullptr;  // owned by jobs_ (its job_store)
  std::unique_ptr<job_service> jobs_;
  std::unique_ptr<fileserver> files_;
  std::unique_ptr<render::renderer> renderer_;  // a forwarder to the current renderer
  std::unique_ptr<pillar_compiler> pillar_;
  std::unique_ptr<mine_store> mine_;
  std::unique_ptr<presence_table> seen_;  // before the services that read it
  sys_clock::time_point last_prune_{};
  std::unique_ptr<request_router> router_;
  std::unique_ptr<cluster_node> cluster_;
  std::unique_ptr<cli_service> cli_;
  // presence_events (events part): the set last reported and when.
  struct presence_state;
  std::unique_ptr<presence_state> presence_;
  void presence_tick(sys_clock::time_point now);
  std::unique_ptr<reactor> reactor_;  // last: stopped (destroyed) before the services it calls
  // pgjobs (issue 20): event_return: pgjsonb (after reactor_: unsubscribed first).
  std::unique_ptr<pg::pg_event_sink> pg_events_;
};

}  // namespace sylvite::master
