// Cross-check of core/wire against Python msgpack: tests/fixtures/vectors/wire.json is
// written by tests/vectors/wire_vectors.py (see that file for the tagged notation).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/wire/msgpack.hpp"
#include "wire_test_util.hpp"

namespace sylvite::wire {
namespace {

using test::hex;
using test::unhex;

value load_vectors() {
  std::ifstream in(std::string(SYLVITE_SOURCE_DIR) + "/tests/fixtures/vectors/wire.json");
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  return value::parse(ss.str(), nullptr, false);
}

const value& vectors() {
  static const value v = load_vectors();
  return v;
}

value bin_of(const std::string& bytes, std::optional<std::uint8_t> subtype = std::nullopt) {
  value::binary_t::container_type c(bytes.begin(), bytes.end());
  return subtype ? value::binary(std::move(c), *subtype) : value::binary(std::move(c));
}

std::string repeat(const std::string& unit, std::size_t n) {
  std::string out;
  out.reserve(unit.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += unit;
  return out;
}

// Tagged JSON -> value model.
value from_tagged(const value& t) {
  if (t.is_object()) {
    if (t.size() == 1) {
      const auto& [k, v] = *t.get_ref<const value::object_t&>().begin();
      if (k == "$bytes") return bin_of(unhex(v.get<std::string>()));
      if (k == "$ext") return bin_of(unhex(v[1].get<std::string>()), static_cast<std::uint8_t>(v[0].get<int>()));
      if (k == "$float") {
        const auto s = v.get<std::string>();
        if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
        return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
      }
      if (k == "$str") return repeat(v[1].get<std::string>(), v[0].get<std::size_t>());
      if (k == "$rbytes") return bin_of(repeat(unhex(v[1].get<std::string>()), v[0].get<std::size_t>()));
      if (k == "$array") {
        value a = value::array();
        const value item = from_tagged(v[1]);
        for (std::size_t i = 0; i < v[0].get<std::size_t>(); ++i) a.push_back(item);
        return a;
      }
      if (k == "$map") {
        value m = value::object();
        auto& vec = static_cast<value::object_t::Container&>(m.get_ref<value::object_t&>());
        for (std::size_t i = 0; i < v.get<std::size_t>(); ++i) vec.emplace_back("k" + std::to_string(i), i);
        return m;
      }
    }
    value m = value::object();
    for (const auto& [k, v] : t.items()) m[k] = from_tagged(v);
    return m;
  }
  if (t.is_array()) {
    value a = value::array();
    for (const auto& e : t) a.push_back(from_tagged(e));
    return a;
  }
  return t;
}

std::string fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Compares packed bytes with the JSON form ("<hex>" or {len, head, fnv1a64}).
::testing::AssertionResult same_bytes(const std::string& got, const value& want) {
  if (want.is_string()) {
    if (hex(got) == want.get<std::string>()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "got " << hex(got) << "\nwant " << want.get<std::string>();
  }
  const auto len = want["len"].get<std::size_t>();
  const auto head = want["head"].get<std::string>();
  if (got.size() != len) return ::testing::AssertionFailure() << "size " << got.size() << " want " << len;
  if (hex(got.substr(0, 64)) != head) return ::testing::AssertionFailure() << "head " << hex(got.substr(0, 64));
  if (fnv1a64(got) != want["fnv1a64"].get<std::string>()) return ::testing::AssertionFailure() << "fnv differs";
  return ::testing::AssertionSuccess();
}

// Value equality that treats NaN == NaN and -0.0 != 0.0 by bits (re-pack and compare).
bool same_value(const value& a, const value& b) {
  return a == b || pack(a, packing::frame) == pack(b, packing::frame);
}

TEST(WireVectors, FileLoads) {
  ASSERT_TRUE(vectors().is_object()) << "missing or invalid tests/fixtures/vectors/wire.json";
  EXPECT_GT(vectors()["encode"].size(), 50u);
  EXPECT_GT(vectors()["decode"].size(), 20u);
  EXPECT_GT(vectors()["errors"].size(), 5u);
}

TEST(WireVectors, EncodeMatchesPython) {
  ASSERT_TRUE(vectors().is_object());
  for (const auto& c : vectors()["encode"]) {
    const std::string name = c["name"].get<std::string>();
    const value v = from_tagged(c["value"]);
    const std::string f = pack(v, packing::frame);
    const std::string p = pack(v, packing::salt_payload);
    EXPECT_TRUE(same_bytes(f, c["frame"])) << name << " (frame)";
    EXPECT_TRUE(same_bytes(p, c["salt_payload"])) << name << " (salt_payload)";
    // And back: the frame packing decodes to the same value (text stays text, bytes
    // stay bytes since bin is kept apart).
    auto back = unpack(f);
    ASSERT_TRUE(back) << name << ": " << back.error().message();
    EXPECT_TRUE(same_value(*back, v)) << name;
    // The payload packing decodes with the UTF-8 rule: bytes come back as text when
    // valid UTF-8, i.e. decode_embedded_strs of the input.
    auto pback = unpack(p);
    ASSERT_TRUE(pback) << name;
    EXPECT_TRUE(same_value(*pback, decode_embedded_strs(v))) << name;
  }
}

TEST(WireVectors, DecodeMatchesPython) {
  ASSERT_TRUE(vectors().is_object());
  for (const auto& c : vectors()["decode"]) {
    const std::string name = c["name"].get<std::string>();
    ASSERT_TRUE(c["bytes"].is_string()) << name;
    const std::string bytes = unhex(c["bytes"].get<std::string>());
    const value want = from_tagged(c["value"]);
    auto got = unpack(bytes);
    ASSERT_TRUE(got) << name << ": " << got.error().message();
    EXPECT_TRUE(same_value(*got, want)) << name << "\ngot  " << got->dump(-1, ' ', false, value::error_handler_t::replace)
                                        << "\nwant " << want.dump(-1, ' ', false, value::error_handler_t::replace);
    if (c.contains("repack")) {
      const packing p = c["repack"] == "frame" ? packing::frame : packing::salt_payload;
      EXPECT_EQ(hex(pack(*got, p)), hex(bytes)) << name << " repack";
    }
  }
}

TEST(WireVectors, ErrorsMatchPython) {
  ASSERT_TRUE(vectors().is_object());
  for (const auto& c : vectors()["errors"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string bytes = unhex(c["bytes"].get<std::string>());
    const std::string want = c["error"].get<std::string>();
    auto got = unpack(bytes);
    ASSERT_FALSE(got) << name;
    const errc e = want == "incomplete"       ? errc::incomplete
                   : want == "trailing_bytes" ? errc::trailing_bytes
                                              : errc::malformed;
    EXPECT_EQ(got.error(), e) << name << ": " << got.error().message();
  }
}

}  // namespace
}  // namespace sylvite::wire
