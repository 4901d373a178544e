// peer_messages: every peer-bus message encodes to the bytes earlier versions built by hand
// (golden msgpack from an independent encoder, Python, use_bin_type=True; and the maps
// built the old way), decodes back to itself, and decode refuses unknown types and
// malformed fields with a reason. The lane table says where each type runs.
#include <gtest/gtest.h>

#include <string>

#include "cluster/peer_messages.hpp"
#include "core/wire/msgpack.hpp"

using namespace sylvite;
using namespace sylvite::cluster;
using wire::value;

namespace {
std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}
std::string packed(const value& v) { return hex(wire::pack(v, wire::packing::frame)); }

struct golden {
  const char* name;
  peer_msg msg;
  const char* type;
  const char* hex;  // body, msgpack (frame packing: text = str, bytes = bin)
};

std::vector<golden> goldens() {
  return {
      // 83 map(3): a3 "jid" a8 "20240101", a5 "frame" c4 03 bin(820102), a7 "targets" 92 ["m1","m2"]
      {"publish targets", msg::publish{"20240101", std::string("\x82\x01\x02", 3), std::vector<std::string>{"m1", "m2"}},
       "publish", "83a36a6964a83230323430313031a56672616d65c403820102a77461726765747392a26d31a26d32"},
      // targets nil (c0): every minion
      {"publish all", msg::publish{"20240101", std::string("\x82\x01\x02", 3), std::nullopt}, "publish",
       "83a36a6964a83230323430313031a56672616d65c403820102a774617267657473c0"},
      // {jid, id, load: {ret: true}}
      {"return", msg::ret{"j1", "m1", value{{"ret", true}}}, "return", "83a36a6964a26a31a26964a26d31a46c6f616481a3726574c3"},
      // {why, key}
      {"aes", msg::aes{"key delete", std::string("K=")}, "aes", "82a3776879aa6b65792064656c657465a36b6579a24b3d"},
      // {why, key, gen: 3}
      {"aes gen", msg::aes{"w", std::string("K="), 3}, "aes", "83a3776879a177a36b6579a24b3da367656e03"},
      // {why}
      {"aes-rotate", msg::aes_rotate{"drop file"}, "aes-rotate", "81a3776879a964726f702066696c65"},
      // {act, ids, local: false (c2), pubs: {m1: PEM}}
      {"key accept", msg::key_event{"accept", {"m1"}, false, id_pems{{"m1", "PEM"}}}, "key",
       "84a3616374a6616363657074a369647391a26d31a56c6f63616cc2a47075627381a26d31a350454d"},
      // {act, ids, local: true (c3)}, no pubs
      {"key delete", msg::key_event{"delete", {"m1", "m2"}, true, std::nullopt}, "key",
       "83a3616374a664656c657465a369647392a26d31a26d32a56c6f63616cc3"},
      // {pub, sealed: {b: bin "box"}}
      {"cluster-key", msg::cluster_key{"PUB", {{"b", wire::make_bin("box")}}}, "cluster-key",
       "82a3707562a3505542a67365616c656481a162c403626f78"},
      // {for, seq: 7 (positive fixint)}
      {"key-sync", msg::key_sync{std::string("j1"), 7}, "key-sync", "82a3666f72a26a31a373657107"},
      // {accepted: {m1: P1}, rejected: {}, for, seq}
      {"keys", msg::keys{{{"m1", "P1"}}, {}, std::string("j1"), 7}, "keys",
       "84a8616363657074656481a26d31a25031a872656a656374656480a3666f72a26a31a373657107"},
      // {accepted: {}, rejected: {}, aes: "K=", aes_gen: 4}
      {"keys aes", msg::keys{{}, {}, std::nullopt, std::nullopt, std::string("K="), 4}, "keys",
       "84a8616363657074656480a872656a656374656480a3616573a24b3da76165735f67656e04"},
      // {accepted: {m1: P1}, rejected: {}, for, seq, share: true} (a member on the share)
      {"keys share", msg::keys{{{"m1", "P1"}}, {}, std::string("j1"), 7, std::nullopt, std::nullopt, true}, "keys",
       "85a8616363657074656481a26d31a25031a872656a656374656480a3666f72a26a31a373657107a57368617265c3"},
      // ... pending: [m2, m3] (ids in minions_pre/ on the share)
      {"keys share pending",
       msg::keys{{{"m1", "P1"}}, {}, std::string("j1"), 7, std::nullopt, std::nullopt, true, {"m2", "m3"}}, "keys",
       "86a8616363657074656481a26d31a25031a872656a656374656480a3666f72a26a31a373657107a57368617265c3a770656e64696e6792a2"
       "6d32a26d33"},
      // {accepted: {}, rejected: {m3: P3}} (a snapshot not asked for)
      {"keys plain", msg::keys{{}, {{"m3", "P3"}}, std::nullopt, std::nullopt}, "keys",
       "82a8616363657074656480a872656a656374656481a26d33a25033"},
      // {id, pub, addr, local: true}
      {"join", msg::join{"j", "PUB", "10.0.0.9:4520", true}, "join",
       "84a26964a16aa3707562a3505542a461646472ad31302e302e302e393a34353230a56c6f63616cc3"},
      // {id}
      {"leave", msg::leave{"x"}, "leave", "81a26964a178"},
      // {tag, data: {x: 1}, origin}
      {"event", msg::event{"a/b", value{{"x", 1}}, "m1", std::nullopt}, "event",
       "83a3746167a3612f62a46461746181a17801a66f726967696ea26d31"},
      // ... eid "b-1"
      {"event eid", msg::event{"a/b", value{{"x", 1}}, "m1", std::string("b-1")}, "event",
       "84a3746167a3612f62a46461746181a17801a66f726967696ea26d31a3656964a3622d31"},
      // {full: false, minions: {m1: [true, 5]}, aes: "k"}
      {"presence", msg::presence{false, {{"m1", true, 5}}, std::string("k")}, "presence",
       "83a466756c6cc2a76d696e696f6e7381a26d3192c305a3616573a16b"},
  };
}
}  // namespace

TEST(PeerMessages, encode_pins_the_wire_bytes) {
  for (const auto& g : goldens()) {
    auto e = encode(g.msg);
    EXPECT_EQ(e.type, g.type) << g.name;
    EXPECT_EQ(packed(e.body), g.hex) << g.name;
  }
}

TEST(PeerMessages, decode_round_trips) {
  for (const auto& g : goldens()) {
    auto e = encode(g.msg);
    std::string why;
    auto d = decode(e, why);
    ASSERT_TRUE(d) << g.name << ": " << why;
    EXPECT_EQ(d->index(), g.msg.index()) << g.name;
    EXPECT_EQ(packed(encode(*d).body), g.hex) << g.name;
    // And from the bytes (a peer's message arrives as msgpack).
    auto v = wire::unpack(wire::pack(e.body, wire::packing::frame));
    ASSERT_TRUE(v) << g.name;
    auto d2 = decode(g.type, *v, why);
    ASSERT_TRUE(d2) << g.name << ": " << why;
    EXPECT_EQ(packed(encode(*d2).body), g.hex) << g.name;
  }
}

// The maps earlier versions built by hand (master/*.cpp, cluster/peer_bus.cpp before the
// typed messages), byte for byte.
TEST(PeerMessages, same_bytes_as_the_hand_built_maps) {
  const std::string frame("\x82\xa4head\xc0", 7);
  const std::vector<std::string> minions{"m1", "m2"};
  {  // job_service.cpp (publish)
    value m = value::object();
    m["jid"] = "j";
    m["frame"] = wire::make_bin(frame);
    m["targets"] = value(minions);
    EXPECT_EQ(packed(encode(msg::publish{"j", frame, minions}).body), packed(m));
    m["targets"] = value(nullptr);
    EXPECT_EQ(packed(encode(msg::publish{"j", frame, std::nullopt}).body), packed(m));
  }
  {  // job_service.cpp (record_return)
    const value load{{"fun", "test.ping"}, {"return", true}, {"retcode", 0}};
    value m = value::object();
    m["jid"] = "j";
    m["id"] = "m1";
    m["load"] = load;
    EXPECT_EQ(packed(encode(msg::ret{"j", "m1", load}).body), packed(m));
  }
  EXPECT_EQ(packed(encode(msg::aes{"w", std::string("k")}).body), packed(value{{"why", "w"}, {"key", "k"}}));
  EXPECT_EQ(packed(encode(msg::aes_rotate{"w"}).body), packed(value{{"why", "w"}}));
  {  // master.cpp key_event
    value v = value::array();
    for (const auto& id : minions) v.push_back(id);
    value m{{"act", "accept"}, {"ids", v}, {"local", true}};
    value pubs = value::object();
    pubs["m1"] = "P1";
    pubs["m2"] = "P2";
    m["pubs"] = pubs;
    EXPECT_EQ(packed(encode(msg::key_event{"accept", minions, true, id_pems{{"m1", "P1"}, {"m2", "P2"}}}).body),
              packed(m));
  }
  {  // cli_service.cpp cluster.rotate_key
    value sealed = value::object();
    sealed["b"] = value{{"key", wire::make_bin("k")}, {"data", wire::make_bin("d")}};
    sealed["a"] = wire::make_bin("z");
    msg::cluster_key ck{"PUB", {{"b", sealed["b"]}, {"a", sealed["a"]}}};
    EXPECT_EQ(packed(encode(ck).body), packed(value{{"pub", "PUB"}, {"sealed", sealed}}));
  }
  EXPECT_EQ(packed(encode(msg::key_sync{std::string("me"), std::int64_t{12345}}).body),
            packed(value{{"for", "me"}, {"seq", std::int64_t{12345}}}));
  {  // master.cpp key_snapshot + the key-sync answer
    value snap = value::object();
    snap["accepted"] = value{{"m1", "P1"}, {"m2", "P2"}};
    snap["rejected"] = value::object();
    snap["for"] = "j1";
    snap["seq"] = std::int64_t{300};
    EXPECT_EQ(packed(encode(msg::keys{{{"m1", "P1"}, {"m2", "P2"}}, {}, std::string("j1"), 300}).body), packed(snap));
  }
  {  // peer_bus.cpp join note
    value note = value::object();
    note["id"] = "j";
    note["pub"] = "PUB";
    note["addr"] = "h:1";
    note["local"] = false;
    EXPECT_EQ(packed(encode(msg::join{"j", "PUB", "h:1", false}).body), packed(note));
  }
  EXPECT_EQ(packed(encode(msg::leave{"x"}).body), packed(value{{"id", "x"}}));
}

// Text fields accept str or bin (wire/value.hpp); optional fields may be absent.
TEST(PeerMessages, decode_accepts_what_earlier_versions_accepted) {
  std::string why;
  auto p = decode("publish", value{{"jid", wire::make_bin("j")}, {"frame", "f"}}, why);  // no targets: all
  ASSERT_TRUE(p) << why;
  EXPECT_FALSE(std::get<msg::publish>(*p).targets);
  EXPECT_EQ(std::get<msg::publish>(*p).frame, "f");
  auto a = decode("aes", value::object(), why);  // a reload without the key
  ASSERT_TRUE(a) << why;
  EXPECT_FALSE(std::get<msg::aes>(*a).key);
  auto ks = decode("key-sync", value::object(), why);
  ASSERT_TRUE(ks) << why;
  EXPECT_FALSE(std::get<msg::key_sync>(*ks).asker);
  auto k = decode("key", value{{"act", "delete"}, {"ids", value::array({"m1"})}}, why);  // no local, no pubs
  ASSERT_TRUE(k) << why;
  EXPECT_FALSE(std::get<msg::key_event>(*k).local);
  EXPECT_FALSE(std::get<msg::key_event>(*k).pubs);
  auto snap = decode("keys", value::object(), why);
  ASSERT_TRUE(snap) << why;
  EXPECT_TRUE(std::get<msg::keys>(*snap).accepted.empty());
  auto ck = decode("cluster-key", value{{"pub", "P"}, {"sealed", value{{"a", 1}, {"b", 2}}}}, why);
  ASSERT_TRUE(ck) << why;
  ASSERT_TRUE(std::get<msg::cluster_key>(*ck).sealed_for("b"));
  EXPECT_EQ(*std::get<msg::cluster_key>(*ck).sealed_for("b"), 2);
  EXPECT_FALSE(std::get<msg::cluster_key>(*ck).sealed_for("c"));
  auto j = decode("join", value{{"id", "j"}, {"pub", "P"}}, why);  // no addr
  ASSERT_TRUE(j) << why;
  EXPECT_EQ(std::get<msg::join>(*j).addr, "");
}

TEST(PeerMessages, decode_refuses_with_a_reason) {
  struct bad {
    const char* type;
    value body;
    const char* why;
  };
  const std::vector<bad> cases = {
      {"hello", value::object(), "unknown message type"},
      {"", value::object(), "unknown message type"},
      {"Publish", value::object(), "unknown message type"},
      {"publish", value::array(), "body is not a map"},
      {"leave", value("x"), "body is not a map"},
      {"publish", value{{"frame", "f"}}, "no jid"},
      {"publish", value{{"jid", "j"}}, "no frame"},
      {"publish", value{{"jid", 5}, {"frame", "f"}}, "jid is not text"},
      {"publish", value{{"jid", "j"}, {"frame", 1}}, "no frame"},
      {"publish", value{{"jid", "j"}, {"frame", "f"}, {"targets", "m1"}}, "targets is not a list"},
      {"publish", value{{"jid", "j"}, {"frame", "f"}, {"targets", value::array({"m1", 2})}},
       "targets holds a non-text entry"},
      {"return", value{{"jid", "j"}, {"id", "m1"}}, "no load"},
      {"return", value{{"jid", "j"}, {"load", 1}}, "no id"},
      {"return", value{{"jid", "j"}, {"id", "../x"}, {"load", 1}}, "invalid minion id"},
      {"return", value{{"jid", "j"}, {"id", ""}, {"load", 1}}, "invalid minion id"},
      {"aes", value{{"key", 1}}, "key is not text"},
      {"aes", value{{"key", "K="}, {"gen", "3"}}, "gen is not an integer"},
      {"aes", value{{"key", "K="}, {"gen", -1}}, "gen is negative"},
      {"aes-rotate", value{{"why", value::array()}}, "why is not text"},
      {"key", value{{"ids", value::array()}}, "no act"},
      {"key", value{{"act", "accept"}}, "no ids"},
      {"key", value{{"act", "accept"}, {"ids", "m1"}}, "ids is not a list"},
      {"key", value{{"act", "accept"}, {"ids", value::array()}, {"local", 1}}, "local is not a bool"},
      {"key", value{{"act", "accept"}, {"ids", value::array()}, {"pubs", value::array()}}, "pubs is not a map"},
      {"key", value{{"act", "accept"}, {"ids", value::array()}, {"pubs", value{{"m1", 3}}}}, "pubs[m1] is not text"},
      {"cluster-key", value{{"sealed", value::object()}}, "no pub"},
      {"cluster-key", value{{"pub", ""}}, "empty pub"},
      {"cluster-key", value{{"pub", "P"}, {"sealed", "x"}}, "sealed is not a map"},
      {"key-sync", value{{"seq", "7"}}, "seq is not an integer"},
      {"key-sync", value{{"for", 7}}, "for is not text"},
      {"keys", value{{"accepted", value::array()}}, "accepted is not a map"},
      {"keys", value{{"rejected", value{{"m1", nullptr}}}}, "rejected[m1] is not text"},
      {"keys", value{{"seq", true}}, "seq is not an integer"},
      {"keys", value{{"aes", 1}}, "aes is not text"},
      {"keys", value{{"aes", "K="}, {"aes_gen", -2}}, "aes_gen is negative"},
      {"keys", value{{"share", 1}}, "share is not a bool"},
      {"keys", value{{"pending", "m2"}}, "pending is not a list"},
      {"keys", value{{"pending", value::array({1})}}, "pending holds a non-text entry"},
      {"join", value{{"pub", "P"}}, "no id"},
      {"join", value{{"id", "j"}}, "no pub"},
      {"join", value{{"id", "j"}, {"pub", "P"}, {"local", "yes"}}, "local is not a bool"},
      {"leave", value::object(), "no id"},
  };
  for (const auto& c : cases) {
    std::string why;
    EXPECT_FALSE(decode(c.type, c.body, why)) << c.type << " " << c.body.dump();
    EXPECT_EQ(why, c.why) << c.type << " " << c.body.dump();
  }
}

TEST(PeerMessages, lanes_are_declared_once) {
  EXPECT_EQ(lane_of(peer_kind::publish), peer_lane::relay);
  EXPECT_EQ(lane_of(peer_kind::ret), peer_lane::relay);
  for (auto k : {peer_kind::aes, peer_kind::aes_rotate, peer_kind::key, peer_kind::cluster_key, peer_kind::key_sync,
                 peer_kind::keys})
    EXPECT_EQ(lane_of(k), peer_lane::control) << type_of(k);
  EXPECT_EQ(lane_of(peer_kind::join), peer_lane::membership);
  EXPECT_EQ(lane_of(peer_kind::leave), peer_lane::membership);
  EXPECT_EQ(lane_of(peer_kind::event), peer_lane::relay);
  EXPECT_EQ(lane_of(peer_kind::presence), peer_lane::relay);
  // By wire type, as the daemon routes; an unknown type goes where decode refuses it.
  EXPECT_EQ(lane_of(std::string_view("return")), peer_lane::relay);
  EXPECT_EQ(lane_of(std::string_view("keys")), peer_lane::control);
  EXPECT_EQ(lane_of(std::string_view("bogus")), peer_lane::control);
  // Every type name is unique and maps back to its kind; kind_of(msg) is its alternative.
  for (const auto& i : k_peer_kinds) {
    EXPECT_EQ(kind_of(i.type), i.kind);
    EXPECT_EQ(type_of(i.kind), i.type);
  }
  EXPECT_EQ(kind_of(peer_msg(msg::keys{})), peer_kind::keys);
  EXPECT_EQ(kind_of(peer_msg(msg::ret{})), peer_kind::ret);
  EXPECT_FALSE(kind_of(std::string_view("cluster/msg")));
}

TEST(PeerMessages, presence_refusals) {
  std::string why;
  EXPECT_FALSE(decode("presence", value{{"full", true}}, why));
  EXPECT_EQ(why, "no minions");
  EXPECT_FALSE(decode("presence", value{{"minions", value::array()}}, why));
  EXPECT_EQ(why, "minions is not a map");
  EXPECT_FALSE(decode("presence", value{{"minions", value{{"../x", value::array({true, 1})}}}}, why));
  EXPECT_EQ(why, "invalid minion id");
  EXPECT_FALSE(decode("presence", value{{"minions", value{{"m1", value::array({true})}}}}, why));
  EXPECT_EQ(why, "minions[m1] is not [connected, last_ms]");
  EXPECT_FALSE(decode("presence", value{{"minions", value{{"m1", value::array({1, 1})}}}}, why));
  EXPECT_FALSE(decode("presence", value{{"minions", value::object()}, {"aes", std::string(200, 'a')}}, why));
  auto d = decode("presence", value{{"minions", value{{"m1", value::array({false, 7})}}}}, why);
  ASSERT_TRUE(d) << why;
  const auto& p = std::get<msg::presence>(*d);
  EXPECT_FALSE(p.full);
  ASSERT_EQ(p.minions.size(), 1u);
  EXPECT_EQ(p.minions[0].id, "m1");
  EXPECT_FALSE(p.minions[0].connected);
  EXPECT_EQ(p.minions[0].last_ms, 7);
  EXPECT_FALSE(p.aes);
}

TEST(PeerMessages, event_refusals) {
  std::string why;
  EXPECT_FALSE(decode("event", value{{"data", value::object()}, {"origin", "m1"}}, why));
  EXPECT_EQ(why, "no tag");
  EXPECT_FALSE(decode("event", value{{"tag", ""}, {"data", value::object()}, {"origin", "m1"}}, why));
  EXPECT_FALSE(decode("event", value{{"tag", std::string(513, 'x')}, {"data", value::object()}, {"origin", "m1"}}, why));
  EXPECT_FALSE(decode("event", value{{"tag", "t"}, {"data", 5}, {"origin", "m1"}}, why));
  EXPECT_EQ(why, "data is not a map");
  EXPECT_FALSE(decode("event", value{{"tag", "t"}, {"data", value::object()}, {"origin", "../x"}}, why));
  EXPECT_FALSE(decode("event", value{{"tag", "t"}, {"origin", "m1"}}, why));
  EXPECT_EQ(why, "no data");
}
