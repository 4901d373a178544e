// sylvite::master core: creation, publish-port hellos, presence, key events and the
// maintenance tick (AES rotation by age or drop file, job cache cleanup).
// Salt references: salt/master.py Maintenance.handle_key_rotate (drop file
// cachedir/.dfn; rotation resets the publish serial and fires `key`
// {"rotate_aes_key": true}), salt/channel/server.py PubServerChannel.presence_callback
// (hello = Crypticle(AES).loads({"id", "tok"}), token verified with the accepted key).
#include "master/master.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "master/master_sign.hpp"
#include "cluster/lb_admin.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;
using wire::value;

namespace {
constexpr std::chrono::seconds kHelloGrace{120};  // previous AES key still opens hellos
}

// CLI state is defined in cli_service.cpp; the destructor must see it.
master_core::master_core(config::master_config cfg)
    : cfg_(std::move(cfg)),
      keys_(cfg_.cluster_id && cfg_.cluster_pki_dir ? *cfg_.cluster_pki_dir : cfg_.pki_dir),
      accepted_(keys_) {}

result<std::unique_ptr<master_core>> master_core::create(config::master_config cfg) {
  return create(std::move(cfg), cluster_joiner{});
}

namespace {
// A cluster's cachedir and cluster_pki_dir are shared by every master (GlusterFS): their
// directories are made in turns (util::make_shared_dirs), the job cache's 256 hash buckets
// included (two masters publishing at once would otherwise both create one), once.
result<void> make_shared(const fs::path& top, const std::vector<std::pair<fs::path, unsigned>>& dirs) {
  std::error_code ec;
  if (!fs::is_directory(top, ec))
    spdlog::warn("creating {}: on a shared volume make it before the masters start (deploy/gluster/layout.sh); "
                 "masters that create it at the same moment can leave it unreadable (GlusterFS split brain)",
                 top.string());
  auto r = util::make_shared_dirs(top, dirs);
  if (!r) spdlog::error("cannot create the directories in {}: {}", top.string(), r.error().message());
  return r;
}

result<void> make_shared_cache_dirs(const config::master_config& cfg) {
  if (auto r = make_shared(cfg.cachedir, {{"sessions", 0700}, {"jobs", 0700}, {"minions", 0700}}); !r) return r;
  // The buckets once (marked by a file: files are safe to look up while being made).
  const fs::path buckets_done = cfg.cachedir / ".sylvite-job-buckets";  // not in jobs/: Salt walks that
  std::error_code ec;
  if (!fs::exists(buckets_done, ec)) {
    std::vector<std::pair<fs::path, unsigned>> buckets;
    static const char* hex = "0123456789abcdef";
    for (int i = 0; i < 256; ++i) buckets.push_back({fs::path("jobs") / std::string{hex[i >> 4], hex[i & 15]}, 0700});
    if (auto r = make_shared(cfg.cachedir, buckets); !r) return r;
    auto w = util::create_exclusive(buckets_done, "the job cache's hash buckets exist\n", 0600);
    if (!w && w.error() != util::errc::already_exists) return w.error();
  }
  return {};
}

// After the join: a refused join leaves nothing in cluster_pki_dir.
result<void> make_shared_pki_dirs(const config::master_config& cfg) {
  std::vector<std::pair<fs::path, unsigned>> pki{{"peers", 0755}};
  for (const char* d : {"minions", "minions_pre", "minions_rejected", "minions_denied", "minions_autosign"})
    pki.push_back({d, 0700});
  return make_shared(*cfg.cluster_pki_dir, pki);
}
}  // namespace

result<std::unique_ptr<master_core>> master_core::create(config::master_config cfg, const cluster_joiner& join) {
  for (const auto& d : {cfg.pki_dir, cfg.sock_dir}) {
    if (auto r = util::make_dirs(d, 0700); !r) {
      spdlog::error("cannot create {}: {}", d.string(), r.error().message());
      return r.error();
    }
  }
  if (cfg.cluster_id && cfg.cluster_pki_dir) {
    if (auto r = make_shared_cache_dirs(cfg); !r) return r.error();
  } else {
    for (const auto& d : {cfg.cachedir, cfg.cachedir / "sessions", cfg.cachedir / "jobs", cfg.cachedir / "minions"}) {
      if (auto r = util::make_dirs(d, 0700); !r) {
        spdlog::error("cannot create {}: {}", d.string(), r.error().message());
        return r.error();
      }
    }
  }
  ::chmod(cfg.pki_dir.c_str(), 0700);
  ::chmod(cfg.sock_dir.c_str(), 0700);
  std::unique_ptr<master_core> m(new master_core(std::move(cfg)));
  if (!m->clustered()) {  // a cluster's key directories are shared: made after the join, in turns
    if (auto kr = m->keys_.ensure_dirs(); !kr) {
      spdlog::error("cannot create the key directories in {}: {}", m->keys_.dir().string(), kr.error().message());
      return kr.error();
    }
  }
  auto mk = master_keys::load_or_generate(m->cfg_.pki_dir, m->cfg_.keysize);
  if (!mk) {
    spdlog::error("cannot load or generate the master key in {}: {}", m->cfg_.pki_dir.string(),
                  mk.error().message());
    return mk.error();
  }
  if (m->clustered()) {
    // Cluster: this master's own key authenticates it to its peers (peers/<id>.pub);
    // minions only ever see the cluster key pair and the cluster AES key.
    const fs::path cdir = *m->cfg_.cluster_pki_dir;
    if (!cluster::valid_peer_id(m->cfg_.id)) {
      spdlog::critical("id '{}' cannot name a cluster peer (cluster_pki_dir/peers/<id>.pub)", m->cfg_.id);
      return make_error_code(cluster::errc::bad_id);
    }
    m->own_ = std::move(*mk);
    if (auto r = util::make_dirs(cdir, 0700); !r) {
      spdlog::critical("cannot create cluster_pki_dir {}: {}", cdir.string(), r.error().message());
      return r.error();
    }
    if (join && (m->cfg_.cluster_secret || m->cfg_.cluster_pub_fingerprint) && !m->cfg_.cluster_peers.empty() &&
        !cluster::is_member_dir(cdir, m->cfg_.id)) {
      // Not a member yet (no cluster.pem): join through cluster_peers (docs/cluster.md,
      // "Joining and leaving"). A refusal stops the start; no reachable member means a new
      // cluster (bootstrap) unless cluster_pub_fingerprint says the cluster key exists.
      auto jr = join(m->own_.priv());
      if (!jr) {
        spdlog::critical("cannot join cluster {}: refused (see above); not starting", *m->cfg_.cluster_id);
        return jr.error();
      }
      if (!*jr) {
        if (m->cfg_.cluster_pub_fingerprint) {
          spdlog::critical(
              "cannot join cluster {}: no peer in cluster_peers is a reachable member, and cluster_pub_fingerprint "
              "pins an existing cluster key; not starting",
              *m->cfg_.cluster_id);
          return boost::system::errc::make_error_code(boost::system::errc::host_unreachable);
        }
        spdlog::warn("no peer in cluster_peers is a reachable member of cluster {}: starting it (bootstrap)",
                     *m->cfg_.cluster_id);
      }
    }
    if (auto r = make_shared_pki_dirs(m->cfg_); !r) return r.error();
    if (auto r = cluster::ensure_peer_key(cdir, m->cfg_.id, m->own_.priv().public_pem()); !r) {
      if (r.error() == cluster::errc::peer_key_mismatch) {
        spdlog::critical(
            "{}/peers/{}.pub holds a different key than {}/master.pub: another master uses the id '{}', or this "
            "master's key changed. Refusing to start; if the change is intended, remove that file.",
            cdir.string(), m->cfg_.id, m->cfg_.pki_dir.string(), m->cfg_.id);
      } else {
        spdlog::critical("cannot write {}/peers/{}.pub: {}", cdir.string(), m->cfg_.id, r.error().message());
      }
      return r.error();
    }
    auto ck = cluster::load_or_create_cluster_keys(cdir, m->cfg_.keysize);
    if (!ck) {
      spdlog::critical("cannot load or create the cluster key pair in {}: {}", cdir.string(), ck.error().message());
      return ck.error();
    }
    m->mkeys_ = std::make_shared<const master_keys>(master_keys::from_key(std::move(ck->priv)));
    m->local_copy_ = cluster::is_local_copy(cdir);
    if (m->local_copy_)
      spdlog::info("cluster_pki_dir {} is a local copy (made by the join): minion keys and the cluster AES key "
                   "follow the peers over the bus",
                   cdir.string());
  } else {
    m->mkeys_ = std::make_shared<const master_keys>(std::move(*mk));
  }
  if (m->cfg_.master_sign_pubkey) {
    auto signer = master_signer::load(m->cfg_);
    if (!signer) return signer.error();  // logged (Salt exits too)
    m->signer_ = std::move(*signer);
  }
  m->aes_ = std::make_unique<aes_manager>(m->mkeys_->priv());
  if (m->clustered()) {
    auto af = cluster::load_or_create_aes(*m->cfg_.cluster_pki_dir);
    if (!af) {
      spdlog::critical("cannot read or create the cluster AES key {}/.aes: {}", m->cfg_.cluster_pki_dir->string(),
                       af.error().message());
      return af.error();
    }
    if (auto r = m->aes_->set_key_string(af->key); !r) return r.error();
    m->aes_mtime_ = af->mtime;
  } else {
    auto ar = m->aes_->rotate();
    if (!ar) {
      spdlog::error("cannot create the AES key: {}", ar.error().message());
      return ar.error();
    }
  }
  m->sessions_ = std::make_unique<session_store>(m->cfg_.cachedir / "sessions",
                                                 std::chrono::seconds(m->cfg_.publish_session));
  // Every master writes a return (temp + link, no fsync: group commit) before the minion
  // gets its ack, so an acknowledged return survives a master crash or SIGKILL; the
  // cache's async mode (ack before the write) would lose the queued ones, so it stays
  // off (opt-in for benchmarks: job_cache_async, a sylvite extension).
  m->jobs_ = std::make_unique<job_cache>(m->cfg_.cachedir, m->cfg_.hash_type,
                                         (m->cfg_.job_cache_async && !m->cfg_.cluster_id)
                                             ? job_cache::write_mode::async
                                             : job_cache::write_mode::sync);
  m->mdata_ = std::make_unique<minion_data_cache>(m->cfg_.cachedir, m->cfg_.minion_data_cache);
  m->files_ = std::make_unique<fileserver>(m->cfg_);
  m->pillar_ = std::make_unique<pillar_compiler>(m->cfg_);
  m->last_clean_ = sys_clock::now();
  m->init_cli();
  return m;
}

std::vector<std::string> master_core::connected_ids() const {
  if (!sink_) return {};
  return sink_->connected_ids();
}

std::optional<std::string> master_core::handle_hello(const value& body, const std::string& peer) {
  return handle_hello(body, peer, nullptr, nullptr);
}

std::optional<std::string> master_core::handle_hello(const value& body, const std::string& peer,
                                                     const offload_fn& offload,
                                                     std::function<void(const std::string&)> identified) {
  counters_.hellos++;
  auto refuse_hello = [&](const std::string& why) -> std::optional<std::string> {
    counters_.hellos_refused++;
    spdlog::info("publish hello from {} ignored: {}", peer, why);
    return std::nullopt;
  };
  try {
    if (!body.is_object()) return refuse_hello("not a map");
    auto enc = wire::get_text(body, "enc");
    if (!enc || *enc != "aes") return refuse_hello("enc is not aes");
    const value* lv = wire::find(body, "load");
    auto cipher = lv ? wire::as_bytes(*lv) : std::nullopt;
    if (!cipher) return refuse_hello("load is not bytes");
    auto cur = aes_->current();
    auto load = cur->crypt.loads(*cipher, {}, false);
    if (!load) {
      if (auto prev = aes_->previous(kHelloGrace)) load = prev->crypt.loads(*cipher, {}, false);
    }
    if (!load) return refuse_hello("cannot decrypt with the AES key (minion must re-auth)");
    auto id = wire::get_text(*load, "id");
    auto tok = wire::get_text(*load, "tok");
    if (!id || !tok) return refuse_hello("no id/tok");
    std::string sid(*id);
    if (!pki::valid_id(sid)) return refuse_hello("invalid id");
    auto why = [&sid] { return "token of '" + sid + "' did not verify"; };  // built only to refuse
    if (offload) {
      if (auto ok = accepted_.verify_token_cached(sid, *tok)) {
        if (!*ok) return refuse_hello(why());
        spdlog::debug("publish connection {} identified as {}", peer, sid);
        return sid;
      }
      // The key is not in memory: read it on a worker thread, never on this one.
      auto task = [this, sid, t = std::string(*tok), peer, identified = std::move(identified)] {
        if (!accepted_.verify_token(sid, t)) {
          counters_.hellos_refused++;
          spdlog::info("publish hello from {} ignored: token of '{}' did not verify", peer, sid);
          return;
        }
        spdlog::debug("publish connection {} identified as {} (key read off the io thread)", peer, sid);
        if (identified) identified(sid);
      };
      if (!offload(std::move(task))) return refuse_hello("worker queue full (the minion's next hello is checked)");
      return std::nullopt;
    }
    if (!accepted_.verify_token(sid, *tok)) return refuse_hello(why());
    spdlog::debug("publish connection {} identified as {}", peer, sid);
    return sid;
  } catch (const std::exception& e) {
    return refuse_hello(std::string("exception: ") + e.what());
  }
}

void master_core::on_presence(const std::string& id, bool connected) {
  spdlog::debug("presence: {} {}", id, connected ? "connected" : "disconnected");
  value data = value::object();
  data["new"] = connected ? value::array({id}) : value::array();
  data["lost"] = connected ? value::array() : value::array({id});
  hub_.fire("salt/presence/change", data);
}

result<void> master_core::rotate_aes(const std::string& why) {
  result<void> r;
  bool rotated_here = true;
  if (clustered() && local_copy_) {
    // The shared .aes is not ours to write: a member on the share rotates it and sends
    // the new key to every master, this one included.
    if (auto peer = linked_peer(); peer && peers_->send(*peer, "aes-rotate", value{{"why", why}})) {
      spdlog::info("cluster AES key rotation ({}) asked of cluster peer {}", why, *peer);
      return {};
    }
    spdlog::error("cluster AES key rotation ({}) failed: no cluster peer linked (local cluster_pki_dir)", why);
    return make_error_code(boost::system::errc::host_unreachable);
  }
  if (clustered()) {
    // Exactly one master rotates the shared key: cluster::rotate_aes holds an fcntl lock
    // on cluster_pki_dir/.aes.lock and adopts the key of a master that rotated first.
    std::lock_guard flk(aes_file_mu_);
    auto rot = cluster::rotate_aes(*cfg_.cluster_pki_dir, aes_->current()->crypt.key_string());
    if (!rot) {
      spdlog::error("cluster AES key rotation ({}) failed: {}", why, rot.error().message());
      return rot.error();
    }
    rotated_here = rot->rotated;
    std::lock_guard lk(publish_mu_);
    if (rot->now.key != aes_->current()->crypt.key_string()) r = aes_->set_key_string(rot->now.key);
    aes_mtime_ = rot->now.mtime;
  } else {
    std::lock_guard lk(publish_mu_);  // a publish never pairs an old serial with a new key
    r = aes_->rotate();
  }
  if (!r) {
    spdlog::error("AES key rotation ({}) failed: {}", why, r.error().message());
    return r;
  }
  counters_.rsa_private_ops++;
  spdlog::info("Rotating {} AES key ({}){}", clustered() ? "cluster" : "master", why,
               rotated_here ? "" : ": another master rotated it first, adopted");
  hub_.fire("key", value{{"rotate_aes_key", true}});
  // The key itself rides along (the links are encrypted): local-copy masters adopt it.
  if (clustered() && peers_)
    peers_->broadcast("aes", value{{"why", why}, {"key", aes_->current()->crypt.key_string()}});
  if (cfg_.ping_on_rotate) {
    publish_request req;
    req.tgt = "*";
    req.fun = "test.ping";
    (void)publish(req);
  }
  return {};
}

std::shared_ptr<const master_keys> master_core::mkeys() const {
  std::lock_guard lk(mkeys_mu_);
  return mkeys_;
}

void master_core::use_cluster_key(crypto::rsa_key priv, const std::string& source) {
  auto mk = std::make_shared<const master_keys>(master_keys::from_key(priv));
  {
    std::lock_guard lk(mkeys_mu_);
    mkeys_ = std::move(mk);
  }
  aes_->set_master_key(std::move(priv));
  {
    // The auth reply's "sig" over the AES key must verify with the new pub_key: re-sign
    // the key in use now (the rotation that follows replaces it anyway).
    std::lock_guard lk(publish_mu_);
    (void)aes_->set_key_string(aes_->current()->crypt.key_string());
  }
  counters_.rsa_private_ops++;
  spdlog::warn("Loaded the rotated cluster key pair{}", source);
}

void master_core::handle_peer_cluster_key(const std::string& from, const value& body) {
  const std::string pub = std::string(wire::get_text(body, "pub").value_or(""));
  if (pub.empty()) {
    spdlog::warn("cluster-key from {} without pub ignored", from);
    return;
  }
  const fs::path cdir = *cfg_.cluster_pki_dir;
  if (local_copy_) {
    const value* sealed = wire::find(body, "sealed");
    const value* mine = sealed && sealed->is_object() ? wire::find(*sealed, cfg_.id) : nullptr;
    auto pem = cluster::open_sealed(own_.priv(), mine);
    if (!pem) {
      spdlog::error("cluster key rotation from {}: the new key was not sealed to this master; still serving the "
                    "old key",
                    from);
      return;
    }
    auto k = crypto::rsa_key::from_private_pem(*pem);
    if (!k || crypto::clean_key(k->public_pem()) != crypto::clean_key(pub)) {
      spdlog::error("cluster key rotation from {}: the sealed key does not match its pub; ignored", from);
      return;
    }
    std::lock_guard flk(aes_file_mu_);
    auto rot = cluster::rotate_cluster_keys(cdir, cfg_.keysize, *pem);
    if (!rot) {
      spdlog::error("cluster key rotation from {}: cannot write {}: {}", from, cdir.string(), rot.error().message());
      return;
    }
    use_cluster_key(std::move(rot->priv), " (from cluster peer " + from + ", local copy)");
    return;
  }
  // On the share: the rotating member wrote cluster.pem before telling us.
  for (int i = 0; i < 20; ++i) {
    auto text = util::read_file(cdir / "cluster.pem");
    std::optional<crypto::rsa_key> k;
    if (text) {
      if (auto p = crypto::rsa_key::from_private_pem(*text)) k = std::move(*p);
    }
    if (k && crypto::clean_key(k->public_pem()) == crypto::clean_key(pub)) {
      use_cluster_key(std::move(*k), " (rotated by cluster peer " + from + ")");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  spdlog::error("cluster key rotation from {}: {}/cluster.pem does not hold the announced key; still serving the "
                "old key",
                from, cdir.string());
}

void master_core::on_peers_removed(const std::vector<std::string>& ids) {
  if (!clustered() || ids.empty()) return;
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
  if (local_copy_) {  // the share's members rotate; the new key reaches us over the bus
    spdlog::warn("cluster peer(s) {} removed (peers/<id>.pub deleted)", list);
    return;
  }
  // Every member sees the deletion: one rotation. If .aes was written after peers/ last
  // changed, a master (or salt-run cluster.remove) rotated after the removal already.
  const fs::path cdir = *cfg_.cluster_pki_dir;
  std::error_code e1, e2;
  const auto removed_at = fs::last_write_time(cdir / "peers", e1);
  const auto aes_at = fs::last_write_time(cdir / ".aes", e2);
  (void)reload_cluster_aes(false);
  if (!e1 && !e2 && aes_at >= removed_at) {
    spdlog::info("cluster peer(s) {} removed (peers/<id>.pub deleted); the AES key was rotated since", list);
    return;
  }
  (void)rotate_aes("cluster_pki_dir/peers/" + (ids.size() == 1 ? ids[0] + ".pub" : "{" + list + "}.pub") + " deleted");
}

bool master_core::reload_cluster_aes(bool force) {
  if (!clustered()) return false;
  std::lock_guard flk(aes_file_mu_);
  std::error_code ec;
  auto mt = fs::last_write_time(*cfg_.cluster_pki_dir / ".aes", ec);
  if (ec) return false;  // unreachable share: keep serving with the key we have
  if (!force && mt == aes_mtime_) return false;
  auto af = cluster::read_aes(*cfg_.cluster_pki_dir);
  if (!af) return false;
  aes_mtime_ = af->mtime;
  if (af->key == aes_->current()->crypt.key_string()) return false;
  // salt-run cluster.rotate_key rotates .aes after the key pair: a member on the share
  // that missed the bus message (link down) meets the new pair here.
  if (!local_copy_) {
    auto text = util::read_file(*cfg_.cluster_pki_dir / "cluster.pem");
    if (text) {
      if (auto k = crypto::rsa_key::from_private_pem(*text);
          k && crypto::clean_key(k->public_pem()) != mkeys()->pub_clean())
        use_cluster_key(std::move(*k), " (cluster_pki_dir/cluster.pem changed)");
    }
  }
  return use_cluster_aes(af->key, "");
}

bool master_core::use_cluster_aes(const std::string& key, const std::string& source) {
  {
    std::lock_guard lk(publish_mu_);  // a publish never pairs an old serial with a new key
    if (!aes_->set_key_string(key)) return false;
  }
  spdlog::info("Loaded the rotated cluster AES key{}", source);
  hub_.fire("key", value{{"rotate_aes_key", true}});
  return true;
}

std::optional<std::string> master_core::linked_peer() const {
  if (!peers_) return std::nullopt;
  for (const auto& p : peers_->status())
    if (wire::get_text(p, "state").value_or("") == "up")
      if (auto id = wire::get_text(p, "id"); id && !id->empty()) return std::string(*id);
  return std::nullopt;
}

void master_core::local_key_effects(const std::string& act, const std::vector<std::string>& ids) {
  const bool revoke = act == "reject" || act == "delete";
  if (local_copy_) {
    std::lock_guard lk(sync_mu_);
    for (const auto& id : ids) {
      if (revoke) revoked_at_[id] = sync_seq_;
      else if (act == "accept") revoked_at_.erase(id);
    }
  }
  for (const auto& id : ids) {
    if (!pki::valid_id(id)) continue;
    accepted_.invalidate(id);
    if (revoke) {
      sessions_->remove(id);
      if (sink_) sink_->disconnect(id);
    }
    if (act == "delete") mdata_->remove(id);
  }
}

void master_core::note_owner(const std::string& jid, const std::string& master) {
  std::lock_guard lk(owners_mu_);
  if (jid_owner_.emplace(jid, master).second) jid_order_.push_back(jid);
  while (jid_order_.size() > 100000) {
    jid_owner_.erase(jid_order_.front());
    jid_order_.pop_front();
  }
}

std::optional<std::string> master_core::owner_of(const std::string& jid) {
  std::lock_guard lk(owners_mu_);
  auto it = jid_owner_.find(jid);
  if (it == jid_owner_.end()) return std::nullopt;
  return it->second;
}

void master_core::handle_peer(const std::string& from, const std::string& type, const value& body) {
  try {
    if (type == "publish") {
      auto jid = wire::get_text(body, "jid");
      const value* f = wire::find(body, "frame");
      auto frame = f ? wire::as_bytes(*f) : std::nullopt;
      if (!jid || !frame) {
        spdlog::warn("cluster publish from {} without jid/frame ignored", from);
        return;
      }
      note_owner(std::string(*jid), from);
      if (!sink_) return;
      // Serial order == send order on this master's connections (relay_frame).
      std::lock_guard lk(publish_mu_);
      auto bytes = relay_frame(std::string(*frame));
      const value* t = wire::find(body, "targets");
      if (t && t->is_array()) {
        std::vector<std::string> ids;
        for (const auto& x : *t)
          if (auto s = wire::as_text(x)) ids.emplace_back(*s);
        if (topic_fallback(ids)) sink_->publish_all(bytes);
        else sink_->publish_to(bytes, ids);
      } else {
        sink_->publish_all(bytes);
      }
      return;
    }
    if (type == "return") {
      auto jid = wire::get_text(body, "jid");
      auto id = wire::get_text(body, "id");
      const value* load = wire::find(body, "load");
      if (!jid || !id || !load || !pki::valid_id(*id)) {
        spdlog::warn("cluster return from {} malformed; ignored", from);
        return;
      }
      hub_.fire("salt/job/" + std::string(*jid) + "/ret/" + std::string(*id), *load, std::string(*jid));
      return;
    }
    if (type == "aes") {
      auto key = wire::get_text(body, "key");
      if (local_copy_ && key) adopt_peer_aes(from, std::string(*key));
      else reload_cluster_aes(true);
      return;
    }
    if (type == "key") {
      auto act = wire::get_text(body, "act");
      const value* ids = wire::find(body, "ids");
      if (!act || !ids || !ids->is_array()) return;
      std::vector<std::string> v;
      for (const auto& x : *ids)
        if (auto s = wire::as_text(x); s && pki::valid_id(*s)) v.emplace_back(*s);
      // Accepted keys are written from the event only where the share does not have them
      // already: on a local copy, or from a local copy's own salt-key (a late event
      // must not bring back a key deleted on the share meanwhile).
      const bool from_local = wire::get_bool(body, "local").value_or(false);
      apply_peer_keys(std::string(*act), v, (local_copy_ || from_local) ? wire::find(body, "pubs") : nullptr);
      local_key_effects(std::string(*act), v);
      spdlog::info("key event {} for {} minion(s) from cluster peer {}", *act, v.size(), from);
      return;
    }
    if (type == "cluster-key") {
      handle_peer_cluster_key(from, body);
      return;
    }
    if (type == "aes-rotate") {  // asked by a master whose cluster_pki_dir is a local copy
      if (!local_copy_)
        (void)rotate_aes("asked by cluster peer " + from + ": " + std::string(wire::get_text(body, "why").value_or("")));
      return;
    }
    if (type == "key-sync") {  // a local-copy peer asks for the minion keys
      // Our link to a new master may not know its id yet: then every peer gets it (only a
      // local copy applies it).
      spdlog::debug("cluster peer {} asks for the minion keys", from);
      if (peers_) {
        value snap = key_snapshot();
        // Echoed: the asker tells its own answers from a broadcast one, and which request
        // this answers.
        if (auto f = wire::get_text(body, "for"); f && pki::valid_id(*f)) snap["for"] = std::string(*f);
        if (auto q = wire::get_int(body, "seq"); q && *q > 0) snap["seq"] = *q;
        if (!peers_->send(from, "keys", snap)) peers_->broadcast("keys", snap);
      }
      return;
    }
    if (type == "keys") {
      spdlog::debug("minion keys from cluster peer {}{}", from, local_copy_ ? "" : " (ignored: shared cluster_pki_dir)");
      if (local_copy_) apply_key_snapshot(from, body);
      return;
    }
    spdlog::warn("unknown cluster message type '{}' from {} ignored", type, from);
  } catch (const std::exception& e) {
    spdlog::error("cluster message {} from {} failed: {}", type, from, e.what());
  }
}

namespace {
// The host of a bus address "host:port" / "[v6]:port" (the address HAProxy reaches a
// master on: its `interface`).
std::string host_of(const std::string& addr, int default_port) {
  auto a = config::parse_master_address(addr, default_port);
  return a ? a->host : addr;
}

lb_admin::runtime_backends lb_backends(const config::master_config& c) {
  lb_admin::runtime_backends b;
  if (c.cluster_lb_backends.size() == 2) {
    b.publish = c.cluster_lb_backends[0];
    b.request = c.cluster_lb_backends[1];
  }
  return b;
}
}  // namespace

void master_core::lb_add_joined(const std::string& id, const std::string& bus_addr) {
  // The joiner's bus address is its `interface` (or its id when it listens on all
  // addresses): the address HAProxy reaches it on; the ports are this cluster's.
  const std::string host = host_of(bus_addr, cfg_.cluster_pool_port);
  // Named by its address, as sylvite-haproxy-cfg names every server.
  const lb_admin::master_server m{lb_admin::server_name(host), host};
  const auto b = lb_backends(cfg_);
  auto print_lines = [&](const std::string& why) {
    std::string lines;
    for (const auto& l : lb_admin::config_lines(cfg_, m, b)) lines += "\n  " + l;
    spdlog::warn("master {} joined: {}; add it to the load balancer (haproxy.cfg):{}", id, why, lines);
  };
  if (!cfg_.cluster_lb_admin) return print_lines("cluster_lb_admin is not set");
  auto cmds = lb_admin::runtime_add_commands(cfg_, m, b);
  if (!cmds) return print_lines(cmds.error());
  auto r = lb_admin::runtime_send(*cfg_.cluster_lb_admin, *cmds);
  if (!r) return print_lines("the load balancer refused (" + r.error() + ")");
  spdlog::info("master {} ({}) added to the load balancer ({}: {} and {})", id, host, *cfg_.cluster_lb_admin, b.publish,
               b.request);
}

std::string master_core::lb_remove(const std::string& id) {
  if (!cfg_.cluster_lb_admin) return "cluster_lb_admin is not set";
  // The server is named by the master's address (its bus address's host), as
  // sylvite-haproxy-cfg and lb_add_joined name them.
  std::string host;
  if (peers_)
    for (const auto& p : peers_->status())
      if (wire::get_text(p, "id").value_or("") == id)
        if (auto a = wire::get_text(p, "address"); a && !a->empty()) host = host_of(std::string(*a), cfg_.cluster_pool_port);
  if (host.empty()) return "the bus address of '" + id + "' is unknown (no link to it)";
  auto r = lb_admin::runtime_send(*cfg_.cluster_lb_admin, lb_admin::runtime_remove_commands(
                                                                 lb_admin::server_name(host), lb_backends(cfg_)));
  if (!r) return r.error();
  spdlog::info("master {} ({}) taken out of the load balancer ({})", id, host, *cfg_.cluster_lb_admin);
  return "";
}

// ---- local copy of cluster_pki_dir (a master that joined without the share) --------------
void master_core::on_peer_up(const std::string& id) {
  if (local_copy_ && peers_) {
    const bool queued = peers_->send(id, "key-sync", key_sync_request());
    spdlog::debug("minion keys asked of cluster peer {} (local cluster_pki_dir){}", id, queued ? "" : ": no link");
  }
}

void master_core::apply_peer_keys(const std::string& act, const std::vector<std::string>& ids, const value* pubs) {
  using pki::key_state;
  for (const auto& id : ids) {
    if (act == "accept") {
      auto pem = pubs && pubs->is_object() ? wire::get_text(*pubs, id) : std::nullopt;
      // A shared directory has the file already; a local copy (or a share that lost it)
      // gets it here. Never overwrite a different accepted key.
      if (pem && !keys_.exists(key_state::accepted, id) && crypto::rsa_key::from_public_pem(*pem)) {
        if (auto r = keys_.write(key_state::accepted, id, *pem); !r)
          spdlog::warn("cannot record the accepted key of {} from a cluster peer: {}", id, r.error().message());
        (void)keys_.remove(key_state::pending, id);
      }
    } else if (act == "reject") {  // on a shared directory already done: a no-op
      for (auto from : {key_state::accepted, key_state::pending})
        if (keys_.exists(from, id)) (void)keys_.move(id, from, key_state::rejected);
    } else if (act == "delete") {
      for (auto st : {key_state::accepted, key_state::pending, key_state::rejected, key_state::denied})
        (void)keys_.remove(st, id);
    }
  }
}

value master_core::key_snapshot() const {
  value snap = value::object();
  for (auto st : {pki::key_state::accepted, pki::key_state::rejected}) {
    value m = value::object();
    for (const auto& id : keys_.list(st))
      if (auto pem = keys_.read(st, id)) m[id] = *pem;
    snap[std::string(pki::state_name(st))] = std::move(m);
  }
  return snap;
}

value master_core::key_sync_request() {
  std::lock_guard lk(sync_mu_);
  return value{{"for", cfg_.id}, {"seq", static_cast<std::int64_t>(++sync_seq_)}};
}

void master_core::apply_key_snapshot(const std::string& from, const value& snap) {
  using pki::key_state;
  keys_synced_ = true;
  // Which of our requests this answers (0: not ours, e.g. broadcast for another master).
  std::uint64_t seq = 0;
  if (wire::get_text(snap, "for").value_or("") == cfg_.id)
    seq = static_cast<std::uint64_t>(std::max<std::int64_t>(0, wire::get_int(snap, "seq").value_or(0)));
  std::map<std::string, std::uint64_t> revoked;
  {
    std::lock_guard lk(sync_mu_);
    revoked = revoked_at_;
  }
  std::size_t added = 0, skipped = 0;
  for (auto st : {key_state::accepted, key_state::rejected}) {
    const value* m = wire::find(snap, std::string(pki::state_name(st)));
    if (!m || !m->is_object()) continue;
    for (auto it = m->begin(); it != m->end(); ++it) {
      const std::string id = it.key();
      auto pem = wire::as_text(it.value());
      if (!pki::valid_id(id) || !pem || keys_.exists(st, id) || !crypto::rsa_key::from_public_pem(*pem)) continue;
      if (auto rv = revoked.find(id); rv != revoked.end() && rv->second >= seq) {
        ++skipped;  // deleted or rejected here after this snapshot was asked for
        continue;
      }
      if (auto r = keys_.write(st, id, *pem); !r) {
        spdlog::warn("cannot record the key of {} from cluster peer {}: {}", id, from, r.error().message());
        continue;
      }
      (void)keys_.remove(key_state::pending, id);
      accepted_.invalidate(id);
      ++added;
    }
  }
  if (seq > 0) {  // a snapshot asked for after these revocations has the share's word on them
    std::lock_guard lk(sync_mu_);
    std::erase_if(revoked_at_, [&](const auto& kv) { return kv.second < seq; });
  }
  if (added) spdlog::info("{} minion key(s) copied from cluster peer {} (local cluster_pki_dir)", added, from);
  if (skipped)
    spdlog::debug("{} key(s) in the snapshot from {} not restored: revoked here after it was asked for", skipped, from);
}

void master_core::adopt_peer_aes(const std::string& from, const std::string& key) {
  if (!crypto::crypticle::from_key_string(key)) {
    spdlog::warn("cluster AES key from {} is not a key; ignored", from);
    return;
  }
  std::lock_guard flk(aes_file_mu_);
  if (key == aes_->current()->crypt.key_string()) return;
  if (auto r = util::write_file_atomic(*cfg_.cluster_pki_dir / ".aes", key, 0600); !r)
    spdlog::warn("cannot write {}/.aes: {}", cfg_.cluster_pki_dir->string(), r.error().message());
  std::error_code ec;
  aes_mtime_ = fs::last_write_time(*cfg_.cluster_pki_dir / ".aes", ec);
  use_cluster_aes(key, " (from cluster peer " + from + ")");
}

value master_core::cluster_status() const {
  value out = value::object();
  out["id"] = cfg_.id;
  out["cluster_id"] = cfg_.cluster_id.value_or("");
  out["peers"] = peers_ ? peers_->status() : value::array();
  return out;
}

bool master_core::key_event(const std::string& act, const std::vector<std::string>& ids) {
  bool rotated = false;
  const bool revoke = act == "reject" || act == "delete";
  local_key_effects(act, ids);
  if (clustered() && peers_ && !ids.empty()) {
    value v = value::array();
    for (const auto& id : ids) v.push_back(id);
    value msg{{"act", act}, {"ids", v}, {"local", local_copy_}};
    if (act == "accept") {  // the keys themselves, for peers whose cluster_pki_dir is a local copy
      value pubs = value::object();
      for (const auto& id : ids)
        if (auto pem = keys_.read(pki::key_state::accepted, id)) pubs[id] = *pem;
      msg["pubs"] = std::move(pubs);
    }
    peers_->broadcast("key", msg);
  }
  if (revoke && cfg_.rotate_aes_key && !ids.empty()) {
    rotated = static_cast<bool>(rotate_aes("key " + act));
    (void)util::remove_file(cfg_.cachedir / ".dfn");
  }
  spdlog::info("key event {} for {} minion(s){}", act, ids.size(), rotated ? ", AES key rotated" : "");
  return rotated;
}

void master_core::maintenance(sys_clock::time_point now) {
  const fs::path dfn = cfg_.cachedir / ".dfn";
  std::error_code ec;
  bool rotate = false;
  std::string why;
  if (fs::exists(dfn, ec) && !local_copy_) {  // a local copy leaves rotations to the share's masters
    rotate = true;
    why = "drop file";
  }
  auto cur = aes_->current();
  if (clustered() && local_copy_ && peers_ && (++sync_ticks_ % 12 == 0 || !keys_synced_)) {
    // A local copy asks one peer for the minion keys at every tick until a snapshot came
    // (the first answer can miss a link that was still being set up), then every minute
    // (auto-accepted keys raise no key event).
    if (auto peer = linked_peer()) peers_->send(*peer, "key-sync", key_sync_request());
  }
  if (clustered()) {
    reload_cluster_aes(false);  // a peer rotated: pick the key up even if its message is late
    std::error_code mec;
    auto mt = fs::last_write_time(*cfg_.cluster_pki_dir / ".aes", mec);
    const auto age = std::chrono::duration_cast<std::chrono::seconds>(fs::file_time_type::clock::now() - mt);
    if (!rotate && !mec && !local_copy_ && cfg_.publish_session > 0 &&
        age >= std::chrono::seconds(cfg_.publish_session)) {
      rotate = true;
      why = "publish_session elapsed";
    }
  } else if (!rotate && cfg_.publish_session > 0 && now - cur->created >= std::chrono::seconds(cfg_.publish_session)) {
    rotate = true;
    why = "publish_session elapsed";
  }
  if (rotate) {
    if (rotate_aes(why)) {
      if (why == "drop file") {
        ::chmod(dfn.c_str(), 0600);
        (void)util::remove_file(dfn);
      }
    }
  }
  if (cfg_.keep_jobs_seconds > 0 && now - last_clean_ >= std::chrono::hours(1)) {
    last_clean_ = now;
    auto n = jobs_->clean_old(std::chrono::seconds(cfg_.keep_jobs_seconds));
    if (n) spdlog::info("removed {} old job(s) from the job cache", n);
  }
}

}  // namespace sylvite::master
