// sylvite::master cluster node (cluster_node.hpp): the peers' messages routed to the
// services, peer removal and the load balancer's runtime API.
#include "master/cluster_node.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <filesystem>

#include "cluster/cluster_pki.hpp"
#include "core/util/files.hpp"
#include "tools/haproxy_cfg/haproxy_cfg.hpp"

namespace sylvite::master {

using wire::value;

cluster_node::cluster_node(const config::master_config& cfg, master_links& links, key_service& keys, job_service& jobs)
    : cfg_(cfg), links_(links), keys_(keys), jobs_(jobs) {}

void cluster_node::handle_peer(const std::string& from, const std::string& type, const value& body) {
  try {
    if (type == "publish") {
      auto jid = wire::get_text(body, "jid");
      const value* f = wire::find(body, "frame");
      auto frame = f ? wire::as_bytes(*f) : std::nullopt;
      if (!jid || !frame) {
        spdlog::warn("cluster publish from {} without jid/frame ignored", from);
        return;
      }
      std::optional<std::vector<std::string>> targets;
      if (const value* t = wire::find(body, "targets"); t && t->is_array()) {
        targets.emplace();
        for (const auto& x : *t)
          if (auto s = wire::as_text(x)) targets->emplace_back(*s);
      }
      jobs_.peer_publish(from, std::string(*jid), std::string(*frame), targets);
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
      jobs_.peer_return(std::string(*jid), std::string(*id), *load);
      return;
    }
    if (type == "aes") {
      auto key = wire::get_text(body, "key");
      keys_.peer_aes(from, key ? std::optional<std::string>(std::string(*key)) : std::nullopt);
      return;
    }
    if (type == "key") {
      auto act = wire::get_text(body, "act");
      const value* ids = wire::find(body, "ids");
      if (!act || !ids || !ids->is_array()) return;
      std::vector<std::string> v;
      for (const auto& x : *ids)
        if (auto s = wire::as_text(x); s && pki::valid_id(*s)) v.emplace_back(*s);
      keys_.peer_key_event(from, std::string(*act), v, wire::find(body, "pubs"),
                           wire::get_bool(body, "local").value_or(false));
      return;
    }
    if (type == "cluster-key") {
      keys_.peer_cluster_key(from, body);
      return;
    }
    if (type == "aes-rotate") {  // asked by a master whose cluster_pki_dir is a local copy
      keys_.peer_asks_rotation(from, std::string(wire::get_text(body, "why").value_or("")));
      return;
    }
    if (type == "key-sync") {  // a local-copy peer asks for the minion keys
      keys_.peer_asks_keys(from, body);
      return;
    }
    if (type == "keys") {
      keys_.peer_keys(from, body);
      return;
    }
    spdlog::warn("unknown cluster message type '{}' from {} ignored", type, from);
  } catch (const std::exception& e) {
    spdlog::error("cluster message {} from {} failed: {}", type, from, e.what());
  }
}

value cluster_node::status() const {
  value out = value::object();
  out["id"] = cfg_.id;
  out["cluster_id"] = cfg_.cluster_id.value_or("");
  auto* peers = links_.peers.load();
  out["peers"] = peers ? peers->status() : value::array();
  return out;
}

namespace {
// The host of a bus address "host:port" / "[v6]:port" (the address HAProxy reaches a
// master on: its `interface`).
std::string host_of(const std::string& addr, int default_port) {
  auto a = config::parse_master_address(addr, default_port);
  return a ? a->host : addr;
}

haproxy_cfg::runtime_backends lb_backends(const config::master_config& c) {
  haproxy_cfg::runtime_backends b;
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
  const haproxy_cfg::master_server m{haproxy_cfg::server_name(host), host};
  const auto b = lb_backends(cfg_);
  auto print_lines = [&](const std::string& why) {
    std::string lines;
    for (const auto& l : haproxy_cfg::config_lines(cfg_, m, b)) lines += "\n  " + l;
    spdlog::warn("master {} joined: {}; add it to the load balancer (haproxy.cfg):{}", id, why, lines);
  };
  if (!cfg_.cluster_lb_admin) return print_lines("cluster_lb_admin is not set");
  auto cmds = haproxy_cfg::runtime_add_commands(cfg_, m, b);
  if (!cmds) return print_lines(cmds.error());
  auto r = haproxy_cfg::runtime_send(*cfg_.cluster_lb_admin, *cmds);
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
  auto r = haproxy_cfg::runtime_send(*cfg_.cluster_lb_admin, haproxy_cfg::runtime_remove_commands(
                                                                 haproxy_cfg::server_name(host), lb_backends(cfg_)));
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
  if (peers) peers->broadcast("leave", value{{"id", id}});
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
