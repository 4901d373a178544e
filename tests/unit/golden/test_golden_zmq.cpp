// Golden ZeroMQ messages captured from real Salt 3008.5 (tests/fixtures/golden/zmq, made
// by zmq/capture.py: a real salt-master and salt-minion over Salt's default transport with
// pyzmq recording proxies in between, zmq_filtering off and on), checked with sylvite's
// ZeroMQ framing functions (core/transport/zmq.hpp), wire and crypto code only. Expected
// values come from the messages themselves, the keys the real daemons generated, the TCP
// golden frames next door, or capture.json (minion id, its topic, jids printed by `salt`).
// Thread-safety: single-threaded tests.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/transport/zmq.hpp"
#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"
#include "core/wire/value.hpp"

using namespace sylvite;
using sylvite::wire::value;
namespace zf = sylvite::transport::zmq_framing;

namespace {

using frames_t = std::vector<std::string>;

std::string read_file(std::string_view rel) {
  std::ifstream f(std::string(SYLVITE_SOURCE_DIR) + "/tests/fixtures/golden/" + std::string(rel), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

value read_json(std::string_view rel) {
  return value::parse(read_file(rel), nullptr, /*allow_exceptions=*/false);
}

const value& capture() {
  static const value c = read_json("zmq/capture.json");
  return c;
}
std::string cap_text(const value& v) { return v.is_string() ? v.get<std::string>() : std::string(); }
std::string minion_id() { return cap_text(capture()["minion_id"]); }
std::string jid(const char* run, const char* job) { return cap_text(capture()["runs"][run]["jids"][job]); }

frames_t decode_frames(const value& arr) {
  frames_t out;
  if (!arr.is_array()) return out;
  for (const auto& b : arr) {
    auto d = crypto::base64_decode(cap_text(b));
    EXPECT_TRUE(d) << "bad base64 in fixture";
    out.push_back(d ? *d : std::string());
  }
  return out;
}

struct message {
  std::string socket, direction;
  frames_t frames;    // on the proxy's minion-facing socket (ROUTER / XPUB)
  frames_t upstream;  // on the master-facing socket (DEALER; empty for publishes)
};

message load_message(std::string_view name) {
  value j = read_json("zmq/" + std::string(name) + ".json");
  EXPECT_TRUE(j.is_object()) << name << ".json missing or invalid";
  message m;
  if (!j.is_object()) return m;
  m.socket = cap_text(j["socket"]);
  m.direction = cap_text(j["direction"]);
  m.frames = decode_frames(j["frames_b64"]);
  if (j.contains("upstream_frames_b64")) m.upstream = decode_frames(j["upstream_frames_b64"]);
  EXPECT_FALSE(m.frames.empty()) << name;
  return m;
}

// Request-port messages, each a REQ request or the reply to one.
const std::vector<std::string>& req_files() {
  static const std::vector<std::string> f = {
      "auth_request_pending", "auth_reply_pending", "auth_request",   "auth_reply",
      "auth_request_filtered", "auth_reply_filtered", "pillar_request", "pillar_reply",
      "return_test_ping",     "return_test_ping_reply", "return_cmd_run"};
  return f;
}
const std::vector<std::string>& pub_files() {
  static const std::vector<std::string> f = {"publish_test_ping", "publish_cmd_run", "publish_test_ping_filtered",
                                             "publish_broadcast_filtered"};
  return f;
}

std::string bytes_of(const value* v) {
  if (!v) return {};
  auto b = wire::as_bytes(*v);
  return b ? std::string(*b) : std::string();
}
std::string text_of(const value& map, std::string_view key) {
  auto t = wire::get_text(map, key);
  return t ? std::string(*t) : std::string();
}
std::vector<std::string> keys_of(const value& map) {
  std::vector<std::string> out;
  if (!map.is_object()) return out;
  for (auto it = map.begin(); it != map.end(); ++it) out.push_back(it.key());
  return out;
}

// The payload frame of a request-port message, through split_routed.
std::string routed_payload(std::string_view name) {
  message m = load_message(name);
  auto r = zf::split_routed(frames_t(m.frames));
  EXPECT_TRUE(r) << name;
  return r ? r->payload : std::string();
}
value unpack_or_null(std::string_view bytes, std::string_view what) {
  auto v = wire::unpack(bytes);
  EXPECT_TRUE(v) << what << ": " << (v ? "" : v.error().message());
  return v ? *v : value();
}

struct keys_t {
  crypto::rsa_key minion_priv, master_pub;
};
keys_t load_keys(std::string_view dir) {
  keys_t k;
  const std::string d = dir.empty() ? std::string() : std::string(dir) + "/";
  if (auto r = crypto::rsa_key::from_private_pem(read_file(d + "minion.pem"))) k.minion_priv = *r;
  if (auto r = crypto::rsa_key::from_public_pem(read_file(d + "master.pub"))) k.master_pub = *r;
  return k;
}
const keys_t& zkeys() {
  static const keys_t k = load_keys("zmq");
  return k;
}

// AES (publish) and session keys from an accepted auth reply payload.
struct creds_t {
  std::string aes, session;
};
creds_t creds_from(const value& reply_body, const crypto::rsa_key& priv) {
  creds_t out;
  auto load = wire::unpack(bytes_of(wire::find(reply_body, "load")));
  if (!load) return out;
  if (auto a = crypto::oaep_decrypt(priv, bytes_of(wire::find(*load, "aes")))) out.aes = *a;
  if (auto s = crypto::oaep_decrypt(priv, bytes_of(wire::find(*load, "session")))) out.session = *s;
  return out;
}
const creds_t& zcreds(bool filtered) {
  static const creds_t off = creds_from(unpack_or_null(routed_payload("auth_reply"), "auth_reply"), zkeys().minion_priv);
  static const creds_t on = creds_from(unpack_or_null(routed_payload("auth_reply_filtered"), "auth_reply_filtered"),
                                       zkeys().minion_priv);
  return filtered ? on : off;
}

crypto::crypticle make_crypticle(const std::string& key) {
  auto c = crypto::crypticle::from_key_string(key);
  EXPECT_TRUE(c) << "key string " << key.size() << " chars";
  return c ? *c : crypto::crypticle{};
}

// Open a publish payload: signature by master.pub over the load bytes, Crypticle(aes).
value open_publish(const std::string& payload_bytes, const std::string& aes, std::string_view what) {
  value payload = unpack_or_null(payload_bytes, what);
  EXPECT_EQ(keys_of(payload), (std::vector<std::string>{"enc", "load", "sig_algo", "sig"})) << what;
  EXPECT_EQ(text_of(payload, "enc"), "aes") << what;
  const std::string load_bytes = bytes_of(wire::find(payload, "load"));
  auto sga = crypto::parse_sig_algo(text_of(payload, "sig_algo"));
  EXPECT_TRUE(sga) << what;
  if (sga) {
    EXPECT_TRUE(crypto::verify(zkeys().master_pub, load_bytes, bytes_of(wire::find(payload, "sig")), *sga)) << what;
  }
  auto load = make_crypticle(aes).loads(load_bytes);
  EXPECT_TRUE(load) << what << ": " << (load ? "" : load.error().message());
  return load ? *load : value();
}

// The TCP golden frame's body (tests/fixtures/golden/<name>.bin).
value tcp_body(std::string_view name) {
  wire::frame_parser p;
  p.feed(read_file(std::string(name) + ".bin"));
  auto r = p.next();
  EXPECT_TRUE(r && *r) << name;
  return (r && *r) ? (**r).body : value();
}

}  // namespace

// ------------------------------------------------------------------------- fixtures

TEST(GoldenZmq, CaptureMetadataAndKeysLoad) {
  ASSERT_TRUE(capture().is_object()) << "zmq/capture.json missing or invalid";
  EXPECT_EQ(cap_text(capture()["salt_version"]), "3008.5");
  EXPECT_EQ(minion_id(), "golden-minion");
  EXPECT_EQ(capture()["runs"]["unfiltered"]["zmq_filtering"], false);
  EXPECT_EQ(capture()["runs"]["filtered"]["zmq_filtering"], true);
  ASSERT_TRUE(zkeys().minion_priv.valid());
  ASSERT_TRUE(zkeys().minion_priv.has_private());
  ASSERT_TRUE(zkeys().master_pub.valid());
  EXPECT_EQ(zkeys().minion_priv.public_pem(), read_file("zmq/minion.pub"));
  for (const auto& n : req_files()) EXPECT_EQ(load_message(n).socket, "req") << n;
  for (const auto& n : pub_files()) {
    message m = load_message(n);
    EXPECT_EQ(m.socket, "pub") << n;
    EXPECT_EQ(m.direction, "master->minion") << n;
  }
}

// ------------------------------------------------------------------------- request port

TEST(GoldenZmq, RouterSideRequestsSplitIntoEnvelopeAndOnePayloadFrame) {
  for (const auto& name : req_files()) {
    SCOPED_TRACE(name);
    message m = load_message(name);
    // ROUTER side: [routing id, "", payload]; REQ adds the delimiter, ROUTER the id.
    ASSERT_EQ(m.frames.size(), 3u);
    // Salt's minion REQ sockets set no identity: libzmq's generated id, 0x00 + 4 bytes.
    EXPECT_EQ(m.frames[0].size(), 5u);
    EXPECT_EQ(m.frames[0][0], '\0');
    EXPECT_TRUE(m.frames[1].empty());
    // Master side (DEALER in the proxy): the envelope minus the routing id.
    EXPECT_EQ(m.upstream, frames_t(m.frames.begin() + 1, m.frames.end()));

    auto r = zf::split_routed(frames_t(m.frames));
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->envelope, frames_t(m.frames.begin(), m.frames.begin() + 2));
    EXPECT_EQ(r->payload, m.frames[2]);
    // One msgpack object, packed by salt.payload.dumps (use_bin_type=False): our
    // salt_payload packer reproduces it byte for byte.
    value v = unpack_or_null(r->payload, name);
    EXPECT_EQ(wire::pack_payload(v), r->payload) << "salt_payload re-encode differs";
  }
  // Malformed envelopes are refused: no delimiter, no routing id, two body frames.
  message m = load_message("auth_request");
  EXPECT_FALSE(zf::split_routed({m.frames[0], m.frames[2]}));
  EXPECT_FALSE(zf::split_routed({m.frames[1], m.frames[2]}));
  EXPECT_FALSE(zf::split_routed({m.frames[0], m.frames[1], m.frames[2], m.frames[2]}));
  EXPECT_FALSE(zf::split_routed({}));
}

TEST(GoldenZmq, RepliesGoBackOnTheRequestEnvelope) {
  const std::pair<const char*, const char*> pairs[] = {{"auth_request_pending", "auth_reply_pending"},
                                                       {"auth_request", "auth_reply"},
                                                       {"auth_request_filtered", "auth_reply_filtered"},
                                                       {"pillar_request", "pillar_reply"},
                                                       {"return_test_ping", "return_test_ping_reply"}};
  for (const auto& [req_name, rep_name] : pairs) {
    SCOPED_TRACE(rep_name);
    message req = load_message(req_name), rep = load_message(rep_name);
    EXPECT_EQ(req.direction, "minion->master");
    EXPECT_EQ(rep.direction, "master->minion");
    auto rq = zf::split_routed(frames_t(req.frames));
    auto rp = zf::split_routed(frames_t(rep.frames));
    ASSERT_TRUE(rq && rp);
    EXPECT_EQ(rp->envelope, rq->envelope);
    // What the master's ROUTER sends is envelope + payload, nothing else.
    frames_t out = rq->envelope;
    out.push_back(rp->payload);
    EXPECT_EQ(out, rep.frames);
  }
}

TEST(GoldenZmq, RequestPayloadIsTheTcpBodyMapPackedAsSaltPayload) {
  // Same map as the `body` of the TCP golden frame (same keys in the same order, same enc
  // and version); on ZeroMQ it is packed by salt.payload.dumps (bytes as raw str), on TCP
  // inside a use_bin_type=True frame (bytes as bin).
  const std::pair<const char*, const char*> same[] = {{"auth_request", "auth_request"},
                                                      {"auth_request_pending", "auth_request_pending"},
                                                      {"pillar_request", "pillar_request"},
                                                      {"return_test_ping", "return_test_ping"},
                                                      {"return_cmd_run", "return_cmd_run"}};
  for (const auto& [zname, tname] : same) {
    SCOPED_TRACE(zname);
    value z = unpack_or_null(routed_payload(zname), zname);
    value t = tcp_body(tname);
    ASSERT_TRUE(z.is_object());
    ASSERT_TRUE(t.is_object());
    EXPECT_EQ(keys_of(z), keys_of(t));
    EXPECT_EQ(text_of(z, "enc"), text_of(t, "enc"));
    EXPECT_EQ(wire::get_int(z, "version"), 3);
    EXPECT_EQ(wire::get_int(z, "version"), wire::get_int(t, "version"));
    if (text_of(z, "enc") == "clear") {
      EXPECT_EQ(keys_of(*wire::find(z, "load")), keys_of(*wire::find(t, "load")));
      EXPECT_EQ(text_of(*wire::find(z, "load"), "cmd"), "_auth");
      EXPECT_EQ(text_of(*wire::find(z, "load"), "id"), minion_id());
    } else {
      EXPECT_EQ(text_of(z, "id"), minion_id());
      EXPECT_EQ(text_of(z, "enc_algo"), text_of(t, "enc_algo"));
      EXPECT_EQ(text_of(z, "sig_algo"), text_of(t, "sig_algo"));
      // The encrypted load: bin inside the TCP frame, raw str in the ZeroMQ payload.
      EXPECT_TRUE(wire::find(t, "load")->is_binary());
      const std::string zbytes = routed_payload(zname);
      EXPECT_EQ(zbytes.find(std::string("\xa4load\xc4", 6)), std::string::npos);
      EXPECT_EQ(zbytes.find(std::string("\xa4load\xc5", 6)), std::string::npos);
      EXPECT_NE(wire::pack(z, wire::packing::frame), zbytes) << "ZeroMQ payloads are not use_bin_type=True";
    }
  }
}

TEST(GoldenZmq, AuthReplyOpensWithTheMinionKey) {
  for (bool filtered : {false, true}) {
    SCOPED_TRACE(filtered ? "filtered" : "unfiltered");
    value body = unpack_or_null(routed_payload(filtered ? "auth_reply_filtered" : "auth_reply"), "auth_reply");
    EXPECT_EQ(keys_of(body), (std::vector<std::string>{"enc", "load", "sig"}));
    EXPECT_EQ(text_of(body, "enc"), "clear");
    const std::string load_bytes = bytes_of(wire::find(body, "load"));
    EXPECT_TRUE(crypto::verify(zkeys().master_pub, load_bytes, bytes_of(wire::find(body, "sig"))));
    value load = unpack_or_null(load_bytes, "auth reply load");
    // The second run's minion restarts with the master's key cached: its request carries a
    // `token` (encrypted to the master) and the accepted reply echoes it.
    value req = unpack_or_null(routed_payload(filtered ? "auth_request_filtered" : "auth_request"), "auth_request");
    const value* rload = wire::find(req, "load");
    ASSERT_NE(rload, nullptr);
    EXPECT_EQ(wire::find(*rload, "token") != nullptr, filtered);
    if (filtered)
      EXPECT_EQ(keys_of(load), (std::vector<std::string>{"enc", "pub_key", "publish_port", "token", "aes", "session",
                                                          "sig", "nonce"}));
    else
      EXPECT_EQ(keys_of(load),
                (std::vector<std::string>{"enc", "pub_key", "publish_port", "aes", "session", "sig", "nonce"}));
    EXPECT_EQ(wire::get_int(load, "publish_port"),
              capture()["runs"][filtered ? "filtered" : "unfiltered"]["ports"]["publish_port"].get<std::int64_t>());
    const creds_t& c = zcreds(filtered);
    EXPECT_EQ(c.aes.size(), 76u);
    EXPECT_EQ(c.session.size(), 76u);
  }
  // Each master start makes a new publish AES key.
  EXPECT_NE(zcreds(false).aes, zcreds(true).aes);
}

TEST(GoldenZmq, ReturnTestPingUsesTheSessionKey) {
  value body = unpack_or_null(routed_payload("return_test_ping"), "return_test_ping");
  auto load = make_crypticle(zcreds(false).session).loads(bytes_of(wire::find(body, "load")), {}, false);
  ASSERT_TRUE(load) << load.error().message();
  EXPECT_EQ(text_of(*load, "cmd"), "_return");
  EXPECT_EQ(text_of(*load, "id"), minion_id());
  EXPECT_EQ(text_of(*load, "jid"), jid("unfiltered", "test_ping"));
  EXPECT_EQ(text_of(*load, "fun"), "test.ping");
  EXPECT_EQ(wire::get_bool(*load, "return"), true);
  EXPECT_FALSE(make_crypticle(zcreds(false).aes).loads(bytes_of(wire::find(body, "load")), {}, false));
  // The reply: Crypticle(session) of "pickle::" + the request's nonce + msgpack(None).
  value reply = unpack_or_null(routed_payload("return_test_ping_reply"), "reply");
  auto none = make_crypticle(zcreds(false).session).loads(bytes_of(&reply), text_of(*load, "nonce"), false);
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_TRUE(none->is_null());
}

// ------------------------------------------------------------------------- publish port

TEST(GoldenZmq, TopicOfMinionIdIsTheCapturedTopic) {
  const std::string topic = zf::topic_of(minion_id());
  EXPECT_EQ(topic, cap_text(capture()["minion_topic"]));
  EXPECT_EQ(topic.size(), 40u);
  message m = load_message("publish_test_ping_filtered");
  ASSERT_EQ(m.frames.size(), 2u);
  EXPECT_EQ(m.frames[0], topic);
  EXPECT_NE(zf::topic_of("golden-minion2"), topic);
  EXPECT_EQ(load_message("publish_broadcast_filtered").frames.at(0), zf::broadcast_topic);
}

TEST(GoldenZmq, SubscriptionsSeenByXpub) {
  auto subs = [](const char* name) {
    std::vector<frames_t> out;
    value j = read_json(std::string("zmq/") + name + ".json");
    if (j.is_object() && j["messages_b64"].is_array())
      for (const auto& m : j["messages_b64"]) out.push_back(decode_frames(m));
    return out;
  };
  const std::string sub(1, '\x01'), unsub(1, '\0');
  // Filtering off: one subscription to everything ("" topic); the unsubscribe when the
  // minion stopped.
  EXPECT_EQ(subs("subscriptions"), (std::vector<frames_t>{{sub}, {unsub}}));
  // Filtering on: the minion's own topic, then "broadcast".
  const std::string topic = zf::topic_of(minion_id());
  const std::string b(zf::broadcast_topic);
  EXPECT_EQ(subs("subscriptions_filtered"),
            (std::vector<frames_t>{{sub + topic}, {sub + b}, {unsub + topic}, {unsub + b}}));
}

TEST(GoldenZmq, AcceptPublishFiltersByTopic) {
  const std::string hexid = zf::topic_of(minion_id());
  message filtered = load_message("publish_test_ping_filtered");
  message broadcast = load_message("publish_broadcast_filtered");
  message plain = load_message("publish_test_ping");
  ASSERT_EQ(filtered.frames.size(), 2u);
  ASSERT_EQ(broadcast.frames.size(), 2u);
  ASSERT_EQ(plain.frames.size(), 1u);

  auto a = zf::accept_publish(frames_t(filtered.frames), hexid);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ(**a, filtered.frames[1]);

  auto other = zf::accept_publish(frames_t(filtered.frames), zf::topic_of("another-minion"));
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_value()) << "another minion's publish must be dropped";
  auto retopic = zf::accept_publish({zf::topic_of("another-minion"), filtered.frames[1]}, hexid);
  ASSERT_TRUE(retopic);
  EXPECT_FALSE(retopic->has_value());

  auto bc = zf::accept_publish(frames_t(broadcast.frames), hexid);
  ASSERT_TRUE(bc);
  ASSERT_TRUE(bc->has_value());
  EXPECT_EQ(**bc, broadcast.frames[1]);

  auto one = zf::accept_publish(frames_t(plain.frames), hexid);
  ASSERT_TRUE(one);
  ASSERT_TRUE(one->has_value());
  EXPECT_EQ(**one, plain.frames[0]);

  EXPECT_FALSE(zf::accept_publish({filtered.frames[0], filtered.frames[1], filtered.frames[1]}, hexid));
  EXPECT_FALSE(zf::accept_publish({}, hexid));
}

TEST(GoldenZmq, PublishMessagesReproduceTheCapturedOnes) {
  const std::vector<std::string> targets = {minion_id()};
  message filtered = load_message("publish_test_ping_filtered");
  message broadcast = load_message("publish_broadcast_filtered");
  message plain = load_message("publish_test_ping");
  ASSERT_EQ(filtered.frames.size(), 2u);
  ASSERT_EQ(broadcast.frames.size(), 2u);
  ASSERT_EQ(plain.frames.size(), 1u);

  EXPECT_EQ(zf::publish_messages(filtered.frames[1], &targets, true), std::vector<frames_t>{filtered.frames});
  EXPECT_EQ(zf::publish_messages(broadcast.frames[1], nullptr, true), std::vector<frames_t>{broadcast.frames});
  EXPECT_EQ(zf::publish_messages(plain.frames[0], nullptr, false), std::vector<frames_t>{plain.frames});
  // Without filtering the targets change nothing: one frame, every minion gets it.
  EXPECT_EQ(zf::publish_messages(plain.frames[0], &targets, false), std::vector<frames_t>{plain.frames});
  // One message per target.
  const std::vector<std::string> two = {minion_id(), "other"};
  auto msgs = zf::publish_messages(filtered.frames[1], &two, true);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0], filtered.frames);
  EXPECT_EQ(msgs[1], (frames_t{zf::topic_of("other"), filtered.frames[1]}));
}

TEST(GoldenZmq, PublishLoadsDecryptToTheJobs) {
  struct {
    const char* file;
    bool filtered;
    const char* run;
    const char* job;
    const char* tgt_type;
  } const cases[] = {{"publish_test_ping", false, "unfiltered", "test_ping", "glob"},
                     {"publish_cmd_run", false, "unfiltered", "cmd_run", "glob"},
                     {"publish_test_ping_filtered", true, "filtered", "test_ping", "glob"},
                     {"publish_broadcast_filtered", true, "filtered", "grain_ping", "grain"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    message m = load_message(c.file);
    auto payload = zf::accept_publish(frames_t(m.frames), zf::topic_of(minion_id()));
    ASSERT_TRUE(payload && payload->has_value());
    value pv = unpack_or_null(**payload, c.file);
    EXPECT_EQ(wire::pack_payload(pv), **payload) << "salt_payload re-encode differs";
    value load = open_publish(**payload, zcreds(c.filtered).aes, c.file);
    EXPECT_EQ(text_of(load, "fun"), std::string(c.job) == "cmd_run" ? "cmd.run" : "test.ping");
    EXPECT_EQ(text_of(load, "jid"), jid(c.run, c.job));
    EXPECT_EQ(text_of(load, "tgt_type"), c.tgt_type);
    // The other run's master had another AES key.
    EXPECT_FALSE(make_crypticle(zcreds(!c.filtered).aes).loads(bytes_of(wire::find(pv, "load")), {}, false));
  }
}
