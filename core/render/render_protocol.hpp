// sylvite::render wire protocol between the pool and a `sylvite-render` worker (internal
// to core/render; docs/architecture.md "Rendering"). One request, one reply, each a frame:
// 4-byte big-endian length + UTF-8 JSON.
//   request: {"path", "saltenv", "sls", "roots": [...], "default_pipe", "blacklist": [...],
//             "whitelist": [...], "context": {...}, "max_output_bytes": N}
//   reply:   {"status": "ok", "data": ...} |
//            {"status": "render_error" | "unsupported_renderer", "error": "..."}
// While rendering, the worker may send calls instead of the reply (render.hpp
// call_handler), each answered by the pool before the worker goes on:
//   call:        {"call": "mine.get", "args": {...}}   (worker -> pool)
//   call reply:  {"ok": true, "value": ...} | {"ok": false, "error": "..."}  (pool -> worker)
// Byte strings travel as {"__sylvite_bytes__": "<base64>"} and non-finite floats as
// {"__sylvite_float__": "inf" | "-inf" | "nan"}, both ways.
// Thread-safety: pure functions.
#pragma once
#include <cstdint>
#include <string>

#include "core/render/render.hpp"

namespace sylvite::render {

inline constexpr const char* bytes_tag = "__sylvite_bytes__";
inline constexpr const char* float_tag = "__sylvite_float__";

std::string frame_header(std::size_t len);
std::string encode_request(const request& r, std::size_t max_output_bytes);
// false (and err) when the reply is not a valid reply document.
bool decode_reply(const std::string& body, outcome& out, std::string& err);

// A frame from the worker: a call (is_call, fun, args) or else the reply (decode_reply).
struct worker_call {
  std::string fun;
  wire::value args;
};
// true: body is a call document ({"call": string, "args": map}; args decoded from the
// JSON forms); false: not a call (then it must be a reply). err set when the document
// has "call" but is malformed (a protocol error).
bool decode_call(const std::string& body, worker_call& out, std::string& err);
std::string encode_call_result(const call_result& r);

}  // namespace sylvite::render
