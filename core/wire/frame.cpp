// sylvite::wire frames: pack_frame and the incremental frame_parser.
// Thread-safety: one parser per connection, not shared.
//
// The parser keeps one input_buffer (consumed frames, then the frame being received).
// Two costs are kept linear in the bytes received:
// - scanning: an object_scanner remembers how far the current frame has been checked,
//   so a 5 MB frame in 4 KB reads is scanned once, not 1280 times;
// - compaction: input_buffer drops consumed bytes once they are at least as many as the
//   live ones (each byte is moved at most a constant number of times).
// A frame is decoded only once complete. max_frame_size is enforced by the scanner as
// soon as a declared length, or the buffered part of the frame, passes it.
#include "core/wire/frame.hpp"

#include <algorithm>
#include <utility>

namespace sylvite::wire {

namespace {

limits frame_limits(std::size_t max) {
  limits l;
  l.max_bytes = max;
  return l;
}
}  // namespace

std::string pack_frame(const value& head, const value& body) {
  // Same bytes as pack({"head": head, "body": body}, frame) without copying the values.
  std::string out;
  out.push_back(static_cast<char>(0x82));  // fixmap, 2 pairs
  out.append("\xa4head", 5);
  pack_append(out, head, packing::frame);
  out.append("\xa4" "body", 5);
  pack_append(out, body, packing::frame);
  return out;
}

frame_parser::frame_parser(std::size_t max_frame_size) : lim_(frame_limits(max_frame_size)), scan_(lim_) {}

frame_parser::frame_parser(const limits& lim) : lim_(lim), scan_(lim) {}

void frame_parser::set_limits(const limits& lim) noexcept {
  lim_ = lim;
  scan_.set_limits(lim);
}

void frame_parser::feed(std::string_view data) {
  if (poisoned_ || data.empty()) return;  // a poisoned connection is closed: drop input
  try {
    buf_.append(data);
  } catch (const std::exception&) {  // bad_alloc / length_error
    poisoned_ = errc::too_large;
  }
}

result<std::optional<frame>> frame_parser::next() {
  if (poisoned_) return poisoned_;
  if (buf_.size() == 0) return std::optional<frame>{};
  const std::string_view avail = buf_.pending();
  auto size = scan_.scan(avail);
  if (!size) {
    if (size.error() == errc::incomplete) return std::optional<frame>{};
    poisoned_ = size.error();
    return poisoned_;
  }
  auto v = unpack(avail.substr(0, *size), lim_);
  buf_.consume(*size);
  scan_.reset();
  if (!v) {
    poisoned_ = v.error();
    return poisoned_;
  }
  try {
    if (v->is_object()) {
      auto& obj = v->get_ref<value::object_t&>();
      value* head = nullptr;
      value* body = nullptr;
      for (auto& [k, e] : obj) {
        if (k == "head") head = &e;
        else if (k == "body") body = &e;
      }
      if (head != nullptr && head->is_object() && body != nullptr) {
        return std::optional<frame>(frame{std::move(*head), std::move(*body)});
      }
    }
  } catch (const std::exception&) {
  }
  poisoned_ = errc::bad_frame;
  return poisoned_;
}

}  // namespace sylvite::wire
