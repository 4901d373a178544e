// Tests of tools/haproxy_cfg: the generated haproxy.cfg (frontends, timeouts from
// publish_session, checks on health_port, balance, redispatch, stats socket, masters
// from interface + cluster_peers) and, when haproxy is installed, that haproxy -c
// accepts it and rejects a broken file. (The runtime API: tests/unit/lb_admin.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>

#include "tools/haproxy_cfg/haproxy_cfg.hpp"

namespace hc = sylvite::haproxy_cfg;
namespace fs = std::filesystem;
using sylvite::config::master_config;

namespace {

master_config cluster_cfg() {
  master_config c;
  c.config_dir = "/etc/salt";
  c.id = "m1";
  c.interface = "10.0.0.1";
  c.cluster_id = "prod";
  c.cluster_peers = {"10.0.0.2", "10.0.0.3:4520"};
  c.health_port = 4507;
  return c;
}

std::string section(const std::string& text, const std::string& header) {
  auto b = text.find("\n" + header + "\n");
  if (b == std::string::npos) return "";
  auto e = text.find("\n\n", b + 1);
  return text.substr(b + 1, e == std::string::npos ? std::string::npos : e - b - 1);
}

bool has_line(const std::string& sec, const std::string& line) {
  return sec.find("\n    " + line + "\n") != std::string::npos ||
         (sec.size() >= line.size() + 5 &&
          sec.compare(sec.size() - line.size() - 4, std::string::npos, "    " + line) == 0);
}

bool haproxy_installed() { return ::access("/usr/sbin/haproxy", X_OK) == 0 || hc::check_with_haproxy("/dev/null").ran; }

}  // namespace

TEST(HaproxyCfg, masters_are_self_plus_peers_sorted_without_duplicates) {
  auto c = cluster_cfg();
  c.cluster_peers = {"10.0.0.3:4520", "10.0.0.1", "m-b.example", "10.0.0.2"};  // self listed too
  auto m = hc::cluster_masters(c, {});
  ASSERT_TRUE(m) << m.error();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[0].host, "10.0.0.1");
  EXPECT_EQ((*m)[1].host, "10.0.0.2");
  EXPECT_EQ((*m)[2].host, "10.0.0.3");  // the :4520 is the peer-bus port, not used here
  EXPECT_EQ((*m)[3].host, "m-b.example");
  EXPECT_EQ((*m)[3].name, "m-b.example");
}

TEST(HaproxyCfg, wildcard_interface_needs_self_address) {
  auto c = cluster_cfg();
  c.interface = "0.0.0.0";
  auto m = hc::cluster_masters(c, {});
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().find("--self-address"), std::string::npos) << m.error();
  hc::options o;
  o.self_address = "10.0.0.9";
  m = hc::cluster_masters(c, o);
  ASSERT_TRUE(m) << m.error();
  EXPECT_EQ(m->size(), 3u);
}

TEST(HaproxyCfg, bad_peer_entry_is_refused) {
  auto c = cluster_cfg();
  c.cluster_peers = {"10.0.0.2:notaport"};
  auto r = hc::render(c, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("cluster_peers entry '10.0.0.2:notaport'"), std::string::npos) << r.error();
  c.cluster_peers = {"bad host"};
  EXPECT_FALSE(hc::render(c, {}));
}

TEST(HaproxyCfg, publish_frontend_and_backend) {
  auto c = cluster_cfg();
  c.publish_session = 90000;
  hc::options o;
  o.lb_address = "192.0.2.10";
  auto r = hc::render(c, o);
  ASSERT_TRUE(r) << r.error();
  const auto fe = section(r->text, "frontend salt_publish");
  ASSERT_FALSE(fe.empty()) << r->text;
  EXPECT_TRUE(has_line(fe, "bind 192.0.2.10:4505")) << fe;
  EXPECT_TRUE(has_line(fe, "timeout client 90000s")) << fe;  // = publish_session
  EXPECT_TRUE(has_line(fe, "maxconn 7500")) << fe;
  EXPECT_TRUE(has_line(fe, "default_backend salt_publish_masters")) << fe;
  const auto be = section(r->text, "backend salt_publish_masters");
  EXPECT_TRUE(has_line(be, "balance leastconn")) << be;
  EXPECT_TRUE(has_line(be, "timeout server 90000s")) << be;
  EXPECT_TRUE(has_line(be, "timeout tunnel 90000s")) << be;
  EXPECT_TRUE(has_line(be, "option httpchk GET /ready")) << be;
  EXPECT_TRUE(has_line(be, "http-check expect status 200")) << be;
  EXPECT_TRUE(has_line(be, "server 10.0.0.1 10.0.0.1:4505 check port 4507")) << be;
  EXPECT_TRUE(has_line(be, "server 10.0.0.2 10.0.0.2:4505 check port 4507")) << be;
  EXPECT_TRUE(has_line(be, "server 10.0.0.3 10.0.0.3:4505 check port 4507")) << be;
}

TEST(HaproxyCfg, request_frontend_and_backend) {
  auto c = cluster_cfg();
  c.ret_port = 5506;
  c.publish_port = 5505;
  c.health_port = 5507;
  auto r = hc::render(c, {});
  ASSERT_TRUE(r) << r.error();
  const auto fe = section(r->text, "frontend salt_request");
  EXPECT_TRUE(has_line(fe, "bind 0.0.0.0:5506")) << fe;
  EXPECT_TRUE(has_line(fe, "timeout client 60s")) << fe;
  EXPECT_TRUE(has_line(fe, "maxconn 2000")) << fe;
  const auto be = section(r->text, "backend salt_request_masters");
  EXPECT_TRUE(has_line(be, "balance roundrobin")) << be;
  EXPECT_TRUE(has_line(be, "timeout server 60s")) << be;
  EXPECT_TRUE(has_line(be, "server 10.0.0.2 10.0.0.2:5506 check port 5507")) << be;
  EXPECT_TRUE(has_line(section(r->text, "frontend salt_publish"), "bind 0.0.0.0:5505"));
}

TEST(HaproxyCfg, defaults_and_global) {
  auto r = hc::render(cluster_cfg(), {});
  ASSERT_TRUE(r) << r.error();
  const auto d = section(r->text, "defaults");
  EXPECT_TRUE(has_line(d, "mode tcp")) << d;
  EXPECT_TRUE(has_line(d, "option redispatch")) << d;
  EXPECT_TRUE(has_line(d, "retries 2")) << d;
  EXPECT_TRUE(has_line(d, "default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions")) << d;
  const auto g = section(r->text, "global");
  EXPECT_TRUE(has_line(g, "maxconn 9500")) << g;
  EXPECT_TRUE(has_line(g, "stats socket /run/haproxy/admin.sock mode 600 level admin expose-fd listeners")) << g;
  EXPECT_TRUE(r->warnings.empty());
  // Every maxconn stays under the 9,900 the machines' open-file limit allows.
  // (no std::regex: GCC 12 warns inside it under the sanitizer build)
  int seen = 0;
  for (auto pos = r->text.find("maxconn "); pos != std::string::npos; pos = r->text.find("maxconn ", pos + 1)) {
    EXPECT_LT(std::stoi(r->text.substr(pos + 8)), 9900);
    ++seen;
  }
  EXPECT_EQ(seen, 3);
}

TEST(HaproxyCfg, lb_ports_stats_socket_and_user) {
  hc::options o;
  o.lb_publish_port = 14505;
  o.lb_ret_port = 14506;
  o.stats_socket = "/tmp/x/admin.sock";
  o.run_as = "haproxy";
  o.log_target = "";
  auto r = hc::render(cluster_cfg(), o);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(has_line(section(r->text, "frontend salt_publish"), "bind 0.0.0.0:14505"));
  EXPECT_TRUE(has_line(section(r->text, "frontend salt_request"), "bind 0.0.0.0:14506"));
  // servers keep the masters' own ports
  EXPECT_TRUE(
      has_line(section(r->text, "backend salt_request_masters"), "server 10.0.0.1 10.0.0.1:4506 check port 4507"));
  const auto g = section(r->text, "global");
  EXPECT_TRUE(has_line(g, "user haproxy")) << g;
  EXPECT_TRUE(has_line(g, "group haproxy")) << g;
  EXPECT_NE(g.find("stats socket /tmp/x/admin.sock "), std::string::npos) << g;
  EXPECT_EQ(r->text.find("log "), std::string::npos);
  o.stats_socket = "/tmp/with space";
  EXPECT_FALSE(hc::render(cluster_cfg(), o));
  o.stats_socket = "/tmp/a.sock";
  o.lb_ret_port = 14505;  // same as publish
  EXPECT_FALSE(hc::render(cluster_cfg(), o));
}

TEST(HaproxyCfg, without_health_port_tcp_checks_and_a_warning) {
  auto c = cluster_cfg();
  c.health_port = 0;
  auto r = hc::render(c, {});
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->text.find("httpchk"), std::string::npos);
  EXPECT_TRUE(has_line(section(r->text, "backend salt_publish_masters"), "server 10.0.0.1 10.0.0.1:4505 check"));
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("health_port"), std::string::npos);
}

TEST(HaproxyCfg, single_master_without_cluster_id) {
  master_config c;
  c.interface = "127.0.0.5";
  c.health_port = 4507;
  auto r = hc::render(c, {});
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->masters.size(), 1u);
  EXPECT_EQ(r->masters[0].host, "127.0.0.5");
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("cluster_id"), std::string::npos);
}

TEST(HaproxyCfg, ipv6_addresses) {
  EXPECT_EQ(hc::haproxy_address("fd00::2", 4506), "ipv6@fd00::2:4506");
  EXPECT_EQ(hc::haproxy_address("10.0.0.1", 4506), "10.0.0.1:4506");
  auto c = cluster_cfg();
  c.interface = "fd00::1";
  c.cluster_peers = {"[fd00::2]:4520"};
  hc::options o;
  o.lb_address = "::";
  auto r = hc::render(c, o);
  ASSERT_TRUE(r) << r.error();
  EXPECT_TRUE(
      has_line(section(r->text, "backend salt_request_masters"), "server fd00__2 ipv6@fd00::2:4506 check port 4507"))
      << r->text;
  EXPECT_TRUE(has_line(section(r->text, "frontend salt_request"), "bind ipv6@:::4506")) << r->text;
}

TEST(HaproxyCfg, haproxy_accepts_the_output_and_rejects_garbage) {
  if (!haproxy_installed()) GTEST_SKIP() << "haproxy not installed";
  const fs::path dir = fs::temp_directory_path() / ("sylvite-hapcfg-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (bool v6 : {false, true}) {
    auto c = cluster_cfg();
    hc::options o;
    o.stats_socket = (dir / "admin.sock").string();
    if (v6) {
      c.interface = "fd00::1";
      c.cluster_peers = {"[fd00::2]:4520", "fd00::3"};
      o.lb_address = "::";
    }
    auto r = hc::render(c, o);
    ASSERT_TRUE(r) << r.error();
    const auto f = dir / "haproxy.cfg";
    std::ofstream(f) << r->text;
    auto chk = hc::check_with_haproxy(f.string());
    ASSERT_TRUE(chk.ran);
    EXPECT_TRUE(chk.valid) << chk.output << "\n" << r->text;
  }
  std::ofstream(dir / "bad.cfg") << "frontend x\n    bind 0.0.0.0:1\n    no_such_keyword 1\n";
  auto bad = hc::check_with_haproxy((dir / "bad.cfg").string());
  EXPECT_TRUE(bad.ran);
  EXPECT_FALSE(bad.valid);
  EXPECT_NE(bad.output.find("no_such_keyword"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

TEST(HaproxyCfg, missing_haproxy_binary_is_reported_as_not_run) {
  auto r = hc::check_with_haproxy("/dev/null", "/nonexistent/haproxy");
  // An explicit path that does not exist: the exec fails (127), reported as invalid.
  EXPECT_TRUE(r.ran);
  EXPECT_FALSE(r.valid);
}

TEST(HaproxyCfg, health_port_option_from_the_config_file) {
  const fs::path dir = fs::temp_directory_path() / ("sylvite-hapcfg-opt-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    auto c = sylvite::config::load_master_config(dir);  // no file: the default
    ASSERT_TRUE(c);
    EXPECT_EQ(c->health_port, 0);
    EXPECT_EQ(c->raw["health_port"], 0);
  }
  std::ofstream(dir / "master")
      << "interface: 10.0.0.1\nhealth_port: 4507\ncluster_id: c\ncluster_peers: [10.0.0.2]\n";
  {
    auto c = sylvite::config::load_master_config(dir);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->health_port, 4507);
    auto r = hc::render(*c, {});
    ASSERT_TRUE(r) << r.error();
    EXPECT_TRUE(
        has_line(section(r->text, "backend salt_publish_masters"), "server 10.0.0.2 10.0.0.2:4505 check port 4507"));
  }
  for (const char* bad : {"health_port: 70000\n", "health_port: -1\n", "health_port: web\n"}) {
    std::ofstream(dir / "master") << bad;
    auto c = sylvite::config::load_master_config(dir);
    ASSERT_FALSE(c) << bad;
    EXPECT_NE(c.error().message.find("option 'health_port'"), std::string::npos) << c.error().message;
  }
  fs::remove_all(dir);
}
