// Tests of cluster/lb_admin: the HAProxy runtime API commands that add a master to (and
// take one out of) both backends, the haproxy.cfg lines printed when the API cannot be
// used, the token rules, and, when haproxy is installed, the commands on a running
// HAProxy's admin socket (Unix and TCP).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cluster/lb_admin.hpp"

namespace lb = sylvite::lb_admin;
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

// haproxy on PATH or in /usr/sbin (as sylvite-haproxy-cfg looks for it).
bool haproxy_installed() {
  if (::access("/usr/sbin/haproxy", X_OK) == 0) return true;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && ::access((fs::path(d) / "haproxy").c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace

TEST(LbAdmin, token_rules) {
  EXPECT_EQ(lb::server_name("fd00::2"), "fd00__2");
  EXPECT_EQ(lb::server_name("m-1.example_x"), "m-1.example_x");
  EXPECT_EQ(lb::server_name("a b/c"), "a_b_c");
  EXPECT_EQ(lb::haproxy_address("fd00::2", 4506), "ipv6@fd00::2:4506");
  EXPECT_EQ(lb::haproxy_address("10.0.0.1", 4506), "10.0.0.1:4506");
  EXPECT_TRUE(lb::safe_token("/run/haproxy/admin.sock"));
  for (const char* bad : {"", "a b", "a#b", "a\"b", "a'b", "a\\b", "a\nb", "a\tb"}) EXPECT_FALSE(lb::safe_token(bad)) << bad;
  for (const char* w : {"", "0.0.0.0", "::", "*"}) EXPECT_TRUE(lb::wildcard_host(w)) << w;
  EXPECT_FALSE(lb::wildcard_host("10.0.0.1"));
}

TEST(LbAdmin, runtime_commands_for_one_master) {
  auto c = cluster_cfg();
  auto add = lb::runtime_add_commands(c, {"m4", "10.0.0.4"});
  ASSERT_TRUE(add) << add.error();
  ASSERT_EQ(add->size(), 6u);
  EXPECT_EQ((*add)[0],
            "add server salt_publish_masters/m4 10.0.0.4:4505 check port 4507 inter 500ms fall 2 rise 2 "
            "on-marked-down shutdown-sessions");
  EXPECT_EQ((*add)[1], "enable health salt_publish_masters/m4");
  EXPECT_EQ((*add)[2], "enable server salt_publish_masters/m4");
  EXPECT_EQ((*add)[3].rfind("add server salt_request_masters/m4 10.0.0.4:4506 check port 4507 ", 0), 0u);
  EXPECT_FALSE(lb::runtime_add_commands(c, {"m 4", "10.0.0.4"}));       // name with a blank
  EXPECT_FALSE(lb::runtime_add_commands(c, {"m4", "10.0.0.4\nquit"}));  // address with a newline
  EXPECT_FALSE(lb::runtime_add_commands(c, {"m4", "0.0.0.0"}));
  auto rm = lb::runtime_remove_commands("m4");
  ASSERT_EQ(rm.size(), 6u);
  EXPECT_EQ(rm[0], "disable server salt_publish_masters/m4");
  EXPECT_EQ(rm[1], "shutdown sessions server salt_publish_masters/m4");
  EXPECT_EQ(rm[2], "del server salt_publish_masters/m4");
  auto lines = lb::config_lines(c, {"m4", "10.0.0.4"});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "backend salt_publish_masters:    server m4 10.0.0.4:4505 check port 4507");
}

// The runtime API of a real HAProxy: add a master live, see it in `show servers state`,
// remove it again; an unknown backend is an error naming the command.
TEST(LbAdmin, runtime_add_and_remove_on_a_running_haproxy) {
  if (!haproxy_installed()) GTEST_SKIP() << "haproxy not installed";
  const fs::path dir = fs::temp_directory_path() / ("sylvite-lb-admin-rt-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string sock = (dir / "admin.sock").string();
  // A TCP admin socket too (cluster_lb_admin: host:port): a free port from the kernel.
  int port = 0;
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  std::ofstream(dir / "h.cfg") << "global\n    stats socket " << sock << " mode 600 level admin\n"
                               << "    stats socket ipv4@127.0.0.1:" << port << " level admin\n"
                               << "    pidfile " << (dir / "pid").string() << "\n"
                               << "defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 5s\n"
                               << "    timeout server 5s\n"
                               << "frontend p\n    bind unix@" << (dir / "p.sock").string()
                               << "\n    default_backend salt_publish_masters\n"
                               << "backend salt_publish_masters\n    balance leastconn\n"
                               << "    server m1 127.0.0.1:9 check\n"
                               << "frontend r\n    bind unix@" << (dir / "r.sock").string()
                               << "\n    default_backend salt_request_masters\n"
                               << "backend salt_request_masters\n    balance roundrobin\n"
                               << "    server m1 127.0.0.1:9 check\n";
  const std::string bin = ::access("/usr/sbin/haproxy", X_OK) == 0 ? "/usr/sbin/haproxy" : "haproxy";
  const std::string cmd = bin + " -D -f " + (dir / "h.cfg").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto stop = [&] {
    std::ifstream pf(dir / "pid");
    pid_t pid = 0;
    if (pf >> pid && pid > 1) ::kill(pid, SIGTERM);
  };
  for (int i = 0; i < 100 && !fs::exists(sock); ++i) ::usleep(20000);
  auto c = cluster_cfg();
  c.health_port = 0;
  auto add = lb::runtime_add_commands(c, {"m4", "127.0.0.1"});
  ASSERT_TRUE(add) << add.error();
  auto r = lb::runtime_send(sock, *add);
  EXPECT_TRUE(r) << (r ? "" : r.error());
  auto st = lb::runtime_send(sock, {"show servers state salt_publish_masters", "show servers state salt_request_masters"});
  ASSERT_TRUE(st) << st.error();
  EXPECT_NE((*st)[0].find(" m4 127.0.0.1 "), std::string::npos) << (*st)[0];
  EXPECT_NE((*st)[1].find(" m4 127.0.0.1 "), std::string::npos) << (*st)[1];
  auto again = lb::runtime_send(sock, {(*add)[0]});  // the same name twice
  EXPECT_FALSE(again);
  auto rm = lb::runtime_send(sock, lb::runtime_remove_commands("m4"));
  EXPECT_TRUE(rm) << (rm ? "" : rm.error());
  st = lb::runtime_send(sock, {"show servers state salt_publish_masters"});
  ASSERT_TRUE(st);
  EXPECT_EQ((*st)[0].find(" m4 "), std::string::npos) << (*st)[0];
  auto bad = lb::runtime_send(sock, {"del server no_such_backend/m4"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("no_such_backend"), std::string::npos) << bad.error();
  auto nosock = lb::runtime_send((dir / "none.sock").string(), {"show info"});
  EXPECT_FALSE(nosock);
  auto tcp = lb::runtime_send("127.0.0.1:" + std::to_string(port), {"show servers state salt_request_masters"});
  ASSERT_TRUE(tcp) << tcp.error();
  EXPECT_NE((*tcp)[0].find(" m1 127.0.0.1 "), std::string::npos) << (*tcp)[0];
  EXPECT_FALSE(lb::runtime_send("not-an-address:1", {"show info"}));
  EXPECT_FALSE(lb::runtime_send("127.0.0.1:99999", {"show info"}));
  stop();
  fs::remove_all(dir);
}
