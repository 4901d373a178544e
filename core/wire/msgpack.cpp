// sylvite::wire msgpack codec: pack (frame / salt_payload packings), unpack, the
// skip-scan used by the streaming frame parser, and the wire error category.
// Thread-safety: pure functions; object_scanner is one per stream.
//
// Design notes (the why):
// - Every decode first runs the skip-scan over the bytes. The scan validates the whole
//   structure (reserved 0xc1, truncation, declared lengths vs limits, depth) without
//   allocating, so the builder afterwards only meets complete, bounded input; the
//   builder never reserves from a declared length either (containers grow with the
//   items decoded), and limits::max_nodes bounds how many values a frame may build.
// - Encodings follow Python msgpack 1.x byte for byte (cross-checked by
//   tests/vectors/wire_vectors.py): positive ints always use the uint family even when
//   the value is a signed json number, negative ints the int family, floats are always
//   float64, ext uses fixext1/2/4/8/16 when the size fits exactly.
// - salt_payload is Python msgpack with use_bin_type=False: the "old spec" raw type,
//   which has no str8 (0xd9): 0-31 fixstr, <=0xffff str16, else str32; bytes go the same way.
// - ordered_json's object is a vector with linear lookup; a hostile map with a million
//   keys would make decoding quadratic, so big maps dedupe through a hash index.
#include "core/wire/msgpack.hpp"

#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

namespace sylvite::wire {

// ---------------------------------------------------------------------------------
// Error category
namespace {

class wire_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.wire"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::incomplete: return "incomplete msgpack object";
      case errc::malformed: return "malformed msgpack";
      case errc::too_large: return "msgpack object too large";
      case errc::too_deep: return "msgpack nesting too deep";
      case errc::trailing_bytes: return "trailing bytes after msgpack object";
      case errc::bad_frame: return "frame is not a map with head (map) and body";
      case errc::bad_key: return "msgpack map key cannot be a JSON key";
    }
    return "unknown wire error";
  }
};

}  // namespace

const boost::system::error_category& wire_category() noexcept {
  static const wire_category_impl cat;
  return cat;
}

// ---------------------------------------------------------------------------------
// Header reader shared by the scanner and the decoder
namespace {

enum class kind : std::uint8_t { nil, boolean, uint, sint, f32, f64, str, bin, ext, array, map };

struct header {
  kind k = kind::nil;
  std::size_t hlen = 0;      // bytes of the header (scalars: the whole object)
  std::uint64_t len = 0;     // str/bin/ext: payload bytes; array: items; map: pairs
  std::uint64_t u = 0;       // uint value; raw bits for sint/f32/f64; bool value
  std::uint8_t ext_type = 0; // ext type code as its byte (int8 two's complement)
};

enum class hres { ok, incomplete, malformed };

inline std::uint64_t be(const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// Reads the header at p (avail bytes available, avail >= 1).
hres read_header(const unsigned char* p, std::size_t avail, header& h) noexcept {
  const unsigned char b = p[0];
  // Fixed-size prefix: `need` header bytes, then decode.
  auto need = [&](std::size_t n) { return avail >= n; };
  if (b <= 0x7f) { h = {kind::uint, 1, 0, b, 0}; return hres::ok; }
  if (b >= 0xe0) { h = {kind::sint, 1, 0, static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int8_t>(b))), 0}; return hres::ok; }
  if ((b & 0xf0) == 0x80) { h = {kind::map, 1, static_cast<std::uint64_t>(b & 0x0f), 0, 0}; return hres::ok; }
  if ((b & 0xf0) == 0x90) { h = {kind::array, 1, static_cast<std::uint64_t>(b & 0x0f), 0, 0}; return hres::ok; }
  if ((b & 0xe0) == 0xa0) { h = {kind::str, 1, static_cast<std::uint64_t>(b & 0x1f), 0, 0}; return hres::ok; }
  switch (b) {
    case 0xc0: h = {kind::nil, 1, 0, 0, 0}; return hres::ok;
    case 0xc1: return hres::malformed;  // reserved, never used
    case 0xc2: h = {kind::boolean, 1, 0, 0, 0}; return hres::ok;
    case 0xc3: h = {kind::boolean, 1, 0, 1, 0}; return hres::ok;
    case 0xc4: case 0xc5: case 0xc6: {  // bin 8/16/32
      const std::size_t n = std::size_t{1} << (b - 0xc4);
      if (!need(1 + n)) return hres::incomplete;
      h = {kind::bin, 1 + n, be(p + 1, n), 0, 0};
      return hres::ok;
    }
    case 0xc7: case 0xc8: case 0xc9: {  // ext 8/16/32: length, then type
      const std::size_t n = std::size_t{1} << (b - 0xc7);
      if (!need(2 + n)) return hres::incomplete;
      h = {kind::ext, 2 + n, be(p + 1, n), 0, p[1 + n]};
      return hres::ok;
    }
    case 0xca:
      if (!need(5)) return hres::incomplete;
      h = {kind::f32, 5, 0, be(p + 1, 4), 0};
      return hres::ok;
    case 0xcb:
      if (!need(9)) return hres::incomplete;
      h = {kind::f64, 9, 0, be(p + 1, 8), 0};
      return hres::ok;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {  // uint 8/16/32/64
      const std::size_t n = std::size_t{1} << (b - 0xcc);
      if (!need(1 + n)) return hres::incomplete;
      h = {kind::uint, 1 + n, 0, be(p + 1, n), 0};
      return hres::ok;
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {  // int 8/16/32/64: sign-extend
      const std::size_t n = std::size_t{1} << (b - 0xd0);
      if (!need(1 + n)) return hres::incomplete;
      std::uint64_t raw = be(p + 1, n);
      if (n < 8 && (raw >> (8 * n - 1)) != 0) raw |= ~std::uint64_t{0} << (8 * n);
      h = {kind::sint, 1 + n, 0, raw, 0};
      return hres::ok;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:  // fixext 1/2/4/8/16
      if (!need(2)) return hres::incomplete;
      h = {kind::ext, 2, std::uint64_t{1} << (b - 0xd4), 0, p[1]};
      return hres::ok;
    case 0xd9: case 0xda: case 0xdb: {  // str 8/16/32
      const std::size_t n = std::size_t{1} << (b - 0xd9);
      if (!need(1 + n)) return hres::incomplete;
      h = {kind::str, 1 + n, be(p + 1, n), 0, 0};
      return hres::ok;
    }
    case 0xdc: case 0xdd: {  // array 16/32
      const std::size_t n = b == 0xdc ? 2 : 4;
      if (!need(1 + n)) return hres::incomplete;
      h = {kind::array, 1 + n, be(p + 1, n), 0, 0};
      return hres::ok;
    }
    case 0xde: case 0xdf: {  // map 16/32
      const std::size_t n = b == 0xde ? 2 : 4;
      if (!need(1 + n)) return hres::incomplete;
      h = {kind::map, 1 + n, be(p + 1, n), 0, 0};
      return hres::ok;
    }
    default: return hres::malformed;  // unreachable: every byte is covered above
  }
}

inline bool is_container(kind k) noexcept { return k == kind::array || k == kind::map; }

}  // namespace

// ---------------------------------------------------------------------------------
// Skip scan
result<std::size_t> object_scanner::scan(std::string_view data) {
  if (done_) return pos_;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t size = data.size();
  const std::size_t max = lim_.max_bytes;
  for (;;) {
    if (pos_ >= size) break;  // incomplete
    header h;
    const hres r = read_header(p + pos_, size - pos_, h);
    if (r == hres::malformed) return errc::malformed;
    if (r == hres::incomplete) break;
    // Smallest possible end of this item: its payload, or one byte per array item and
    // two per map pair. Compared against the limit before anything else, so a hostile
    // length prefix is refused at once. All terms are < 2^33, no overflow.
    std::uint64_t min_end = pos_ + h.hlen;
    if (h.k == kind::array) min_end += h.len;
    else if (h.k == kind::map) min_end += 2 * h.len;
    else if (!is_container(h.k)) min_end += h.len;
    if (min_end > max) return errc::too_large;
    // Node budget: this header plus, for a container, at least one node per item still
    // to come (refused on the declared count, before any item arrived).
    // owed_ counts the items open containers still expect, this one included; every open
    // container but the outermost is itself one of those items and already in nodes_.
    std::uint64_t min_nodes = nodes_ + (stack_.empty() ? 1 : owed_ - (stack_.size() - 1));
    if (h.k == kind::array) min_nodes += h.len;
    else if (h.k == kind::map) min_nodes += 2 * h.len;
    if (min_nodes > lim_.max_nodes) return errc::too_large;
    if (is_container(h.k)) {
      if (stack_.size() + 1 > lim_.max_depth) return errc::too_deep;
      pos_ += h.hlen;
      ++nodes_;
      const std::uint64_t items = h.k == kind::map ? 2 * h.len : h.len;
      if (items > 0) {
        stack_.push_back(items);
        owed_ += items;
        continue;
      }
    } else {
      if (min_end > size) break;  // payload not here yet; re-read this header next time
      pos_ = static_cast<std::size_t>(min_end);
      ++nodes_;
    }
    // One item complete: count it off its container(s).
    for (;;) {
      if (stack_.empty()) {
        done_ = true;
        return pos_;
      }
      --owed_;
      if (--stack_.back() > 0) break;
      stack_.pop_back();
    }
  }
  // Not complete: the object is longer than `size`, so over the limit if size is.
  if (size > max) return errc::too_large;
  return errc::incomplete;
}

result<std::size_t> scan_object(std::string_view data, const limits& lim) {
  object_scanner s(lim);
  return s.scan(data);
}

// ---------------------------------------------------------------------------------
// Decoder (runs on bytes the scan accepted; still bounds-checks defensively)
namespace {

class decoder {
 public:
  decoder(std::string_view data, const limits& lim)
      : p_(reinterpret_cast<const unsigned char*>(data.data())), n_(data.size()), lim_(lim) {}

  error_code decode(value& out, std::size_t depth) {
    header h;
    if (const auto ec = next_header(h)) return ec;
    switch (h.k) {
      case kind::nil: out = nullptr; return {};
      case kind::boolean: out = h.u != 0; return {};
      case kind::uint: out = static_cast<std::uint64_t>(h.u); return {};
      case kind::sint: out = static_cast<std::int64_t>(h.u); return {};
      case kind::f32: {
        const auto bits = static_cast<std::uint32_t>(h.u);
        float f;
        std::memcpy(&f, &bits, sizeof f);
        out = static_cast<double>(f);
        return {};
      }
      case kind::f64: {
        double d;
        std::memcpy(&d, &h.u, sizeof d);
        out = d;
        return {};
      }
      case kind::str: {
        std::string_view s;
        if (const auto ec = payload(h, s)) return ec;
        if (is_utf8(s)) out = std::string(s);
        else out = value::binary(value::binary_t::container_type(s.begin(), s.end()));
        return {};
      }
      case kind::bin: {
        std::string_view s;
        if (const auto ec = payload(h, s)) return ec;
        out = value::binary(value::binary_t::container_type(s.begin(), s.end()));
        return {};
      }
      case kind::ext: {
        std::string_view s;
        if (const auto ec = payload(h, s)) return ec;
        out = value::binary(value::binary_t::container_type(s.begin(), s.end()), h.ext_type);
        return {};
      }
      case kind::array: {
        if (depth + 1 > lim_.max_depth) return errc::too_deep;
        if (h.len > n_ - pos_) return errc::incomplete;  // each item is >= 1 byte
        out = value::array();
        auto& arr = out.get_ref<value::array_t&>();
        // No reserve(h.len): memory grows with the items actually decoded, never on the
        // word of a length prefix (an empty array is 1 input byte, ~60 bytes decoded).
        for (std::uint64_t i = 0; i < h.len; ++i) {
          if (const auto ec = decode(arr.emplace_back(), depth + 1)) return ec;
        }
        return {};
      }
      case kind::map: return decode_map(out, h.len, depth + 1);
    }
    return errc::malformed;
  }

  std::size_t pos() const noexcept { return pos_; }

 private:
  error_code next_header(header& h) {
    if (pos_ >= n_) return errc::incomplete;
    switch (read_header(p_ + pos_, n_ - pos_, h)) {
      case hres::malformed: return errc::malformed;
      case hres::incomplete: return errc::incomplete;
      case hres::ok: break;
    }
    pos_ += h.hlen;
    return {};
  }

  error_code payload(const header& h, std::string_view& s) {
    if (h.len > n_ - pos_) return errc::incomplete;
    s = std::string_view(reinterpret_cast<const char*>(p_ + pos_), static_cast<std::size_t>(h.len));
    pos_ += static_cast<std::size_t>(h.len);
    return {};
  }

  // Map keys: str/bin -> their bytes; int/bool/nil -> their text (Salt unpacks with
  // strict_map_key=False, so such keys do occur); float -> its JSON text; ext and
  // containers cannot be JSON keys -> bad_key.
  error_code decode_key(std::string& key) {
    header h;
    if (const auto ec = next_header(h)) return ec;
    switch (h.k) {
      case kind::str:
      case kind::bin: {
        std::string_view s;
        if (const auto ec = payload(h, s)) return ec;
        key.assign(s);
        return {};
      }
      case kind::uint: key = std::to_string(h.u); return {};
      case kind::sint: key = std::to_string(static_cast<std::int64_t>(h.u)); return {};
      case kind::boolean: key = h.u ? "true" : "false"; return {};
      case kind::nil: key = "null"; return {};
      case kind::f32:
      case kind::f64: {
        pos_ -= h.hlen;
        value v;
        if (const auto ec = decode(v, 0)) return ec;
        key = v.dump();
        return {};
      }
      case kind::ext:
      case kind::array:
      case kind::map: return errc::bad_key;
    }
    return errc::malformed;
  }

  error_code decode_map(value& out, std::uint64_t pairs, std::size_t depth) {
    if (depth > lim_.max_depth) return errc::too_deep;
    if (pairs > (n_ - pos_) / 2) return errc::incomplete;  // each pair is >= 2 bytes
    out = value::object();
    auto& obj = out.get_ref<value::object_t&>();
    using container = value::object_t::Container;
    auto& vec = static_cast<container&>(obj);
    // Nothing is reserved from the declared pair count: the vector and the index grow
    // with the pairs actually decoded. The index owns copies of its keys (the vector's
    // strings move when it grows).
    constexpr std::uint64_t linear_max = 8;
    std::unordered_map<std::string, std::size_t> index;
    std::string key;
    for (std::uint64_t i = 0; i < pairs; ++i) {
      if (const auto ec = decode_key(key)) return ec;
      value v;
      if (const auto ec = decode(v, depth)) return ec;
      // Duplicate keys: last value wins, first position kept (as a Python dict).
      std::size_t at = vec.size();
      if (pairs > linear_max) {
        if (auto it = index.find(key); it != index.end()) at = it->second;
      } else {
        for (std::size_t j = 0; j < vec.size(); ++j) {
          if (vec[j].first == key) {
            at = j;
            break;
          }
        }
      }
      if (at < vec.size()) {
        vec[at].second = std::move(v);
      } else {
        if (pairs > linear_max) index.emplace(key, at);
        vec.emplace_back(std::move(key), std::move(v));
        key.clear();
      }
    }
    return {};
  }

  const unsigned char* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
  const limits& lim_;
};

// result<value> cannot take an errc directly: ordered_json is constructible from almost
// anything, which makes the implicit conversion ambiguous. Build the error explicitly.
result<value> fail(error_code ec) { return result<value>(boost::system::in_place_error, ec); }

result<value> decode_checked(std::string_view data, std::size_t size, const limits& lim) {
  try {
    decoder d(data.substr(0, size), lim);
    value v;
    if (const auto ec = d.decode(v, 0)) return fail(ec);
    if (d.pos() != size) return fail(errc::malformed);  // scan and decode disagree: cannot happen
    return v;
  } catch (const std::bad_alloc&) {
    return fail(errc::too_large);
  } catch (const std::exception&) {
    return fail(errc::malformed);
  }
}

}  // namespace

result<value> unpack_prefix(std::string_view data, std::size_t& consumed, const limits& lim) {
  auto size = scan_object(data, lim);
  if (!size) return fail(size.error());
  auto v = decode_checked(data, *size, lim);
  if (v) consumed = *size;
  return v;
}

result<value> unpack(std::string_view data, const limits& lim) {
  auto size = scan_object(data, lim);
  if (!size) return fail(size.error());
  if (*size != data.size()) return fail(errc::trailing_bytes);
  return decode_checked(data, *size, lim);
}

// ---------------------------------------------------------------------------------
// Encoder
namespace {

inline void put_be(std::string& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = n; i-- > 0;) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline void put_byte(std::string& out, unsigned b) { out.push_back(static_cast<char>(b)); }

void pack_uint(std::string& out, std::uint64_t v) {
  if (v <= 0x7f) put_byte(out, static_cast<unsigned>(v));
  else if (v <= 0xff) { put_byte(out, 0xcc); put_be(out, v, 1); }
  else if (v <= 0xffff) { put_byte(out, 0xcd); put_be(out, v, 2); }
  else if (v <= 0xffffffffu) { put_byte(out, 0xce); put_be(out, v, 4); }
  else { put_byte(out, 0xcf); put_be(out, v, 8); }
}

void pack_int(std::string& out, std::int64_t v) {
  if (v >= 0) return pack_uint(out, static_cast<std::uint64_t>(v));
  const auto raw = static_cast<std::uint64_t>(v);
  if (v >= -32) put_byte(out, static_cast<unsigned>(raw & 0xff));
  else if (v >= -0x80) { put_byte(out, 0xd0); put_be(out, raw, 1); }
  else if (v >= -0x8000) { put_byte(out, 0xd1); put_be(out, raw, 2); }
  else if (v >= -0x80000000LL) { put_byte(out, 0xd2); put_be(out, raw, 4); }
  else { put_byte(out, 0xd3); put_be(out, raw, 8); }
}

void pack_str_header(std::string& out, std::size_t n, packing p) {
  if (n <= 31) put_byte(out, 0xa0 | static_cast<unsigned>(n));
  else if (p == packing::frame && n <= 0xff) { put_byte(out, 0xd9); put_be(out, n, 1); }
  else if (n <= 0xffff) { put_byte(out, 0xda); put_be(out, n, 2); }
  else { put_byte(out, 0xdb); put_be(out, n, 4); }
}

void pack_bin_header(std::string& out, std::size_t n, packing p) {
  if (p == packing::salt_payload) return pack_str_header(out, n, p);
  if (n <= 0xff) { put_byte(out, 0xc4); put_be(out, n, 1); }
  else if (n <= 0xffff) { put_byte(out, 0xc5); put_be(out, n, 2); }
  else { put_byte(out, 0xc6); put_be(out, n, 4); }
}

void pack_ext_header(std::string& out, std::size_t n, std::uint8_t type) {
  switch (n) {
    case 1: put_byte(out, 0xd4); break;
    case 2: put_byte(out, 0xd5); break;
    case 4: put_byte(out, 0xd6); break;
    case 8: put_byte(out, 0xd7); break;
    case 16: put_byte(out, 0xd8); break;
    default:
      if (n <= 0xff) { put_byte(out, 0xc7); put_be(out, n, 1); }
      else if (n <= 0xffff) { put_byte(out, 0xc8); put_be(out, n, 2); }
      else { put_byte(out, 0xc9); put_be(out, n, 4); }
  }
  put_byte(out, type);
}

void pack_text(std::string& out, std::string_view s, packing p) {
  pack_str_header(out, s.size(), p);
  out.append(s);
}

void pack_value(std::string& out, const value& v, packing p) {
  switch (v.type()) {
    case value::value_t::null:
    case value::value_t::discarded: put_byte(out, 0xc0); return;
    case value::value_t::boolean: put_byte(out, v.get<bool>() ? 0xc3 : 0xc2); return;
    case value::value_t::number_unsigned: pack_uint(out, v.get<std::uint64_t>()); return;
    case value::value_t::number_integer: pack_int(out, v.get<std::int64_t>()); return;
    case value::value_t::number_float: {
      const double d = v.get<double>();
      std::uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      put_byte(out, 0xcb);
      put_be(out, bits, 8);
      return;
    }
    case value::value_t::string: pack_text(out, v.get_ref<const std::string&>(), p); return;
    case value::value_t::binary: {
      const auto& b = v.get_binary();
      // Ext type codes are int8 on the wire; the subtype holds that byte (as
      // nlohmann's own msgpack codec does), larger subtypes keep their low byte.
      if (b.has_subtype()) pack_ext_header(out, b.size(), static_cast<std::uint8_t>(b.subtype() & 0xff));
      else pack_bin_header(out, b.size(), p);
      out.append(reinterpret_cast<const char*>(b.data()), b.size());
      return;
    }
    case value::value_t::array: {
      const auto& a = v.get_ref<const value::array_t&>();
      const std::size_t n = a.size();
      if (n <= 15) put_byte(out, 0x90 | static_cast<unsigned>(n));
      else if (n <= 0xffff) { put_byte(out, 0xdc); put_be(out, n, 2); }
      else { put_byte(out, 0xdd); put_be(out, n, 4); }
      for (const auto& e : a) pack_value(out, e, p);
      return;
    }
    case value::value_t::object: {
      const auto& o = v.get_ref<const value::object_t&>();
      const std::size_t n = o.size();
      if (n <= 15) put_byte(out, 0x80 | static_cast<unsigned>(n));
      else if (n <= 0xffff) { put_byte(out, 0xde); put_be(out, n, 2); }
      else { put_byte(out, 0xdf); put_be(out, n, 4); }
      for (const auto& [k, e] : o) {
        pack_text(out, k, p);
        pack_value(out, e, p);
      }
      return;
    }
  }
  put_byte(out, 0xc0);
}

}  // namespace

void pack_append(std::string& out, const value& v, packing p) { pack_value(out, v, p); }

std::string pack(const value& v, packing p) {
  std::string out;
  pack_value(out, v, p);
  return out;
}

}  // namespace sylvite::wire
