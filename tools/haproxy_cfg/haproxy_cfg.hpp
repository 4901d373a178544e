// sylvite::haproxy_cfg: writes the haproxy.cfg that puts HAProxy (2.6, mode tcp) in front
// of a sylvite master cluster, from a master's configuration (core/config): one publish
// frontend (publish_port; timeouts = publish_session, so idle minion subscriptions are
// never cut), one request frontend (ret_port; about a minute), one backend each with
// every master of the cluster (this master plus cluster_peers), health-checked on each
// master's health_port with GET /ready (master/health_server.hpp), fast failure
// detection (inter 500ms fall 2 rise 2), option redispatch + retries 2, and an admin
// stats socket. docs/deploy.md explains every line; deploy/haproxy/haproxy.cfg is an
// example output. Used by the sylvite-haproxy-cfg command (main.cpp).
// Thread-safety: pure functions, except check_with_haproxy() which runs a process.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"

namespace sylvite::haproxy_cfg {

struct options {
  std::string lb_address = "0.0.0.0";        // frontends bind here ("::" / IPv6 literals fine)
  std::optional<int> lb_publish_port;         // default: the masters' publish_port
  std::optional<int> lb_ret_port;             // default: the masters' ret_port
  std::string self_address;                   // this master as HAProxy reaches it; default `interface`
  std::string stats_socket = "/run/haproxy/admin.sock";
  int maxconn = 9500;                         // global; each proxied connection holds 2 fds
  int request_maxconn = 2000;                 // request frontend; publish gets the rest
  int request_timeout = 60;                   // seconds, request frontend/backend
  int connect_timeout_ms = 2000;
  std::string run_as;                         // user/group to drop to (e.g. "haproxy"); "" = none
  std::string log_target = "/dev/log";        // syslog target; "" = no logging
};

struct master_server {
  std::string name;  // HAProxy server name (host with unsafe characters replaced)
  std::string host;  // address or DNS name
};

struct output {
  std::string text;                   // the haproxy.cfg
  std::vector<master_server> masters;  // the servers in each backend, in order
  std::vector<std::string> warnings;  // printed by the command on stderr
};

// The cluster's masters: this master (self_address, else `interface`) plus every
// cluster_peers entry ("host" or "host:port"; the port there is the peer-bus port and is
// not used here), without duplicates, sorted by host so every master of a cluster writes
// the same file. Errors (as text): a wildcard interface without self_address, a bad peer
// entry.
boost::system::result<std::vector<master_server>, std::string> cluster_masters(const config::master_config& cfg,
                                                                               const options& opt);

// The whole haproxy.cfg. Errors (as text): those of cluster_masters(), bad options.
boost::system::result<output, std::string> render(const config::master_config& cfg, const options& opt);

// "host:port" in HAProxy's address syntax (IPv6 literals as ipv6@addr:port).
std::string haproxy_address(const std::string& host, int port);

// ---- runtime API (HAProxy >= 2.6 admin socket): add or remove one master live --------------
// Backends as render() names them; tests and hand-written configs pass their own.
struct runtime_backends {
  std::string publish = "salt_publish_masters";
  std::string request = "salt_request_masters";
};
// The commands that add master `m` to both backends of a running HAProxy: `add server`
// (dynamic servers do not inherit default-server, so the check settings of render() are
// spelled out), then `enable health` and `enable server` (a new server starts in
// maintenance). Errors (as text): a bad server name or address.
boost::system::result<std::vector<std::string>, std::string> runtime_add_commands(const config::master_config& cfg,
                                                                                  const master_server& m,
                                                                                  const runtime_backends& b = {});
// The commands that take it out again: `disable server` (maintenance: no new
// connections), `shutdown sessions server` (its minions reconnect to the others at
// once), `del server`.
std::vector<std::string> runtime_remove_commands(const std::string& name, const runtime_backends& b = {});
// The `server` lines to add to haproxy.cfg by hand for master `m`, one per backend.
std::vector<std::string> config_lines(const config::master_config& cfg, const master_server& m,
                                      const runtime_backends& b = {});
// Sends each command on the admin socket (one connection per command, as HAProxy closes
// it after a reply). `socket`: a Unix socket path, or host:port of a TCP stats socket
// (`stats socket ipv4@ADDR:PORT level admin`). Returns HAProxy's answer per command; an error (as text) if the
// socket cannot be used or HAProxy answers a command with an error, naming the command.
boost::system::result<std::vector<std::string>, std::string> runtime_send(const std::string& socket,
                                                                         const std::vector<std::string>& commands);
// A safe HAProxy server name from a master id or host (what render() does to hosts).
std::string server_name(const std::string& s);

struct check_result {
  bool ran = false;    // false: no haproxy binary found (nothing checked)
  bool valid = false;  // haproxy -c exit status 0
  std::string output;  // haproxy's stdout+stderr
};
// Runs `<haproxy> -c -f <file>`; haproxy = "" looks for "haproxy" on PATH, then
// /usr/sbin/haproxy.
check_result check_with_haproxy(const std::string& file, const std::string& haproxy = "");

}  // namespace sylvite::haproxy_cfg
