// sylvite::wire value helpers: byte/text accessors that accept both msgpack string
// families, typed member lookups, Salt's decode_embedded_strs and a strict UTF-8 check.
// Thread-safety: pure functions on plain values.
#include "core/wire/value.hpp"

#include <limits>

namespace sylvite::wire {

value make_bin(std::string_view bytes) {
  return value::binary(value::binary_t::container_type(bytes.begin(), bytes.end()));
}

// An ext value (binary with a subtype, e.g. Salt's datetime 78) is not a byte string:
// Python hands it to an ext hook, never to code expecting str/bytes.
std::optional<std::string_view> as_bytes(const value& v) {
  if (v.is_string()) return std::string_view(v.get_ref<const std::string&>());
  if (v.is_binary()) {
    const auto& b = v.get_binary();
    if (b.has_subtype()) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return std::nullopt;
}

const value* find(const value& map, std::string_view key) {
  if (!map.is_object()) return nullptr;
  // Linear, like ordered_map itself, but without building a std::string for the key.
  for (const auto& [k, v] : map.get_ref<const value::object_t&>()) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<std::string_view> get_text(const value& map, std::string_view key) {
  const value* v = find(map, key);
  if (v == nullptr) return std::nullopt;
  return as_bytes(*v);
}

std::optional<std::int64_t> get_int(const value& map, std::string_view key) {
  const value* v = find(map, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    const auto u = v->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<std::int64_t>();
  return std::nullopt;
}

std::optional<bool> get_bool(const value& map, std::string_view key) {
  const value* v = find(map, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

value decode_embedded_strs(const value& v) {
  switch (v.type()) {
    case value::value_t::binary: {
      const auto& b = v.get_binary();
      if (b.has_subtype()) return v;
      std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
      if (is_utf8(s)) return std::string(s);
      return v;
    }
    case value::value_t::array: {
      value out = value::array();
      auto& arr = out.get_ref<value::array_t&>();
      arr.reserve(v.size());
      for (const auto& e : v) arr.push_back(decode_embedded_strs(e));
      return out;
    }
    case value::value_t::object: {
      value out = value::object();
      // Keys are unique already: append directly instead of ordered_map's linear insert.
      auto& vec = static_cast<value::object_t::Container&>(out.get_ref<value::object_t&>());
      vec.reserve(v.size());
      for (const auto& [k, e] : v.get_ref<const value::object_t&>()) vec.emplace_back(k, decode_embedded_strs(e));
      return out;
    }
    default: return v;
  }
}

// Strict UTF-8 as Python's codec: no overlong forms, no surrogates (U+D800..DFFF),
// nothing above U+10FFFF, no stray continuation bytes.
bool is_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w = 0;
      for (std::size_t k = 0; k < 8; ++k) w |= static_cast<std::uint64_t>(p[i + k]) << (8 * k);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;        // overlong
      else if (c == 0xed) hi = 0x9f;   // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;        // overlong
      else if (c == 0xf4) hi = 0x8f;   // > U+10FFFF
    } else {
      return false;  // continuation byte, C0/C1 overlong lead, F5..FF
    }
    if (n - i < len) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace sylvite::wire
