// sylvite::master daemon wiring: see daemon.hpp. Request handling never runs on an io
// thread: each request body is posted to the worker pool and answered through the
// responder from there. Hellos on the publish port are handled inline (AES decrypt +
// cached token check, no disk I/O on a cache hit).
#include "master/daemon.hpp"

#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/types.h>
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <variant>
#include <vector>

#include "cluster/peer_bus.hpp"
#include "core/transport/context_pool.hpp"
#include "core/transport/transport.hpp"
#include "core/transport/zmq.hpp"
#include "core/util/log.hpp"
#include "core/util/rate_limit.hpp"
#include "master/api/api_group.hpp"
#include "master/api/api_server.hpp"
#include "master/api/console_assets.hpp"
#include "master/api/eauth.hpp"
#include "master/event_publisher.hpp"
#include "master/health_server.hpp"
#include "master/ipc_protocol.hpp"
#include "master/master.hpp"
#include "master/pub_processes.hpp"
#include "master/worker_pool.hpp"

namespace sylvite::master {

namespace asio = boost::asio;
using wire::value;

namespace {

class pub_adapter final : public pub_sink {
 public:
  explicit pub_adapter(transport::pub_server& s) : s_(s) {}
  void publish_all(std::shared_ptr<const std::string> frame) override { s_.publish_all(std::move(frame)); }
  void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) override {
    s_.publish_to(std::move(frame), ids);
  }
  std::vector<std::string> connected_ids() const override { return s_.connected_ids(); }
  bool is_connected(const std::string& id) const override { return s_.is_connected(id); }
  std::size_t connection_count() const override { return s_.connection_count(); }
  void disconnect(const std::string& id) override {
    // A deleted/rejected key: drop its publish connections now (the rotated AES key
    // already keeps it from reading new publishes; this also frees the sockets).
    auto n = s_.disconnect(id);
    if (n) spdlog::info("closed {} publish connection(s) of {} (key deleted or rejected)", n, id);
  }

 private:
  transport::pub_server& s_;
};

// ZeroMQ's publish port. PUB does not know its subscribers, so presence is estimated as
// Salt does for ZeroMQ (salt/utils/minions.py connected_ids): a minion counts as connected
// when the address it last made an authenticated request from has a subscriber on the
// publish port; with zmq_filtering, when its topic (sha1 of the id) is subscribed.
class zmq_pub_adapter final : public pub_sink {
 public:
  zmq_pub_adapter(transport::zmq_pub_server& s, bool filtering) : s_(s), filtering_(filtering) {}
  void publish_all(std::shared_ptr<const std::string> frame) override {
    if (auto p = body_of(*frame)) s_.publish_all(std::move(p));
  }
  void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) override {
    if (auto p = body_of(*frame)) s_.publish_to(std::move(p), ids);
  }
  std::vector<std::string> connected_ids() const override {
    std::vector<std::string> out;
    const auto live = live_keys();
    std::lock_guard lk(mu_);
    for (const auto& [id, who] : seen_)
      if (live.count(filtering_ ? who.topic : who.address)) out.push_back(id);
    return out;  // std::map: sorted
  }
  bool is_connected(const std::string& id) const override {
    const auto live = live_keys();
    std::lock_guard lk(mu_);
    auto it = seen_.find(id);
    return it != seen_.end() && live.count(filtering_ ? it->second.topic : it->second.address);
  }
  std::size_t connection_count() const override { return s_.connection_count(); }
  bool identifies_connections() const override { return false; }
  void disconnect(const std::string& id) override {
    // A deleted/rejected key: the rotated AES key keeps it from reading publishes; a SUB
    // socket cannot be closed from the PUB side.
    std::lock_guard lk(mu_);
    seen_.erase(id);
  }
  // An authenticated request from id at address (request port).
  void seen(const std::string& id, const std::string& address) {
    std::lock_guard lk(mu_);
    auto& w = seen_[id];
    if (w.address == address && !w.topic.empty()) return;
    w.address = address;
    if (w.topic.empty()) w.topic = transport::zmq_framing::topic_of(id);
  }

 private:
  struct where {
    std::string address;
    std::string topic;
  };
  std::set<std::string> live_keys() const {
    auto v = filtering_ ? s_.topics() : s_.peer_addresses();
    return {v.begin(), v.end()};
  }
  static std::shared_ptr<const std::string> body_of(const std::string& frame) {
    auto f = wire::unpack(frame);
    if (!f) return nullptr;
    auto b = wire::find(*f, "body");
    auto bytes = b ? wire::as_bytes(*b) : std::nullopt;
    if (!bytes) return nullptr;
    return std::make_shared<const std::string>(*bytes);
  }
  transport::zmq_pub_server& s_;
  const bool filtering_;
  mutable std::mutex mu_;
  std::map<std::string, where> seen_;
};

class peer_adapter final : public peer_sink {
 public:
  explicit peer_adapter(cluster::peer_bus& b) : b_(b) {}
  void broadcast(const std::string& type, const value& body) override { b_.broadcast(type, body); }
  bool send(const std::string& peer_id, const std::string& type, const value& body) override {
    return b_.send(peer_id, type, body);
  }
  value status() const override { return b_.status(); }
  void drop_peer(const std::string& id) override { b_.drop_peer(id); }

 private:
  cluster::peer_bus& b_;
};

class cli_adapter final : public cli_reply {
 public:
  explicit cli_adapter(std::shared_ptr<transport::responder> r) : r_(std::move(r)) {}
  void reply(value body) override { r_->reply(std::move(body)); }
  bool push(value body) override { return r_->push(std::move(body)); }
  bool alive() const override { return r_->alive(); }
  std::optional<std::uint32_t> peer_uid() const override { return r_->peer().uid; }

 private:
  std::shared_ptr<transport::responder> r_;
};

// chown -R (no symlink following) of the trees the daemon writes after dropping root.
void chown_tree(const std::filesystem::path& root, uid_t uid, gid_t gid) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(root, ec))) return;
  if (::lchown(root.c_str(), uid, gid) != 0)
    spdlog::warn("cannot chown {} to the master user: {}", root.string(), std::strerror(errno));
  if (!std::filesystem::is_directory(std::filesystem::symlink_status(root, ec))) return;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (::lchown(it->path().c_str(), uid, gid) != 0)
      spdlog::warn("cannot chown {} to the master user: {}", it->path().string(), std::strerror(errno));
  }
}

}  // namespace

// Salt's `user:` (salt/utils/verify.py verify_env + salt.utils.user.chugid): when running
// as root and `user` names another account, the directories the master writes (pki_dir,
// cluster_pki_dir, cachedir, sock_dir) and the log file are given to that user, then the
// process switches to its gid, supplementary groups and uid. Called after every port and
// the CLI socket are bound and the log is open. Errors are fatal (logged, false).
bool drop_privileges(const config::master_config& cfg) {
  if (::geteuid() != 0 || cfg.user.empty() || cfg.user == "root") return true;
  errno = 0;
  struct passwd* pw = ::getpwnam(cfg.user.c_str());
  if (!pw) {
    spdlog::critical("user '{}' (option user) does not exist: cannot drop root privileges", cfg.user);
    return false;
  }
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  const std::string name = pw->pw_name;
  if (uid == 0) return true;
  chown_tree(cfg.pki_dir, uid, gid);
  if (cfg.cluster_pki_dir && *cfg.cluster_pki_dir != cfg.pki_dir) chown_tree(*cfg.cluster_pki_dir, uid, gid);
  chown_tree(cfg.cachedir, uid, gid);
  chown_tree(cfg.sock_dir, uid, gid);
  if (!cfg.log_file.empty() && cfg.log_file.is_absolute()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::symlink_status(cfg.log_file, ec)))
      (void)::lchown(cfg.log_file.c_str(), uid, gid);
  }
  if (::setgid(gid) != 0 || ::initgroups(name.c_str(), gid) != 0 || ::setuid(uid) != 0) {
    spdlog::critical("cannot switch to user '{}' (option user): {}", cfg.user, std::strerror(errno));
    return false;
  }
  if (::setuid(0) == 0) {  // must not be able to get root back
    spdlog::critical("dropping root to user '{}' did not stick", cfg.user);
    return false;
  }
  spdlog::info("running as user {} (uid {}, gid {})", name, uid, gid);
  return true;
}

namespace {

std::string bind_host(const config::master_config& cfg) {
  if (cfg.ipv6 && (cfg.interface == "0.0.0.0" || cfg.interface.empty())) return "::";
  return cfg.interface;
}

}  // namespace

int run_master(const config::master_config& cfg) {
  // Not yet a member with cluster_secret set: join through cluster_peers first.
  master_core::cluster_joiner joiner;
  std::vector<std::string> member_addrs;  // from the join-reply: link to every member at once
  std::string joined_via;                 // the member it joined through (cluster.peers)
  if (cfg.cluster_id && cfg.cluster_pki_dir) {
    joiner = [&cfg, &member_addrs, &joined_via](const crypto::rsa_key& own) -> result<bool> {
      cluster::join_settings js;
      js.id = cfg.id;
      js.cluster_id = *cfg.cluster_id;
      const std::string host = bind_host(cfg);
      const bool wildcard = host == "0.0.0.0" || host == "::" || host.empty();
      js.advertise = (wildcard ? cfg.id : host) + ":" + std::to_string(cfg.cluster_pool_port);
      js.peers = cfg.cluster_peers;
      js.default_port = static_cast<std::uint16_t>(cfg.cluster_pool_port);
      js.pki_dir = *cfg.cluster_pki_dir;
      js.priv = own;
      js.secret = cfg.cluster_secret;
      js.fingerprint = cfg.cluster_pub_fingerprint.value_or("");
      js.topt.max_frame_size = static_cast<std::size_t>(cfg.max_message_size);
      js.member_addrs = &member_addrs;
      js.joined_via = &joined_via;
      const auto t0 = std::chrono::steady_clock::now();
      std::string why;
      auto r = cluster::join_cluster(js, why);
      if (r && *r)
        spdlog::info("cluster join took {} ms",
                     std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
      return r;
    };
  }
  auto core_r = master_core::create(cfg, joiner);
  if (!core_r) {
    spdlog::critical("salt-master cannot start: {}", core_r.error().message());
    return 1;
  }
  std::shared_ptr<master_core> core(std::move(*core_r));
  if (!joined_via.empty()) core->cluster().set_joined_via(joined_via);

  const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
  // Bounded: a request that finds request_queue_size waiting is shed (the minion retries),
  // logged once per interval with a count.
  worker_pool pool(hw, static_cast<std::size_t>(cfg.request_queue_size));
  asio::io_context io(std::max(1, cfg.worker_threads));
  // The connections of ret_port and publish_port are spread over worker_threads more
  // io_contexts, one thread each (transport::options::session_contexts): a connection's
  // reads, its inline requests and its replies stay on one thread, with no hand-over and
  // no wake-up between threads per request. The io_context above keeps the rest (timers,
  // the CLI socket, the cluster bus). Declared before the servers: they outlive them.
  // SYLVITE_IO_SPREAD=0: every connection on the shared io_context, as before (A/B only).
  const char* spread_env = std::getenv("SYLVITE_IO_SPREAD");
  transport::context_pool conn_ios(spread_env && std::string_view(spread_env) == "0"
                                       ? 0
                                       : static_cast<std::size_t>(std::max(1, cfg.worker_threads)));

  const std::uint64_t nofile = transport::raise_open_files_limit();
  spdlog::info("open files limit: {} ({} kept for the master's own files: reserved_fds)", nofile, cfg.reserved_fds);

  transport::options topt;
  topt.max_frame_size = static_cast<std::size_t>(cfg.max_message_size);
  topt.tcp_keepalive = cfg.tcp_keepalive;
  topt.keepalive_idle = cfg.tcp_keepalive_idle;
  topt.keepalive_intvl = cfg.tcp_keepalive_intvl;
  topt.keepalive_cnt = cfg.tcp_keepalive_cnt;
  // Pre-authentication limits (docs/security.md 1 and 2): until a connection shows an
  // accepted minion's key (or completes a peer handshake).
  topt.pre_auth_max_frame_size =
      static_cast<std::size_t>(std::min(cfg.pre_auth_max_message_size, cfg.max_message_size));
  topt.pre_auth_max_nodes = static_cast<std::size_t>(cfg.pre_auth_max_objects);
  topt.pre_auth_max_depth = 16;  // a sign-in or an AES envelope nests 3 deep
  if (cfg.pre_auth_large_frame_budget > 0)  // master-wide: shared by every port
    topt.pre_auth_budget =
        std::make_shared<transport::byte_budget>(static_cast<std::size_t>(cfg.pre_auth_large_frame_budget));
  topt.pre_auth_max_pending = static_cast<std::size_t>(cfg.pre_auth_max_pending);
  topt.frame_timeout = std::chrono::seconds(cfg.frame_timeout);
  topt.max_connections = static_cast<std::size_t>(cfg.max_connections);
  topt.pre_auth_max_connections = static_cast<std::size_t>(cfg.pre_auth_max_connections);
  topt.pre_auth_max_connections_per_source = static_cast<std::size_t>(cfg.pre_auth_max_connections_per_source);
  topt.reserved_fds = static_cast<std::size_t>(cfg.reserved_fds);
  // Request port (and the peer bus): a Salt minion sends at once on a new connection, so
  // one that stays silent is closed. Not on the publish port: a minion may sign in on
  // ret_port first and send its id there only afterwards (salt/channel/client.py send_id).
  transport::options ropt = topt;
  ropt.pre_auth_idle_timeout = std::chrono::seconds(cfg.pre_auth_idle_timeout);
  auto shed_log = std::make_shared<util::log_limiter>();

  const std::string host = bind_host(cfg);
  const auto tkind = transport::parse_kind(cfg.transport).value_or(transport::kind::zeromq);
  transport::zmq_options zopt;
  zopt.filtering = cfg.zmq.zmq_filtering;
  zopt.monitor = cfg.zmq.zmq_monitor;
  zopt.pub_hwm = cfg.pub_hwm;
  zopt.backlog = cfg.zmq_backlog;
  zopt.heartbeat_ivl_ms = cfg.zmq.zmq_heartbeat_ivl;
  zopt.heartbeat_timeout_ms = cfg.zmq.zmq_heartbeat_timeout;
  zopt.ipv6 = cfg.ipv6;
  zopt.engine = transport::parse_engine(cfg.zmq_engine).value_or(transport::zmq_engine::native);
  std::atomic<zmq_pub_adapter*> zsink_ref{nullptr};  // ZeroMQ: learns minion addresses
  // A request is opened (envelope, decryption, token) on the io thread that read it, and a
  // cheap one (a _return the job cache takes without a file write, a _minion_event) is
  // answered there too: no hand-over to the pool and back for the bulk of a fan-out's
  // traffic. A sign-in, a pillar, a file and every other command go to the worker pool
  // (master_core::open_request/run_request). In a cluster everything goes to the pool.
  // SYLVITE_REQUEST_INLINE=0: everything on the pool, as before (benchmark A/B only).
  const char* inline_env = std::getenv("SYLVITE_REQUEST_INLINE");
  const bool inline_ok = core->inline_requests() && !(inline_env && std::string_view(inline_env) == "0");
  const transport::request_handler on_request = [core, &pool, shed_log, &zsink_ref, inline_ok,
                                                 qmax = cfg.request_queue_size](
                                                    value body, std::shared_ptr<transport::responder> r) {
    // A request opened by master_core::open_request answered: its refusal, or what its
    // command returns.
    auto serve = [core, &zsink_ref](const std::shared_ptr<transport::responder>& r,
                                    std::variant<value, request_router::opened_request>& opened) {
      if (auto* refused = std::get_if<value>(&opened)) {
        r->reply(std::move(*refused));
        return;
      }
      bool authenticated = false;
      std::string who;
      value reply =
          core->run_request(std::get<request_router::opened_request>(opened), r->peer().address, &authenticated, &who);
      if (authenticated) r->mark_authenticated();
      if (!who.empty())
        if (auto* z = zsink_ref.load()) z->seen(who, r->peer().address);
      r->reply(std::move(reply));
    };
    std::function<void()> task;
    // Opened here only from memory: a key that must be read from disk sends the whole
    // request to the pool (open_request_in_memory gives nullopt).
    std::optional<std::variant<value, request_router::opened_request>> opened;
    if (inline_ok && request_router::small_request(body)) opened = core->open_request_in_memory(body, r->peer().address);
    if (opened) {
      if (opened->index() == 0 || core->router().runs_inline(std::get<request_router::opened_request>(*opened))) {
        serve(r, *opened);
        return;
      }
      task = [serve, opened = std::move(*opened), r]() mutable { serve(r, opened); };
    } else {
      task = [core, serve, body = std::move(body), r]() {
        auto opened = core->open_request(body, r->peer().address);
        serve(r, opened);
      };
    }
    if (!pool.submit(std::move(task))) {
      core->counters().dropped++;
      if (const auto n = shed_log->hit())
        spdlog::warn("request queue full ({} waiting, request_queue_size): shed {} request(s) in the last "
                     "interval, e.g. from {}; minions retry",
                     qmax, n, r->peer().address);
    }
  };
  // The ports' own options: their connections on the io_contexts above.
  transport::options port_opt = topt;
  port_opt.session_contexts = conn_ios.contexts();
  transport::options port_ropt = ropt;
  port_ropt.session_contexts = conn_ios.contexts();
  const transport::endpoint ret_ep{host, static_cast<std::uint16_t>(cfg.ret_port), {}};
  const transport::endpoint pub_ep{host, static_cast<std::uint16_t>(cfg.publish_port), {}};
  std::atomic<transport::pub_server*> pub_ref{nullptr};  // for hellos checked on a worker thread
  // A hello whose key is not in memory is checked on a worker thread (a shared file system
  // can stall).
  const master_core::offload_fn hello_offload = [core, &pool](std::function<void()> f) {
    return pool.submit([core, f = std::move(f)] { f(); });
  };
  // One transport per master (Salt's `transport`): TCP servers or ZeroMQ sockets.
  std::unique_ptr<transport::req_server> req;
  std::unique_ptr<transport::pub_server> pub;
  std::unique_ptr<transport::zmq_req_server> zreq;
  std::unique_ptr<transport::zmq_pub_server> zpub;
  std::unique_ptr<pub_process_group> pubs;  // publish_processes > 0 (TCP)
  std::unique_ptr<pub_sink> sink;
  if (cfg.publish_processes > 0 && tkind != transport::kind::tcp) {
    spdlog::critical("salt-master cannot start: publish_processes needs transport: tcp (a ZeroMQ publish port is "
                     "one libzmq socket in one process); set publish_processes: 0 or transport: tcp");
    return 1;
  }
  if (tkind == transport::kind::tcp && cfg.publish_processes > 0) {
    req = std::make_unique<transport::req_server>(io, ret_ep, port_ropt, on_request);
    pub_process_settings ps;
    ps.count = cfg.publish_processes;
    ps.topt = topt;
    ps.log_level = cfg.log_level;
    ps.log_file = cfg.log_file.string();
    ps.log_level_logfile = cfg.log_level_logfile;
    pubs = std::make_unique<pub_process_group>(
        io, pub_ep, std::move(ps),
        [core, &hello_offload](const value& body, const std::string& address,
                               std::function<void(const std::string&)> identified) {
          return core->handle_hello(body, address, hello_offload, std::move(identified));
        },
        [core](const std::string& id, bool connected) { core->on_presence(id, connected); });
  } else if (tkind == transport::kind::tcp) {
    req = std::make_unique<transport::req_server>(io, ret_ep, port_ropt, on_request);
    pub = std::make_unique<transport::pub_server>(
        io, pub_ep, port_opt,
        [core, &hello_offload, &pub_ref](const value& body, const transport::peer_info& p) {
          return core->handle_hello(body, p.address, hello_offload, [&pub_ref, conn = p.conn_id](const std::string& id) {
            if (auto* ps = pub_ref.load()) ps->identify(conn, id);
          });
        },
        [core](const std::string& id, bool connected) { core->on_presence(id, connected); });
    pub_ref = pub.get();
    sink = std::make_unique<pub_adapter>(*pub);
  } else {
    zreq = std::make_unique<transport::zmq_req_server>(io, ret_ep, port_ropt, zopt, on_request);
    zpub = std::make_unique<transport::zmq_pub_server>(io, pub_ep, port_opt, zopt);
    auto zs = std::make_unique<zmq_pub_adapter>(*zpub, zopt.filtering);
    zsink_ref = zs.get();
    sink = std::move(zs);
  }
  core->set_pub_sink(pubs ? static_cast<pub_sink*>(pubs.get()) : sink.get());
  const auto start_pub = [&]() -> result<void> {
    if (pubs) return pubs->start();
    return pub ? pub->start() : zpub->start();
  };
  const auto start_req = [&]() -> result<void> { return req ? req->start() : zreq->start(); };
  const auto stop_ports = [&] {
    if (req) req->stop();
    if (pub) pub->stop();
    if (pubs) pubs->stop();
    if (zreq) zreq->stop();
    if (zpub) zpub->stop();
  };
  const auto pub_port = [&] {
    if (pubs) return pubs->bound_port();
    return pub ? pub->bound_port() : zpub->bound_port();
  };
  const auto req_port = [&] { return req ? req->bound_port() : zreq->bound_port(); };

  transport::options copt = topt;
  copt.tcp_keepalive = false;
  copt.authenticated_from_start = true;  // mode 0600 Unix socket: local root only
  transport::req_server cli(io, transport::endpoint{{}, 0, cli_socket_path(cfg.sock_dir).string()}, copt,
                            [core](value body, std::shared_ptr<transport::responder> r) {
                              core->handle_cli(body, std::make_shared<cli_adapter>(std::move(r)));
                            });

  // Cluster peer bus (cluster_pool_port): links to every peer, publishes and returns.
  worker_pool peer_control(1, 100000);  // the bus's control messages, off its thread, in order
  std::unique_ptr<cluster::peer_bus> bus;
  std::unique_ptr<peer_adapter> bus_sink;
  if (cfg.cluster_id) {
    cluster::bus_settings bs;
    bs.id = cfg.id;
    bs.cluster_id = *cfg.cluster_id;
    bs.bind_host = host;
    bs.port = static_cast<std::uint16_t>(cfg.cluster_pool_port);
    const bool wildcard = host == "0.0.0.0" || host == "::" || host.empty();
    bs.advertise = (wildcard ? cfg.id : host) + ":" + std::to_string(cfg.cluster_pool_port);
    bs.peers = cfg.cluster_peers;
    for (const auto& a : member_addrs)
      if (std::find(bs.peers.begin(), bs.peers.end(), a) == bs.peers.end()) bs.peers.push_back(a);
    bs.pki_dir = *cfg.cluster_pki_dir;
    bs.local_copy = core->local_copy();
    bs.priv = core->own_keys().priv();
    bs.topt = ropt;  // pre-auth limits until the peer handshake (peer_bus marks it)
    bs.secret = cfg.cluster_secret;
    bs.allow_empty_secret = cfg.cluster_allow_empty_secret;
    bs.on_joined = [core, &pool](const std::string& id, const std::string& addr) {
      if (!pool.submit([core, id, addr] { core->lb_add_joined(id, addr); }))
        spdlog::warn("master {} joined: load balancer update skipped (worker queue full)", id);
    };
    bs.removed_file = cfg.pki_dir / "cluster_removed_peers";
    bs.on_removed = [core, &peer_control](const std::vector<std::string>& ids) {
      if (!peer_control.submit([core, ids] { core->on_peers_removed(ids); }))
        spdlog::error("cluster peer removal: AES rotation skipped (control queue full)");
    };
    bus = std::make_unique<cluster::peer_bus>(
        io, std::move(bs),
        [core, &peer_control](const std::string& from, const std::string& type, const value& body) {
          // The lane of each type is declared in cluster/peer_messages.hpp. Relay
          // (publishes, returns) is memory-only: at once, on the bus thread. The rest
          // (AES reloads, key events, key-sync) read or write the shared file system,
          // which can stall: one control thread, in arrival order.
          if (cluster::lane_of(type) == cluster::peer_lane::relay) return core->handle_peer(from, type, body);
          if (!peer_control.submit([core, from, type, body] { core->handle_peer(from, type, body); }))
            spdlog::error("cluster message {} from {} dropped: control queue full", type, from);
        },
        [core, &pool](const std::string& id, bool up) {
          spdlog::info("cluster peer {} {}", id, up ? "joined the bus" : "left the bus");
          if (up && core->local_copy() && !pool.submit([core, id] { core->on_peer_up(id); }))
            spdlog::warn("key sync with cluster peer {} skipped: worker queue full", id);
        });
    bus_sink = std::make_unique<peer_adapter>(*bus);
    core->set_peer_sink(bus_sink.get());
    if (auto r = bus->start(); !r) {
      spdlog::critical("cannot listen on {}:{} (cluster_pool_port): {}", host, cfg.cluster_pool_port,
                       r.error().message());
      return 1;
    }
    spdlog::info("cluster {}: peer bus on {}:{}, peers {}", *cfg.cluster_id, host, bus->bound_port(),
                 cfg.cluster_peers.size());
  }

  if (auto r = start_pub(); !r) {
    spdlog::critical("cannot listen on {}:{} (publish_port): {}", host, cfg.publish_port, r.error().message());
    return 1;
  }
  if (auto r = start_req(); !r) {
    spdlog::critical("cannot listen on {}:{} (ret_port): {}", host, cfg.ret_port, r.error().message());
    return 1;
  }
  if (auto r = cli.start(); !r) {
    spdlog::critical("cannot listen on {}: {}", cli_socket_path(cfg.sock_dir).string(), r.error().message());
    return 1;
  }
  // The event bus for external subscribers: Salt's master_event_pub.ipc (events part).
  event_publisher events_pub(io, {event_pub_socket_path(cfg.sock_dir)}, core->hub());
  if (auto r = events_pub.start(); !r) {
    spdlog::critical("cannot listen on {}: {}", event_pub_socket_path(cfg.sock_dir).string(), r.error().message());
    cli.stop();
    return 1;
  }
  // Health/readiness endpoint (health_port; docs/deploy.md): HAProxy checks GET /ready.
  // The probe thread touches the (maybe shared) file system; the handler never does.
  std::vector<probe_target> probe_dirs{{"cachedir", cfg.cachedir, true}, {"pki_dir", cfg.pki_dir, false}};
  if (cfg.cluster_pki_dir && *cfg.cluster_pki_dir != cfg.pki_dir)
    probe_dirs.push_back({"cluster_pki_dir", *cfg.cluster_pki_dir, false});
  readiness_probe ready_probe(std::move(probe_dirs));
  std::unique_ptr<health_server> health;
  if (cfg.health_port > 0) {
    ready_probe.start();
    health = std::make_unique<health_server>(io, health_endpoint{host, static_cast<std::uint16_t>(cfg.health_port)},
                                             [&ready_probe] { return ready_probe.snapshot(); }, cfg.id);
    if (auto r = health->start(); !r) {
      spdlog::critical("cannot listen on {}:{} (health_port): {}", host, cfg.health_port, r.error().message());
      return 1;
    }
    spdlog::info("health endpoint on {}:{} (/health, /ready)", host, health->bound_port());
  }
  // REST API (salt-api's rest_cherrypy, issue 19): only when the master config has a
  // rest_cherrypy block. Its own threads and io_context; lowstate goes through the CLI
  // service, events come from the hub.
  std::unique_ptr<api::eauth_service> eauth;
  std::unique_ptr<api::master_group> group;  // before rest: the server's workers call it
  std::unique_ptr<api::api_server> rest;
  // A REST API that cannot start stops the master: undo what has started so far.
  auto api_start_failed = [&] {
    rest.reset();
    if (health) health->stop();
    cli.stop();
    events_pub.stop();
    stop_ports();
    if (bus) bus->stop();
    return 1;
  };
  {
    auto ao = api::parse_api_options(core->cfg().raw);
    if (!ao.error.empty()) {
      spdlog::critical("salt-master cannot start: {}", ao.error);
      return api_start_failed();
    }
    if (ao.opts) {
      eauth = std::make_unique<api::eauth_service>(
          core->cfg(), [core](const value& tgt, const std::string& tgt_type) { return core->check_minions(tgt, tgt_type); });
      api::lowstate_services ls;
      ls.cfg = &core->cfg();
      ls.cli = [core](const value& body, std::shared_ptr<cli_reply> out) { core->handle_cli(body, std::move(out)); };
      ls.keys = &core->key_store();
      ls.key_event = [core](const std::string& act, const std::vector<std::string>& ids) {
        core->keys().key_event(act, ids);
      };
      ls.fire = [core](const std::string& tag, const value& data) { core->hub().fire(tag, data); };
      api::api_server_deps d;
      d.routes.cfg = &core->cfg();
      d.routes.opts = *ao.opts;
      d.routes.eauth = eauth.get();
      d.routes.runner = std::make_shared<api::lowstate_runner>(ls);
      d.routes.fire = ls.fire;
      d.routes.console = [](std::string_view p) { return api::find_console_asset(p); };
      d.routes.master_stats = [core] {
        auto& c = core->counters();
        return value{{"requests", c.requests.load()}, {"returns", c.returns.load()}, {"publishes", c.publishes.load()},
                     {"refused", c.refused.load()},   {"dropped", c.dropped.load()}};
      };
      d.hub = &core->hub();
      // group (issue 19 point 3): a master_group of independent masters seen as one.
      if (core->cfg().master_group) {
        api::group_services gs;
        gs.cfg = &core->cfg();
        gs.local = d.routes.runner;
        gs.check_minions = [core](const value& tgt, const std::string& tgt_type) { return core->check_minions(tgt, tgt_type); };
        gs.connected_ids = [core] { return core->connected_ids(); };
        gs.accepted_ids = [core] { return core->key_store().list(pki::key_state::accepted); };
        gs.api_port = static_cast<std::uint16_t>(ao.opts->port);
        std::string gerr;
        group = api::master_group::create(std::move(gs), gerr);
        if (!group) {
          spdlog::critical("salt-master cannot start: {}", gerr);
          return api_start_failed();
        }
        auto* gp = group.get();
        d.routes.group_internal = [gp](const api::api_request& rq) { return gp->handle_internal(rq); };
        d.routes.group_run = [gp](const value& chunk, const std::string& user) { return gp->run(chunk, user); };
        for (const auto& m : gp->members())
          if (m.self) spdlog::info("master group {}: {} members, this one is {}", core->cfg().master_group->id,
                                   gp->members().size(), m.url);
      }
      rest = std::make_unique<api::api_server>(std::move(d));
      if (auto err = rest->start(); !err.empty()) {
        spdlog::critical("salt-master cannot start the REST API: {}", err);
        return api_start_failed();
      }
      spdlog::info("REST API (rest_cherrypy) on {}://{}:{}", ao.opts->disable_ssl ? "http" : "https", ao.opts->host,
                   rest->bound_port());
    }
  }
  if (!drop_privileges(cfg)) {
    if (rest) rest->stop();
    if (health) health->stop();
    cli.stop();
    stop_ports();
    if (bus) bus->stop();
    return 1;
  }
  if (pubs) {
    pubs->launch();  // as the final user (after drop_privileges)
    spdlog::info("publish_port served by {} publish process(es) (publish_processes)", cfg.publish_processes);
  }
  spdlog::info("salt-master listening on {}:{} (ret_port) and {}:{} (publish_port) over {}{}, CLI socket {}", host,
               req_port(), host, pub_port(), transport::kind_name(tkind),
               tkind != transport::kind::zeromq ? std::string()
               : zopt.engine == transport::zmq_engine::native
                   ? std::string(" (native ZMTP 3.1)")
                   : " (libzmq " + transport::zmq_version() + ")",
               cli_socket_path(cfg.sock_dir).string());

  bool stopping = false;
  asio::steady_timer timer(io);
  std::function<void()> arm;
  arm = [&] {
    timer.expires_after(std::chrono::seconds(5));
    timer.async_wait([&](boost::system::error_code ec) {
      if (ec || stopping) return;
      if (!pool.submit([core] { core->maintenance(); })) spdlog::warn("maintenance skipped: worker queue full");
      arm();
    });
  };
  arm();

  asio::signal_set stop_signals(io, SIGINT, SIGTERM);
  asio::signal_set hup(io, SIGHUP);
  stop_signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("salt-master stopping (signal {})", sig);
    stopping = true;
    timer.cancel();
    hup.cancel();
    ready_probe.set_shutting_down();
    if (rest) rest->stop();
    if (health) health->stop();
    cli.stop();
    events_pub.stop();
    stop_ports();
    if (bus) bus->stop();
    conn_ios.release();  // the connection io_contexts end once their connections are closed
  });
  std::function<void()> arm_hup;
  arm_hup = [&] {
    hup.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      spdlog::info("SIGHUP: reopening logs");
      util::reopen_logs();
      if (pubs) pubs->reopen_logs();
      arm_hup();
    });
  };
  arm_hup();

  std::vector<std::thread> threads;
  conn_ios.start();
  const int n = std::max(1, cfg.worker_threads);
  for (int i = 1; i < n; ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  conn_ios.stop();  // what is left there is closing connections
  conn_ios.join();
  for (auto& t : threads) t.join();
  if (bus) bus->join();
  peer_control.stop();
  core->set_peer_sink(nullptr);
  core->shutdown();
  pool.stop();
  core->set_pub_sink(nullptr);
  spdlog::info("salt-master stopped");
  return 0;
}

}  // namespace sylvite::master
