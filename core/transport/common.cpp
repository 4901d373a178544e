// sylvite::transport: error category, uuid4 ids, socket options and peer formatting
// shared by servers and clients. Thread-safety: all functions are thread-safe.
#include "core/transport/detail/common.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <random>

namespace sylvite::transport {

namespace {

class category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.transport"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::timeout: return "deadline passed";
      case errc::disconnected: return "connection closed before the reply";
      case errc::resolve_failed: return "host lookup failed";
      case errc::connect_failed: return "connect failed";
      case errc::queue_full: return "write queue full";
      case errc::bad_frame: return "peer sent something that is not a frame";
      case errc::closed: return "closed by the owner";
    }
    return "unknown transport error";
  }
};

}  // namespace

const boost::system::error_category& transport_category() noexcept {
  static const category c;
  return c;
}

bool byte_budget::take(std::size_t n) noexcept {
  std::size_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (n > cap_ || cur > cap_ - n) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
  return true;
}

void byte_budget::give(std::size_t n) noexcept { used_.fetch_sub(n, std::memory_order_relaxed); }

std::uint64_t raise_open_files_limit() noexcept {
  struct rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    const rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      spdlog::warn("cannot raise the open files limit from {} to {}: {}", before, rl.rlim_max, std::strerror(errno));
      ::getrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  return static_cast<std::uint64_t>(rl.rlim_cur);
}

namespace detail {

namespace {

std::mt19937_64& rng() {
  // Seeded per thread from the OS; ids only need to be unique, not secret.
  thread_local std::mt19937_64 gen = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  return gen;
}

void set_int_opt(int fd, int level, int name, int value, const char* what) noexcept {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
    spdlog::debug("transport: setsockopt({}) failed: {}", what, std::strerror(errno));
  }
}

}  // namespace

std::string uuid4() {
  std::array<unsigned char, 16> b{};
  auto& g = rng();
  std::uint64_t hi = g(), lo = g();
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<unsigned char>(hi >> (8 * i));
    b[8 + i] = static_cast<unsigned char>(lo >> (8 * i));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(hex[b[i] >> 4]);
    out.push_back(hex[b[i] & 0x0f]);
  }
  return out;
}

std::shared_ptr<const std::string> pack_shared(const wire::value& head, const wire::value& body) noexcept {
  try {
    return std::make_shared<const std::string>(wire::pack_frame(head, body));
  } catch (const std::exception& e) {
    spdlog::error("transport: cannot encode frame: {}", e.what());
  } catch (...) {
    spdlog::error("transport: cannot encode frame");
  }
  return nullptr;
}

void apply_tcp_options(int fd, const options& opt) noexcept {
  set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
  if (opt.tcp_keepalive) {
    set_int_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
    if (opt.keepalive_idle > 0) set_int_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, opt.keepalive_idle, "TCP_KEEPIDLE");
    if (opt.keepalive_intvl > 0) set_int_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, opt.keepalive_intvl, "TCP_KEEPINTVL");
    if (opt.keepalive_cnt > 0) set_int_opt(fd, IPPROTO_TCP, TCP_KEEPCNT, opt.keepalive_cnt, "TCP_KEEPCNT");
  }
  if (opt.user_timeout_ms > 0) set_int_opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, opt.user_timeout_ms, "TCP_USER_TIMEOUT");
}

bool is_inet(const void* p, std::size_t len) noexcept {
  if (len < sizeof(sa_family_t)) return false;
  sa_family_t fam;
  std::memcpy(&fam, p, sizeof fam);
  return (fam == AF_INET && len >= sizeof(sockaddr_in)) || (fam == AF_INET6 && len >= sizeof(sockaddr_in6));
}

std::uint16_t port_of(const void* p, std::size_t len) noexcept {
  if (!is_inet(p, len)) return 0;
  sa_family_t fam;
  std::memcpy(&fam, p, sizeof fam);
  if (fam == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, p, sizeof sin);
    return ntohs(sin.sin_port);
  }
  sockaddr_in6 sin6;
  std::memcpy(&sin6, p, sizeof sin6);
  return ntohs(sin6.sin6_port);
}

std::string format_peer(const void* p, std::size_t len) {
  if (!is_inet(p, len)) return "unix";
  sa_family_t fam;
  std::memcpy(&fam, p, sizeof fam);
  char buf[INET6_ADDRSTRLEN] = {};
  if (fam == AF_INET) {
    sockaddr_in sin;
    std::memcpy(&sin, p, sizeof sin);
    ::inet_ntop(AF_INET, &sin.sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(sin.sin_port));
  }
  sockaddr_in6 sin6;
  std::memcpy(&sin6, p, sizeof sin6);
  ::inet_ntop(AF_INET6, &sin6.sin6_addr, buf, sizeof buf);
  return "[" + std::string(buf) + "]:" + std::to_string(ntohs(sin6.sin6_port));
}

std::string describe(const endpoint& ep) {
  if (is_unix(ep)) return ep.unix_path;
  if (ep.host.find(':') != std::string::npos) return "[" + ep.host + "]:" + std::to_string(ep.port);
  return (ep.host.empty() ? std::string("0.0.0.0") : ep.host) + ":" + std::to_string(ep.port);
}

}  // namespace detail
}  // namespace sylvite::transport
