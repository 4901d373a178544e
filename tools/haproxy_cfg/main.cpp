// sylvite-haproxy-cfg: writes haproxy.cfg for a sylvite master cluster from a master's
// configuration directory, then validates it with `haproxy -c -f` when haproxy is
// installed. With --out, the file is replaced only by a configuration haproxy accepted.
// Exit codes: 0 written (and valid, or haproxy absent), 1 bad master configuration or
// options, 2 usage, 3 haproxy rejected the configuration (its message on stderr),
// 4 cannot write the output.
// Runtime mode (HAProxy >= 2.6, admin socket): --add-server NAME --server-address HOST
// adds one master (a joined cluster member) to both backends of a running load balancer;
// --remove-server NAME takes one out (disable, close its sessions, delete). Exit 5 when
// the runtime API refuses or cannot be reached; for --add-server the exact haproxy.cfg
// lines to add by hand are printed then.
//   sylvite-haproxy-cfg -c /etc/salt --stats-socket /run/haproxy/admin.sock
//       --add-server master4 --server-address 10.0.0.14   (one command line)
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "cluster/lb_admin.hpp"
#include "core/config/config.hpp"
#include "core/util/files.hpp"
#include "tools/haproxy_cfg/haproxy_cfg.hpp"

namespace hc = sylvite::haproxy_cfg;
namespace lb = sylvite::lb_admin;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{
      "sylvite-haproxy-cfg: write haproxy.cfg for the sylvite master cluster described by a master's "
      "configuration (publish_port, ret_port, publish_session, health_port, interface, cluster_peers), "
      "validated with `haproxy -c` when haproxy is installed"};
  std::string config_dir = "/etc/salt";
  std::string out;
  std::string log_target = "/dev/log";
  std::string haproxy_bin;
  bool no_check = false;
  hc::options o;
  int lb_pub = 0, lb_ret = 0;
  app.add_option("-c,--config-dir", config_dir, "Salt configuration directory of one master (default /etc/salt)");
  app.add_option("-o,--out", out, "Write here (atomically, only if valid) instead of stdout");
  app.add_option("--lb-address", o.lb_address, "Address the frontends bind (default 0.0.0.0)");
  app.add_option("--lb-publish-port", lb_pub, "Publish frontend port (default: publish_port)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--lb-ret-port", lb_ret, "Request frontend port (default: ret_port)")->check(CLI::Range(1, 65535));
  app.add_option("--self-address", o.self_address,
                 "This master's address as HAProxy reaches it (default: interface; needed when interface is 0.0.0.0)");
  app.add_option("--stats-socket", o.stats_socket, "Admin stats socket path (default /run/haproxy/admin.sock)");
  app.add_option("--maxconn", o.maxconn, "Global maxconn (default 9500; keep 2*maxconn under the open-file limit)");
  app.add_option("--request-maxconn", o.request_maxconn,
                 "maxconn of the request frontend (default 2000; the publish frontend gets the rest)");
  app.add_option("--request-timeout", o.request_timeout,
                 "Request channel client/server timeout in seconds (default 60)");
  app.add_option("--run-as", o.run_as, "user/group HAProxy drops to (e.g. haproxy); default: none");
  app.add_option("--log", log_target, "syslog target for `log` (default /dev/log; 'none' = no logging)");
  app.add_option("--haproxy", haproxy_bin, "haproxy binary for the check (default: haproxy on PATH)");
  app.add_flag("--no-check", no_check, "Do not run haproxy -c");
  std::string add_server, server_address, remove_server;
  lb::runtime_backends be;
  app.add_option("--add-server", add_server, "Runtime: add this master (server name) to the running HAProxy");
  app.add_option("--server-address", server_address, "Runtime: the added master's address (with --add-server)");
  app.add_option("--remove-server", remove_server, "Runtime: take this server out of the running HAProxy");
  app.add_option("--publish-backend", be.publish, "Runtime: publish backend name (default salt_publish_masters)");
  app.add_option("--request-backend", be.request, "Runtime: request backend name (default salt_request_masters)");
  CLI11_PARSE(app, argc, argv);
  if (!remove_server.empty()) {
    auto r = lb::runtime_send(o.stats_socket, lb::runtime_remove_commands(remove_server, be));
    if (!r) {
      std::cerr << "sylvite-haproxy-cfg: " << r.error() << "\n";
      return 5;
    }
    std::cerr << "sylvite-haproxy-cfg: removed " << remove_server << " from " << be.publish << " and " << be.request
              << "; remove its `server` lines from haproxy.cfg too\n";
    return 0;
  }
  if (lb_pub) o.lb_publish_port = lb_pub;
  if (lb_ret) o.lb_ret_port = lb_ret;
  o.log_target = log_target == "none" ? "" : log_target;

  auto cfg = sylvite::config::load_master_config(config_dir);
  if (!cfg) {
    std::cerr << "sylvite-haproxy-cfg: " << cfg.error().message << "\n";
    return 1;
  }
  if (!add_server.empty()) {
    if (server_address.empty()) {
      std::cerr << "sylvite-haproxy-cfg: --add-server needs --server-address\n";
      return 2;
    }
    const lb::master_server m{add_server, server_address};
    auto cmds = lb::runtime_add_commands(*cfg, m, be);
    if (!cmds) {
      std::cerr << "sylvite-haproxy-cfg: " << cmds.error() << "\n";
      return 1;
    }
    auto r = lb::runtime_send(o.stats_socket, *cmds);
    if (!r) {
      std::cerr << "sylvite-haproxy-cfg: " << r.error() << "\nadd these lines to haproxy.cfg and reload HAProxy:\n";
      for (const auto& l : lb::config_lines(*cfg, m, be)) std::cerr << "  " << l << "\n";
      return 5;
    }
    std::cerr << "sylvite-haproxy-cfg: added " << add_server << " (" << server_address << ") to " << be.publish
              << " and " << be.request << "; add it to haproxy.cfg too (regenerate it) so a reload keeps it\n";
    return 0;
  }
  auto r = hc::render(*cfg, o);
  if (!r) {
    std::cerr << "sylvite-haproxy-cfg: " << r.error() << "\n";
    return 1;
  }
  for (const auto& w : r->warnings) std::cerr << "sylvite-haproxy-cfg: warning: " << w << "\n";

  // Write a candidate next to the destination (same file system: the rename is atomic),
  // check it, then move it into place.
  const fs::path dest = out.empty() ? fs::path() : fs::path(out);
  const fs::path dir = out.empty() ? fs::temp_directory_path() : (dest.has_parent_path() ? dest.parent_path() : ".");
  const fs::path cand = dir / ((out.empty() ? std::string("haproxy") : dest.filename().string()) + ".sylvite-tmp." +
                               std::to_string(::getpid()) + ".cfg");
  if (auto w = sylvite::util::write_file_atomic(cand, r->text, 0644); !w) {
    std::cerr << "sylvite-haproxy-cfg: cannot write " << cand.string() << ": " << w.error().message() << "\n";
    return 4;
  }
  auto cleanup = [&] {
    std::error_code ec;
    fs::remove(cand, ec);
  };
  if (!no_check) {
    auto c = hc::check_with_haproxy(cand.string(), haproxy_bin);
    if (!c.ran) {
      std::cerr << "sylvite-haproxy-cfg: haproxy not found: configuration not validated\n";
    } else if (!c.valid) {
      std::cerr << "sylvite-haproxy-cfg: haproxy rejected the configuration:\n" << c.output;
      if (!c.output.empty() && c.output.back() != '\n') std::cerr << "\n";
      cleanup();
      return 3;
    }
  }
  if (out.empty()) {
    std::cout << r->text;
    cleanup();
    return std::cout.good() ? 0 : 4;
  }
  std::error_code ec;
  fs::rename(cand, dest, ec);
  if (ec) {
    std::cerr << "sylvite-haproxy-cfg: cannot write " << dest.string() << ": " << ec.message() << "\n";
    cleanup();
    return 4;
  }
  std::cerr << "sylvite-haproxy-cfg: wrote " << dest.string() << " (" << r->masters.size() << " master(s):";
  for (const auto& m : r->masters) std::cerr << " " << m.host;
  std::cerr << ")\n";
  return 0;
}
