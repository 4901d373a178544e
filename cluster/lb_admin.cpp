// sylvite::lb_admin: see lb_admin.hpp. The HAProxy runtime API as measured on HAProxy
// 2.6.12 (../shared/reference/lab-notes.md): a dynamic server does not inherit
// default-server and starts in maintenance; the admin socket answers one command per
// connection and closes it.
#include "cluster/lb_admin.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace sylvite::lb_admin {

bool wildcard_host(const std::string& h) { return h.empty() || h == "0.0.0.0" || h == "::" || h == "*"; }

bool safe_token(const std::string& s) {
  // Values written into haproxy.cfg or a runtime command unquoted: no blanks, quotes,
  // comments or controls.
  return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == '#' || c == '"' || c == '\'' || c == '\\' ||
           static_cast<unsigned char>(c) < 0x20;
  });
}

std::string server_name(const std::string& host) {
  std::string n;
  for (char c : host) n += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return n;
}

std::string haproxy_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("ipv6@{}:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

// ---- runtime API ----------------------------------------------------------------------------------
namespace {
std::string server_args(const config::master_config& cfg, const master_server& m, int port) {
  std::string a = haproxy_address(m.host, port) + " check";
  if (cfg.health_port > 0) a += fmt::format(" port {}", cfg.health_port);
  return a;
}
}  // namespace

std::vector<std::string> config_lines(const config::master_config& cfg, const master_server& m,
                                      const runtime_backends& b) {
  return {fmt::format("backend {}:    server {} {}", b.publish, m.name, server_args(cfg, m, cfg.publish_port)),
          fmt::format("backend {}:    server {} {}", b.request, m.name, server_args(cfg, m, cfg.ret_port))};
}

boost::system::result<std::vector<std::string>, std::string> runtime_add_commands(const config::master_config& cfg,
                                                                                  const master_server& m,
                                                                                  const runtime_backends& b) {
  using R = boost::system::result<std::vector<std::string>, std::string>;
  if (m.name.empty() || server_name(m.name) != m.name) return R(boost::system::in_place_error, "bad server name '" + m.name + "'");
  if (!safe_token(m.host) || wildcard_host(m.host)) return R(boost::system::in_place_error, "bad server address '" + m.host + "'");
  if (!safe_token(b.publish) || !safe_token(b.request)) return R(boost::system::in_place_error, "bad backend name");
  // default-server of render() (dynamic servers do not inherit it in HAProxy 2.6).
  const std::string dflt = "inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions";
  std::vector<std::string> out;
  for (const auto& [be, port] : {std::pair{b.publish, cfg.publish_port}, std::pair{b.request, cfg.ret_port}}) {
    out.push_back(fmt::format("add server {}/{} {} {}", be, m.name, server_args(cfg, m, port), dflt));
    out.push_back(fmt::format("enable health {}/{}", be, m.name));
    out.push_back(fmt::format("enable server {}/{}", be, m.name));
  }
  return out;
}

std::vector<std::string> runtime_remove_commands(const std::string& name, const runtime_backends& b) {
  std::vector<std::string> out;
  for (const auto& be : {b.publish, b.request}) {
    out.push_back(fmt::format("disable server {}/{}", be, name));
    out.push_back(fmt::format("shutdown sessions server {}/{}", be, name));
    out.push_back(fmt::format("del server {}/{}", be, name));
  }
  return out;
}

boost::system::result<std::vector<std::string>, std::string> runtime_send(const std::string& socket,
                                                                         const std::vector<std::string>& commands) {
  using R = boost::system::result<std::vector<std::string>, std::string>;
  std::vector<std::string> answers;
  sockaddr_storage ss{};
  socklen_t slen = 0;
  int family = AF_UNIX;
  if (!socket.empty() && socket.front() == '/') {
    sockaddr_un sa{};
    if (socket.size() >= sizeof sa.sun_path) return R(boost::system::in_place_error, "admin socket path too long");
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, socket.data(), socket.size());
    std::memcpy(&ss, &sa, sizeof sa);
    slen = sizeof sa;
  } else {
    // host:port ([v6]:port): numeric addresses only (no resolver on this path).
    const auto colon = socket.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= socket.size())
      return R(boost::system::in_place_error, "bad admin socket '" + socket + "': a path or host:port");
    std::string host = socket.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    int port = 0;
    try {
      port = std::stoi(socket.substr(colon + 1));
    } catch (...) {
      port = 0;
    }
    if (port <= 0 || port > 65535) return R(boost::system::in_place_error, "bad admin socket port in '" + socket + "'");
    sockaddr_in v4{};
    sockaddr_in6 v6{};
    if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
      v4.sin_family = AF_INET;
      v4.sin_port = htons(static_cast<std::uint16_t>(port));
      std::memcpy(&ss, &v4, sizeof v4);
      slen = sizeof v4;
      family = AF_INET;
    } else if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
      v6.sin6_family = AF_INET6;
      v6.sin6_port = htons(static_cast<std::uint16_t>(port));
      std::memcpy(&ss, &v6, sizeof v6);
      slen = sizeof v6;
      family = AF_INET6;
    } else {
      return R(boost::system::in_place_error, "bad admin socket '" + socket + "': a path or a numeric host:port");
    }
  }
  for (const auto& c : commands) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return R(boost::system::in_place_error, std::string("socket: ") + std::strerror(errno));
    const timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), slen) != 0) {
      std::string e = std::strerror(errno);
      ::close(fd);
      return R(boost::system::in_place_error, "cannot connect to " + socket + ": " + e);
    }
    const std::string line = c + "\n";
    std::size_t off = 0;
    while (off < line.size()) {
      auto n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return R(boost::system::in_place_error, "cannot send '" + c + "' to " + socket);
      }
      off += static_cast<std::size_t>(n);
    }
    std::string ans;
    char buf[4096];
    for (;;) {
      auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      ans.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    while (!ans.empty() && (ans.back() == '\n' || ans.back() == ' ')) ans.pop_back();
    // HAProxy answers success with nothing or an informational line; errors name
    // themselves (no such server, unknown command, permission denied, ...).
    static const char* const bad[] = {"No such", "Unknown", "unknown", "Permission denied", "error", "Error",
                                      "not found", "Require", "cannot", "Cannot", "Invalid", "invalid",
                                      "Unable", "unable", "Only supported", "not supported", "Already exists",
                                      "already exists"};
    for (const char* b : bad)
      if (ans.find(b) != std::string::npos) return R(boost::system::in_place_error, "'" + c + "': " + ans);
    answers.push_back(std::move(ans));
  }
  return answers;
}

}  // namespace sylvite::lb_admin
