// sylvite::master core: the master daemon's state and protocol logic without any I/O
// framework. The Asio wiring (daemon.cpp) feeds it request bodies, publish-port hellos,
// CLI requests and timer ticks; it talks back through pub_sink (the publish server) and
// cli_reply (one CLI connection). Everything here is testable without sockets.
//   request.cpp   envelope checks, decryption, AES command dispatch, reply modes
//   publisher.cpp jobs: jid, targets, payload wrapping/signing, topic filtering
//   cli_service.cpp  the Unix-socket CLI commands (publish+wait, runner, key_event...)
//   master.cpp    creation, hello, presence, key events, maintenance
// Thread-safety: handle_request/publish/maintenance may run concurrently on worker
// threads; handle_hello on io threads. Shared state is guarded inside each component.
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
#include <vector>

#include "cluster/peer_messages.hpp"
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
#include "master/pillar.hpp"

namespace sylvite::master {

// The publish server as the core sees it (implemented over transport::pub_server).
class pub_sink {
 public:
  virtual ~pub_sink() = default;
  virtual void publish_all(std::shared_ptr<const std::string> frame) = 0;
  virtual void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) = 0;
  virtual std::vector<std::string> connected_ids() const = 0;
  virtual bool is_connected(const std::string& id) const = 0;
  virtual std::size_t connection_count() const = 0;  // identified or not
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

class master_signer;  // master/master_sign.hpp
class source_limiter;  // master/auth.hpp
class pending_counter;  // master/auth.hpp

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

struct publish_request {
  wire::value tgt = "*";
  std::string tgt_type = "glob";
  std::string fun;
  wire::value arg = wire::value::array();
  wire::value kwarg = wire::value::object();  // CLI key=val -> trailing {"__kwarg__": true, ...}
  std::string ret;
  std::string user = "root";
  std::string delimiter = ":";
  std::string jid;                    // empty -> new_jid()
  wire::value kwargs = wire::value::object();  // publish options (metadata, ret_config, ...)
};

struct publish_result {
  std::string jid;
  std::vector<std::string> minions;  // expected
  std::vector<std::string> missing;  // listed (tgt_type list) but not accepted
  std::string error;                 // non-empty: nothing published
};

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

  void set_pub_sink(pub_sink* sink) { sink_ = sink; }
  void set_peer_sink(peer_sink* peers) { peers_ = peers; }
  bool clustered() const noexcept { return cfg_.cluster_id.has_value(); }
  // This master's own key (cluster mode: peers authenticate it; otherwise = mkeys()).
  const master_keys& own_keys() const noexcept { return clustered() ? own_ : *mkeys_; }  // mkeys_ swaps only in a cluster
  // ---- cluster peer bus (blocking: call from the bus thread). Never throws.
  // Decodes (cluster/peer_messages.hpp: an unknown or malformed message is refused and
  // logged) and runs the handler of that type; cluster::lane_of(type) says on which thread.
  void handle_peer(const std::string& from, const std::string& type, const wire::value& body);
  // Peer link state for operators (salt-run cluster.peers).
  wire::value cluster_status() const;
  // A peer link came up: a local-copy master asks it for the minion keys.
  void on_peer_up(const std::string& id);
  bool local_copy() const noexcept { return local_copy_; }
  // peers/<id>.pub of these peers was deleted (the bus dropped them already): rotate the
  // cluster AES key unless .aes changed after the deletion (another master rotated it).
  // Blocking (shared file system): run on the control thread.
  void on_peers_removed(const std::vector<std::string>& ids);
  // Load balancer (cluster_lb_admin): add a master that joined through this one to the
  // HAProxy backends through the runtime API, or log the exact lines to add; take one
  // out (cluster.remove). Blocking (a socket round trip): run on a worker.
  void lb_add_joined(const std::string& id, const std::string& bus_addr);
  // "" when done or not configured; else why not.
  std::string lb_remove(const std::string& id);
  const config::master_config& cfg() const noexcept { return cfg_; }

  // ---- request port (blocking work: call from the worker pool)
  // Frame body in, reply body out. Never throws.
  // *authenticated (if given) is set when the request proved an accepted minion: an AES
  // request that decrypted (v3: and its token verified) or an accepted _auth; the
  // transport then lifts the connection's pre-authentication limits.
  wire::value handle_request(const wire::value& body, const std::string& peer, bool* authenticated = nullptr);

  // ---- publish port (io thread)
  // A minion's publish hello: its id when the token verifies, nullopt otherwise. This
  // form may read the accepted key file (tests, tools).
  std::optional<std::string> handle_hello(const wire::value& body, const std::string& peer);
  // The io-thread form: decides at once when the minion's accepted key is in memory;
  // otherwise (a file read, which can stall on a shared file system) it hands the check
  // to offload (a worker thread) and returns nullopt; identified(id) runs there once the
  // token verifies. offload returns false when it cannot take the task (refused, logged).
  using offload_fn = std::function<bool(std::function<void()>)>;
  std::optional<std::string> handle_hello(const wire::value& body, const std::string& peer, const offload_fn& offload,
                                          std::function<void(const std::string&)> identified);
  void on_presence(const std::string& id, bool connected);

  // ---- jobs (blocking disk work)
  publish_result publish(const publish_request& req);
  // Build the frame body bytes of a publish (salt_payload-packed wrapped payload) for load
  // with the current AES key; adds "serial" (this master's clock in microseconds, strictly
  // increasing: core/util/pub_serial.hpp), also in cluster mode. The caller holds
  // publish_mu_ until the frame is handed to the publish server (serial order == send
  // order). Exposed for tests.
  std::string wrap_publish(wire::value load);
  // A publish frame relayed by a cluster peer, made ready for this master's minions (caller
  // holds publish_mu_): the peer's frame itself when its serial is above the last one
  // this master sent, else the load re-wrapped with a serial of this master (one AES
  // encryption and, with sign_pub_messages, one RSA signature). So each minion
  // connection sees increasing serials however the cluster's publishes interleave.
  // A frame that cannot be read with the cluster AES key is passed on as it is (logged).
  std::shared_ptr<const std::string> relay_frame(const std::string& frame);
  // Expected minions of a target (CkMinions.check_minions with greedy=true).
  std::vector<std::string> check_minions(const wire::value& tgt, const std::string& tgt_type,
                                         const std::string& delimiter = ":");

  // ---- CLI socket (spawns/uses its own threads for waits; never blocks the caller
  // for long)
  void handle_cli(const wire::value& body, std::shared_ptr<cli_reply> out);

  // ---- key events (salt-key through the CLI socket, or tests)
  // act: accept | reject | delete. Returns whether the AES key was rotated.
  bool key_event(const std::string& act, const std::vector<std::string>& ids);

  // ---- timers: call every few seconds from a worker (rotation, drop file, job
  // cleanup). now injectable for tests.
  void maintenance(sys_clock::time_point now = sys_clock::now());
  result<void> rotate_aes(const std::string& why);

  // Components (tests and the daemon).
  event_hub& hub() noexcept { return hub_; }
  job_cache& jobs() noexcept { return *jobs_; }
  const pki::key_store& key_store() const noexcept { return keys_; }
  aes_manager& aes() noexcept { return *aes_; }
  session_store& sessions() noexcept { return *sessions_; }
  // The key pair minions see (cluster mode: the cluster key), swapped whole by
  // salt-run cluster.rotate_key: hold the returned pointer for one request.
  std::shared_ptr<const master_keys> mkeys() const;
  accepted_keys& accepted() noexcept { return accepted_; }
  minion_data_cache& minion_data() noexcept { return *mdata_; }
  master_counters& counters() noexcept { return counters_; }
  std::vector<std::string> connected_ids() const;

  // Stop CLI wait threads (daemon shutdown).
  void shutdown();

 private:
  explicit master_core(config::master_config cfg);

  // request.cpp
  wire::value refuse(const std::string& peer, const std::string& reason, wire::value reply = "bad load");
  wire::value dispatch_aes(const std::string& cmd, wire::value& load, int version, const wire::value& envelope,
                           const std::string& nonce, const std::string& peer);
  wire::value handle_auth(wire::value& load, int version, const std::string& peer);
  wire::value encrypt_private(const wire::value& ret, const std::string& id, const std::string& nonce,
                              bool sign_messages, const wire::value& envelope);
  wire::value handle_return(wire::value& load);
  wire::value handle_pillar(const wire::value& load);

  bool topic_fallback(const std::vector<std::string>& targets) const;

  // cli_service.cpp
  struct cli_state;
  void cli_publish(const wire::value& body, std::shared_ptr<cli_reply> out);
  void cli_runner(const wire::value& body, std::shared_ptr<cli_reply> out);
  // salt-run cluster.rotate_key: the runner's return and retcode.
  std::pair<wire::value, int> rotate_cluster_key();
  bool spawn_cli(std::function<void()> fn);
  void init_cli();
  std::vector<std::string> ping_all(std::chrono::seconds timeout);

  config::master_config cfg_;
  pki::key_store keys_;
  mutable std::mutex mkeys_mu_;
  std::shared_ptr<const master_keys> mkeys_;  // under mkeys_mu_ (swapped by a key rotation)
  std::shared_ptr<const master_signer> signer_;  // master_sign_pubkey (null when off)
  std::unique_ptr<aes_manager> aes_;
  std::unique_ptr<session_store> sessions_;
  accepted_keys accepted_;
  std::unique_ptr<job_cache> jobs_;
  std::unique_ptr<minion_data_cache> mdata_;
  std::unique_ptr<fileserver> files_;
  std::unique_ptr<pillar_compiler> pillar_;
  event_hub hub_;
  master_counters counters_;
  pub_sink* sink_ = nullptr;
  peer_sink* peers_ = nullptr;
  // cluster mode
  master_keys own_;                               // pki_dir/master.pem (mkeys_ = cluster key)
  std::filesystem::file_time_type aes_mtime_{};   // of cluster_pki_dir/.aes when loaded
  std::mutex aes_file_mu_;
  // cluster_pki_dir is a local copy made by a join (cluster::is_local_copy), not the
  // share: minion keys and the AES key are mirrored from the peers over the bus.
  bool local_copy_ = false;
  unsigned sync_ticks_ = 0;
  std::atomic<bool> keys_synced_{false};  // a key snapshot arrived since start
  // Local copy: a snapshot answering a key-sync sent before a delete/reject may still hold
  // that key. Each revoked id remembers how many key-syncs had been sent; a snapshot for an
  // earlier or the same request does not bring it back. Guarded by sync_mu_.
  cluster::msg::key_sync key_sync_request();
  std::mutex sync_mu_;
  std::uint64_t sync_seq_ = 0;
  std::map<std::string, std::uint64_t> revoked_at_;
  std::mutex owners_mu_;
  std::map<std::string, std::string> jid_owner_;  // jid -> master that published it
  std::deque<std::string> jid_order_;
  void note_owner(const std::string& jid, const std::string& master);
  std::optional<std::string> owner_of(const std::string& jid);
  bool reload_cluster_aes(bool force);            // true if the key changed
  // Serve `key` from now on (caller holds aes_file_mu_); logs "Loaded the rotated cluster
  // AES key<source>" and tells the event bus.
  bool use_cluster_aes(const std::string& key, const std::string& source);
  std::optional<std::string> linked_peer() const;  // a peer whose link is up
  void local_key_effects(const std::string& act, const std::vector<std::string>& ids);
  // Key files from a peer's key event ({act, ids, pubs}) or snapshot ("keys").
  void apply_peer_keys(const std::string& act, const std::vector<std::string>& ids, const cluster::id_pems* pubs);
  cluster::msg::keys key_snapshot() const;
  void apply_key_snapshot(const std::string& from, const cluster::msg::keys& snap);
  void adopt_peer_aes(const std::string& from, const std::string& key);
  // Serve `priv` as the cluster key from now on (mkeys_, the AES key's signature).
  void use_cluster_key(crypto::rsa_key priv, const std::string& source);
  // Peer-bus messages, one handler per type (handle_peer decodes; master.cpp).
  void on_peer(const std::string& from, const cluster::msg::publish& m);
  void on_peer(const std::string& from, const cluster::msg::ret& m);
  void on_peer(const std::string& from, const cluster::msg::aes& m);
  void on_peer(const std::string& from, const cluster::msg::aes_rotate& m);
  void on_peer(const std::string& from, const cluster::msg::key_event& m);
  void on_peer(const std::string& from, const cluster::msg::cluster_key& m);  // the key pair rotated
  void on_peer(const std::string& from, const cluster::msg::key_sync& m);
  void on_peer(const std::string& from, const cluster::msg::keys& m);
  std::mutex publish_mu_;  // serial order == send order
  std::int64_t pub_serial_ = 0;  // last publish serial sent (time, us); under publish_mu_
  sys_clock::time_point last_clean_{};
  std::shared_ptr<cli_state> cli_;  // shared_ptr: type-erased deleter (incomplete here)
  // Sign-in limits (request.cpp handle_auth; made on first use): unaccepted_auth_rate per
  // source and max_pending_keys.
  std::once_flag auth_limits_once_;
  std::shared_ptr<source_limiter> unaccepted_limit_;
  std::shared_ptr<pending_counter> pending_count_;
  util::log_limiter minion_tag_log_;  // blacklisted _minion_event tags
};

// Pure helpers (tests).
// False for tags a minion may not fire (Salt's MINION_EVENT_BLACKLIST: job publishes and
// returns, keys, runners, wheel, cloud, the cluster).
bool valid_minion_tag(std::string_view tag);
// Wrap a publish load into the salt_payload bytes that form the frame body.
std::string wrap_publish_payload(const wire::value& load, const crypto::crypticle& aes,
                                 const crypto::rsa_key* sign_key, std::string_view sig_algo_name);
// Salt's publish load (key order of ClearFuncs._prep_pub) for a request and jid.
wire::value make_publish_load(const publish_request& req, const std::string& jid);

}  // namespace sylvite::master
