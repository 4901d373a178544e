// Unit tests for the wire limits that protect a master before authentication
// (docs/security.md 1): limits::max_nodes in the scanner and the frame parser, a
// declared container length refused at once, limits changed in the middle of a frame,
// and the decoder's maps without reserve (duplicates still resolved as in Python).
#include <gtest/gtest.h>

#include <string>

#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::wire {
namespace {

limits pre_auth(std::size_t bytes = 65536, std::size_t nodes = 1024, std::size_t depth = 16) {
  limits l;
  l.max_bytes = bytes;
  l.max_nodes = nodes;
  l.max_depth = depth;
  return l;
}

// {"head": {}, "body": <body bytes>} as raw bytes.
std::string raw_frame(const std::string& body) {
  std::string f = "\x82\xa4head\x80\xa4" "body";
  return f + body;
}

std::string array32_header(std::uint32_t n) {
  std::string h = "\xdd";
  for (int i = 3; i >= 0; --i) h.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return h;
}

TEST(WireLimits, DeclaredArrayOfEmptyArraysRefusedBeforeItsItems) {
  // The attack: a frame declaring 25 million empty arrays. Only the header has arrived;
  // the scan refuses at once (not "incomplete": nothing to wait for).
  const std::string start = raw_frame(array32_header(25'000'000) + std::string(64, '\x90'));
  object_scanner s(pre_auth(100u << 20));
  auto r = s.scan(start);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::too_large);
  // Without a node cap the same bytes are a valid prefix (the byte limit allows it).
  object_scanner unlimited(limits{});
  auto u = unlimited.scan(start);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error(), errc::incomplete);
}

TEST(WireLimits, NodeCapCountsEveryObjectExactly) {
  // {"head": {}, "body": [nil x n]}: 1 (frame) + 2 (head key, {}) + 1 (body key) +
  // 1 (array) + n nodes.
  auto frame_with = [](std::uint32_t n) {
    std::string b = "\xdc";
    b.push_back(static_cast<char>(n >> 8));
    b.push_back(static_cast<char>(n & 0xff));
    b += std::string(n, '\xc0');
    return raw_frame(b);
  };
  const std::string f = frame_with(300);
  const std::size_t nodes = 5 + 300;
  EXPECT_TRUE(scan_object(f, pre_auth(65536, nodes)));
  auto over = scan_object(f, pre_auth(65536, nodes - 1));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error(), errc::too_large);
  EXPECT_TRUE(unpack(f, pre_auth(65536, nodes)));
  EXPECT_FALSE(unpack(f, pre_auth(65536, nodes - 1)));
}

TEST(WireLimits, NestedArraysRefusedByDepth) {
  std::string body(40, '\x91');  // [[[[...]]]] 40 deep
  body.push_back('\xc0');
  auto r = scan_object(raw_frame(body), pre_auth());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::too_deep);
}

TEST(WireLimits, FrameParserRefusesPreAuthFloodAtOnce) {
  frame_parser p(pre_auth());
  p.feed(raw_frame(array32_header(25'000'000)));
  auto r = p.next();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), errc::too_large);
  // Poisoned: later input is dropped, the error stays.
  p.feed(std::string(1 << 16, '\x90'));
  EXPECT_EQ(p.buffered(), array32_header(1).size() + raw_frame("").size());
  EXPECT_FALSE(p.next());
}

TEST(WireLimits, LimitsLiftedInTheMiddleOfAFrame) {
  // A 200 KB frame arriving on a connection that authenticates while it arrives.
  const std::string big = pack_frame(value::object({{"mid", "x"}}), make_bin(std::string(200000, 'z')));
  {
    // Up to the body's key: the bin header (declaring 200000 bytes) has not arrived.
    const std::size_t cut = big.find("body") + 4;
    frame_parser p(pre_auth(65536));
    p.feed(std::string_view(big).substr(0, cut));
    ASSERT_TRUE(p.next());  // still waiting
    EXPECT_TRUE(p.in_frame());
    p.set_limits(pre_auth(100u << 20, static_cast<std::size_t>(-1), 64));
    p.feed(std::string_view(big).substr(cut));
    auto r = p.next();
    ASSERT_TRUE(r) << r.error().message();
    ASSERT_TRUE(r->has_value());
    EXPECT_EQ(as_bytes((*r)->body)->size(), 200000u);
    EXPECT_FALSE(p.in_frame());
  }
  {
    frame_parser p(pre_auth(65536));
    p.feed(std::string_view(big).substr(0, 30000));
    auto r = p.next();
    ASSERT_FALSE(r);  // the bin's declared length passes 64 KiB: refused before its bytes
    EXPECT_EQ(r.error(), errc::too_large);
  }
}

TEST(WireLimits, RealPreAuthFramesFitTheDefaults) {
  // A clear _auth (4096-bit key) and an AES envelope with a 40 KB load.
  value load = value::object();
  load["cmd"] = "_auth";
  load["id"] = "minion-with-a-rather-long-name.example.com";
  load["pub"] = std::string(800, 'P');
  load["token"] = make_bin(std::string(512, 't'));
  load["nonce"] = "0123456789abcdef0123456789abcdef";
  load["enc_algo"] = "OAEP-SHA1";
  load["sig_algo"] = "PKCS1v15-SHA1";
  const std::string a = pack_frame(value::object({{"mid", "m"}}), value::object({{"enc", "clear"}, {"load", load}, {"version", 3}}));
  const std::string b = pack_frame(value::object({{"mid", "m"}}),
                                   value::object({{"enc", "aes"}, {"load", make_bin(std::string(40000, 'c'))},
                                                  {"version", 3}, {"id", "m1"}, {"enc_algo", "OAEP-SHA1"},
                                                  {"sig_algo", "PKCS1v15-SHA1"}}));
  for (const auto& f : {a, b}) {
    frame_parser p(pre_auth(65536, 1024, 16));
    p.feed(f);
    auto r = p.next();
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_TRUE(r->has_value());
  }
}

TEST(WireLimits, BigMapDuplicatesWithoutReserve) {
  // 20 pairs (hash index path), key "k3" repeated at the end: last value, first position.
  std::string m = "\xde";
  m.push_back(0);
  m.push_back(21);
  for (int i = 0; i < 20; ++i) {
    const std::string k = "k" + std::to_string(i);
    m.push_back(static_cast<char>(0xa0 | k.size()));
    m += k;
    m.push_back(static_cast<char>(i));
  }
  m += "\xa2k3\x7f";
  auto v = unpack(m);
  ASSERT_TRUE(v) << v.error().message();
  ASSERT_EQ(v->size(), 20u);
  EXPECT_EQ((*v)["k3"], 127);
  EXPECT_EQ(v->items().begin().key(), "k0");
  auto it = v->begin();
  std::advance(it, 3);
  EXPECT_EQ(it.key(), "k3");
}

}  // namespace
}  // namespace sylvite::wire
