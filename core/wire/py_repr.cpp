// Python repr()/str() of wire values (see py_repr.hpp). Pure functions.
#include "core/wire/py_repr.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace sylvite::wire {
namespace {

// One UTF-8 sequence's length from its lead byte (input is taken as valid UTF-8).
std::size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xe) return 3;
  return 4;
}

std::uint32_t utf8_cp(std::string_view s, std::size_t i, std::size_t n) {
  auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if (i + n > s.size()) return b(0);
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
    case 3: return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
  }
}

void append_hex_escape(std::string& out, std::uint32_t cp) {
  char buf[16];
  if (cp < 0x100)
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
  else if (cp < 0x10000)
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  else
    std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
  out += buf;
}

// Code points Python's str.isprintable() rejects that we can name cheaply: C0/C1
// controls, DEL, NBSP, soft hyphen, line/paragraph separators, BOM.
bool py_unprintable(std::uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad || cp == 0x2028 || cp == 0x2029 ||
         cp == 0xfeff || (cp >= 0x200b && cp <= 0x200f);
}

char quote_for(std::string_view s) {
  return (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"' : '\'';
}

std::string float_python(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  auto epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char ch : mant)
    if (ch != '.') digits += ch;
  std::string out = neg ? "-" : "";
  // Python repr ('r' format): fixed notation when -4 <= exp10 < 16, else scientific.
  if (exp >= 0 && exp < 16) {
    std::string ip, fp;
    if (static_cast<int>(digits.size()) <= exp + 1) {
      ip = digits + std::string(static_cast<std::size_t>(exp + 1) - digits.size(), '0');
      fp = "0";
    } else {
      ip = digits.substr(0, static_cast<std::size_t>(exp + 1));
      fp = digits.substr(static_cast<std::size_t>(exp + 1));
    }
    return out + ip + "." + fp;
  }
  if (exp < 0 && exp >= -4) return out + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

// A binary's bytes; an ext value's too, unless the style takes text as wire::as_text does.
std::string bytes_text(const value& v, py_style::bytes mode) {
  if (mode == py_style::bytes::as_text) {
    auto b = as_text(v);
    return b ? std::string(*b) : std::string();
  }
  const auto& b = v.get_binary();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

std::string py_float_repr(double d) {
  return float_python(d);
}

std::string py_str_repr(std::string_view s, py_style::strings escapes) {
  const char q = quote_for(s);
  std::string out(1, q);
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = escapes == py_style::strings::unicode ? utf8_len(c) : 1;
    std::uint32_t cp = n == 1 ? c : utf8_cp(s, i, n);
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<unsigned char>(q)) { out += '\\'; out += q; }
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (escapes == py_style::strings::unicode && py_unprintable(cp)) append_hex_escape(out, cp);
    else if (escapes == py_style::strings::ascii_controls && (cp < 0x20 || cp == 0x7f)) append_hex_escape(out, cp);
    else out.append(s.substr(i, n));
    i += n;
  }
  out += q;
  return out;
}

std::string py_bytes_repr(std::string_view s) {
  const char q = quote_for(s);
  std::string out = "b";
  out += q;
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += q; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c >= 0x7f) append_hex_escape(out, c);
    else out += static_cast<char>(c);
  }
  out += q;
  return out;
}

std::string py_repr(const value& v, const py_style& style) {
  switch (v.type()) {
    case value::value_t::null: return "None";
    case value::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case value::value_t::number_integer: return std::to_string(v.get<std::int64_t>());
    case value::value_t::number_unsigned: return std::to_string(v.get<std::uint64_t>());
    case value::value_t::number_float: return py_float_repr(v.get<double>());
    case value::value_t::string: return py_str_repr(v.get_ref<const std::string&>(), style.string_escapes);
    case value::value_t::binary:
      if (style.binary == py_style::bytes::as_bytes) return py_bytes_repr(bytes_text(v, style.binary));
      return py_str_repr(bytes_text(v, style.binary), style.string_escapes);
    case value::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(e, style);
      }
      return out + "]";
    }
    case value::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(it.key(), style.string_escapes) + ": " + py_repr(it.value(), style);
      }
      return out + "}";
    }
    case value::value_t::discarded: break;
  }
  return "None";
}

std::string py_str(const value& v, const py_style& style) {
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_binary() && style.binary != py_style::bytes::as_bytes) return bytes_text(v, style.binary);
  return py_repr(v, style);
}

}  // namespace sylvite::wire
