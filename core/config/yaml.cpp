// sylvite::config YAML <-> wire::value: parse_yaml() and to_yaml().
// Scalars are typed like Salt's loader (salt.utils.yaml.safe_load = PyYAML SafeLoader,
// YAML 1.1 implicit resolvers) rather than like yaml-cpp's YAML 1.2 guesses:
//   null: "", ~, null/Null/NULL        bool: yes/no/true/false/on/off in 3 casings
//   int:  [-+]?0b.., 0x.., decimal with '_', sexagesimal 1:30 (= 90); Salt strips leading
//         zeros of unsigned ints, so "0755" is 755 (not octal) and "0o17" is a string
//   float: needs a '.', exponent needs a sign ("1e3" is a string), .inf/.nan
//   quoted or block scalars are always strings; timestamps stay strings (Salt quirk).
// Duplicate keys are an error, as in Salt ("found conflicting ID").
// to_yaml() writes block style and quotes every string PyYAML would otherwise retype.
// Thread-safety: pure functions.
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
// GCC 12 with -fsanitize=address reports -Wmaybe-uninitialized inside libstdc++'s
// <regex> (std::function in _State); a known false positive, silenced for that header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <set>
#include <sstream>

#include "core/config/config.hpp"
#include "core/config/detail.hpp"
#include "core/wire/py_repr.hpp"

namespace sylvite::config {
namespace detail {

namespace {

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

bool all_of_chars(std::string_view s, std::string_view allowed) {
  for (char c : s)
    if (allowed.find(c) == std::string_view::npos) return false;
  return true;
}

// The PyYAML 1.1 resolver regexes (yaml/resolver.py), compiled once.
const std::regex& int_re() {
  static const std::regex re(
      R"(^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$)");
  return re;
}
const std::regex& float_re() {
  static const std::regex re(
      R"(^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$)");
  return re;
}

std::string strip_underscores(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

// Accumulate digits in base into a wide unsigned; false on overflow.
bool parse_digits(std::string_view d, int base, u128& out) {
  out = 0;
  if (d.empty()) return false;
  for (char c : d) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return false;
    if (v >= base) return false;
    out = out * static_cast<unsigned>(base) + static_cast<unsigned>(v);
    if (out > (static_cast<u128>(1) << 64)) return false;
  }
  return true;
}

wire::value make_int(bool negative, u128 mag, const std::string& fallback) {
  if (!negative) {
    if (mag <= std::numeric_limits<std::int64_t>::max()) return wire::value(static_cast<std::int64_t>(mag));
    if (mag <= std::numeric_limits<std::uint64_t>::max()) return wire::value(static_cast<std::uint64_t>(mag));
  } else {
    if (mag <= static_cast<u128>(std::numeric_limits<std::int64_t>::max()) + 1)
      return wire::value(static_cast<std::int64_t>(-static_cast<i128>(mag)));
  }
  // Python ints are unbounded; we are not. Keep the text rather than lose digits.
  return wire::value(fallback);
}

// SafeConstructor.construct_yaml_int after Salt's construct_scalar tweak.
wire::value construct_int(std::string_view text) {
  std::string v(text);
  // Salt: unsigned values starting with '0' (not 0b/0x) lose their leading zeros -> decimal.
  if (v != "0" && v.starts_with('0') && !v.starts_with("0b") && !v.starts_with("0x")) {
    auto p = v.find_first_not_of('0');
    v = p == std::string::npos ? "0" : v.substr(p);
  }
  v = strip_underscores(v);
  bool neg = false;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    neg = v[0] == '-';
    v.erase(0, 1);
  }
  u128 mag = 0;
  std::string orig(text);
  if (v.empty() || v == "0") return wire::value(0);  // PyYAML crashes on "0_"; we say 0
  if (v.starts_with("0b")) {
    if (!parse_digits(v.substr(2), 2, mag)) return wire::value(orig);
  } else if (v.starts_with("0x")) {
    if (!parse_digits(v.substr(2), 16, mag)) return wire::value(orig);
  } else if (v[0] == '0') {
    if (!parse_digits(v.substr(1), 8, mag)) return wire::value(orig);  // signed octal (PyYAML)
  } else if (v.find(':') != std::string::npos) {
    u128 base = 1;
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
      auto p = v.find(':', start);
      parts.push_back(v.substr(start, p == std::string::npos ? std::string::npos : p - start));
      if (p == std::string::npos) break;
      start = p + 1;
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      u128 d = 0;
      if (!parse_digits(*it, 10, d)) return wire::value(orig);
      mag += d * base;
      base *= 60;
      if (mag > (static_cast<u128>(1) << 64)) return wire::value(orig);
    }
  } else {
    if (!parse_digits(v, 10, mag)) return wire::value(orig);
  }
  return make_int(neg, mag, orig);
}

wire::value construct_float(std::string_view text) {
  std::string v = strip_underscores(text);
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double sign = 1.0;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    if (v[0] == '-') sign = -1.0;
    v.erase(0, 1);
  }
  if (v == ".inf") return wire::value(sign * std::numeric_limits<double>::infinity());
  if (v == ".nan") return wire::value(std::numeric_limits<double>::quiet_NaN());
  if (v.find(':') != std::string::npos) {
    std::vector<double> parts;
    std::size_t start = 0;
    for (;;) {
      auto p = v.find(':', start);
      parts.push_back(std::strtod(v.substr(start, p == std::string::npos ? std::string::npos : p - start).c_str(), nullptr));
      if (p == std::string::npos) break;
      start = p + 1;
    }
    double base = 1, value = 0;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      value += *it * base;
      base *= 60;
    }
    return wire::value(sign * value);
  }
  return wire::value(sign * std::strtod(v.c_str(), nullptr));
}

}  // namespace

wire::value resolve_plain_scalar(std::string_view s) {
  static const std::set<std::string_view> nulls = {"", "~", "null", "Null", "NULL"};
  static const std::set<std::string_view> trues = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string_view> falses = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  if (nulls.count(s)) return nullptr;
  if (trues.count(s)) return true;
  if (falses.count(s)) return false;
  if (!s.empty() && all_of_chars(s.substr(0, 1), "-+0123456789.")) {
    std::string str(s);
    if (std::regex_match(str, int_re())) return construct_int(s);
    if (std::regex_match(str, float_re())) return construct_float(s);
  }
  return wire::value(std::string(s));
}

// CPython's repr(float), as PyYAML's represent_float starts from it.
std::string python_float_repr(double d) { return wire::py_float_repr(d); }

std::optional<std::string_view> bytes_of(const wire::value& v) {
  if (v.is_string()) return std::string_view(v.get_ref<const std::string&>());
  if (v.is_binary()) {
    const auto& b = v.get_binary();
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return std::nullopt;
}

std::string python_str(const wire::value& v) {
  switch (v.type()) {
    case wire::value::value_t::null: return "None";
    case wire::value::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case wire::value::value_t::number_integer: return std::to_string(v.get<std::int64_t>());
    case wire::value::value_t::number_unsigned: return std::to_string(v.get<std::uint64_t>());
    case wire::value::value_t::number_float: return python_float_repr(v.get<double>());
    case wire::value::value_t::string:
    case wire::value::value_t::binary: return std::string(*bytes_of(v));
    default: return v.dump();
  }
}

}  // namespace detail

namespace {

struct yaml_failure {
  std::string message;
};

std::string where(const YAML::Mark& m) {
  return "line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1);
}

constexpr std::size_t max_nodes = 1'000'000;  // alias expansion bomb guard

std::optional<std::string> base64_decode_local(std::string_view in) {
  std::string out;
  unsigned val = 0;
  int bits = -8;
  for (char c : in) {
    int d;
    if (c >= 'A' && c <= 'Z') d = c - 'A';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
    else if (c >= '0' && c <= '9') d = c - '0' + 52;
    else if (c == '+') d = 62;
    else if (c == '/') d = 63;
    else if (c == '=' || c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    else return std::nullopt;
    val = (val << 6) | static_cast<unsigned>(d);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

wire::value convert(const YAML::Node& n, std::size_t& budget);

wire::value convert_scalar(const YAML::Node& n) {
  const std::string& tag = n.Tag();
  const std::string& s = n.Scalar();
  if (tag == "?") return detail::resolve_plain_scalar(s);
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return wire::value(s);
  if (tag == "tag:yaml.org,2002:int") {
    auto v = detail::resolve_plain_scalar(s);
    if (v.is_number_integer()) return v;
  } else if (tag == "tag:yaml.org,2002:float") {
    auto v = detail::resolve_plain_scalar(s);
    if (v.is_number()) return wire::value(v.get<double>());
  } else if (tag == "tag:yaml.org,2002:bool") {
    auto v = detail::resolve_plain_scalar(s);
    if (v.is_boolean()) return v;
  } else if (tag == "tag:yaml.org,2002:null") {
    return nullptr;
  } else if (tag == "tag:yaml.org,2002:binary") {
    if (auto b = base64_decode_local(s)) {
      return wire::value::binary(std::vector<std::uint8_t>(b->begin(), b->end()));
    }
  }
  throw yaml_failure{where(n.Mark()) + ": could not construct a value of tag '" + tag + "' from '" + s + "'"};
}

// Map keys become object keys: Python's str() of the typed key (1 -> "1", yes -> "True").
std::string key_string(const YAML::Node& k, std::size_t& budget) {
  if (k.IsNull()) return "None";
  if (!k.IsScalar()) throw yaml_failure{where(k.Mark()) + ": found unacceptable key (a map or list)"};
  return detail::python_str(convert(k, budget));
}

wire::value convert(const YAML::Node& n, std::size_t& budget) {
  if (budget == 0) throw yaml_failure{where(n.Mark()) + ": document too large (alias expansion?)"};
  --budget;
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return convert_scalar(n);
    case YAML::NodeType::Sequence: {
      wire::value arr = wire::value::array();
      for (const auto& item : n) arr.push_back(convert(item, budget));
      return arr;
    }
    case YAML::NodeType::Map: {
      wire::value obj = wire::value::object();
      std::vector<YAML::Node> merges;
      for (YAML::const_iterator it = n.begin(); it != n.end(); ++it) {
        const std::pair<YAML::Node, YAML::Node> kv = *it;  // copies: GCC 12 warns on it->first
        const YAML::Node& k = kv.first;
        if (k.IsScalar() && k.Tag() == "?" && k.Scalar() == "<<") {
          merges.push_back(kv.second);
          continue;
        }
        std::string key = key_string(k, budget);
        if (obj.contains(key)) {
          throw yaml_failure{where(k.Mark()) + ": found conflicting ID '" + key + "'"};
        }
        obj[key] = convert(kv.second, budget);
      }
      // YAML merge keys ("<<: *anchor"): explicit keys win, as in PyYAML.
      for (const auto& m : merges) {
        std::vector<YAML::Node> sources;
        if (m.IsMap()) sources.push_back(m);
        else if (m.IsSequence()) for (const auto& x : m) sources.push_back(x);
        for (const auto& src : sources) {
          if (!src.IsMap()) throw yaml_failure{where(src.Mark()) + ": expected a mapping for merging"};
          wire::value sv = convert(src, budget);
          for (auto& [k, v] : sv.items())
            if (!obj.contains(k)) obj[k] = v;
        }
      }
      return obj;
    }
  }
  return nullptr;
}

}  // namespace

namespace {
using yaml_result = boost::system::result<wire::value, std::string>;
yaml_result ok(wire::value v) { return yaml_result(boost::system::in_place_value, std::move(v)); }
yaml_result fail(std::string m) { return yaml_result(boost::system::in_place_error, std::move(m)); }
}  // namespace

boost::system::result<wire::value, std::string> parse_yaml(const std::string& text) {
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.empty()) return ok(wire::value(nullptr));
    if (docs.size() > 1) return fail("line 1, column 1: expected a single document in the stream, found more");
    std::size_t budget = max_nodes;
    return ok(convert(docs.front(), budget));
  } catch (const YAML::ParserException& e) {
    return fail(where(e.mark) + ": " + e.msg);
  } catch (const YAML::Exception& e) {
    return fail(where(e.mark) + ": " + e.msg);
  } catch (const yaml_failure& f) {
    return fail(f.message);
  } catch (const std::exception& e) {
    return fail(std::string("line 1, column 1: ") + e.what());
  }
}

// --- to_yaml -------------------------------------------------------------------

namespace {

bool is_utf8_local(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    std::uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

std::string base64_encode_local(std::string_view in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  while (i + 2 < in.size()) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                 static_cast<unsigned char>(in[i + 2]);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
    i += 3;
  }
  if (i + 1 == in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// May s be written as a plain scalar and read back as the same string?
bool plain_ok(std::string_view s) {
  if (s.empty()) return false;
  auto rv = detail::resolve_plain_scalar(s);
  if (!rv.is_string()) return false;
  // PyYAML reads a number too large for int64 (a 20-digit jid) as an int: quote it.
  {
    std::string str(s);
    if (std::regex_match(str, detail::int_re()) || std::regex_match(str, detail::float_re())) return false;
  }
  // A leading char that starts YAML syntax, or surrounding whitespace.
  if (std::string_view("-?:,[]{}#&*!|>'\"%@` \t").find(s.front()) != std::string_view::npos) return false;
  if (s.back() == ' ' || s.back() == ':' || s.back() == '\t') return false;
  if (s.find(": ") != std::string_view::npos || s.find(" #") != std::string_view::npos) return false;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F || c >= 0x80) return false;  // keep non-ASCII quoted: simplest safe rule
    if (ch == ',' || ch == '[' || ch == ']' || ch == '{' || ch == '}') return false;  // flow indicators
  }
  // Timestamps and "=" are strings for Salt but plain PyYAML retypes them (dates).
  if (s == "=" || s == "<<") return false;
  if (s.size() >= 5 && std::isdigit(static_cast<unsigned char>(s[0])) && std::isdigit(static_cast<unsigned char>(s[1])) &&
      std::isdigit(static_cast<unsigned char>(s[2])) && std::isdigit(static_cast<unsigned char>(s[3])) && s[4] == '-')
    return false;
  return true;
}

// PyYAML's choice when a plain scalar is not allowed: single quotes for printable ASCII
// without line breaks ('' for a quote), else double quotes with escapes.
std::string single_quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else out.push_back(c);
  }
  out += '\'';
  return out;
}

bool single_ok(std::string_view s) {
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

std::string double_quoted(std::string_view s) {
  std::string out = "\"";
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case 0: out += "\\0"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char b[8];
          std::snprintf(b, sizeof b, "\\x%02X", c);
          out += b;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

std::string yaml_quoted(std::string_view s) { return single_ok(s) ? single_quoted(s) : double_quoted(s); }

std::string scalar_text(const wire::value& v) {
  switch (v.type()) {
    case wire::value::value_t::null: return "null";
    case wire::value::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case wire::value::value_t::number_integer: return std::to_string(v.get<std::int64_t>());
    case wire::value::value_t::number_unsigned: return std::to_string(v.get<std::uint64_t>());
    case wire::value::value_t::number_float: {
      double d = v.get<double>();
      if (std::isnan(d)) return ".nan";
      if (std::isinf(d)) return d < 0 ? "-.inf" : ".inf";
      std::string r = detail::python_float_repr(d);  // PyYAML represent_float
      if (r.find('.') == std::string::npos && r.find('e') != std::string::npos) r.replace(r.find('e'), 1, ".0e");
      return r;
    }
    case wire::value::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      return plain_ok(s) ? s : yaml_quoted(s);
    }
    case wire::value::value_t::binary: {
      auto b = *detail::bytes_of(v);
      if (is_utf8_local(b)) return plain_ok(b) ? std::string(b) : yaml_quoted(b);
      return "!!binary " + double_quoted(base64_encode_local(b));
    }
    case wire::value::value_t::object: return "{}";
    case wire::value::value_t::array: return "[]";
    default: return "null";
  }
}

bool is_block(const wire::value& v) {
  return (v.is_object() || v.is_array()) && !v.empty();
}

void emit(std::ostringstream& out, const wire::value& v, int indent);

void emit_map(std::ostringstream& out, const wire::value& v, int indent, bool first_inline) {
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!(first && first_inline)) out << std::string(static_cast<std::size_t>(indent), ' ');
    first = false;
    out << scalar_text(wire::value(it.key())) << ":";
    const auto& val = it.value();
    if (val.is_object() && !val.empty()) {
      out << "\n";
      emit_map(out, val, indent + 2, false);
    } else if (val.is_array() && !val.empty()) {
      out << "\n";
      emit(out, val, indent);  // indentless sequence, as PyYAML writes it
    } else {
      out << " " << scalar_text(val) << "\n";
    }
  }
}

void emit(std::ostringstream& out, const wire::value& v, int indent) {
  if (v.is_object() && !v.empty()) {
    emit_map(out, v, indent, false);
  } else if (v.is_array() && !v.empty()) {
    for (const auto& item : v) {
      out << std::string(static_cast<std::size_t>(indent), ' ') << "-";
      if (item.is_object() && !item.empty()) {
        out << " ";
        emit_map(out, item, indent + 2, true);
      } else if (item.is_array() && !item.empty()) {
        out << "\n";
        emit(out, item, indent + 2);
      } else {
        out << " " << scalar_text(item) << "\n";
      }
    }
  } else {
    out << std::string(static_cast<std::size_t>(indent), ' ') << scalar_text(v) << "\n";
  }
}

}  // namespace

std::string to_yaml(const wire::value& v) {
  std::ostringstream out;
  if (!is_block(v)) {
    out << scalar_text(v) << "\n";
    return out.str();
  }
  emit(out, v, 0);
  return out.str();
}

}  // namespace sylvite::config
