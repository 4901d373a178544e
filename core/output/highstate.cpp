// sylvite::output highstate: a byte-for-byte port of Salt 3008.5's salt/output/highstate.py
// (output, _format_host, _format_changes, _format_terse, _compress_ids) with the pieces
// of Python it leans on (str.format padding, str.strip, textwrap.fill, pprint.pformat,
// round, float()). Where the Python raises KeyError/TypeError/AttributeError, Salt's
// try_printout falls back to nested: render_highstate returns nullopt there (and also where
// Python would raise something else and crash the CLI, e.g. a state key without "_|-").
// Pure functions, no shared state.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/output/output.hpp"

namespace sylvite::output {
namespace {

using wire::value;

struct fail {};  // thrown inside this file only where Python raises; caught in render_highstate

// ---------------------------------------------------------------------------------
// Python helpers

std::size_t py_len(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xc0) != 0x80) ++n;
  return n;
}

std::string rjust(const std::string& s, std::size_t w) {
  std::size_t n = py_len(s);
  return n >= w ? s : std::string(w - n, ' ') + s;
}
std::string ljust(const std::string& s, std::size_t w) {
  std::size_t n = py_len(s);
  return n >= w ? s : s + std::string(w - n, ' ');
}

// Python truthiness.
bool truthy(const value& v) {
  switch (v.type()) {
    case value::value_t::null: return false;
    case value::value_t::boolean: return v.get<bool>();
    case value::value_t::number_integer: return v.get<std::int64_t>() != 0;
    case value::value_t::number_unsigned: return v.get<std::uint64_t>() != 0;
    case value::value_t::number_float: return v.get<double>() != 0.0;
    case value::value_t::string: return !v.get_ref<const std::string&>().empty();
    case value::value_t::binary: return !v.get_binary().empty();
    case value::value_t::array:
    case value::value_t::object: return !v.empty();
    default: return false;
  }
}

bool is_false(const value& v) { return v.is_boolean() && !v.get<bool>(); }

// Python's str.isspace() code points (ASCII whitespace, \x1c-\x1f and Unicode spaces).
std::size_t space_len_at(std::string_view s, std::size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xc2 && (b(1) == 0x85 || b(1) == 0xa0)) return 2;
  if (c == 0xe1 && b(1) == 0x9a && b(2) == 0x80) return 3;  // U+1680
  if (c == 0xe2 && b(1) == 0x80 && ((b(2) >= 0x80 && b(2) <= 0x8a) || b(2) == 0xa8 || b(2) == 0xa9 || b(2) == 0xaf))
    return 3;
  if (c == 0xe2 && b(1) == 0x81 && b(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

std::string py_strip(std::string_view s) {
  std::size_t a = 0;
  while (a < s.size()) {
    auto n = space_len_at(s, a);
    if (!n) break;
    a += n;
  }
  // from the right: find the last code point that is not a space
  std::size_t end = a;
  for (std::size_t i = a; i < s.size();) {
    auto n = space_len_at(s, i);
    if (n) {
      i += n;
    } else {
      auto c = static_cast<unsigned char>(s[i]);
      std::size_t cl = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
      i += cl;
      end = std::min(i, s.size());
    }
  }
  return std::string(s.substr(a, end - a));
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::vector<std::string> split(const std::string& s, std::string_view sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto p = s.find(sep, start);
    if (p == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + sep.size();
  }
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

std::string fmt_fixed(double d, int prec) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", prec, d);
  return buf;
}

// Python round(x, 2) for a float: correctly rounded, ties to even on the exact binary value.
double py_round2(double d) { return std::strtod(fmt_fixed(d, 2).c_str(), nullptr); }

// Python float(str): None when it raises ValueError.
std::optional<double> py_float_of_string(std::string s) {
  s = py_strip(s);
  std::string t;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      // underscores only between digits
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    t += s[i];
  }
  if (t.empty()) return std::nullopt;
  std::string low;
  for (char c : t) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    return low[0] == '-' ? -v : v;
  }
  // strtod also takes hex and "infinity" forms Python refuses: only digits, '.', e, sign.
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (!end || *end != '\0') return std::nullopt;
  return v;
}

// Python float(x) for a state's duration: nullopt on ValueError, throws fail on TypeError.
std::optional<double> py_float(const value& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return py_float_of_string(v.get<std::string>());
  throw fail{};
}

// Python sum() of a list of floats (3.11: plain left-to-right addition from int 0).
double py_sum(const std::vector<double>& v) {
  double s = 0;
  for (double d : v) s += d;
  return s;
}

// ---------------------------------------------------------------------------------
// pprint.pformat (width 80, indent 1, sort_dicts) for the data Salt prints when a state
// return lacks __run_num__.

std::string safe_repr(const value& v) {
  if (v.is_object()) {
    if (v.empty()) return "{}";
    std::vector<std::string> keys;
    for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
    std::sort(keys.begin(), keys.end());
    std::string out = "{";
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (i) out += ", ";
      out += py_repr(value(keys[i])) + ": " + safe_repr(v.at(keys[i]));
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& e : v) {
      if (!first) out += ", ";
      out += safe_repr(e);
      first = false;
    }
    return out + "]";
  }
  return py_repr(v);
}

// re.findall(r'\S*\s*', line) minus the final empty match.
std::vector<std::string> nonspace_space_parts(const std::string& line) {
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i < line.size()) {
    std::size_t start = i;
    while (i < line.size() && !space_len_at(line, i)) {
      auto c = static_cast<unsigned char>(line[i]);
      i += c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
    }
    while (i < line.size()) {
      auto n = space_len_at(line, i);
      if (!n) break;
      i += n;
    }
    parts.push_back(line.substr(start, std::min(i, line.size()) - start));
  }
  return parts;
}

// str.splitlines(True) for the line separators pprint sees.
std::vector<std::string> splitlines_keep(const std::string& s) {
  std::vector<std::string> out;
  auto lines = py_splitlines(s);
  std::size_t pos = 0;
  for (auto& l : lines) {
    std::size_t start = s.find(l, pos);
    if (l.empty()) start = pos;
    std::size_t after = start + l.size();
    // the separator that follows
    std::size_t sep = 0;
    if (after < s.size()) {
      auto c = static_cast<unsigned char>(s[after]);
      if (c == '\r') sep = (after + 1 < s.size() && s[after + 1] == '\n') ? 2 : 1;
      else if (c == 0xc2) sep = 2;
      else if (c == 0xe2) sep = 3;
      else sep = 1;
    }
    out.push_back(s.substr(pos, after + sep - pos));
    pos = after + sep;
  }
  return out;
}

class pprinter {
 public:
  std::string out;
  void format(const value& obj, int indent, int allowance, int level) {
    std::string rep = safe_repr(obj);
    int max_width = 80 - indent - allowance;
    if (static_cast<int>(py_len(rep)) > max_width) {
      if (obj.is_object() && !obj.empty()) return pprint_dict(obj, indent, allowance, level + 1);
      if (obj.is_array() && !obj.empty()) return pprint_list(obj, indent, allowance, level + 1);
      if (obj.is_string()) return pprint_str(obj.get<std::string>(), indent, allowance, level + 1);
    }
    out += rep;
  }

 private:
  void pprint_dict(const value& obj, int indent, int allowance, int level) {
    out += '{';
    std::vector<std::string> keys;
    for (auto it = obj.begin(); it != obj.end(); ++it) keys.push_back(it.key());
    std::sort(keys.begin(), keys.end());
    indent += 1;
    allowance += 1;
    std::string delimnl = ",\n" + std::string(static_cast<std::size_t>(indent), ' ');
    for (std::size_t i = 0; i < keys.size(); ++i) {
      bool last = i + 1 == keys.size();
      std::string rep = py_repr(value(keys[i]));
      out += rep;
      out += ": ";
      format(obj.at(keys[i]), indent + static_cast<int>(py_len(rep)) + 2, last ? allowance : 1, level);
      if (!last) out += delimnl;
    }
    out += '}';
  }
  void pprint_list(const value& obj, int indent, int allowance, int level) {
    out += '[';
    indent += 1;
    allowance += 1;
    std::string delimnl = ",\n" + std::string(static_cast<std::size_t>(indent), ' ');
    for (std::size_t i = 0; i < obj.size(); ++i) {
      bool last = i + 1 == obj.size();
      if (i) out += delimnl;
      format(obj[i], indent, last ? allowance : 1, level);
    }
    out += ']';
  }
  void pprint_str(const std::string& s, int indent, int allowance, int level) {
    std::vector<std::string> chunks;
    auto lines = splitlines_keep(s);
    if (level == 1) {
      indent += 1;
      allowance += 1;
    }
    int max_width1 = 80 - indent, max_width = 80 - indent;
    std::string rep;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      rep = py_repr(value(lines[i]));
      if (i + 1 == lines.size()) max_width1 -= allowance;
      if (static_cast<int>(py_len(rep)) <= max_width1) {
        chunks.push_back(rep);
      } else {
        auto parts = nonspace_space_parts(lines[i]);
        int max_width2 = max_width;
        std::string current;
        for (std::size_t j = 0; j < parts.size(); ++j) {
          std::string candidate = current + parts[j];
          if (j + 1 == parts.size() && i + 1 == lines.size()) max_width2 -= allowance;
          if (static_cast<int>(py_len(py_repr(value(candidate)))) > max_width2) {
            if (!current.empty()) chunks.push_back(py_repr(value(current)));
            current = parts[j];
          } else {
            current = candidate;
          }
        }
        if (!current.empty()) chunks.push_back(py_repr(value(current)));
      }
    }
    if (chunks.size() == 1) {
      out += rep;
      return;
    }
    if (level == 1) out += '(';
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      if (i) out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
      out += chunks[i];
    }
    if (level == 1) out += ')';
  }
};

std::string pformat(const value& v) {
  pprinter p;
  p.format(v, 0, 0, 0);
  return p.out;
}

// ---------------------------------------------------------------------------------
// textwrap.TextWrapper(width=80, initial_indent=14sp, subsequent_indent=14sp).fill(text)

bool tw_space(char c) { return c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == ' '; }

// Python's [^\d\W]: a word character that is not a digit (ASCII letters, '_', non-ASCII).
bool tw_letter(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool tw_word(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }
bool tw_wordpunct(unsigned char c) { return tw_word(c) || c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' || c == '?'; }

// TextWrapper._split (break_on_hyphens=True): whitespace runs, and words split after
// hyphens between letters ("long-winded" -> "long-", "winded") and around em-dashes.
std::vector<std::string> tw_chunks(const std::string& text) {
  std::vector<std::string> chunks;
  std::size_t i = 0, n = text.size();
  auto at = [&](std::size_t k) -> unsigned char { return k < n ? static_cast<unsigned char>(text[k]) : 0; };
  while (i < n) {
    if (tw_space(text[i])) {
      std::size_t s = i;
      while (i < n && tw_space(text[i])) ++i;
      chunks.push_back(text.substr(s, i - s));
      continue;
    }
    // em-dash between words: (?<=wp) -{2,} (?=\w)
    if (text[i] == '-' && i > 0 && tw_wordpunct(at(i - 1)) && at(i + 1) == '-') {
      std::size_t j = i;
      while (j < n && text[j] == '-') ++j;
      if (j < n && tw_word(at(j))) {
        chunks.push_back(text.substr(i, j - i));
        i = j;
        continue;
      }
    }
    // word: nws+? followed by (hyphen rule) | (end of word) | (em-dash ahead)
    std::size_t s = i;
    std::size_t j = i + 1;  // at least one char
    while (true) {
      // j: candidate end (exclusive) of the nws+? part
      if (j > n) break;
      if (j == n || tw_space(text[j])) break;  // end of word
      // hyphenated: text[j-1..] "-" ... the regex: nws+? then '-' with lookbehind/ahead
      if (text[j] == '-') {
        bool lb = (j >= 2 && tw_letter(at(j - 1)) && tw_letter(at(j - 2))) ||
                  (j >= 3 && tw_letter(at(j - 1)) && at(j - 2) == '-' && tw_letter(at(j - 3)));
        bool la = tw_letter(at(j + 1)) && (tw_letter(at(j + 2)) || (at(j + 2) == '-' && tw_letter(at(j + 3))));
        if (lb && la) {
          ++j;  // include the hyphen
          break;
        }
      }
      // em-dash ahead: (?<=wp)(?=-{2,}\w)
      if (tw_wordpunct(at(j - 1)) && at(j) == '-' && at(j + 1) == '-') {
        std::size_t k = j;
        while (k < n && text[k] == '-') ++k;
        if (k < n && tw_word(at(k))) break;
      }
      ++j;
    }
    chunks.push_back(text.substr(s, j - s));
    i = j;
  }
  return chunks;
}

std::string tw_fill(std::string text) {
  // expand_tabs(8), then replace_whitespace
  {
    std::string e;
    std::size_t col = 0;
    for (char c : text) {
      if (c == '\t') {
        std::size_t sp = 8 - (col % 8);
        e.append(sp, ' ');
        col += sp;
      } else {
        e += c;
        col = (c == '\n' || c == '\r') ? 0 : col + ((static_cast<unsigned char>(c) & 0xc0) != 0x80 ? 1 : 0);
      }
    }
    text = e;
  }
  for (char& c : text)
    if (tw_space(c)) c = ' ';
  auto chunks = tw_chunks(text);
  std::reverse(chunks.begin(), chunks.end());
  const std::string indent(14, ' ');
  const std::size_t width = 80;
  std::vector<std::string> lines;
  auto is_ws = [](const std::string& c) { return py_strip(c).empty() && !c.empty(); };
  while (!chunks.empty()) {
    std::vector<std::string> cur;
    std::size_t cur_len = 0;
    std::size_t w = width - indent.size();
    if (!lines.empty() && is_ws(chunks.back())) chunks.pop_back();  // drop_whitespace
    while (!chunks.empty()) {
      std::size_t l = py_len(chunks.back());
      if (cur_len + l <= w) {
        cur.push_back(chunks.back());
        chunks.pop_back();
        cur_len += l;
      } else {
        break;
      }
    }
    if (!chunks.empty() && py_len(chunks.back()) > w) {
      // _handle_long_word: break_long_words
      std::size_t space_left = w < 1 ? 1 : w - cur_len;
      std::string& last = chunks.back();
      // split at space_left code points
      std::size_t cut = 0, cps = 0;
      while (cut < last.size() && cps < space_left) {
        auto c = static_cast<unsigned char>(last[cut]);
        cut += c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
        ++cps;
      }
      if (cur.empty() || space_left > 0) {
        // Python 3.11 also prefers to break after the last hyphen within space_left
        std::string head = last.substr(0, cut);
        auto hy = head.rfind('-');
        if (hy != std::string::npos && hy > 0) {
          bool all_hy = head.find_first_not_of('-') > hy;
          if (!all_hy) cut = hy + 1;
        }
        cur.push_back(last.substr(0, cut));
        cur_len += py_len(last.substr(0, cut));
        last = last.substr(cut);
      }
    }
    if (!cur.empty() && is_ws(cur.back())) {
      cur_len -= py_len(cur.back());
      cur.pop_back();
    }
    if (!cur.empty()) {
      std::string line = indent;
      for (auto& c : cur) line += c;
      lines.push_back(line);
    }
  }
  return join(lines, "\n");
}

// ---------------------------------------------------------------------------------
// highstate.py

struct col {
  std::string_view green, cyan, red, light_red, light_yellow, endc;
};
col colors_for(bool on) {
  if (!on) return {};
  return {colors::green, colors::cyan, colors::red, colors::light_red, colors::light_yellow, colors::endc};
}

// A state result as a key of Python's rcounts dict (True == 1 == 1.0, False == 0).
std::string result_key(const value& r) {
  if (r.is_null()) return "N";
  if (r.is_boolean()) return r.get<bool>() ? "T" : "F";
  if (r.is_number()) {
    double d = r.get<double>();
    if (d == 1) return "T";
    if (d == 0) return "F";
    return "n:" + py_float_repr(d);
  }
  if (r.is_string()) return "s:" + r.get<std::string>();
  throw fail{};  // unhashable (list/dict): TypeError
}

struct host_out {
  std::string text;
  bool changed = false;
};

class highstate {
 public:
  explicit highstate(const options& o) : opt_(o), c_(colors_for(o.color)) {}

  // output(data, indent_level): a str, or the Python int/str it returns for such data.
  value output(value data, int indent_level) const {
    if (data.is_object() && data.contains("return")) data = value(data["return"]);
    if (data.is_object() && data.contains("data")) data = value(data["data"]);
    if (data.is_object() && data.size() == 1) {
      const value& d1 = data.begin().value();
      if (d1.is_object() && d1.contains("jid") && d1.contains("fun")) {
        if (d1.contains("return")) {
          const value& r = d1["return"];
          if (!r.is_object()) throw fail{};  // .get on a non-dict
          if (r.contains("data")) data = value(r["data"]);
        }
      }
    }
    if (data.is_number_integer() || data.is_number_unsigned() || data.is_boolean() || data.is_string()) return data;
    if (data.is_null()) return "None";
    if (!data.is_object()) throw fail{};  // data.keys()
    int masters = 0;
    for (auto it = data.begin(); it != data.end(); ++it) {
      const auto& k = it.key();
      if (k.size() >= 7 && k.compare(k.size() - 7, 7, "_master") == 0) ++masters;
    }
    if (data.contains("retcode") && masters == 1) data.erase("retcode");
    if (opt_.state_compress_ids) data = compress_ids(data);
    std::vector<std::string> ret;
    for (auto it = data.begin(); it != data.end(); ++it) ret.push_back(format_host(it.key(), it.value(), indent_level).text);
    return join(ret, "\n");
  }

  host_out format_host(const std::string& host, value data, int indent_level) const {
    std::map<std::string, long long> rcounts;  // result key -> count
    std::vector<std::string> rcount_order;
    auto bump = [&](const std::string& k, long long by) {
      if (!rcounts.count(k)) rcount_order.push_back(k);
      rcounts[k] += by;
    };
    std::vector<double> rdurations, pdurations;
    std::string_view hcolor = c_.green;
    std::vector<std::string> hstrs;
    long long nchanges = 0;
    const std::string e(c_.endc);

    if (data.is_boolean() || data.is_number_integer() || data.is_number_unsigned()) {
      nchanges = 1;
      hstrs.push_back(std::string(hcolor) + "    " + py_str(data) + e);
      hcolor = c_.cyan;
    } else if (data.is_string()) {
      nchanges = 1;
      for (auto& line : py_splitlines(data.get<std::string>())) hstrs.push_back(std::string(hcolor) + "    " + line + e);
      hcolor = c_.cyan;
    } else if (data.is_array()) {
      hcolor = c_.light_red;
      hstrs.push_back("    " + std::string(hcolor) + "Data failed to compile:" + e);
      for (const auto& err : data) {
        std::string t = err.is_string() ? strip_esc(err.get<std::string>()) : py_str(err);
        hstrs.push_back(std::string(hcolor) + "----------\n    " + t + e);
      }
    } else if (data.is_object()) {
      value tmp = value::object();
      for (auto it = data.begin(); it != data.end(); ++it) {
        const value& info = it.value();
        if (info.is_object() && it.key() != "changes" && !info.empty() && !info.contains("__run_num__")) {
          hstrs.insert(hstrs.begin(), pformat(info));
          hstrs.insert(hstrs.begin(),
                       "The State execution failed to record the order in which all states were executed. The "
                       "state return missing data is:");
        }
        if (info.is_object() && info.contains("result")) tmp[it.key()] = info;
      }
      data = std::move(tmp);
      for (const std::string& tname : run_order(data)) {
        value ret = data[tname];
        std::string rkey = result_key(ret["result"]);
        long long compressed_count = 1;
        if (opt_.state_compress_ids && tname.find("_|-state_compressed_") != std::string::npos) {
          auto parts = split(tname, "_|-");
          if (parts.size() != 4) throw fail{};
          const std::string& id = parts[1];
          // re.search(r"\((\d+)\)$", _id)
          if (!id.empty() && id.back() == ')') {
            auto open = id.rfind('(');
            if (open != std::string::npos) {
              std::string num = id.substr(open + 1, id.size() - open - 2);
              if (!num.empty() && std::all_of(num.begin(), num.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
                compressed_count = std::stoll(num);
            }
          }
        }
        bump(rkey, compressed_count);
        auto dur = ret.contains("duration") ? ret["duration"] : value(0);
        auto parsed = py_float(dur);
        if (!parsed && dur.is_string()) {
          std::string s = dur.get<std::string>();
          auto p = s.find(" ms");
          parsed = py_float_of_string(p == std::string::npos ? s : s.substr(0, p));
        }
        if (parsed) (ret.contains("__parallel__") ? pdurations : rdurations).push_back(*parsed);

        std::string_view tcolor = c_.green;
        bool schanged = false;
        std::string ctext;
        const value name = ret.contains("name") ? ret["name"] : value();
        if (name.is_string() && (name == "state.orch" || name == "state.orchestrate" || name == "state.sls")) {
          if (!ret.contains("changes")) throw fail{};
          value nested = output(ret["changes"], indent_level + 1);
          if (!nested.is_string()) throw fail{};  // "\n" + int
          std::string prefix(static_cast<std::size_t>(14 * indent_level), ' ');
          std::string src = "\n" + nested.get<std::string>();
          ctext = prefix;
          for (char ch : src) {
            ctext += ch;
            if (ch == '\n') ctext += prefix;
          }
          schanged = true;
          nchanges += 1;
        } else {
          if (!ret.contains("changes")) throw fail{};
          std::tie(schanged, ctext) = format_changes(ret["changes"]);
          if (schanged && compressed_count > 1) {
            long long n = 0;
            const value& ch = ret["changes"];
            if (ch.is_object() && ch.contains("compressed changes") && ch["compressed changes"].is_object())
              n = static_cast<long long>(ch["compressed changes"].size());
            nchanges += n ? n : 1;
          } else {
            nchanges += schanged ? 1 : 0;
          }
        }
        const bool res_truthy = truthy(ret["result"]);
        if (opt_.state_output_diff && res_truthy && !schanged) continue;
        if (!opt_.state_verbose && res_truthy && !schanged) continue;
        if (schanged) tcolor = c_.cyan;
        if (is_false(ret["result"])) hcolor = tcolor = c_.red;
        if (ret["result"].is_null()) hcolor = tcolor = c_.light_yellow;

        std::string so;
        for (char ch : opt_.state_output) so += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        auto comps = split(tname, "_|-");
        auto starts = [&](std::string_view p) { return so.compare(0, p.size(), p) == 0; };
        if (so.size() >= 3 && so.compare(so.size() - 3, 3, "_id") == 0) {
          if (comps.size() < 3) throw fail{};  // IndexError
          comps[2] = comps[1];
        }
        if (starts("filter")) {
          value clikwargs = value::object();
          for (const auto& item : opt_.cli_arg)
            if (item.is_object() && item.contains("__kwarg__")) clikwargs = item;
          auto as_list = [](const value& v) -> value {
            if (v.is_string()) {
              value l = value::array();
              for (auto& p : split(v.get<std::string>(), ",")) l.push_back(p);
              return l;
            }
            return v;
          };
          value exclude = as_list(clikwargs.contains("exclude") ? clikwargs["exclude"] : opt_.state_output_exclude);
          value terse = as_list(clikwargs.contains("terse") ? clikwargs["terse"] : opt_.state_output_terse);
          const std::string rs = py_str(ret["result"]);
          auto contains = [&](const value& l) {
            if (l.is_object()) return l.contains(rs);
            if (!l.is_array()) throw fail{};  // `in` on a non-container: TypeError
            for (const auto& x : l)
              if (x.is_string() && x.get<std::string>() == rs) return true;
            return false;
          };
          if (contains(terse)) {
            hstrs.push_back(format_terse(tcolor, comps, ret));
            continue;
          }
          if (contains(exclude)) continue;
        } else if (starts("terse") || (starts("mixed") && !is_false(ret["result"])) ||
                   (starts("changes") && res_truthy && !schanged)) {
          hstrs.push_back(format_terse(tcolor, comps, ret));
          continue;
        }
        if (comps.size() < 4) throw fail{};  // IndexError in the format
        const std::string tc(tcolor);
        std::vector<std::string> lines = {
            tc + "----------" + e,
            "    " + tc + "      ID: " + comps[1] + e,
            "    " + tc + "Function: " + comps[0] + "." + comps[3] + e,
            "    " + tc + "  Result: " + py_str(ret["result"]) + e,
            "    " + tc + " Comment: @COMMENT@" + e,
        };
        const bool profile = opt_.state_output_profile && ret.contains("start_time");
        if (comps[1] != comps[2]) lines.insert(lines.begin() + 3, "    " + tc + "    Name: " + comps[2] + e);
        if (!ret.contains("comment")) throw fail{};
        std::string comment = py_str(ret["comment"]);
        comment = replace_all(py_strip(comment), "\n", "\n" + std::string(14, ' '));
        if (ret.contains("data")) {
          const value& d = ret["data"];
          if (d.is_array()) {
            for (const auto& item : d) comment += " " + py_str(item);
          } else if (d.is_object()) {
            for (auto it = d.begin(); it != d.end(); ++it) comment += "\n\t\t" + it.key() + ": " + py_str(it.value());
          } else {
            comment += " " + py_str(d);
          }
        }
        if (!ret.contains("start_time")) ret["start_time"] = "";
        if (!ret.contains("duration")) ret["duration"] = "";
        if (!(ret["duration"].is_string() && ret["duration"].get<std::string>().empty()))
          ret["duration"] = py_str(ret["duration"]) + " ms";
        for (auto& l : lines) {
          auto p = l.find("@COMMENT@");
          if (p != std::string::npos) l.replace(p, 9, comment);
          hstrs.push_back(l);
        }
        if (profile) {
          hstrs.push_back("    " + tc + " Started: " + py_str(ret["start_time"]) + e);
          hstrs.push_back("    " + tc + "Duration: " + py_str(ret["duration"]) + e);
        }
        hstrs.push_back(tc + "     Changes:   " + ctext + e);
        if (ret.contains("warnings")) {
          bump("s:warnings", 1);
          hstrs.push_back("   " + std::string(c_.light_red) + " Warnings: " + lstrip(tw_fill(warnings_text(ret["warnings"]))) + e);
        }
      }

      // the summary block
      long long count_max_len = 0;
      for (auto& k : rcount_order) count_max_len = std::max<long long>(count_max_len, static_cast<long long>(std::to_string(rcounts[k]).size()));
      const long long line_max_len = 9 + count_max_len + 2;
      auto get = [&](const std::string& k) { return rcounts.count(k) ? rcounts[k] : 0; };
      auto counts = [&](const std::string& label, const std::string& count) {
        long long w = line_max_len - (static_cast<long long>(label.size()) + 2);
        return label + ": " + rjust(count, static_cast<std::size_t>(std::max<long long>(w, 0)));
      };
      auto colorfmt = [&](std::string_view color, const std::string& s) { return std::string(color) + s + e; };
      hstrs.push_back(colorfmt(c_.cyan, "\nSummary for " + host + "\n" + std::string(static_cast<std::size_t>(line_max_len), '-')));
      std::vector<std::string> changestats;
      if (get("N") > 0) changestats.push_back(colorfmt(c_.light_yellow, "unchanged=" + std::to_string(get("N"))));
      if (nchanges > 0) changestats.push_back(colorfmt(c_.green, "changed=" + std::to_string(nchanges)));
      std::string cs = changestats.empty() ? "" : " (" + join(changestats, ", ") + ")";
      hstrs.push_back(colorfmt(c_.green, counts("Succeeded", std::to_string(get("T") + get("N")))) + cs);
      const long long num_failed = get("F");
      hstrs.push_back(colorfmt(num_failed ? c_.red : c_.cyan, counts("Failed", std::to_string(num_failed))));
      long long total = 0;
      for (auto& k : rcount_order) total += rcounts[k];
      total -= get("s:warnings");
      if (opt_.state_output_pct && total != 0) {
        double sp = py_round2(static_cast<double>(get("T") + get("N")) / static_cast<double>(total) * 100);
        hstrs.push_back(colorfmt(c_.green, counts("Success %", py_float_repr(sp))));
        double fp = py_round2(static_cast<double>(num_failed) / static_cast<double>(total) * 100);
        hstrs.push_back(colorfmt(num_failed ? c_.red : c_.cyan, counts("Failure %", py_float_repr(fp))));
      }
      if (long long nw = get("s:warnings")) hstrs.push_back(colorfmt(c_.light_red, counts("Warnings", std::to_string(nw))));
      hstrs.push_back(colorfmt(c_.cyan, std::string(static_cast<std::size_t>(line_max_len), '-') + "\nTotal states run: " +
                                            rjust(std::to_string(total), static_cast<std::size_t>(line_max_len - 7))));
      if (opt_.state_output_profile) {
        double sum = py_sum(rdurations);
        if (!pdurations.empty()) sum += *std::max_element(pdurations.begin(), pdurations.end());
        std::string unit = "ms";
        if (sum > 999) {
          sum /= 1000;
          unit = "s";
        }
        hstrs.push_back(colorfmt(c_.cyan, "Total run time: " + rjust(fmt_fixed(sum, 3), static_cast<std::size_t>(line_max_len - 5)) + " " + unit));
      }
    }
    hstrs.insert(hstrs.begin(), std::string(hcolor) + strip_esc(host) + ":" + e);
    return {join(hstrs, "\n"), nchanges > 0};
  }

 private:
  static std::string lstrip(const std::string& s) {
    std::size_t a = 0;
    while (a < s.size()) {
      auto n = space_len_at(s, a);
      if (!n) break;
      a += n;
    }
    return s.substr(a);
  }

  static std::string warnings_text(const value& w) {
    // "\n".join(ret["warnings"]): a list of str, or the characters of a str
    std::vector<std::string> parts;
    if (w.is_string()) {
      const auto& s = w.get_ref<const std::string&>();
      for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
        parts.push_back(s.substr(i, n));
        i += n;
      }
    } else if (w.is_array()) {
      for (const auto& x : w) {
        if (!x.is_string()) throw fail{};
        parts.push_back(x.get<std::string>());
      }
    } else if (w.is_object()) {
      for (auto it = w.begin(); it != w.end(); ++it) parts.push_back(it.key());
    } else {
      throw fail{};
    }
    return join(parts, "\n");
  }

  // sorted(data, key=lambda k: data[k].get("__run_num__", 0)): stable; numbers (bools
  // count as ints) or strings, not both (TypeError).
  static std::vector<std::string> run_order(const value& data) {
    struct item {
      std::string name;
      bool is_str;
      double num;
      std::string str;
    };
    std::vector<item> items;
    for (auto it = data.begin(); it != data.end(); ++it) {
      const value& info = it.value();
      value rn = info.contains("__run_num__") ? info["__run_num__"] : value(0);
      item x{it.key(), false, 0, {}};
      if (rn.is_boolean()) x.num = rn.get<bool>() ? 1 : 0;
      else if (rn.is_number()) x.num = rn.get<double>();
      else if (rn.is_string()) x.is_str = true, x.str = rn.get<std::string>();
      else if (data.size() > 1) throw fail{};
      items.push_back(std::move(x));
    }
    if (items.size() > 1) {
      bool any_str = false, any_num = false;
      for (auto& x : items) (x.is_str ? any_str : any_num) = true;
      if (any_str && any_num) throw fail{};
    }
    std::stable_sort(items.begin(), items.end(), [](const item& a, const item& b) {
      return a.is_str ? a.str < b.str : a.num < b.num;
    });
    std::vector<std::string> out;
    for (auto& x : items) out.push_back(x.name);
    return out;
  }

  std::pair<bool, std::string> format_changes(const value& changes) const {
    if (!truthy(changes)) return {false, ""};
    if (!changes.is_object()) return {true, "Invalid Changes data: " + py_str(changes)};
    const value ret = changes.contains("ret") ? changes["ret"] : value();
    if (!ret.is_null() && changes.contains("out") && changes["out"] == "highstate") {
      if (!ret.is_object()) throw fail{};  // ret.items()
      std::string ctext;
      bool changed = false;
      for (auto it = ret.begin(); it != ret.end(); ++it) {
        auto h = format_host(it.key(), it.value(), 1);
        std::vector<std::string> ls;
        for (auto& l : py_splitlines(h.text)) ls.push_back(std::string(14, ' ') + l);
        ctext += "\n" + join(ls, "\n");
        changed = changed || h.changed;
      }
      return {changed, ctext};
    }
    options nopt = opt_;
    nopt.retcode = 0;
    nopt.nested_indent = 14;
    std::string n = render("nested", changes, nopt);
    while (!n.empty() && (n.back() == ' ' || (n.back() >= '\t' && n.back() <= '\r'))) n.pop_back();
    return {true, "\n" + n};
  }

  std::string format_terse(std::string_view tcolor, const std::vector<std::string>& comps, const value& ret) const {
    if (comps.size() < 3) throw fail{};  // IndexError
    if (!ret.contains("changes")) throw fail{};
    std::string result = "Clean";
    if (truthy(ret["changes"])) result = "Changed";
    if (is_false(ret["result"])) result = "Failed";
    else if (ret["result"].is_null()) result = "Differs";
    const bool profile = opt_.state_output_profile && ret.contains("start_time");
    auto field = [&](const char* k) -> std::string {
      if (!ret.contains(k)) throw fail{};  // KeyError in the format
      return py_str(ret[k]);
    };
    std::string out;
    std::string warn;
    if (ret.contains("warnings")) {
      warn = warnings_text(ret["warnings"]);
      // The warnings become part of a str.format template in Salt: braces there would
      // raise; send such data to nested rather than guess.
      if (warn.find_first_of("{}") != std::string::npos) throw fail{};
    }
    const std::string e(c_.endc);
    if (opt_.state_tabular) {
      if (ret.contains("warnings")) out += std::string(c_.light_red) + "Warnings:\n" + warn + e + "\n";
      out += tcolor;
      if (profile) out += field("start_time") + " [" + rjust(field("duration"), 7) + " ms] ";
      out += rjust(comps[0], 10) + "." + ljust(comps.back(), 10) + " " + ljust(result, 7) + "   Name: " + comps[2] + e;
    } else {
      if (ret.contains("warnings")) out += std::string(c_.light_red) + "Warnings:\n" + warn + e;
      out += " " + std::string(tcolor) + " Name: " + comps[2] + " - Function: " + comps[0] + "." + comps.back() +
             " - Result: " + result;
      if (profile) out += " - Started: " + field("start_time") + " - Duration: " + field("duration") + " ms";
      out += e;
    }
    return out;
  }

  // _compress_ids: states of one ID with many names rolled into one entry per result.
  // As in Python, the first state of a group is the object that accumulates the others: a
  // failure half way (e.g. a duration that is not a number) returns the data with those
  // first states already changed.
  static value compress_ids(value data) {
    if (!data.is_object()) return data;
    try {
      value compressed = value::object();
      auto key_of = [](const std::string& tname, const value& info) {
        return split(tname, "_|-")[0] + "_" + py_str(info.at("__id__")) + "_" + py_str(info.at("__sls__")) + "_" +
               py_str(info.at("result"));
      };
      std::vector<std::string> hosts;
      for (auto it = data.begin(); it != data.end(); ++it) hosts.push_back(it.key());
      for (const auto& host : hosts) {
        value& hostdata = data[host];
        compressed[host] = value::object();
        if (!hostdata.is_object()) throw fail{};
        std::vector<std::string> names;
        for (auto s = hostdata.begin(); s != hostdata.end(); ++s) names.push_back(s.key());
        std::map<std::string, long long> id_count;
        for (const auto& n : names) {
          if (!hostdata[n].is_object()) throw fail{};
          id_count[key_of(n, hostdata[n])] += 1;
        }
        // compressed key -> the original key of the group's first state, in first-seen order
        std::vector<std::pair<std::string, std::string>> order;
        std::map<std::string, std::string> first_of;
        for (const auto& n : names) {
          const value info = hostdata[n];
          auto comps = split(n, "_|-");
          std::string id = key_of(n, info);
          if (id_count[id] == 1) {
            order.emplace_back(n, n);
            continue;
          }
          if (comps.size() < 3) throw fail{};
          comps[2] = "state_compressed_" + py_str(info.at("__sls__")) + "_" + py_str(info.at("__id__")) + "_" +
                     py_str(info.at("result"));
          comps[1] = py_str(info.at("__id__")) + " (" + std::to_string(id_count[id]) + ")";
          std::string tname = join(comps, "_|-");
          auto f = first_of.find(tname);
          if (f == first_of.end()) {
            first_of[tname] = n;
            order.emplace_back(tname, n);
            continue;
          }
          value& cur = hostdata[f->second];
          auto num = [](const value& v) -> double {
            if (!v.is_number()) throw fail{};
            return v.get<double>();
          };
          const value rn1 = info.at("__run_num__");
          const value rn2 = cur.at("__run_num__");
          if (num(rn1) < num(rn2)) cur["__run_num__"] = rn1;
          const value d1 = info.at("duration");
          const value d2 = cur.at("duration");
          if ((d1.is_number_integer() || d1.is_number_unsigned()) && (d2.is_number_integer() || d2.is_number_unsigned()))
            cur["duration"] = d1.get<std::int64_t>() + d2.get<std::int64_t>();  // round(int, 3) is the int
          else
            cur["duration"] = std::strtod(fmt_fixed(num(d1) + num(d2), 3).c_str(), nullptr);  // round(x, 3)
          const value st1 = info.at("start_time");
          const value st2 = cur.at("start_time");
          if (!st1.is_string() || !st2.is_string()) throw fail{};
          if (st1.get<std::string>() < st2.get<std::string>()) cur["start_time"] = st1;
          const bool cur_ch = cur.contains("changes") && truthy(cur["changes"]);
          const bool new_ch = info.contains("changes") && truthy(info["changes"]);
          if (cur_ch && new_ch) {
            if (!cur["changes"].is_object()) throw fail{};
            if (!(cur["changes"].contains("compressed changes") && truthy(cur["changes"]["compressed changes"]))) {
              value cc = value::object();
              cc[py_str(cur.at("name"))] = cur["changes"];
              value wrapped = value::object();
              wrapped["compressed changes"] = cc;
              cur["changes"] = wrapped;
            }
            cur["changes"]["compressed changes"][py_str(info.at("name"))] = info["changes"];
          } else if (new_ch) {
            value cc = value::object();
            cc[py_str(info.at("name"))] = info["changes"];
            value wrapped = value::object();
            wrapped["compressed changes"] = cc;
            cur["changes"] = wrapped;
          }
        }
        for (auto& [k, orig] : order) compressed[host][k] = hostdata[orig];
      }
      return compressed;
    } catch (...) {
      return data;  // "Unable to compress state output by ID! Returning output normally."
    }
  }

  const options& opt_;
  col c_;
};

}  // namespace

std::optional<std::string> render_highstate(const wire::value& data, const options& opt) {
  try {
    highstate hs(opt);
    value r = hs.output(data, 1);
    if (r.is_string()) return r.get<std::string>();
    return std::nullopt;  // an int: printout.rstrip() raises AttributeError
  } catch (const fail&) {
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // nlohmann type errors: Salt's TypeError/KeyError
  }
}

}  // namespace sylvite::output
