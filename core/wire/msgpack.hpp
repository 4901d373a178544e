// sylvite::wire msgpack codec with Salt's two packer settings.
//   packing::frame        = Python msgpack default use_bin_type=True: text -> str family
//                           (fixstr/str8/16/32), binary -> bin8/16/32. Used for the outer
//                           {head, body} frame and job-cache files.
//   packing::salt_payload = salt.payload.dumps (use_bin_type=False, old spec): text and
//                           binary both -> raw str, and str8 (0xd9) is never used:
//                           0-31 fixstr, 32-65535 str16 (0xda), larger str32 (0xdb).
//                           Used for every AES plaintext and signed blob.
// Both: smallest int encoding; floats as float64 (0xcb); binary with subtype -> ext.
// Decoding accepts everything msgpack allows (both string families, ext, float32...).
// No Asio; pure functions. Thread-safety: plain functions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::wire {

enum class errc {
  ok = 0,
  incomplete = 1,     // not enough bytes yet (streaming: wait for more)
  malformed,          // invalid msgpack (reserved byte 0xc1, bad structure)
  too_large,          // object or declared length over the limit
  too_deep,           // nesting over the limit
  trailing_bytes,     // unpack(): bytes after the one object
  bad_frame,          // frame is not a map with "head" (map) and "body"
  bad_key,            // map key that cannot be a JSON key (map/array key)
};
const boost::system::error_category& wire_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), wire_category()}; }

enum class packing { frame, salt_payload };

struct limits {
  std::size_t max_bytes = 100u << 20;  // largest object accepted (Salt's unpacker: 100 MiB)
  std::size_t max_depth = 64;          // deepest nesting accepted
  // Most msgpack objects (every header counts: scalars, strings, containers) in one
  // top-level object. Bounds what decoding may allocate independently of the byte
  // size: an empty array is 1 byte on the wire but ~60 bytes decoded. The scan refuses
  // (errc::too_large) as soon as a declared container length alone would pass it.
  std::size_t max_nodes = static_cast<std::size_t>(-1);
};

// Encode one value. Never fails (every value model value is encodable).
std::string pack(const value& v, packing p);
inline std::string pack_payload(const value& v) { return pack(v, packing::salt_payload); }
// Same as pack(), appending to out (no temporary string per nested value).
void pack_append(std::string& out, const value& v, packing p);

// Decode exactly one object occupying all of data. Map keys that are str/bin become
// JSON keys; integer/bool/nil keys become their decimal/"true"/"false"/"null" text.
result<value> unpack(std::string_view data, const limits& lim = {});

// Decode the first object in data; on success `consumed` holds its size.
// errc::incomplete if data is a valid prefix of an object.
result<value> unpack_prefix(std::string_view data, std::size_t& consumed, const limits& lim = {});

// Size of the first complete object in data without building it (cheap skip scan):
// errc::incomplete if more bytes are needed; errc::too_large as soon as a declared
// length or the running size passes lim.max_bytes.
result<std::size_t> scan_object(std::string_view data, const limits& lim = {});

// Resumable scan_object for a stream: call scan() again with the same object's bytes
// grown at the end (its first byte must stay data[0]); work done by earlier calls is
// not repeated, so a big object arriving in small reads costs linear time overall.
// Same results as scan_object (also errc::too_deep past lim.max_depth). Call reset()
// before scanning the next object. set_limits() may change the limits between calls
// (a connection that authenticated mid-frame gets the larger ones at once); the work
// already done stays valid. Thread-safety: one per stream, not shared.
class object_scanner {
 public:
  explicit object_scanner(const limits& lim = {}) : lim_(lim) {}
  result<std::size_t> scan(std::string_view data);
  void reset() noexcept {
    pos_ = 0;
    done_ = false;
    nodes_ = 0;
    owed_ = 0;
    stack_.clear();
  }
  void set_limits(const limits& lim) noexcept { lim_ = lim; }
  const limits& get_limits() const noexcept { return lim_; }

 private:
  limits lim_;
  std::size_t pos_ = 0;                // offset of the next item not yet scanned
  bool done_ = false;                  // pos_ is the size of a complete object
  std::uint64_t nodes_ = 0;            // headers scanned so far (lim_.max_nodes)
  std::uint64_t owed_ = 0;             // sum of stack_: items still expected
  std::vector<std::uint64_t> stack_;   // items still expected in each open container
};

}  // namespace sylvite::wire

template <>
struct boost::system::is_error_code_enum<sylvite::wire::errc> : std::true_type {};
