// Channel codecs: AES request envelope/reply, send_private pillar, hello, publish decode.
#include <gtest/gtest.h>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/wire/msgpack.hpp"
#include "minion/channel.hpp"
#include "minion/errors.hpp"

namespace mn = sylvite::minion;
namespace crypto = sylvite::crypto;
namespace wire = sylvite::wire;

namespace {

crypto::crypticle fresh() { return *crypto::crypticle::from_key_string(crypto::crypticle::generate_key_string()); }

const crypto::rsa_key& master_key() {
  static const crypto::rsa_key k = *crypto::rsa_key::generate(2048);
  return k;
}
const crypto::rsa_key& minion_key() {
  static const crypto::rsa_key k = *crypto::rsa_key::generate(2048);
  return k;
}

mn::request_identity who() { return {"m1", "TOKBYTES", "OAEP-SHA1", "PKCS1v15-SHA1"}; }

// What a Salt master's send_private does (wire protocol 4.4).
wire::value private_reply(const wire::value& pillar, const std::string& nonce, bool tamper = false,
                          bool wrong_key_echo = false) {
  auto k = crypto::crypticle::generate_key_string();
  auto minion_pub = *crypto::rsa_key::from_public_pem(minion_key().public_pem());
  std::string key_ct = *crypto::oaep_encrypt(minion_pub, k);
  wire::value inner = wire::value::object();
  inner["key"] = wire::make_bin(wrong_key_echo ? std::string("other") : key_ct);
  inner["pillar"] = pillar;
  inner["nonce"] = nonce;
  std::string data = wire::pack_payload(inner);
  std::string sig = *crypto::sign(master_key(), data);
  if (tamper) sig[5] = static_cast<char>(sig[5] ^ 1);
  wire::value signed_msg = wire::value::object();
  signed_msg["data"] = wire::make_bin(data);
  signed_msg["sig"] = wire::make_bin(sig);
  auto pc = *crypto::crypticle::from_key_string(k);
  wire::value reply = wire::value::object();
  reply["key"] = wire::make_bin(key_ct);
  reply["pillar"] = wire::make_bin(pc.dumps(signed_msg));
  return reply;
}

}  // namespace

TEST(Channel, PackageAesEnvelope) {
  auto sess = fresh();
  wire::value load = {{"cmd", "_return"}, {"id", "m1"}, {"jid", "1"}};
  auto env = mn::package_aes(load, who(), sess, std::string(32, 'n'), 1700000000);
  std::vector<std::string> keys;
  for (const auto& [k, v] : env.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"enc", "load", "version", "id", "enc_algo", "sig_algo"}));
  EXPECT_EQ(env["enc"], "aes");
  EXPECT_EQ(env["version"], 3);
  EXPECT_EQ(env["id"], "m1");
  auto inner = sess.loads(*wire::as_bytes(env["load"]), {}, false);
  ASSERT_TRUE(inner);
  std::vector<std::string> ik;
  for (const auto& [k, v] : inner->items()) ik.push_back(k);
  // id keeps its place; nonce, ts, tok appended (Python dict semantics).
  EXPECT_EQ(ik, (std::vector<std::string>{"cmd", "id", "jid", "nonce", "ts", "tok"}));
  EXPECT_EQ((*inner)["nonce"], std::string(32, 'n'));
  EXPECT_EQ((*inner)["ts"], 1700000000);
  EXPECT_EQ(*wire::as_bytes((*inner)["tok"]), "TOKBYTES");
}

TEST(Channel, DecodeAesReply) {
  auto sess = fresh();
  const std::string nonce = crypto::uuid4_hex();
  auto good = wire::make_bin(sess.dumps(wire::value{{"ret", true}}, nonce));
  auto r = mn::decode_aes_reply(good, sess, nonce);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["ret"], true);
  // Wrong nonce, text reply, other key: all "re-auth and retry".
  EXPECT_EQ(mn::decode_aes_reply(good, sess, crypto::uuid4_hex()).error(), mn::errc::bad_reply);
  EXPECT_EQ(mn::decode_aes_reply(wire::value("bad load"), sess, nonce).error(), mn::errc::bad_reply);
  auto other = fresh();
  EXPECT_EQ(mn::decode_aes_reply(good, other, nonce).error(), mn::errc::bad_reply);
  EXPECT_EQ(mn::decode_aes_reply(wire::value::object(), sess, nonce).error(), mn::errc::bad_reply);
  // A nil reply decodes to null.
  auto n = mn::decode_aes_reply(wire::value(), sess, nonce);
  ASSERT_TRUE(n);
  EXPECT_TRUE(n->is_null());
}

TEST(Channel, PrivatePillarReply) {
  const std::string nonce = crypto::uuid4_hex();
  wire::value pillar = {{"color", "blue"}, {"nested", {{"k", 1}}}};
  auto mpub = *crypto::rsa_key::from_public_pem(master_key().public_pem());
  auto ok = mn::decode_private_reply(private_reply(pillar, nonce), minion_key(), crypto::enc_algo::oaep_sha1, mpub,
                                     crypto::sig_algo::pkcs1v15_sha1, nonce);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, pillar);
  EXPECT_EQ(mn::decode_private_reply(private_reply(pillar, nonce, true), minion_key(), crypto::enc_algo::oaep_sha1,
                                     mpub, crypto::sig_algo::pkcs1v15_sha1, nonce)
                .error(),
            mn::errc::bad_pillar);
  EXPECT_EQ(mn::decode_private_reply(private_reply(pillar, crypto::uuid4_hex()), minion_key(),
                                     crypto::enc_algo::oaep_sha1, mpub, crypto::sig_algo::pkcs1v15_sha1, nonce)
                .error(),
            mn::errc::bad_pillar);
  EXPECT_EQ(mn::decode_private_reply(private_reply(pillar, nonce, false, true), minion_key(),
                                     crypto::enc_algo::oaep_sha1, mpub, crypto::sig_algo::pkcs1v15_sha1, nonce)
                .error(),
            mn::errc::bad_pillar);
  // No key at all (e.g. Crypticle(AES).dumps({}) or "bad load"): re-auth path.
  EXPECT_EQ(mn::decode_private_reply(wire::value("bad load"), minion_key(), crypto::enc_algo::oaep_sha1, mpub,
                                     crypto::sig_algo::pkcs1v15_sha1, nonce)
                .error(),
            mn::errc::bad_reply);
}

TEST(Channel, Hello) {
  auto aes = fresh();
  auto h = mn::make_hello("m1", "TOK", aes);
  EXPECT_EQ(h["enc"], "aes");
  EXPECT_EQ(h["version"], 3);
  auto load = aes.loads(*wire::as_bytes(h["load"]));
  ASSERT_TRUE(load);
  EXPECT_EQ((*load)["id"], "m1");
  EXPECT_EQ(*wire::as_bytes((*load)["tok"]), "TOK");
}

namespace {

// A Salt publish body: payload {enc, load, [sig_algo, sig]} packed as a Salt payload.
wire::value publish_body(const crypto::crypticle& aes, const wire::value& load, bool sign = false, bool bad_sig = false) {
  wire::value payload = wire::value::object();
  payload["enc"] = "aes";
  std::string ct = aes.dumps(load);
  payload["load"] = wire::make_bin(ct);
  if (sign) {
    payload["sig_algo"] = "PKCS1v15-SHA1";
    std::string sig = *crypto::sign(master_key(), bad_sig ? ct + "x" : ct);
    payload["sig"] = wire::make_bin(sig);
  }
  return wire::make_bin(wire::pack_payload(payload));
}

}  // namespace

TEST(Channel, DecodePublish) {
  auto aes = fresh();
  auto decoder = *crypto::crypticle::from_key_string(aes.key_string());  // the minion's copy (own serial)
  wire::value job = {{"fun", "test.ping"}, {"arg", wire::value::array()}, {"tgt", "*"}, {"jid", "1"}, {"serial", 1}};
  auto d = mn::decode_publish(publish_body(aes, job), decoder, false, nullptr);
  ASSERT_EQ(d.verdict, mn::publish_verdict::ok) << d.reason;
  EXPECT_EQ(d.load["fun"], "test.ping");
  EXPECT_FALSE(d.load.contains("serial"));
  // Same serial again: dropped.
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job), decoder, false, nullptr).verdict, mn::publish_verdict::drop);
  job["serial"] = 2;
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job), decoder, false, nullptr).verdict, mn::publish_verdict::ok);
  // Another AES key (master restarted): HMAC fails -> re-auth.
  auto newkey = fresh();
  job["serial"] = 1;
  EXPECT_EQ(mn::decode_publish(publish_body(newkey, job), decoder, false, nullptr).verdict, mn::publish_verdict::reauth);
  // sign_pub_messages on the minion: signature required and checked.
  auto mpub = *crypto::rsa_key::from_public_pem(master_key().public_pem());
  job["serial"] = 10;
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job), decoder, true, &mpub).verdict, mn::publish_verdict::drop);
  job["serial"] = 11;
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job, true, true), decoder, true, &mpub).verdict,
            mn::publish_verdict::drop);
  // verify_master_pubkey_sign: a signature that fails (a rotated cluster key) re-authenticates.
  job["serial"] = 111;
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job, true, true), decoder, true, &mpub, true).verdict,
            mn::publish_verdict::reauth);
  job["serial"] = 12;
  EXPECT_EQ(mn::decode_publish(publish_body(aes, job, true), decoder, true, &mpub).verdict, mn::publish_verdict::ok);
  // Garbage and non-aes.
  EXPECT_EQ(mn::decode_publish(wire::make_bin("\xc1\xc1"), decoder, false, nullptr).verdict, mn::publish_verdict::drop);
  wire::value clear = wire::make_bin(wire::pack_payload(wire::value{{"enc", "clear"}, {"load", "x"}}));
  EXPECT_EQ(mn::decode_publish(clear, decoder, false, nullptr).verdict, mn::publish_verdict::ignore);
}
