// Unit tests for core/wire/value.hpp: byte/text accessors, lookups, decode_embedded_strs,
// is_utf8.
#include <gtest/gtest.h>

#include <limits>

#include "core/wire/function_list.hpp"
#include "core/wire/parse_int.hpp"
#include "core/wire/value.hpp"
#include "wire_test_util.hpp"

namespace sylvite::wire {
namespace {

using test::unhex;

TEST(WireValue, MakeBinAndAsBytes) {
  const value b = make_bin(std::string_view("a\0b", 3));
  ASSERT_TRUE(b.is_binary());
  EXPECT_FALSE(b.get_binary().has_subtype());
  EXPECT_EQ(as_bytes(b), std::string_view("a\0b", 3));
  EXPECT_EQ(as_text(value("text")), "text");
  EXPECT_EQ(as_bytes(make_bin("")), "");
  EXPECT_FALSE(as_bytes(value(1)).has_value());
  EXPECT_FALSE(as_bytes(value(nullptr)).has_value());
  EXPECT_FALSE(as_bytes(value::array()).has_value());
  // An ext value (Salt datetime 78) is not a byte string.
  EXPECT_FALSE(as_bytes(value::binary({'2', '0'}, 78)).has_value());
}

TEST(WireValue, GetTextAcceptsStrAndBin) {
  value m = value::object();
  m["s"] = "aes";
  m["b"] = make_bin("clear");
  m["i"] = 3;
  EXPECT_EQ(get_text(m, "s"), "aes");
  EXPECT_EQ(get_text(m, "b"), "clear");
  EXPECT_FALSE(get_text(m, "i").has_value());
  EXPECT_FALSE(get_text(m, "missing").has_value());
  EXPECT_FALSE(get_text(value::array({1, 2}), "s").has_value());
  EXPECT_FALSE(get_text(value("s"), "s").has_value());
}

TEST(WireValue, Find) {
  value m = value::object();
  m["a"] = 1;
  m["b"] = value::object();
  ASSERT_NE(find(m, "a"), nullptr);
  EXPECT_EQ(*find(m, "a"), 1);
  EXPECT_TRUE(find(m, "b")->is_object());
  EXPECT_EQ(find(m, "c"), nullptr);
  EXPECT_EQ(find(value(5), "a"), nullptr);
  EXPECT_EQ(find(value::array(), "a"), nullptr);
}

TEST(WireValue, GetInt) {
  value m = value::object();
  m["u"] = std::uint64_t{7};
  m["i"] = std::int64_t{-7};
  m["big"] = std::numeric_limits<std::uint64_t>::max();
  m["max"] = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  m["min"] = std::numeric_limits<std::int64_t>::min();
  m["t"] = true;
  m["f"] = 1.0;
  m["s"] = "1";
  EXPECT_EQ(get_int(m, "u"), 7);
  EXPECT_EQ(get_int(m, "i"), -7);
  EXPECT_FALSE(get_int(m, "big").has_value());  // does not fit int64
  EXPECT_EQ(get_int(m, "max"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(get_int(m, "min"), std::numeric_limits<std::int64_t>::min());
  EXPECT_FALSE(get_int(m, "t").has_value());  // bool is not an int
  EXPECT_FALSE(get_int(m, "f").has_value());
  EXPECT_FALSE(get_int(m, "s").has_value());
  EXPECT_FALSE(get_int(m, "missing").has_value());
}

TEST(WireValue, GetBool) {
  value m = value::object();
  m["t"] = true;
  m["f"] = false;
  m["one"] = 1;
  EXPECT_EQ(get_bool(m, "t"), true);
  EXPECT_EQ(get_bool(m, "f"), false);
  EXPECT_FALSE(get_bool(m, "one").has_value());
  EXPECT_FALSE(get_bool(m, "missing").has_value());
}

TEST(WireValue, DecodeEmbeddedStrs) {
  value in = value::object();
  in["ok"] = make_bin("h\xc3\xa9llo");          // valid UTF-8 -> string
  in["bad"] = make_bin("\xff\xfe");             // invalid -> stays binary
  in["ext"] = value::binary({'a', 'b'}, 78);     // ext -> untouched
  in["list"] = value::array({make_bin("x"), 1, value::array({make_bin("y")})});
  in["nested"] = value::object();
  in["nested"]["z"] = make_bin("");
  in["n"] = nullptr;
  const value out = decode_embedded_strs(in);
  EXPECT_EQ(out["ok"], "h\xc3\xa9llo");
  EXPECT_TRUE(out["bad"].is_binary());
  EXPECT_EQ(out["bad"], in["bad"]);
  ASSERT_TRUE(out["ext"].is_binary());
  EXPECT_EQ(out["ext"].get_binary().subtype(), 78u);
  EXPECT_EQ(out["list"], value::array({"x", 1, value::array({"y"})}));
  EXPECT_EQ(out["nested"]["z"], "");
  EXPECT_TRUE(out["n"].is_null());
  // Order kept.
  std::vector<std::string> keys;
  for (const auto& [k, v] : out.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ok", "bad", "ext", "list", "nested", "n"}));
  // Scalars pass through.
  EXPECT_EQ(decode_embedded_strs(make_bin("abc")), "abc");
  EXPECT_EQ(decode_embedded_strs(value(3)), 3);
}

TEST(WireValue, IsUtf8Valid) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(is_utf8(std::string_view("\0nul", 4)));
  EXPECT_TRUE(is_utf8(unhex("c2 80")));         // U+0080, smallest 2-byte
  EXPECT_TRUE(is_utf8(unhex("df bf")));         // U+07FF
  EXPECT_TRUE(is_utf8(unhex("e0 a0 80")));      // U+0800, smallest 3-byte
  EXPECT_TRUE(is_utf8(unhex("ed 9f bf")));      // U+D7FF, just below surrogates
  EXPECT_TRUE(is_utf8(unhex("ee 80 80")));      // U+E000, just above surrogates
  EXPECT_TRUE(is_utf8(unhex("ef bf bf")));      // U+FFFF
  EXPECT_TRUE(is_utf8(unhex("f0 90 80 80")));   // U+10000, smallest 4-byte
  EXPECT_TRUE(is_utf8(unhex("f4 8f bf bf")));   // U+10FFFF, largest
  EXPECT_TRUE(is_utf8("abcdefgh\xc3\xa9" "abcdefghij"));
}

TEST(WireValue, IsUtf8Invalid) {
  EXPECT_FALSE(is_utf8(unhex("80")));            // stray continuation
  EXPECT_FALSE(is_utf8(unhex("bf")));
  EXPECT_FALSE(is_utf8(unhex("c0 80")));         // overlong NUL
  EXPECT_FALSE(is_utf8(unhex("c0 af")));         // overlong '/'
  EXPECT_FALSE(is_utf8(unhex("c1 bf")));         // overlong
  EXPECT_FALSE(is_utf8(unhex("e0 80 af")));      // overlong 3-byte
  EXPECT_FALSE(is_utf8(unhex("e0 9f bf")));      // overlong 3-byte (U+07FF)
  EXPECT_FALSE(is_utf8(unhex("f0 80 80 af")));   // overlong 4-byte
  EXPECT_FALSE(is_utf8(unhex("f0 8f bf bf")));   // overlong 4-byte (U+FFFF)
  EXPECT_FALSE(is_utf8(unhex("ed a0 80")));      // U+D800 high surrogate
  EXPECT_FALSE(is_utf8(unhex("ed bf bf")));      // U+DFFF low surrogate
  EXPECT_FALSE(is_utf8(unhex("ed a0 bd ed b8 80")));  // CESU-8 surrogate pair
  EXPECT_FALSE(is_utf8(unhex("f4 90 80 80")));   // U+110000
  EXPECT_FALSE(is_utf8(unhex("f5 80 80 80")));
  EXPECT_FALSE(is_utf8(unhex("ff")));
  EXPECT_FALSE(is_utf8(unhex("fe")));
  EXPECT_FALSE(is_utf8(unhex("c3")));            // truncated 2-byte
  EXPECT_FALSE(is_utf8(unhex("e2 82")));         // truncated 3-byte
  EXPECT_FALSE(is_utf8(unhex("f0 9f 98")));      // truncated 4-byte
  EXPECT_FALSE(is_utf8(unhex("c3 28")));         // bad continuation
  EXPECT_FALSE(is_utf8(unhex("e2 28 a1")));
  EXPECT_FALSE(is_utf8(unhex("e2 82 28")));
  EXPECT_FALSE(is_utf8(unhex("f0 9f 98 28")));
  EXPECT_FALSE(is_utf8(std::string("abcdefghijklmnop") + "\xff"));  // after the fast path
}

}  // namespace
}  // namespace sylvite::wire

namespace sylvite::wire {
namespace {

TEST(WireValue, FunctionList) {
  auto one = function_list(value("test.ping"));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->functions, (std::vector<std::string>{"test.ping"}));
  EXPECT_FALSE(one->keyed);
  auto two = function_list(value("b.x,a.y,b.x"));  // split, de-duplicated, sorted
  ASSERT_TRUE(two);
  EXPECT_EQ(two->functions, (std::vector<std::string>{"a.y", "b.x"}));
  EXPECT_TRUE(two->keyed);
  auto dup = function_list(value("a.y,a.y"));  // one function after de-duplication
  ASSERT_TRUE(dup);
  EXPECT_FALSE(dup->keyed);
  auto list = function_list(value::array({"z.z", 3, "a.a"}));  // a list: text items, in order
  ASSERT_TRUE(list);
  EXPECT_EQ(list->functions, (std::vector<std::string>{"z.z", "a.a"}));
  EXPECT_TRUE(list->keyed);
  EXPECT_FALSE(function_list(value(42)));
  EXPECT_FALSE(function_list(value::object()));
}

TEST(WireValue, ParseInt) {
  EXPECT_EQ(parse_int(value(7)), 7);
  EXPECT_EQ(parse_int(value(-7)), -7);
  EXPECT_EQ(parse_int(value("42")), 42);
  EXPECT_EQ(parse_int(make_bin("-3")), -3);
  EXPECT_EQ(parse_int(value(" 5")), 5);
  EXPECT_FALSE(parse_int(value("5 ")).has_value());
  EXPECT_FALSE(parse_int(value("0x10")).has_value());
  EXPECT_FALSE(parse_int(value("99999999999999999999")).has_value());
  EXPECT_FALSE(parse_int(value(1.5)).has_value());
  EXPECT_FALSE(parse_int(value(true)).has_value());
  EXPECT_FALSE(parse_int(value()).has_value());
}

}  // namespace
}  // namespace sylvite::wire
