// sylvite::match: Salt's target matchers (salt/matchers/*.py, salt/utils/minions.py,
// salt/utils/data.py subdict_match, Salt 3008).
// Salt quirks reproduced on purpose, because master and minion must agree with real Salt:
//   - glob is Python fnmatch (translate() semantics: '*' crosses everything, "[!..]",
//     an unclosed '[' is literal, reversed ranges match nothing), on code points.
//   - grain/pillar matching lower-cases both sides (also the regex pattern), compares
//     Python str() of scalars (True -> "true", None -> "none"), and resolves "a:b:c" by
//     trying the deepest key first (subdict_match); dict values match by key.
//   - compound on the minion is Python eval of "True and not False ..." (not > and > or,
//     a "not" after an operand inserts "and"); on the master it is the set expression of
//     CkMinions._check_compound_minions (unclosed '(' are closed at the end there).
//   - nodegroup expansion is salt.utils.minions.nodegroup_comp, including its first-call
//     behaviour (words are not parenthesised unless a nested N@ was expanded) and the
//     L@/E@ rewrite of plain name lists.
//   - R@ (range), T@ (resources) and M@ are unsupported: the whole compound is no match.
// std::regex (ECMAScript) stands in for Python's re: (?P<name>...) is rewritten to a plain
// group, \A and \Z to ^ and $; anything it cannot compile is "no match". Texts longer than
// 8 KiB are not regex-matched (libstdc++'s recursive matcher could exhaust the stack).
// Thread-safety: pure functions; the regex cache is thread_local.
#include "core/match/match.hpp"
#include "core/wire/py_repr.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <cstring>
#include <memory>
// GCC 12 with -fsanitize=address reports -Wmaybe-uninitialized inside libstdc++'s
// <regex> (std::function in _State); a known false positive, silenced for that header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <unordered_map>

namespace sylvite::match {
namespace {

using wire::value;

std::optional<std::string_view> bytes_of(const value& v) {
  if (v.is_string()) return std::string_view(v.get_ref<const std::string&>());
  if (v.is_binary()) {
    const auto& b = v.get_binary();
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return std::nullopt;
}

// ---- fnmatch -------------------------------------------------------------------------

std::u32string decode(std::string_view s) {
  // UTF-8 -> code points; invalid bytes map to themselves (Latin-1 style).
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 99;
    if (n == 0 || n == 99 || i + n >= s.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    char32_t cp = c & (0x3F >> n);
    bool ok = true;
    for (std::size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

struct glob_item {
  enum kind_t { literal, any, star, set } kind;
  char32_t ch = 0;
  bool negate = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;  // inclusive
};

std::vector<glob_item> compile_glob(const std::u32string& p) {
  std::vector<glob_item> out;
  std::size_t i = 0, n = p.size();
  while (i < n) {
    char32_t c = p[i++];
    if (c == U'*') {
      if (out.empty() || out.back().kind != glob_item::star) out.push_back({glob_item::star});
    } else if (c == U'?') {
      out.push_back({glob_item::any});
    } else if (c == U'[') {
      std::size_t j = i;
      if (j < n && p[j] == U'!') ++j;
      if (j < n && p[j] == U']') ++j;
      while (j < n && p[j] != U']') ++j;
      if (j >= n) {
        out.push_back({glob_item::literal, U'['});
        continue;
      }
      glob_item s{glob_item::set};
      std::size_t k = i;
      if (p[k] == U'!') {
        s.negate = true;
        ++k;
      }
      std::u32string stuff = p.substr(k, j - k);
      // Python: stuff == "!" after negation handling is impossible here; "[!]" never closes.
      for (std::size_t q = 0; q < stuff.size();) {
        if (q + 2 < stuff.size() && stuff[q + 1] == U'-') {
          if (stuff[q] <= stuff[q + 2]) s.ranges.emplace_back(stuff[q], stuff[q + 2]);  // reversed: empty
          q += 3;
        } else {
          s.ranges.emplace_back(stuff[q], stuff[q]);
          ++q;
        }
      }
      out.push_back(std::move(s));
      i = j + 1;
    } else {
      out.push_back({glob_item::literal, c});
    }
  }
  return out;
}

bool item_matches(const glob_item& it, char32_t c) {
  switch (it.kind) {
    case glob_item::literal: return it.ch == c;
    case glob_item::any: return true;
    case glob_item::set: {
      bool in = std::any_of(it.ranges.begin(), it.ranges.end(),
                            [c](const auto& r) { return r.first <= c && c <= r.second; });
      // An empty positive set never matches (Python emits "(?!)").
      return it.negate ? !in : in;
    }
    case glob_item::star: return true;
  }
  return false;
}

bool glob_run(const std::vector<glob_item>& pat, const std::u32string& t) {
  std::size_t pi = 0, ti = 0;
  std::size_t star_p = std::string::npos, star_t = 0;
  while (ti < t.size()) {
    if (pi < pat.size() && pat[pi].kind == glob_item::star) {
      star_p = pi++;
      star_t = ti;
    } else if (pi < pat.size() && item_matches(pat[pi], t[ti])) {
      ++pi;
      ++ti;
    } else if (star_p != std::string::npos) {
      pi = star_p + 1;
      ti = ++star_t;
    } else {
      return false;
    }
  }
  while (pi < pat.size() && pat[pi].kind == glob_item::star) ++pi;
  return pi == pat.size();
}

// ---- regex -----------------------------------------------------------------------------

constexpr std::size_t max_regex_text = 8192;

// Python re syntax -> ECMAScript where the meaning is the same.
std::string python_to_ecma(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 'A') {
        out += '^';
      } else if (p[i + 1] == 'Z') {
        out += '$';
      } else {
        out += p[i];
        out += p[i + 1];
      }
      ++i;
    } else if (p.substr(i, 4) == "(?P<") {
      auto close = p.find('>', i + 4);
      if (close == std::string_view::npos) return std::string(p);  // let it fail to compile
      out += '(';
      i = close;
    } else {
      out += p[i];
    }
  }
  return out;
}

std::shared_ptr<const std::regex> compile_regex(std::string_view pattern) {
  thread_local std::unordered_map<std::string, std::shared_ptr<const std::regex>> cache;
  std::string key(pattern);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::shared_ptr<const std::regex> re;
  try {
    if (pattern.find("(?P=") == std::string_view::npos)
      re = std::make_shared<const std::regex>(python_to_ecma(pattern), std::regex::ECMAScript);
  } catch (const std::exception&) {
    re = nullptr;
  }
  if (cache.size() >= 256) cache.clear();
  cache.emplace(std::move(key), re);
  return re;
}

// nullopt: invalid pattern.
std::optional<bool> regex_match_start(std::string_view pattern, std::string_view text) {
  auto re = compile_regex(pattern);
  if (!re) return std::nullopt;
  if (text.size() > max_regex_text) return false;
  try {
    return std::regex_search(text.begin(), text.end(), *re, std::regex_constants::match_continuous);
  } catch (const std::exception&) {
    return false;
  }
}

// ---- Python str() / lower() --------------------------------------------------------------

std::string python_str(const value& v) { return wire::py_str(v, wire::py_style_match); }

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(std::string_view s, char delim) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    auto p = s.find(delim, start);
    out.emplace_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

std::vector<std::string> split_ws(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    std::size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, std::size_t from, std::size_t to, char delim) {
  std::string out;
  for (std::size_t i = from; i < to; ++i) {
    if (i > from) out += delim;
    out += parts[i];
  }
  return out;
}

// ---- subdict_match ---------------------------------------------------------------------

enum class mode { glob, regex, exact };

bool scalar_match(const value& target, std::string_view pattern, mode m) {
  std::string t = lower(python_str(target));
  std::string p = lower(std::string(pattern));
  if (m == mode::regex) return regex_match_start(p, t).value_or(false);
  if (m == mode::exact) return t == p;
  return glob_match(p, t);
}

// traverse_dict_and_list; nullptr when missing ({} default in Salt).
const value* traverse(const value& data, const std::vector<std::string>& parts, std::size_t count) {
  const value* ptr = &data;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string& each = parts[i];
    if (ptr->is_array()) {
      // Python int(each): numeric index (negative from the end)...
      std::int64_t idx = 0;
      bool numeric = !each.empty();
      std::size_t k = 0;
      bool neg = false;
      if (numeric && (each[0] == '-' || each[0] == '+')) {
        neg = each[0] == '-';
        k = 1;
        numeric = each.size() > 1;
      }
      for (; numeric && k < each.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(each[k])) || idx > 100000000) numeric = false;
        else idx = idx * 10 + (each[k] - '0');
      }
      if (neg) idx = -idx;
      const value* found = nullptr;
      if (!numeric) {
        // ...otherwise the key in the first embedded dict that has it.
        for (const auto& x : *ptr)
          if (x.is_object())
            if (auto it = x.find(each); it != x.end()) {
              found = &*it;
              break;
            }
        if (!found) return nullptr;
      } else {
        auto size = static_cast<std::int64_t>(ptr->size());
        if (idx < 0) idx += size;
        if (idx < 0 || idx >= size) return nullptr;
        found = &(*ptr)[static_cast<std::size_t>(idx)];
      }
      ptr = found;
    } else if (ptr->is_object()) {
      auto it = ptr->find(each);
      if (it == ptr->end()) return nullptr;
      ptr = &*it;
    } else {
      return nullptr;
    }
  }
  return ptr;
}

bool subdict(const value& data, std::string_view expr, char delim, mode m, int depth);

bool dict_match(const value& target, std::string pattern, mode m, int depth) {
  if (depth > 64) return false;
  bool wildcard = pattern.starts_with("*:");
  if (wildcard) pattern.erase(0, 2);
  if (pattern == "*") return true;
  if (target.contains(pattern)) return true;
  for (auto it = target.begin(); it != target.end(); ++it)
    if (scalar_match(value(it.key()), pattern, m)) return true;
  if (subdict(target, pattern, ':', m, depth + 1)) return true;  // Salt recurses with ':'
  if (wildcard) {
    for (auto it = target.begin(); it != target.end(); ++it) {
      const value& v = it.value();
      if (v.is_object()) {
        if (dict_match(v, pattern, m, depth + 1)) return true;
      } else if (v.is_array()) {
        for (const auto& item : v)
          if (scalar_match(item, pattern, m)) return true;
      } else if (scalar_match(v, pattern, m)) {
        return true;
      }
    }
  }
  return false;
}

bool subdict(const value& data, std::string_view expr, char delim, mode m, int depth) {
  if (depth > 64) return false;
  auto splits = split(expr, delim);
  if (splits.size() == 1) return false;
  for (std::size_t idx = splits.size() - 1; idx >= 1; --idx) {
    std::string key = join(splits, 0, idx, delim);
    std::string matchstr;
    const value* match;
    if (key == "*") {
      matchstr = std::string(expr);
      match = &data;
    } else {
      matchstr = join(splits, idx, splits.size(), delim);
      match = traverse(data, splits, idx);
    }
    if (!match || (match->is_object() && match->empty())) continue;
    if (match->is_object()) {
      if (dict_match(*match, matchstr, m, depth + 1)) return true;
      continue;
    }
    if (match->is_array()) {
      for (const auto& member : *match) {
        if (member.is_object() && dict_match(member, matchstr, m, depth + 1)) return true;
        if (scalar_match(member, matchstr, m)) return true;
      }
      continue;
    }
    if (scalar_match(*match, matchstr, m)) return true;
  }
  return false;
}

// ---- ipcidr ------------------------------------------------------------------------------

struct ip_addr {
  int family = 0;  // 4 or 6
  std::array<unsigned char, 16> b{};
};

std::optional<ip_addr> parse_ip(std::string_view s) {
  std::string str(s);
  ip_addr a;
  if (str.find(':') == std::string::npos) {
    // Python's ipaddress refuses leading zeros; inet_pton accepts only dotted quads.
    if (inet_pton(AF_INET, str.c_str(), a.b.data()) != 1) return std::nullopt;
    for (auto& part : split(str, '.'))
      if (part.size() > 1 && part[0] == '0') return std::nullopt;
    a.family = 4;
  } else {
    if (inet_pton(AF_INET6, str.c_str(), a.b.data()) != 1) return std::nullopt;
    a.family = 6;
  }
  return a;
}

struct ip_net {
  ip_addr addr;
  int prefix = 0;
  bool is_address = false;  // tgt was a bare address
};

std::optional<ip_net> parse_target_net(std::string_view tgt) {
  ip_net n;
  auto slash = tgt.find('/');
  if (slash == std::string_view::npos) {
    auto a = parse_ip(tgt);
    if (!a) return std::nullopt;
    n.addr = *a;
    n.prefix = a->family == 4 ? 32 : 128;
    n.is_address = true;
    return n;
  }
  auto a = parse_ip(tgt.substr(0, slash));
  if (!a) return std::nullopt;
  std::string_view ps = tgt.substr(slash + 1);
  if (ps.empty() || ps.size() > 3) return std::nullopt;
  int prefix = 0;
  for (char c : ps) {
    if (c < '0' || c > '9') return std::nullopt;
    prefix = prefix * 10 + (c - '0');
  }
  int maxp = a->family == 4 ? 32 : 128;
  if (prefix > maxp) return std::nullopt;
  // ip_network(strict=True): host bits must be zero.
  int bytes = maxp / 8;
  for (int bit = prefix; bit < bytes * 8; ++bit)
    if (a->b[static_cast<std::size_t>(bit / 8)] & (0x80 >> (bit % 8))) return std::nullopt;
  n.addr = *a;
  n.prefix = prefix;
  return n;
}

bool in_net(const ip_net& net, const ip_addr& a) {
  if (a.family != net.addr.family) return false;
  for (int bit = 0; bit < net.prefix; ++bit) {
    auto i = static_cast<std::size_t>(bit / 8);
    int mask = 0x80 >> (bit % 8);
    if ((a.b[i] & mask) != (net.addr.b[i] & mask)) return false;
  }
  return true;
}

// ipcidr_match.match against a grains map.
bool ipcidr(const value* grains, std::string_view tgt) {
  auto net = parse_target_net(tgt);
  if (!net || !grains || !grains->is_object()) return false;
  const char* proto = net->addr.family == 4 ? "ipv4" : "ipv6";
  auto it = grains->find(proto);
  if (it == grains->end()) return false;
  std::vector<std::string_view> addrs;
  if (it->is_array()) {
    for (const auto& x : *it)
      if (auto b = bytes_of(x)) addrs.push_back(*b);
  } else if (auto b = bytes_of(*it)) {
    addrs.push_back(*b);
  }
  for (auto s : addrs) {
    auto a = parse_ip(s);
    if (!a) continue;  // Salt would raise on a malformed grain; treat as no match
    if (net->is_address) {
      if (std::memcmp(a->b.data(), net->addr.b.data(), 16) == 0 && a->family == net->addr.family) return true;
    } else if (in_net(*net, *a)) {
      return true;
    }
  }
  return false;
}

// ---- list --------------------------------------------------------------------------------

bool list_match(const value& tgt, std::string_view id) {
  if (auto s = bytes_of(tgt)) {
    std::string sid(id);
    return s->find("," + sid + ",") != std::string_view::npos || s->starts_with(sid + ",") ||
           s->ends_with("," + sid) || *s == id;
  }
  if (tgt.is_array()) {
    for (const auto& x : tgt)
      if (auto b = bytes_of(x); b && *b == id) return true;
  }
  return false;
}

// ---- nodegroups --------------------------------------------------------------------------

const std::array<std::string_view, 5> k_opers = {"and", "or", "not", "(", ")"};
bool is_oper(std::string_view w) { return std::find(k_opers.begin(), k_opers.end(), w) != k_opers.end(); }

std::optional<std::vector<std::string>> nodegroup_regex(const std::vector<std::string>& words) {
  for (const auto& w : words)
    if (is_oper(w)) return std::nullopt;
  for (const auto& w : words)
    if (w.find('*') != std::string::npos || (w.size() >= 2 && w[0] >= 'A' && w[0] <= 'Z' && w[1] == '@'))
      return std::nullopt;
  bool regexy = false;
  for (const auto& w : words)
    if (w.find_first_of("([{\\?}])") != std::string::npos) regexy = true;
  std::string joined = regexy ? "E@" : "L@";
  for (std::size_t i = 0; i < words.size(); ++i) joined += (i ? "," : "") + words[i];
  return std::vector<std::string>{joined};
}

// salt.utils.minions.nodegroup_comp; empty on failure.
std::vector<std::string> nodegroup_comp(const std::string& group, const std::map<std::string, std::string>& groups,
                                        std::vector<std::string>& skip, bool first_call) {
  if (std::find(skip.begin(), skip.end(), group) != skip.end()) return {};
  auto it = groups.find(group);
  if (it == groups.end()) return {};
  auto words = split_ws(it->second);
  skip.push_back(group);
  std::vector<std::string> ret;
  bool expanded = false;
  for (const auto& w : words) {
    if (is_oper(w)) {
      ret.push_back(w);
    } else if (w.size() >= 3 && w.starts_with("N@")) {
      expanded = true;
      auto sub = nodegroup_comp(w.substr(2), groups, skip, false);
      ret.insert(ret.end(), sub.begin(), sub.end());
    } else {
      ret.push_back(w);
    }
  }
  if (!ret.empty()) {
    ret.insert(ret.begin(), "(");
    ret.push_back(")");
  }
  skip.pop_back();
  if (expanded || !first_call) {
    if (!first_call)
      if (auto j = nodegroup_regex(words)) return *j;
    return ret;
  }
  if (auto j = nodegroup_regex(words)) return *j;
  return words;
}

std::vector<std::string> expand_nodegroup(const std::string& group, const std::map<std::string, std::string>* groups) {
  if (!groups) return {};
  std::vector<std::string> skip;
  return nodegroup_comp(group, *groups, skip, true);
}

// ---- compound ----------------------------------------------------------------------------

struct target_info {
  char engine = 0;  // 0: none
  char delimiter = 0;
  std::string pattern;
};

// TARGET_REX: ((G|P|I|J|L|N|S|E|R|T|M)((?<=G|P|I|J).)?@)?(.+)$
target_info parse_target(const std::string& w) {
  static const std::string engines = "GPIJLNSERTM";
  if (w.size() >= 3 && engines.find(w[0]) != std::string::npos) {
    bool delim_ok = std::string("GPIJ").find(w[0]) != std::string::npos;
    if (delim_ok && w.size() >= 4 && w[2] == '@') return {w[0], w[1], w.substr(3)};
    if (w[1] == '@') return {w[0], 0, w.substr(2)};
  }
  return {0, 0, w};
}

enum class tk { and_, or_, not_, lp, rp, val, all, minus };
struct token {
  tk t;
  bool v = false;
};

// What an atom evaluates to for one minion: true/false, or nullopt = the whole compound
// fails (unknown engine, invalid regex).
using atom_fn = std::function<std::optional<bool>(const target_info&)>;

// Builds the Python (minion) or set (master) expression tokens; nullopt on a Salt error.
std::optional<std::vector<token>> build_tokens(std::vector<std::string> words, bool master_mode,
                                               const std::map<std::string, std::string>* groups,
                                               const atom_fn& atom) {
  std::vector<token> out;
  std::vector<char> unmatched;  // master: '(' or '-'
  std::size_t guard = 0;
  std::size_t pos = 0;
  auto close_minus = [&] {
    if (master_mode && !unmatched.empty() && unmatched.back() == '-') {
      out.push_back({tk::rp});
      unmatched.pop_back();
    }
  };
  while (pos < words.size()) {
    if (++guard > 100000) return std::nullopt;
    std::string word = words[pos++];
    if (is_oper(word)) {
      if (!master_mode) {
        if (!out.empty()) {
          if (out.back().t == tk::lp && (word == "and" || word == "or")) return std::nullopt;
          if (word == "not" && out.back().t != tk::and_ && out.back().t != tk::or_ && out.back().t != tk::lp)
            out.push_back({tk::and_});
        } else if (word != "(" && word != "not") {
          return std::nullopt;
        }
        out.push_back({word == "and" ? tk::and_ : word == "or" ? tk::or_ : word == "not" ? tk::not_
                       : word == "(" ? tk::lp : tk::rp});
      } else {
        if (!out.empty()) {
          if (out.back().t == tk::lp && (word == "and" || word == "or")) return std::nullopt;
          if (word == "not") {
            if (out.back().t != tk::and_ && out.back().t != tk::or_ && out.back().t != tk::lp)
              out.push_back({tk::and_});
            out.push_back({tk::lp});
            out.push_back({tk::all});
            out.push_back({tk::minus});
            unmatched.push_back('-');
          } else if (word == "and") {
            out.push_back({tk::and_});
          } else if (word == "or") {
            out.push_back({tk::or_});
          } else if (word == "(") {
            out.push_back({tk::lp});
            unmatched.push_back('(');
          } else {  // ")"
            if (unmatched.empty() || unmatched.back() != '(') return std::nullopt;
            out.push_back({tk::rp});
            unmatched.pop_back();
            close_minus();
          }
        } else {
          if (word == "not") {
            out.push_back({tk::lp});
            out.push_back({tk::all});
            out.push_back({tk::minus});
            unmatched.push_back('-');
          } else if (word == "(") {
            out.push_back({tk::lp});
            unmatched.push_back('(');
          } else {
            return std::nullopt;
          }
        }
      }
      continue;
    }
    target_info ti = parse_target(word);
    if (ti.engine == 'N') {
      auto dec = expand_nodegroup(ti.pattern, groups);
      words.insert(words.begin() + static_cast<std::ptrdiff_t>(pos), dec.begin(), dec.end());
      if (words.size() > 100000) return std::nullopt;
      continue;
    }
    auto r = atom(ti);
    if (!r) return std::nullopt;
    out.push_back({tk::val, *r});
    close_minus();
  }
  if (master_mode)
    for (std::size_t i = 0; i < unmatched.size(); ++i) out.push_back({tk::rp});
  return out;
}

// Recursive-descent evaluation. Minion (Python bools): or > and > not > atom.
// Master (Python sets): | > & > - > atom. Any syntax error -> nullopt.
class evaluator {
 public:
  evaluator(const std::vector<token>& t, bool master) : t_(t), master_(master) {}
  std::optional<bool> run() {
    auto v = parse_or(0);
    if (!v || pos_ != t_.size()) return std::nullopt;
    return v;
  }

 private:
  bool at(tk k) const { return pos_ < t_.size() && t_[pos_].t == k; }
  std::optional<bool> parse_or(int depth) {
    if (depth > 200) return std::nullopt;
    auto l = parse_and(depth);
    if (!l) return std::nullopt;
    bool v = *l;
    while (at(tk::or_)) {
      ++pos_;
      auto r = parse_and(depth);
      if (!r) return std::nullopt;
      v = v || *r;
    }
    return v;
  }
  std::optional<bool> parse_and(int depth) {
    auto l = parse_unary(depth);
    if (!l) return std::nullopt;
    bool v = *l;
    while (at(tk::and_)) {
      ++pos_;
      auto r = parse_unary(depth);
      if (!r) return std::nullopt;
      v = v && *r;
    }
    return v;
  }
  std::optional<bool> parse_unary(int depth) {
    if (!master_) {
      if (at(tk::not_)) {
        ++pos_;
        if (depth > 200) return std::nullopt;
        auto r = parse_unary(depth + 1);
        if (!r) return std::nullopt;
        return !*r;
      }
      return parse_atom(depth);
    }
    auto l = parse_atom(depth);
    if (!l) return std::nullopt;
    bool v = *l;
    while (at(tk::minus)) {
      ++pos_;
      auto r = parse_atom(depth);
      if (!r) return std::nullopt;
      v = v && !*r;
    }
    return v;
  }
  std::optional<bool> parse_atom(int depth) {
    if (at(tk::val)) return t_[pos_++].v;
    if (at(tk::all)) {
      ++pos_;
      return true;
    }
    if (at(tk::lp)) {
      ++pos_;
      if (at(tk::rp)) {  // "()" is an empty tuple: falsy in a bool context, a TypeError with sets
        ++pos_;
        if (master_) return std::nullopt;
        return false;
      }
      auto v = parse_or(depth + 1);
      if (!v || !at(tk::rp)) return std::nullopt;
      ++pos_;
      return v;
    }
    return std::nullopt;
  }
  const std::vector<token>& t_;
  bool master_;
  std::size_t pos_ = 0;
};

std::vector<std::string> compound_words(const value& tgt) {
  if (auto s = bytes_of(tgt)) return split_ws(*s);
  std::vector<std::string> words;
  if (tgt.is_array())
    for (const auto& x : tgt) words.push_back(bytes_of(x) ? std::string(*bytes_of(x)) : python_str(x));
  return words;
}

std::optional<bool> eval_compound(const value& tgt, bool master_mode, const std::map<std::string, std::string>* groups,
                                  const atom_fn& atom) {
  if (!bytes_of(tgt) && !tgt.is_array()) return std::nullopt;
  auto tokens = build_tokens(compound_words(tgt), master_mode, groups, atom);
  if (!tokens) return std::nullopt;
  return evaluator(*tokens, master_mode).run();
}

const value& empty_map() {
  static const value e = value::object();
  return e;
}

// One atom of a compound for a minion. `greedy_missing`: master mode, what an atom that
// needs grains/pillar yields when that data is unknown.
std::optional<bool> eval_atom(const target_info& ti, const minion_facts& m, std::optional<bool> greedy_missing,
                              bool pillar_exact) {
  const std::string& p = ti.pattern;
  char d = ti.delimiter ? ti.delimiter : ':';
  auto data_atom = [&](const value* data, mode md) -> std::optional<bool> {
    if (!data) {
      if (greedy_missing) return *greedy_missing;
      data = &empty_map();
    }
    if (md == mode::regex) {
      // An invalid regex makes Salt's matcher log and return False for this atom.
      return subdict(*data, p, d, md, 0);
    }
    return subdict(*data, p, d, md, 0);
  };
  switch (ti.engine) {
    case 0: return glob_match(p, m.id);
    case 'G': return data_atom(m.grains, mode::glob);
    case 'P': return data_atom(m.grains, mode::regex);
    case 'I': return data_atom(m.pillar, pillar_exact ? mode::exact : mode::glob);
    case 'J': return data_atom(m.pillar, pillar_exact ? mode::exact : mode::regex);
    case 'L': {
      if (greedy_missing.has_value()) {  // master: comma split, membership
        for (const auto& x : split(p, ','))
          if (!x.empty() && x == m.id) return true;
        return false;
      }
      return list_match(value(p), m.id);
    }
    case 'E': return regex_match_start(p, m.id);
    case 'S': {
      if (!m.grains && greedy_missing) return *greedy_missing;
      return ipcidr(m.grains, p);
    }
    default: return std::nullopt;  // R@ T@ M@ (and N@, expanded before)
  }
}

bool data_type_match(const value& tgt, std::string_view tgt_type, const minion_facts& m, char delimiter) {
  auto s = bytes_of(tgt);
  if (!s) return false;
  const value* data = nullptr;
  mode md = mode::glob;
  if (tgt_type == "grain") data = m.grains;
  else if (tgt_type == "grain_pcre") data = m.grains, md = mode::regex;
  else if (tgt_type == "pillar") data = m.pillar;
  else if (tgt_type == "pillar_pcre") data = m.pillar, md = mode::regex;
  else if (tgt_type == "pillar_exact") data = m.pillar, md = mode::exact;
  if (s->find(delimiter) == std::string_view::npos) return false;
  return subdict(data ? *data : empty_map(), *s, delimiter, md, 0);
}

bool is_data_type(std::string_view t) {
  return t == "grain" || t == "grain_pcre" || t == "pillar" || t == "pillar_pcre" || t == "pillar_exact";
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  return glob_run(compile_glob(decode(pattern)), decode(text));
}

bool pcre_match(std::string_view pattern, std::string_view text) {
  return regex_match_start(pattern, text).value_or(false);
}

bool data_match(const wire::value& data, std::string_view expr, char delimiter, bool regex) {
  return subdict(data, expr, delimiter, regex ? mode::regex : mode::glob, 0);
}

bool data_match_exact(const wire::value& data, std::string_view expr, char delimiter) {
  return subdict(data, expr, delimiter, mode::exact, 0);
}

bool ipcidr_match(const wire::value& grains, std::string_view tgt) { return ipcidr(&grains, tgt); }

std::vector<std::string> expand_nodegroup_words(const std::string& name,
                                                const std::map<std::string, std::string>& nodegroups) {
  return expand_nodegroup(name, &nodegroups);
}

bool matches(const wire::value& tgt, std::string_view tgt_type, const minion_facts& m, char delimiter,
             const std::map<std::string, std::string>* nodegroups) {
  if (tgt_type == "glob") {
    auto s = bytes_of(tgt);
    return s && glob_match(*s, m.id);
  }
  if (tgt_type == "pcre") {
    auto s = bytes_of(tgt);
    return s && pcre_match(*s, m.id);
  }
  if (tgt_type == "list") return list_match(tgt, m.id);
  if (is_data_type(tgt_type)) return data_type_match(tgt, tgt_type, m, delimiter);
  if (tgt_type == "ipcidr") {
    auto s = bytes_of(tgt);
    return s && ipcidr(m.grains, *s);
  }
  if (tgt_type == "compound" || tgt_type == "compound_pillar_exact") {
    bool exact = tgt_type == "compound_pillar_exact";
    atom_fn atom = [&](const target_info& ti) { return eval_atom(ti, m, std::nullopt, exact); };
    return eval_compound(tgt, false, nodegroups, atom).value_or(false);
  }
  if (tgt_type == "nodegroup") {
    auto s = bytes_of(tgt);
    if (!s || !nodegroups || !nodegroups->count(std::string(*s))) return false;
    auto words = expand_nodegroup(std::string(*s), nodegroups);
    value list = value::array();
    for (auto& w : words) list.push_back(w);
    atom_fn atom = [&](const target_info& ti) { return eval_atom(ti, m, std::nullopt, false); };
    return eval_compound(list, false, nodegroups, atom).value_or(false);
  }
  return false;
}

check_result check_minions(const wire::value& tgt, std::string_view tgt_type,
                           const std::vector<std::string>& accepted_ids,
                           const std::function<minion_facts(const std::string&)>& facts_of, bool greedy,
                           char delimiter, const std::map<std::string, std::string>* nodegroups) {
  check_result res;
  res.needs_broadcast = !(tgt_type == "glob" || tgt_type == "pcre" || tgt_type == "list");
  auto s = bytes_of(tgt);
  if (tgt_type == "glob") {
    if (s) {
      auto pat = compile_glob(decode(*s));
      for (const auto& id : accepted_ids)
        if (glob_run(pat, decode(id))) res.minions.push_back(id);
    }
  } else if (tgt_type == "pcre") {
    if (s && compile_regex(*s)) {
      for (const auto& id : accepted_ids)
        if (regex_match_start(*s, id).value_or(false)) res.minions.push_back(id);
    }
  } else if (tgt_type == "list") {
    std::vector<std::string> want;
    if (s) {
      for (auto& x : split(*s, ','))
        if (!x.empty()) want.push_back(x);
    } else if (tgt.is_array()) {
      for (const auto& x : tgt)
        if (auto b = bytes_of(x)) want.emplace_back(*b);
    }
    for (const auto& id : accepted_ids)
      if (std::find(want.begin(), want.end(), id) != want.end()) res.minions.push_back(id);
  } else if (is_data_type(tgt_type) || tgt_type == "ipcidr") {
    if (s) {
      for (const auto& id : accepted_ids) {
        minion_facts f = facts_of ? facts_of(id) : minion_facts{id};
        f.id = id;
        const value* data = (tgt_type.starts_with("pillar")) ? f.pillar : f.grains;
        bool hit;
        if (!data) hit = greedy;
        else if (tgt_type == "ipcidr") hit = ipcidr(data, *s);
        else hit = data_type_match(tgt, tgt_type, f, delimiter);
        if (hit) res.minions.push_back(id);
      }
    }
  } else if (tgt_type == "compound" || tgt_type == "compound_pillar_exact" || tgt_type == "nodegroup") {
    value expr = tgt;
    if (tgt_type == "nodegroup") {
      if (!s || !nodegroups) return res;
      expr = value::array();
      for (auto& w : expand_nodegroup(std::string(*s), nodegroups)) expr.push_back(w);
    }
    bool exact = tgt_type == "compound_pillar_exact";
    for (const auto& id : accepted_ids) {
      std::optional<minion_facts> facts;  // fetched only when an atom needs data
      minion_facts id_only{id};
      atom_fn atom = [&](const target_info& ti) -> std::optional<bool> {
        bool needs_data = std::string("GPIJS").find(ti.engine) != std::string::npos && ti.engine != 0;
        if (!needs_data) return eval_atom(ti, id_only, greedy, exact);
        if (!facts) {
          facts = facts_of ? facts_of(id) : minion_facts{id};
          facts->id = id;
        }
        return eval_atom(ti, *facts, greedy, exact);
      };
      auto r = eval_compound(expr, true, nodegroups, atom);
      if (!r) {  // Salt: an invalid compound selects nobody
        res.minions.clear();
        break;
      }
      if (*r) res.minions.push_back(id);
    }
  }
  std::sort(res.minions.begin(), res.minions.end());
  res.minions.erase(std::unique(res.minions.begin(), res.minions.end()), res.minions.end());
  return res;
}

}  // namespace sylvite::match
