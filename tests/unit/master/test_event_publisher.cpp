// master_event_pub.ipc (master/event_publisher.hpp): Salt's framing of an event, a live
// subscriber reads the hub's events in order, and a subscriber that does not read never
// blocks the hub: its events are shed (bounded queue) and counted.
#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"
#include "master/event_hub.hpp"
#include "master/event_publisher.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

namespace asio = boost::asio;
using wire::value;
using local = asio::local::stream_protocol;

std::string hex(std::string_view b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// Python: salt.utils.event.SaltEvent.pack("a/b", {"x": 1, "s": b"\xff"})
//   == b"a/b\n\n" + msgpack.dumps({"x": 1, "s": b"\xff"}, use_bin_type=True)
TEST(EventPublisher, pack_is_salt_events_pack) {
  value d = value::object();
  d["x"] = 1;
  d["s"] = wire::make_bin("\xff");
  EXPECT_EQ(hex(master::pack_salt_event("a/b", d)), hex("a/b\n\n") + "82a17801a173c401ff");
  auto back = master::unpack_salt_event(master::pack_salt_event("a/b", d));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->first, "a/b");
  EXPECT_EQ(back->second["x"], 1);
}

// frame_msg: {"head": {}, "body": <packed event>}.
TEST(EventPublisher, frame_is_salt_frame_msg) {
  auto f = master::frame_salt_event("t", value{{"k", "v"}});
  auto v = wire::unpack(f);
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->is_object());
  auto it = v->begin();
  EXPECT_EQ(it.key(), "head");
  EXPECT_EQ(it.value(), value::object());
  ++it;
  EXPECT_EQ(it.key(), "body");
  auto body = wire::as_bytes(it.value());
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, master::pack_salt_event("t", value{{"k", "v"}}));
}

struct live {
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{io.get_executor()};
  std::thread t;
  live() : t([this] { io.run(); }) {}
  ~live() {
    work.reset();
    io.stop();
    t.join();
  }
};

bool wait_for(const std::function<bool()>& f, std::chrono::milliseconds max = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + max;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

TEST(EventPublisher, subscriber_reads_events_in_order) {
  temp_dir tmp;
  master::event_hub hub;
  live l;
  master::event_publisher pub(l.io, {tmp.path / "master_event_pub.ipc", 100, 8}, hub);
  ASSERT_TRUE(pub.start());
  EXPECT_EQ(std::filesystem::status(tmp.path / "master_event_pub.ipc").permissions() &
                std::filesystem::perms::all,
            std::filesystem::perms(0660));
  asio::io_context cio;
  local::socket s(cio);
  s.connect(local::endpoint((tmp.path / "master_event_pub.ipc").string()));
  ASSERT_TRUE(wait_for([&] { return pub.subscribers() == 1; }));
  for (int i = 0; i < 3; ++i) hub.fire("t/" + std::to_string(i), value{{"i", i}});
  wire::frame_parser parser;
  std::vector<std::pair<std::string, value>> got;
  char buf[4096];
  while (got.size() < 3) {
    auto n = s.read_some(asio::buffer(buf));
    parser.feed(std::string_view(buf, n));
    for (;;) {
      auto f = parser.next();
      ASSERT_TRUE(f);
      if (!*f) break;
      auto ev = master::unpack_salt_event(*wire::as_bytes((*f)->body));
      ASSERT_TRUE(ev);
      got.push_back(*ev);
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].first, "t/" + std::to_string(i));
    EXPECT_EQ(got[i].second["i"], i);
    EXPECT_TRUE(got[i].second.contains("_stamp"));
  }
  s.close();
  EXPECT_TRUE(wait_for([&] { return pub.subscribers() == 0; }));
  pub.stop();
  EXPECT_FALSE(std::filesystem::exists(tmp.path / "master_event_pub.ipc"));
}

TEST(EventPublisher, stuck_subscriber_never_blocks_the_hub) {
  temp_dir tmp;
  master::event_hub hub;
  live l;
  master::event_publisher pub(l.io, {tmp.path / "master_event_pub.ipc", 4, 8}, hub);
  ASSERT_TRUE(pub.start());
  asio::io_context cio;
  local::socket s(cio);  // never reads
  s.connect(local::endpoint((tmp.path / "master_event_pub.ipc").string()));
  ASSERT_TRUE(wait_for([&] { return pub.subscribers() == 1; }));
  const value big{{"blob", std::string(256 * 1024, 'x')}};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) hub.fire("big", big);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(10));  // 50 MB never fit in a socket: the rest was shed
  EXPECT_TRUE(wait_for([&] { return pub.shed() > 0; }));
  pub.stop();
}

TEST(EventPublisher, a_second_master_on_the_same_socket_is_refused) {
  temp_dir tmp;
  master::event_hub hub;
  live l;
  master::event_publisher a(l.io, {tmp.path / "p.ipc", 4, 8}, hub);
  ASSERT_TRUE(a.start());
  master::event_publisher b(l.io, {tmp.path / "p.ipc", 4, 8}, hub);
  EXPECT_FALSE(b.start());
  a.stop();
}

}  // namespace
}  // namespace sylvite::test
