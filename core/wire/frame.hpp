// sylvite::wire frames: Salt's TCP transport sends a plain concatenation of msgpack
// maps {"head": <map>, "body": <any>} with no length prefix (frame packing).
// frame_parser is an incremental parser: feed() bytes as they arrive, then call next()
// until it returns an empty optional. Partial reads, back-to-back frames and frames
// split anywhere are handled; a frame larger than max_frame_size, non-msgpack bytes or
// a map without head/body is an error after which the connection must be closed.
// Thread-safety: one parser per connection, not shared.
#pragma once
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/wire/input_buffer.hpp"
#include "core/wire/msgpack.hpp"
#include "core/wire/value.hpp"

namespace sylvite::wire {

struct frame {
  value head;  // map; {} on the publish stream; {"mid": "<uuid4>"} on requests
  value body;
};

// Encode a frame (frame packing). head must be a map.
std::string pack_frame(const value& head, const value& body);

class frame_parser {
 public:
  explicit frame_parser(std::size_t max_frame_size = 100u << 20);
  // Full limits: max_bytes per frame, max_depth, max_nodes (see wire::limits).
  explicit frame_parser(const limits& lim);
  // Change the limits, also in the middle of a frame (a connection that authenticated
  // gets the larger ones). A frame already over the new limits fails on the next next().
  void set_limits(const limits& lim) noexcept;
  const limits& get_limits() const noexcept { return lim_; }
  // True while part of a frame is buffered (a frame started but not complete).
  bool in_frame() const noexcept { return buffered() > 0 && !poisoned_; }
  // Bytes the parser's buffer holds (its capacity), for memory accounting.
  std::size_t capacity() const noexcept { return buf_.capacity(); }
  // The buffer's capacity once feed() of n more bytes has run (see input_buffer): a
  // caller can charge the memory before it is allocated.
  std::size_t capacity_after(std::size_t n) const noexcept { return buf_.capacity_after(n); }
  // Free the buffer if nothing is buffered (a connection between frames).
  void release_memory() noexcept { buf_.release(); }
  // Append received bytes.
  void feed(std::string_view data);
  // Next complete frame; empty optional if more bytes are needed. On error the parser
  // is poisoned (every later call returns the same error).
  result<std::optional<frame>> next();
  // Bytes buffered but not yet returned as a frame.
  std::size_t buffered() const noexcept { return buf_.size(); }

 private:
  input_buffer buf_;
  limits lim_;
  error_code poisoned_;
  object_scanner scan_;  // progress through the pending frame (no rescans per feed)
};

}  // namespace sylvite::wire
