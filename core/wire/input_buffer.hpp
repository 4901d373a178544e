// sylvite::wire::input_buffer: the receive buffer of a stream decoder (frame_parser for
// Salt's framing, transport::zmtp::codec for ZMTP). Bytes before the read position are
// consumed; append() first compacts once they are at least as many as the live ones, and
// grows by explicit doubling so that capacity_after() is exact: a connection's memory is
// charged to its budget before it is allocated. Between messages release() frees it.
// Thread-safety: none (one per connection, used on its strand).
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace sylvite::wire {

class input_buffer {
 public:
  // Capacity kept after a compaction leaves the buffer empty; more is freed.
  static constexpr std::size_t keep_capacity = 1u << 20;

  // Bytes received and not consumed.
  std::string_view pending() const noexcept { return std::string_view(buf_).substr(pos_); }
  std::size_t size() const noexcept { return buf_.size() - pos_; }
  std::size_t capacity() const noexcept { return buf_.capacity(); }
  // The capacity once append() of n more bytes has run.
  std::size_t capacity_after(std::size_t n) const noexcept {
    std::size_t live = buf_.size();
    if (compacts()) live -= pos_;
    const std::size_t cap = buf_.capacity();
    if (live + n <= cap) return cap;
    return std::max(live + n, 2 * cap);
  }
  // Throws std::bad_alloc / std::length_error; pending() views stay valid until then.
  void append(std::string_view data) {
    if (compacts()) {
      buf_.erase(0, pos_);
      pos_ = 0;
      if (buf_.empty() && buf_.capacity() > keep_capacity) std::string().swap(buf_);
    }
    if (buf_.size() + data.size() > buf_.capacity())
      buf_.reserve(std::max(buf_.size() + data.size(), 2 * buf_.capacity()));
    buf_.append(data);
  }
  // Mark n pending bytes consumed (n <= size()).
  void consume(std::size_t n) noexcept { pos_ += n; }
  // Free the memory if nothing is pending.
  void release() noexcept {
    if (size() == 0) clear();
  }
  // Drop everything and free the memory.
  void clear() noexcept {
    std::string().swap(buf_);
    pos_ = 0;
  }

 private:
  bool compacts() const noexcept { return pos_ > 0 && pos_ >= buf_.size() - pos_; }

  std::string buf_;
  std::size_t pos_ = 0;
};

}  // namespace sylvite::wire
