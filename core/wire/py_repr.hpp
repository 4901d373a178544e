// Python repr() / str() of a wire value, shared by the outputters (core/output), the
// matchers (core/match) and the eauth ACL checks (master/api/eauth_acl). One
// implementation with a style per caller (strings and bytes differ by caller):
//   - floats:  CPython's repr(float) for every caller (shortest round-trip; scientific when
//              the decimal exponent is < -4 or >= 16): 1.0, 100.0, 1e+16, 1.5e-05. Salt
//              calls str() on the value in each place (outputters, matchers, the eauth
//              argument check), so one format is right everywhere.
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
  enum class strings { unicode, ascii_controls, minimal };
  enum class bytes { as_bytes, as_str, as_text };
  strings string_escapes = strings::unicode;
  bytes binary = bytes::as_bytes;
};

// The styles of the three callers (see above).
inline constexpr py_style py_style_output{};
inline constexpr py_style py_style_match{py_style::strings::ascii_controls, py_style::bytes::as_str};
inline constexpr py_style py_style_acl{py_style::strings::minimal, py_style::bytes::as_text};

// repr(v): 'str', True, None, 1.5, [1, 'a'], {'k': 1}.
std::string py_repr(const value& v, const py_style& style = {});
// str(v): a string as-is (binary too unless style.binary is as_bytes), anything else repr(v).
std::string py_str(const value& v, const py_style& style = {});
// repr(float).
std::string py_float_repr(double d);
// repr(str) of text in the given escaping.
std::string py_str_repr(std::string_view s, py_style::strings escapes = py_style::strings::unicode);
// repr(bytes): b'...', bytes outside printable ASCII as \xNN.
std::string py_bytes_repr(std::string_view s);

}  // namespace sylvite::wire
