// sylvite::haproxy_cfg: writes the haproxy.cfg that puts HAProxy (2.6, mode tcp) in front
// of a sylvite master cluster, from a master's configuration (core/config): one publish
// frontend (publish_port; timeouts = publish_session, so idle minion subscriptions are
// never cut), one request frontend (ret_port; about a minute), one backend each with
// every master of the cluster (this master plus cluster_peers), health-checked on each
// master's health_port with GET /ready (master/health_server.hpp), fast failure
// detection (inter 500ms fall 2 rise 2), option redispatch + retries 2, and an admin
// stats socket. docs/deploy.md explains every line; deploy/haproxy/haproxy.cfg is an
// example output. Used by the sylvite-haproxy-cfg command (main.cpp), whose runtime mode
// (--add-server, --remove-server) is cluster/lb_admin's client, shared with the master.
// Thread-safety: pure functions, except check_with_haproxy() which runs a process.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cluster/lb_admin.hpp"
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

// A master as a server of both backends (server name, host): the runtime API's type.
using master_server = lb_admin::master_server;
using lb_admin::haproxy_address;
using lb_admin::server_name;

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

struct check_result {
  bool ran = false;    // false: no haproxy binary found (nothing checked)
  bool valid = false;  // haproxy -c exit status 0
  std::string output;  // haproxy's stdout+stderr
};
// Runs `<haproxy> -c -f <file>`; haproxy = "" looks for "haproxy" on PATH, then
// /usr/sbin/haproxy.
check_result check_with_haproxy(const std::string& file, const std::string& haproxy = "");

}  // namespace sylvite::haproxy_cfg
