// Unit tests for the ZeroMQ transport (core/transport/zmq.hpp) with real sockets on
// 127.0.0.1 (port 0, no mocks): zmq_req_server + make_zmq_req_client, zmq_pub_server +
// make_zmq_pub_client. Misbehaving peers are plain TCP sockets or raw libzmq sockets on a
// context of the test's own. Synchronisation uses futures / condition variables with
// generous deadlines; short sleeps appear only where a test checks that something does
// NOT happen (a pool cap).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/zmq.hpp"
#include "core/wire/msgpack.hpp"
#include "tests/unit/transport/transport_test_util.hpp"

namespace {

// SYLVITE_TEST_LOG=debug turns on transport logging while debugging a test.
const bool log_level_set = [] {
  if (const char* lvl = std::getenv("SYLVITE_TEST_LOG")) spdlog::set_level(spdlog::level::from_str(lvl));
  return true;
}();

using namespace std::chrono_literals;
using namespace sylvite;
namespace tr = sylvite::transport;
namespace asio = boost::asio;
using wire::value;
using namespace sylvite::transport::testing;

constexpr std::size_t kPoolCap = 8;   // REQ sockets per client (zmq_client.cpp, k_max_req_sockets)


// A TCP port on 127.0.0.1 with nobody listening (bound, then closed).
std::uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  ::bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len);
  ::close(fd);
  return ntohs(sin.sin_port);
}

// The engines, SYLVITE_TEST_ZMQ_ENGINE=SERVER[/CLIENT]: the servers' the default (native
// ZMTP) or libzmq, the clients' libzmq (the default) or native
// (tests/unit/transport/CMakeLists.txt registers the four pairs).
tr::zmq_options test_zopt() {
  tr::zmq_options z;
  if (const char* e = std::getenv("SYLVITE_TEST_ZMQ_ENGINE")) {
    const std::string_view v(e);
    const auto slash = v.find('/');
    z.engine = tr::parse_engine(v.substr(0, slash)).value();
    if (slash != std::string_view::npos) z.client_engine = tr::parse_engine(v.substr(slash + 1)).value();
  }
  z.recon_randomize = false;
  z.recon_default_ms = 100;
  z.recon_max_ms = 1000;
  return z;
}

// Clients of the engine the options name (zmq.hpp's factories).
std::shared_ptr<tr::req_client> zreq(asio::any_io_executor ex, tr::endpoint ep, tr::options o, tr::zmq_options z) {
  return tr::make_req_client(tr::kind::zeromq, std::move(ex), std::move(ep), std::move(o), z);
}
std::shared_ptr<tr::pub_client> zsub(asio::any_io_executor ex, tr::options o, tr::zmq_options z, std::string id) {
  return tr::make_pub_client(tr::kind::zeromq, std::move(ex), std::move(o), z, id);
}

std::string big_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

std::future<result<value>> request(io_pool& pool, const std::shared_ptr<tr::req_client>& c, value body,
                                   std::chrono::milliseconds timeout = 10s) {
  return asio::co_spawn(pool.io, c->request(std::move(body), timeout), asio::use_future);
}

tr::request_handler echo_handler(std::atomic<int>* calls = nullptr) {
  return [calls](value body, std::shared_ptr<tr::responder> r) {
    if (calls) ++*calls;
    r->reply(value{{"echo", std::move(body)}});
  };
}

// One good request answered (the server still works after whatever came before).
void expect_good_round_trip(io_pool& pool, std::uint16_t port, int tag) {
  auto c = zreq(pool.io.get_executor(), local_tcp(port), {}, test_zopt());
  auto f = request(pool, c, value{{"good", tag}});
  auto r = get(f);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["echo"]["good"], tag);
  c->close();
}


// Raw libzmq sockets on a context of the test's own (blocking calls on the test thread).
struct raw_zmq {
  void* ctx = zmq_ctx_new();
  std::vector<void*> socks;
  void* socket(int type) {
    void* s = zmq_socket(ctx, type);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    int tmo = 10000;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    socks.push_back(s);
    return s;
  }
  ~raw_zmq() {
    for (void* s : socks) zmq_close(s);
    zmq_ctx_term(ctx);
  }
};

std::string uri(std::uint16_t port) { return "tcp://127.0.0.1:" + std::to_string(port); }

bool send_frames(void* s, const std::vector<std::string>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(s, frames[i].data(), frames[i].size(), flags) < 0) return false;
  }
  return true;
}

// Messages delivered to a pub client.
struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<value> msgs;
  void add(value v) {
    {
      std::lock_guard lk(mu);
      msgs.push_back(std::move(v));
    }
    cv.notify_all();
  }
  // Bytes of every message (a non-binary body shows as "<not binary>").
  std::vector<std::string> bytes() {
    std::lock_guard lk(mu);
    std::vector<std::string> out;
    for (const auto& m : msgs) out.push_back(m.is_binary() ? std::string(wire::as_bytes(m).value()) : "<not binary>");
    return out;
  }
  bool has(const std::string& payload) {
    auto b = bytes();
    return std::find(b.begin(), b.end(), payload) != b.end();
  }
  bool wait_has(const std::string& payload, std::chrono::seconds d = kWait) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, d, [&] {
      for (const auto& m : msgs)
        if (m.is_binary() && wire::as_bytes(m).value() == payload) return true;
      return false;
    });
  }
  std::size_t size() {
    std::lock_guard lk(mu);
    return msgs.size();
  }
};

struct closed_signal {
  std::promise<error_code> p;
  std::future<error_code> f = p.get_future();
  std::atomic<int> fired{0};
  tr::pub_client::closed_handler handler() {
    return [this](error_code ec) {
      if (fired++ == 0) p.set_value(ec);
    };
  }
};

result<void> connect_sub(io_pool& pool, const std::shared_ptr<tr::pub_client>& c, std::uint16_t port, inbox& in,
                         tr::pub_client::closed_handler on_closed = {}) {
  auto f = asio::co_spawn(pool.io,
                          c->connect(local_tcp(port), value::object(), [&in](value v) { in.add(std::move(v)); },
                                     std::move(on_closed)),
                          asio::use_future);
  return get(f);
}

std::shared_ptr<const std::string> payload_of(const value& v) {
  return std::make_shared<const std::string>(wire::pack_payload(v));
}

// Publish broadcast probes until every inbox got one: the subscriptions have reached the
// PUB socket (a publish before that is dropped, by ZeroMQ design).
bool warm_up(tr::zmq_pub_server& srv, std::vector<inbox*> ins) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  for (int i = 0;; ++i) {
    srv.publish_all(payload_of(value{{"probe", i}}));
    std::this_thread::sleep_for(20ms);
    if (std::all_of(ins.begin(), ins.end(), [](inbox* in) { return in->size() > 0; })) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

// ================================================================= request server ====

TEST(ZmqReqServer, RoundTripHandlerSeesBody) {
  io_pool pool;
  std::mutex mu;
  std::vector<value> seen;
  std::vector<std::string> peers;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value body, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      seen.push_back(body);
      peers.push_back(r->peer().address);
    }
    EXPECT_TRUE(r->alive());
    EXPECT_FALSE(r->push(value("streaming is not supported")));
    r->reply(value{{"echo", body}, {"bin", wire::make_bin(std::string("\x00\xff", 2))}});
  });
  ASSERT_TRUE(srv.start());
  ASSERT_NE(srv.bound_port(), 0);
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  EXPECT_EQ(c->remote().port, srv.bound_port());
  for (int i = 0; i < 3; ++i) {
    auto f = request(pool, c, value{{"cmd", "ping"}, {"i", i}, {"load", wire::make_bin("abc")}});
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["echo"]["cmd"], "ping");
    EXPECT_EQ((*r)["echo"]["i"], i);
    EXPECT_EQ(wire::get_text((*r)["echo"], "load"), "abc");
    EXPECT_EQ(wire::as_bytes((*r)["bin"]), std::string_view("\x00\xff", 2));
  }
  std::lock_guard lk(mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1]["i"], 1);
  EXPECT_EQ(wire::get_text(seen[2], "load"), "abc");
  for (const auto& p : peers) EXPECT_EQ(p.rfind("127.0.0.1", 0), 0u) << p;
  EXPECT_EQ(srv.refused(), 0u);
}

// zmq_monitor: True reports every socket event (connect delayed, closed, ...): none of
// the ones that are not a loss may fail a request.
TEST(ZmqReqClient, MonitorEveryEventStillAnswers) {
  io_pool pool;
  auto z = test_zopt();
  z.monitor = true;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, z, echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, z);
  for (int i = 0; i < 4; ++i) {
    auto f = request(pool, c, value{{"n", i}});
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["echo"]["n"], i);
  }
  c->close();
}

TEST(ZmqReqServer, ReplyFromAnotherThread) {
  io_pool pool;
  std::vector<std::thread> repliers;
  std::mutex mu;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value body, std::shared_ptr<tr::responder> r) {
    std::lock_guard lk(mu);
    repliers.emplace_back([body = std::move(body), r = std::move(r)] {
      std::this_thread::sleep_for(20ms);
      r->reply(value{{"from", "thread"}, {"n", body["n"]}});
      r->reply(value("a second reply is ignored"));
    });
  });
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  for (int i = 0; i < 3; ++i) {
    auto f = request(pool, c, value{{"n", i}});
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["from"], "thread");
    EXPECT_EQ((*r)["n"], i);
  }
  std::lock_guard lk(mu);
  for (auto& t : repliers) t.join();
}

TEST(ZmqReqServer, ConnectionCountGrowsAndShrinks) {
  io_pool pool;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), echo_handler());
  ASSERT_TRUE(srv.start());
  EXPECT_EQ(srv.connection_count(), 0u);
  auto c1 = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  auto c2 = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  auto f1 = request(pool, c1, value{{"c", 1}});
  ASSERT_TRUE(get(f1));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; })) << srv.connection_count();
  auto f2 = request(pool, c2, value{{"c", 2}});
  ASSERT_TRUE(get(f2));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 2; })) << srv.connection_count();
  c1->close();
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; })) << srv.connection_count();
  c2->close();
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 0; })) << srv.connection_count();
}

TEST(ZmqReqServer, GarbageOverPlainTcpIsDroppedAndServerKeepsServing) {
  io_pool pool;
  std::atomic<int> calls{0};
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), echo_handler(&calls));
  ASSERT_TRUE(srv.start());
  {
    raw_conn raw(srv.bound_port());
    ASSERT_GE(raw.fd, 0);
    // A ZMTP 3 signature with a mechanism libzmq does not know, then junk.
    std::string greeting("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00", 12);
    std::string mech = "BOGUS";
    mech.resize(20, '\0');
    greeting += mech;
    greeting += std::string(32, '\0');
    ASSERT_TRUE(raw.write_all(greeting + big_bytes(4096)));
    EXPECT_TRUE(raw.wait_closed());
  }
  {
    raw_conn raw(srv.bound_port());
    ASSERT_GE(raw.fd, 0);
    // Not ZMTP at all (an HTTP request). libzmq takes a peer without the ZMTP 3 signature
    // for a ZMTP 1.0 one and hands what it decodes to the ROUTER: not a REQ message.
    ASSERT_TRUE(raw.write_all("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(512, 'A')));
    (void)raw.write_all(big_bytes(70000));
    EXPECT_TRUE(eventually([&] { return srv.refused() >= 1; })) << srv.refused();
  }
  expect_good_round_trip(pool, srv.bound_port(), 1);
  EXPECT_EQ(calls.load(), 1);  // only the good request
}

TEST(ZmqReqServer, NonMsgpackAndNonReqFramesAreRefused) {
  io_pool pool;
  std::atomic<int> calls{0};
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), echo_handler(&calls));
  ASSERT_TRUE(srv.start());
  raw_zmq z;
  void* req = z.socket(ZMQ_REQ);
  ASSERT_EQ(zmq_connect(req, uri(srv.bound_port()).c_str()), 0);
  const std::string not_msgpack("\xc1 this is not msgpack", 22);
  ASSERT_TRUE(send_frames(req, {not_msgpack}));
  EXPECT_TRUE(eventually([&] { return srv.refused() == 1; })) << srv.refused();
  // Trailing bytes after a valid object: not one msgpack object either.
  void* req2 = z.socket(ZMQ_REQ);
  ASSERT_EQ(zmq_connect(req2, uri(srv.bound_port()).c_str()), 0);
  ASSERT_TRUE(send_frames(req2, {wire::pack_payload(value{{"a", 1}}) + "x"}));
  EXPECT_TRUE(eventually([&] { return srv.refused() == 2; })) << srv.refused();
  // A DEALER without REQ's empty delimiter frame.
  void* dealer = z.socket(ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(dealer, uri(srv.bound_port()).c_str()), 0);
  ASSERT_TRUE(send_frames(dealer, {wire::pack_payload(value{{"a", 1}})}));
  EXPECT_TRUE(eventually([&] { return srv.refused() == 3; })) << srv.refused();
  expect_good_round_trip(pool, srv.bound_port(), 2);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(srv.refused(), 3u);
}

// How a client sees a request the server refused: the native engine closes the
// connection (REQ reports it at once), libzmq drops the message (the request times out).
bool native_engine() { return test_zopt().engine == tr::zmq_engine::native; }
error_code refusal() {
  return make_error_code(native_engine() ? tr::errc::disconnected : tr::errc::timeout);
}

tr::options pre_auth_opts() {
  tr::options o;
  o.pre_auth_max_frame_size = 64u << 10;
  o.pre_auth_max_nodes = 100;
  o.pre_auth_max_depth = 16;
  return o;
}

TEST(ZmqReqServer, ClearEnvelopeOverPreAuthFrameSizeIsRefused) {
  io_pool pool;
  std::atomic<int> calls{0};
  tr::zmq_req_server srv(pool.io, local_tcp(), pre_auth_opts(), test_zopt(), echo_handler(&calls));
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  // Clear (and enc missing): refused, never answered.
  for (const char* enc : {"clear", ""}) {
    value big{{"load", wire::make_bin(big_bytes(100u << 10))}};
    if (*enc) big["enc"] = enc;
    auto f = request(pool, c, big, 500ms);
    auto r = get(f);
    ASSERT_FALSE(r) << enc;
    EXPECT_EQ(r.error(), refusal()) << enc;
  }
  EXPECT_TRUE(eventually([&] { return srv.refused() == 2; })) << srv.refused();
  EXPECT_EQ(calls.load(), 0);
  // Just under the limit: fine. Then the same client keeps working.
  auto f = request(pool, c, value{{"enc", "clear"}, {"load", wire::make_bin(big_bytes(60u << 10))}});
  auto r = get(f);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(wire::as_bytes((*r)["echo"]["load"])->size(), 60u << 10);
  expect_good_round_trip(pool, srv.bound_port(), 3);
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(srv.refused(), 2u);
}

TEST(ZmqReqServer, EnvelopeWithTooManyObjectsIsRefused) {
  io_pool pool;
  std::atomic<int> calls{0};
  tr::zmq_req_server srv(pool.io, local_tcp(), pre_auth_opts(), test_zopt(), echo_handler(&calls));
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  value many = value::array();
  for (int i = 0; i < 500; ++i) many.push_back(i);
  // Small in bytes (~1 KiB), but 500+ objects; even an "aes" envelope is held to the nodes limit.
  for (const char* enc : {"clear", "aes"}) {
    auto f = request(pool, c, value{{"enc", enc}, {"load", many}}, 500ms);
    auto r = get(f);
    ASSERT_FALSE(r) << enc;
    EXPECT_EQ(r.error(), refusal());
  }
  // Too deep.
  value deep = 1;
  for (int i = 0; i < 40; ++i) deep = value::array({deep});
  auto fd = request(pool, c, value{{"enc", "clear"}, {"load", deep}}, 500ms);
  EXPECT_FALSE(get(fd));
  EXPECT_TRUE(eventually([&] { return srv.refused() == 3; })) << srv.refused();
  EXPECT_EQ(calls.load(), 0);
  expect_good_round_trip(pool, srv.bound_port(), 4);
  EXPECT_EQ(calls.load(), 1);
}

TEST(ZmqReqServer, AesEnvelopeLargerThanPreAuthFrameSizeIsAccepted) {
  io_pool pool;
  std::atomic<int> calls{0};
  // The native engine admits a large first message from the shared budget (the master
  // always has one unless pre_auth_large_frame_budget is 0), as the TCP transport does.
  tr::options o = pre_auth_opts();
  o.pre_auth_budget = std::make_shared<tr::byte_budget>(16u << 20);
  tr::zmq_req_server srv(pool.io, local_tcp(), o, test_zopt(),
                         [&](value body, std::shared_ptr<tr::responder> r) {
                           ++calls;
                           auto load = wire::get_text(body, "load");
                           r->reply(value{{"size", load ? load->size() : 0}, {"enc", body["enc"]}});
                         });
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  const auto load = big_bytes(200u << 10);
  auto f = request(pool, c, value{{"enc", "aes"}, {"load", wire::make_bin(load)}});
  auto r = get(f);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["size"], load.size());
  EXPECT_EQ((*r)["enc"], "aes");
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(srv.refused(), 0u);
}

TEST(ZmqReqServer, MessageOverMaxFrameSizeNeverReachesHandler) {
  io_pool pool;
  std::atomic<int> calls{0};
  tr::options o;
  o.max_frame_size = 64u << 10;  // ZMQ_MAXMSGSIZE: libzmq drops the peer
  tr::zmq_req_server srv(pool.io, local_tcp(), o, test_zopt(), echo_handler(&calls));
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  auto f = request(pool, c, value{{"enc", "aes"}, {"load", wire::make_bin(big_bytes(200u << 10))}}, 5s);
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error() == make_error_code(tr::errc::disconnected) || r.error() == make_error_code(tr::errc::timeout))
      << r.error().message();
  EXPECT_EQ(calls.load(), 0);
  // The same client and a new one still work.
  auto f2 = request(pool, c, value{{"after", 1}});
  auto r2 = get(f2);
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ((*r2)["echo"]["after"], 1);
  expect_good_round_trip(pool, srv.bound_port(), 5);
  EXPECT_EQ(calls.load(), 2);
}

// ================================================================= request client ====

TEST(ZmqReqClient, ConcurrentRequestsBeyondThePoolAllAnswered) {
  constexpr int N = 3 * static_cast<int>(kPoolCap) + 2;
  io_pool pool;
  std::mutex mu;
  bool release = false;
  std::vector<std::pair<value, std::shared_ptr<tr::responder>>> held;
  counter received;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value body, std::shared_ptr<tr::responder> r) {
    // Counted before the reply: the client can have the answer (and the test thread
    // check the count) before this handler returns.
    received.add();
    std::lock_guard lk(mu);
    if (!release) {
      held.emplace_back(std::move(body), std::move(r));
    } else {
      r->reply(value{{"n2", body["n"]}});
    }
  });
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  std::vector<std::future<result<value>>> futures;
  for (int i = 0; i < N; ++i) futures.push_back(request(pool, c, value{{"n", i}}, 60s));
  // One request in flight per REQ socket: the pool cap, not N, reach the server.
  ASSERT_TRUE(received.wait_for(static_cast<int>(kPoolCap)));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(received.get(), static_cast<int>(kPoolCap));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == kPoolCap; })) << srv.connection_count();
  {
    // Answer the held ones in reverse order from this (non-io) thread; the rest at once.
    std::lock_guard lk(mu);
    release = true;
    for (auto it = held.rbegin(); it != held.rend(); ++it) it->second->reply(value{{"n2", it->first["n"]}});
  }
  for (int i = 0; i < N; ++i) {
    auto r = get(futures[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(r) << i << ": " << r.error().message();
    EXPECT_EQ((*r)["n2"], i);
  }
  EXPECT_EQ(received.get(), N);
  EXPECT_LE(srv.connection_count(), kPoolCap);
}

// Replies are queued and sent in batches on the socket's strand: answered at once on the
// strand (inside the read loop), from other threads racing each other, and late, every
// client still gets its own answer, round after round.
TEST(ZmqReqServer, RepliesFromTheStrandAndRacingThreadsReachTheirOwnClients) {
  constexpr int kClients = 24, kRounds = 5;
  io_pool pool;
  std::mutex mu;
  std::vector<std::thread> repliers;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value body, std::shared_ptr<tr::responder> r) {
    const auto c = body["c"].get<std::int64_t>();
    value answer{{"c", body["c"]}, {"round", body["round"]}};
    if (c % 3 == 0) return r->reply(std::move(answer));  // on the strand, inside the read loop
    std::lock_guard lk(mu);
    repliers.emplace_back([c, answer = std::move(answer), r = std::move(r)]() mutable {
      if (c % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(c % 7));
      r->reply(std::move(answer));
    });
  });
  ASSERT_TRUE(srv.start());
  std::vector<std::shared_ptr<tr::req_client>> clients;
  for (int i = 0; i < kClients; ++i)
    clients.push_back(zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt()));
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::future<result<value>>> futures;
    for (int i = 0; i < kClients; ++i)
      futures.push_back(request(pool, clients[static_cast<std::size_t>(i)], value{{"c", i}, {"round", round}}));
    for (int i = 0; i < kClients; ++i) {
      auto r = get(futures[static_cast<std::size_t>(i)]);
      ASSERT_TRUE(r) << "client " << i << ", round " << round << ": " << r.error().message();
      EXPECT_EQ((*r)["c"], i);
      EXPECT_EQ((*r)["round"], round);
    }
  }
  for (auto& c : clients) c->close();
  std::lock_guard lk(mu);
  for (auto& t : repliers) t.join();
  EXPECT_EQ(srv.refused(), 0u);
}

TEST(ZmqReqClient, TimeoutThenKeepsWorking) {
  io_pool pool;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  std::atomic<int> calls{0};
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value body, std::shared_ptr<tr::responder> r) {
    ++calls;
    if (body.contains("silent")) {
      std::lock_guard lk(mu);
      held.push_back(std::move(r));
      return;
    }
    r->reply(value{{"echo", body}});
  });
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  const auto t0 = std::chrono::steady_clock::now();
  auto f = request(pool, c, value{{"silent", 1}}, 300ms);
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(tr::errc::timeout));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  // A late reply to the timed-out request must not become the answer to the next one.
  {
    std::lock_guard lk(mu);
    ASSERT_EQ(held.size(), 1u);
    held[0]->reply(value("late"));
  }
  for (int i = 0; i < 3; ++i) {
    auto f2 = request(pool, c, value{{"after", i}});
    auto r2 = get(f2);
    ASSERT_TRUE(r2) << r2.error().message();
    EXPECT_EQ((*r2)["echo"]["after"], i);
  }
  // Several timeouts in a row do not exhaust the pool.
  for (int i = 0; i < static_cast<int>(kPoolCap) + 2; ++i) {
    auto f3 = request(pool, c, value{{"silent", i}}, 100ms);
    auto r3 = get(f3);
    ASSERT_FALSE(r3);
    EXPECT_EQ(r3.error(), make_error_code(tr::errc::timeout));
  }
  auto f4 = request(pool, c, value{{"after", 9}});
  auto r4 = get(f4);
  ASSERT_TRUE(r4) << r4.error().message();
  EXPECT_EQ((*r4)["echo"]["after"], 9);
}

TEST(ZmqReqClient, NoListenerFailsFastWithConnectFailed) {
  io_pool pool;
  const auto port = closed_port();
  auto z = test_zopt();
  ASSERT_TRUE(z.connect_events);
  auto c = zreq(pool.io.get_executor(), local_tcp(port), {}, z);
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto f = request(pool, c, value{{"x", i}}, 20s);
    auto r = get(f);
    const auto took = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(tr::errc::connect_failed)) << r.error().message();
    EXPECT_LT(took, 5s);
  }
  // A server appears on that port: the same client reaches it.
  tr::zmq_req_server srv(pool.io, local_tcp(port), {}, test_zopt(), echo_handler());
  ASSERT_TRUE(srv.start());
  ASSERT_EQ(srv.bound_port(), port);
  auto f = request(pool, c, value{{"x", 7}});
  auto r = get(f);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["echo"]["x"], 7);
}

TEST(ZmqReqClient, ServerStopFailsPendingThenReconnects) {
  io_pool pool;
  counter got;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  auto srv1 = std::make_unique<tr::zmq_req_server>(pool.io, local_tcp(), tr::options{}, test_zopt(),
                                                   [&](value, std::shared_ptr<tr::responder> r) {
                                                     {
                                                       std::lock_guard lk(mu);
                                                       held.push_back(std::move(r));
                                                     }
                                                     got.add();
                                                   });
  ASSERT_TRUE(srv1->start());
  const auto port = srv1->bound_port();
  auto c = zreq(pool.io.get_executor(), local_tcp(port), {}, test_zopt());
  auto f1 = request(pool, c, value{{"a", 1}}, 60s);
  auto f2 = request(pool, c, value{{"a", 2}}, 60s);
  ASSERT_TRUE(got.wait_for(2));
  srv1->stop();
  // The master went away: pending requests fail now, not at their 60 s deadline.
  for (auto* f : {&f1, &f2}) {
    auto r = get(*f);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(tr::errc::disconnected)) << r.error().message();
  }
  {
    std::lock_guard lk(mu);
    held[0]->reply(value("dropped silently"));
  }
  // Nobody listening: the next request fails to connect.
  auto f3 = request(pool, c, value{{"a", 3}}, 20s);
  auto r3 = get(f3);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error(), make_error_code(tr::errc::connect_failed)) << r3.error().message();
  // A new server on the same port: the next request reaches it.
  tr::zmq_req_server srv2(pool.io, local_tcp(port), {}, test_zopt(), echo_handler());
  ASSERT_TRUE(srv2.start());
  auto f4 = request(pool, c, value{{"a", 4}});
  auto r4 = get(f4);
  ASSERT_TRUE(r4) << r4.error().message();
  EXPECT_EQ((*r4)["echo"]["a"], 4);
}

TEST(ZmqReqClient, CloseFailsPendingAndLaterRequests) {
  io_pool pool;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  counter got;
  tr::zmq_req_server srv(pool.io, local_tcp(), {}, test_zopt(), [&](value, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      held.push_back(std::move(r));
    }
    got.add();
  });
  ASSERT_TRUE(srv.start());
  auto c = zreq(pool.io.get_executor(), local_tcp(srv.bound_port()), {}, test_zopt());
  auto f = request(pool, c, value{{"x", 1}}, 60s);
  ASSERT_TRUE(got.wait_for(1));
  c->close();
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(tr::errc::closed));
  auto f2 = request(pool, c, value{{"x", 2}}, 60s);
  auto r2 = get(f2);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error(), make_error_code(tr::errc::closed));
}

// ================================================================== publish server ====

TEST(ZmqPubServer, PublishAllReachesTwoSubscribers) {
  inbox in1, in2;
  io_pool pool;
  tr::zmq_pub_server srv(pool.io, local_tcp(), {}, test_zopt());
  ASSERT_TRUE(srv.start());
  ASSERT_NE(srv.bound_port(), 0);
  auto c1 = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  auto c2 = zsub(pool.io.get_executor(), {}, test_zopt(), "m2");
  auto r1 = connect_sub(pool, c1, srv.bound_port(), in1);
  ASSERT_TRUE(r1) << r1.error().message();
  auto r2 = connect_sub(pool, c2, srv.bound_port(), in2);
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_TRUE(c1->connected());
  EXPECT_FALSE(c1->send(value("a SUB socket cannot send")));
  ASSERT_TRUE(warm_up(srv, {&in1, &in2}));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 2; })) << srv.connection_count();
  EXPECT_EQ(srv.peer_addresses(), std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(srv.topics(), std::vector<std::string>{""});  // no filtering: everything
  const value body{{"enc", "aes"}, {"load", wire::make_bin(big_bytes(1000))}, {"sig", wire::make_bin("s")}};
  const auto payload = payload_of(body);
  srv.publish_all(payload);
  // publish_to without filtering is a broadcast too.
  const auto payload2 = payload_of(value{{"enc", "aes"}, {"load", wire::make_bin("second")}});
  srv.publish_to(payload2, {"m1"});
  for (inbox* in : {&in1, &in2}) {
    ASSERT_TRUE(in->wait_has(*payload2));
    EXPECT_TRUE(in->has(*payload));
    // The delivered body is a binary holding the payload bytes as published.
    std::lock_guard lk(in->mu);
    EXPECT_TRUE(in->msgs.back().is_binary());
    auto v = wire::unpack(wire::as_bytes(in->msgs.back()).value());
    ASSERT_TRUE(v);
    EXPECT_EQ(wire::get_text(*v, "load"), "second");
  }
}

TEST(ZmqPubServer, FilteringReachesOnlyTheNamedMinion) {
  inbox ina, inb;
  io_pool pool;
  auto z = test_zopt();
  z.filtering = true;
  tr::zmq_pub_server srv(pool.io, local_tcp(), {}, z);
  ASSERT_TRUE(srv.start());
  auto ca = zsub(pool.io.get_executor(), {}, z, "alpha");
  auto cb = zsub(pool.io.get_executor(), {}, z, "beta");
  ASSERT_TRUE(connect_sub(pool, ca, srv.bound_port(), ina));
  ASSERT_TRUE(connect_sub(pool, cb, srv.bound_port(), inb));
  const std::string ha = "be76331b95dfc399cd776d2fc68021e0db03cc4f";  // sha1("alpha")
  const std::string hb = "a295e0bdde1938d1fbfd343e5a3e569e868e1465";  // sha1("beta")
  const std::set<std::string> want{"broadcast", ha, hb};
  EXPECT_TRUE(eventually([&] {
    auto t = srv.topics();
    return std::set<std::string>(t.begin(), t.end()) == want;
  }));
  auto t = srv.topics();
  EXPECT_EQ(std::set<std::string>(t.begin(), t.end()), want);
  ASSERT_TRUE(warm_up(srv, {&ina, &inb}));
  const auto only_a = payload_of(value{{"load", wire::make_bin("for alpha")}});
  const auto both = payload_of(value{{"load", wire::make_bin("for everyone")}});
  const auto nobody = payload_of(value{{"load", wire::make_bin("for gamma")}});
  srv.publish_to(only_a, {"alpha"});
  srv.publish_to(nobody, {"gamma"});
  srv.publish_all(both);
  // Messages from one PUB socket arrive in order: once the broadcast is in, anything
  // published before it that was meant for a client is in too.
  ASSERT_TRUE(ina.wait_has(*both));
  ASSERT_TRUE(inb.wait_has(*both));
  EXPECT_TRUE(ina.has(*only_a));
  EXPECT_FALSE(inb.has(*only_a));
  EXPECT_FALSE(ina.has(*nobody));
  EXPECT_FALSE(inb.has(*nobody));
  // A list target naming both.
  const auto ab = payload_of(value{{"load", wire::make_bin("for alpha and beta")}});
  srv.publish_to(ab, {"alpha", "beta"});
  EXPECT_TRUE(ina.wait_has(*ab));
  EXPECT_TRUE(inb.wait_has(*ab));
}

// The master's ZeroMQ presence without zmq_filtering (Salt's connected_ids) matches the
// address a minion's request came from against the publish port's subscriber addresses:
// both must spell the address the same way.
TEST(ZmqPubServer, PeerAddressesMatchRequestPeerAddress) {
  inbox in;
  io_pool pool;
  std::mutex mu;
  std::string req_peer;
  tr::zmq_req_server req(pool.io, local_tcp(), {}, test_zopt(), [&](value, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      req_peer = r->peer().address;
    }
    r->reply(value("ok"));
  });
  ASSERT_TRUE(req.start());
  tr::zmq_pub_server pub(pool.io, local_tcp(), {}, test_zopt());
  ASSERT_TRUE(pub.start());
  auto rc = zreq(pool.io.get_executor(), local_tcp(req.bound_port()), {}, test_zopt());
  auto sc = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  ASSERT_TRUE(connect_sub(pool, sc, pub.bound_port(), in));
  auto f = request(pool, rc, value{{"cmd", "_auth"}});
  ASSERT_TRUE(get(f));
  EXPECT_TRUE(eventually([&] { return pub.peer_addresses().size() == 1; }));
  std::lock_guard lk(mu);
  EXPECT_EQ(req_peer, "127.0.0.1");
  EXPECT_EQ(pub.peer_addresses(), std::vector<std::string>{req_peer});
}

TEST(ZmqPubServer, StopFiresOnClosed) {
  inbox in;
  closed_signal closed;
  io_pool pool;
  tr::zmq_pub_server srv(pool.io, local_tcp(), {}, test_zopt());
  ASSERT_TRUE(srv.start());
  auto c = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  ASSERT_TRUE(connect_sub(pool, c, srv.bound_port(), in, closed.handler()));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; }));
  srv.stop();
  ASSERT_EQ(closed.f.wait_for(kWait), std::future_status::ready);
  EXPECT_TRUE(closed.f.get());  // some error code
  EXPECT_FALSE(c->connected());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(closed.fired.load(), 1);
}

TEST(ZmqPubServer, DestroyedIoContextFiresOnClosed) {
  inbox in;
  closed_signal closed;
  io_pool pool;  // the client's
  auto srv_pool = std::make_unique<io_pool>();
  auto srv = std::make_unique<tr::zmq_pub_server>(srv_pool->io, local_tcp(), tr::options{}, test_zopt());
  ASSERT_TRUE(srv->start());
  auto c = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  ASSERT_TRUE(connect_sub(pool, c, srv->bound_port(), in, closed.handler()));
  EXPECT_TRUE(eventually([&] { return srv->connection_count() == 1; }));
  // The daemon's io_context stops first (threads joined), then the server and its
  // io_context are destroyed: the sockets must close all the same.
  srv_pool->stop_and_join();
  srv.reset();
  srv_pool.reset();
  ASSERT_EQ(closed.f.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(c->connected());
}

// ================================================================== publish client ====

TEST(ZmqPubClient, ConnectToClosedPortFails) {
  inbox in;
  io_pool pool;
  tr::options o;
  o.connect_timeout = 3000ms;
  auto c = zsub(pool.io.get_executor(), o, test_zopt(), "m1");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = connect_sub(pool, c, closed_port(), in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error() == make_error_code(tr::errc::connect_failed) || r.error() == make_error_code(tr::errc::timeout))
      << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_FALSE(c->connected());
}

TEST(ZmqPubClient, MalformedMessageIgnoredLaterOnesDelivered) {
  inbox in;
  closed_signal closed;
  io_pool pool;
  raw_zmq z;
  void* pub = z.socket(ZMQ_PUB);
  ASSERT_EQ(zmq_bind(pub, "tcp://127.0.0.1:*"), 0);
  char ep[256];
  std::size_t sz = sizeof ep;
  ASSERT_EQ(zmq_getsockopt(pub, ZMQ_LAST_ENDPOINT, ep, &sz), 0);
  const std::string eps(ep);
  const auto port = static_cast<std::uint16_t>(std::stoi(eps.substr(eps.rfind(':') + 1)));
  auto c = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  auto rc = connect_sub(pool, c, port, in, closed.handler());
  ASSERT_TRUE(rc) << rc.error().message();
  // Warm up: the subscription must reach the PUB socket.
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (in.size() == 0) {
    ASSERT_TRUE(send_frames(pub, {wire::pack_payload(value("probe"))}));
    std::this_thread::sleep_for(20ms);
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
  }
  const auto before = in.size();
  ASSERT_TRUE(send_frames(pub, {"broadcast", "x", "three frames"}));
  ASSERT_TRUE(send_frames(pub, {"a", "b", "c", "d"}));
  const auto good = wire::pack_payload(value{{"good", 1}});
  ASSERT_TRUE(send_frames(pub, {good}));
  // Two frames with another minion's topic: not for us, dropped silently.
  ASSERT_TRUE(send_frames(pub, {std::string(40, 'f'), wire::pack_payload(value{{"other", 1}})}));
  const auto good2 = wire::pack_payload(value{{"good", 2}});
  ASSERT_TRUE(send_frames(pub, {good2}));
  ASSERT_TRUE(in.wait_has(good2));
  auto got = in.bytes();
  ASSERT_EQ(got.size(), before + 2) << "only the two good messages after the probes";
  EXPECT_EQ(got[before], good);
  EXPECT_EQ(got[before + 1], good2);
  EXPECT_TRUE(c->connected());
  EXPECT_EQ(closed.fired.load(), 0);
}

TEST(ZmqPubClient, CloseIsSilentAndReconnectWorks) {
  inbox in;
  closed_signal closed;
  inbox in2;
  io_pool pool;
  tr::zmq_pub_server srv(pool.io, local_tcp(), {}, test_zopt());
  ASSERT_TRUE(srv.start());
  auto c = zsub(pool.io.get_executor(), {}, test_zopt(), "m1");
  ASSERT_TRUE(connect_sub(pool, c, srv.bound_port(), in, closed.handler()));
  c->close();
  EXPECT_TRUE(eventually([&] { return !c->connected(); }));
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 0; })) << srv.connection_count();
  EXPECT_EQ(closed.fired.load(), 0);
  ASSERT_TRUE(connect_sub(pool, c, srv.bound_port(), in2));
  ASSERT_TRUE(warm_up(srv, {&in2}));
  const auto p = payload_of(value{{"after", "reconnect"}});
  srv.publish_all(p);
  EXPECT_TRUE(in2.wait_has(*p));
  EXPECT_FALSE(in.has(*p));
}

}  // namespace
