// Unit tests for the native ZMTP codec (core/transport/detail/zmtp_codec.hpp): the handshake a
// libzmq peer sends, split at every byte; the frames and commands that follow; what is
// refused. The servers built on it run the whole of test_transport_zmq.cpp against real
// libzmq sockets; the heartbeat test here uses a raw TCP peer that never answers PING.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <thread>

#include "core/transport/detail/zmtp.hpp"
#include "core/wire/msgpack.hpp"

namespace {

using namespace sylvite;
namespace zmtp = sylvite::transport::zmtp;
using wire::value;

// What a libzmq 4.3 peer sends first: its greeting (3.1, NULL) and its READY.
std::string peer_handshake(std::string_view socket_type, std::string_view mech = "NULL", unsigned char major = 3) {
  std::string g("\xff\0\0\0\0\0\0\0\x01\x7f", 10);
  g.push_back(static_cast<char>(major));
  g.push_back(1);
  std::string m(mech);
  m.resize(20, '\0');
  g += m;
  g.push_back(0);
  g.append(31, '\0');
  std::string props;
  props.push_back(11);
  props += "Socket-Type";
  props += std::string("\0\0\0", 3) + static_cast<char>(socket_type.size());
  props += socket_type;
  props.push_back(8);
  props += "Identity";
  props += std::string("\0\0\0\0", 4);
  return g + zmtp::command("READY", props);
}

std::string req_message(const value& body) { return zmtp::encode_message({"", wire::pack_payload(body)}); }

// Feeds everything (optionally one byte at a time) and collects the frames.
std::vector<wire::frame> run(zmtp::codec& c, std::string_view bytes, bool bytewise, error_code* err = nullptr) {
  std::vector<wire::frame> out;
  auto drain = [&]() -> bool {
    for (;;) {
      auto r = c.next();
      if (!r) {
        if (err) *err = r.error();
        return false;
      }
      if (!*r) return true;
      out.push_back(std::move(**r));
    }
  };
  if (bytewise) {
    for (char ch : bytes) {
      c.feed(std::string_view(&ch, 1));
      if (!drain()) break;
    }
  } else {
    c.feed(bytes);
    drain();
  }
  return out;
}

TEST(ZmtpHandshake, GreetingIsZmtp31NullFollowedByReady) {
  const std::string h = zmtp::handshake(zmtp::role::router);
  ASSERT_GT(h.size(), zmtp::greeting_size);
  EXPECT_EQ(static_cast<unsigned char>(h[0]), 0xff);
  EXPECT_EQ(static_cast<unsigned char>(h[9]), 0x7f);
  EXPECT_EQ(h[10], 3);
  EXPECT_EQ(h[11], 1);
  EXPECT_EQ(h.substr(12, 4), "NULL");
  EXPECT_EQ(h.substr(16, 16), std::string(16, '\0'));
  // Our greeting and READY read back by a router codec (a ROUTER peer is accepted there).
  zmtp::codec other(zmtp::role::router);
  auto frames = run(other, h, false);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].head["ready"], "ROUTER");
  EXPECT_NE(zmtp::handshake(zmtp::role::xpub).find("XPUB"), std::string::npos);
}

TEST(ZmtpCodec, RequestSplitAtEveryByteIsDecoded) {
  for (bool bytewise : {false, true}) {
    zmtp::codec c(zmtp::role::router);
    EXPECT_EQ(c.take_output(), zmtp::handshake(zmtp::role::router));  // sent on accept
    EXPECT_TRUE(c.take_output().empty());
    const value body{{"enc", "clear"}, {"load", {{"cmd", "_auth"}}}};
    const std::string big(300, 'x');  // a long (8-byte size) frame
    const value body2{{"enc", "aes"}, {"load", wire::make_bin(big)}};
    auto frames = run(c, peer_handshake("REQ") + req_message(body) + req_message(body2), bytewise);
    ASSERT_EQ(frames.size(), 3u) << bytewise;
    EXPECT_EQ(frames[0].head["ready"], "REQ");
    EXPECT_TRUE(frames[1].head.empty());  // plain REQ envelope
    EXPECT_EQ(frames[1].body, body);
    EXPECT_EQ(wire::as_bytes(frames[2].body["load"]).value_or(""), big);
    EXPECT_FALSE(c.in_frame());
    EXPECT_EQ(c.buffered(), 0u);
  }
}

TEST(ZmtpCodec, EnvelopeBeforeTheDelimiterIsKept) {
  zmtp::codec c(zmtp::role::router);
  const std::string msg = zmtp::encode_message({"hop1", "hop2", "", wire::pack_payload(value{{"a", 1}})});
  auto frames = run(c, peer_handshake("DEALER") + msg, false);
  ASSERT_EQ(frames.size(), 2u);
  ASSERT_TRUE(frames[1].head.contains("envelope"));
  const auto& env = frames[1].head["envelope"];
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(wire::as_bytes(env[0]).value_or("?"), "hop1");
  EXPECT_EQ(wire::as_bytes(env[1]).value_or("?"), "hop2");
  EXPECT_EQ(wire::as_bytes(env[2]).value_or("?"), "");
}

TEST(ZmtpCodec, PingIsAnsweredWithPongAndItsContext) {
  zmtp::codec c(zmtp::role::router);
  (void)c.take_output();
  std::string ping_body("\x00\x64" "ctx-1234", 10);
  auto frames = run(c, peer_handshake("REQ") + zmtp::command("PING", ping_body), true);
  EXPECT_EQ(frames.size(), 1u);  // only READY: a PING is not a frame for the server
  EXPECT_EQ(c.take_output(), zmtp::command("PONG", "ctx-1234"));
}

// ---- client roles (zmtp_client.cpp): a REQ towards a ROUTER, a SUB towards a PUB ----

TEST(ZmtpClientCodec, ReqHandshakeRequestAndReply) {
  for (bool bytewise : {false, true}) {
    zmtp::codec c(zmtp::role::req);
    const std::string hs = c.take_output();
    EXPECT_EQ(hs, zmtp::handshake(zmtp::role::req));
    // What a ROUTER (ours) reads from us: READY of a REQ, then ["", payload].
    zmtp::codec router(zmtp::role::router);
    const value body{{"enc", "clear"}, {"load", {{"cmd", "_auth"}}}};
    auto seen = run(router, hs + zmtp::request(wire::pack_payload(body)), bytewise);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].head["ready"], "REQ");
    EXPECT_EQ(seen[1].body, body);
    // The reply as a libzmq ROUTER sends it back through a REQ: ["", payload].
    const value reply{{"ok", true}, {"big", std::string(400, 'r')}};
    auto frames = run(c, peer_handshake("ROUTER") + zmtp::encode_message({"", wire::pack_payload(reply)}), bytewise);
    ASSERT_EQ(frames.size(), 2u) << bytewise;
    EXPECT_EQ(frames[0].head["ready"], "ROUTER");
    EXPECT_TRUE(frames[1].head.empty());
    EXPECT_EQ(frames[1].body, reply);
  }
}

TEST(ZmtpClientCodec, ReqRefusesWrongPeersAndReplies) {
  struct tc {
    const char* what;
    std::string bytes;
  };
  const std::string ok = wire::pack_payload(value("ok"));
  for (const auto& t : std::vector<tc>{
           {"a SUB peer", peer_handshake("SUB")},
           {"a DEALER peer (not a REQ's)", peer_handshake("DEALER")},
           {"a reply without the delimiter", peer_handshake("ROUTER") + zmtp::encode_message({ok})},
           {"a reply with two payloads", peer_handshake("ROUTER") + zmtp::encode_message({"", ok, ok})},
           {"a reply that is not msgpack", peer_handshake("ROUTER") + zmtp::encode_message({"", "\xc1"})},
       }) {
    zmtp::codec c(zmtp::role::req);
    error_code ec;
    run(c, t.bytes, false, &ec);
    EXPECT_TRUE(ec) << t.what;
    auto again = c.next();  // poisoned: stays refused
    EXPECT_FALSE(again) << t.what;
  }
  zmtp::codec ok_rep(zmtp::role::req);
  error_code ec;
  auto frames = run(ok_rep, peer_handshake("REP") + zmtp::encode_message({"", ok}), false, &ec);
  EXPECT_FALSE(ec);
  ASSERT_EQ(frames.size(), 2u);  // a REP peer is fine
  EXPECT_EQ(frames[1].body, "ok");
}

TEST(ZmtpClientCodec, SubReadsPublishesTopicsAndIgnoresMalformed) {
  for (bool bytewise : {false, true}) {
    zmtp::codec c(zmtp::role::sub);
    EXPECT_NE(c.take_output().find("SUB"), std::string::npos);
    const std::string p1 = wire::pack_payload(value{{"enc", "aes"}, {"load", wire::make_bin("one")}});
    const std::string p2 = wire::pack_payload(value{{"enc", "aes"}, {"load", wire::make_bin(std::string(1000, 'z'))}});
    std::string in = peer_handshake("PUB");
    in += zmtp::encode_message({p1});
    in += zmtp::command("PING", std::string("\x00\x00", 2));
    in += zmtp::encode_message({"broadcast", p2});
    in += zmtp::encode_message({"a", "b", "c"});
    in += zmtp::encode_message({p1});
    error_code ec;
    auto frames = run(c, in, bytewise, &ec);
    EXPECT_FALSE(ec) << ec.message();
    ASSERT_EQ(frames.size(), 5u) << bytewise;
    EXPECT_EQ(frames[0].head["ready"], "PUB");
    EXPECT_EQ(wire::as_bytes(frames[1].body).value_or("?"), p1);
    EXPECT_FALSE(frames[1].head.contains("topic"));
    EXPECT_EQ(wire::get_text(frames[2].head, "topic").value_or("?"), "broadcast");
    EXPECT_EQ(wire::as_bytes(frames[2].body).value_or("?"), p2);
    EXPECT_TRUE(frames[3].head.contains("malformed"));  // three frames: not a Salt publish
    EXPECT_EQ(wire::as_bytes(frames[4].body).value_or("?"), p1);
    EXPECT_EQ(c.take_output(), zmtp::command("PONG", ""));
  }
  // An XPUB (ours) reads the SUB's subscription message.
  zmtp::codec xpub(zmtp::role::xpub);
  auto subs = run(xpub, zmtp::handshake(zmtp::role::sub) + zmtp::subscribe("broadcast"), false);
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].head["ready"], "SUB");
  EXPECT_EQ(subs[1].head["sub"], true);
  EXPECT_EQ(wire::as_bytes(subs[1].body).value_or("?"), "broadcast");
  // A SUB talks to PUB/XPUB only.
  zmtp::codec wrong(zmtp::role::sub);
  error_code ec;
  run(wrong, peer_handshake("ROUTER"), false, &ec);
  EXPECT_TRUE(ec);
}

TEST(ZmtpCodec, RefusesWhatIsNotZmtp3Null) {
  struct tc {
    const char* what;
    std::string bytes;
  };
  const std::vector<tc> cases = {
      {"HTTP", "GET / HTTP/1.1\r\n"},
      {"ZMTP 1.0 (no 0x7f)", std::string("\xff\0\0\0\0\0\0\0\x01\x00", 10)},
      {"ZMTP 2.0", peer_handshake("REQ", "NULL", 1)},
      {"CURVE", peer_handshake("REQ", "CURVE")},
      {"PUB peer on a ROUTER", peer_handshake("PUB")},
      {"message before READY", peer_handshake("REQ").substr(0, 64) + zmtp::encode_message({"", "x"})},
      {"ERROR command", peer_handshake("REQ") + zmtp::command("ERROR", std::string("\x03" "bad", 4))},
      {"reserved flag bits", peer_handshake("REQ") + std::string("\x08\x01x", 3)},
      {"DEALER without delimiter", peer_handshake("DEALER") + zmtp::encode_message({wire::pack_payload(value(1))})},
      {"two frames after the delimiter", peer_handshake("REQ") + zmtp::encode_message({"", "\x01", "\x02"})},
      {"not msgpack", peer_handshake("REQ") + zmtp::encode_message({"", "\xc1"})},
      {"command inside a message",
       peer_handshake("REQ") + std::string("\x01\x00", 2) + zmtp::command("PING", std::string("\0\0", 2))},
      {"command over 4096 bytes", peer_handshake("REQ") + zmtp::command("X", std::string(5000, 'a'))},
  };
  for (const auto& t : cases) {
    zmtp::codec c(zmtp::role::router);
    error_code ec;
    auto frames = run(c, t.bytes, false, &ec);
    EXPECT_TRUE(ec) << t.what;
    // Poisoned: more input changes nothing.
    c.feed(req_message(value(1)));
    EXPECT_FALSE(c.next()) << t.what;
  }
}

TEST(ZmtpCodec, OversizedMessageIsRefusedOnItsHeader) {
  zmtp::codec c(zmtp::role::router);
  wire::limits lim;
  lim.max_bytes = 1000;
  c.set_limits(lim);
  auto frames = run(c, peer_handshake("REQ"), false);
  ASSERT_EQ(frames.size(), 1u);
  // A long frame header announcing 1 MB: refused before any of its bytes.
  std::string hdr("\x01\x00", 2);  // the delimiter
  hdr += std::string("\x02\0\0\0\0\0\x10\0\0", 9);
  c.feed(hdr);
  auto r = c.next();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), wire::make_error_code(wire::errc::too_large));
}

TEST(ZmtpCodec, DecodedPayloadLimitsApply) {
  zmtp::codec c(zmtp::role::router);
  wire::limits lim;
  lim.max_nodes = 10;
  c.set_limits(lim);
  value many = value::array();
  for (int i = 0; i < 50; ++i) many.push_back(i);
  error_code ec;
  auto frames = run(c, peer_handshake("REQ") + req_message(many), false, &ec);
  EXPECT_EQ(frames.size(), 1u);
  EXPECT_TRUE(ec);
}

TEST(ZmtpCodec, SubscriptionsAsMessagesAndAsCommands) {
  zmtp::codec c(zmtp::role::xpub);
  const std::string in = peer_handshake("SUB") + zmtp::encode_message({std::string("\x01") + "broadcast"}) +
                         zmtp::command("SUBSCRIBE", "abc") + zmtp::command("CANCEL", "abc") +
                         zmtp::encode_message({std::string("\x00", 1) + "broadcast"}) +
                         zmtp::encode_message({"\x05junk"});  // neither: ignored
  auto frames = run(c, in, true);
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_EQ(frames[0].head["ready"], "SUB");
  const std::vector<std::pair<bool, std::string>> want = {
      {true, "broadcast"}, {true, "abc"}, {false, "abc"}, {false, "broadcast"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(frames[i + 1].head["sub"].get<bool>(), want[i].first) << i;
    EXPECT_EQ(wire::as_bytes(frames[i + 1].body).value_or("?"), want[i].second) << i;
  }
  // A REQ peer on the publish port is refused.
  zmtp::codec p(zmtp::role::xpub);
  error_code ec;
  run(p, peer_handshake("REQ"), false, &ec);
  EXPECT_TRUE(ec);
}

TEST(ZmtpCodec, MemoryIsPredictedAndReleased) {
  zmtp::codec c(zmtp::role::router);
  run(c, peer_handshake("REQ"), false);
  const std::string msg = req_message(value{{"load", wire::make_bin(std::string(100000, 'z'))}});
  const std::size_t half = msg.size() / 2;
  const std::size_t predicted = c.capacity_after(half);
  c.feed(std::string_view(msg).substr(0, half));
  EXPECT_EQ(c.capacity(), predicted);
  EXPECT_TRUE(c.in_frame());
  ASSERT_TRUE(c.next());
  c.feed(std::string_view(msg).substr(half));
  auto r = c.next();
  ASSERT_TRUE(r && *r);
  EXPECT_FALSE(c.in_frame());
  c.release_memory();
  EXPECT_LT(c.capacity(), 64u);  // the empty string's inline buffer only
}

// ---- the heartbeat, with a real server and a raw TCP peer ----

struct io_thread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::thread t{[this] { io.run(); }};
  ~io_thread() {
    guard.reset();
    io.stop();
    t.join();
  }
};

int connect_raw(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// Reads until the peer closes (true) or the deadline passes (false); collects the bytes.
bool read_until_closed(int fd, std::chrono::milliseconds within, std::string* got) {
  const auto end = std::chrono::steady_clock::now() + within;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
    got->append(buf, static_cast<std::size_t>(n));
  }
}

TEST(ZmtpServer, UnansweredPingsCloseTheConnectionAnsweredOnesKeepIt) {
  io_thread io;
  zmtp::heartbeat hb{100, 300};
  zmtp::router_server srv(io.io, transport::endpoint{"127.0.0.1", 0, {}}, {}, hb,
                          [](value, std::shared_ptr<transport::responder> r) { r->reply(value("ok")); });
  ASSERT_TRUE(srv.start());
  // A peer that completes the handshake and then never answers.
  const int mute = connect_raw(srv.bound_port());
  ASSERT_GE(mute, 0);
  ASSERT_EQ(::send(mute, peer_handshake("REQ").data(), peer_handshake("REQ").size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(peer_handshake("REQ").size()));
  // A peer that answers every PING with a PONG (what libzmq does by itself).
  const int alive = connect_raw(srv.bound_port());
  ASSERT_GE(alive, 0);
  ASSERT_GT(::send(alive, peer_handshake("REQ").data(), peer_handshake("REQ").size(), MSG_NOSIGNAL), 0);
  // The answering peer runs beside the mute one, for 1.5 s.
  std::size_t pongs = 0;
  bool closed = false;
  std::thread answering([&] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    std::string seen;
    const std::string ping = zmtp::ping(3);  // TTL: 300 ms in deciseconds
    while (std::chrono::steady_clock::now() < end && !closed) {
      pollfd p{alive, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(alive, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      seen.append(buf, static_cast<std::size_t>(n));
      for (auto pos = seen.find(ping); pos != std::string::npos; pos = seen.find(ping)) {
        seen.erase(0, pos + ping.size());
        const std::string pong = zmtp::command("PONG", "");
        if (::send(alive, pong.data(), pong.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(pong.size())) ++pongs;
      }
    }
  });
  std::string mute_got;
  EXPECT_TRUE(read_until_closed(mute, std::chrono::milliseconds(5000), &mute_got));
  EXPECT_NE(mute_got.find(zmtp::ping(3)), std::string::npos);
  answering.join();
  EXPECT_FALSE(closed);
  EXPECT_GE(pongs, 3u);
  EXPECT_EQ(srv.connection_count(), 1u);
  ::close(mute);
  ::close(alive);
  srv.stop();
}

}  // namespace
