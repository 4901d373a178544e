// Unit tests for sylvite::transport with real sockets on 127.0.0.1 and Unix sockets in
// a temp dir. Synchronisation uses futures / condition variables with generous
// deadlines; nothing sleeps to wait for an event.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/use_future.hpp>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/transport/context_pool.hpp"
#include "core/transport/detail/write_now.hpp"
#include "core/transport/transport.hpp"
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

tr::endpoint local_unix(const std::string& path) { return tr::endpoint{{}, 0, path}; }

std::string temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sylvite-transport-XXXXXX").string();
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

struct temp_dir_guard {
  std::string path = temp_dir();
  ~temp_dir_guard() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

tr::request_handler echo_handler() {
  return [](value body, std::shared_ptr<tr::responder> r) { r->reply(value{{"echo", std::move(body)}}); };
}

std::optional<std::string> id_of(const value& body) {
  auto id = wire::get_text(body, "id");
  if (!id || id->empty()) return std::nullopt;
  return std::string(*id);
}

std::shared_ptr<const std::string> pub_frame(const value& body) {
  return std::make_shared<const std::string>(wire::pack_frame(value::object(), body));
}


// ---------------------------------------------------------------------------------

TEST(Transport, errc_category) {
  error_code ec = tr::errc::timeout;
  EXPECT_EQ(ec.category(), tr::transport_category());
  EXPECT_FALSE(ec.message().empty());
}

TEST(Transport, roundtrip_tcp) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, [](value body, std::shared_ptr<tr::responder> r) {
    EXPECT_FALSE(r->peer().uid);  // no peer credentials over TCP
    r->reply(value{{"echo", std::move(body)}});
  });
  ASSERT_TRUE(srv.start());
  ASSERT_NE(srv.bound_port(), 0);
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  for (int i = 0; i < 3; ++i) {
    auto f = asio::co_spawn(pool.io, c->request(value{{"cmd", "ping"}, {"i", i}}, 10s), asio::use_future);
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["echo"]["cmd"], "ping");
    EXPECT_EQ((*r)["echo"]["i"], i);
  }
  EXPECT_EQ(srv.connection_count(), 1u);
  EXPECT_EQ(c->remote().port, srv.bound_port());
}

// detail/write_now.hpp: what the socket buffer takes is written, the rest returned in
// order; a full buffer is not an error; a closed peer is.
TEST(Transport, write_now_returns_what_the_socket_buffer_did_not_take) {
  asio::io_context io;
  asio::local::stream_protocol::socket a(io), b(io);
  asio::local::connect_pair(a, b);
  a.non_blocking(true);
  const int small = 4096;
  ::setsockopt(a.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  std::vector<std::string> frames;
  for (char c : {'a', 'b', 'c'}) frames.emplace_back(std::string(300000, c));
  std::vector<asio::const_buffer> bufs;
  for (const auto& f : frames) bufs.emplace_back(asio::buffer(f));

  error_code ec;
  auto rest = tr::detail::write_now(a, bufs, ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_FALSE(rest.empty());  // 900 KB do not fit
  std::size_t left = 0;
  for (const auto& r : rest) left += r.size();
  const std::size_t written = 900000 - left;
  EXPECT_GT(written, 0u);
  // The rest is the tail of the input, contiguous and in order.
  EXPECT_EQ(static_cast<const char*>(rest.back().data()) + rest.back().size(), frames[2].data() + frames[2].size());

  // Full: nothing more is taken, and that is not an error.
  auto again = tr::detail::write_now(a, rest, ec);
  ASSERT_FALSE(ec) << ec.message();
  std::size_t left2 = 0;
  for (const auto& r : again) left2 += r.size();
  EXPECT_LE(left2, left);

  // The reader sees the bytes written first, then the rest once written.
  std::string got;
  std::thread reader([&] {
    std::array<char, 65536> buf;
    error_code rec;
    while (got.size() < 900000) {
      const std::size_t n = b.read_some(asio::buffer(buf), rec);
      if (rec) break;
      got.append(buf.data(), n);
    }
  });
  a.non_blocking(false);
  asio::write(a, again, ec);
  ASSERT_FALSE(ec) << ec.message();
  reader.join();
  EXPECT_EQ(got, frames[0] + frames[1] + frames[2]);

  // A closed peer: an error, nothing returned.
  a.non_blocking(true);
  b.close();
  const std::string one = "x";
  auto none = tr::detail::write_now(a, {asio::buffer(one)}, ec);
  EXPECT_TRUE(ec);
  EXPECT_TRUE(none.empty());
}

// Requests and replies larger than the socket buffers, several in flight on one
// connection: the part a first write cannot take goes out later, whole and in order.
TEST(Transport, large_requests_and_replies_cross_full_socket_buffers) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  std::vector<std::future<result<value>>> fs;
  for (int i = 0; i < 4; ++i) {
    const std::string blob(3'000'000 + i, static_cast<char>('k' + i));
    fs.push_back(asio::co_spawn(pool.io, c->request(value{{"i", i}, {"blob", blob}}, 30s), asio::use_future));
  }
  for (int i = 0; i < 4; ++i) {
    auto r = get(fs[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["echo"]["i"], i);
    const auto blob = wire::get_text((*r)["echo"], "blob");
    ASSERT_TRUE(blob);
    EXPECT_EQ(*blob, std::string(3'000'000 + i, static_cast<char>('k' + i)));
  }
}

// options::session_contexts: accepted connections go to those io_contexts in turn, and
// their requests are handled on the threads that run them, not on the server's.
TEST(Transport, session_contexts_take_the_connections_in_turn) {
  io_pool pool;  // the server's io_context (accept, timers)
  std::vector<std::unique_ptr<io_pool>> conns;
  auto list = std::make_shared<std::vector<asio::io_context*>>();
  std::set<std::thread::id> ctx_threads[2];
  for (int i = 0; i < 2; ++i) {
    conns.push_back(std::make_unique<io_pool>(1));
    list->push_back(&conns.back()->io);
    ctx_threads[i].insert(conns.back()->threads[0].get_id());
  }
  std::mutex mu;
  std::map<std::uint64_t, std::thread::id> handled_on;  // connection id -> thread
  tr::options opt;
  opt.session_contexts = list;
  tr::req_server srv(pool.io, local_tcp(), opt, [&](value body, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      handled_on[r->peer().conn_id] = std::this_thread::get_id();
    }
    r->reply(value{{"echo", std::move(body)}});
  });
  ASSERT_TRUE(srv.start());
  std::vector<std::shared_ptr<tr::req_client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port())));
    auto f = asio::co_spawn(pool.io, clients.back()->request(value{{"i", i}}, 10s), asio::use_future);
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ((*r)["echo"]["i"], i);
  }
  std::lock_guard lk(mu);
  ASSERT_EQ(handled_on.size(), 4u);
  int on[2] = {0, 0};
  for (const auto& [id, t] : handled_on) {
    const bool a = ctx_threads[0].count(t) != 0, b = ctx_threads[1].count(t) != 0;
    EXPECT_TRUE(a || b) << "connection " << id << " handled off the session contexts";
    on[0] += a;
    on[1] += b;
  }
  EXPECT_EQ(on[0], 2);  // in turn: two each
  EXPECT_EQ(on[1], 2);
}

// Teardown in any order: the server's context runs after the session contexts are gone.
// The accept loop keeps nothing of a session context in an operation pending on the
// server's context (an async_accept onto a session strand did: its aborted completion, run
// or destroyed later, touched the freed context; ASan saw it in CI).
TEST(Transport, session_contexts_may_end_before_the_server_context) {
  auto server_ctx = std::make_unique<io_pool>(1);
  std::vector<std::unique_ptr<io_pool>> conns;
  auto list = std::make_shared<std::vector<asio::io_context*>>();
  for (int i = 0; i < 2; ++i) {
    conns.push_back(std::make_unique<io_pool>(1));
    list->push_back(&conns.back()->io);
  }
  tr::options opt;
  opt.session_contexts = list;
  auto srv = std::make_unique<tr::req_server>(server_ctx->io, local_tcp(), opt, echo_handler());
  ASSERT_TRUE(srv->start());
  {
    auto c = tr::req_client::create(server_ctx->io.get_executor(), local_tcp(srv->bound_port()));
    auto f = asio::co_spawn(server_ctx->io, c->request(value{{"i", 1}}, 10s), asio::use_future);
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
    c->close();
  }
  // The server's context stops first, so what stop() aborts stays queued there.
  server_ctx->guard.reset();
  server_ctx->io.stop();
  for (auto& t : server_ctx->threads) t.join();
  server_ctx->threads.clear();
  srv->stop();
  conns.clear();  // the session contexts end
  server_ctx->io.restart();
  server_ctx->io.run_for(200ms);  // the aborted wait completes now
  srv.reset();
  server_ctx.reset();
  SUCCEED();
}

// A backlog larger than one accept batch is taken whole, and the listener is waited on
// again afterwards: connections queued before the server's context runs, then one more.
TEST(Transport, a_full_backlog_is_accepted_and_the_listener_rearmed) {
  constexpr int N = 100;
  asio::io_context io;
  tr::req_server srv(io, local_tcp(), {}, echo_handler());
  ASSERT_TRUE(srv.start());
  std::vector<asio::ip::tcp::socket> socks;
  for (int i = 0; i < N; ++i) {
    socks.emplace_back(io);
    socks.back().connect({asio::ip::make_address("127.0.0.1"), srv.bound_port()});  // the kernel completes it
  }
  std::thread t([&] { io.run_for(5s); });
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == N; })) << srv.connection_count();
  socks.emplace_back(io);
  socks.back().connect({asio::ip::make_address("127.0.0.1"), srv.bound_port()});
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == N + 1; })) << srv.connection_count();
  srv.stop();
  io.stop();
  t.join();
}

// context_pool: one thread per io_context, and release() lets each run() return once its
// work is done (join() then ends without stop()).
TEST(Transport, context_pool_runs_each_context_on_a_thread_of_its_own) {
  tr::context_pool cp(3);
  ASSERT_EQ(cp.contexts()->size(), 3u);
  EXPECT_EQ(&cp.at(4), (*cp.contexts())[1]);
  cp.start();
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  for (std::size_t k = 0; k < cp.size(); ++k) {
    auto f = asio::post(cp.at(k), asio::use_future([&] {
      std::lock_guard lk(mu);
      ran_on.insert(std::this_thread::get_id());
    }));
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  }
  EXPECT_EQ(ran_on.size(), 3u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
  cp.release();
  auto joined = std::async(std::launch::async, [&] { cp.join(); });
  EXPECT_EQ(joined.wait_for(10s), std::future_status::ready);
  for (std::size_t k = 0; k < cp.size(); ++k) EXPECT_TRUE(cp.at(k).stopped());
}

TEST(Transport, reply_echoes_head_unchanged) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, echo_handler());
  ASSERT_TRUE(srv.start());
  raw_conn raw(srv.bound_port());
  ASSERT_GE(raw.fd, 0);
  value head{{"mid", "1b4e28ba-2fa1-41d2-883f-0016d3cca427"}, {"extra", 7}};
  ASSERT_TRUE(raw.write_all(wire::pack_frame(head, value{{"x", 1}})));
  wire::frame_parser parser;
  std::optional<wire::frame> got;
  char buf[4096];
  while (!got) {
    auto n = ::recv(raw.fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    parser.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    auto r = parser.next();
    ASSERT_TRUE(r);
    got = std::move(*r);
  }
  EXPECT_EQ(got->head, head);
  EXPECT_EQ(got->body["echo"]["x"], 1);
}

TEST(Transport, thousand_requests_in_flight_answered_out_of_order) {
  constexpr int N = 1000;
  io_pool pool;
  std::mutex mu;
  std::vector<std::pair<value, std::shared_ptr<tr::responder>>> held;
  counter received;
  tr::req_server srv(pool.io, local_tcp(), {}, [&](value body, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      held.emplace_back(std::move(body), std::move(r));
    }
    received.add();
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  std::vector<std::future<result<value>>> futures;
  for (int i = 0; i < N; ++i) {
    futures.push_back(asio::co_spawn(pool.io, c->request(value{{"n", i}}, 60s), asio::use_future));
  }
  ASSERT_TRUE(received.wait_for(N));
  {
    // Reply in reverse arrival order, from this (non-io) thread.
    std::lock_guard lk(mu);
    for (auto it = held.rbegin(); it != held.rend(); ++it) it->second->reply(value{{"n2", it->first["n"]}});
  }
  for (int i = 0; i < N; ++i) {
    auto r = get(futures[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(r) << i << ": " << r.error().message();
    EXPECT_EQ((*r)["n2"], i);
  }
  EXPECT_EQ(srv.connection_count(), 1u);
}

TEST(Transport, request_timeout) {
  io_pool pool;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;  // never answered
  tr::req_server srv(pool.io, local_tcp(), {}, [&](value, std::shared_ptr<tr::responder> r) {
    std::lock_guard lk(mu);
    held.push_back(std::move(r));
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  auto f = asio::co_spawn(pool.io, c->request(value{{"x", 1}}, 200ms), asio::use_future);
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(tr::errc::timeout));
  // A late reply to the timed-out request is dropped; the client keeps working.
  {
    std::lock_guard lk(mu);
    ASSERT_EQ(held.size(), 1u);
    held[0]->reply(value("late"));
  }
  auto f2 = asio::co_spawn(pool.io, c->request(value{{"x", 2}}, 200ms), asio::use_future);
  auto r2 = get(f2);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error(), make_error_code(tr::errc::timeout));
}

TEST(Transport, server_close_fails_pending_then_reconnects) {
  io_pool pool;
  counter got;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  auto srv1 = std::make_unique<tr::req_server>(pool.io, local_tcp(), tr::options{},
                                               [&](value, std::shared_ptr<tr::responder> r) {
                                                 {
                                                   std::lock_guard lk(mu);
                                                   held.push_back(std::move(r));
                                                 }
                                                 got.add();
                                               });
  ASSERT_TRUE(srv1->start());
  const auto port = srv1->bound_port();
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(port));
  auto f1 = asio::co_spawn(pool.io, c->request(value{{"a", 1}}, 60s), asio::use_future);
  auto f2 = asio::co_spawn(pool.io, c->request(value{{"a", 2}}, 60s), asio::use_future);
  ASSERT_TRUE(got.wait_for(2));
  srv1->stop();
  for (auto* f : {&f1, &f2}) {
    auto r = get(*f);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(tr::errc::disconnected));
  }
  {
    std::lock_guard lk(mu);
    EXPECT_FALSE(held[0]->alive());
    held[0]->reply(value("dropped silently"));
    EXPECT_FALSE(held[1]->push(value("gone")));
  }
  // Nobody listening: the next request fails to connect, lazily.
  auto f3 = asio::co_spawn(pool.io, c->request(value{{"a", 3}}, 10s), asio::use_future);
  auto r3 = get(f3);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error(), make_error_code(tr::errc::connect_failed));
  // A new server on the same port: the next request reconnects.
  tr::req_server srv2(pool.io, local_tcp(port), {}, echo_handler());
  ASSERT_TRUE(srv2.start());
  auto f4 = asio::co_spawn(pool.io, c->request(value{{"a", 4}}, 10s), asio::use_future);
  auto r4 = get(f4);
  ASSERT_TRUE(r4) << r4.error().message();
  EXPECT_EQ((*r4)["echo"]["a"], 4);
}

TEST(Transport, garbage_closes_only_that_connection) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  auto f1 = asio::co_spawn(pool.io, c->request(value{{"a", 1}}, 10s), asio::use_future);
  ASSERT_TRUE(get(f1));
  raw_conn raw(srv.bound_port());
  ASSERT_GE(raw.fd, 0);
  ASSERT_TRUE(raw.write_all(std::string("\xc1\xc1 GET / HTTP/1.0\r\n\r\n", 20)));
  EXPECT_TRUE(raw.wait_closed());
  // Not a map at all (a positive fixint), on another connection.
  raw_conn raw2(srv.bound_port());
  ASSERT_TRUE(raw2.write_all("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(raw2.wait_closed());
  auto f2 = asio::co_spawn(pool.io, c->request(value{{"a", 2}}, 10s), asio::use_future);
  auto r2 = get(f2);
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ((*r2)["echo"]["a"], 2);
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; }));
}

TEST(Transport, oversized_frame_closes_connection) {
  io_pool pool;
  tr::options opt;
  opt.max_frame_size = 1024;
  counter handled;
  tr::req_server srv(pool.io, local_tcp(), opt, [&](value body, std::shared_ptr<tr::responder> r) {
    handled.add();
    r->reply(std::move(body));
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  auto f1 = asio::co_spawn(pool.io, c->request(value{{"blob", std::string(4096, 'x')}}, 10s), asio::use_future);
  auto r1 = get(f1);
  ASSERT_FALSE(r1);
  EXPECT_EQ(r1.error(), make_error_code(tr::errc::disconnected));
  EXPECT_EQ(handled.get(), 0);
  // Small requests still work (on a new connection).
  auto f2 = asio::co_spawn(pool.io, c->request(value{{"small", 1}}, 10s), asio::use_future);
  auto r2 = get(f2);
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ((*r2)["small"], 1);
}

TEST(Transport, handler_exception_keeps_serving) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, [](value body, std::shared_ptr<tr::responder> r) {
    if (body.is_object() && body.contains("boom")) throw std::runtime_error("boom");
    r->reply(std::move(body));
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  auto f1 = asio::co_spawn(pool.io, c->request(value{{"boom", 1}}, 300ms), asio::use_future);
  EXPECT_EQ(get(f1).error(), make_error_code(tr::errc::timeout));
  auto f2 = asio::co_spawn(pool.io, c->request(value{{"ok", 1}}, 10s), asio::use_future);
  EXPECT_TRUE(get(f2));
}

TEST(Transport, streaming_replies) {
  io_pool pool;
  tr::req_server srv(pool.io, local_tcp(), {}, [](value body, std::shared_ptr<tr::responder> r) {
    // Answer from another thread, as a worker pool would.
    std::thread([body = std::move(body), r] {
      for (int i = 0; i < body["count"].get<int>(); ++i) EXPECT_TRUE(r->push(value{{"item", i}}));
      r->reply(value{{"done", true}});
      EXPECT_FALSE(r->push(value("after reply")));
    }).detach();
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  std::vector<int> items;  // on_item runs on the client strand, one at a time
  auto f = asio::co_spawn(
      pool.io,
      c->request_stream(value{{"count", 5}}, [&](const value& v) { items.push_back(v["item"].get<int>()); }, 10s),
      asio::use_future);
  auto r = get(f);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["done"], true);
  EXPECT_EQ(items, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Transport, unix_socket_request_once) {
  temp_dir_guard dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/master.sock";
  io_pool pool;
  auto srv = std::make_unique<tr::req_server>(
      pool.io, local_unix(path), tr::options{}, [](value body, std::shared_ptr<tr::responder> r) {
        EXPECT_EQ(r->peer().address, "unix");
        // SO_PEERCRED: the kernel's word on who connected (publisher_acl decides on it).
        EXPECT_EQ(r->peer().uid, std::optional<std::uint32_t>(::geteuid()));
        EXPECT_EQ(r->peer().gid, std::optional<std::uint32_t>(::getegid()));
        if (body.contains("stream")) {
          r->push(value("one"));
          r->push(value("two"));
        }
        r->reply(value{{"echo", std::move(body)}});
      });
  ASSERT_TRUE(srv->start());
  struct stat st{};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto r = tr::request_once(local_unix(path), value{{"cmd", "test.ping"}}, 10s);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["echo"]["cmd"], "test.ping");

  std::vector<std::string> items;
  auto rs = tr::request_stream_once(
      local_unix(path), value{{"stream", true}},
      [&](const value& v) { items.emplace_back(*wire::as_text(v)); }, 10s);
  ASSERT_TRUE(rs) << rs.error().message();
  EXPECT_EQ(items, (std::vector<std::string>{"one", "two"}));

  // A second server on a live socket is refused; the first keeps its file.
  tr::req_server dup(pool.io, local_unix(path), {}, echo_handler());
  EXPECT_FALSE(dup.start());
  EXPECT_TRUE(tr::request_once(local_unix(path), value("still there"), 10s));

  // stop() removes the socket file; a request then fails to connect.
  srv->stop();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  auto gone = tr::request_once(local_unix(path), value("x"), 10s);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error(), make_error_code(tr::errc::connect_failed));
}

TEST(Transport, unix_socket_stale_file_replaced_non_socket_refused) {
  temp_dir_guard dir;
  const std::string path = dir.path + "/stale.sock";
  {
    // Leave a socket file nobody listens on.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::strncpy(sun.sun_path, path.c_str(), sizeof sun.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof sun), 0);
    ::close(fd);
  }
  io_pool pool;
  tr::req_server srv(pool.io, local_unix(path), {}, echo_handler());
  ASSERT_TRUE(srv.start());
  EXPECT_TRUE(tr::request_once(local_unix(path), value("x"), 10s));

  const std::string file = dir.path + "/regular";
  std::ofstream(file) << "data";
  tr::req_server bad(pool.io, local_unix(file), {}, echo_handler());
  EXPECT_FALSE(bad.start());
  std::ifstream in(file);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "data");
}

TEST(Transport, pub_broadcast_to_200_connections) {
  constexpr int N = 200;
  io_pool pool;
  counter online;
  tr::pub_server srv(
      pool.io, local_tcp(), {}, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) {
        if (up) online.add();
      });
  ASSERT_TRUE(srv.start());
  counter received;
  std::vector<std::atomic<int>> per_client(N);
  std::vector<std::shared_ptr<tr::pub_client>> clients;
  std::vector<std::future<result<void>>> connects;
  for (int i = 0; i < N; ++i) {
    auto c = tr::pub_client::create(pool.io.get_executor());
    connects.push_back(asio::co_spawn(pool.io,
                                      c->connect(
                                          local_tcp(srv.bound_port()), value{{"id", "minion-" + std::to_string(i)}},
                                          [&, i](value body) {
                                            EXPECT_EQ(body["job"], 1);
                                            per_client[static_cast<std::size_t>(i)]++;
                                            received.add();
                                          },
                                          [](error_code) {}),
                                      asio::use_future));
    clients.push_back(std::move(c));
  }
  for (auto& f : connects) {
    auto r = get(f);
    ASSERT_TRUE(r) << r.error().message();
  }
  ASSERT_TRUE(online.wait_for(N));
  EXPECT_EQ(srv.connection_count(), static_cast<std::size_t>(N));
  EXPECT_EQ(srv.connected_ids().size(), static_cast<std::size_t>(N));
  EXPECT_TRUE(srv.is_connected("minion-7"));
  srv.publish_all(pub_frame(value{{"job", 1}}));
  ASSERT_TRUE(received.wait_for(N));
  for (auto& n : per_client) EXPECT_EQ(n.load(), 1);
  for (auto& c : clients) c->close();
}

// publish_processes: the master opens a SO_REUSEPORT group of listeners, one per publish
// process, and each process accepts on its own; the kernel spreads connections over them.
TEST(Transport, a_listener_group_spreads_connections_over_its_servers) {
  auto fds = tr::open_tcp_listener_group(local_tcp(), 2);
  ASSERT_TRUE(fds) << fds.error().message();
  ASSERT_EQ(fds->size(), 2u);
  io_pool pool;
  counter online;
  auto make = [&](int lfd) {
    tr::options o;
    o.listen_fd = lfd;
    return std::make_unique<tr::pub_server>(
        pool.io, tr::endpoint{}, o, [](const value& body, const tr::peer_info&) { return id_of(body); },
        [&](const std::string&, bool up) {
          if (up) online.add();
        });
  };
  auto a = make((*fds)[0]);
  auto b = make((*fds)[1]);
  ASSERT_TRUE(a->start());
  ASSERT_TRUE(b->start());
  ASSERT_NE(a->bound_port(), 0);
  EXPECT_EQ(a->bound_port(), b->bound_port());

  // The port is taken: a plain listener and a second group are both refused.
  EXPECT_FALSE(tr::open_tcp_listener(local_tcp(a->bound_port())));
  EXPECT_FALSE(tr::open_tcp_listener_group(local_tcp(a->bound_port()), 2));

  constexpr int N = 100;
  counter received;
  std::vector<std::shared_ptr<tr::pub_client>> clients;
  for (int i = 0; i < N; ++i) {
    auto c = tr::pub_client::create(pool.io.get_executor());
    auto f = asio::co_spawn(pool.io,
                            c->connect(local_tcp(a->bound_port()), value{{"id", "m" + std::to_string(i)}},
                                       [&](value) { received.add(); }, [](error_code) {}),
                            asio::use_future);
    ASSERT_TRUE(get(f));
    clients.push_back(c);
  }
  ASSERT_TRUE(online.wait_for(N));
  EXPECT_EQ(a->connection_count() + b->connection_count(), static_cast<std::size_t>(N));
  // By address hash: about half each (below 20 of 100 is a 1-in-10^9 draw).
  EXPECT_GE(a->connection_count(), 20u);
  EXPECT_GE(b->connection_count(), 20u);
  a->publish_all(pub_frame(value{{"job", 1}}));
  b->publish_all(pub_frame(value{{"job", 1}}));
  ASSERT_TRUE(received.wait_for(N));  // every client on exactly one of them
  for (auto& c : clients) c->close();

  tr::options bad;
  bad.listen_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // not a listening socket: refused
  tr::pub_server c(pool.io, tr::endpoint{}, bad, nullptr);
  EXPECT_FALSE(c.start());
  ::close(bad.listen_fd);
}

TEST(Transport, publish_to_reaches_only_identified_ids) {
  counter hellos, online;
  io_pool pool;  // after what the callbacks touch: its threads are joined first
  tr::pub_server srv(
      pool.io, local_tcp(), {},
      [&](const value& body, const tr::peer_info&) {
        hellos.add();
        return id_of(body);  // "" -> not identified
      },
      [&](const std::string&, bool up) {
        if (up) online.add();
      });
  ASSERT_TRUE(srv.start());
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> got;
  counter broadcasts;
  std::vector<std::shared_ptr<tr::pub_client>> clients;
  for (std::string name : {"a", "b", "anon"}) {
    auto c = tr::pub_client::create(pool.io.get_executor());
    auto f = asio::co_spawn(pool.io,
                            c->connect(
                                local_tcp(srv.bound_port()), value{{"id", name == "anon" ? "" : name}},
                                [&, name](value body) {
                                  std::string what(*wire::as_text(body["what"]));
                                  {
                                    std::lock_guard lk(mu);
                                    got[name].push_back(what);
                                  }
                                  if (what == "all") broadcasts.add();
                                },
                                [](error_code) {}),
                            asio::use_future);
    ASSERT_TRUE(get(f));
    clients.push_back(c);
  }
  ASSERT_TRUE(hellos.wait_for(3));
  ASSERT_TRUE(online.wait_for(2));
  EXPECT_EQ(srv.connected_ids(), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(srv.is_connected("anon"));
  srv.publish_to(pub_frame(value{{"what", "to-a"}}), {"a", "a", "nobody"});
  srv.publish_to(pub_frame(value{{"what", "to-nobody"}}), {"nobody"});
  srv.publish_all(pub_frame(value{{"what", "all"}}));
  ASSERT_TRUE(broadcasts.wait_for(3));
  std::lock_guard lk(mu);
  EXPECT_EQ(got["a"], (std::vector<std::string>{"to-a", "all"}));
  EXPECT_EQ(got["b"], (std::vector<std::string>{"all"}));
  EXPECT_EQ(got["anon"], (std::vector<std::string>{"all"}));
}

TEST(Transport, disconnect_closes_only_that_ids_connections) {
  counter online, offline;
  io_pool pool;  // after what the callbacks touch: its threads are joined first
  tr::pub_server srv(
      pool.io, local_tcp(), {}, [&](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) { (up ? online : offline).add(); });
  ASSERT_TRUE(srv.start());
  counter closed_a, closed_b;
  std::vector<std::shared_ptr<tr::pub_client>> clients;
  for (std::string name : {"a", "b"}) {
    auto c = tr::pub_client::create(pool.io.get_executor());
    counter* closed = name == "a" ? &closed_a : &closed_b;
    auto ep = local_tcp(srv.bound_port());
    value hello{{"id", name}};
    auto on_msg = [](value) {};
    auto on_closed = [closed](error_code) { closed->add(); };
    auto f = asio::co_spawn(pool.io, c->connect(ep, hello, on_msg, on_closed), asio::use_future);
    ASSERT_TRUE(get(f));
    clients.push_back(c);
  }
  ASSERT_TRUE(online.wait_for(2));
  EXPECT_EQ(srv.disconnect("nobody"), 0u);
  EXPECT_EQ(srv.disconnect("a"), 1u);
  ASSERT_TRUE(closed_a.wait_for(1));
  ASSERT_TRUE(offline.wait_for(1));
  EXPECT_EQ(srv.connected_ids(), (std::vector<std::string>{"b"}));
  EXPECT_TRUE(clients[1]->connected());
}

TEST(Transport, publishes_from_many_threads_arrive_whole_and_in_order_through_a_full_socket) {
  // Four threads publish to a reader that does not read at first (small buffer: partial
  // writes, a growing queue); then every frame must arrive whole, each thread's in its
  // order.
  io_pool pool;
  tr::options opt;
  opt.max_queue_bytes = 64u << 20;
  opt.max_queue_frames = 100000;
  counter online;
  tr::pub_server srv(
      pool.io, local_tcp(), opt, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) {
        if (up) online.add();
      });
  ASSERT_TRUE(srv.start());
  raw_conn raw(srv.bound_port(), 4096);
  ASSERT_GE(raw.fd, 0);
  ASSERT_TRUE(raw.write_all(wire::pack_frame(value::object(), value{{"id", "r"}})));
  ASSERT_TRUE(online.wait_for(1));
  constexpr int kThreads = 4, kPer = 300;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        // Sizes vary so that partial writes split frames at many offsets.
        const std::size_t pad = static_cast<std::size_t>((t * 7919 + i * 104729) % 20000);
        srv.publish_all(pub_frame(value{{"t", t}, {"i", i}, {"pad", std::string(pad, 'x')}}));
      }
    });
  }
  for (auto& th : senders) th.join();
  wire::frame_parser parser;
  std::vector<int> next(kThreads, 0);
  int got = 0;
  char buf[65536];
  while (got < kThreads * kPer) {
    auto n = ::recv(raw.fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "after " << got << " frames";
    parser.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto r = parser.next();
      ASSERT_TRUE(r) << r.error().message();
      if (!*r) break;
      const auto t = (**r).body["t"].get<int>();
      ASSERT_GE(t, 0);
      ASSERT_LT(t, kThreads);
      EXPECT_EQ((**r).body["i"].get<int>(), next[static_cast<std::size_t>(t)]) << "thread " << t;
      next[static_cast<std::size_t>(t)] = (**r).body["i"].get<int>() + 1;
      ++got;
    }
  }
  EXPECT_EQ(got, kThreads * kPer);
  EXPECT_TRUE(srv.is_connected("r"));
}

TEST(Transport, slow_reader_disconnected_others_keep_receiving) {
  // What the callbacks touch outlives the threads that run them (declared before the
  // pool): a connection the server's stop closes reports its presence on a pool thread.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, bool>> presence;
  counter good_received;
  io_pool pool;
  tr::options opt;
  opt.max_queue_bytes = 256 * 1024;
  tr::pub_server srv(
      pool.io, local_tcp(), opt, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string& id, bool up) {
        {
          std::lock_guard lk(mu);
          presence.emplace_back(id, up);
        }
        cv.notify_all();
      });
  ASSERT_TRUE(srv.start());
  auto has_event = [&](const std::string& id, bool up) {
    return std::find(presence.begin(), presence.end(), std::make_pair(id, up)) != presence.end();
  };

  auto good = tr::pub_client::create(pool.io.get_executor());
  auto f = asio::co_spawn(pool.io,
                          good->connect(
                              local_tcp(srv.bound_port()), value{{"id", "good"}},
                              [&](value) { good_received.add(); }, [](error_code) {}),
                          asio::use_future);
  ASSERT_TRUE(get(f));
  raw_conn slow(srv.bound_port(), 4096);  // small receive buffer, never reads
  ASSERT_GE(slow.fd, 0);
  ASSERT_TRUE(slow.write_all(wire::pack_frame(value::object(), value{{"id", "slow"}})));
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, kWait, [&] { return has_event("good", true) && has_event("slow", true); }));
  }
  auto frame = pub_frame(value{{"blob", wire::make_bin(std::string(16 * 1024, 'p'))}});
  bool slow_dropped = false;
  int sent = 0;
  // Pace on the good client so only the slow one can overflow.
  for (; sent < 4000 && !slow_dropped; ++sent) {
    srv.publish_all(frame);
    ASSERT_TRUE(good_received.wait_for(sent + 1)) << "good client stalled at " << sent;
    std::lock_guard lk(mu);
    slow_dropped = has_event("slow", false);
  }
  EXPECT_TRUE(slow_dropped) << "after " << sent << " frames";
  EXPECT_TRUE(good->connected());
  EXPECT_TRUE(srv.is_connected("good"));
  EXPECT_FALSE(srv.is_connected("slow"));
  srv.publish_all(frame);
  EXPECT_TRUE(good_received.wait_for(sent + 1));
  EXPECT_EQ(srv.connection_count(), 1u);
}

// After stop() returns the presence handler is never called again: the connections
// stop() closes are reported to nobody, so a handler may capture what its owner destroys
// right after stop().
TEST(Transport, no_presence_event_after_stop_returns) {
  std::atomic<bool> stop_returned{false};
  std::atomic<int> up{0}, late{0};
  io_pool pool;
  tr::pub_server srv(
      pool.io, local_tcp(), {}, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool connected) {
        if (stop_returned) ++late;
        if (connected) ++up;
      });
  ASSERT_TRUE(srv.start());
  std::vector<std::unique_ptr<raw_conn>> conns;
  for (int i = 0; i < 20; ++i) {
    conns.push_back(std::make_unique<raw_conn>(srv.bound_port()));
    ASSERT_GE(conns.back()->fd, 0);
    ASSERT_TRUE(conns.back()->write_all(wire::pack_frame(value::object(), value{{"id", "m" + std::to_string(i)}})));
  }
  ASSERT_TRUE(eventually([&] { return up.load() == 20; }));
  srv.stop();
  stop_returned = true;
  // The closes stop() started finish on the io threads; none may report.
  ASSERT_TRUE(eventually([&] { return srv.connection_count() == 0; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(late.load(), 0);
}

// stop() waits for a hello handler in progress, and no hello starts after it returns.
TEST(Transport, stop_waits_for_a_hello_in_progress) {
  std::atomic<bool> in_hello{false}, hello_done{false}, stop_returned{false};
  std::atomic<int> hellos{0}, late{0};
  io_pool pool;
  tr::pub_server srv(pool.io, local_tcp(), {}, [&](const value& body, const tr::peer_info&) {
    if (stop_returned) ++late;
    if (++hellos == 1) {
      in_hello = true;
      std::this_thread::sleep_for(300ms);
      hello_done = true;
    }
    return id_of(body);
  });
  ASSERT_TRUE(srv.start());
  raw_conn c(srv.bound_port());
  ASSERT_GE(c.fd, 0);
  ASSERT_TRUE(c.write_all(wire::pack_frame(value::object(), value{{"id", "a"}})));
  ASSERT_TRUE(eventually([&] { return in_hello.load(); }));
  srv.stop();
  EXPECT_TRUE(hello_done.load()) << "stop() returned while the hello handler ran";
  stop_returned = true;
  // A hello on a connection made before the stop is not handled.
  c.write_all(wire::pack_frame(value::object(), value{{"id", "b"}}));
  ASSERT_TRUE(eventually([&] { return srv.connection_count() == 0; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(hellos.load(), 1);
}

TEST(Transport, presence_events_first_identify_last_close) {
  counter hellos;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, bool>> events;
  io_pool pool;  // after what the callbacks touch: its threads are joined first
  tr::pub_server srv(
      pool.io, local_tcp(), {},
      [&](const value& body, const tr::peer_info&) {
        hellos.add();
        return id_of(body);
      },
      [&](const std::string& id, bool up) {
        {
          std::lock_guard lk(mu);
          events.emplace_back(id, up);
        }
        cv.notify_all();
      });
  ASSERT_TRUE(srv.start());
  auto wait_events = [&](std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, kWait, [&] { return events.size() >= n; });
  };
  counter closed_a1;
  auto a1 = tr::pub_client::create(pool.io.get_executor());
  auto a2 = tr::pub_client::create(pool.io.get_executor());
  auto f1 = asio::co_spawn(pool.io,
                           a1->connect(local_tcp(srv.bound_port()), value{{"id", "a"}}, [](value) {},
                                       [&](error_code) { closed_a1.add(); }),
                           asio::use_future);
  ASSERT_TRUE(get(f1));
  ASSERT_TRUE(wait_events(1));
  auto f2 = asio::co_spawn(pool.io,
                           a2->connect(local_tcp(srv.bound_port()), value{{"id", "a"}}, [](value) {}, [](error_code) {}),
                           asio::use_future);
  ASSERT_TRUE(get(f2));
  ASSERT_TRUE(hellos.wait_for(2));
  // The hello handler returns before the connection is filed under its id: wait for both.
  ASSERT_TRUE(eventually([&] { return srv.connections_of("a") == 2; }));
  EXPECT_EQ(srv.connection_count(), 2u);
  a1->close();
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; }));
  EXPECT_TRUE(srv.is_connected("a"));
  a2->close();
  ASSERT_TRUE(wait_events(2));
  std::lock_guard lk(mu);
  EXPECT_EQ(events, (std::vector<std::pair<std::string, bool>>{{"a", true}, {"a", false}}));
  EXPECT_FALSE(srv.is_connected("a"));
  EXPECT_EQ(closed_a1.get(), 0);  // close() is silent
}

// A hello decided later, off the strand (the key read on a worker thread): identify()
// files the connection under its id, reports presence, and refuses a closed connection.
TEST(Transport, pub_server_identifies_later_from_another_thread) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> conns;
  std::vector<std::pair<std::string, bool>> events;
  io_pool pool;  // after what the callbacks touch: its threads are joined first
  tr::pub_server srv(
      pool.io, local_tcp(), {},
      [&](const value&, const tr::peer_info& p) -> std::optional<std::string> {
        {
          std::lock_guard lk(mu);
          conns.push_back(p.conn_id);
        }
        cv.notify_all();
        return std::nullopt;  // decided later
      },
      [&](const std::string& id, bool up) {
        {
          std::lock_guard lk(mu);
          events.emplace_back(id, up);
        }
        cv.notify_all();
      });
  ASSERT_TRUE(srv.start());
  auto c = tr::pub_client::create(pool.io.get_executor());
  auto f = asio::co_spawn(pool.io, c->connect(local_tcp(srv.bound_port()), value{{"id", "late"}}, [](value) {}, [](error_code) {}),
                          asio::use_future);
  ASSERT_TRUE(get(f));
  std::uint64_t conn = 0;
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, kWait, [&] { return !conns.empty(); }));
    conn = conns[0];
  }
  EXPECT_FALSE(srv.is_connected("late"));
  std::thread worker([&] { EXPECT_TRUE(srv.identify(conn, "late")); });
  worker.join();
  EXPECT_TRUE(srv.is_connected("late"));
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, kWait, [&] { return !events.empty(); }));
    EXPECT_EQ(events[0], std::make_pair(std::string("late"), true));
  }
  EXPECT_FALSE(srv.identify(conn + 1000, "other"));  // no such connection
  c->close();
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 0; }));
  EXPECT_FALSE(srv.identify(conn, "late"));  // closed meanwhile
  EXPECT_FALSE(srv.is_connected("late"));
}

TEST(Transport, pub_client_reports_closed_once_and_reconnects) {
  counter online;
  io_pool pool;  // after what the callbacks touch: its threads are joined first
  auto srv = std::make_unique<tr::pub_server>(
      pool.io, local_tcp(), tr::options{}, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) {
        if (up) online.add();
      });
  ASSERT_TRUE(srv->start());
  const auto port = srv->bound_port();
  std::mutex mu;
  std::vector<error_code> closes;
  counter closed;
  auto c = tr::pub_client::create(pool.io.get_executor());
  auto on_closed = [&](error_code ec) {
    {
      std::lock_guard lk(mu);
      closes.push_back(ec);
    }
    closed.add();
  };
  auto f = asio::co_spawn(pool.io, c->connect(local_tcp(port), value{{"id", "m"}}, [](value) {}, on_closed),
                          asio::use_future);
  ASSERT_TRUE(get(f));
  ASSERT_TRUE(online.wait_for(1));
  EXPECT_TRUE(c->send(value("heartbeat")));
  srv->stop();
  ASSERT_TRUE(closed.wait_for(1));
  EXPECT_FALSE(c->connected());
  EXPECT_FALSE(c->send(value("heartbeat")));
  srv.reset();
  // Nobody listening now.
  auto f2 = asio::co_spawn(pool.io, c->connect(local_tcp(port), value{{"id", "m"}}, [](value) {}, on_closed),
                           asio::use_future);
  auto r2 = get(f2);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error(), make_error_code(tr::errc::connect_failed));
  // Back up on the same port.
  counter online2;
  tr::pub_server srv2(
      pool.io, local_tcp(port), {}, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) {
        if (up) online2.add();
      });
  ASSERT_TRUE(srv2.start());
  auto f3 = asio::co_spawn(pool.io, c->connect(local_tcp(port), value{{"id", "m"}}, [](value) {}, on_closed),
                           asio::use_future);
  ASSERT_TRUE(get(f3));
  ASSERT_TRUE(online2.wait_for(1));
  EXPECT_TRUE(srv2.is_connected("m"));
  std::lock_guard lk(mu);
  EXPECT_EQ(closes.size(), 1u);
}

TEST(Transport, connect_timeout_and_resolve_failure) {
  io_pool pool;
  tr::options opt;
  opt.connect_timeout = 300ms;
  // A local listener that never accepts, with its backlog filled: further SYNs are
  // dropped, so connect() hangs until our deadline (no traffic leaves the machine).
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof sin;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sin), &len);
  const std::uint16_t port = ntohs(sin.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin);
    fillers.push_back(fd);
  }
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(port), opt);
  auto f = asio::co_spawn(pool.io, c->request(value("x"), 10s), asio::use_future);
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(tr::errc::timeout)) << r.error().message();
  for (int fd : fillers) ::close(fd);
  ::close(lfd);
  auto bad = tr::req_client::create(pool.io.get_executor(), tr::endpoint{"no-such-host.invalid", 4506, {}}, opt);
  auto f2 = asio::co_spawn(pool.io, bad->request(value("x"), 10s), asio::use_future);
  auto r2 = get(f2);
  ASSERT_FALSE(r2);
  EXPECT_TRUE(r2.error() == make_error_code(tr::errc::resolve_failed) ||
              r2.error() == make_error_code(tr::errc::timeout))
      << r2.error().message();
}

TEST(Transport, client_close_fails_pending_with_closed) {
  io_pool pool;
  counter got;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  tr::req_server srv(pool.io, local_tcp(), {}, [&](value, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      held.push_back(std::move(r));
    }
    got.add();
  });
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  auto f = asio::co_spawn(pool.io, c->request(value("x"), 60s), asio::use_future);
  ASSERT_TRUE(got.wait_for(1));
  c->close();
  auto r = get(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), make_error_code(tr::errc::closed));
  auto f2 = asio::co_spawn(pool.io, c->request(value("y"), 10s), asio::use_future);
  EXPECT_EQ(get(f2).error(), make_error_code(tr::errc::closed));
}

TEST(Transport, stop_with_live_connections_then_run_drains) {
  asio::io_context io;
  tr::req_server rs(io, local_tcp(), {}, echo_handler());
  counter online;
  tr::pub_server ps(
      io, local_tcp(), {}, [](const value& body, const tr::peer_info&) { return id_of(body); },
      [&](const std::string&, bool up) {
        if (up) online.add();
      });
  ASSERT_TRUE(rs.start());
  ASSERT_TRUE(ps.start());
  std::promise<void> drained;
  auto drained_f = drained.get_future();
  std::thread runner([&] {
    io.run();
    drained.set_value();
  });
  auto rc = tr::req_client::create(io.get_executor(), local_tcp(rs.bound_port()));
  auto f = asio::co_spawn(io, rc->request(value("x"), 10s), asio::use_future);
  ASSERT_TRUE(get(f));
  counter pub_closed;
  auto pc = tr::pub_client::create(io.get_executor());
  auto pf = asio::co_spawn(io,
                           pc->connect(local_tcp(ps.bound_port()), value{{"id", "m"}}, [](value) {},
                                       [&](error_code) { pub_closed.add(); }),
                           asio::use_future);
  ASSERT_TRUE(get(pf));
  ASSERT_TRUE(online.wait_for(1));
  EXPECT_EQ(rs.connection_count(), 1u);
  rs.stop();
  ps.stop();
  const bool ok = drained_f.wait_for(kWait) == std::future_status::ready;
  EXPECT_TRUE(ok) << "io_context::run() did not drain after stop()";
  if (!ok) io.stop();
  runner.join();
  EXPECT_EQ(pub_closed.get(), 1);
  EXPECT_EQ(rs.connection_count(), 0u);
  EXPECT_EQ(ps.connection_count(), 0u);
}

long rss_kb() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

TEST(Transport, idle_connection_memory) {
  constexpr int N = 2000;
  io_pool pool;
  tr::pub_server srv(pool.io, local_tcp(), {}, [](const value& body, const tr::peer_info&) { return id_of(body); });
  ASSERT_TRUE(srv.start());
  // Warm up allocator pools and thread-local buffers with a few connections.
  {
    std::vector<std::unique_ptr<raw_conn>> warm;
    for (int i = 0; i < 50; ++i) warm.push_back(std::make_unique<raw_conn>(srv.bound_port()));
    ASSERT_TRUE(eventually([&] { return srv.connection_count() == 50; }));
  }
  ASSERT_TRUE(eventually([&] { return srv.connection_count() == 0; }));
  const long before = rss_kb();
  std::vector<std::unique_ptr<raw_conn>> conns;
  conns.reserve(N);
  for (int i = 0; i < N; ++i) {
    conns.push_back(std::make_unique<raw_conn>(srv.bound_port()));
    ASSERT_GE(conns.back()->fd, 0);
  }
  ASSERT_TRUE(eventually([&] { return srv.connection_count() == static_cast<std::size_t>(N); }));
  const long after = rss_kb();
  const double per_conn = static_cast<double>(after - before) * 1024.0 / N;
  std::printf("[ info     ] RSS per idle server connection: %.0f bytes (%d connections)\n", per_conn, N);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(per_conn, 8 * 1024);
#endif
}



// ---------------------------------------------------------------------------------
// Pre-authentication limits, caps, timeouts (docs/security.md 1 and 2)

// Handler: {"auth": true} marks the connection authenticated; every request is echoed.
tr::request_handler auth_echo_handler(counter* handled = nullptr) {
  return [handled](value body, std::shared_ptr<tr::responder> r) {
    if (handled) handled->add();
    if (body.is_object() && body.contains("auth")) r->mark_authenticated();
    r->reply(value{{"echo", std::move(body)}});
  };
}

result<value> call(io_pool& pool, const std::shared_ptr<tr::req_client>& c, value body) {
  auto f = asio::co_spawn(pool.io, c->request(std::move(body), 10s), asio::use_future);
  return get(f);
}

TEST(TransportPreAuth, frame_limit_until_authenticated) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_max_frame_size = 4096;
  counter handled;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler(&handled));
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  // 8 KiB before authentication: the connection is closed, the handler never sees it.
  auto r1 = call(pool, c, value{{"blob", std::string(8192, 'x')}});
  ASSERT_FALSE(r1);
  EXPECT_EQ(handled.get(), 0);
  // Authenticate (a new connection), then the same 8 KiB passes on it.
  ASSERT_TRUE(call(pool, c, value{{"auth", true}}));
  auto r2 = call(pool, c, value{{"blob", std::string(8192, 'x')}});
  ASSERT_TRUE(r2) << r2.error().message();
  EXPECT_EQ((*r2)["echo"]["blob"].get<std::string>().size(), 8192u);
}

TEST(TransportPreAuth, object_cap_until_authenticated) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_max_nodes = 64;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  value many = value::array();
  for (int i = 0; i < 100; ++i) many.push_back(i);
  EXPECT_FALSE(call(pool, c, value{{"many", many}}));  // 100 objects > 64
  ASSERT_TRUE(call(pool, c, value{{"auth", true}}));
  auto r = call(pool, c, value{{"many", many}});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ((*r)["echo"]["many"].size(), 100u);
}

TEST(TransportPreAuth, shared_budget_admits_a_large_first_frame_and_is_returned) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_max_frame_size = 4096;
  opt.pre_auth_budget = std::make_shared<tr::byte_budget>(256 * 1024);
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  // 100 KB as the first frame of an unauthenticated connection: within the budget.
  auto r1 = call(pool, c, value{{"ret", wire::make_bin(std::string(100000, 'r'))}});
  ASSERT_TRUE(r1) << r1.error().message();
  EXPECT_TRUE(eventually([&] { return opt.pre_auth_budget->used() == 0; }));
  // 1 MB: over the budget, closed.
  auto r2 = call(pool, c, value{{"ret", wire::make_bin(std::string(1000000, 'r'))}});
  EXPECT_FALSE(r2);
  EXPECT_TRUE(eventually([&] { return opt.pre_auth_budget->used() == 0; }));
}

TEST(TransportPreAuth, per_source_cap_counts_only_unauthenticated) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_max_connections_per_source = 2;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  // An authenticated client from the same address does not count.
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  ASSERT_TRUE(call(pool, c, value{{"auth", true}}));
  raw_conn a(srv.bound_port()), b(srv.bound_port());
  ASSERT_GE(a.fd, 0);
  ASSERT_GE(b.fd, 0);
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 3; }));
  raw_conn refused(srv.bound_port());
  ASSERT_GE(refused.fd, 0);
  EXPECT_TRUE(refused.wait_closed());  // closed at once by the server
  EXPECT_EQ(srv.connection_count(), 3u);
  // The authenticated connection keeps working.
  ASSERT_TRUE(call(pool, c, value{{"x", 1}}));
  // One unauthenticated connection goes: room for one more.
  ::close(a.fd);
  a.fd = -1;
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 2; }));
  auto c2 = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  EXPECT_TRUE(call(pool, c2, value{{"y", 2}}));
}

TEST(TransportPreAuth, total_cap) {
  io_pool pool;
  tr::options opt;
  opt.max_connections = 2;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  raw_conn a(srv.bound_port()), b(srv.bound_port());
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 2; }));
  raw_conn refused(srv.bound_port());
  EXPECT_TRUE(refused.wait_closed());
  EXPECT_EQ(srv.connection_count(), 2u);
}

TEST(TransportPreAuth, stalled_partial_frame_closed_silent_kept_without_idle_timeout) {
  io_pool pool;
  tr::options opt;
  opt.frame_timeout = 300ms;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  raw_conn silent(srv.bound_port());
  raw_conn stalled(srv.bound_port());
  const std::string f = wire::pack_frame(value::object({{"mid", "1"}}), value{{"a", std::string(1000, 'a')}});
  ASSERT_TRUE(stalled.write_all(f.substr(0, 500)));
  EXPECT_TRUE(stalled.wait_closed());
  // The silent one has no partial frame and no idle timeout applies: still open.
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; }));
}

TEST(TransportPreAuth, authenticated_slow_frame_survives_while_bytes_arrive) {
  io_pool pool;
  tr::options opt;
  opt.frame_timeout = 400ms;
  counter handled;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler(&handled));
  ASSERT_TRUE(srv.start());
  raw_conn conn(srv.bound_port());
  ASSERT_TRUE(conn.write_all(wire::pack_frame(value::object({{"mid", "1"}}), value{{"auth", true}})));
  ASSERT_TRUE(handled.wait_for(1));
  // A frame trickled over ~1.2 s (3 x the frame timeout) in 12 pieces: bytes keep
  // arriving, so the authenticated connection is not closed.
  const std::string f = wire::pack_frame(value::object({{"mid", "2"}}), value{{"a", std::string(1200, 'a')}});
  for (std::size_t off = 0; off < f.size(); off += 100) {
    ASSERT_TRUE(conn.write_all(f.substr(off, 100)));
    std::this_thread::sleep_for(100ms);  // pacing the sender, not a timing assertion
  }
  EXPECT_TRUE(handled.wait_for(2));
}

TEST(TransportPreAuth, silent_unauthenticated_closed_by_idle_timeout) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_idle_timeout = 300ms;
  tr::req_server srv(pool.io, local_tcp(), opt, auth_echo_handler());
  ASSERT_TRUE(srv.start());
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(srv.bound_port()));
  ASSERT_TRUE(call(pool, c, value{{"auth", true}}));  // authenticated: never idle-closed
  raw_conn silent(srv.bound_port());
  EXPECT_TRUE(silent.wait_closed());
  EXPECT_TRUE(eventually([&] { return srv.connection_count() == 1; }));
  EXPECT_TRUE(call(pool, c, value{{"x", 1}}));
}

TEST(TransportPreAuth, pending_requests_pause_reading) {
  io_pool pool;
  tr::options opt;
  opt.pre_auth_max_pending = 2;
  std::mutex mu;
  std::vector<std::shared_ptr<tr::responder>> held;
  counter handled;
  tr::req_server srv(pool.io, local_tcp(), opt, [&](value, std::shared_ptr<tr::responder> r) {
    {
      std::lock_guard lk(mu);
      held.push_back(std::move(r));
    }
    handled.add();
  });
  ASSERT_TRUE(srv.start());
  raw_conn conn(srv.bound_port());
  std::string five;
  for (int i = 0; i < 5; ++i) five += wire::pack_frame(value::object({{"mid", std::to_string(i)}}), value{{"i", i}});
  ASSERT_TRUE(conn.write_all(five));
  ASSERT_TRUE(handled.wait_for(2));
  std::this_thread::sleep_for(200ms);  // give a wrong implementation the chance to over-read
  EXPECT_EQ(handled.get(), 2);
  {
    std::lock_guard lk(mu);
    held.front()->reply(value{{"ok", 1}});
  }
  ASSERT_TRUE(handled.wait_for(3));
  {
    std::lock_guard lk(mu);
    for (auto& r : held) r->reply(value{{"ok", 1}});
  }
  EXPECT_TRUE(handled.wait_for(5));
}

// An unauthenticated connection answered from another thread (a worker) or inline by
// the handler: each reply arrives, in order, and reads resume after it (the reply and
// the request's end in one hop; inline, the reads resume from the queue, not from inside
// the reply).
TEST(TransportPreAuth, replies_from_another_thread_or_inline_arrive_and_resume_reading) {
  for (const bool inline_reply : {false, true}) {
    SCOPED_TRACE(inline_reply ? "inline" : "another thread");
    io_pool pool;
    tr::options opt;
    opt.pre_auth_max_pending = 1;
    std::vector<std::thread> workers;
    std::mutex mu;
    tr::req_server srv(pool.io, local_tcp(), opt, [&](value body, std::shared_ptr<tr::responder> r) {
      if (inline_reply) {
        r->reply(value{{"echo", std::move(body)}});
        return;
      }
      std::lock_guard lk(mu);
      workers.emplace_back([body = std::move(body), r = std::move(r)]() mutable {
        std::this_thread::sleep_for(20ms);
        r->reply(value{{"echo", std::move(body)}});
      });
    });
    ASSERT_TRUE(srv.start());
    raw_conn conn(srv.bound_port());
    std::string three;
    for (int i = 0; i < 3; ++i) three += wire::pack_frame(value::object({{"mid", std::to_string(i)}}), value{{"i", i}});
    ASSERT_TRUE(conn.write_all(three));
    wire::frame_parser parser;
    std::vector<wire::frame> got;
    char buf[4096];
    while (got.size() < 3) {
      auto n = ::recv(conn.fd, buf, sizeof buf, 0);
      ASSERT_GT(n, 0) << "replies missing: " << got.size() << " of 3";
      parser.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      for (;;) {
        auto f = parser.next();
        ASSERT_TRUE(f) << f.error().message();
        if (!*f) break;
        got.push_back(std::move(**f));
      }
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].head["mid"], std::to_string(i));
      EXPECT_EQ(got[i].body["echo"]["i"], i);
    }
    srv.stop();
    std::lock_guard lk(mu);
    for (auto& t : workers) t.join();
  }
}

TEST(TransportPreAuth, descriptor_reserve_refuses_and_keeps_serving) {
  struct rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  io_pool pool;
  auto c = tr::req_client::create(pool.io.get_executor(), local_tcp(0));  // warm-up objects
  // Find the next descriptor number: the server refuses once accepted fds reach
  // limit - reserved.
  const int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  struct rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(probe + 60);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    tr::options opt;
    opt.reserved_fds = 30;
    tr::req_server srv(pool.io, local_tcp(), opt, echo_handler());
    ASSERT_TRUE(srv.start());
    std::vector<std::unique_ptr<raw_conn>> conns;
    int closed = 0;
    for (int i = 0; i < 20; ++i) {
      auto rc = std::make_unique<raw_conn>(srv.bound_port());
      if (rc->fd < 0) break;
      conns.push_back(std::move(rc));
    }
    // Each connection costs two descriptors here (client and server side): some were
    // refused, and at most (60 - 30) descriptors' worth accepted.
    for (auto& rc : conns) {
      const std::string f = wire::pack_frame(value::object({{"mid", "1"}}), value{{"a", 1}});
      if (!rc->write_all(f)) {
        ++closed;
        continue;
      }
      char buf[256];
      auto n = ::recv(rc->fd, buf, sizeof buf, 0);
      if (n <= 0) ++closed;
    }
    EXPECT_GT(closed, 0);
    EXPECT_LT(srv.connection_count(), conns.size());
    // Free the descriptors: the server accepts again.
    conns.clear();
    EXPECT_TRUE(eventually([&] { return srv.connection_count() == 0; }));
    raw_conn again(srv.bound_port());
    ASSERT_GE(again.fd, 0);
    ASSERT_TRUE(again.write_all(wire::pack_frame(value::object({{"mid", "1"}}), value{{"a", 1}})));
    char buf[256];
    EXPECT_GT(::recv(again.fd, buf, sizeof buf, 0), 0);
    srv.stop();
  }
  ::setrlimit(RLIMIT_NOFILE, &old);
}

}  // namespace
