// sylvite::master cluster node (cluster_node.hpp): the peers' messages routed to the
// services, peer removal and the load balancer's runtime API.
#include "master/cluster_node.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <cstdio>
#include <filesystem>
#include <random>

#include "cluster/cluster_pki.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "core/util/rate_limit.hpp"
#include "cluster/lb_admin.hpp"

namespace sylvite::master {

using wire::value;

cluster_node::cluster_node(const config::master_config& cfg, master_links& links, master_counters& counters,
                           key_service& keys, job_service& jobs, event_hub& hub, presence_table& presence)
    : cfg_(cfg),
      links_(links),
      counters_(counters),
      keys_(keys),
      jobs_(jobs),
      hub_(hub),
      presence_(presence),
      started_ms_(wall_ms()) {
  std::random_device rd;
  char b[20];
  std::snprintf(b, sizeof b, "%08x%08x", rd(), rd());
  boot_ = b;
  if (cfg_.cluster_id)
    sub_ = hub_.subscribe_local([this](const std::string& tag, const value& data) { forward(tag, data); });
}

cluster_node::~cluster_node() {
  if (sub_) hub_.unsubscribe(sub_);
}

bool cluster_node::forwarded_tag(const std::string& tag) {
  if (tag == "key") return false;
  if (tag.rfind("salt/presence/", 0) == 0) return false;
  return true;
}

void cluster_node::forward(const std::string& tag, const value& data) {
  if (!forwarded_tag(tag)) return;
  auto* peers = links_.peers.load();
  if (!peers) return;
  peers->broadcast(cluster::msg::event{tag, data, cfg_.id, boot_ + "-" + std::to_string(next_eid_++)});
  events_forwarded_++;
}

namespace {
// Peer messages refused at decode: authenticated peers, but a bug or a newer version can
// repeat one at will.
util::log_limiter peer_refused_log;
}  // namespace

void cluster_node::handle_peer(const std::string& from, const std::string& type, const value& body) {
  {
    std::lock_guard lk(info_mu_);
    if (heard_ms_.size() < 4096 || heard_ms_.contains(from)) heard_ms_[from] = wall_ms();
  }
  try {
    std::string why;
    auto m = cluster::decode(type, body, why);
    if (!m) {
      if (auto n = peer_refused_log.hit())
        spdlog::warn("cluster message '{}' from {} refused: {}{}", type, from, why,
                     n > 1 ? " (" + std::to_string(n) + " refused since the last such line)" : std::string());
      return;
    }
    std::visit([&](const auto& x) { route(from, x); }, *m);
  } catch (const std::exception& e) {
    spdlog::error("cluster message {} from {} failed: {}", type, from, e.what());
  }
}

// One line per message type: the service that owns its rule.
void cluster_node::route(const std::string& from, const cluster::msg::publish& m) {
  jobs_.peer_publish(from, m.jid, m.frame, m.targets);
}
void cluster_node::route(const std::string&, const cluster::msg::ret& m) { jobs_.peer_return(m.jid, m.id, m.load); }
void cluster_node::route(const std::string& from, const cluster::msg::aes& m) { keys_.peer_aes(from, m); }
void cluster_node::route(const std::string& from, const cluster::msg::aes_rotate& m) {
  keys_.peer_asks_rotation(from, m);
}
void cluster_node::route(const std::string& from, const cluster::msg::key_event& m) { keys_.peer_key_event(from, m); }
void cluster_node::route(const std::string& from, const cluster::msg::cluster_key& m) {
  keys_.peer_cluster_key(from, m);
}
void cluster_node::route(const std::string& from, const cluster::msg::key_sync& m) { keys_.peer_asks_keys(from, m); }
void cluster_node::route(const std::string& from, const cluster::msg::keys& m) { keys_.peer_keys(from, m); }
void cluster_node::route(const std::string& from, const cluster::msg::join&) {
  spdlog::debug("cluster message join from {}: handled by the peer bus", from);
}
void cluster_node::route(const std::string& from, const cluster::msg::leave&) {
  spdlog::debug("cluster message leave from {}: handled by the peer bus", from);
}
void cluster_node::route(const std::string& from, const cluster::msg::event& m) {
  if (m.origin == cfg_.id || m.origin != from) {
    // An event comes straight from the master that fired it, never relayed; one that
    // claims this master or another one as its origin is refused.
    events_refused_++;
    if (auto n = peer_refused_log.hit())
      spdlog::warn("cluster event '{}' from {} refused: origin '{}' is not the sender ({} refused since the last "
                   "such line)",
                   m.tag, from, m.origin, n);
    return;
  }
  if (m.eid) {
    constexpr std::size_t kSeenMax = 200000;
    std::lock_guard lk(seen_mu_);
    std::string key = m.origin + "/" + *m.eid;
    if (!seen_.insert(key).second) {
      events_duplicate_++;
      return;
    }
    seen_order_.push_back(std::move(key));
    while (seen_order_.size() > kSeenMax) {
      seen_.erase(seen_order_.front());
      seen_order_.pop_front();
    }
  }
  events_received_++;
  // jid left empty: a job's CLI wait gets the return through the "return" message.
  hub_.fire(m.tag, m.data, {}, event_hub::origin::peer);
}

void cluster_node::route(const std::string& from, const cluster::msg::presence& m) {
  presence_report r;
  r.reserve(m.minions.size());
  for (const auto& i : m.minions) r.push_back({i.id, i.connected, i.last_ms});
  presence_.apply_peer(from, m.full, r, wall_ms());
  if (m.aes) {
    std::lock_guard lk(info_mu_);
    peer_aes_[from] = *m.aes;
  }
}

std::string cluster_node::aes_key_id() const {
  auto k = keys_.aes().current();
  if (!k) return "";
  // A hash of the key (never the key): equal on masters serving the same key.
  return crypto::sha256_hex("sylvite-aes-key-id:" + k->crypt.key_string()).substr(0, 16);
}

void cluster_node::set_join(std::string state, std::int64_t since_ms) {
  std::lock_guard lk(info_mu_);
  join_state_ = std::move(state);
  join_since_ms_ = since_ms;
}

void cluster_node::set_joined_via(std::string peer_id) {
  std::lock_guard lk(info_mu_);
  joined_via_ = std::move(peer_id);
}

void cluster_node::presence_sync(std::int64_t now_ms) {
  if (!cfg_.cluster_id) return;
  auto* peers = links_.peers.load();
  if (!peers) return;
  // A link that came up since the last tick gets the whole table (it may have missed
  // changes while down), as does everyone every 30 s.
  std::set<std::string> up;
  for (const auto& p : peers->status())
    if (wire::get_text(p, "state").value_or("") == "up")
      if (auto id = wire::get_text(p, "id"); id && !id->empty()) up.insert(std::string(*id));
  bool full = false;
  {
    std::lock_guard lk(info_mu_);
    for (const auto& id : up)
      if (!linked_.contains(id)) full = true;
    linked_ = up;
    if (now_ms - last_full_ms_ >= 30'000) full = true;
    if (full) last_full_ms_ = now_ms;
  }
  auto* pub = links_.pub.load();
  cluster::msg::presence m;
  m.full = full;
  m.aes = aes_key_id();
  presence_report r;
  if (full) {
    (void)presence_.take_changes({});  // all of it goes now
    r = presence_.snapshot(pub ? pub->connected_ids() : std::vector<std::string>{});
  } else {
    r = presence_.take_changes([pub](const std::string& id) { return pub && pub->is_connected(id); });
  }
  m.minions.reserve(r.size());
  for (auto& i : r) m.minions.push_back({std::move(i.id), i.connected, i.last_ms});
  // A delta with nothing in it still says "alive" and which AES key is served.
  peers->broadcast(m);
}

value cluster_node::status() const {
  value out = value::object();
  out["id"] = cfg_.id;
  out["cluster_id"] = cfg_.cluster_id.value_or("");
  auto* peers = links_.peers.load();
  out["peers"] = peers ? peers->status() : value::array();
  value ev = value::object();
  ev["forwarded"] = events_forwarded_.load();
  ev["received"] = events_received_.load();
  ev["refused"] = events_refused_.load();
  ev["duplicates"] = events_duplicate_.load();
  ev["fired"] = hub_.fired();
  out["events"] = std::move(ev);
  const std::int64_t now = wall_ms();
  // aes_epoch: the AES key this master serves.
  value epoch = value::object();
  if (auto k = keys_.aes().current()) {
    epoch["key_id"] = aes_key_id();
    epoch["generation"] = k->generation;
    epoch["since"] = iso_utc_ms(std::chrono::duration_cast<std::chrono::milliseconds>(k->created.time_since_epoch()).count());
  }
  out["aes_epoch"] = std::move(epoch);
  std::map<std::string, std::int64_t> heard;
  std::map<std::string, std::string> peer_aes;
  {
    std::lock_guard lk(info_mu_);
    value join = value::object();
    join["state"] = join_state_;
    join["via"] = joined_via_.empty() ? value(nullptr) : value(joined_via_);
    join["since"] = join_since_ms_ > 0 ? value(iso_utc_ms(join_since_ms_)) : value(nullptr);
    out["join"] = std::move(join);
    heard = heard_ms_;
    peer_aes = peer_aes_;
  }
  // health: this master, then each peer link.
  value health = value::object();
  health["started"] = iso_utc_ms(started_ms_);
  health["uptime_s"] = (now - started_ms_) / 1000;
  auto* pub = links_.pub.load();
  health["minions_connected"] = pub ? pub->connected_ids().size() : 0;
  health["publish_connections"] = pub ? pub->connection_count() : 0;
  health["minions_seen"] = presence_.size();
  value counters = value::object();
  counters["requests"] = counters_.requests.load();
  counters["refused"] = counters_.refused.load();
  counters["shed"] = counters_.dropped.load();
  counters["returns"] = counters_.returns.load();
  counters["publishes"] = counters_.publishes.load();
  health["counters"] = std::move(counters);
  const std::string my_aes = aes_key_id();
  value links = value::array();
  bool ok = true;
  auto link_entry = [&](const std::string& id, const std::string& state) {
    value l = value::object();
    l["id"] = id;
    l["state"] = state;
    l["up"] = state == "up";
    auto h = heard.find(id);
    l["last_heard"] = h == heard.end() ? value(nullptr) : value(iso_utc_ms(h->second));
    l["heard_ago_s"] = h == heard.end() ? value(nullptr) : value((now - h->second) / 1000);
    auto a = peer_aes.find(id);
    l["aes_in_step"] = a == peer_aes.end() ? value(nullptr) : value(a->second == my_aes);
    if (state != "up" || (a != peer_aes.end() && a->second != my_aes)) ok = false;
    links.push_back(std::move(l));
  };
  std::map<std::string, std::string> states;  // a peer with several links: up if one is
  for (const auto& p : out["peers"]) {
    const std::string id(wire::get_text(p, "id").value_or(""));
    if (id.empty()) continue;
    auto& st = states[id];
    if (st != "up") st = std::string(wire::get_text(p, "state").value_or("unknown"));
  }
  for (const auto& [id, st] : states) link_entry(id, st);
  health["links"] = std::move(links);
  health["status"] = ok ? "ok" : "degraded";
  out["health"] = std::move(health);
  return out;
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

void cluster_node::lb_add_joined(const std::string& id, const std::string& bus_addr) {
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

std::string cluster_node::lb_remove(const std::string& id) {
  if (!cfg_.cluster_lb_admin) return "cluster_lb_admin is not set";
  // The server is named by the master's address (its bus address's host), as
  // sylvite-haproxy-cfg and lb_add_joined name them.
  std::string host;
  if (auto* peers = links_.peers.load())
    for (const auto& p : peers->status())
      if (wire::get_text(p, "id").value_or("") == id)
        if (auto a = wire::get_text(p, "address"); a && !a->empty()) host = host_of(std::string(*a), cfg_.cluster_pool_port);
  if (host.empty()) return "the bus address of '" + id + "' is unknown (no link to it)";
  auto r = lb_admin::runtime_send(*cfg_.cluster_lb_admin, lb_admin::runtime_remove_commands(
                                                                 lb_admin::server_name(host), lb_backends(cfg_)));
  if (!r) return r.error();
  spdlog::info("master {} ({}) taken out of the load balancer ({})", id, host, *cfg_.cluster_lb_admin);
  return "";
}

std::pair<value, int> cluster_node::remove_peer(const std::string& id) {
  // Remove a master from the cluster: tell the peers, delete peers/<id>.pub (the buses
  // close its links), rotate the cluster AES key so it cannot read new publishes.
  if (!cfg_.cluster_id) return {"This master is not in a cluster (cluster_id is not set)", 1};
  if (!cluster::valid_peer_id(id)) return {"usage: salt-run cluster.remove <master id> (a valid id)", 1};
  if (id == cfg_.id) return {"cannot remove this master itself; run it on another master", 1};
  namespace fs = std::filesystem;
  const fs::path p = *cfg_.cluster_pki_dir / "peers" / (id + ".pub");
  std::error_code ec;
  if (!fs::exists(p, ec)) return {"no cluster peer '" + id + "' (" + p.string() + " does not exist)", 1};
  // In order: out of the load balancer (no new minion connections), tell the peers,
  // delete its key (the buses close its links), rotate the AES key.
  const std::string lb = lb_remove(id);
  auto* peers = links_.peers.load();
  if (peers) peers->broadcast(cluster::msg::leave{id});
  if (auto r = util::remove_file(p); !r) return {"cannot remove " + p.string() + ": " + r.error().message(), 1};
  if (peers) peers->drop_peer(id);  // before the rotation: the new key must not reach it
  spdlog::warn("cluster peer {} removed by salt-run cluster.remove", id);
  const bool rotated = static_cast<bool>(keys_.rotate_aes("cluster.remove " + id));
  value ret = value::object();
  ret["removed"] = id;
  ret["aes_rotated"] = rotated;
  ret["load_balancer"] = lb.empty() ? std::string("removed") : "not changed: " + lb;
  return {ret, rotated ? 0 : 1};
}

}  // namespace sylvite::master
