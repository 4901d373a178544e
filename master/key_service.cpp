// sylvite::master key service (key_service.hpp): keys, AES rotation, key events, the
// publish-port hello check, and the cluster's key messages. Moved out of master_core
// unchanged in behaviour; the Salt references are in the header.
#include "master/key_service.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "master/master_sign.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;
using wire::value;

namespace {
constexpr std::chrono::seconds kHelloGrace{120};  // previous AES key still opens hellos
// A local copy never removes an accepted key file this young (relative to the key-sync
// request) for want of it in the share's snapshot: salt-key on this master writes the
// file before the daemon hears of it.
constexpr std::chrono::seconds k_fresh_key_grace{15};
constexpr std::size_t k_sync_requests_kept = 16;
}

key_service::key_service(const config::master_config& cfg, master_links& links, master_counters& counters,
                         event_hub& events, minion_data_cache& mdata)
    : cfg_(cfg),
      links_(links),
      counters_(counters),
      events_(events),
      mdata_(mdata),
      keys_(cfg.cluster_id && cfg.cluster_pki_dir ? *cfg.cluster_pki_dir : cfg.pki_dir),
      accepted_(keys_) {}

key_service::~key_service() {
  if (aes_) save_unsettled();  // started: the last accepts and revokes made here
}

result<void> key_service::start(loaded_keys k) {
  mkeys_ = std::move(k.mkeys);
  own_ = std::move(k.own);
  signer_ = std::move(k.signer);
  local_copy_ = k.local_copy;
  aes_ = std::make_unique<aes_manager>(mkeys_->priv());
  if (clustered()) {
    auto af = cluster::load_or_create_aes(*cfg_.cluster_pki_dir);
    if (!af) {
      spdlog::critical("cannot read or create the cluster AES key {}/.aes: {}", cfg_.cluster_pki_dir->string(),
                       af.error().message());
      return af.error();
    }
    if (auto r = aes_->set_key_string(af->key); !r) return r.error();
    aes_mtime_ = af->mtime;
    if (local_copy_) {
      aes_gen_ = cluster::read_aes_gen(*cfg_.cluster_pki_dir);
      load_unsettled();
    }
  } else {
    auto ar = aes_->rotate();
    if (!ar) {
      spdlog::error("cannot create the AES key: {}", ar.error().message());
      return ar.error();
    }
  }
  sessions_ = std::make_unique<session_store>(cfg_.cachedir / "sessions", std::chrono::seconds(cfg_.publish_session));
  return {};
}

const master_keys& key_service::own_keys() const noexcept {
  return clustered() ? own_ : *mkeys_;  // mkeys_ swaps only in a cluster
}

peer_sink* key_service::peers() const noexcept { return links_.peers.load(); }

std::optional<std::string> key_service::identify_hello(const value& body, const std::string& peer,
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

result<void> key_service::rotate_aes(const std::string& why) { return rotate_aes(why, nullptr); }

result<void> key_service::rotate_aes(const std::string& why, const fs::path* dropfile) {
  result<void> r;
  std::optional<std::int64_t> gen;
  bool rotated_here = true;
  if (clustered() && local_copy_) {
    // The shared .aes is not ours to write: a member on the share rotates it and sends
    // the new key to every master, this one included.
    if (auto peer = linked_peer(); peer && peers()->send(*peer, cluster::msg::aes_rotate{why})) {
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
    auto rot = cluster::rotate_aes(*cfg_.cluster_pki_dir, aes_->current()->crypt.key_string(), dropfile);
    if (!rot) {
      spdlog::error("cluster AES key rotation ({}) failed: {}", why, rot.error().message());
      return rot.error();
    }
    rotated_here = rot->rotated;
    if (rot->now.gen > 0) gen = static_cast<std::int64_t>(rot->now.gen);
    std::lock_guard lk(publish_mu_);
    aes_mtime_ = rot->now.mtime;
    if (!rotated_here && rot->now.key == aes_->current()->crypt.key_string()) {
      // A drop file another master served while this one already serves its key: nothing
      // to tell (no second event, no second ping_on_rotate).
      spdlog::debug("cluster AES key rotation ({}): done by another master, its key already in use", why);
      return {};
    }
    if (rot->now.key != aes_->current()->crypt.key_string()) r = aes_->set_key_string(rot->now.key);
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
  events_.fire("key", value{{"rotate_aes_key", true}});
  // The key itself rides along (the links are encrypted): local-copy masters adopt it.
  if (clustered() && peers())
    peers()->broadcast(cluster::msg::aes{why, aes_->current()->crypt.key_string(), gen});
  if (after_rotation_) after_rotation_();
  return {};
}

std::shared_ptr<const master_keys> key_service::mkeys() const {
  std::lock_guard lk(mkeys_mu_);
  return mkeys_;
}

void key_service::use_cluster_key(crypto::rsa_key priv, const std::string& source) {
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

void key_service::peer_cluster_key(const std::string& from, const cluster::msg::cluster_key& m) {
  const std::string& pub = m.pub;  // not empty (decode)
  const fs::path cdir = *cfg_.cluster_pki_dir;
  if (local_copy_) {
    const value* mine = m.sealed_for(cfg_.id);
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

void key_service::on_peers_removed(const std::vector<std::string>& ids) {
  if (!clustered() || ids.empty()) return;
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
  if (local_copy_) {  // the share's members rotate; the new key reaches us over the bus
    spdlog::warn("cluster peer(s) {} removed (peers/<id>.pub deleted)", list);
    return;
  }
  // Every member sees the deletion: one rotation. If .aes was written after peers/ last
  // changed, a master (or salt-run cluster.remove) rotated after the removal already.
  // The key is picked up before the times are read: a rotation after that pick-up makes
  // rotate_aes below adopt it (the share no longer holds the key this master expects),
  // one before it shows in the times, so two members never rotate for one removal.
  const fs::path cdir = *cfg_.cluster_pki_dir;
  (void)reload_cluster_aes(false);
  std::error_code e1, e2;
  const auto removed_at = fs::last_write_time(cdir / "peers", e1);
  const auto aes_at = fs::last_write_time(cdir / ".aes", e2);
  if (!e1 && !e2 && aes_at >= removed_at) {
    spdlog::info("cluster peer(s) {} removed (peers/<id>.pub deleted); the AES key was rotated since", list);
    return;
  }
  (void)rotate_aes("cluster_pki_dir/peers/" + (ids.size() == 1 ? ids[0] + ".pub" : "{" + list + "}.pub") + " deleted");
}

bool key_service::reload_cluster_aes(bool force) {
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

bool key_service::use_cluster_aes(const std::string& key, const std::string& source) {
  {
    std::lock_guard lk(publish_mu_);  // a publish never pairs an old serial with a new key
    if (!aes_->set_key_string(key)) return false;
  }
  spdlog::info("Loaded the rotated cluster AES key{}", source);
  events_.fire("key", value{{"rotate_aes_key", true}});
  return true;
}

std::optional<std::string> key_service::linked_peer() const {
  if (!peers()) return std::nullopt;
  std::set<std::string> share;
  {
    std::lock_guard lk(sync_mu_);
    share = share_peers_;
  }
  // A peer on the share first: only its snapshot settles removals (reconcile_with_share).
  std::optional<std::string> first;
  for (const auto& p : peers()->status())
    if (wire::get_text(p, "state").value_or("") == "up")
      if (auto id = wire::get_text(p, "id"); id && !id->empty()) {
        if (share.contains(std::string(*id))) return std::string(*id);
        if (!first) first = std::string(*id);
      }
  return first;
}

void key_service::local_key_effects(const std::string& act, const std::vector<std::string>& ids) {
  const bool revoke = act == "reject" || act == "delete";
  if (local_copy_) {
    std::lock_guard lk(sync_mu_);
    for (const auto& id : ids) {
      if (revoke || act == "accept") pending_at_.erase(id);  // decided: no longer only pending here
      if (revoke) {
        revoked_at_[id] = sync_seq_;
        accepted_at_.erase(id);
      } else if (act == "accept") {
        revoked_at_.erase(id);
        revoked_here_.erase(id);  // accepted again, here or on a peer: the later word
      }
    }
  }
  for (const auto& id : ids) {
    if (!pki::valid_id(id)) continue;
    accepted_.invalidate(id);
    if (revoke) {
      sessions_->remove(id);
      if (auto* s = links_.pub.load()) s->disconnect(id);
    }
    if (act == "delete") mdata_.remove(id);
  }
}

void key_service::on_peer_up(const std::string& id) {
  if (local_copy_ && peers()) {
    const bool queued = peers()->send(id, key_sync_request());
    spdlog::debug("minion keys asked of cluster peer {} (local cluster_pki_dir){}", id, queued ? "" : ": no link");
  }
}

void key_service::apply_peer_keys(const std::string& act, const std::vector<std::string>& ids,
                                  const cluster::id_pems* pubs) {
  using pki::key_state;
  for (const auto& id : ids) {
    if (act == "accept") {
      const std::string* pem = pubs ? cluster::find_pem(*pubs, id) : nullptr;
      // A shared directory has the file already; a local copy (or a share that lost it)
      // gets it here. Never overwrite a different accepted key.
      if (pem && !keys_.exists(key_state::accepted, id) && crypto::rsa_key::from_public_pem(*pem)) {
        if (auto r = keys_.write(key_state::accepted, id, *pem); !r)
          spdlog::warn("cannot record the accepted key of {} from a cluster peer: {}", id, r.error().message());
        (void)keys_.remove(key_state::pending, id);
      }
    } else if (act == "pend") {
      // A minion signed in to a local copy: its key is pending on the share too, unless
      // the id has a key there in any state already (never replaced by a peer's word).
      const std::string* pem = pubs ? cluster::find_pem(*pubs, id) : nullptr;
      if (pem && !keys_.state_of(id) && !keys_.exists(key_state::denied, id) &&
          crypto::rsa_key::from_public_pem(*pem)) {
        if (auto r = keys_.write(key_state::pending, id, *pem); !r)
          spdlog::warn("cannot record the pending key of {} from a cluster peer: {}", id, r.error().message());
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

cluster::msg::keys key_service::key_snapshot() const {
  cluster::msg::keys snap;
  // Complete: both directories listed and every key in them read. A local copy removes
  // keys only on a complete snapshot from the share (a failed read is not a delete).
  bool complete = true;
  for (auto st : {pki::key_state::accepted, pki::key_state::rejected}) {
    auto& m = st == pki::key_state::accepted ? snap.accepted : snap.rejected;
    std::error_code ec;
    if (!fs::is_directory(keys_.dir() / std::string(pki::dir_name(st)), ec)) complete = false;
    for (const auto& id : keys_.list(st)) {
      if (auto pem = keys_.read(st, id)) m.emplace_back(id, *pem);
      else if (keys_.exists(st, id)) complete = false;  // not a key removed meanwhile
    }
  }
  snap.share = clustered() && !local_copy_ && complete;
  if (snap.share) snap.pending = keys_.list(pki::key_state::pending);
  if (clustered() && !local_copy_) {  // read under the lock: the key and its generation agree
    if (auto af = cluster::read_aes_locked(*cfg_.cluster_pki_dir); af && af->gen > 0) {
      snap.aes = af->key;
      snap.aes_gen = static_cast<std::int64_t>(af->gen);
    }
  }
  return snap;
}

cluster::msg::key_sync key_service::key_sync_request() {
  std::lock_guard lk(sync_mu_);
  ++sync_seq_;
  sync_sent_at_[sync_seq_] = fs::file_time_type::clock::now();
  while (sync_sent_at_.size() > k_sync_requests_kept) sync_sent_at_.erase(sync_sent_at_.begin());
  return cluster::msg::key_sync{cfg_.id, static_cast<std::int64_t>(sync_seq_)};
}

void key_service::note_accepted_here(const std::vector<std::string>& ids) {
  if (!local_copy_) return;
  std::lock_guard lk(sync_mu_);
  for (const auto& id : ids) accepted_at_[id] = sync_seq_;
}

void key_service::note_revoked_here(const std::string& act, const std::vector<std::string>& ids, bool rotate) {
  if (!local_copy_) return;
  std::lock_guard lk(sync_mu_);
  for (const auto& id : ids) revoked_here_[id] = revoke_here{act, sync_seq_, rotate};
}

void key_service::settle_revokes(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq) {
  std::set<std::string_view> on_share;
  for (const auto& [id, pem] : snap.accepted) on_share.insert(id);
  std::map<std::string, std::vector<std::string>> resend;  // act -> ids
  bool rotate = false;
  {
    std::lock_guard lk(sync_mu_);
    for (auto it = revoked_here_.begin(); it != revoked_here_.end();) {
      if (it->second.seq >= seq) {  // made after the request: not in this answer yet
        ++it;
      } else if (on_share.contains(it->first)) {
        resend[it->second.act].push_back(it->first);
        rotate = rotate || it->second.rotate;
        ++it;
      } else {
        it = revoked_here_.erase(it);  // the share no longer has it accepted
      }
    }
  }
  if (resend.empty() || !peers()) return;
  for (auto& [act, ids] : resend) {
    spdlog::warn("{} minion key(s) {} here are still accepted on the cluster's share (snapshot from {}): told the "
                 "peers again",
                 ids.size(), act == "delete" ? "deleted" : "rejected", from);
    peers()->broadcast(cluster::msg::key_event{act, std::move(ids), true, std::nullopt});
  }
  if (rotate && cfg_.rotate_aes_key) peers()->send(from, cluster::msg::aes_rotate{"key revoked on a local copy"});
}

void key_service::settle_pending(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq) {
  using pki::key_state;
  std::set<std::string_view> listed;
  for (const auto& [id, pem] : snap.accepted) listed.insert(id);
  for (const auto& [id, pem] : snap.rejected) listed.insert(id);
  for (const auto& id : snap.pending) listed.insert(id);
  std::vector<std::string> check;
  {
    std::lock_guard lk(sync_mu_);
    for (auto it = pending_at_.begin(); it != pending_at_.end();) {
      if (it->second >= seq) {  // went pending after the request: not in this answer yet
        ++it;
      } else if (listed.contains(it->first)) {
        it = pending_at_.erase(it);  // the share has it (pending, or decided there)
      } else {
        check.push_back(it->first);
        ++it;
      }
    }
  }
  cluster::msg::key_event msg{"pend", {}, true, cluster::id_pems{}};
  std::vector<std::string> gone;
  for (const auto& id : check) {
    if (auto pem = keys_.read(key_state::pending, id)) {
      msg.ids.push_back(id);
      msg.pubs->emplace_back(id, *pem);
    } else if (!keys_.exists(key_state::pending, id)) {
      gone.push_back(id);  // accepted, rejected or deleted here meanwhile
    }
  }
  if (!gone.empty()) {
    std::lock_guard lk(sync_mu_);
    for (const auto& id : gone) pending_at_.erase(id);
  }
  if (msg.ids.empty() || !peers()) return;
  spdlog::info("{} minion key(s) pending here are not on the cluster's share (snapshot from {}): told the peers again",
               msg.ids.size(), from);
  peers()->broadcast(msg);
}

std::optional<cluster::unsettled_keys> key_service::read_unsettled_locked(std::string_view lost) {
  const auto file = (*cfg_.cluster_pki_dir / cluster::k_unsettled_keys_file).string();
  std::size_t skipped = 0;
  auto u = cluster::read_unsettled_keys(*cfg_.cluster_pki_dir, &skipped);
  if (!u) {
    std::error_code ec;
    fs::rename(file, file + ".bad", ec);
    spdlog::error("cannot read {}: {}; set aside as {}.bad: {}", file, u.error().message(), file, lost);
    return std::nullopt;
  }
  if (skipped) spdlog::warn("{}: {} entr(y/ies) with an invalid id or act ignored", file, skipped);
  return std::move(*u);
}

std::map<std::string, std::vector<std::string>> key_service::adopt_unsettled(const cluster::unsettled_keys& u) {
  using pki::key_state;
  std::map<std::string, std::vector<std::string>> adopted;  // act -> ids
  std::lock_guard lk(sync_mu_);
  // At sync_seq_: the answer to the next request settles them. An entry the key files no
  // longer match (the accepted key gone, the revoked one accepted again) is dropped.
  for (const auto& id : u.accepted)
    if (!accepted_at_.contains(id) && keys_.exists(key_state::accepted, id)) {
      accepted_at_[id] = sync_seq_;
      adopted["accept"].push_back(id);
    }
  for (const auto& [id, r] : u.revoked)
    if (!revoked_here_.contains(id) && !keys_.exists(key_state::accepted, id)) {
      revoked_here_[id] = revoke_here{r.act, sync_seq_, r.rotate};
      adopted[r.act].push_back(id);
    }
  for (const auto& id : u.pending)
    if (!pending_at_.contains(id) && keys_.exists(key_state::pending, id)) {
      pending_at_[id] = sync_seq_;
      adopted["pend"].push_back(id);
    }
  return adopted;
}

void key_service::load_unsettled() {
  const auto file = (*cfg_.cluster_pki_dir / cluster::k_unsettled_keys_file).string();
  std::map<std::string, std::vector<std::string>> adopted;
  {
    std::lock_guard wl(unsettled_mu_);
    std::error_code ec;
    unsettled_mtime_ = fs::last_write_time(file, ec);
    auto u = read_unsettled_locked(
        "the key changes made here that the cluster's share had not confirmed are not told again (run salt-key "
        "again for them)");
    if (!u) return;
    adopted = adopt_unsettled(*u);
    unsettled_saved_ = std::move(*u);
  }
  const std::size_t revokes = adopted["reject"].size() + adopted["delete"].size();
  if (!adopted.empty())
    spdlog::info("{} accept(s), {} reject(s)/delete(s) and {} pending key(s) made here are not yet confirmed by the "
                 "cluster's share ({}): told again at its next answer",
                 adopted["accept"].size(), revokes, adopted["pend"].size(), file);
  save_unsettled();  // entries that no longer match the key files are dropped
}

void key_service::save_unsettled() {
  if (!clustered() || !local_copy_) return;
  std::lock_guard wl(unsettled_mu_);
  cluster::unsettled_keys now;
  {
    std::lock_guard lk(sync_mu_);
    for (const auto& [id, seq] : accepted_at_) now.accepted.insert(id);
    for (const auto& [id, r] : revoked_here_) now.revoked[id] = cluster::unsettled_keys::revoke{r.act, r.rotate};
    for (const auto& [id, seq] : pending_at_)
      if (!now.accepted.contains(id) && !now.revoked.contains(id)) now.pending.insert(id);
  }
  if (now == unsettled_saved_) return;
  const auto file = *cfg_.cluster_pki_dir / cluster::k_unsettled_keys_file;
  if (auto r = cluster::write_unsettled_keys(*cfg_.cluster_pki_dir, now); !r) {
    if (!unsettled_write_failed_)  // once until a write succeeds again
      spdlog::error("cannot write {}: {}; a restart of this master would forget key changes the cluster's share has "
                    "not confirmed",
                    file.string(), r.error().message());
    unsettled_write_failed_ = true;
    return;
  }
  if (unsettled_write_failed_) spdlog::info("{} written again", file.string());
  unsettled_write_failed_ = false;
  unsettled_saved_ = std::move(now);
  std::error_code ec;
  unsettled_mtime_ = fs::last_write_time(file, ec);
}

void key_service::pick_up_unsettled() {
  const auto file = *cfg_.cluster_pki_dir / cluster::k_unsettled_keys_file;
  std::map<std::string, std::vector<std::string>> added;  // act -> ids
  {
    std::lock_guard wl(unsettled_mu_);
    std::error_code ec;
    const auto mt = fs::last_write_time(file, ec);
    if (ec || mt == unsettled_mtime_) return;  // none, or the one this master wrote
    unsettled_mtime_ = mt;
    auto u = read_unsettled_locked("the changes salt-key made there are not applied");
    if (!u) {
      unsettled_saved_ = {};  // the next save writes this master's state again
      return;
    }
    added = adopt_unsettled(*u);
    unsettled_saved_ = std::move(*u);
  }
  added.erase("pend");  // salt-key writes none; a master's own are in memory already
  for (const auto& [act, ids] : added) {
    // salt-key could not reach this master: its sessions and cached keys end now.
    local_key_effects(act, ids);
    spdlog::info("{} key {} made with salt-key while this master could not be told, picked up from {}", ids.size(),
                 act, file.string());
  }
}

void key_service::key_written_here(pki::key_state st, const std::string& id, const std::string& pem) {
  using pki::key_state;
  if (!clustered() || !local_copy_ || !pki::valid_id(id)) return;
  if (st != key_state::accepted && st != key_state::pending) return;
  const bool accepted = st == key_state::accepted;
  if (accepted) {
    note_accepted_here({id});
  } else {
    std::lock_guard lk(sync_mu_);
    pending_at_[id] = sync_seq_;
  }
  if (!peers()) return;  // sent again at the next snapshot from the share
  peers()->broadcast(cluster::msg::key_event{accepted ? "accept" : "pend", {id}, true, cluster::id_pems{{id, pem}}});
  spdlog::debug("key of {} {} here (local cluster_pki_dir): told the cluster peers", id,
                accepted ? "accepted" : "pending");
}

void key_service::reconcile_with_share(const std::string& from, const cluster::msg::keys& snap, std::uint64_t seq) {
  using pki::key_state;
  fs::file_time_type sent{};
  std::map<std::string, std::uint64_t> here;
  {
    std::lock_guard lk(sync_mu_);
    auto it = sync_sent_at_.find(seq);
    if (it == sync_sent_at_.end()) return;  // an old request: which files are fresh is unknown
    sent = it->second;
    here = accepted_at_;
  }
  std::map<std::string_view, std::string_view> on_share;
  std::set<std::string_view> rejected_there;
  for (const auto& [id, pem] : snap.accepted) on_share.emplace(id, pem);
  for (const auto& [id, pem] : snap.rejected) rejected_there.insert(id);
  auto fresh = [&](const std::string& id) {  // written within the grace before the request
    std::error_code ec;
    const auto mt = fs::last_write_time(keys_.path(key_state::accepted, id), ec);
    return ec || mt > sent - k_fresh_key_grace;
  };
  std::vector<std::string> deleted, rejected, replaced, resend, settled;
  for (const auto& id : keys_.list(key_state::accepted)) {
    const auto h = here.find(id);
    if (auto os = on_share.find(id); os != on_share.end()) {
      // The share holds another key under this id (the minion's key was replaced there
      // while this master did not hear it): the share's key, unless ours is newer than
      // the answer. An accept made here of a different key was refused by the share.
      auto mine = keys_.read(key_state::accepted, id);
      if (mine && *mine != os->second && crypto::rsa_key::from_public_pem(std::string(os->second)) &&
          !(h != here.end() ? h->second >= seq : fresh(id))) {
        if (auto r = keys_.write(key_state::accepted, id, os->second); r) replaced.push_back(id);
        else spdlog::warn("cannot replace the key of {} with the share's: {}", id, r.error().message());
      }
      if (h != here.end() && h->second < seq) settled.push_back(id);  // the share has it now
      continue;
    }
    if (h != here.end()) {
      // Accepted here. After the request: not in this answer yet. Before it: the share
      // never got it (a lost message, or no peer at the time): told again, unless the
      // share rejected it meanwhile.
      if (h->second >= seq) continue;
      if (!rejected_there.contains(id)) {
        resend.push_back(id);
        continue;
      }
    } else if (fresh(id)) {
      continue;
    }
    if (rejected_there.contains(id)) {
      auto r = keys_.exists(key_state::rejected, id) ? keys_.remove(key_state::accepted, id)
                                                     : keys_.move(id, key_state::accepted, key_state::rejected);
      if (r) rejected.push_back(id);
      else spdlog::warn("cannot reject the key of {} (rejected on the share): {}", id, r.error().message());
    } else if (auto r = keys_.remove(key_state::accepted, id); r) {
      deleted.push_back(id);
    } else {
      spdlog::warn("cannot remove the key of {} (not on the share): {}", id, r.error().message());
    }
  }
  {
    std::lock_guard lk(sync_mu_);
    for (const auto& id : settled)
      if (auto it = accepted_at_.find(id); it != accepted_at_.end() && it->second < seq) accepted_at_.erase(it);
    for (const auto& id : rejected) accepted_at_.erase(id);
  }
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 10; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 10) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  if (!deleted.empty()) {
    local_key_effects("delete", deleted);
    spdlog::warn("{} accepted minion key(s) removed: not on the cluster's share (deleted there while this master did "
                 "not hear it; snapshot from {}): {}",
                 deleted.size(), from, names(deleted));
  }
  if (!replaced.empty()) {
    // Sessions made for the old key end; the minion signs in again with the share's.
    local_key_effects("reject", replaced);
    spdlog::warn("{} accepted minion key(s) replaced by the key on the cluster's share (changed there while this "
                 "master did not hear it, or an accept here the share refused; snapshot from {}): {}",
                 replaced.size(), from, names(replaced));
  }
  if (!rejected.empty()) {
    local_key_effects("reject", rejected);
    spdlog::warn("{} accepted minion key(s) moved to rejected: rejected on the cluster's share (snapshot from {}): {}",
                 rejected.size(), from, names(rejected));
  }
  if (!resend.empty() && peers()) {
    cluster::msg::key_event msg{"accept", {}, true, cluster::id_pems{}};
    for (const auto& id : resend)
      if (auto pem = keys_.read(key_state::accepted, id)) {
        msg.ids.push_back(id);
        msg.pubs->emplace_back(id, *pem);
      }
    if (!msg.ids.empty()) {
      peers()->broadcast(msg);
      spdlog::info("{} minion key(s) accepted here but not on the cluster's share: told the peers again: {}",
                   msg.ids.size(), names(msg.ids));
    }
  }
}

void key_service::apply_key_snapshot(const std::string& from, const cluster::msg::keys& snap) {
  using pki::key_state;
  keys_synced_ = true;
  if (snap.aes && snap.aes_gen) adopt_peer_aes(from, *snap.aes, snap.aes_gen);
  // Which of our requests this answers (0: not ours, e.g. broadcast for another master).
  std::uint64_t seq = 0;
  if (snap.asker.value_or("") == cfg_.id)
    seq = static_cast<std::uint64_t>(std::max<std::int64_t>(0, snap.seq.value_or(0)));
  std::map<std::string, std::uint64_t> revoked;
  std::set<std::string> revoked_here;
  {
    std::lock_guard lk(sync_mu_);
    revoked = revoked_at_;
    for (const auto& [id, r] : revoked_here_) revoked_here.insert(id);
    if (snap.share) share_peers_.insert(from);
    else share_peers_.erase(from);
  }
  if (snap.share && seq > 0) {
    reconcile_with_share(from, snap, seq);
    settle_revokes(from, snap, seq);
    settle_pending(from, snap, seq);
  }
  std::size_t added = 0, skipped = 0;
  for (auto st : {key_state::accepted, key_state::rejected}) {
    for (const auto& [id, pem] : st == key_state::accepted ? snap.accepted : snap.rejected) {
      if (!pki::valid_id(id) || keys_.exists(st, id) || !crypto::rsa_key::from_public_pem(pem)) continue;
      // Accepted here and rejected there: reconcile_with_share decides (kept while fresh).
      if (st == key_state::rejected && keys_.exists(key_state::accepted, id)) continue;
      if (auto rv = revoked.find(id); rv != revoked.end() && rv->second >= seq) {
        ++skipped;  // deleted or rejected here after this snapshot was asked for
        continue;
      }
      if (st == key_state::accepted && revoked_here.contains(id)) {
        ++skipped;  // rejected or deleted with salt-key here, not yet on the share
        continue;
      }
      if (auto r = keys_.write(st, id, pem); !r) {
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
  if (snap.share && seq > 0) save_unsettled();  // what this answer settled
  if (added) spdlog::info("{} minion key(s) copied from cluster peer {} (local cluster_pki_dir)", added, from);
  if (skipped)
    spdlog::debug("{} key(s) in the snapshot from {} not restored: revoked here after it was asked for", skipped, from);
}

void key_service::adopt_peer_aes(const std::string& from, const std::string& key,
                                 std::optional<std::int64_t> gen) {
  if (!crypto::crypticle::from_key_string(key)) {
    spdlog::warn("cluster AES key from {} is not a key; ignored", from);
    return;
  }
  std::lock_guard flk(aes_file_mu_);
  // Peers' messages arrive in no common order (one link each): two rotations close
  // together can reach this master newest first. The generation tells which is later.
  const std::uint64_t g = gen ? static_cast<std::uint64_t>(*gen) : 0;
  if (g > 0 && g <= aes_gen_) {
    if (key != aes_->current()->crypt.key_string())
      spdlog::debug("cluster AES key of generation {} from {} ignored: generation {} is in use", g, from, aes_gen_);
    return;
  }
  const bool changed = key != aes_->current()->crypt.key_string();
  if (changed) {
    if (auto r = util::write_file_atomic(*cfg_.cluster_pki_dir / ".aes", key, 0600); !r)
      spdlog::warn("cannot write {}/.aes: {}", cfg_.cluster_pki_dir->string(), r.error().message());
    std::error_code ec;
    aes_mtime_ = fs::last_write_time(*cfg_.cluster_pki_dir / ".aes", ec);
  }
  if (g > 0) {  // after the key, as on the share: a stop in between leaves an older generation, never a newer one
    aes_gen_ = g;
    if (auto r = cluster::write_aes_gen(*cfg_.cluster_pki_dir, g); !r)
      spdlog::warn("cannot write {}/.aes.gen: {}", cfg_.cluster_pki_dir->string(), r.error().message());
  }
  if (changed) use_cluster_aes(key, " (from cluster peer " + from + ")");
}

bool key_service::key_event(const std::string& act, const std::vector<std::string>& ids, bool rotate) {
  bool rotated = false;
  const bool revoke = act == "reject" || act == "delete";
  local_key_effects(act, ids);
  if (act == "accept" && clustered()) note_accepted_here(ids);  // a local copy: until the share has them
  if (revoke && clustered()) note_revoked_here(act, ids, rotate);
  save_unsettled();  // salt-key acted: on disk before it is answered
  // salt/key, one per id, as salt/key.py: {result, act, id, pub (accept/reject)}. Fired on
  // this master only (the cluster forwards it to the peers' buses).
  for (const auto& id : ids) {
    value ev = value::object();
    ev["result"] = true;
    ev["act"] = act;
    ev["id"] = id;
    if (act == "accept" || act == "reject") {
      if (auto pem = keys_.read(act == "accept" ? pki::key_state::accepted : pki::key_state::rejected, id))
        ev["pub"] = *pem;
    }
    events_.fire("salt/key", ev);
  }
  if (clustered() && peers() && !ids.empty()) {
    cluster::msg::key_event msg{act, ids, local_copy_, std::nullopt};
    if (act == "accept") {  // the keys themselves, for peers whose cluster_pki_dir is a local copy
      msg.pubs.emplace();
      for (const auto& id : ids)
        if (auto pem = keys_.read(pki::key_state::accepted, id)) msg.pubs->emplace_back(id, *pem);
    }
    peers()->broadcast(msg);
  }
  if (revoke && rotate && cfg_.rotate_aes_key && !ids.empty()) {
    rotated = static_cast<bool>(rotate_aes("key " + act));
    (void)util::remove_file(cfg_.cachedir / ".dfn");
  }
  spdlog::info("key event {} for {} minion(s){}", act, ids.size(), rotated ? ", AES key rotated" : "");
  return rotated;
}

void key_service::maintenance(sys_clock::time_point now) {
  const fs::path dfn = cfg_.cachedir / ".dfn";
  std::error_code ec;
  bool rotate = false;
  std::string why;
  if (fs::exists(dfn, ec) && !local_copy_) {  // a local copy leaves rotations to the share's masters
    rotate = true;
    why = "drop file";
  }
  auto cur = aes_->current();
  if (clustered() && local_copy_ && peers() && (++sync_ticks_ % 12 == 0 || !keys_synced_)) {
    // A local copy asks one peer for the minion keys at every tick until a snapshot came
    // (the first answer can miss a link that was still being set up), then every minute
    // (auto-accepted keys raise no key event).
    if (auto peer = linked_peer()) peers()->send(*peer, key_sync_request());
  }
  if (clustered() && local_copy_) {
    pick_up_unsettled();
    save_unsettled();  // auto-accepts and settled entries since the last tick
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
    // Clustered, the drop file is checked and removed under the share's lock: the masters
    // sharing cachedir tick together and would otherwise rotate once each.
    const bool dropped = why == "drop file";
    if (rotate_aes(why, dropped && clustered() ? &dfn : nullptr) && dropped && !clustered()) {
      ::chmod(dfn.c_str(), 0600);
      (void)util::remove_file(dfn);
    }
  }
}

std::pair<value, int> key_service::rotate_cluster_key() {
  // docs/security.md section 6: new cluster key pair on the share, every member told over
  // the bus (a local copy gets the key sealed to its peers/<id>.pub), the minions' pub_sig
  // re-made for the new key, then the cluster AES key rotated so every minion signs in
  // again and meets the new key.
  if (!clustered()) return {"This master is not in a cluster (cluster_id is not set)", 1};
  if (local_copy_)
    return {"cluster_pki_dir of this master is a local copy (made by a join): run salt-run cluster.rotate_key on a "
            "master whose cluster_pki_dir is the shared directory",
            1};
  const std::filesystem::path cdir = *cfg_.cluster_pki_dir;
  auto fp = [](const std::string& pem) {
    auto f = crypto::pem_fingerprint(pem, "sha256");
    return f ? *f : std::string("?");
  };
  // Sealed copies for every other member, made before anything changes (a peer key that
  // cannot be read is reported, not fatal: a member on the share reads the file).
  auto peer_keys = cluster::list_peer_keys(cdir);
  std::unique_lock flk(aes_file_mu_);
  auto rot = cluster::rotate_cluster_keys(cdir, cfg_.keysize);
  if (!rot) {
    spdlog::error("salt-run cluster.rotate_key failed: {}", rot.error().message());
    return {"cannot rotate the cluster key pair in " + cdir.string() + ": " + rot.error().message() +
                " (the old key pair is still in use)",
            1};
  }
  flk.unlock();
  cluster::msg::cluster_key note;  // the new pub, the private key sealed to each member
  value told = value::array();
  for (const auto& [id, pub] : peer_keys) {
    if (id == cfg_.id) continue;
    note.sealed.emplace_back(id, cluster::seal_to(pub, rot->priv.private_pem()));
    told.push_back(id);
  }
  const std::string new_pub = rot->pub_pem;
  use_cluster_key(rot->priv, " (salt-run cluster.rotate_key)");
  note.pub = new_pub;
  if (auto* p = peers()) p->broadcast(note);
  value ret = value::object();
  ret["old_fingerprint"] = rot->old_pub_pem.empty() ? std::string("") : fp(rot->old_pub_pem);
  ret["new_fingerprint"] = fp(new_pub);
  ret["old_key_kept"] = (cdir / "cluster.pem.old").string();
  ret["members_told"] = told;
  int rc = 0;
  std::string why;
  if (signer_) {
    if (cfg_.master_use_pubkey_signature) {
      ret["master_pubkey_signature"] =
          "NOT re-made: master_use_pubkey_signature sends the pre-computed file " +
          (cfg_.pki_dir / pubkey_signature_name(cfg_)).string() +
          ", which signs the old key; re-create it for the new cluster.pub and restart the masters";
      rc = 1;
      why = "pre-computed master pubkey signature";
    } else {
      auto ps = signer_->pub_sig(mkeys()->pub_clean(), crypto::sig_algo::pkcs1v15_sha1);
      ret["master_pubkey_signature"] = ps ? std::string("re-made with ") + cfg_.master_sign_key_name + ".pem"
                                          : std::string("signing failed");
      if (!ps) rc = 1;
    }
  } else {
    ret["master_pubkey_signature"] =
        "off (master_sign_pubkey is not set): minions refuse the new key until their minion_master.pub is removed";
  }
  const bool aes = static_cast<bool>(rotate_aes("cluster.rotate_key"));
  ret["aes_rotated"] = aes;
  if (!aes) rc = 1;
  spdlog::warn("cluster key pair rotated by salt-run cluster.rotate_key: {} -> {}; {} member(s) told",
               ret["old_fingerprint"].get<std::string>(), ret["new_fingerprint"].get<std::string>(), told.size());
  return {ret, rc};
}

void key_service::peer_aes(const std::string& from, const cluster::msg::aes& m) {
  if (local_copy_ && m.key) adopt_peer_aes(from, *m.key, m.gen);
  else reload_cluster_aes(true);
}

void key_service::peer_key_event(const std::string& from, const cluster::msg::key_event& m) {
  std::vector<std::string> v;
  for (const auto& id : m.ids)
    if (pki::valid_id(id)) v.push_back(id);
  // Accepted keys are written from the event only where the share does not have them
  // already: on a local copy, or from a local copy's own salt-key (a late event
  // must not bring back a key deleted on the share meanwhile).
  apply_peer_keys(m.act, v, (local_copy_ || m.local) && m.pubs ? &*m.pubs : nullptr);
  local_key_effects(m.act, v);
  spdlog::info("key event {} for {} minion(s) from cluster peer {}", m.act, v.size(), from);
}

void key_service::peer_asks_rotation(const std::string& from, const cluster::msg::aes_rotate& m) {
  // Asked by a master whose cluster_pki_dir is a local copy.
  if (!local_copy_) (void)rotate_aes("asked by cluster peer " + from + ": " + m.why);
}

void key_service::peer_asks_keys(const std::string& from, const cluster::msg::key_sync& m) {
  // A local-copy peer asks for the minion keys. Our link to a new master may not know its
  // id yet: then every peer gets it (only a local copy applies it).
  spdlog::debug("cluster peer {} asks for the minion keys", from);
  auto* p = peers();
  if (!p) return;
  auto snap = key_snapshot();
  // Echoed: the asker tells its own answers from a broadcast one, and which request
  // this answers.
  if (m.asker && pki::valid_id(*m.asker)) snap.asker = *m.asker;
  if (m.seq && *m.seq > 0) snap.seq = *m.seq;
  if (!p->send(from, snap)) p->broadcast(snap);
}

void key_service::peer_keys(const std::string& from, const cluster::msg::keys& m) {
  spdlog::debug("minion keys from cluster peer {}{}", from, local_copy_ ? "" : " (ignored: shared cluster_pki_dir)");
  if (local_copy_) apply_key_snapshot(from, m);
}

}  // namespace sylvite::master
