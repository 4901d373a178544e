// sylvite::transport::zmtp: ZMTP 3.1 (rfc.zeromq.org 23 and 37) with the NULL mechanism,
// spoken natively on the master's ZeroMQ ports (the servers are in detail/zmtp.hpp): a
// ROUTER on the request port and an XPUB on the publish port. Peers are libzmq REQ/DEALER
// and SUB/XSUB sockets (Salt's minions, sylvite's minion and swarm); docs/wire-format.md.
// The client roles (zmtp_client.cpp) are a REQ towards a ROUTER/REP and a SUB towards a
// PUB/XPUB: a salt-master's libzmq sockets, or sylvite's native servers. A client sends
// no message before the peer's READY (libzmq drops a connection whose message arrives
// before libzmq has sent its own READY).
//
// A connection: both sides send a 64-byte greeting (signature FF 00*7 01 7F, version
// 3.1, mechanism "NULL", as-server 0, filler), then a READY command with properties
// (Socket-Type, Identity), then frames: flags (1 MORE, 2 LONG: 8-byte size, 4 COMMAND),
// a 1- or 8-byte big-endian size, the bytes. Commands after READY: PING (answered with
// PONG and its context), PONG, ERROR (closes), SUBSCRIBE/CANCEL (ZMTP 3.1 subscriptions;
// libzmq also sends them as messages \x01topic / \x00topic). Others are ignored.
//
// The codec yields wire::frames:
//   {head: {"ready": "<peer socket type>"}, body: null}  once, after the peer's READY;
//   router: {head: {}, body: <decoded payload>} for a REQ message ["", payload]; a longer
//     envelope (frames up to the first empty one, e.g. through a proxy) is in
//     head["envelope"] as binary strings, to be sent back before the reply;
//   xpub: {head: {"sub": true|false}, body: <binary topic>} for a (un)subscription;
//   req: {head: {}, body: <decoded payload>} for a reply ["", payload];
//   sub: {head: {}, body: <binary payload>} for a one-frame publish, and
//     {head: {"topic": <binary>}, body: <binary payload>} for [topic, payload], and
//     {head: {"malformed": true}, body: null} for any other number of frames.
// Limits: max_bytes bounds a whole message (checked on each frame's declared size, before
// its bytes are buffered); max_nodes/max_depth bound the decoded payload; a message has at
// most 16 frames and a command at most 4096 bytes.
// Thread-safety: a codec belongs to one session (its strand); the encoders are pure.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/transport/detail/input_codec.hpp"
#include "core/wire/input_buffer.hpp"

namespace sylvite::transport::zmtp {

enum class role { router, xpub, req, sub };

inline constexpr unsigned char flag_more = 1, flag_long = 2, flag_command = 4;
inline constexpr std::size_t greeting_size = 64;
inline constexpr std::size_t max_command_size = 4096;
inline constexpr std::size_t max_message_frames = 16;

// Our greeting followed by our READY command (Socket-Type ROUTER or REQ with an empty
// Identity, XPUB, SUB).
std::string handshake(role r);
// Append one frame (header and bytes).
void append_frame(std::string& out, std::string_view data, bool more, bool command = false);
// A whole message: frames in order, MORE on all but the last.
std::string encode_message(const std::vector<std::string>& frames);
// A command frame: name (1-byte length) and data.
std::string command(std::string_view name, std::string_view data);
// PING with a time-to-live in deciseconds and an empty context.
std::string ping(std::uint16_t ttl_deciseconds);
// A REQ socket's request: ["", payload] (the empty delimiter, then the payload).
std::string request(std::string_view payload);
// A SUB socket's subscription as a message (\x01topic), which every ZMTP 3.x PUB/XPUB
// accepts (libzmq, sylvite's native XPUB).
std::string subscribe(std::string_view topic);

class codec final : public detail::input_codec {
 public:
  explicit codec(role r);
  void set_limits(const wire::limits& lim) noexcept override { lim_ = lim; }
  const wire::limits& get_limits() const noexcept override { return lim_; }
  bool in_frame() const noexcept override { return buffered() > 0 && !poisoned_; }
  std::size_t capacity() const noexcept override { return buf_.capacity(); }
  std::size_t capacity_after(std::size_t n) const noexcept override { return buf_.capacity_after(n); }
  void release_memory() noexcept override { buf_.release(); }
  void feed(std::string_view data) override;
  result<std::optional<wire::frame>> next() override;
  std::string take_output() override { return std::move(out_); }
  void clear() noexcept override;

  bool ready() const noexcept { return state_ == state::traffic; }
  std::size_t buffered() const noexcept { return buf_.size(); }

 private:
  enum class state { greeting, ready, traffic };
  result<std::optional<wire::frame>> fail(error_code ec);
  // A complete command at data (name and body); a frame to yield, or nothing.
  result<std::optional<wire::frame>> on_command(std::string_view data);
  result<std::optional<wire::frame>> on_message();

  role role_;
  state state_ = state::greeting;
  wire::limits lim_;
  wire::input_buffer buf_;  // pending: the message (or command) being received
  std::size_t scan_ = 0;    // offset in buf_.pending() of the next frame header
  std::size_t msg_bytes_ = 0;
  struct part {
    std::size_t off, len;  // in buf_.pending()
  };
  std::vector<part> parts_;
  std::string out_;
  error_code poisoned_;
};

}  // namespace sylvite::transport::zmtp
