// sylvite::haproxy_cfg: see haproxy_cfg.hpp. Numbers and why (lab-measured on HAProxy
// 2.6.12, ../shared/reference/lab-notes.md):
//   - inter 500ms fall 2 rise 2: a killed master is DOWN in about 0.9 s and UP about 1 s
//     after it is back (plain `check` took 5.5 s).
//   - option redispatch + retries 2: a minion sent to a master that just died is moved
//     to another one instead of waiting 3 s for a closed connection.
//   - publish timeouts >= publish_session: a minion's publish subscription is idle
//     between jobs; HAProxy must not cut it (Salt 3007's cluster docs say the same).
//   - on-marked-down shutdown-sessions: when a master is marked down (dead, blackholed or
//     not ready) HAProxy closes its minions' connections, so they reconnect through the
//     load balancer at once instead of waiting for TCP keep-alive (Salt's tcp minion
//     fails over only via keep-alive).
//   - maxconn below 9,900: the machines allow 20,000 open files, two per proxied
//     connection.
#include "tools/haproxy_cfg/haproxy_cfg.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace sylvite::haproxy_cfg {

namespace {

using lb_admin::safe_token;
bool wildcard(const std::string& h) { return lb_admin::wildcard_host(h); }

boost::system::result<output, std::string> fail(std::string why) {
  return boost::system::result<output, std::string>(boost::system::in_place_error, std::move(why));
}

}  // namespace

boost::system::result<std::vector<master_server>, std::string> cluster_masters(const config::master_config& cfg,
                                                                               const options& opt) {
  std::string self = opt.self_address.empty() ? cfg.interface : opt.self_address;
  if (wildcard(self))
    return fmt::format(
        "interface is '{}' (all addresses): pass --self-address ADDR, this master's address as HAProxy reaches it",
        cfg.interface);
  std::vector<std::string> hosts{self};
  for (const auto& p : cfg.cluster_peers) {
    auto a = config::parse_master_address(p, cfg.cluster_pool_port);
    if (!a || a->host.empty() || wildcard(a->host) || !safe_token(a->host))
      return fmt::format("cluster_peers entry '{}': expected host or host:port", p);
    hosts.push_back(a->host);
  }
  for (const auto& h : hosts)
    if (!safe_token(h)) return fmt::format("address '{}' cannot be written into haproxy.cfg", h);
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  std::vector<master_server> out;
  std::set<std::string> names;
  for (const auto& h : hosts) {
    std::string n = server_name(h);
    for (int i = 2; names.count(n); ++i) n = server_name(h) + "_" + std::to_string(i);
    names.insert(n);
    out.push_back({n, h});
  }
  return out;
}

boost::system::result<output, std::string> render(const config::master_config& cfg, const options& opt) {
  auto ms = cluster_masters(cfg, opt);
  if (!ms) return fail(ms.error());
  if (!safe_token(opt.lb_address)) return fail("--lb-address: not an address");
  if (!opt.stats_socket.empty() && !safe_token(opt.stats_socket))
    return fail("--stats-socket: the path must not contain blanks, quotes or '#'");
  if (!opt.run_as.empty() && !safe_token(opt.run_as)) return fail("--run-as: not a user name");
  if (!opt.log_target.empty() && !safe_token(opt.log_target)) return fail("--log: not a log target");
  if (opt.maxconn < 2) return fail("--maxconn: expected at least 2");
  if (opt.request_maxconn < 1 || opt.request_maxconn >= opt.maxconn)
    return fail("--request-maxconn: expected between 1 and maxconn - 1");
  if (opt.request_timeout < 1) return fail("--request-timeout: expected at least 1 second");
  for (auto p : {opt.lb_publish_port, opt.lb_ret_port})
    if (p && (*p < 1 || *p > 65535)) return fail("frontend port: expected 1..65535");

  output o;
  o.masters = *ms;
  const int pub_port = opt.lb_publish_port.value_or(cfg.publish_port);
  const int ret_port = opt.lb_ret_port.value_or(cfg.ret_port);
  if (pub_port == ret_port) return fail("the publish and request frontends need different ports");
  const bool http_check = cfg.health_port > 0;
  if (!http_check)
    o.warnings.push_back(
        "health_port is 0 (off): HAProxy can only check that the masters accept TCP connections; set health_port "
        "(4507 recommended) on every master so a master that is up but not ready takes no minions");
  if (opt.maxconn >= 9900)
    o.warnings.push_back(fmt::format("maxconn {} needs more than 19,800 open files; the lab machines allow 20,000",
                                     opt.maxconn));
  if (!cfg.cluster_id)
    o.warnings.push_back("no cluster_id in this configuration: the backends hold this master only");
  const std::string sess = fmt::format("{}s", cfg.publish_session);
  const std::string req_to = fmt::format("{}s", opt.request_timeout);

  std::string t;
  auto line = [&t](std::string_view s) {
    t += s;
    t += '\n';
  };
  line(fmt::format("# haproxy.cfg for the sylvite (Salt-compatible) master cluster {}, written by",
                   cfg.cluster_id ? "'" + *cfg.cluster_id + "'" : std::string("(single master)")));
  line(fmt::format("# sylvite-haproxy-cfg from {} (master '{}').", cfg.config_dir.string(), cfg.id));
  line("# Regenerate it when masters or ports change; see docs/deploy.md for every setting.");
  line("# Minions use this load balancer's address as `master`; masters talk to each other");
  line(fmt::format("# directly on cluster_pool_port ({}), never through here.", cfg.cluster_pool_port));
  line("");
  line("global");
  if (!opt.log_target.empty()) line(fmt::format("    log {} local0 info", opt.log_target));
  line(fmt::format("    maxconn {}", opt.maxconn));
  if (!opt.stats_socket.empty()) {
    line("    # runtime API: show stat, disable/enable server, set server ... state drain|ready");
    line(fmt::format("    stats socket {} mode 600 level admin expose-fd listeners", opt.stats_socket));
    line("    stats timeout 30s");
  }
  if (!opt.run_as.empty()) {
    line(fmt::format("    user {}", opt.run_as));
    line(fmt::format("    group {}", opt.run_as));
  }
  line("");
  line("defaults");
  line("    mode tcp");
  if (!opt.log_target.empty()) {
    line("    log global");
    line("    option tcplog");
    line("    option dontlognull");
  }
  line("    # a connection to a master that just died is retried on another one");
  line("    option redispatch");
  line("    retries 2");
  line(fmt::format("    timeout connect {}ms", opt.connect_timeout_ms));
  line("    timeout check 2s");
  line("    # DOWN after 2 failed checks 500 ms apart, UP after 2 good ones; a master marked");
  line("    # down has its minions' connections closed so they reconnect elsewhere at once");
  line("    default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions");
  line("");

  auto backend_servers = [&](int port) {
    if (http_check) {
      line("    # each master's health_port: 200 when ready, 503 when up but not ready");
      line("    option httpchk GET /ready");
      line("    http-check expect status 200");
    }
    for (const auto& m : o.masters) {
      if (http_check)
        line(fmt::format("    server {} {} check port {}", m.name, haproxy_address(m.host, port), cfg.health_port));
      else
        line(fmt::format("    server {} {} check", m.name, haproxy_address(m.host, port)));
    }
  };

  line(fmt::format("# Publish channel (publish_port): one long-lived, mostly idle subscription per minion."));
  line(fmt::format("# Timeouts = publish_session ({} s) so HAProxy never cuts an idle subscription.",
                   cfg.publish_session));
  line("frontend salt_publish");
  line(fmt::format("    bind {}", haproxy_address(opt.lb_address, pub_port)));
  line(fmt::format("    maxconn {}", opt.maxconn - opt.request_maxconn));
  line("    option clitcpka");
  line(fmt::format("    timeout client {}", sess));
  line("    default_backend salt_publish_masters");
  line("");
  line("backend salt_publish_masters");
  line("    # long-lived connections: spread by count, not by turn");
  line("    balance leastconn");
  line("    option srvtcpka");
  line(fmt::format("    timeout server {}", sess));
  line(fmt::format("    timeout tunnel {}", sess));
  backend_servers(cfg.publish_port);
  line("");
  line("# Request channel (ret_port): sign-in, returns, pillar, files; any master answers any minion.");
  line("frontend salt_request");
  line(fmt::format("    bind {}", haproxy_address(opt.lb_address, ret_port)));
  line(fmt::format("    maxconn {}", opt.request_maxconn));
  line(fmt::format("    timeout client {}", req_to));
  line("    default_backend salt_request_masters");
  line("");
  line("backend salt_request_masters");
  line("    balance roundrobin");
  line(fmt::format("    timeout server {}", req_to));
  backend_servers(cfg.ret_port);
  o.text = std::move(t);
  return o;
}

check_result check_with_haproxy(const std::string& file, const std::string& haproxy) {
  check_result r;
  std::string bin = haproxy;
  if (bin.empty()) {
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "";
    p += ":/usr/sbin:/usr/local/sbin";
    std::size_t start = 0;
    while (start <= p.size()) {
      auto end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      std::string dir = p.substr(start, end - start);
      if (!dir.empty()) {
        auto cand = std::filesystem::path(dir) / "haproxy";
        if (::access(cand.c_str(), X_OK) == 0) {
          bin = cand.string();
          break;
        }
      }
      start = end + 1;
    }
    if (bin.empty()) return r;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.ran = true;
    r.output = "cannot create a pipe";
    return r;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    r.ran = true;
    r.output = "cannot fork";
    return r;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    const char* argv[] = {bin.c_str(), "-c", "-f", file.c_str(), nullptr};
    ::execv(bin.c_str(), const_cast<char* const*>(argv));
    std::_Exit(127);
  }
  ::close(fds[1]);
  r.ran = true;
  // haproxy -c is quick; bound the wait anyway (a hung resolver on a server name).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      r.output += "\n(haproxy -c did not finish within 60 s)";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int pr = ::poll(&p, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char buf[4096];
    auto n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.valid = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && r.output.empty()) r.output = "cannot run " + bin;
  return r;
}

}  // namespace sylvite::haproxy_cfg
