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

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/master_sign.hpp"

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
  for (const auto& d : {cfg.pki_dir, cfg.cachedir, cfg.sock_dir, cfg.cachedir / "sessions", cfg.cachedir / "jobs",
                        cfg.cachedir / "minions"}) {
    auto r = util::make_dirs(d, 0700);
    if (!r) {
      spdlog::error("cannot create {}: {}", d.string(), r.error().message());
      return r.error();
    }
  }
  ::chmod(cfg.pki_dir.c_str(), 0700);
  ::chmod(cfg.sock_dir.c_str(), 0700);
  std::unique_ptr<master_core> m(new master_core(std::move(cfg)));
  auto kr = m->keys_.ensure_dirs();
  if (!kr) {
    spdlog::error("cannot create the key directories in {}: {}", m->keys_.dir().string(), kr.error().message());
    return kr.error();
  }
  auto mk = master_keys::load_or_generate(m->cfg_.pki_dir, m->cfg_.keysize);
  if (!mk) {
    spdlog::error("cannot load or generate the master key in {}: {}", m->cfg_.pki_dir.string(),
                  mk.error().message());
    return mk.error();
  }
  m->mkeys_ = std::move(*mk);
  if (m->cfg_.master_sign_pubkey) {
    auto signer = master_signer::load(m->cfg_);
    if (!signer) return signer.error();  // logged (Salt exits too)
    m->signer_ = std::move(*signer);
  }
  m->aes_ = std::make_unique<aes_manager>(m->mkeys_.priv());
  auto ar = m->aes_->rotate();
  if (!ar) {
    spdlog::error("cannot create the AES key: {}", ar.error().message());
    return ar.error();
  }
  m->sessions_ = std::make_unique<session_store>(m->cfg_.cachedir / "sessions",
                                                 std::chrono::seconds(m->cfg_.publish_session));
  // One master: returns are de-duplicated in memory and written by the job cache's writer
  // thread (the ack waits for no disk I/O). A cluster shares the cache: first-wins must be
  // decided on disk (link) across masters, so returns are written before the ack.
  m->jobs_ = std::make_unique<job_cache>(m->cfg_.cachedir, m->cfg_.hash_type,
                                         m->cfg_.cluster_id ? job_cache::write_mode::sync
                                                            : job_cache::write_mode::async);
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
    if (!accepted_.verify_token(sid, *tok)) return refuse_hello("token of '" + sid + "' did not verify");
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
  {
    std::lock_guard lk(publish_mu_);  // a publish never pairs an old serial with a new key
    r = aes_->rotate();
  }
  if (!r) {
    spdlog::error("AES key rotation ({}) failed: {}", why, r.error().message());
    return r;
  }
  counters_.rsa_private_ops++;
  spdlog::info("Rotating master AES key ({})", why);
  hub_.fire("key", value{{"rotate_aes_key", true}});
  if (cfg_.ping_on_rotate) {
    publish_request req;
    req.tgt = "*";
    req.fun = "test.ping";
    (void)publish(req);
  }
  return {};
}

bool master_core::key_event(const std::string& act, const std::vector<std::string>& ids) {
  bool rotated = false;
  const bool revoke = act == "reject" || act == "delete";
  for (const auto& id : ids) {
    if (!pki::valid_id(id)) continue;
    accepted_.invalidate(id);
    if (revoke) {
      sessions_->remove(id);
      if (sink_) sink_->disconnect(id);
    }
    if (act == "delete") mdata_->remove(id);
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
  if (fs::exists(dfn, ec)) {
    rotate = true;
    why = "drop file";
  }
  auto cur = aes_->current();
  if (!rotate && cfg_.publish_session > 0 && now - cur->created >= std::chrono::seconds(cfg_.publish_session)) {
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
