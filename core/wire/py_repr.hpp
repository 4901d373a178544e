// Python repr() / str() of a wire value, shared by the outputters (core/output), the
// matchers (core/match) and the eauth ACL checks (master/api/eauth_acl). One
// implementation with a style per caller: the three ports it replaced differed in
// detail and each caller keeps its exact former output (tests pin it):
//   - floats:  `python`  CPython's repr(float) (shortest round-trip; scientific when the
//                        decimal exponent is < -4 or >= 16): 1.0, 1e+16, 1.5e-05 (output);
//              `g_fixed` shortest %g, rewritten in fixed notation when its exponent is in
//                        [-4, 16) (match). Differs from Python for 17-digit values in
//                        [1e16, 1e17): 21183886914793296.0 where Python says
//                        2.1183886914793296e+16;
//              `g`       shortest %g as printf writes it, ".0" added when it has neither
//                        '.' nor an exponent (eauth ACL). Differs from Python wherever %g
//                        picks an exponent: 100.0 -> "1e+02", 1e15 -> "1e+15".
//   - strings: `unicode`         escapes \\, the quote, \n \r \t and the code points
//                                str.isprintable() rejects (\xNN, \uNNNN, \UNNNNNNNN) on
//                                UTF-8 input (output);
//              `ascii_controls`  \\, the quote, \n \r \t, other bytes < 0x20 and 0x7f as
//                                \xNN, everything else raw (match);
//              `minimal`         \\, the quote, \n \r \t only (eauth ACL).
//   - bytes:   `as_bytes` b'...' (Python 3 bytes) (output); `as_str` shown as a str of
//              the same bytes (match); `as_text` the same, but an ext value (binary
//              with a subtype, wire::as_text refuses it) shows as '' (eauth ACL).
// The quote is ' unless the text holds ' and no ", as Python picks it. A discarded json
// value (never produced by the decoder) prints None.
// Thread-safety: pure functions.
#pragma once
#include <string>
#include <string_view>

#include "core/wire/value.hpp"

namespace sylvite::wire {

struct py_style {
  enum class floats { python, g_fixed, g };
  enum class strings { unicode, ascii_controls, minimal };
  enum class bytes { as_bytes, as_str, as_text };
  floats float_format = floats::python;
  strings string_escapes = strings::unicode;
  bytes binary = bytes::as_bytes;
};

// The styles of the three callers (see above).
inline constexpr py_style py_style_output{};
inline constexpr py_style py_style_match{py_style::floats::g_fixed, py_style::strings::ascii_controls,
                                         py_style::bytes::as_str};
inline constexpr py_style py_style_acl{py_style::floats::g, py_style::strings::minimal, py_style::bytes::as_text};

// repr(v): 'str', True, None, 1.5, [1, 'a'], {'k': 1}.
std::string py_repr(const value& v, const py_style& style = {});
// str(v): a string as-is (binary too unless style.binary is as_bytes), anything else repr(v).
std::string py_str(const value& v, const py_style& style = {});
// repr(float) in the given format.
std::string py_float_repr(double d, py_style::floats format = py_style::floats::python);
// repr(str) of text in the given escaping.
std::string py_str_repr(std::string_view s, py_style::strings escapes = py_style::strings::unicode);
// repr(bytes): b'...', bytes outside printable ASCII as \xNN.
std::string py_bytes_repr(std::string_view s);

}  // namespace sylvite::wire
