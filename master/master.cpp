// sylvite::master core (master.hpp): the composition root. Creation (directories, keys,
// the cluster join), the services wired together, presence events and the maintenance
// tick handed to the services.
#include "master/master.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "master/job_store_pg.hpp"
#include "master/master_sign.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;
using wire::value;

struct master_core::presence_state {
  bool enabled = false;
  std::chrono::seconds interval{60};
  std::mutex mu;
  std::set<std::string> present;  // as last reported
  sys_clock::time_point last{};
};

master_core::master_core(config::master_config cfg)
    : cfg_(std::move(cfg)),
      mdata_(std::make_unique<minion_data_cache>(cfg_.cachedir, cfg_.minion_data_cache)),
      keys_(std::make_unique<key_service>(cfg_, links_, counters_, hub_, *mdata_)),
      seen_(std::make_unique<presence_table>(cfg_.cluster_id.has_value())),
      presence_(std::make_unique<presence_state>()) {
  // Salt's options, read from the merged config (types as salt/config: bool, int seconds).
  if (const value* p = wire::find(cfg_.raw, "presence_events"); p && p->is_boolean()) presence_->enabled = p->get<bool>();
  if (auto li = wire::get_int(cfg_.raw, "loop_interval"); li && *li > 0) presence_->interval = std::chrono::seconds(*li);
}

namespace {
// Holds the renderer the pillar compiler calls, so that set_renderer can replace it.
class forwarding_renderer final : public render::renderer {
 public:
  explicit forwarding_renderer(std::unique_ptr<render::renderer> r) : inner_(std::move(r)) {}
  render::outcome render(const render::request& r) override { return inner_->render(r); }
  void reset(std::unique_ptr<render::renderer> r) { inner_ = std::move(r); }

 private:
  std::unique_ptr<render::renderer> inner_;
};
}  // namespace

void master_core::set_renderer(std::unique_ptr<render::renderer> r) {
  if (r) static_cast<forwarding_renderer&>(*renderer_).reset(std::move(r));
}

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
    if (auto kr = m->keys_->store().ensure_dirs(); !kr) {
      spdlog::error("cannot create the key directories in {}: {}", m->keys_->store().dir().string(),
                    kr.error().message());
      return kr.error();
    }
  }
  auto mk = master_keys::load_or_generate(m->cfg_.pki_dir, m->cfg_.keysize);
  if (!mk) {
    spdlog::error("cannot load or generate the master key in {}: {}", m->cfg_.pki_dir.string(),
                  mk.error().message());
    return mk.error();
  }
  key_service::loaded_keys loaded;
  std::string join_state = "standalone";  // cluster.peers "join"
  if (m->clustered()) {
    join_state = "member";
    // Cluster: this master's own key authenticates it to its peers (peers/<id>.pub);
    // minions only ever see the cluster key pair and the cluster AES key.
    const fs::path cdir = *m->cfg_.cluster_pki_dir;
    if (!cluster::valid_peer_id(m->cfg_.id)) {
      spdlog::critical("id '{}' cannot name a cluster peer (cluster_pki_dir/peers/<id>.pub)", m->cfg_.id);
      return make_error_code(cluster::errc::bad_id);
    }
    loaded.own = std::move(*mk);
    if (auto r = util::make_dirs(cdir, 0700); !r) {
      spdlog::critical("cannot create cluster_pki_dir {}: {}", cdir.string(), r.error().message());
      return r.error();
    }
    if (join && (m->cfg_.cluster_secret || m->cfg_.cluster_pub_fingerprint) && !m->cfg_.cluster_peers.empty() &&
        !cluster::is_member_dir(cdir, m->cfg_.id)) {
      // Not a member yet (no cluster.pem): join through cluster_peers (docs/cluster.md,
      // "Joining and leaving"). A refusal stops the start; no reachable member means a new
      // cluster (bootstrap) unless cluster_pub_fingerprint says the cluster key exists.
      auto jr = join(loaded.own.priv());
      if (jr && *jr) join_state = "joined";
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
    if (auto r = cluster::ensure_peer_key(cdir, m->cfg_.id, loaded.own.priv().public_pem()); !r) {
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
    if (ck->created && join_state == "member") join_state = "founder";  // it made the cluster key
    loaded.mkeys = std::make_shared<const master_keys>(master_keys::from_key(std::move(ck->priv)));
    loaded.local_copy = cluster::is_local_copy(cdir);
    if (loaded.local_copy)
      spdlog::info("cluster_pki_dir {} is a local copy (made by the join): minion keys and the cluster AES key "
                   "follow the peers over the bus",
                   cdir.string());
  } else {
    loaded.mkeys = std::make_shared<const master_keys>(std::move(*mk));
  }
  if (m->cfg_.master_sign_pubkey) {
    auto signer = master_signer::load(m->cfg_);
    if (!signer) return signer.error();  // logged (Salt exits too)
    loaded.signer = std::move(*signer);
  }
  if (auto r = m->keys_->start(std::move(loaded)); !r) return r.error();
  // Every master keeps a return on disk before the minion gets its ack (no fsync: group
  // commit), so an acknowledged return survives a master crash or SIGKILL: a single
  // master in its journal (job_cache.hpp, journal mode; return.p follows on idle CPU), a
  // cluster member (shared cache: first-wins decided on disk across masters) or
  // job_cache_journal: False as return.p itself. The async mode (ack before the write)
  // would lose the queued ones, so it stays off (opt-in: job_cache_async, a sylvite
  // extension).
  // pgjobs (issue 20): master_job_cache: pgjsonb keeps jobs in PostgreSQL (Salt's pgjsonb
  // tables), acknowledged once in its local spool (master/job_store_pg.hpp).
  std::string pg_error;
  auto pgo = pg::parse_options(m->cfg_.raw, m->cfg_.cachedir, m->cfg_.id, pg_error);
  if (!pgo) {
    spdlog::error("invalid PostgreSQL job cache options: {}", pg_error);
    return util::errc::invalid_argument;
  }
  if (!pgo->unsupported_cache.empty())
    spdlog::error("master_job_cache: {} is not a job cache sylvite has (local_cache, pgjsonb): jobs are kept in "
                  "the file cache",
                  pgo->unsupported_cache);
  std::unique_ptr<job_store> store;
  if (pgo->job_cache) {
    auto pgs = pg::job_store_pg::create(*pgo);
    if (!pgs) return pgs.error();
    store = std::move(*pgs);
  } else {
    auto mode = job_cache::write_mode::sync;
    if (!m->cfg_.cluster_id) {
      if (m->cfg_.job_cache_async) mode = job_cache::write_mode::async;
      else if (m->cfg_.job_cache_journal) mode = job_cache::write_mode::journal;
    }
    auto fc = std::make_unique<job_cache>(m->cfg_.cachedir, m->cfg_.hash_type, mode);
    m->file_jobs_ = fc.get();
    store = std::move(fc);
  }
  m->jobs_ = std::make_unique<job_service>(m->cfg_, m->links_, m->counters_, m->hub_, *m->keys_, *m->mdata_,
                                           std::move(store));
  m->files_ = std::make_unique<fileserver>(m->cfg_);
  {
    render::pool_options popt;
    popt.workers = static_cast<unsigned>(m->cfg_.pillar_render_workers);
    m->renderer_ = std::make_unique<forwarding_renderer>(render::make_process_pool(popt));
  }
  m->pillar_ = std::make_unique<pillar_compiler>(m->cfg_, *m->renderer_);
  {
    // The mine (master/mine.hpp): Salt stores it when minion_data_cache or
    // enforce_mine_cache is on; mine_get is the master-side ACL option.
    mine_store::options mo;
    mo.cachedir = m->cfg_.cachedir;
    mo.enabled = m->cfg_.minion_data_cache || wire::get_bool(m->cfg_.raw, "enforce_mine_cache").value_or(false);
    if (const value* acl = wire::find(m->cfg_.raw, "mine_get")) mo.mine_get_acl = *acl;
    auto* core = m.get();
    m->mine_ = std::make_unique<mine_store>(std::move(mo), [core](const value& tgt, const std::string& tgt_type,
                                                                   bool greedy) {
      const auto accepted = core->keys_->store().list(pki::key_state::accepted);
      std::vector<std::shared_ptr<const minion_data_cache::entry>> keep;  // facts point into these
      auto facts_of = [&](const std::string& id) {
        match::minion_facts f;
        f.id = id;
        if (auto d = core->mdata_->get(id)) {
          keep.push_back(d);
          f.grains = &d->grains;
          f.pillar = &d->pillar;
        }
        return f;
      };
      return match::check_minions(tgt, tgt_type, accepted, facts_of, greedy, ':', &core->cfg_.nodegroups).minions;
    });
    // Pillar Jinja's salt['mine.get'] (and saltutil.runner('mine.get')): a render worker's
    // call back to the master, answered from the mine for the minion the pillar is for.
    m->pillar_->set_render_call([core](const std::string& minion_id, std::string_view fun,
                                       const value& args) -> render::call_result {
      if (fun != "mine.get" || !args.is_object()) return {false, {}, std::string(fun) + " is not available here"};
      const value* tgt = wire::find(args, "tgt");
      const value* f = wire::find(args, "fun");
      if (!tgt || !f) return {false, {}, "mine.get() missing required arguments 'tgt' and 'fun'"};
      std::string tgt_type = "glob";
      if (const value* tt = wire::find(args, "tgt_type"); tt && !tt->is_null()) {
        auto t = wire::as_text(*tt);
        if (!t) return {false, {}, "mine.get: tgt_type must be a string"};
        tgt_type = std::string(*t);
      }
      // saltutil.runner('mine.get', ...) asks as the master (salt/runners/mine.py).
      const bool runner = wire::get_bool(args, "runner").value_or(false);
      return {true, core->mine_->get(runner ? core->cfg_.id : minion_id, *tgt, *f, tgt_type), {}};
    });
  }
  m->router_ = std::make_unique<request_router>(m->cfg_, m->links_, m->counters_, m->hub_, *m->keys_, *m->jobs_,
                                                *m->mdata_, *m->files_, *m->pillar_, *m->mine_);
  m->cluster_ = std::make_unique<cluster_node>(m->cfg_, m->links_, m->counters_, *m->keys_, *m->jobs_, m->hub_,
                                               *m->seen_);
  m->cluster_->set_join(join_state, wall_ms());
  if (m->cfg_.ping_on_rotate) {
    m->keys_->on_rotated([core = m.get()] {
      publish_request req;
      req.tgt = "*";
      req.fun = "test.ping";
      (void)core->jobs_->publish(req);
    });
  }
  m->cli_ = std::make_unique<cli_service>(m->cfg_, m->links_, m->hub_, *m->keys_, *m->jobs_, *m->cluster_,
                                          *m->seen_);
  {
    // The reactor (reactor.hpp): publishes through the job service, runners through the CLI
    // service (salt-run's path), wheel.key.* on the key directories + key events.
    master_core* core = m.get();
    reactor::hooks rh;
    rh.publish = [core](const publish_request& r) { return core->jobs_->publish(r); };
    rh.runner = reactor_runner_via_cli(
        [core](const value& body, std::shared_ptr<cli_reply> out) { core->cli_->handle(body, std::move(out)); });
    rh.wheel = [core](const std::string& fun, const value& arg, const value& kwarg) {
      return run_wheel_key(core->keys_->store(), fun, arg, kwarg,
                           [core](const std::string& act, const std::vector<std::string>& ids) {
                             (void)core->keys_->key_event(act, ids);
                           });
    };
    rh.fire = [core](const std::string& tag, const value& data) { core->hub_.fire(tag, data); };
    m->reactor_ = std::make_unique<reactor>(m->cfg_, *m->renderer_, std::move(rh));
    m->reactor_->start(m->hub_);
  }
  if (pgo->event_return) m->pg_events_ = std::make_unique<pg::pg_event_sink>(*pgo, m->hub_);
  return m;
}
std::vector<std::string> master_core::connected_ids() const {
  auto* sink = links_.pub.load();
  return sink ? sink->connected_ids() : std::vector<std::string>{};
}

value master_core::handle_request(const value& body, const std::string& peer, bool* authenticated,
                                  std::string* minion_id) {
  auto opened = router_->open(body, peer);
  if (auto* refused = std::get_if<value>(&opened)) {
    if (authenticated) *authenticated = false;
    if (minion_id) minion_id->clear();
    return std::move(*refused);
  }
  return run_request(std::get<request_router::opened_request>(opened), peer, authenticated, minion_id);
}

std::variant<value, request_router::opened_request> master_core::open_request(const value& body,
                                                                            const std::string& peer) {
  return router_->open(body, peer);
}

value master_core::run_request(request_router::opened_request& r, const std::string& peer, bool* authenticated,
                               std::string* minion_id) {
  bool auth = false;
  std::string who;
  value reply = router_->run(r, peer, &auth, &who);
  if (auth && !who.empty()) seen_->seen(who, wall_ms());
  if (authenticated) *authenticated = auth;
  if (minion_id) *minion_id = who;
  return reply;
}

void master_core::on_presence(const std::string& id, bool connected) {
  spdlog::debug("presence: {} {}", id, connected ? "connected" : "disconnected");
  seen_->seen(id, wall_ms());
  if (!presence_ || !presence_->enabled) return;
  value present = value::array();
  {
    std::lock_guard lk(presence_->mu);
    if (connected ? !presence_->present.insert(id).second : presence_->present.erase(id) == 0) return;
    for (const auto& p : presence_->present) present.push_back(p);
  }
  value data = value::object();
  data["new"] = connected ? value::array({id}) : value::array();
  data["lost"] = connected ? value::array() : value::array({id});
  hub_.fire("salt/presence/change", data);
  hub_.fire("salt/presence/present", value{{"present", std::move(present)}});
}

void master_core::presence_tick(sys_clock::time_point now) {
  if (!presence_ || !presence_->enabled) return;
  auto ids = connected_ids();
  std::set<std::string> now_set(ids.begin(), ids.end());
  value change = value::object();
  bool changed = false;
  value present = value::array();
  {
    std::lock_guard lk(presence_->mu);
    if (now - presence_->last < presence_->interval) return;
    presence_->last = now;
    value added = value::array(), lost = value::array();
    for (const auto& i : now_set)
      if (!presence_->present.count(i)) added.push_back(i);
    for (const auto& i : presence_->present)
      if (!now_set.count(i)) lost.push_back(i);
    changed = !added.empty() || !lost.empty();
    change["new"] = std::move(added);
    change["lost"] = std::move(lost);
    presence_->present = now_set;
    for (const auto& p : now_set) present.push_back(p);
  }
  if (changed) hub_.fire("salt/presence/change", change);
  hub_.fire("salt/presence/present", value{{"present", std::move(present)}});
}

master_core::~master_core() { shutdown(); }

void master_core::shutdown() {
  if (reactor_) reactor_->stop();  // first: its runner calls go through the CLI service
  if (cli_) cli_->shutdown();
}

void master_core::maintenance(sys_clock::time_point now) {
  presence_tick(now);
  // Last-seen entries of keys gone (deleted, rejected) are dropped every 10 minutes.
  if (now - last_prune_ >= std::chrono::minutes(10)) {
    last_prune_ = now;
    auto ids = keys_->store().list(pki::key_state::accepted);
    seen_->prune(std::set<std::string>(ids.begin(), ids.end()));
  }
  cluster_->presence_sync(wall_ms());
  keys_->maintenance(now);
  jobs_->maintenance(now);
}

}  // namespace sylvite::master
