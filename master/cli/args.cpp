// sylvite::cli argument typing: ports of salt/utils/args.py (yamlify_arg, parse_kwarg,
// parse_input, condition_input), the salt CLI's target/compound-function parsing
// (salt/utils/parsers.py SaltCMDOptionParser._mixin_after_parsed) and nodegroup_comp.
// Plain scalars are resolved here with PyYAML's YAML 1.1 implicit resolvers so that
// typing matches Salt exactly; flow collections go through config::parse_yaml.
#include "master/cli/args.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "core/config/config.hpp"

namespace sylvite::cli {
namespace {

using wire::value;

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string strip_underscores(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

// Integer text (already validated) in base -> value; too large for 64 bits -> text
// (Python would keep a big int; msgpack could not carry it anyway).
value int_value(bool neg, const std::string& digits, int base, const std::string& original) {
  if (digits.empty()) return value(std::int64_t{0});
  errno = 0;
  char* end = nullptr;
  unsigned long long u = std::strtoull(digits.c_str(), &end, base);
  if (errno == ERANGE || *end != '\0') return value(original);
  if (!neg) {
    if (u <= static_cast<unsigned long long>(INT64_MAX)) return value(static_cast<std::int64_t>(u));
    return value(static_cast<std::uint64_t>(u));
  }
  if (u <= static_cast<unsigned long long>(INT64_MAX) + 1ULL) {
    if (u == static_cast<unsigned long long>(INT64_MAX) + 1ULL) return value(INT64_MIN);
    return value(-static_cast<std::int64_t>(u));
  }
  return value(original);
}

// PyYAML's implicit resolvers (yaml/resolver.py, YAML 1.1), hand-written (std::regex
// trips GCC 12's -Wmaybe-uninitialized under the sanitizers):
//   int   [-+]?0b[0-1_]+ | [-+]?0[0-7_]+ | [-+]?(0|[1-9][0-9_]*) | [-+]?0x[0-9a-fA-F_]+
//         | [-+]?[1-9][0-9_]*(:[0-5]?[0-9])+
//   float [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)? | \.[0-9_]+([eE][-+][0-9]+)?
//         | [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]* | [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN)
struct scanner {
  const std::string& s;
  std::size_t i = 0;
  bool done() const { return i == s.size(); }
  bool eat(char c) {
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  template <class P>
  std::size_t many(P pred) {
    std::size_t n = 0;
    while (i < s.size() && pred(s[i])) ++i, ++n;
    return n;
  }
  void sign() { (void)(eat('-') || eat('+')); }
};
bool dig(char c) { return c >= '0' && c <= '9'; }
bool dig_(char c) { return dig(c) || c == '_'; }

// (:[0-5]?[0-9])+ ; returns false when no group matched
bool sexagesimal_tail(scanner& sc) {
  std::size_t groups = 0;
  while (sc.i < sc.s.size() && sc.s[sc.i] == ':') {
    std::size_t save = sc.i;
    ++sc.i;
    std::size_t n = sc.many(dig);
    if (n == 0 || n > 2 || (n == 2 && sc.s[sc.i - 2] > '5')) {
      sc.i = save;
      break;
    }
    ++groups;
  }
  return groups > 0;
}

bool exponent(scanner& sc) {  // ([eE][-+][0-9]+)?
  if (sc.i < sc.s.size() && (sc.s[sc.i] == 'e' || sc.s[sc.i] == 'E')) {
    ++sc.i;
    if (!(sc.eat('-') || sc.eat('+'))) return false;
    return sc.many(dig) > 0;
  }
  return true;
}

bool is_yaml_int(const std::string& t) {
  auto attempt = [&](auto fn) {
    scanner sc{t};
    return fn(sc) && sc.done();
  };
  return attempt([](scanner& sc) { sc.sign(); return sc.eat('0') && sc.eat('b') && sc.many([](char c) { return c == '0' || c == '1' || c == '_'; }) > 0; }) ||
         attempt([](scanner& sc) { sc.sign(); return sc.eat('0') && sc.many([](char c) { return (c >= '0' && c <= '7') || c == '_'; }) > 0; }) ||
         attempt([](scanner& sc) {
           sc.sign();
           if (sc.eat('0')) return true;
           if (sc.i < sc.s.size() && sc.s[sc.i] >= '1' && sc.s[sc.i] <= '9') return ++sc.i, sc.many(dig_), true;
           return false;
         }) ||
         attempt([](scanner& sc) {
           sc.sign();
           return sc.eat('0') && sc.eat('x') &&
                  sc.many([](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == '_'; }) > 0;
         }) ||
         attempt([](scanner& sc) {
           sc.sign();
           if (!(sc.i < sc.s.size() && sc.s[sc.i] >= '1' && sc.s[sc.i] <= '9')) return false;
           ++sc.i;
           sc.many(dig_);
           return sexagesimal_tail(sc);
         });
}

bool is_yaml_float(const std::string& t) {
  auto attempt = [&](auto fn) {
    scanner sc{t};
    return fn(sc) && sc.done();
  };
  return attempt([](scanner& sc) {
           sc.sign();
           if (sc.many(dig) == 0) return false;
           sc.many(dig_);
           if (!sc.eat('.')) return false;
           sc.many(dig_);
           return exponent(sc);
         }) ||
         attempt([](scanner& sc) { return sc.eat('.') && sc.many(dig_) > 0 && exponent(sc); }) ||
         attempt([](scanner& sc) {
           sc.sign();
           if (sc.many(dig) == 0) return false;
           sc.many(dig_);
           if (!sexagesimal_tail(sc)) return false;
           if (!sc.eat('.')) return false;
           sc.many(dig_);
           return true;
         }) ||
         attempt([](scanner& sc) {
           sc.sign();
           if (!sc.eat('.')) return false;
           std::string rest = sc.s.substr(sc.i);
           if (rest == "inf" || rest == "Inf" || rest == "INF") return sc.i = sc.s.size(), true;
           return false;
         }) ||
         (t == ".nan" || t == ".NaN" || t == ".NAN");
}

bool is_yaml_bool(const std::string& t) {
  static const std::set<std::string> words = {"yes", "Yes", "YES", "no",   "No",   "NO",   "true", "True", "TRUE",
                                              "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  return words.count(t) > 0;
}

value resolve_plain(const std::string& t) {
  if (t == "~" || t == "null" || t == "Null" || t == "NULL") return value(nullptr);
  if (is_yaml_bool(t)) {
    char c = t[0];
    return value(c == 'y' || c == 'Y' || c == 't' || c == 'T' || t == "on" || t == "On" || t == "ON");
  }
  if (is_yaml_int(t)) {
    // Salt's SaltYamlSafeLoader strips leading zeros of unsigned ints: "017" is 17, not 15.
    if (t.size() > 1 && t[0] == '0' && t[1] != 'b' && t[1] != 'x') {
      std::string d = strip_underscores(t.substr(t.find_first_not_of('0') == std::string::npos ? t.size() : t.find_first_not_of('0')));
      if (d.find(':') == std::string::npos) return int_value(false, d.empty() ? "0" : d, 10, t);
    }
    std::string v = strip_underscores(t);
    bool neg = false;
    if (v[0] == '-' || v[0] == '+') {
      neg = v[0] == '-';
      v.erase(0, 1);
    }
    if (v == "0") return value(std::int64_t{0});
    if (v.rfind("0b", 0) == 0) return int_value(neg, v.substr(2), 2, t);
    if (v.rfind("0x", 0) == 0) return int_value(neg, v.substr(2), 16, t);
    if (v[0] == '0') return int_value(neg, v.substr(1), 8, t);
    if (v.find(':') != std::string::npos) {
      // sexagesimal: 1:30 -> 90
      std::int64_t acc = 0;
      std::size_t pos = 0;
      while (true) {
        auto c = v.find(':', pos);
        acc = acc * 60 + std::stoll(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
      return value(neg ? -acc : acc);
    }
    return int_value(neg, v, 10, t);
  }
  if (is_yaml_float(t)) {
    std::string v = strip_underscores(t);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    double sign = 1;
    if (v[0] == '-' || v[0] == '+') {
      if (v[0] == '-') sign = -1;
      v.erase(0, 1);
    }
    if (v == ".inf") return value(sign * INFINITY);
    if (v == ".nan") return value(NAN);
    if (v.find(':') != std::string::npos) {
      double acc = 0;
      std::size_t pos = 0;
      while (true) {
        auto c = v.find(':', pos);
        acc = acc * 60 + std::stod(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
      return value(sign * acc);
    }
    return value(sign * std::strtod(v.c_str(), nullptr));
  }
  return value(t);
}

// True if t would be read by YAML as one plain scalar (no collection, no indicator).
bool is_plain_scalar(const std::string& t) {
  if (t.empty()) return false;
  static const std::string indicators = "[]{}#&*!|>'\"%@`,?";
  if (indicators.find(t[0]) != std::string::npos) return false;
  if (t[0] == '-' && (t.size() == 1 || t[1] == ' ')) return false;
  if (t[0] == ':' && (t.size() == 1 || t[1] == ' ')) return false;
  if (t.find(": ") != std::string::npos || t.back() == ':') return false;
  if (t.find(" #") != std::string::npos) return false;
  if (t.rfind("---", 0) == 0 || t.rfind("...", 0) == 0) return false;
  return true;
}

bool is_word_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

}  // namespace

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    std::size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

static std::vector<std::string> split_on(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (true) {
    auto c = s.find(sep, pos);
    if (c == std::string::npos) {
      out.push_back(s.substr(pos));
      break;
    }
    out.push_back(s.substr(pos, c - pos));
    pos = c + sep.size();
  }
  return out;
}

void sort_ignorecase(std::vector<std::string>& v) {
  auto lower = [](const std::string& s) {
    std::string l = s;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    return l;
  };
  std::stable_sort(v.begin(), v.end(), [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
}

wire::value yamlify_arg(const std::string& arg) {
  const std::string t = trim(arg);
  if (t.empty() || t == "---" || t == "...") return value(arg);
  if (arg.find('_') != std::string::npos &&
      std::all_of(t.begin(), t.end(), [](char c) { return (c >= '0' && c <= '9') || c == '_'; }))
    return value(arg);
  if (arg.find_first_of("\t\r\n") != std::string::npos) return value(arg);

  // PyYAML refuses plain scalars starting with a reserved indicator ('@', '`') and reads
  // a leading '%' as a directive: all errors, so Salt keeps the text.
  if (t[0] == '@' || t[0] == '`' || t[0] == '%') return value(arg);
  auto load = [&](const std::string& text) -> std::optional<value> {
    if (is_plain_scalar(trim(text))) return resolve_plain(trim(text));
    auto r = config::parse_yaml(text);
    if (!r) return std::nullopt;
    return std::move(*r);
  };

  if (arg.find('#') != std::string::npos) {
    auto parsed = load(arg);
    if (!parsed || parsed->is_string() || parsed->is_null()) return value(arg);
    return *parsed;
  }
  if (arg == "None") return value(nullptr);
  auto parsed = load(arg);
  if (!parsed) return value(arg);
  value& v = *parsed;
  if (v.is_object()) return arg[0] == '{' ? v : value(arg);
  if (v.is_array()) return arg[0] == '[' ? v : value(arg);
  if (v.is_string() && v.get_ref<const std::string&>().empty() && (arg == "|" || arg == "!")) return value(arg);
  if (v.is_null() && (t[0] == '#' || arg == "!")) return value(arg);
  if (v.is_binary()) return value(arg);  // timestamps and other tagged types: unsupported -> text
  return v;
}

std::optional<std::pair<std::string, std::string>> parse_kwarg(const std::string& arg) {
  // ^([^\d\W][\w.-]*)=(?!=)(.*)$  ('.' does not match a newline; '$' may precede a final \n)
  if (arg.empty()) return std::nullopt;
  auto c0 = static_cast<unsigned char>(arg[0]);
  if (!is_word_char(c0) || std::isdigit(c0)) return std::nullopt;
  std::size_t i = 1;
  while (i < arg.size()) {
    auto c = static_cast<unsigned char>(arg[i]);
    if (is_word_char(c) || c == '.' || c == '-') ++i;
    else break;
  }
  if (i >= arg.size() || arg[i] != '=') return std::nullopt;
  if (i + 1 < arg.size() && arg[i + 1] == '=') return std::nullopt;
  std::string val = arg.substr(i + 1);
  auto nl = val.find('\n');
  if (nl != std::string::npos && nl != val.size() - 1) return std::nullopt;
  if (nl != std::string::npos) val.pop_back();
  return std::make_pair(arg.substr(0, i), val);
}

parsed_input parse_input_split(const std::vector<std::string>& args, const std::set<std::string>& no_parse) {
  parsed_input out;
  for (const auto& a : args) {
    if (auto kw = parse_kwarg(a)) {
      out.kwargs[kw->first] = no_parse.count(kw->first) ? value(kw->second) : yamlify_arg(kw->second);
    } else {
      out.args.push_back(yamlify_arg(a));
    }
  }
  return out;
}

wire::value parse_input(const std::vector<std::string>& args, const std::set<std::string>& no_parse) {
  parsed_input p = parse_input_split(args, no_parse);
  value ret = value::array();
  for (auto& a : p.args) {
    // condition_input: ints that look like a jid (20 digits) are sent as text
    if (a.is_number_integer()) {
      std::string s = a.dump();
      if (s.size() == 20) {
        ret.push_back(value(s));
        continue;
      }
    }
    ret.push_back(a);
  }
  if (!p.kwargs.empty()) {
    value kw = value::object();
    kw["__kwarg__"] = true;
    for (auto it = p.kwargs.begin(); it != p.kwargs.end(); ++it) kw[it.key()] = it.value();
    ret.push_back(std::move(kw));
  }
  return ret;
}

std::variant<salt_job, salt_job_error> make_salt_job(const std::vector<std::string>& positional, bool list_target,
                                                     const std::string& args_separator,
                                                     const std::set<std::string>& no_parse) {
  if (positional.empty()) return salt_job_error{42, "\nCannot execute command without defining a target.\n\n"};
  salt_job job;
  const std::string& t = positional[0];
  if (list_target) {
    value l = value::array();
    if (t.find(',') != std::string::npos) {
      std::string nospace;
      for (char c : t)
        if (c != ' ') nospace += c;
      for (auto& s : split_on(nospace, ",")) l.push_back(s);
    } else {
      for (auto& s : split_ws(t)) l.push_back(s);
    }
    job.tgt = l;
    job.tgt_type = "list";
  } else {
    job.tgt = t;
  }
  if (positional.size() < 2) return salt_job_error{42, "\nIncomplete options passed.\n\n"};
  const std::string& f = positional[1];
  std::vector<std::string> rest(positional.begin() + 2, positional.end());
  if (f.find(',') == std::string::npos) {
    job.fun = f;
    job.arg = parse_input(rest, no_parse);
    return job;
  }
  auto funs = split_on(f, ",");
  std::vector<std::vector<std::string>> groups(1);
  auto seps = static_cast<std::size_t>(std::count(rest.begin(), rest.end(), args_separator));
  if (seps == funs.size() - 1) {
    for (auto& a : rest) {
      if (a == args_separator) groups.emplace_back();
      else groups.back().push_back(a);
    }
  } else {
    for (auto& a : rest) {
      if (!args_separator.empty() && a.find(args_separator) != std::string::npos) {
        auto subs = split_on(a, args_separator);
        for (std::size_t i = 0; i < subs.size(); ++i) {
          if (!subs[i].empty()) groups.back().push_back(subs[i]);
          if (i != subs.size() - 1) groups.emplace_back();
        }
      } else {
        groups.back().push_back(a);
      }
    }
    if (funs.size() > groups.size())
      return salt_job_error{42, "Cannot execute compound command without defining all arguments.\n"};
    if (funs.size() < groups.size())
      return salt_job_error{42, "Cannot execute compound command with more arguments than commands.\n"};
  }
  job.fun = value::array();
  for (auto& fn : funs) job.fun.push_back(fn);
  job.arg = value::array();
  for (auto& g : groups) job.arg.push_back(parse_input(g, no_parse));
  return job;
}

namespace {
bool expand_words(const std::string& name, const std::map<std::string, std::string>& groups,
                  std::set<std::string>& skip, bool first_call, std::vector<std::string>& out) {
  if (skip.count(name)) return false;
  auto it = groups.find(name);
  if (it == groups.end()) return false;
  auto words = split_ws(it->second);
  static const std::set<std::string> opers = {"and", "or", "not", "(", ")"};
  skip.insert(name);
  std::vector<std::string> ret;
  bool nested = false;
  for (auto& w : words) {
    if (opers.count(w)) {
      ret.push_back(w);
    } else if (w.size() >= 3 && w.rfind("N@", 0) == 0) {
      nested = true;
      if (!expand_words(w.substr(2), groups, skip, false, ret)) return false;
    } else {
      ret.push_back(w);
    }
  }
  skip.erase(name);
  if (!nested && first_call) {
    out.insert(out.end(), words.begin(), words.end());
    return true;
  }
  if (!ret.empty()) {
    out.push_back("(");
    out.insert(out.end(), ret.begin(), ret.end());
    out.push_back(")");
  }
  return true;
}

std::string join_words(const std::vector<std::string>& w) {
  std::string s;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i) s += ' ';
    s += w[i];
  }
  return s;
}
}  // namespace

std::optional<std::string> expand_nodegroup(const std::string& name, const std::map<std::string, std::string>& groups) {
  std::set<std::string> skip;
  std::vector<std::string> words;
  if (!expand_words(name, groups, skip, true, words)) return std::nullopt;
  return join_words(words);
}

std::optional<std::string> expand_compound_nodegroups(const std::string& tgt,
                                                      const std::map<std::string, std::string>& groups) {
  std::vector<std::string> out;
  for (auto& w : split_ws(tgt)) {
    if (w.size() >= 3 && w.rfind("N@", 0) == 0) {
      auto e = expand_nodegroup(w.substr(2), groups);
      if (!e) return std::nullopt;
      // Salt splices the group's words in without parentheses (_prep_pub).
      for (auto& x : split_ws(*e)) out.push_back(x);
    } else {
      out.push_back(w);
    }
  }
  return join_words(out);
}

}  // namespace sylvite::cli
