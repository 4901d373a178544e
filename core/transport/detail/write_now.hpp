// sylvite::transport internals: the first attempt of a write on a non-blocking socket.
// Both ends queue whole frames and write them in one go; write_now() tries that write
// at once (one sendmsg). What the socket buffer takes completes there, without an
// async_write whose completion is queued through the io_context (a hop and often a
// thread wake-up per frame); only the rest goes to async_write.
// Not part of the public contract (include only from core/transport/*.cpp).
// Thread-safety: as the socket (call on its strand).
#pragma once
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <vector>

namespace sylvite::transport::detail {

// One buffer per queued frame (a container of pointers to contiguous byte strings), in
// order: what write_now() and async_write take.
template <class Frames>
std::vector<boost::asio::const_buffer> frame_buffers(const Frames& frames) {
  std::vector<boost::asio::const_buffer> bufs;
  bufs.reserve(frames.size());
  for (const auto& f : frames) bufs.emplace_back(boost::asio::buffer(*f));
  return bufs;
}

// The socket must be in non-blocking mode (socket.non_blocking(true)). Returns the part
// of bufs not written yet (empty: all of it was); ec is set only for a real error (a
// full socket buffer is not one: everything is returned).
template <class Socket>
std::vector<boost::asio::const_buffer> write_now(Socket& sock, const std::vector<boost::asio::const_buffer>& bufs,
                                                 boost::system::error_code& ec) {
  std::size_t n = sock.write_some(bufs, ec);  // sendmsg over at most 64 of the buffers
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
    ec = {};
    n = 0;
  }
  std::vector<boost::asio::const_buffer> rest;
  if (ec) return rest;
  for (const auto& b : bufs) {
    if (n >= b.size()) {
      n -= b.size();
      continue;
    }
    if (rest.empty()) rest.reserve(bufs.size());
    rest.push_back(b + n);
    n = 0;
  }
  return rest;
}

}  // namespace sylvite::transport::detail
