// Unit tests for core/wire/frame.hpp: pack_frame and the streaming frame_parser.
#include <gtest/gtest.h>

#include <random>

#include "core/wire/frame.hpp"
#include "wire_test_util.hpp"

namespace sylvite::wire {
namespace {

using test::hex;
using test::unhex;

value req_head(const std::string& mid) { return value::object({{"mid", mid}}); }

value req_body(int n) {
  value b = value::object();
  b["enc"] = "aes";
  b["load"] = make_bin(std::string(static_cast<std::size_t>(n), '\xab'));
  b["version"] = 3;
  b["id"] = "minion-" + std::to_string(n);
  return b;
}

// Everything the parser produces for this feed schedule (stops at the first error).
struct drain_result {
  std::vector<frame> frames;
  error_code ec;
};

void drain(frame_parser& p, drain_result& out) {
  for (;;) {
    auto r = p.next();
    if (!r) {
      out.ec = r.error();
      return;
    }
    if (!r->has_value()) return;
    out.frames.push_back(std::move(**r));
  }
}

TEST(WireFrame, PackFrameMatchesGenericPack) {
  const value head = req_head("1b4e28ba-2fa1-11d2-883f-0016d3cca427");
  const value body = req_body(10);
  value whole = value::object();
  whole["head"] = head;
  whole["body"] = body;
  EXPECT_EQ(hex(pack_frame(head, body)), hex(pack(whole, packing::frame)));
  // Publish frame: head {} and a bin body.
  EXPECT_EQ(hex(pack_frame(value::object(), make_bin("xy"))),
            hex(unhex("82"             // map(2)
                      "a4 68656164 80"  // "head": {}
                      "a4 626f6479 c4 02 7879")));  // "body": bin8(2) "xy"
}

TEST(WireFrame, SingleFrame) {
  frame_parser p;
  EXPECT_FALSE(p.next().value().has_value());  // nothing yet
  const std::string f = pack_frame(req_head("m1"), req_body(5));
  p.feed(f);
  EXPECT_EQ(p.buffered(), f.size());
  auto r = p.next();
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->head, req_head("m1"));
  EXPECT_EQ((*r)->body, req_body(5));
  EXPECT_EQ(p.buffered(), 0u);
  EXPECT_FALSE(p.next().value().has_value());
}

TEST(WireFrame, EverySplitPoint) {
  const std::string a = pack_frame(req_head("a"), req_body(40));
  const std::string b = pack_frame(value::object(), make_bin(std::string(300, 'q')));
  const std::string both = a + b;
  for (std::size_t i = 0; i <= both.size(); ++i) {
    frame_parser p;
    drain_result d;
    p.feed(std::string_view(both).substr(0, i));
    drain(p, d);
    p.feed(std::string_view(both).substr(i));
    drain(p, d);
    ASSERT_FALSE(d.ec) << i;
    ASSERT_EQ(d.frames.size(), 2u) << i;
    EXPECT_EQ(d.frames[0].body, req_body(40));
    EXPECT_EQ(d.frames[1].head, value::object());
    EXPECT_EQ(d.frames[1].body, make_bin(std::string(300, 'q')));
    EXPECT_EQ(p.buffered(), 0u);
  }
}

TEST(WireFrame, OneByteAtATime) {
  std::string stream;
  for (int i = 0; i < 5; ++i) stream += pack_frame(req_head("m" + std::to_string(i)), req_body(i * 70));
  frame_parser p;
  drain_result d;
  for (char c : stream) {
    p.feed(std::string_view(&c, 1));
    drain(p, d);
  }
  ASSERT_FALSE(d.ec);
  ASSERT_EQ(d.frames.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(d.frames[static_cast<std::size_t>(i)].head, req_head("m" + std::to_string(i)));
    EXPECT_EQ(d.frames[static_cast<std::size_t>(i)].body, req_body(i * 70));
  }
}

TEST(WireFrame, BackToBackInOneFeed) {
  std::string stream;
  for (int i = 0; i < 3; ++i) stream += pack_frame(req_head(std::to_string(i)), i);
  stream += pack_frame(value::object(), "partial");
  frame_parser p;
  p.feed(std::string_view(stream).substr(0, stream.size() - 3));
  drain_result d;
  drain(p, d);
  ASSERT_FALSE(d.ec);
  ASSERT_EQ(d.frames.size(), 3u);
  EXPECT_EQ(d.frames[2].body, 2);
  EXPECT_GT(p.buffered(), 0u);
  p.feed(std::string_view(stream).substr(stream.size() - 3));
  drain(p, d);
  ASSERT_EQ(d.frames.size(), 4u);
  EXPECT_EQ(d.frames[3].body, "partial");
}

TEST(WireFrame, RandomChunks) {
  std::mt19937 rng(12345);
  std::string stream;
  std::vector<value> bodies;
  for (int i = 0; i < 200; ++i) {
    bodies.push_back(req_body(static_cast<int>(rng() % 3000)));
    stream += pack_frame(req_head(std::to_string(i)), bodies.back());
  }
  frame_parser p;
  drain_result d;
  for (std::size_t pos = 0; pos < stream.size();) {
    const std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + rng() % 5000);
    p.feed(std::string_view(stream).substr(pos, n));
    pos += n;
    drain(p, d);
  }
  ASSERT_FALSE(d.ec);
  ASSERT_EQ(d.frames.size(), bodies.size());
  for (std::size_t i = 0; i < bodies.size(); ++i) EXPECT_EQ(d.frames[i].body, bodies[i]);
}

TEST(WireFrame, BigFrameInSmallReadsIsLinear) {
  // 5 MB bin body in 4 KB reads (a pillar or file-server reply), then a frame with a
  // million small items (resumable scan matters here). Bounded by the test timeout only:
  // a quadratic rescan would take minutes.
  value many = value::array();
  for (int i = 0; i < 1'000'000; ++i) many.push_back(i & 0x7f);
  const std::string stream =
      pack_frame(req_head("big"), make_bin(std::string(5u << 20, 'z'))) + pack_frame(req_head("many"), many);
  frame_parser p;
  drain_result d;
  for (std::size_t pos = 0; pos < stream.size(); pos += 4096) {
    p.feed(std::string_view(stream).substr(pos, 4096));
    drain(p, d);
  }
  ASSERT_FALSE(d.ec);
  ASSERT_EQ(d.frames.size(), 2u);
  EXPECT_EQ(as_bytes(d.frames[0].body)->size(), 5u << 20);
  EXPECT_EQ(d.frames[1].body.size(), 1'000'000u);
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(WireFrame, GarbageThenPoisoned) {
  frame_parser p;
  p.feed(unhex("c1 00 00"));
  auto r = p.next();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::malformed);
  // Poisoned: valid data afterwards changes nothing.
  p.feed(pack_frame(value::object(), 1));
  auto again = p.next();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error(), errc::malformed);
  EXPECT_EQ(p.next().error(), errc::malformed);
}

TEST(WireFrame, ValidFrameThenGarbage) {
  frame_parser p;
  p.feed(pack_frame(value::object(), 1) + unhex("c1"));
  auto first = p.next();
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ(p.next().error(), errc::malformed);
}

error_code frame_error(const std::string& bytes) {
  frame_parser p;
  p.feed(bytes);
  auto r = p.next();
  if (r) return {};
  return r.error();
}

TEST(WireFrame, BadFrames) {
  value no_head = value::object({{"body", 1}});
  value no_body = value::object({{"head", value::object()}});
  value head_not_map = value::object({{"head", "x"}, {"body", 1}});
  EXPECT_EQ(frame_error(pack(no_head, packing::frame)), errc::bad_frame);
  EXPECT_EQ(frame_error(pack(no_body, packing::frame)), errc::bad_frame);
  EXPECT_EQ(frame_error(pack(head_not_map, packing::frame)), errc::bad_frame);
  EXPECT_EQ(frame_error(pack(value::array({1, 2}), packing::frame)), errc::bad_frame);
  EXPECT_EQ(frame_error(unhex("01")), errc::bad_frame);              // a plain int
  EXPECT_EQ(frame_error(unhex("81 80 01")), errc::bad_key);          // map key
  // bin keys "head"/"body" (old Salt, raw=True) are fine; extra keys are ignored.
  EXPECT_FALSE(frame_error(unhex("83 c4 04 68656164 80 c4 04 626f6479 c0 a1 78 01")));
  // Poisoned after bad_frame too.
  frame_parser p;
  p.feed(pack(no_body, packing::frame) + pack_frame(value::object(), 1));
  EXPECT_EQ(p.next().error(), errc::bad_frame);
  EXPECT_EQ(p.next().error(), errc::bad_frame);
}

TEST(WireFrame, MaxFrameSize) {
  const std::string f = pack_frame(value::object(), make_bin(std::string(100, 'x')));
  {  // exactly at the limit: fine
    frame_parser p(f.size());
    p.feed(f);
    auto r = p.next();
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->has_value());
  }
  {  // one byte over: refused as soon as the bin8 header declares its length
    frame_parser p(f.size() - 1);
    p.feed(f.substr(0, 16));  // 82 a4 head 80 a4 body c4 64 + a few bytes
    EXPECT_EQ(p.next().error(), errc::too_large);
  }
  {  // declared length far over the limit, only the header received
    frame_parser p(1u << 20);
    p.feed(unhex("82 a4 68656164 80 a4 626f6479 c6 7fffffff"));
    EXPECT_EQ(p.next().error(), errc::too_large);
  }
  {  // no big declared length, but the buffered part of the frame passes the limit
    frame_parser p(1000);
    p.feed(unhex("82 a4 68656164 80 a4 626f6479 dc 01f4"));  // array16 of 500 items
    const std::string item = unhex("aa 61616161616161616161");  // 11-byte str
    std::size_t fed = 15;
    for (;;) {
      p.feed(item);
      fed += item.size();
      auto r = p.next();
      if (fed <= 1000) {
        ASSERT_TRUE(r) << fed;
        EXPECT_FALSE(r->has_value());
      } else {
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error(), errc::too_large);
        break;
      }
    }
  }
}

TEST(WireFrame, DepthBombIsRefused) {
  frame_parser p;
  p.feed(unhex("82 a4 68656164 80 a4 626f6479") + std::string(100000, '\x91'));
  EXPECT_EQ(p.next().error(), errc::too_deep);
}

TEST(WireFrame, BufferCompactionKeepsWorking) {
  // Many frames fed with a partial one always pending: consumed bytes are dropped
  // without losing the pending part.
  const std::string f = pack_frame(req_head("x"), req_body(1000));
  frame_parser p;
  drain_result d;
  std::string stream;
  for (int i = 0; i < 100; ++i) stream += f;
  for (std::size_t pos = 0; pos < stream.size(); pos += 1500) {
    p.feed(std::string_view(stream).substr(pos, 1500));
    drain(p, d);
    EXPECT_LT(p.buffered(), f.size());
  }
  ASSERT_FALSE(d.ec);
  EXPECT_EQ(d.frames.size(), 100u);
  EXPECT_EQ(p.buffered(), 0u);
}

}  // namespace
}  // namespace sylvite::wire
