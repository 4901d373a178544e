// sylvite::transport::detail::input_codec: what turns a connection's bytes into frames,
// with no Asio in sight (the fuzzers and codec tests link only this and sylvite::wire).
// Thread-safety: one codec per session, used on its strand only.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/util/result.hpp"
#include "core/wire/frame.hpp"

namespace sylvite::transport::detail {

// What turns a connection's bytes into frames: Salt's TCP framing (make_salt_codec) or
// ZMTP (zmtp_codec.hpp). One per session, used on its strand only. The session meters memory
// through capacity()/capacity_after() before feeding, as for Salt frames.
class input_codec {
 public:
  virtual ~input_codec() = default;
  virtual void set_limits(const wire::limits& lim) noexcept = 0;
  virtual const wire::limits& get_limits() const noexcept = 0;
  // Part of a frame (or of a handshake) is buffered.
  virtual bool in_frame() const noexcept = 0;
  virtual std::size_t capacity() const noexcept = 0;
  virtual std::size_t capacity_after(std::size_t n) const noexcept = 0;
  virtual void release_memory() noexcept = 0;
  virtual void feed(std::string_view data) = 0;
  // Next complete frame, empty if more bytes are needed; an error closes the connection.
  virtual result<std::optional<wire::frame>> next() = 0;
  // Bytes the protocol sends by itself (a greeting, a heartbeat answer), taken once.
  virtual std::string take_output() { return {}; }
  // The connection closed: free what is buffered.
  virtual void clear() noexcept = 0;
};
std::unique_ptr<input_codec> make_salt_codec();

}  // namespace sylvite::transport::detail
