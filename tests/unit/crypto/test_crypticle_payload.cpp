// Unit tests for Crypticle dumps/loads: pickle prefix, nonce, serial, Salt's ciphertexts.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/crypto/crypticle.hpp"
#include "core/wire/msgpack.hpp"
#include "test_helpers.hpp"

using namespace sylvite;
using namespace sylvite::crypto;

namespace {

crypticle make() { return *crypticle::from_key_string(crypticle::generate_key_string()); }

wire::value job() {
  wire::value v = wire::value::object();
  v["fun"] = "test.ping";
  v["arg"] = wire::value::array({1, "two", nullptr, true, 3.5});
  v["jid"] = "20240101010101010101";
  return v;
}

}  // namespace

TEST(CrypticlePayload, DumpsLoadsRoundTrip) {
  const crypticle c = make();
  for (const wire::value& v : {job(), wire::value::object(), wire::value("text"), wire::value(42),
                               wire::value::array({1, 2})}) {
    auto r = c.loads(c.dumps(v));
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(*r, v);
  }
  // The plaintext layout: "pickle::" + salt-payload msgpack.
  auto plain = c.decrypt(c.dumps(job()));
  ASSERT_TRUE(plain);
  EXPECT_EQ(*plain, "pickle::" + wire::pack(job(), wire::packing::salt_payload));
}

TEST(CrypticlePayload, Nonce) {
  const crypticle c = make();
  const std::string nonce = uuid4_hex();
  const std::string ct = c.dumps(job(), nonce);
  EXPECT_EQ(*c.decrypt(ct), "pickle::" + nonce + wire::pack(job(), wire::packing::salt_payload));
  auto r = c.loads(ct, nonce);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, job());
  EXPECT_EQ(c.loads(ct, uuid4_hex()).error(), make_error_code(errc::bad_nonce));
  EXPECT_EQ(c.loads(ct, nonce.substr(0, 31)).error(), make_error_code(errc::bad_nonce));
  // Expected a nonce, got a message without one (short and long payloads).
  EXPECT_EQ(c.loads(c.dumps(job()), nonce).error(), make_error_code(errc::bad_nonce));
  EXPECT_EQ(c.loads(c.dumps(wire::value(1)), nonce).error(), make_error_code(errc::bad_nonce));
  // Got a nonce, expected none: the nonce is not msgpack of one object.
  EXPECT_FALSE(c.loads(ct));
}

TEST(CrypticlePayload, NoPickleIsBadFormat) {
  const crypticle c = make();
  EXPECT_EQ(c.loads(c.encrypt("hello")).error(), make_error_code(errc::bad_format));
  EXPECT_EQ(c.loads(c.encrypt("")).error(), make_error_code(errc::bad_format));
  EXPECT_EQ(c.loads(c.encrypt("pickle:")).error(), make_error_code(errc::bad_format));
  EXPECT_FALSE(c.loads(c.encrypt("pickle::")));           // no object
  EXPECT_FALSE(c.loads(c.encrypt("pickle::\xc1")));       // invalid msgpack
  EXPECT_FALSE(c.loads(c.encrypt("pickle::\x01\x02")));   // trailing bytes
}

TEST(CrypticlePayload, DecryptErrorsPassThrough) {
  const crypticle c = make(), other = make();
  const std::string ct = c.dumps(job());
  EXPECT_EQ(other.loads(ct).error(), make_error_code(errc::bad_mac));
  EXPECT_EQ(c.loads(ct.substr(0, 63)).error(), make_error_code(errc::bad_format));
  for (std::size_t n = 0; n < ct.size(); ++n) EXPECT_FALSE(c.loads(ct.substr(0, n))) << n;
}

TEST(CrypticlePayload, Serial) {
  const crypticle sender = make();
  crypticle c = *crypticle::from_key_string(sender.key_string());
  auto with_serial = [&](std::int64_t s) {
    wire::value v = job();
    v["serial"] = s;
    return sender.dumps(v);
  };
  EXPECT_EQ(c.loads(with_serial(0)).error(), make_error_code(errc::stale_serial));  // starts at 0
  auto r = c.loads(with_serial(1));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, job());  // "serial" removed
  EXPECT_EQ(c.loads(with_serial(1)).error(), make_error_code(errc::stale_serial));  // replay
  EXPECT_TRUE(c.loads(with_serial(5)));
  EXPECT_EQ(c.loads(with_serial(3)).error(), make_error_code(errc::stale_serial));
  // check_serial=false: removed, neither checked nor recorded.
  r = c.loads(with_serial(2), {}, false);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, job());
  EXPECT_TRUE(c.loads(with_serial(6)));
  // Copies carry the counter.
  crypticle d(c);
  EXPECT_EQ(d.loads(with_serial(6)).error(), make_error_code(errc::stale_serial));
  crypticle e;
  e = c;
  EXPECT_EQ(e.loads(with_serial(6)).error(), make_error_code(errc::stale_serial));
  // Maps without serial and non-maps are untouched.
  EXPECT_TRUE(c.loads(sender.dumps(job())));
  // A serial that is not an integer.
  wire::value v = job();
  v["serial"] = "7";
  EXPECT_EQ(c.loads(sender.dumps(v)).error(), make_error_code(errc::bad_format));
}

TEST(CrypticlePayload, ConcurrentReplayAcceptedOnce) {
  const crypticle sender = make();
  const crypticle c = *crypticle::from_key_string(sender.key_string());
  wire::value v = job();
  v["serial"] = 100;
  const std::string ct = sender.dumps(v);
  std::atomic<int> ok{0}, stale{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto r = c.loads(ct);
        if (r) ++ok;
        else if (r.error() == make_error_code(errc::stale_serial)) ++stale;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(stale.load(), 99);
}

// ---- Salt's own dumps (tests/fixtures/vectors/crypto.json) -------------------------------

TEST(CrypticleVectors, LoadsSaltDumps) {
  const auto& v = test::vectors()["crypticle"];
  const std::string ks = v["key_string"].get<std::string>();
  int n = 0;
  for (const auto& e : v["dumps"]) {
    const crypticle c = *crypticle::from_key_string(ks);  // fresh serial counter
    const std::string nonce = e["nonce"].is_null() ? std::string() : e["nonce"].get<std::string>();
    auto r = c.loads(test::unhex(e["cipher"].get<std::string>()), nonce);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(wire::decode_embedded_strs(*r), wire::value(e["expect"])) << e["expect"].dump();
    if (e.contains("serial")) {
      EXPECT_EQ(c.loads(test::unhex(e["cipher"].get<std::string>())).error(),
                make_error_code(errc::stale_serial));
    }
    ++n;
  }
  EXPECT_EQ(n, 11);
  const crypticle c = *crypticle::from_key_string(ks);
  EXPECT_EQ(c.loads(test::unhex(v["no_pickle"]["cipher"].get<std::string>())).error(),
            make_error_code(errc::bad_format));
}

TEST(CrypticleVectors, DumpsBytesEqualSaltPayload) {
  // Same key, our dumps decrypts to the same plaintext Salt encrypted (IV aside).
  const auto& v = test::vectors()["crypticle"];
  const crypticle c = *crypticle::from_key_string(v["key_string"].get<std::string>());
  for (const auto& e : v["dumps"]) {
    const std::string nonce = e["nonce"].is_null() ? std::string() : e["nonce"].get<std::string>();
    auto salt_plain = c.decrypt(test::unhex(e["cipher"].get<std::string>()));
    ASSERT_TRUE(salt_plain);
    auto my_plain = c.decrypt(c.dumps(wire::value(e["obj"]), nonce));
    ASSERT_TRUE(my_plain);
    EXPECT_EQ(hex(*my_plain), hex(*salt_plain)) << e["obj"].dump();
  }
}
