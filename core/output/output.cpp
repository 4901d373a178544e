// sylvite::output implementation: byte-for-byte ports of Salt 3008's outputters
// (salt/output/nested.py, json_out.py, yaml_out.py, txt.py, raw.py, no_return.py and the
// older newline_values_only / no_out "quiet"). Pure functions, no shared state.
#include "core/output/output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/config/config.hpp"
#include "core/wire/py_repr.hpp"

namespace sylvite::output {
namespace {

using wire::value;

// ---------------------------------------------------------------------------------
// Python string helpers

// str.splitlines(): \n \r \r\n \v \f \x1c \x1d \x1e U+0085 U+2028 U+2029; a trailing
// separator does not yield an empty last line; "" -> [].
std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t sep = 0;
    if (c == '\r') {
      sep = (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    } else if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) {
      sep = 1;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      sep = 2;
    } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      sep = 3;
    }
    if (sep) {
      out.emplace_back(s.substr(start, i - start));
      i += sep;
      start = i;
    } else {
      ++i;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}


std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' ||
                        s.back() == '\r' || s.back() == '\v' || s.back() == '\f'))
    s.pop_back();
  return s;
}

using wire::py_bytes_repr;

std::string int_text(const value& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<std::uint64_t>());
  return std::to_string(v.get<std::int64_t>());
}

std::string number_text(const value& v) {
  if (v.is_number_float()) return py_float_repr(v.get<double>());
  return int_text(v);
}

// Keys of a map in Python sorted() order (code point order == UTF-8 byte order).
std::vector<const std::string*> sorted_keys(const value& m) {
  std::vector<const std::string*> keys;
  keys.reserve(m.size());
  for (auto it = m.begin(); it != m.end(); ++it) keys.push_back(&it.key());
  std::sort(keys.begin(), keys.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  return keys;
}

// ---------------------------------------------------------------------------------
// nested (salt/output/nested.py NestDisplay.display)

class nest_display {
 public:
  explicit nest_display(const options& o) : opt_(o) {}

  void display(const value& ret, int indent, const std::string& prefix, std::vector<std::string>& out) const {
    if (ret.is_null() || ret.is_boolean()) {
      out.push_back(ustring(indent, c(colors::light_yellow), ret.is_null() ? "None" : (ret.get<bool>() ? "True" : "False"), prefix));
    } else if (ret.is_number()) {
      out.push_back(ustring(indent, c(colors::light_yellow), number_text(ret), prefix));
    } else if (ret.is_string() || ret.is_binary()) {
      std::string text;
      if (ret.is_string()) {
        text = ret.get_ref<const std::string&>();
      } else {
        // Not UTF-8 (decode_embedded_strs ran first): Salt would print nothing; we print
        // the bytes repr so the operator sees something.
        const auto& b = ret.get_binary();
        text = py_bytes_repr(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
      }
      bool first = true;
      for (auto& line : splitlines(text)) {
        std::string lp = first ? prefix : std::string(prefix.size(), ' ');
        out.push_back(ustring(indent, c(colors::green), strip_esc(line), lp));
        first = false;
      }
    } else if (ret.is_array()) {
      auto color = c(opt_.retcode != 0 ? colors::red : colors::green);
      for (const auto& ind : ret) {
        if (ind.is_array() || ind.is_object()) {
          out.push_back(ustring(indent, color, "|_"));
          display(ind, indent + 2, ind.is_object() ? "" : "- ", out);
        } else {
          display(ind, indent, "- ", out);
        }
      }
    } else if (ret.is_object()) {
      auto color = c(opt_.retcode != 0 ? colors::red : colors::cyan);
      if (indent) out.push_back(ustring(indent, color, "----------"));
      for (const std::string* key : sorted_keys(ret)) {
        out.push_back(ustring(indent, color, *key, prefix, ":"));
        display(ret.at(*key), indent + 4, "", out);
      }
    }
  }

 private:
  std::string_view c(std::string_view color) const { return opt_.color ? color : std::string_view{}; }
  std::string ustring(int indent, std::string_view color, std::string_view msg, std::string_view prefix = "",
                      std::string_view suffix = "") const {
    std::string s(static_cast<std::size_t>(std::max(indent, 0)), ' ');
    s += color;
    s += prefix;
    s += msg;
    s += c(colors::endc);
    s += suffix;
    return s;
  }
  const options& opt_;
};

std::string render_nested(const value& data, const options& opt) {
  std::vector<std::string> lines;
  nest_display(opt).display(data, opt.nested_indent, "", lines);
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    out += lines[i];
  }
  return out;
}

// ---------------------------------------------------------------------------------
// no_return (salt/output/no_return.py)

void no_return_display(const value& ret, int indent, std::string& out, const options& opt) {
  auto col = [&](std::string_view s) { return opt.color ? s : std::string_view{}; };
  if (ret.is_string()) {
    const auto& s = ret.get_ref<const std::string&>();
    std::size_t start = 0;
    while (true) {
      auto nl = s.find('\n', start);
      out += col(colors::red);
      out.append(static_cast<std::size_t>(indent), ' ');
      out += s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      out += col(colors::endc);
      out += '\n';
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  } else if (ret.is_object()) {
    for (const std::string* key : sorted_keys(ret)) {
      out += col(colors::cyan);
      out.append(static_cast<std::size_t>(indent), ' ');
      out += *key;
      out += col(colors::endc);
      out += ":\n";
      no_return_display(ret.at(*key), indent + 4, out, opt);
    }
  }
}

// ---------------------------------------------------------------------------------
// json (Python json.dumps(data, indent=..., ensure_ascii=False, default=repr))

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const value& v, int indent, int level) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(lvl), ' ');
  };
  const bool pretty = indent >= 0;
  switch (v.type()) {
    case value::value_t::null: out += "null"; break;
    case value::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case value::value_t::number_integer:
    case value::value_t::number_unsigned: out += int_text(v); break;
    case value::value_t::number_float: {
      double d = v.get<double>();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(d);
      break;
    }
    case value::value_t::string: json_string(out, v.get_ref<const std::string&>()); break;
    case value::value_t::binary: {
      const auto& b = v.get_binary();
      json_string(out, py_bytes_repr(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())));
      break;
    }
    case value::value_t::array: {
      if (v.empty()) { out += "[]"; break; }
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += pretty ? "," : ", ";
        if (pretty) newline(level + 1);
        json_dump(out, e, indent, level + 1);
        first = false;
      }
      if (pretty) newline(level);
      out += ']';
      break;
    }
    case value::value_t::object: {
      if (v.empty()) { out += "{}"; break; }
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += pretty ? "," : ", ";
        if (pretty) newline(level + 1);
        json_string(out, it.key());
        out += ": ";
        json_dump(out, it.value(), indent, level + 1);
        first = false;
      }
      if (pretty) newline(level);
      out += '}';
      break;
    }
    case value::value_t::discarded: out += "null"; break;
  }
}

// ---------------------------------------------------------------------------------
// yaml

value sort_maps(const value& v) {
  if (v.is_object()) {
    value out = value::object();
    for (const std::string* k : sorted_keys(v)) out[*k] = sort_maps(v.at(*k));
    return out;
  }
  if (v.is_array()) {
    value out = value::array();
    for (const auto& e : v) out.push_back(sort_maps(e));
    return out;
  }
  return v;
}

bool yaml_plain_ok(const std::string& s) {
  if (s.empty()) return false;
  static const char* reserved[] = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"};
  std::string lower;
  for (char ch : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (auto* r : reserved)
    if (lower == r) return false;
  if (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+' || s[0] == '.') return false;
  for (unsigned char ch : s)
    if (!(std::isalnum(ch) || ch == '_' || ch == '/' || ch == '.' || ch == '-' || ch >= 0x80)) return false;
  return true;
}

// PyYAML default_flow_style=True (negative --out-indent): {a: 1, b: [x, 'y z']}.
void yaml_flow(std::string& out, const value& v) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      yaml_flow(out, value(it.key()));
      out += ": ";
      yaml_flow(out, it.value());
      first = false;
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& e : v) {
      if (!first) out += ", ";
      yaml_flow(out, e);
      first = false;
    }
    out += ']';
  } else if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (yaml_plain_ok(s)) {
      out += s;
    } else {
      out += '\'';
      for (char ch : s) {
        if (ch == '\'') out += "''";
        else out += ch;
      }
      out += '\'';
    }
  } else if (v.is_null()) {
    out += "null";
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "true" : "false";
  } else if (v.is_number()) {
    out += number_text(v);
  } else {
    out += py_repr(v);
  }
}

std::string render_yaml(const value& data, const options& opt) {
  value sorted = sort_maps(data);
  if (opt.indent_explicit && opt.indent < 0) {
    std::string out;
    yaml_flow(out, sorted);
    return out + "\n";
  }
  return config::to_yaml(sorted);
}

// ---------------------------------------------------------------------------------
// txt / raw / newline_values_only

std::string render_txt(const value& data) {
  std::string ret;
  if (data.is_object()) {
    for (auto it = data.begin(); it != data.end(); ++it) {
      const auto& v = it.value();
      if (v.is_string()) {
        for (auto& line : splitlines(v.get_ref<const std::string&>())) ret += it.key() + ": " + line + "\n";
      } else {
        ret += it.key() + ": " + py_str(v) + "\n";
      }
    }
  } else if (data.is_string()) {
    ret = data.get_ref<const std::string&>() + "\n";
  } else {
    // pprint.pformat: repr with dict keys sorted (line wrapping at 80 columns not reproduced)
    ret = py_repr(sort_maps(data)) + "\n";
  }
  return ret;
}

std::string render_newline_values_only(const value& data, const options& opt) {
  if (!data.is_object()) return render_nested(data, opt);  // Salt: TypeError -> nested
  std::string out;
  bool first = true;
  auto add = [&](const value& v) {
    if (!first) out += '\n';
    out += py_str(v);
    first = false;
  };
  for (const auto& [_, v] : data.items()) {
    if (v.is_array()) {
      for (const auto& e : v) add(e);
    } else {
      add(v);
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------

std::vector<std::string> py_splitlines(std::string_view s) { return splitlines(s); }

// Salt's strip_esc_sequence: ESC -> '?' so data cannot drive the terminal.
std::string strip_esc(std::string s) {
  std::replace(s.begin(), s.end(), '\x1b', '?');
  return s;
}

std::string py_float_repr(double d) { return wire::py_float_repr(d); }

std::string py_repr(const wire::value& v) { return wire::py_repr(v, wire::py_style_output); }

std::string py_str(const wire::value& v) { return wire::py_str(v, wire::py_style_output); }

bool known(std::string_view name) {
  return name == "nested" || name == "json" || name == "yaml" || name == "txt" || name == "text" ||
         name == "raw" || name == "newline_values_only" || name == "quiet" || name == "no_return" ||
         name == "highstate";
}

std::string render(std::string_view outputter, const wire::value& raw_data, const options& opt) {
  const value data = wire::decode_embedded_strs(raw_data);
  if (outputter == "json") {
    std::string out;
    json_dump(out, data, opt.indent, 0);
    return out;
  }
  if (outputter == "yaml") return render_yaml(data, opt);
  if (outputter == "txt" || outputter == "text") return render_txt(data);
  if (outputter == "raw") return py_str(data);
  if (outputter == "newline_values_only") return render_newline_values_only(data, opt);
  if (outputter == "quiet") return {};
  if (outputter == "highstate") {
    if (auto hs = render_highstate(data, opt)) return *hs;
    return render_nested(data, opt);  // try_printout's fallback
  }
  if (outputter == "no_return") {
    std::string out;
    no_return_display(data, 0, out, opt);
    return out;
  }
  return render_nested(data, opt);
}

std::string display(std::string_view outputter, const wire::value& data, const options& opt) {
  std::string s = rstrip(render(outputter, data, opt));
  if (s.empty()) return s;
  return s + "\n";
}

}  // namespace sylvite::output
