// sylvite::master key service: every key the master holds and every rule that changes
// one. It owns
//   - the minion key directories (pki::key_store) and the accepted-key cache;
//   - the key pair minions see (mkeys: master.pem, or cluster.pem in a cluster), this
//     master's own key in a cluster, the master_sign signer;
//   - the publish AES key and its rotation (age, drop file, key events, removed peers;
//     in a cluster the shared cluster_pki_dir/.aes, adopted from peers);
//   - the per-minion session keys;
//   - key events (salt-key accept/reject/delete) and their effects (sessions, connections,
//     minion data), and in a cluster the key events, key snapshots and key-pair rotation
//     exchanged with the peers;
//   - the publish-port hello check (who is on the other end of a publish connection).
// Salt references: salt/master.py Maintenance.handle_key_rotate (drop file cachedir/.dfn;
// a rotation fires `key` {"rotate_aes_key": true}), salt/channel/server.py
// PubServerChannel.presence_callback (hello = Crypticle(AES).loads({"id", "tok"})).
// Thread-safety: every method is safe from any thread. Blocking calls (files, RSA) run on
// workers or the cluster control thread, never on an io thread, except identify_hello's
// io-thread form, which never touches a file.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/unsettled_keys.hpp"
#include "core/config/config.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/keys.hpp"
#include "master/minion_data.hpp"
#include "master/services.hpp"

namespace sylvite::master {

class master_signer;  // master/master_sign.hpp

class key_service {
 public:
  // What master_core::create loaded: the key pair minions see, this master's own key (a
  // cluster member; equal to mkeys otherwise), the signer (null when master_sign_pubkey
  // is off), and whether cluster_pki_dir is a local copy made by a join.
  struct loaded_keys {
    std::shared_ptr<const master_keys> mkeys;
    master_keys own;
    std::shared_ptr<const master_signer> signer;
    bool local_copy = false;
  };
  key_service(const config::master_config& cfg, master_links& links, master_counters& counters, event_hub& events,
              minion_data_cache& mdata);
  ~key_service();
  // Install the loaded keys and make the first AES key (cluster: read or create the
  // shared .aes). Errors are logged.
  result<void> start(loaded_keys k);

  // ---- keys
  pki::key_store& store() noexcept { return keys_; }
  const pki::key_store& store() const noexcept { return keys_; }
  accepted_keys& accepted() noexcept { return accepted_; }
  aes_manager& aes() noexcept { return *aes_; }
  session_store& sessions() noexcept { return *sessions_; }
  // The key pair minions see, swapped whole by a cluster key rotation: hold the returned
  // pointer for one request.
  std::shared_ptr<const master_keys> mkeys() const;
  const master_keys& own_keys() const noexcept;
  const master_signer* signer() const noexcept { return signer_.get(); }
  bool local_copy() const noexcept { return local_copy_; }

  // Publishes and key changes are ordered by one lock: a publish never pairs an old
  // serial with a new key (the job service holds it while it wraps and sends).
  std::unique_lock<std::mutex> publish_lock() { return std::unique_lock(publish_mu_); }

  // ---- the publish port: a minion's hello -> its id when the token verifies.
  // offload == nullptr: may read the accepted key file (tests, tools). Otherwise decides
  // at once when the key is in memory, else hands the file read to offload (a worker)
  // and returns nullopt; identified(id) runs there once the token verifies.
  using offload_fn = std::function<bool(std::function<void()>)>;
  std::optional<std::string> identify_hello(const wire::value& body, const std::string& peer,
                                            const offload_fn& offload,
                                            std::function<void(const std::string&)> identified);

  // ---- AES rotation
  result<void> rotate_aes(const std::string& why);
  // Called after every rotation made here (ping_on_rotate publishes test.ping).
  void on_rotated(std::function<void()> f) { after_rotation_ = std::move(f); }
  // Maintenance tick: drop file, publish_session age, cluster: a peer's rotation picked
  // up from the share, a local copy's key sync.
  void maintenance(sys_clock::time_point now);

  // Cluster: pick up the shared .aes when it changed since it was loaded (one stat;
  // force: read it anyway). True if the key changed.
  bool reload_cluster_aes(bool force);

  // ---- key events (salt-key through the CLI socket, or tests). act: accept | reject |
  // delete. A reject or delete rotates the AES key when rotate_aes_key is on and rotate
  // (salt-key --rotate-aes-key False clears it). Returns whether the key was rotated.
  bool key_event(const std::string& act, const std::vector<std::string>& ids, bool rotate = true);

  // ---- cluster (called by the cluster node for the peers' messages)
  // ---- cluster: the peers' key messages (cluster/peer_messages.hpp), one handler each
  // (called by the cluster node).
  // "aes": a peer rotated the cluster AES key (a local copy adopts the key it sent).
  void peer_aes(const std::string& from, const cluster::msg::aes& m);
  // "key": a peer's key event (from a local copy: with the accepted keys).
  void peer_key_event(const std::string& from, const cluster::msg::key_event& m);
  // "aes-rotate": a local-copy peer asks a member on the share to rotate.
  void peer_asks_rotation(const std::string& from, const cluster::msg::aes_rotate& m);
  // "key-sync": a peer asks for the minion keys; the answer ("keys") is sent to it.
  void peer_asks_keys(const std::string& from, const cluster::msg::key_sync& m);
  // "keys": a key snapshot (a local copy applies it).
  void peer_keys(const std::string& from, const cluster::msg::keys& m);
  // "cluster-key": a peer rotated the cluster key pair.
  void peer_cluster_key(const std::string& from, const cluster::msg::cluster_key& m);
  // A peer link came up: a local copy asks it for the minion keys.
  void on_peer_up(const std::string& id);
  // A local copy wrote a minion's key by itself at a sign-in (the request router calls
  // this after the write): accepted (auto_accept, autosign) or pending (a new minion).
  // The peers are told with the key, so the share has it too and salt-key on any master
  // lists it (docs/cluster.md, "Adding a master (join)", the local copy). Other states:
  // nothing.
  void key_written_here(pki::key_state st, const std::string& id, const std::string& pem);
  // peers/<id>.pub of these peers was deleted: rotate unless .aes changed since.
  void on_peers_removed(const std::vector<std::string>& ids);
  // salt-run cluster.rotate_key: the runner's return and retcode.
  std::pair<wire::value, int> rotate_cluster_key();

 private:
  bool clustered() const noexcept { return cfg_.cluster_id.has_value(); }
  peer_sink* peers() const noexcept;
  // Serve `key` from now on (caller holds aes_file_mu_).
  bool use_cluster_aes(const std::string& key, const std::string& source);
  void use_cluster_key(crypto::rsa_key priv, const std::string& source);
  // A local copy takes a key a peer sent, unless it already has that generation or a
  // later one (gen: nullopt from older senders: taken).
  void adopt_peer_aes(const std::string& from, const std::string& key, std::optional<std::int64_t> gen);
  result<void> rotate_aes(const std::string& why, const std::filesystem::path* dropfile);
  std::optional<std::string> linked_peer() const;
  void local_key_effects(const std::string& act, const std::vector<std::string>& ids);
  void apply_peer_keys(const std::string& act, const std::vector<std::string>& ids, const cluster::id_pems* pubs);
  cluster::msg::keys key_snapshot() const;
  cluster::msg::key_sync key_sync_request();
  void apply_key_snapshot(const std::string& from, const cluster::msg::keys& snap);
  // Local copy, a complete snapshot from the share that answers our request `seq`: an
  // accepted key the share has not is removed (rejected there: moved to rejected), unless
  // it was written within k_fresh_key_grace before the request or accepted here since; an
  // accept made here that the share lacks is sent again instead.
  void reconcile_with_share(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq);
  void note_accepted_here(const std::vector<std::string>& ids);
  void note_revoked_here(const std::string& act, const std::vector<std::string>& ids, bool rotate);
  // Local copy, the same answer: a reject or delete made here that the share still shows
  // accepted is sent again (with the rotation it asked for); one the share shows
  // settled is forgotten.
  void settle_revokes(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq);
  // Local copy, the same answer: a key that went pending here and that the share lists in
  // no state is sent again; one it lists, or no longer pending here, is forgotten.
  void settle_pending(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq);
  // Local copy: the accepts and revokes above, kept in cluster_pki_dir/.sylvite-unsettled-keys
  // (cluster/unsettled_keys.hpp) so a restart does not forget them. load: at start (an
  // entry that no longer matches the key files is dropped); save: when they changed since
  // the last write (salt-key events at once, the rest at the maintenance tick); pick_up:
  // entries salt-key added while this master could not be told.
  void load_unsettled();
  void save_unsettled();
  void pick_up_unsettled();
  // The file, or nullopt when it cannot be read: then set aside as .bad and logged with
  // `lost` (caller holds unsettled_mu_; a missing file is empty).
  std::optional<cluster::unsettled_keys> read_unsettled_locked(std::string_view lost);
  // Take the file's entries that still match the key files and are not known yet; act ->
  // the ids taken (accept, reject, delete, pend).
  std::map<std::string, std::vector<std::string>> adopt_unsettled(const cluster::unsettled_keys& u);

  const config::master_config& cfg_;
  master_links& links_;
  master_counters& counters_;
  event_hub& events_;
  minion_data_cache& mdata_;
  pki::key_store keys_;
  accepted_keys accepted_;
  mutable std::mutex mkeys_mu_;
  std::shared_ptr<const master_keys> mkeys_;  // under mkeys_mu_
  master_keys own_;                          // cluster: pki_dir/master.pem
  std::shared_ptr<const master_signer> signer_;
  std::unique_ptr<aes_manager> aes_;
  std::unique_ptr<session_store> sessions_;
  std::mutex publish_mu_;
  std::function<void()> after_rotation_;
  // cluster mode
  std::filesystem::file_time_type aes_mtime_{};  // of cluster_pki_dir/.aes when loaded
  std::mutex aes_file_mu_;
  std::uint64_t aes_gen_ = 0;  // local copy: generation of the key in use (0: unknown); under aes_file_mu_
  bool local_copy_ = false;
  unsigned sync_ticks_ = 0;
  std::atomic<bool> keys_synced_{false};  // a key snapshot arrived since start
  // Local copy: a snapshot answering a key-sync sent before a delete/reject may still hold
  // that key. Each revoked id remembers how many key-syncs had been sent; a snapshot for an
  // earlier or the same request does not bring it back. Guarded by sync_mu_.
  mutable std::mutex sync_mu_;
  std::uint64_t sync_seq_ = 0;
  std::map<std::string, std::uint64_t> revoked_at_;
  // Local copy: ids accepted on this master (salt-key here, auto-accepts), with sync_seq_
  // at that moment, until a snapshot from the share settles them; when each of the last
  // key-sync requests was sent; the peers whose last snapshot came from the share (asked
  // first). Guarded by sync_mu_.
  std::map<std::string, std::uint64_t> accepted_at_;
  // Local copy: rejects and deletes made here (salt-key on this master) until a snapshot
  // from the share no longer shows the key accepted; a snapshot never brings such a key
  // back meanwhile. Guarded by sync_mu_.
  struct revoke_here {
    std::string act;
    std::uint64_t seq = 0;
    bool rotate = false;
  };
  std::map<std::string, revoke_here> revoked_here_;
  // Local copy: keys that went pending here (a minion's first sign-in), with sync_seq_
  // then, until a snapshot from the share lists the id in any state; each such answer
  // that does not sends the key again ("pend"). Guarded by sync_mu_.
  std::map<std::string, std::uint64_t> pending_at_;
  std::map<std::uint64_t, std::filesystem::file_time_type> sync_sent_at_;
  std::set<std::string> share_peers_;
  // Local copy: what .sylvite-unsettled-keys holds as far as this master wrote or read it,
  // and its mtime then. Guarded by unsettled_mu_ (taken before sync_mu_).
  std::mutex unsettled_mu_;
  cluster::unsettled_keys unsettled_saved_;
  std::filesystem::file_time_type unsettled_mtime_{};
  bool unsettled_write_failed_ = false;
};

}  // namespace sylvite::master
