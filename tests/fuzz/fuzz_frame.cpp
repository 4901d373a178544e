// libFuzzer target for core/wire: the streaming frame_parser fed in input-chosen chunk
// sizes, checked against one-shot parsing, and unpack()/unpack_prefix()/scan_object()
// checked for agreement and pack/unpack round trips. Any crash, sanitizer report or
// broken invariant (abort) is a bug.
// Input layout: byte 0 seeds the chunk-size generator, byte 1 picks the limits, the
// rest is the byte stream. Mode bit 4 adds the pre-authentication path (docs/security.md
// 1): a node cap (limits::max_nodes) that only ever refuses, decoded values within it,
// and limits lifted at an input-chosen point (a connection authenticating mid-frame)
// giving the same frames as the unlimited parser.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"

namespace {

using namespace sylvite::wire;

#define FUZZ_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "fuzz_frame: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

struct outcome {
  std::vector<std::string> frames;  // each frame re-packed (compares NaN by bits)
  sylvite::error_code ec;
};

// Drains the parser; returns false once it is poisoned.
bool drain(frame_parser& p, outcome& out) {
  for (;;) {
    auto r = p.next();
    if (!r) {
      // Poisoned: the same error forever.
      auto again = p.next();
      FUZZ_CHECK(!again && again.error() == r.error());
      FUZZ_CHECK(r.error() != errc::incomplete);
      out.ec = r.error();
      return false;
    }
    if (!r->has_value()) return true;
    FUZZ_CHECK((*r)->head.is_object());
    out.frames.push_back(pack_frame((*r)->head, (*r)->body));
  }
}

void check_roundtrip(const value& v) {
  // Our own encoding decodes, and re-encodes to the same bytes (fixed point).
  for (packing pk : {packing::frame, packing::salt_payload}) {
    const std::string a = pack(v, pk);
    limits big;
    big.max_bytes = std::size_t{1} << 40;
    big.max_depth = 1000;
    auto back = unpack(a, big);
    FUZZ_CHECK(back.has_value());
    const std::string b = pack(*back, pk);
    FUZZ_CHECK(b == a);
    auto again = unpack(b, big);
    FUZZ_CHECK(again.has_value() && pack(*again, pk) == b);
  }
}

// Objects a decoded value holds, map keys included (what limits::max_nodes counts; a
// duplicate key makes the decoded value smaller than the wire form).
std::size_t count_nodes(const value& v) {
  std::size_t n = 1;
  if (v.is_object()) {
    for (const auto& [k, e] : v.items()) n += 1 + count_nodes(e);
  } else if (v.is_array()) {
    for (const auto& e : v) n += count_nodes(e);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::uint32_t seed = data[0] * 2654435761u + 1;
  const std::uint8_t mode = data[1];
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  limits lim;
  lim.max_bytes = (mode & 1) ? 64 : (1u << 20);
  lim.max_depth = (mode & 2) ? 4 : 64;
  const std::size_t max_frame = lim.max_bytes;

  // 1. One-shot decoding: scan, unpack_prefix and unpack agree.
  auto scanned = scan_object(stream, lim);
  std::size_t used = 0;
  auto pre = unpack_prefix(stream, used, lim);
  auto whole = unpack(stream, lim);
  if (scanned) {
    FUZZ_CHECK(*scanned > 0 && *scanned <= stream.size() && *scanned <= lim.max_bytes);
    if (pre) {
      FUZZ_CHECK(used == *scanned);
      check_roundtrip(*pre);
    } else {
      FUZZ_CHECK(pre.error() == errc::bad_key);  // the only thing the scan does not see
    }
    if (*scanned == stream.size()) FUZZ_CHECK(whole.has_value() == pre.has_value());
    else FUZZ_CHECK(!whole && (whole.error() == errc::trailing_bytes || whole.error() == errc::bad_key));
  } else {
    FUZZ_CHECK(!pre && pre.error() == scanned.error());
    FUZZ_CHECK(!whole && whole.error() == scanned.error());
  }

  // 2. The frame parser: everything at once vs. input-chosen chunks, same outcome.
  outcome at_once, chunked;
  {
    frame_parser p(max_frame);
    p.feed(stream);
    drain(p, at_once);
  }
  {
    frame_parser p(max_frame);
    std::size_t pos = 0;
    bool alive = true;
    while (pos < stream.size() && alive) {
      seed = seed * 1103515245u + 12345u;
      const std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + (seed >> 16) % 64);
      p.feed(stream.substr(pos, n));
      pos += n;
      alive = drain(p, chunked);
    }
    if (alive) FUZZ_CHECK(p.buffered() <= stream.size());
  }
  FUZZ_CHECK(at_once.ec == chunked.ec);
  FUZZ_CHECK(at_once.frames == chunked.frames);

  // 3. Pre-authentication limits.
  if (mode & 4) {
    limits pa = lim;
    pa.max_nodes = 1 + data[0] % 64;
    auto sc = scan_object(stream, pa);
    if (sc) {
      FUZZ_CHECK(scanned && *scanned == *sc);  // the cap only refuses
      std::size_t u = 0;
      if (auto v = unpack_prefix(stream, u, pa)) FUZZ_CHECK(count_nodes(*v) <= pa.max_nodes);
    } else if (scanned) {
      FUZZ_CHECK(sc.error() == errc::too_large);
    }
    // Chunked under the cap, lifted after an input-chosen number of chunks: its frames
    // are a prefix of the unlimited parser's (same limits as at_once once lifted).
    outcome capped;
    limits full;
    full.max_bytes = max_frame;
    frame_parser p(pa);
    std::size_t pos = 0;
    const unsigned lift_after = data[0] % 8;
    bool alive = true;
    for (unsigned chunk = 0; pos < stream.size() && alive; ++chunk) {
      if (chunk == lift_after) p.set_limits(full);
      seed = seed * 1103515245u + 12345u;
      const std::size_t n = std::min<std::size_t>(stream.size() - pos, 1 + (seed >> 16) % 64);
      p.feed(stream.substr(pos, n));
      pos += n;
      alive = drain(p, capped);
    }
    FUZZ_CHECK(capped.frames.size() <= at_once.frames.size());
    for (std::size_t i = 0; i < capped.frames.size(); ++i) FUZZ_CHECK(capped.frames[i] == at_once.frames[i]);
    if (lift_after == 0) {  // lifted before any input: exactly the unlimited outcome
      FUZZ_CHECK(capped.ec == at_once.ec);
      FUZZ_CHECK(capped.frames == at_once.frames);
    }
  }
  return 0;
}
