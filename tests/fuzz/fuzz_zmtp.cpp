// libFuzzer target for the native ZMTP codec (core/transport/detail/zmtp_codec.hpp): what a
// hostile peer can send to the master's ZeroMQ ports, and what a hostile master can send
// to the native clients (REQ and SUB roles). The codec is fed in input-chosen
// chunk sizes and checked against feeding everything at once: the same frames, the same
// error, the same bytes to send back (PONGs); memory use is what capacity_after()
// predicted. Any crash, sanitizer report or broken invariant (abort) is a bug.
// Input layout: byte 0 seeds the chunk sizes, byte 1 picks the role (bits 0 and 4:
// ROUTER, XPUB, REQ, SUB), a
// small byte limit (bit 1), a node limit (bit 2) and whether a valid greeting and READY
// come first (bit 3, so that the fuzzer reaches the traffic state from any input); the
// rest is the byte stream.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/transport/detail/zmtp_codec.hpp"
#include "core/wire/msgpack.hpp"

namespace {

using namespace sylvite;
namespace zmtp = sylvite::transport::zmtp;

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "fuzz_zmtp: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

struct outcome {
  std::vector<std::string> frames;  // head and body, packed
  std::string output;               // what the codec asked to send after its handshake
  error_code ec;
};

bool drain(zmtp::codec& c, outcome& out) {
  for (;;) {
    auto r = c.next();
    out.output += c.take_output();
    if (!r) {
      auto again = c.next();
      FUZZ_CHECK(!again && again.error() == r.error());
      out.ec = r.error();
      return false;
    }
    if (!*r) return true;
    FUZZ_CHECK((*r)->head.is_object());
    out.frames.push_back(wire::pack((*r)->head, wire::packing::frame) + wire::pack((*r)->body, wire::packing::frame));
  }
}

std::string peer_handshake(zmtp::role role) {
  std::string g("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x01NULL", 16);
  g.append(16, '\0');
  g.push_back(0);
  g.append(31, '\0');
  const std::string type = role == zmtp::role::router ? "REQ"
                           : role == zmtp::role::xpub ? "SUB"
                           : role == zmtp::role::req  ? "ROUTER"
                                                      : "PUB";
  std::string props;
  props.push_back(11);
  props += "Socket-Type";
  props += std::string("\0\0\0", 3) + static_cast<char>(type.size()) + type;
  return g + zmtp::command("READY", props);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::uint32_t seed = data[0] * 2654435761u + 1;
  const std::uint8_t mode = data[1];
  static constexpr zmtp::role roles[4] = {zmtp::role::router, zmtp::role::xpub, zmtp::role::req, zmtp::role::sub};
  const zmtp::role role = roles[(mode & 1) | ((mode >> 3) & 2)];
  std::string stream = (mode & 8) ? peer_handshake(role) : std::string();
  stream.append(reinterpret_cast<const char*>(data + 2), size - 2);

  wire::limits lim;
  lim.max_bytes = (mode & 2) ? 64 : (1u << 20);
  if (mode & 4) lim.max_nodes = 1 + data[0] % 32;

  outcome at_once, chunked;
  {
    zmtp::codec c(role);
    c.set_limits(lim);
    FUZZ_CHECK(c.take_output() == zmtp::handshake(role));
    c.feed(stream);
    drain(c, at_once);
  }
  {
    zmtp::codec c(role);
    c.set_limits(lim);
    (void)c.take_output();
    std::size_t pos = 0;
    bool alive = true;
    while (pos < stream.size() && alive) {
      seed = seed * 1103515245u + 12345u;
      const std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + (seed >> 16) % 64);
      const std::size_t predicted = c.capacity_after(n);
      c.feed(std::string_view(stream).substr(pos, n));
      FUZZ_CHECK(c.capacity() == predicted);
      pos += n;
      alive = drain(c, chunked);
      if (alive) FUZZ_CHECK(c.buffered() <= stream.size());
    }
    if (alive && !c.in_frame()) FUZZ_CHECK(c.buffered() == 0);
  }
  FUZZ_CHECK(at_once.ec == chunked.ec);
  FUZZ_CHECK(at_once.frames == chunked.frames);
  FUZZ_CHECK(at_once.output == chunked.output);
  return 0;
}
