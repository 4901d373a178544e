// Unit tests for core/wire/msgpack.hpp: golden byte vectors for both packings, decoding
// rules, truncation/garbage/limit handling, the resumable scanner.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/wire/msgpack.hpp"
#include "wire_test_util.hpp"

namespace sylvite::wire {
namespace {

using test::hex;
using test::unhex;

std::string pf(const value& v) { return hex(pack(v, packing::frame)); }
std::string pp(const value& v) { return hex(pack(v, packing::salt_payload)); }
std::string h(std::string_view s) { return hex(unhex(s)); }  // normalise spaced hex

// ---------------------------------------------------------------------------------
// Encoding: scalars

TEST(WirePack, NilBool) {
  EXPECT_EQ(pf(nullptr), "c0");
  EXPECT_EQ(pf(true), "c3");
  EXPECT_EQ(pf(false), "c2");
  EXPECT_EQ(pp(nullptr), "c0");
  EXPECT_EQ(pp(true), "c3");
  EXPECT_EQ(pp(false), "c2");
}

struct int_case {
  std::int64_t v;
  const char* hex;
};

TEST(WirePack, IntsSmallestEncodingBothSignednesses) {
  // Non-negative values: uint family whether the json number is signed or unsigned
  // (Python msgpack packs every int >= 0 as uint).
  const int_case pos[] = {
      {0, "00"},                          // positive fixint
      {1, "01"},
      {127, "7f"},                        // largest positive fixint
      {128, "cc 80"},                     // uint8
      {255, "cc ff"},
      {256, "cd 0100"},                   // uint16
      {65535, "cd ffff"},
      {65536, "ce 00010000"},             // uint32
      {4294967295, "ce ffffffff"},
      {4294967296, "cf 0000000100000000"},  // uint64
      {std::numeric_limits<std::int64_t>::max(), "cf 7fffffffffffffff"},
  };
  for (const auto& c : pos) {
    EXPECT_EQ(pf(value(static_cast<std::int64_t>(c.v))), h(c.hex)) << c.v;
    EXPECT_EQ(pf(value(static_cast<std::uint64_t>(c.v))), h(c.hex)) << c.v;
    EXPECT_EQ(pp(value(static_cast<std::int64_t>(c.v))), h(c.hex)) << c.v;
  }
  EXPECT_EQ(pf(value(std::uint64_t{9223372036854775808u})), h("cf 8000000000000000"));
  EXPECT_EQ(pf(value(std::numeric_limits<std::uint64_t>::max())), h("cf ffffffffffffffff"));
  // Negative values: int family, smallest width.
  const int_case neg[] = {
      {-1, "ff"},                         // negative fixint
      {-32, "e0"},                        // smallest negative fixint
      {-33, "d0 df"},                     // int8
      {-128, "d0 80"},
      {-129, "d1 ff7f"},                  // int16
      {-32768, "d1 8000"},
      {-32769, "d2 ffff7fff"},            // int32
      {-2147483648, "d2 80000000"},
      {-2147483649, "d3 ffffffff7fffffff"},  // int64
      {std::numeric_limits<std::int64_t>::min(), "d3 8000000000000000"},
  };
  for (const auto& c : neg) {
    EXPECT_EQ(pf(value(c.v)), h(c.hex)) << c.v;
    EXPECT_EQ(pp(value(c.v)), h(c.hex)) << c.v;
  }
}

TEST(WirePack, FloatsAreFloat64) {
  EXPECT_EQ(pf(1.5), h("cb 3ff8000000000000"));       // 0xcb + IEEE754 big-endian
  EXPECT_EQ(pf(0.0), h("cb 0000000000000000"));
  EXPECT_EQ(pf(-0.0), h("cb 8000000000000000"));
  EXPECT_EQ(pf(1.0), h("cb 3ff0000000000000"));       // integral float stays a float
  EXPECT_EQ(pp(0.1), h("cb 3fb999999999999a"));
  EXPECT_EQ(pf(std::numeric_limits<double>::infinity()), h("cb 7ff0000000000000"));
  EXPECT_EQ(pf(std::numeric_limits<double>::quiet_NaN()), h("cb 7ff8000000000000"));
}

// String-length boundaries: the two packings differ only in str8.
struct len_case {
  std::size_t n;
  const char* frame_prefix;
  const char* payload_prefix;
};

TEST(WirePack, StringLengthBoundaries) {
  const len_case cases[] = {
      {0, "a0", "a0"},                      // fixstr, len 0
      {31, "bf", "bf"},                     // fixstr, largest
      {32, "d9 20", "da 0020"},             // frame: str8; payload: no str8 -> str16
      {255, "d9 ff", "da 00ff"},            // str8 largest / str16
      {256, "da 0100", "da 0100"},          // str16 both
      {65535, "da ffff", "da ffff"},        // str16 largest
      {65536, "db 00010000", "db 00010000"},  // str32 both
  };
  for (const auto& c : cases) {
    const std::string s(c.n, 'x');
    const std::string f = pack(value(s), packing::frame);
    const std::string p = pack(value(s), packing::salt_payload);
    const std::string fp = unhex(c.frame_prefix), ppre = unhex(c.payload_prefix);
    EXPECT_EQ(hex(f.substr(0, fp.size())), hex(fp)) << c.n;
    EXPECT_EQ(f.size(), fp.size() + c.n) << c.n;
    EXPECT_EQ(f.substr(fp.size()), s);
    EXPECT_EQ(hex(p.substr(0, ppre.size())), hex(ppre)) << c.n;
    EXPECT_EQ(p.size(), ppre.size() + c.n) << c.n;
    // Both decode back to the same text.
    EXPECT_EQ(unpack(f).value(), s);
    EXPECT_EQ(unpack(p).value(), s);
  }
}

TEST(WirePack, BinaryLengthBoundaries) {
  const len_case cases[] = {
      {0, "c4 00", "a0"},                   // frame: bin8; payload: raw str (fixstr)
      {31, "c4 1f", "bf"},
      {32, "c4 20", "da 0020"},
      {255, "c4 ff", "da 00ff"},
      {256, "c5 0100", "da 0100"},          // bin16
      {65535, "c5 ffff", "da ffff"},
      {65536, "c6 00010000", "db 00010000"},  // bin32 / str32
  };
  for (const auto& c : cases) {
    const std::string s(c.n, '\xfe');  // not UTF-8: decodes back to binary either way
    const value b = make_bin(s);
    const std::string f = pack(b, packing::frame);
    const std::string p = pack(b, packing::salt_payload);
    const std::string fp = unhex(c.frame_prefix), ppre = unhex(c.payload_prefix);
    EXPECT_EQ(hex(f.substr(0, fp.size())), hex(fp)) << c.n;
    EXPECT_EQ(f.size(), fp.size() + c.n);
    EXPECT_EQ(hex(p.substr(0, ppre.size())), hex(ppre)) << c.n;
    EXPECT_EQ(p.size(), ppre.size() + c.n);
    if (c.n > 0) {
      EXPECT_EQ(unpack(f).value(), b);
      EXPECT_EQ(unpack(p).value(), b);
    }
  }
  // Empty raw str decodes as the empty text (it is valid UTF-8).
  EXPECT_EQ(unpack(unhex("a0")).value(), "");
  EXPECT_EQ(unpack(unhex("c4 00")).value(), make_bin(""));
}

TEST(WirePack, ExtSaltDatetimeAndConstant) {
  // Salt datetime: ext 78 with "%Y%m%dT%H:%M:%S.%f" ASCII (24 bytes -> ext8).
  const std::string dt = "20240102T03:04:05.123456";
  const value v = value::binary(value::binary_t::container_type(dt.begin(), dt.end()), 78);
  const std::string expect = "c7 18 4e" + hex(dt);  // ext8, len 24, type 78, data
  EXPECT_EQ(pf(v), h(expect));
  EXPECT_EQ(pp(v), h(expect));  // ext is ext in both packings
  auto back = unpack(unhex(expect));
  ASSERT_TRUE(back);
  ASSERT_TRUE(back->is_binary());
  EXPECT_EQ(back->get_binary().subtype(), 78u);
  EXPECT_EQ(*back, v);
  // Salt constant: ext 79 whose body is the msgpack array ["name", value].
  const std::string body = pack(value::array({"Constant", nullptr}), packing::frame);
  const value c = value::binary(value::binary_t::container_type(body.begin(), body.end()), 79);
  EXPECT_EQ(pf(c), h("c7 0b 4f  92 a8 436f6e7374616e74 c0"));
  EXPECT_EQ(unpack(pack(c, packing::frame)).value(), c);
  // fixext sizes 1/2/4/8/16 and ext8/16/32 around them.
  struct {
    std::size_t n;
    const char* prefix;
  } const sizes[] = {{1, "d4 4e"}, {2, "d5 4e"}, {4, "d6 4e"}, {8, "d7 4e"}, {16, "d8 4e"}, {0, "c7 00 4e"},
                     {3, "c7 03 4e"}, {17, "c7 11 4e"}, {256, "c8 0100 4e"}, {65536, "c9 00010000 4e"}};
  for (const auto& s : sizes) {
    const value e = value::binary(value::binary_t::container_type(s.n, 0x5a), 78);
    const std::string packed = pack(e, packing::frame);
    EXPECT_EQ(hex(packed.substr(0, unhex(s.prefix).size())), h(s.prefix)) << s.n;
    EXPECT_EQ(unpack(packed).value(), e) << s.n;
  }
  // Negative ext codes (e.g. -1, msgpack timestamp) keep their byte as subtype.
  auto ts = unpack(unhex("d6 ff 00000001"));
  ASSERT_TRUE(ts);
  EXPECT_EQ(ts->get_binary().subtype(), 0xffu);
  EXPECT_EQ(pf(*ts), h("d6 ff 00000001"));
}

TEST(WirePack, ContainersSizes) {
  EXPECT_EQ(pf(value::array()), "90");
  EXPECT_EQ(pf(value::object()), "80");
  value a15 = value::array(), a16 = value::array();
  for (int i = 0; i < 15; ++i) a15.push_back(nullptr);
  for (int i = 0; i < 16; ++i) a16.push_back(nullptr);
  std::string nils15;
  for (int i = 0; i < 15; ++i) nils15 += "c0";
  EXPECT_EQ(pf(a15), "9f" + nils15);               // fixarray 15
  EXPECT_EQ(pf(a16).substr(0, 6), "dc0010");      // array16
  value big = value::array();
  for (int i = 0; i < 65536; ++i) big.push_back(0);
  EXPECT_EQ(pf(big).substr(0, 10), "dd00010000");  // array32
  value m15 = value::object(), m16 = value::object();
  for (int i = 0; i < 15; ++i) m15[std::to_string(i)] = i;
  for (int i = 0; i < 16; ++i) m16[std::to_string(i)] = i;
  EXPECT_EQ(pf(m15).substr(0, 2), "8f");           // fixmap 15
  EXPECT_EQ(pf(m16).substr(0, 6), "de0010");       // map16
  EXPECT_EQ(unpack(pack(big, packing::frame)).value(), big);
  EXPECT_EQ(unpack(pack(m16, packing::frame)).value(), m16);
}

TEST(WirePack, NestedAndOrderKept) {
  value v = value::object();
  v["zeta"] = 1;
  v["alpha"] = value::array({true, nullptr, -1, 2.5, make_bin("\x01")});
  v["m"] = value::object();
  v["m"]["k"] = "v";
  // Insertion order, not sorted.
  EXPECT_EQ(pf(v), h("83"                                   // fixmap(3)
                     "a4 7a657461 01"                       // "zeta": 1
                     "a5 616c706861 95 c3 c0 ff"            // "alpha": [true, nil, -1,
                     "cb 4004000000000000 c4 01 01"         //   2.5, bin8(1) 01]
                     "a1 6d 81 a1 6b a1 76"));              // "m": {"k": "v"}
  EXPECT_EQ(pp(v), h("83 a4 7a657461 01 a5 616c706861 95 c3 c0 ff"
                     "cb 4004000000000000 a1 01"            // bin -> raw fixstr in payload
                     "a1 6d 81 a1 6b a1 76"));
  EXPECT_EQ(unpack(pack(v, packing::frame)).value(), v);
}

TEST(WirePack, RequestFrameLayout) {
  // Reference section 2.3: a typical request frame, frame packing (new spec).
  value head = value::object();
  head["mid"] = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
  value body = value::object();
  body["enc"] = "aes";
  body["load"] = make_bin(std::string(300, '\xc3'));
  body["version"] = 3;
  body["id"] = "minion-1";
  body["enc_algo"] = "OAEP-SHA1";
  body["sig_algo"] = "PKCS1v15-SHA1";
  value fr = value::object();
  fr["head"] = head;
  fr["body"] = body;
  const std::string expect = h(
      "82"                                        // map(2)
      "a4 68656164"                               //   "head"
      "81"                                        //   map(1)
      "a3 6d6964"                                 //     "mid"
      "d9 24" + hex("1b4e28ba-2fa1-11d2-883f-0016d3cca427") +  // str8, len 36
      "a4 626f6479"                               //   "body"
      "86"                                        //   map(6)
      "a3 656e63 a3 616573"                       //     "enc": "aes"
      "a4 6c6f6164 c5 012c" + hex(std::string(300, '\xc3')) +  // "load": bin16(300)
      "a7 76657273696f6e 03"                      //     "version": 3
      "a2 6964 a8 6d696e696f6e2d31"               //     "id": "minion-1"
      "a8 656e635f616c676f a9 4f4145502d53484131"  //    "enc_algo": "OAEP-SHA1"
      "a8 7369675f616c676f ad 504b435331763135 2d53484131");  // "sig_algo": "PKCS1v15-SHA1"
  EXPECT_EQ(pf(fr), expect);
}

// ---------------------------------------------------------------------------------
// Decoding rules

TEST(WireUnpack, IntsKeepSignedness) {
  auto u = unpack(unhex("cf ffffffffffffffff"));
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->is_number_unsigned());
  EXPECT_EQ(u->get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  auto i = unpack(unhex("d3 8000000000000000"));
  ASSERT_TRUE(i);
  EXPECT_TRUE(i->is_number_integer());
  EXPECT_FALSE(i->is_number_unsigned());
  EXPECT_EQ(i->get<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  EXPECT_TRUE(unpack(unhex("05")).value().is_number_unsigned());
  EXPECT_EQ(unpack(unhex("ff")).value().get<std::int64_t>(), -1);
  EXPECT_EQ(unpack(unhex("d0 05")).value(), 5);  // non-canonical widths accepted
  EXPECT_EQ(unpack(unhex("d1 fffe")).value(), -2);
  EXPECT_EQ(unpack(unhex("d2 fffffffd")).value(), -3);
  EXPECT_EQ(unpack(unhex("cd 0001")).value(), 1);
  EXPECT_EQ(unpack(unhex("ce 00000001")).value(), 1);
}

TEST(WireUnpack, Floats) {
  auto f32 = unpack(unhex("ca 3fc00000"));  // float32 1.5
  ASSERT_TRUE(f32);
  EXPECT_TRUE(f32->is_number_float());
  EXPECT_EQ(f32->get<double>(), 1.5);
  EXPECT_EQ(unpack(unhex("ca 3dcccccd")).value().get<double>(), static_cast<double>(0.1f));
  EXPECT_EQ(unpack(unhex("cb 3ff8000000000000")).value().get<double>(), 1.5);
  EXPECT_TRUE(std::isnan(unpack(unhex("cb 7ff8000000000000")).value().get<double>()));
}

TEST(WireUnpack, StrFamilyUtf8RuleBinAlwaysBinary) {
  EXPECT_EQ(unpack(unhex("a3 616263")).value(), "abc");
  EXPECT_EQ(unpack(unhex("d9 03 616263")).value(), "abc");
  EXPECT_EQ(unpack(unhex("da 0003 616263")).value(), "abc");
  EXPECT_EQ(unpack(unhex("db 00000003 616263")).value(), "abc");
  EXPECT_EQ(unpack(unhex("a2 fffe")).value(), make_bin("\xff\xfe"));    // invalid UTF-8 -> binary
  EXPECT_EQ(unpack(unhex("a3 eda080")).value(), make_bin("\xed\xa0\x80"));  // surrogate
  EXPECT_EQ(unpack(unhex("c4 03 616263")).value(), make_bin("abc"));  // bin stays binary
  EXPECT_EQ(unpack(unhex("c5 0001 61")).value(), make_bin("a"));
  EXPECT_EQ(unpack(unhex("c6 00000001 61")).value(), make_bin("a"));
}

TEST(WireUnpack, MapKeys) {
  // str and bin keys -> the key text.
  auto m = unpack(unhex("82 a1 61 01 c4 01 62 02"));
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)["a"], 1);
  EXPECT_EQ((*m)["b"], 2);
  // int / negative int / bool / nil keys -> their text.
  auto k = unpack(unhex("86 01 a1 61 ff a1 62 cf ffffffffffffffff a1 63 c3 a1 64 c2 a1 65 c0 a1 66"));
  ASSERT_TRUE(k);
  std::vector<std::string> keys;
  for (const auto& [key, v] : k->items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"1", "-1", "18446744073709551615", "true", "false", "null"}));
  // float key -> its JSON text.
  auto fk = unpack(unhex("81 cb 3ff8000000000000 01"));
  ASSERT_TRUE(fk);
  EXPECT_EQ((*fk)["1.5"], 1);
  // map, array and ext keys cannot be JSON keys.
  EXPECT_EQ(unpack(unhex("81 80 01")).error(), errc::bad_key);
  EXPECT_EQ(unpack(unhex("81 91 01 01")).error(), errc::bad_key);
  EXPECT_EQ(unpack(unhex("81 d4 4e 00 01")).error(), errc::bad_key);
  // ...also when nested.
  EXPECT_EQ(unpack(unhex("91 81 a1 61 81 90 c0")).error(), errc::bad_key);
}

TEST(WireUnpack, DuplicateKeysLastWins) {
  auto m = unpack(unhex("83 a1 61 01 a1 62 02 a1 61 03"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)["a"], 3);
  EXPECT_EQ(m->begin().key(), "a");  // first position kept
  // Int key 1 and str key "1" are the same JSON key.
  auto mixed = unpack(unhex("82 01 a1 78 a1 31 a1 79"));
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->size(), 1u);
  EXPECT_EQ((*mixed)["1"], "y");
  // Big maps use the hash index: same rule.
  std::string big = "de 0014";  // map16, 20 pairs: keys k0..k9 twice
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 10; ++i) big += "a2 6b3" + std::to_string(i) + hex(std::string(1, static_cast<char>(round * 10 + i)));
  auto b = unpack(unhex(big));
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(b->size(), 10u);
  int idx = 0;
  for (const auto& [key, v] : b->items()) {
    EXPECT_EQ(key, "k" + std::to_string(idx));
    EXPECT_EQ(v, 10 + idx);
    ++idx;
  }
}

TEST(WireUnpack, TrailingBytesAndPrefix) {
  EXPECT_EQ(unpack(unhex("01 02")).error(), errc::trailing_bytes);
  std::size_t used = 0;
  auto v = unpack_prefix(unhex("92 01 02 c3 ff"), used);
  ASSERT_TRUE(v);
  EXPECT_EQ(used, 3u);
  EXPECT_EQ(*v, value::array({1, 2}));
  used = 99;
  EXPECT_EQ(unpack_prefix(unhex("92 01"), used).error(), errc::incomplete);
  EXPECT_EQ(used, 99u);  // untouched on error
  EXPECT_EQ(scan_object(unhex("92 01 02 c3")).value(), 3u);
}

// ---------------------------------------------------------------------------------
// Truncation, garbage, limits

std::vector<std::string> valid_objects() {
  value nested = value::object();
  nested["head"] = value::object({{"mid", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}});
  nested["body"] = value::object({{"load", make_bin(std::string(300, 'x'))},
                                  {"list", value::array({1, -200, 70000, -3000000000LL, 1.5, nullptr, true})},
                                  {"ext", value::binary({1, 2, 3, 4}, 78)},
                                  {"s", std::string(40, 's')},
                                  {"e", value::array()},
                                  {"o", value::object()}});
  std::vector<std::string> out;
  for (auto p : {packing::frame, packing::salt_payload}) {
    out.push_back(pack(nested, p));
    out.push_back(pack(std::numeric_limits<std::uint64_t>::max(), p));
    out.push_back(pack(std::string(70000, 'z'), p));
    out.push_back(pack(make_bin(std::string(70000, 'z')), p));
  }
  for (const char* x : {"ca 3fc00000", "d3 8000000000000000", "c6 00000002 0102", "dd 00000001 c0",
                        "df 00000001 a161 02", "d8 4f 00000000000000000000000000000000", "c9 00000001 4e 00"}) {
    out.push_back(unhex(x));
  }
  return out;
}

TEST(WireUnpack, EveryTruncationIsIncomplete) {
  for (const auto& full : valid_objects()) {
    ASSERT_TRUE(unpack(full)) << hex(full.substr(0, 16));
    // Every offset of objects up to 4 KiB; the 70000-byte strings sparsely in the middle
    // (their first and last 64 offsets always).
    auto step = [&](std::size_t n) -> std::size_t {
      return (full.size() <= 4096 || n < 64 || n + 64 > full.size()) ? 1 : 97;
    };
    for (std::size_t n = 0; n < full.size(); n += step(n)) {
      const std::string_view part(full.data(), n);
      auto r = unpack(part);
      ASSERT_FALSE(r) << "prefix " << n << " of " << full.size();
      EXPECT_EQ(r.error(), errc::incomplete) << "prefix " << n;
      EXPECT_EQ(scan_object(part).error(), errc::incomplete) << n;
      std::size_t used = 0;
      EXPECT_EQ(unpack_prefix(part, used).error(), errc::incomplete) << n;
    }
  }
}

TEST(WireUnpack, ScannerResumesToSameResult) {
  for (const auto& full : valid_objects()) {
    for (std::size_t step : {std::size_t{1}, std::size_t{3}, std::size_t{4096}}) {
      object_scanner s;
      std::size_t n = 0;
      result<std::size_t> r = make_error_code(errc::incomplete);
      while (n < full.size()) {
        n = std::min(full.size(), n + step);
        r = s.scan(std::string_view(full.data(), n));
        if (n < full.size()) {
          ASSERT_FALSE(r);
          ASSERT_EQ(r.error(), errc::incomplete);
        }
      }
      ASSERT_TRUE(r);
      EXPECT_EQ(*r, full.size());
      EXPECT_EQ(s.scan(full).value(), full.size());  // done: stable
      s.reset();
      EXPECT_EQ(s.scan(full).value(), full.size());
    }
  }
}

TEST(WireUnpack, ReservedAndGarbageAreMalformed) {
  EXPECT_EQ(unpack(unhex("c1")).error(), errc::malformed);
  EXPECT_EQ(unpack(unhex("92 01 c1")).error(), errc::malformed);
  EXPECT_EQ(unpack(unhex("81 a1 61 c1")).error(), errc::malformed);
  EXPECT_EQ(unpack(unhex("81 c1 01")).error(), errc::malformed);
  EXPECT_EQ(scan_object(unhex("c1 00 00")).error(), errc::malformed);
  // Garbage: the first byte decides; a leading c1 is malformed whatever follows.
  EXPECT_EQ(unpack(unhex("c1 ff ff ff ff")).error(), errc::malformed);
  // A text protocol line is "valid" msgpack positive fixints + trailing bytes.
  EXPECT_EQ(unpack("GET / HTTP/1.1\r\n").error(), errc::trailing_bytes);
  EXPECT_EQ(unpack("").error(), errc::incomplete);
}

TEST(WireUnpack, OversizedDeclaredLengthsAreTooLargeWithoutAllocating) {
  // Declared lengths over the default 100 MiB limit: refused from the header alone.
  EXPECT_EQ(unpack(unhex("db ffffffff")).error(), errc::too_large);         // str32 4 GiB
  EXPECT_EQ(unpack(unhex("c6 ffffffff 00")).error(), errc::too_large);      // bin32
  EXPECT_EQ(unpack(unhex("c9 ffffffff 4e")).error(), errc::too_large);      // ext32
  EXPECT_EQ(unpack(unhex("dd ffffffff")).error(), errc::too_large);         // array32 4 G items
  EXPECT_EQ(unpack(unhex("df 7fffffff")).error(), errc::too_large);         // map32
  EXPECT_EQ(unpack(unhex("91 91 db 10000000")).error(), errc::too_large);   // nested
  // Under a small limit.
  limits small;
  small.max_bytes = 16;
  EXPECT_EQ(unpack(unhex("da 0010"), small).error(), errc::too_large);      // 3 + 16 > 16
  EXPECT_EQ(unpack(unhex("dc 0010"), small).error(), errc::too_large);      // 3 + 16 items > 16
  EXPECT_EQ(unpack(unhex("de 0008"), small).error(), errc::too_large);      // 3 + 2*8 > 16
  EXPECT_TRUE(unpack(unhex("ad 61616161616161616161616161"), small));       // 14 bytes fine
  EXPECT_TRUE(unpack(unhex("af 616161616161616161616161616161"), small));   // exactly 16 fine
  EXPECT_EQ(unpack(unhex("b0 61616161616161616161616161616161"), small).error(), errc::too_large);
  // Running size: small declared counts, but the items add up past the limit.
  EXPECT_EQ(scan_object(unhex("93 a5 6161616161 a5 6161616161"), small).error(), errc::incomplete);  // 13 bytes
  EXPECT_EQ(scan_object(unhex("93 a5 6161616161 a5 6161616161 a5"), small).error(), errc::too_large);  // 14 + 5 > 16
  limits tiny;
  tiny.max_bytes = 4;
  EXPECT_EQ(scan_object(unhex("dd 00000005 00"), tiny).error(), errc::too_large);
  // With no practical limit, huge declared counts are just incomplete: nothing reserved.
  limits huge;
  huge.max_bytes = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(unpack(unhex("dd ffffffff 00 00"), huge).error(), errc::incomplete);
  EXPECT_EQ(unpack(unhex("df ffffffff a1 61 00"), huge).error(), errc::incomplete);
  EXPECT_EQ(unpack(unhex("db ffffffff 61"), huge).error(), errc::incomplete);
}

TEST(WireUnpack, DepthLimit) {
  // 64 nested arrays: accepted; 65: too_deep (default limit 64).
  std::string ok(64, '\x91');
  ok += '\xc0';
  auto r = unpack(ok);
  ASSERT_TRUE(r) << r.error().message();
  std::string deep(65, '\x91');
  deep += '\xc0';
  EXPECT_EQ(unpack(deep).error(), errc::too_deep);
  // Innermost empty container counts as a level too.
  EXPECT_TRUE(unpack(std::string(63, '\x91') + "\x90"));
  EXPECT_EQ(unpack(std::string(64, '\x91') + "\x90").error(), errc::too_deep);
  // Maps count like arrays.
  std::string maps;
  for (int i = 0; i < 65; ++i) maps += "\x81\xa1k";
  maps += '\xc0';
  EXPECT_EQ(unpack(maps).error(), errc::too_deep);
  // Depth bomb: a million levels, truncated or not: no stack use, too_deep.
  const std::string bomb(1'000'000, '\x91');
  EXPECT_EQ(unpack(bomb).error(), errc::too_deep);
  EXPECT_EQ(scan_object(bomb).error(), errc::too_deep);
  // array16 headers "dc dcdc" nested: too_deep as well.
  EXPECT_EQ(unpack(std::string(1'000'000, '\xdc')).error(), errc::too_deep);
  // Custom limit.
  limits two;
  two.max_depth = 2;
  EXPECT_TRUE(unpack(unhex("91 91 c0"), two));
  EXPECT_EQ(unpack(unhex("91 91 91 c0"), two).error(), errc::too_deep);
}

TEST(WireCategory, Messages) {
  const error_code ec = errc::too_deep;
  EXPECT_EQ(std::string(ec.category().name()), "sylvite.wire");
  EXPECT_FALSE(ec.message().empty());
  EXPECT_EQ(make_error_code(errc::bad_frame).category(), wire_category());
}

}  // namespace
}  // namespace sylvite::wire
