// sylvite::lb_admin: the HAProxy (>= 2.6) runtime API client of a master cluster. It adds
// a master to, or takes one out of, the publish and request backends of a running load
// balancer through its admin socket (cluster_lb_admin: a master that joined through this
// one is added, a removed one taken out), and spells the haproxy.cfg `server` lines to
// add by hand when the API cannot be used. Also the token rules both this client and the
// haproxy.cfg writer (tools/haproxy_cfg, sylvite-haproxy-cfg) follow: server names,
// addresses in HAProxy syntax, values safe to write unquoted.
// Below the master (the master daemon links it), above core/config; no Asio.
// Thread-safety: pure functions, except runtime_send() which blocks on a socket
// (bounded: 10 s per send/receive/connect), so callers run it off the io threads.
#pragma once
#include <boost/system/result.hpp>
#include <string>
#include <vector>

#include "core/config/config.hpp"

namespace sylvite::lb_admin {

// One master as a server of both backends.
struct master_server {
  std::string name;  // HAProxy server name (host with unsafe characters replaced)
  std::string host;  // address or DNS name
};

// A safe HAProxy server name from a master id or host: every character other than
// [A-Za-z0-9._-] becomes '_'.
std::string server_name(const std::string& s);
// "host:port" in HAProxy's address syntax (IPv6 literals as ipv6@addr:port).
std::string haproxy_address(const std::string& host, int port);
// A value HAProxy reads as one unquoted token: not empty, no blanks, quotes, '#', '\' or
// control characters.
bool safe_token(const std::string& s);
// "", "0.0.0.0", "::" or "*": all addresses, which names no master.
bool wildcard_host(const std::string& h);

// Backends as sylvite-haproxy-cfg names them; tests and hand-written configs pass their own
// (cluster_lb_backends).
struct runtime_backends {
  std::string publish = "salt_publish_masters";
  std::string request = "salt_request_masters";
};
// The commands that add master `m` to both backends of a running HAProxy: `add server`
// (dynamic servers do not inherit default-server, so the check settings of the generated
// haproxy.cfg are spelled out), then `enable health` and `enable server` (a new server
// starts in maintenance). Errors (as text): a bad server name, address or backend name.
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
// (`stats socket ipv4@ADDR:PORT level admin`; numeric addresses only). Returns HAProxy's
// answer per command; an error (as text) if the socket cannot be used or HAProxy answers
// a command with an error, naming the command.
boost::system::result<std::vector<std::string>, std::string> runtime_send(const std::string& socket,
                                                                         const std::vector<std::string>& commands);

}  // namespace sylvite::lb_admin
