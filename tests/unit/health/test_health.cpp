// Tests of master/health_server: the HTTP endpoint over real sockets on 127.0.0.1
// (plain POSIX client sockets, so the test stays independent of the server's Beast code)
// and the readiness probe, including a directory that disappears and a probe that hangs
// like a stalled network mount.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "master/health_server.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using sylvite::master::health_endpoint;
using sylvite::master::health_server;
using sylvite::master::probe_target;
using sylvite::master::readiness;
using sylvite::master::readiness_probe;

namespace {

int connect_to(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// Reads until the peer closes or `limit` passes. Returns what arrived and whether the
// peer closed.
std::pair<std::string, bool> read_until_close(int fd, std::chrono::milliseconds limit = 5000ms) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return {out, false};
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {out, false};
    char buf[4096];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {out, true};
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// Reads one response with Content-Length (keep-alive connections).
std::string read_response(int fd) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    auto h = out.find("\r\n\r\n");
    if (h != std::string::npos) {
      auto cl = out.find("Content-Length: ");
      std::size_t len = cl == std::string::npos ? 0 : std::stoul(out.substr(cl + 16));
      if (out.size() >= h + 4 + len) return out;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string request(std::uint16_t port, const std::string& raw) {
  int fd = connect_to(port);
  if (fd < 0) return "<connect failed>";
  send_all(fd, raw);
  auto [out, closed] = read_until_close(fd);
  ::close(fd);
  return out;
}

std::string get(std::uint16_t port, const std::string& path) {
  return request(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

int status_of(const std::string& resp) {
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12) return -1;
  return std::stoi(resp.substr(9, 3));
}

std::string body_of(const std::string& resp) {
  auto h = resp.find("\r\n\r\n");
  return h == std::string::npos ? "" : resp.substr(h + 4);
}

// A server on 127.0.0.1 with a settable readiness, its io_context run by two threads.
struct fixture {
  explicit fixture(health_server::limits lim = {}) {
    server = std::make_unique<health_server>(
        io, health_endpoint{"127.0.0.1", 0},
        [this] {
          std::lock_guard lk(mu);
          if (throw_in_snapshot) throw std::runtime_error("boom");
          return state;
        },
        "m1", lim);
    auto r = server->start();
    EXPECT_TRUE(r) << r.error().message();
    port = server->bound_port();
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~fixture() { shutdown(); }
  void set(readiness r) {
    std::lock_guard lk(mu);
    state = std::move(r);
  }
  // Stops the server and waits for the io threads: run() must return on its own (no
  // work guard), which proves stop() released every socket and timer.
  bool shutdown(std::chrono::seconds limit = 10s) {
    if (threads.empty()) return true;
    server->stop();
    auto done = std::async(std::launch::async, [this] {
      for (auto& t : threads) t.join();
    });
    bool ok = done.wait_for(limit) == std::future_status::ready;
    if (!ok) {
      io.stop();
      done.wait();
    }
    threads.clear();
    return ok;
  }

  boost::asio::io_context io{2};
  std::mutex mu;
  readiness state{true, ""};
  bool throw_in_snapshot = false;
  std::unique_ptr<health_server> server;
  std::uint16_t port = 0;
  std::vector<std::thread> threads;
};

}  // namespace

TEST(HealthServer, health_answers_up_with_id) {
  fixture f;
  f.set({false, "keys not loaded"});  // /health does not depend on readiness
  auto r = get(f.port, "/health");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos) << r;
  EXPECT_EQ(body_of(r), "{\"id\":\"m1\",\"status\":\"up\"}\n");
}

TEST(HealthServer, ready_follows_the_snapshot) {
  fixture f;
  auto r = get(f.port, "/ready");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(body_of(r).find("\"status\":\"ready\""), std::string::npos) << r;

  f.set({false, "shared cluster_pki_dir unreachable"});
  r = get(f.port, "/ready");
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(body_of(r).find("\"reason\":\"shared cluster_pki_dir unreachable\""), std::string::npos) << r;
  EXPECT_NE(body_of(r).find("\"status\":\"not ready\""), std::string::npos) << r;

  f.set({true, ""});
  EXPECT_EQ(status_of(get(f.port, "/ready?verbose=1")), 200);  // query strings are ignored
}

TEST(HealthServer, snapshot_that_throws_is_not_ready) {
  fixture f;
  {
    std::lock_guard lk(f.mu);
    f.throw_in_snapshot = true;
  }
  auto r = get(f.port, "/ready");
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("readiness check failed: boom"), std::string::npos) << r;
  EXPECT_EQ(status_of(get(f.port, "/health")), 200);
}

TEST(HealthServer, haproxy_style_http10_check) {
  // HAProxy's `option httpchk GET /ready` sends an HTTP/1.0 request without Host.
  fixture f;
  auto r = request(f.port, "GET /ready HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 200", 0), 0u) << r;
  f.set({false, "shutting down"});
  r = request(f.port, "GET /ready HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 503", 0), 0u) << r;
}

TEST(HealthServer, head_unknown_path_and_method) {
  fixture f;
  auto r = request(f.port, "HEAD /ready HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(body_of(r), "") << r;
  EXPECT_NE(r.find("Content-Length: "), std::string::npos) << r;
  EXPECT_EQ(status_of(get(f.port, "/nope")), 404);
  r = request(f.port, "POST /ready HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(r), 405) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD"), std::string::npos) << r;
}

TEST(HealthServer, bad_requests_get_400_and_the_server_keeps_serving) {
  fixture f;
  const std::vector<std::string> bad = {
      "this is not http\r\n\r\n",
      "GET /ready HTTP/9.9\r\n\r\n",
      "GET /ready HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",         // a body is refused
      "GET /ready HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n",  // head too large
      std::string("GET /\x01\x02 HTTP/1.1\r\n\r\n"),
  };
  for (const auto& b : bad) {
    auto r = request(f.port, b);
    EXPECT_EQ(status_of(r), 400) << b.substr(0, 40) << " -> " << r;
  }
  EXPECT_EQ(status_of(get(f.port, "/health")), 200);
}

TEST(HealthServer, keep_alive_serves_several_requests) {
  fixture f;
  int fd = connect_to(f.port);
  ASSERT_GE(fd, 0);
  send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  auto r1 = read_response(fd);
  EXPECT_EQ(status_of(r1), 200) << r1;
  send_all(fd, "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n");
  auto r2 = read_response(fd);
  EXPECT_EQ(status_of(r2), 200) << r2;
  ::close(fd);
}

TEST(HealthServer, read_deadline_closes_a_silent_client) {
  health_server::limits lim;
  lim.read_timeout = 300ms;
  fixture f(lim);
  int fd = connect_to(f.port);
  ASSERT_GE(fd, 0);
  send_all(fd, "GET /ready HTTP/1.1\r\n");  // never finishes the head
  auto t0 = std::chrono::steady_clock::now();
  auto [out, closed] = read_until_close(fd, 5000ms);
  EXPECT_TRUE(closed);
  EXPECT_EQ(out, "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  ::close(fd);
}

TEST(HealthServer, connection_cap) {
  health_server::limits lim;
  lim.max_connections = 2;
  fixture f(lim);
  int a = connect_to(f.port), b = connect_to(f.port);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Both are accepted and counted before the third arrives.
  for (int i = 0; i < 100 && f.server->connection_count() < 2; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.server->connection_count(), 2u);
  int c = connect_to(f.port);
  ASSERT_GE(c, 0);
  send_all(c, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  auto [out, closed] = read_until_close(c, 3000ms);
  EXPECT_TRUE(closed);
  EXPECT_EQ(out, "") << "a connection over the cap was served";
  ::close(c);
  ::close(a);
  ::close(b);
  // Slots are released when the idle connections close.
  for (int i = 0; i < 200 && f.server->connection_count() > 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(status_of(get(f.port, "/health")), 200);
}

TEST(HealthServer, stop_closes_open_connections_and_run_returns) {
  fixture f;
  int fd = connect_to(f.port);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < 100 && f.server->connection_count() < 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(f.shutdown(10s)) << "io_context still had work after stop()";
  auto [out, closed] = read_until_close(fd, 3000ms);
  EXPECT_TRUE(closed);
  ::close(fd);
  EXPECT_LT(connect_to(f.port), 0) << "still listening after stop()";
}

TEST(HealthServer, start_fails_on_a_port_in_use) {
  fixture f;
  boost::asio::io_context io2;
  health_server second(io2, health_endpoint{"127.0.0.1", f.port}, [] { return readiness{true, ""}; }, "m2");
  auto r = second.start();
  EXPECT_FALSE(r);
}

// ------------------------------------------------------------------ readiness_probe

namespace {
fs::path temp_dir(const std::string& tag) {
  auto p = fs::temp_directory_path() / ("sylvite-health-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}
}  // namespace

TEST(ReadinessProbe, not_ready_until_the_first_round) {
  auto d = temp_dir("first");
  readiness_probe p({{"cachedir", d, true}});
  auto s = p.snapshot();
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.reason.find("starting"), std::string::npos) << s.reason;
  p.probe_once();
  EXPECT_TRUE(p.snapshot().ready) << p.snapshot().reason;
  // The write probe leaves nothing behind.
  EXPECT_TRUE(fs::is_empty(d));
  fs::remove_all(d);
}

TEST(ReadinessProbe, directory_that_disappears_and_comes_back) {
  auto base = temp_dir("gone");
  auto pki = base / "cluster_pki";
  auto cache = base / "cache";
  fs::create_directories(pki);
  fs::create_directories(cache);
  readiness_probe p({{"cluster_pki_dir", pki, false}, {"cachedir", cache, true}});
  p.probe_once();
  ASSERT_TRUE(p.snapshot().ready) << p.snapshot().reason;

  fs::rename(cache, base / "cache.moved");
  p.probe_once();
  auto s = p.snapshot();
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.reason.find("cachedir " + cache.string() + " unreachable"), std::string::npos) << s.reason;

  fs::remove_all(pki);
  p.probe_once();
  s = p.snapshot();
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.reason.find("cluster_pki_dir"), std::string::npos) << s.reason;  // first failing target

  fs::create_directories(pki);
  fs::rename(base / "cache.moved", cache);
  p.probe_once();
  EXPECT_TRUE(p.snapshot().ready) << p.snapshot().reason;
  fs::remove_all(base);
}

TEST(ReadinessProbe, file_instead_of_directory) {
  auto base = temp_dir("file");
  std::ofstream(base / "f") << "x";
  readiness_probe p({{"cachedir", base / "f", false}});
  p.probe_once();
  auto s = p.snapshot();
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.reason.find("is not a directory"), std::string::npos) << s.reason;
  fs::remove_all(base);
}

TEST(ReadinessProbe, background_thread_notices_a_removed_directory) {
  auto base = temp_dir("bg");
  readiness_probe::options o;
  o.interval = 50ms;
  readiness_probe p({{"cachedir", base, true}}, o);
  p.start();
  auto wait_for = [&](bool want) {
    for (int i = 0; i < 200; ++i) {
      if (p.snapshot().ready == want) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  };
  EXPECT_TRUE(wait_for(true)) << p.snapshot().reason;
  fs::remove_all(base);
  EXPECT_TRUE(wait_for(false));
  EXPECT_NE(p.snapshot().reason.find("unreachable"), std::string::npos) << p.snapshot().reason;
  fs::create_directories(base);
  EXPECT_TRUE(wait_for(true)) << p.snapshot().reason;
  p.stop();
  fs::remove_all(base);
}

TEST(ReadinessProbe, blockers_and_shutdown) {
  auto d = temp_dir("block");
  readiness_probe p({{"cachedir", d, false}});
  p.probe_once();
  ASSERT_TRUE(p.snapshot().ready);
  p.set_blocker("keys", "keys not loaded");
  EXPECT_EQ(p.snapshot().reason, "keys not loaded");
  EXPECT_FALSE(p.snapshot().ready);
  p.clear_blocker("keys");
  EXPECT_TRUE(p.snapshot().ready);
  p.set_blocker("keys", "keys not loaded");
  p.set_shutting_down();
  EXPECT_EQ(p.snapshot().reason, "shutting down");  // reported first
  fs::remove_all(d);
}

TEST(ReadinessProbe, hung_probe_is_not_ready_after_the_deadline_and_stop_does_not_wait) {
  // A check that blocks like stat() on a Gluster mount whose server vanished.
  auto release = std::make_shared<std::promise<void>>();
  auto released = release->get_future().share();
  auto hang = std::make_shared<std::atomic<bool>>(false);
  readiness_probe::options o;
  o.interval = 20ms;
  o.deadline = 200ms;
  o.check = [hang, released](const probe_target&) -> std::string {
    if (hang->load()) released.wait();
    return "";
  };
  auto p = std::make_unique<readiness_probe>(std::vector<probe_target>{{"cluster_pki_dir", "/shared/pki", false}}, o);
  p->start();
  for (int i = 0; i < 200 && !p->snapshot().ready; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(p->snapshot().ready);
  hang->store(true);
  readiness s;
  for (int i = 0; i < 300; ++i) {
    s = p->snapshot();  // must return at once although the probe thread is stuck
    if (!s.ready) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.reason.find("cluster_pki_dir /shared/pki unreachable: file-system probe still running after"),
            std::string::npos)
      << s.reason;
  auto t0 = std::chrono::steady_clock::now();
  p.reset();  // stop() + destroy while the probe is stuck: detaches, does not hang
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  release->set_value();  // the detached thread finishes on its own (state kept alive by it)
  std::this_thread::sleep_for(100ms);
}

TEST(ReadinessProbe, serves_a_health_server) {
  auto d = temp_dir("wire");
  readiness_probe p({{"cachedir", d, false}});
  p.probe_once();
  boost::asio::io_context io;
  health_server s(io, health_endpoint{"127.0.0.1", 0}, [&p] { return p.snapshot(); }, "m9");
  ASSERT_TRUE(s.start());
  std::thread t([&io] { io.run(); });
  EXPECT_EQ(status_of(get(s.bound_port(), "/ready")), 200);
  fs::remove_all(d);
  p.probe_once();
  auto r = get(s.bound_port(), "/ready");
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("unreachable"), std::string::npos) << r;
  s.stop();
  t.join();
}
