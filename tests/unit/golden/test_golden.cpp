// Golden frames captured from real Salt 3008.5 (tests/fixtures/golden, made by
// capture.py: a real salt-master and salt-minion with a recording proxy in between),
// decoded and checked with sylvite's wire and crypto code only. Every expected value
// comes from the frames themselves, from the keys the real daemons generated, or from
// capture.json (written by the Python capture script: minion id, jids printed by the
// `salt` CLI, request nonces, the pillar written to the master's pillar_roots).
// Thread-safety: single-threaded tests.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"
#include "core/wire/value.hpp"

using namespace sylvite;
using sylvite::wire::value;

namespace {

std::string golden_path(std::string_view name) {
  return std::string(SYLVITE_SOURCE_DIR) + "/tests/fixtures/golden/" + std::string(name);
}

std::string read_file(std::string_view name) {
  std::ifstream f(golden_path(name), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::vector<std::string>& frame_files() {
  static const std::vector<std::string> files = {
      "auth_request_pending.bin", "auth_reply_pending.bin", "auth_request.bin",
      "auth_reply.bin",           "publish_hello.bin",      "pillar_request.bin",
      "pillar_reply.bin",         "minion_event.bin",       "publish_test_ping.bin",
      "return_test_ping.bin",     "return_test_ping_reply.bin",
      "publish_cmd_run.bin",      "return_cmd_run.bin",     "register_resources.bin",
      "register_resources_reply.bin"};
  return files;
}

const value& capture() {
  static const value c = [] {
    std::string text = read_file("capture.json");
    return value::parse(text, nullptr, /*allow_exceptions=*/false);
  }();
  return c;
}

std::string cap_text(const value& v) { return v.is_string() ? v.get<std::string>() : std::string(); }
std::string minion_id() { return cap_text(capture()["minion_id"]); }
std::string cap_nonce(const char* frame) { return cap_text(capture()["frames"][frame]["nonce"]); }
std::string cap_mid(const char* frame) { return cap_text(capture()["frames"][frame]["mid"]); }

struct keys_t {
  crypto::rsa_key minion_priv, minion_pub, master_pub;
  std::string minion_pub_pem, master_pub_pem;
};

const keys_t& keys() {
  static const keys_t k = [] {
    keys_t out;
    out.minion_pub_pem = read_file("minion.pub");
    out.master_pub_pem = read_file("master.pub");
    if (auto r = crypto::rsa_key::from_private_pem(read_file("minion.pem"))) out.minion_priv = *r;
    if (auto r = crypto::rsa_key::from_public_pem(out.minion_pub_pem)) out.minion_pub = *r;
    if (auto r = crypto::rsa_key::from_public_pem(out.master_pub_pem)) out.master_pub = *r;
    return out;
  }();
  return k;
}

// Parse one frame file: exactly one frame, nothing left over.
wire::frame parse_frame(std::string_view name) {
  const std::string bytes = read_file(name);
  EXPECT_FALSE(bytes.empty()) << name;
  wire::frame_parser p;
  p.feed(bytes);
  auto r = p.next();
  EXPECT_TRUE(r) << name << ": " << (r ? "" : r.error().message());
  if (!r || !*r) {
    ADD_FAILURE() << name << ": no complete frame";
    return {};
  }
  wire::frame f = std::move(**r);
  auto again = p.next();
  EXPECT_TRUE(again && !*again) << name << ": more than one frame";
  EXPECT_EQ(p.buffered(), 0u) << name;
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

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Session / AES keys from the accepted auth reply, decrypted with the minion's key.
struct session_t {
  std::string aes, session;
};
const session_t& creds() {
  static const session_t s = [] {
    session_t out;
    wire::frame f = parse_frame("auth_reply.bin");
    auto load = wire::unpack(bytes_of(wire::find(f.body, "load")));
    if (!load) return out;
    if (auto a = crypto::oaep_decrypt(keys().minion_priv, bytes_of(wire::find(*load, "aes")))) out.aes = *a;
    if (auto s2 = crypto::oaep_decrypt(keys().minion_priv, bytes_of(wire::find(*load, "session"))))
      out.session = *s2;
    return out;
  }();
  return s;
}

crypto::crypticle make_crypticle(const std::string& key) {
  auto c = crypto::crypticle::from_key_string(key);
  EXPECT_TRUE(c) << "key string " << key.size() << " chars";
  return c ? *c : crypto::crypticle{};
}

// The token is X9.31(minion.pem, "salt"): must recover to "salt" with minion.pub and
// not with the master key.
void expect_valid_tok(const value& load, const char* what) {
  const std::string tok = bytes_of(wire::find(load, "tok"));
  ASSERT_EQ(tok.size(), keys().minion_pub.size_bytes()) << what;
  auto rec = crypto::x931_recover(keys().minion_pub, tok);
  ASSERT_TRUE(rec) << what;
  EXPECT_EQ(*rec, "salt") << what;
  auto wrong = crypto::x931_recover(keys().master_pub, tok);
  EXPECT_TRUE(!wrong || *wrong != "salt") << what;
}

// Decrypt a Crypticle blob and check that our salt_payload packer reproduces the exact
// plaintext Salt produced after "pickle::" (+ nonce prefix if any).
void expect_plaintext_repacks(const std::string& key, std::string_view blob, std::size_t prefix,
                              const char* what) {
  auto c = make_crypticle(key);
  auto plain = c.decrypt(blob);
  ASSERT_TRUE(plain) << what;
  ASSERT_GT(plain->size(), prefix) << what;
  ASSERT_EQ(plain->substr(0, 8), "pickle::") << what;
  std::string_view body = std::string_view(*plain).substr(prefix);
  auto v = wire::unpack(body);
  ASSERT_TRUE(v) << what << ": " << v.error().message();
  EXPECT_EQ(wire::pack_payload(*v), body) << what << ": salt_payload re-encode differs";
}

// Envelope of a v3 AES request (section 4.1).
void expect_v3_envelope(const value& body, const char* what) {
  ASSERT_TRUE(body.is_object()) << what;
  EXPECT_EQ(keys_of(body), (std::vector<std::string>{"enc", "load", "version", "id", "enc_algo", "sig_algo"}))
      << what;
  EXPECT_EQ(text_of(body, "enc"), "aes") << what;
  EXPECT_EQ(wire::get_int(body, "version"), 3) << what;
  EXPECT_EQ(text_of(body, "id"), minion_id()) << what;
  EXPECT_TRUE(crypto::parse_enc_algo(text_of(body, "enc_algo"))) << what;
  EXPECT_TRUE(crypto::parse_sig_algo(text_of(body, "sig_algo"))) << what;
  const value* load = wire::find(body, "load");
  ASSERT_NE(load, nullptr) << what;
  EXPECT_TRUE(load->is_binary()) << what << ": load should be msgpack bin on the frame";
}

value open_request(const char* file, std::string* nonce_out = nullptr) {
  wire::frame f = parse_frame(file);
  expect_v3_envelope(f.body, file);
  auto c = make_crypticle(creds().session);
  auto load = c.loads(bytes_of(wire::find(f.body, "load")), {}, false);
  EXPECT_TRUE(load) << file << ": " << (load ? "" : load.error().message());
  if (!load) return {};
  if (nonce_out) *nonce_out = text_of(*load, "nonce");
  return *load;
}

}  // namespace

// ------------------------------------------------------------------------- fixtures

TEST(Golden, CaptureMetadataAndKeysLoad) {
  ASSERT_TRUE(capture().is_object()) << "capture.json missing or invalid";
  EXPECT_EQ(cap_text(capture()["salt_version"]), "3008.5");
  EXPECT_FALSE(minion_id().empty());
  ASSERT_TRUE(keys().minion_priv.valid());
  ASSERT_TRUE(keys().minion_priv.has_private());
  ASSERT_TRUE(keys().minion_pub.valid());
  ASSERT_TRUE(keys().master_pub.valid());
  // Salt's minion.pub is the SPKI PEM of minion.pem, byte for byte as our writer makes it.
  EXPECT_EQ(keys().minion_priv.public_pem(), keys().minion_pub_pem);
  EXPECT_NE(keys().minion_pub.public_pem(), keys().master_pub.public_pem());
}

// ------------------------------------------------------------------------- framing

TEST(Golden, EveryFrameParsesWholeAndByteByByteAndRepacks) {
  for (const auto& name : frame_files()) {
    SCOPED_TRACE(name);
    const std::string bytes = read_file(name);
    ASSERT_FALSE(bytes.empty());
    wire::frame whole = parse_frame(name);
    ASSERT_TRUE(whole.head.is_object());

    wire::frame_parser p;
    std::optional<wire::frame> got;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      p.feed(std::string_view(bytes).substr(i, 1));
      auto r = p.next();
      ASSERT_TRUE(r) << "byte " << i << ": " << r.error().message();
      if (*r) {
        EXPECT_EQ(i + 1, bytes.size()) << "frame complete before its last byte";
        got = std::move(**r);
      }
    }
    ASSERT_TRUE(got.has_value()) << "byte-by-byte: no frame";
    EXPECT_EQ(got->head, whole.head);
    EXPECT_EQ(got->body, whole.body);
    EXPECT_EQ(p.buffered(), 0u);

    // Salt packs frames with use_bin_type=True: our frame packer must give the same bytes.
    EXPECT_EQ(wire::pack_frame(whole.head, whole.body), bytes) << "frame re-encode differs";
  }
}

TEST(Golden, ConcatenatedStreamSplitsIntoTheFrames) {
  std::string stream;
  std::vector<std::string> originals;
  for (const auto& name : frame_files()) {
    originals.push_back(read_file(name));
    stream += originals.back();
  }
  wire::frame_parser p;
  std::vector<wire::frame> out;
  for (std::size_t i = 0; i < stream.size(); i += 7) {
    p.feed(std::string_view(stream).substr(i, 7));
    for (;;) {
      auto r = p.next();
      ASSERT_TRUE(r) << r.error().message();
      if (!*r) break;
      out.push_back(std::move(**r));
    }
  }
  ASSERT_EQ(out.size(), originals.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(wire::pack_frame(out[i].head, out[i].body), originals[i]) << frame_files()[i];
}

// ------------------------------------------------------------------------- auth

TEST(Golden, AuthRequests) {
  for (const char* name : {"auth_request_pending.bin", "auth_request.bin"}) {
    SCOPED_TRACE(name);
    wire::frame f = parse_frame(name);
    EXPECT_EQ(text_of(f.head, "mid"), cap_mid(name));
    EXPECT_EQ(text_of(f.head, "mid").size(), 36u);
    // Clear envelope: enc, load, version only (no id/enc_algo/sig_algo outside).
    EXPECT_EQ(keys_of(f.body), (std::vector<std::string>{"enc", "load", "version"}));
    EXPECT_EQ(text_of(f.body, "enc"), "clear");
    EXPECT_EQ(wire::get_int(f.body, "version"), 3);
    const value* load = wire::find(f.body, "load");
    ASSERT_NE(load, nullptr);
    ASSERT_TRUE(load->is_object()) << "clear load is a map on the frame";
    EXPECT_EQ(text_of(*load, "cmd"), "_auth");
    EXPECT_EQ(text_of(*load, "id"), minion_id());
    const std::string nonce = text_of(*load, "nonce");
    EXPECT_EQ(nonce, cap_nonce(name));
    EXPECT_EQ(nonce.size(), 32u);
    EXPECT_TRUE(is_lower_hex(nonce));
    EXPECT_EQ(crypto::parse_enc_algo(text_of(*load, "enc_algo")), crypto::enc_algo::oaep_sha1);
    EXPECT_EQ(crypto::parse_sig_algo(text_of(*load, "sig_algo")), crypto::sig_algo::pkcs1v15_sha1);
    EXPECT_EQ(text_of(*load, "pub"), crypto::clean_key(keys().minion_pub_pem));
    EXPECT_NE(keys().minion_pub_pem, text_of(*load, "pub")) << "file has the trailing newline, wire has not";
    // First start: the minion has no minion_master.pub yet, so no token.
    EXPECT_EQ(wire::find(*load, "token"), nullptr);
    EXPECT_EQ(keys_of(*load),
              (std::vector<std::string>{"cmd", "id", "nonce", "enc_algo", "sig_algo", "pub"}));
    // Text fields are str on the frame (use_bin_type=True), not bin.
    EXPECT_TRUE(wire::find(*load, "pub")->is_string());
  }
}

TEST(Golden, AuthReplyPending) {
  wire::frame req = parse_frame("auth_request_pending.bin");
  wire::frame f = parse_frame("auth_reply_pending.bin");
  EXPECT_EQ(f.head, req.head) << "reply echoes the request head";
  EXPECT_EQ(keys_of(f.body), (std::vector<std::string>{"enc", "load", "sig"}));
  EXPECT_EQ(text_of(f.body, "enc"), "clear");
  const value* lv = wire::find(f.body, "load");
  ASSERT_NE(lv, nullptr);
  ASSERT_TRUE(lv->is_binary()) << "signed load is bytes";
  const std::string load_bytes = bytes_of(lv);
  const std::string sig = bytes_of(wire::find(f.body, "sig"));
  EXPECT_TRUE(crypto::verify(keys().master_pub, load_bytes, sig, crypto::sig_algo::pkcs1v15_sha1));
  EXPECT_FALSE(crypto::verify(keys().minion_pub, load_bytes, sig, crypto::sig_algo::pkcs1v15_sha1));
  auto load = wire::unpack(load_bytes);
  ASSERT_TRUE(load);
  EXPECT_EQ(keys_of(*load), (std::vector<std::string>{"ret", "nonce"}));
  EXPECT_EQ(wire::get_bool(*load, "ret"), true);
  EXPECT_EQ(text_of(*load, "nonce"), text_of(*wire::find(req.body, "load"), "nonce"));
  EXPECT_EQ(wire::pack_payload(*load), load_bytes) << "salt_payload re-encode differs";
}

TEST(Golden, AuthReplyAccepted) {
  wire::frame req = parse_frame("auth_request.bin");
  const value& req_load = *wire::find(req.body, "load");
  const auto enc = crypto::parse_enc_algo(text_of(req_load, "enc_algo"));
  const auto sga = crypto::parse_sig_algo(text_of(req_load, "sig_algo"));
  ASSERT_TRUE(enc && sga);

  wire::frame f = parse_frame("auth_reply.bin");
  EXPECT_EQ(f.head, req.head);
  EXPECT_EQ(text_of(f.head, "mid"), cap_mid("auth_request.bin"));
  EXPECT_EQ(keys_of(f.body), (std::vector<std::string>{"enc", "load", "sig"}));
  EXPECT_EQ(text_of(f.body, "enc"), "clear");
  const value* lv = wire::find(f.body, "load");
  ASSERT_NE(lv, nullptr);
  ASSERT_TRUE(lv->is_binary());
  const std::string load_bytes = bytes_of(lv);
  const std::string sig = bytes_of(wire::find(f.body, "sig"));

  // PKCS1v15 signature over the exact load bytes, with the request's sig_algo.
  EXPECT_TRUE(crypto::verify(keys().master_pub, load_bytes, sig, *sga));
  std::string tampered = load_bytes;
  tampered[tampered.size() / 2] ^= 0x01;
  EXPECT_FALSE(crypto::verify(keys().master_pub, tampered, sig, *sga));

  auto load = wire::unpack(load_bytes);
  ASSERT_TRUE(load) << load.error().message();
  ASSERT_TRUE(load->is_object());
  // Our salt_payload packer reproduces Salt's bytes (key order, raw str for bytes, str16
  // for the 450-char pub_key, uint16 port).
  EXPECT_EQ(wire::pack_payload(*load), load_bytes) << "salt_payload re-encode differs";
  // Field order as sent by Salt 3008.5 (no token: the request had none).
  EXPECT_EQ(keys_of(*load),
            (std::vector<std::string>{"enc", "pub_key", "publish_port", "aes", "session", "sig", "nonce"}));

  EXPECT_EQ(text_of(*load, "enc"), "pub");
  EXPECT_EQ(text_of(*load, "pub_key"), crypto::clean_key(keys().master_pub_pem));
  EXPECT_EQ(text_of(*load, "nonce"), text_of(req_load, "nonce"));
  EXPECT_EQ(text_of(*load, "nonce"), cap_nonce("auth_request.bin"));
  auto port = wire::get_int(*load, "publish_port");
  ASSERT_TRUE(port);
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
  EXPECT_EQ(wire::find(*load, "token"), nullptr);

  auto aes = crypto::oaep_decrypt(keys().minion_priv, bytes_of(wire::find(*load, "aes")), *enc);
  ASSERT_TRUE(aes) << aes.error().message();
  EXPECT_EQ(aes->size(), 76u);
  auto raw = crypto::base64_decode(*aes);
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->size(), 56u);
  // sig = X9.31(master.pem, sha256_hex(aes key string)).
  auto rec = crypto::x931_recover(keys().master_pub, bytes_of(wire::find(*load, "sig")));
  ASSERT_TRUE(rec) << rec.error().message();
  EXPECT_EQ(*rec, crypto::sha256_hex(*aes));
  EXPECT_EQ(rec->size(), 64u);

  auto session = crypto::oaep_decrypt(keys().minion_priv, bytes_of(wire::find(*load, "session")), *enc);
  ASSERT_TRUE(session) << session.error().message();
  EXPECT_EQ(session->size(), 76u);
  EXPECT_TRUE(crypto::crypticle::from_key_string(*session));
  EXPECT_NE(*session, *aes);
}

// ------------------------------------------------------------------------- publish

TEST(Golden, PublishTestPing) {
  wire::frame f = parse_frame("publish_test_ping.bin");
  EXPECT_TRUE(f.head.is_object());
  EXPECT_TRUE(f.head.empty());
  ASSERT_TRUE(f.body.is_binary()) << "publish body is bin on the frame";
  const std::string payload_bytes = bytes_of(&f.body);
  auto payload = wire::unpack(payload_bytes);
  ASSERT_TRUE(payload);
  EXPECT_EQ(wire::pack_payload(*payload), payload_bytes) << "salt_payload re-encode differs";
  EXPECT_EQ(keys_of(*payload), (std::vector<std::string>{"enc", "load", "sig_algo", "sig"}));
  EXPECT_EQ(text_of(*payload, "enc"), "aes");
  const std::string load_bytes = bytes_of(wire::find(*payload, "load"));
  auto sga = crypto::parse_sig_algo(text_of(*payload, "sig_algo"));
  ASSERT_TRUE(sga);
  const std::string sig = bytes_of(wire::find(*payload, "sig"));
  EXPECT_TRUE(crypto::verify(keys().master_pub, load_bytes, sig, *sga));
  EXPECT_FALSE(crypto::verify(keys().master_pub, load_bytes.substr(1), sig, *sga));

  auto c = make_crypticle(creds().aes);
  auto load = c.loads(load_bytes);
  ASSERT_TRUE(load) << load.error().message();
  EXPECT_EQ(text_of(*load, "fun"), "test.ping");
  EXPECT_EQ(text_of(*load, "jid"), cap_text(capture()["jids"]["test_ping"]));
  EXPECT_EQ(text_of(*load, "tgt"), minion_id());
  EXPECT_EQ(text_of(*load, "tgt_type"), "glob");
  EXPECT_EQ(text_of(*load, "ret"), "");
  EXPECT_EQ(text_of(*load, "user"), "root");
  ASSERT_NE(wire::find(*load, "arg"), nullptr);
  EXPECT_TRUE(wire::find(*load, "arg")->is_array());
  EXPECT_TRUE(wire::find(*load, "arg")->empty());
  EXPECT_EQ(wire::find(*load, "serial"), nullptr) << "loads() removes serial";
  EXPECT_EQ(keys_of(*load), (std::vector<std::string>{"fun", "arg", "tgt", "jid", "ret", "tgt_type", "user"}));

  // The same AES key does not open it with a nonce prefix expected, and the session key
  // does not open it at all (publish uses the publish AES key).
  auto s = make_crypticle(creds().session);
  EXPECT_FALSE(s.loads(load_bytes, {}, false));
  expect_plaintext_repacks(creds().aes, load_bytes, 8, "publish test.ping");
}

TEST(Golden, PublishSerialsIncreaseAcrossJobs) {
  auto open = [](const char* file) {
    wire::frame f = parse_frame(file);
    auto payload = wire::unpack(bytes_of(&f.body));
    EXPECT_TRUE(payload);
    return payload ? bytes_of(wire::find(*payload, "load")) : std::string();
  };
  const std::string ping = open("publish_test_ping.bin"), run = open("publish_cmd_run.bin");
  auto c = make_crypticle(creds().aes);
  auto a = c.loads(ping);
  ASSERT_TRUE(a);
  auto b = c.loads(run);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(text_of(*b, "fun"), "cmd.run");
  EXPECT_EQ(text_of(*b, "jid"), cap_text(capture()["jids"]["cmd_run"]));
  ASSERT_TRUE(wire::find(*b, "arg") && wire::find(*b, "arg")->is_array());
  ASSERT_EQ(wire::find(*b, "arg")->size(), 1u);
  EXPECT_EQ(wire::as_text((*wire::find(*b, "arg"))[0]), "echo golden");
  // Replaying the older publish on the same Crypticle is refused (serial not increasing).
  auto replay = c.loads(ping);
  ASSERT_FALSE(replay);
  EXPECT_EQ(replay.error(), crypto::errc::stale_serial);
  expect_plaintext_repacks(creds().aes, run, 8, "publish cmd.run");
}

TEST(Golden, PublishHello) {
  wire::frame f = parse_frame("publish_hello.bin");
  EXPECT_TRUE(f.head.is_object());
  EXPECT_TRUE(f.head.empty());
  ASSERT_TRUE(f.body.is_object());
  EXPECT_EQ(keys_of(f.body), (std::vector<std::string>{"enc", "load", "version"}));
  EXPECT_EQ(text_of(f.body, "enc"), "aes");
  EXPECT_EQ(wire::get_int(f.body, "version"), 3);
  const std::string blob = bytes_of(wire::find(f.body, "load"));
  auto c = make_crypticle(creds().aes);
  auto load = c.loads(blob);
  ASSERT_TRUE(load) << load.error().message();
  EXPECT_EQ(keys_of(*load), (std::vector<std::string>{"id", "tok"}));
  EXPECT_EQ(text_of(*load, "id"), minion_id());
  expect_valid_tok(*load, "hello");
  EXPECT_FALSE(make_crypticle(creds().session).loads(blob, {}, false)) << "hello uses the publish AES key";
  expect_plaintext_repacks(creds().aes, blob, 8, "hello");
}

// ------------------------------------------------------------------------- requests (v3)

TEST(Golden, ReturnTestPing) {
  // The jid comes from the publish frame: the return must answer that job.
  wire::frame pub = parse_frame("publish_test_ping.bin");
  auto payload = wire::unpack(bytes_of(&pub.body));
  ASSERT_TRUE(payload);
  auto pub_load = make_crypticle(creds().aes).loads(bytes_of(wire::find(*payload, "load")));
  ASSERT_TRUE(pub_load);

  std::string nonce;
  value load = open_request("return_test_ping.bin", &nonce);
  ASSERT_TRUE(load.is_object());
  EXPECT_EQ(text_of(load, "cmd"), "_return");
  EXPECT_EQ(text_of(load, "id"), minion_id());
  EXPECT_EQ(text_of(load, "jid"), text_of(*pub_load, "jid"));
  EXPECT_EQ(text_of(load, "fun"), "test.ping");
  EXPECT_EQ(wire::get_bool(load, "return"), true);
  EXPECT_EQ(wire::get_bool(load, "success"), true);
  EXPECT_EQ(wire::get_int(load, "retcode"), 0);
  ASSERT_NE(wire::find(load, "fun_args"), nullptr);
  EXPECT_EQ(*wire::find(load, "fun_args"), *wire::find(*pub_load, "arg"));
  EXPECT_EQ(nonce, cap_nonce("return_test_ping.bin"));
  EXPECT_TRUE(wire::get_int(load, "ts"));
  expect_valid_tok(load, "return");
  EXPECT_EQ(keys_of(load), (std::vector<std::string>{"cmd", "id", "success", "return", "retcode", "jid", "fun",
                                                      "fun_args", "user", "_stamp", "nonce", "ts", "tok"}));

  wire::frame f = parse_frame("return_test_ping.bin");
  const std::string blob = bytes_of(wire::find(f.body, "load"));
  // v3: the session key, not the publish AES key.
  auto wrong = make_crypticle(creds().aes).loads(blob, {}, false);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error(), crypto::errc::bad_mac);
  expect_plaintext_repacks(creds().session, blob, 8, "return test.ping");
}

TEST(Golden, ReturnReplyCarriesTheRequestNonce) {
  wire::frame req = parse_frame("return_test_ping.bin");
  wire::frame f = parse_frame("return_test_ping_reply.bin");
  EXPECT_EQ(f.head, req.head);
  ASSERT_TRUE(f.body.is_binary()) << "send reply body is bin";
  const std::string blob = bytes_of(&f.body);
  const std::string nonce = cap_nonce("return_test_ping.bin");
  auto c = make_crypticle(creds().session);
  auto v = c.loads(blob, nonce, false);
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_TRUE(v->is_null()) << "the master answers _return with None";
  std::string other = nonce;
  other[0] = other[0] == '0' ? '1' : '0';
  auto bad = c.loads(blob, other, false);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), crypto::errc::bad_nonce);
  expect_plaintext_repacks(creds().session, blob, 8 + 32, "return reply");
}

TEST(Golden, ReturnCmdRun) {
  value load = open_request("return_cmd_run.bin");
  ASSERT_TRUE(load.is_object());
  EXPECT_EQ(text_of(load, "cmd"), "_return");
  EXPECT_EQ(text_of(load, "fun"), "cmd.run");
  EXPECT_EQ(text_of(load, "jid"), cap_text(capture()["jids"]["cmd_run"]));
  const value& cli = capture()["cli_output"]["cmd_run"][minion_id()];
  ASSERT_TRUE(cli.is_string());
  EXPECT_EQ(text_of(load, "return"), cli.get<std::string>());
  expect_valid_tok(load, "return cmd.run");
  wire::frame f = parse_frame("return_cmd_run.bin");
  expect_plaintext_repacks(creds().session, bytes_of(wire::find(f.body, "load")), 8, "return cmd.run");
}

TEST(Golden, MinionEvent) {
  std::string nonce;
  value load = open_request("minion_event.bin", &nonce);
  ASSERT_TRUE(load.is_object());
  EXPECT_EQ(text_of(load, "cmd"), "_minion_event");
  EXPECT_EQ(text_of(load, "id"), minion_id());
  EXPECT_EQ(text_of(load, "tag"), cap_text(capture()["frames"]["minion_event.bin"]["tag"]));
  EXPECT_EQ(nonce, cap_nonce("minion_event.bin"));
  ASSERT_NE(wire::find(load, "data"), nullptr);
  ASSERT_NE(wire::find(load, "pretag"), nullptr);
  EXPECT_TRUE(wire::find(load, "pretag")->is_null());
  expect_valid_tok(load, "minion event");
  EXPECT_EQ(keys_of(load),
            (std::vector<std::string>{"id", "cmd", "pretag", "tok", "data", "tag", "nonce", "ts"}));
  wire::frame f = parse_frame("minion_event.bin");
  expect_plaintext_repacks(creds().session, bytes_of(wire::find(f.body, "load")), 8, "minion event");
}

TEST(Golden, PillarRequest) {
  std::string nonce;
  value load = open_request("pillar_request.bin", &nonce);
  ASSERT_TRUE(load.is_object());
  EXPECT_EQ(text_of(load, "cmd"), "_pillar");
  EXPECT_EQ(text_of(load, "id"), minion_id());
  EXPECT_EQ(text_of(load, "ver"), "2");
  EXPECT_EQ(nonce, cap_nonce("pillar_request.bin"));
  const value* grains = wire::find(load, "grains");
  ASSERT_NE(grains, nullptr);
  ASSERT_TRUE(grains->is_object());
  EXPECT_EQ(text_of(*grains, "id"), minion_id());
  EXPECT_EQ(text_of(*grains, "saltversion"), cap_text(capture()["salt_version"]));
  EXPECT_TRUE(wire::find(load, "saltenv") && wire::find(load, "saltenv")->is_null());
  EXPECT_TRUE(wire::find(load, "pillarenv") && wire::find(load, "pillarenv")->is_null());
  EXPECT_TRUE(wire::find(load, "pillar_override") && wire::find(load, "pillar_override")->is_object());
  EXPECT_TRUE(wire::find(load, "extra_minion_data") && wire::find(load, "extra_minion_data")->is_object());
  expect_valid_tok(load, "pillar request");
  EXPECT_EQ(keys_of(load), (std::vector<std::string>{"id", "grains", "saltenv", "pillarenv", "pillar_override",
                                                      "extra_minion_data", "ver", "cmd", "nonce", "ts", "tok"}));
  wire::frame f = parse_frame("pillar_request.bin");
  // The full grains map (nested maps, lists of lists, nil, bools, big ints) re-encodes exactly.
  expect_plaintext_repacks(creds().session, bytes_of(wire::find(f.body, "load")), 8, "pillar request");
}

TEST(Golden, PillarReplySendPrivate) {
  wire::frame req = parse_frame("pillar_request.bin");
  const auto enc = crypto::parse_enc_algo(text_of(req.body, "enc_algo"));
  const auto sga = crypto::parse_sig_algo(text_of(req.body, "sig_algo"));
  ASSERT_TRUE(enc && sga);

  wire::frame f = parse_frame("pillar_reply.bin");
  EXPECT_EQ(f.head, req.head);
  ASSERT_TRUE(f.body.is_object()) << "send_private body is a map";
  EXPECT_EQ(keys_of(f.body), (std::vector<std::string>{"key", "pillar"}));
  ASSERT_TRUE(wire::find(f.body, "key")->is_binary());
  ASSERT_TRUE(wire::find(f.body, "pillar")->is_binary());
  const std::string key_bytes = bytes_of(wire::find(f.body, "key"));

  auto k = crypto::oaep_decrypt(keys().minion_priv, key_bytes, *enc);
  ASSERT_TRUE(k) << k.error().message();
  EXPECT_EQ(k->size(), 76u);
  EXPECT_NE(*k, creds().aes);
  EXPECT_NE(*k, creds().session);
  auto c = make_crypticle(*k);
  const std::string blob = bytes_of(wire::find(f.body, "pillar"));
  auto wrapped = c.loads(blob);
  ASSERT_TRUE(wrapped) << wrapped.error().message();
  EXPECT_EQ(keys_of(*wrapped), (std::vector<std::string>{"data", "sig"}));
  const std::string data = bytes_of(wire::find(*wrapped, "data"));
  const std::string sig = bytes_of(wire::find(*wrapped, "sig"));
  EXPECT_TRUE(crypto::verify(keys().master_pub, data, sig, *sga));
  EXPECT_FALSE(crypto::verify(keys().master_pub, data + "x", sig, *sga));

  auto inner = wire::unpack(data);
  ASSERT_TRUE(inner) << inner.error().message();
  EXPECT_EQ(wire::pack_payload(*inner), data) << "salt_payload re-encode differs";
  EXPECT_EQ(keys_of(*inner), (std::vector<std::string>{"key", "pillar", "nonce"}));
  EXPECT_EQ(bytes_of(wire::find(*inner, "key")), key_bytes);
  EXPECT_EQ(text_of(*inner, "nonce"), cap_nonce("pillar_request.bin"));
  const value* pillar = wire::find(*inner, "pillar");
  ASSERT_NE(pillar, nullptr);
  EXPECT_EQ(wire::decode_embedded_strs(*pillar), capture()["pillar"]);
  expect_plaintext_repacks(*k, blob, 8, "pillar wrapper");
}

TEST(Golden, RegisterResources) {
  // 3008 minions send _register_resources at start (not in the reference's catalogue).
  std::string nonce;
  value load = open_request("register_resources.bin", &nonce);
  ASSERT_TRUE(load.is_object());
  EXPECT_EQ(text_of(load, "cmd"), "_register_resources");
  EXPECT_EQ(text_of(load, "id"), minion_id());
  EXPECT_EQ(nonce, cap_nonce("register_resources.bin"));
  ASSERT_NE(wire::find(load, "resources"), nullptr);
  EXPECT_TRUE(wire::find(load, "resources")->is_object());
  ASSERT_NE(wire::find(load, "resource_grains"), nullptr);
  EXPECT_TRUE(wire::find(load, "resource_grains")->is_object());
  expect_valid_tok(load, "register resources");
  EXPECT_EQ(keys_of(load),
            (std::vector<std::string>{"cmd", "id", "resources", "resource_grains", "tok", "nonce", "ts"}));

  wire::frame req = parse_frame("register_resources.bin");
  wire::frame f = parse_frame("register_resources_reply.bin");
  EXPECT_EQ(f.head, req.head);
  auto reply = make_crypticle(creds().session).loads(bytes_of(&f.body), nonce, false);
  ASSERT_TRUE(reply) << reply.error().message();
  EXPECT_EQ(*reply, value(true)) << "Salt's master answers true";
}
