// Salt's ACL evaluation (see eauth_acl.hpp). Each function names the Salt function it
// ports; the comments give the Python line where behaviour is surprising.
#include "master/api/eauth_acl.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "core/match/match.hpp"
#include "core/wire/py_repr.hpp"

namespace sylvite::master::api::acl {

using wire::value;

namespace {

// Where Salt raises (TypeError, IndexError, AttributeError), we stop and deny.
struct py_error {};

// Python's view of a value as a sequence (len(), [i], iteration): a list, or the
// characters of a string; anything else is a TypeError.
std::vector<value> as_seq(const value& v) {
  if (v.is_array()) return std::vector<value>(v.begin(), v.end());
  if (auto s = wire::as_text(v)) {
    std::vector<value> out;
    for (char c : *s) out.emplace_back(std::string(1, c));
    return out;
  }
  throw py_error{};
}

// list.extend(x) for the values an ACL table holds.
void extend(value& list, const value& x) {
  if (x.is_null()) throw py_error{};
  for (auto& item : as_seq(x)) list.push_back(item);
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// CkMinions.__args_check(valid, args, kwargs).
bool args_check(const value& valid_in, const value* args, const value* kwargs) {
  std::vector<value> valid = valid_in.is_array() ? as_seq(valid_in) : std::vector<value>{valid_in};
  std::optional<std::vector<value>> arg_seq;
  if (args && !args->is_null()) arg_seq = as_seq(*args);
  for (const auto& cond : valid) {
    if (!cond.is_object()) continue;  // "Invalid argument"
    bool good = true;
    if (auto it = cond.find("args"); it != cond.end()) {
      auto cond_args = as_seq(*it);
      for (std::size_t i = 0; i < cond_args.size(); ++i) {
        if (!arg_seq || arg_seq->size() <= i) {
          good = false;
          break;
        }
        if (cond_args[i].is_null()) continue;  // None == '.*'
        auto pat = wire::as_text(cond_args[i]);
        // re.match(<non-str>, ...) raises inside match_check's try: no match.
        if (!pat || !match_check(*pat, value(py_str((*arg_seq)[i])))) {
          good = false;
          break;
        }
      }
    }
    if (!good) continue;
    if (auto it = cond.find("kwargs"); it != cond.end()) {
      if (!it->is_object()) throw py_error{};  // .items() on a non-dict
      for (auto kv = it->begin(); kv != it->end(); ++kv) {
        const value* have = nullptr;
        if (kwargs && !kwargs->is_null()) {
          if (!kwargs->is_object()) throw py_error{};
          if (auto f = kwargs->find(kv.key()); f != kwargs->end()) have = &*f;
        }
        if (!have) {
          good = false;
          break;
        }
        if (kv.value().is_null()) continue;
        auto pat = wire::as_text(kv.value());
        if (!pat || !match_check(*pat, value(py_str(*have)))) {
          good = false;
          break;
        }
      }
    }
    if (good) return true;
  }
  return false;
}

// CkMinions.__fun_check(valid, fun, args, kwargs).
bool fun_check(const value& valid_in, const value& fun, const value* args, const value* kwargs) {
  std::vector<value> valid = valid_in.is_array() ? as_seq(valid_in) : std::vector<value>{valid_in};
  for (const auto& cond : valid) {
    if (auto s = wire::as_text(cond)) {
      if (match_check(*s, fun)) return true;
    } else if (cond.is_object()) {
      if (cond.size() != 1) continue;
      auto it = cond.begin();
      if (match_check(it.key(), fun) && args_check(it.value(), args, kwargs)) return true;
    }
  }
  return false;
}

}  // namespace

std::string py_str(const value& v) { return wire::py_str(v, wire::py_style_acl); }

bool match_check(std::string_view regex, const value& fun) {
  std::vector<value> funs;
  if (fun.is_string() || fun.is_binary()) funs.push_back(fun);
  else if (fun.is_array()) funs.assign(fun.begin(), fun.end());
  else return false;  // iterating a non-list raises in Salt: the caller denies
  bool any = false;
  for (const auto& f : funs) {
    auto s = wire::as_text(f);
    if (!s) continue;  // re.match on a non-str raises inside the try: skipped
    any = true;
    if (!match::pcre_match(regex, *s)) return false;
  }
  return any;
}

bool expr_match(std::string_view line, std::string_view expr) {
  if (match::glob_match(expr, line)) return true;
  // re.match(rf"\A{expr}\Z", line): the expression is pasted unparenthesised, so "a|b"
  // means "\Aa" or "b\Z", exactly as ECMAScript reads "^a|b$".
  std::string re = "^";
  re.append(expr);
  re += "$";
  return match::pcre_match(re, line);
}

bool check_whitelist_blacklist(std::string_view val, const value& whitelist, const value& blacklist) {
  auto norm = [](const value& l) {
    std::vector<value> out;
    if (l.is_null() || (l.is_array() && l.empty()) || (l.is_string() && l.get_ref<const std::string&>().empty()))
      return out;
    if (l.is_string() || l.is_binary()) out.push_back(l);
    else if (l.is_array() || l.is_object()) {
      for (auto it = l.begin(); it != l.end(); ++it) out.push_back(l.is_object() ? value(it.key()) : *it);
    }
    return out;
  };
  auto bl = norm(blacklist), wl = norm(whitelist);
  auto any = [&](const std::vector<value>& l) {
    for (const auto& e : l) {
      auto s = wire::as_text(e);  // expr_match with a non-str logs and is false
      if (s && expr_match(val, *s)) return true;
    }
    return false;
  };
  const bool bm = any(bl), wm = any(wl);
  if (!bl.empty() && wl.empty()) return !bm;
  if (!wl.empty() && bl.empty()) return wm;
  if (!bl.empty() && !wl.empty()) return !bm && wm;
  return true;
}

value fill_auth_list(const value& auth_provider, std::string_view name, const std::vector<std::string>& groups,
                     bool permissive, bool* name_matched_out) {
  value auth_list = value::array();
  bool name_matched = false, any_matched = false;
  if (!auth_provider.is_object()) {
    if (name_matched_out) *name_matched_out = false;
    return auth_list;
  }
  try {
    for (auto it = auth_provider.begin(); it != auth_provider.end(); ++it) {
      const std::string& match = it.key();
      if (!match.empty() && match[0] == '^') continue;  // backend option (file: ^filename)
      if (match == "*" && !permissive) continue;
      if (!match.empty() && match.back() == '%') {
        std::string g = match;
        while (!g.empty() && g.back() == '%') g.pop_back();
        if (contains(groups, g)) {
          any_matched = true;
          extend(auth_list, it.value());
        }
      } else if (expr_match(match, name)) {  // sic: the user name is the pattern
        name_matched = any_matched = true;
        extend(auth_list, it.value());
      }
    }
    if (!permissive && !name_matched) {
      if (auto it = auth_provider.find("*"); it != auth_provider.end()) {
        any_matched = true;
        extend(auth_list, *it);
      }
    }
  } catch (const py_error&) {
    spdlog::warn("eauth: malformed external_auth entry for user {}: ignored", name);
  }
  if (name_matched_out) *name_matched_out = any_matched;
  return auth_list;
}

value login_perms(const value& eauth, std::string_view name, const std::vector<std::string>& groups) {
  value perms = value::array();
  if (!eauth.is_object()) return perms;
  auto add = [&](const value* v) {
    if (v && v->is_array())
      for (const auto& e : *v) perms.push_back(e);
  };
  add(wire::find(eauth, name));
  add(wire::find(eauth, "*"));
  std::set<std::string> user_groups(groups.begin(), groups.end());
  for (auto it = eauth.begin(); it != eauth.end(); ++it) {
    const std::string& k = it.key();
    if (k.empty() || k.back() != '%') continue;
    std::string g = k;
    while (!g.empty() && g.back() == '%') g.pop_back();
    if (user_groups.count(g)) add(&it.value());
  }
  // sorted_permissions: de-duplicated, strings sorted, then the rest sorted by repr.
  std::vector<std::string> strs;
  std::vector<std::pair<std::string, value>> others;
  for (const auto& e : perms) {
    if (e.is_string()) {
      if (!contains(strs, e.get_ref<const std::string&>())) strs.push_back(e.get<std::string>());
    } else {
      bool dup = false;
      for (const auto& o : others) dup = dup || o.second == e;
      if (!dup) others.emplace_back(wire::py_repr(e, wire::py_style_acl), e);
    }
  }
  std::sort(strs.begin(), strs.end());
  std::stable_sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  value out = value::array();
  for (auto& s : strs) out.push_back(s);
  for (auto& o : others) out.push_back(o.second);
  return out;
}

bool validate_tgt(std::string_view valid, const std::vector<std::string>& minions, const expander& expand) {
  if (valid == "*") return true;
  if (!valid.empty() && valid[0] == '@') return false;
  std::vector<std::string> v = expand ? expand(value(std::string(valid)), "compound") : std::vector<std::string>{};
  std::set<std::string> vs(v.begin(), v.end());
  for (const auto& m : minions)
    if (!vs.count(m)) return false;
  return true;  // an empty target is a subset of anything
}

bool auth_check(const value& auth_list, const value& funs_in, const value& args_in,
                const std::vector<std::string>& minions, const std::vector<std::string>& whitelist,
                const expander& expand) {
  try {
    std::vector<value> funs, args;
    if (!funs_in.is_array()) {
      funs = {funs_in};
      args = {args_in};
    } else {
      funs.assign(funs_in.begin(), funs_in.end());
      args = as_seq(args_in);
    }
    if (!auth_list.is_array()) throw py_error{};
    for (std::size_t num = 0; num < funs.size(); ++num) {
      const value& fun = funs[num];
      if (auto f = wire::as_text(fun); f && contains(whitelist, *f)) return true;
      for (const auto& ind : auth_list) {
        if (auto s = wire::as_text(ind)) {
          if (match_check(*s, fun)) return true;  // allowed on every minion
        } else if (ind.is_object()) {
          if (ind.size() != 1) continue;
          auto it = ind.begin();
          if (!validate_tgt(it.key(), minions, expand)) continue;
          if (num >= args.size()) throw py_error{};  // IndexError
          value fun_args = args[num];
          std::optional<value> fun_kwargs;
          if (fun_args.is_array() && !fun_args.empty()) {
            const value& last = fun_args.back();
            if (last.is_object() && last.contains("__kwarg__")) {
              fun_kwargs = last;
              fun_args.erase(fun_args.size() - 1);
            }
          } else if (!fun_args.is_array() && !fun_args.is_null()) {
            auto seq = as_seq(fun_args);  // a string: its last character is no dict
            (void)seq;
          }
          if (fun_check(it.value(), fun, fun_args.is_null() ? nullptr : &fun_args,
                        fun_kwargs ? &*fun_kwargs : nullptr))
            return true;
        }
      }
    }
  } catch (const py_error&) {
    return false;
  }
  return false;
}

spec_result spec_check(const value& auth_list, std::string_view fun, const value& args, std::string_view form) {
  if (!auth_list.is_array() || auth_list.empty()) return spec_result::deny;
  auto dot = fun.find('.');
  if (dot == std::string_view::npos || fun.find('.', dot + 1) != std::string_view::npos)
    return spec_result::syntax_error;  // "A command invocation error occurred: Check syntax."
  const std::string mod_name(fun.substr(0, dot)), fun_name(fun.substr(dot + 1));
  const std::string plural = "@" + std::string(form) + "s";
  try {
    auto get = [&](const char* k) -> const value* {
      if (!args.is_object()) throw py_error{};  // args.get on a non-dict
      auto it = args.find(k);
      return it == args.end() || it->is_null() ? nullptr : &*it;
    };
    for (const auto& ind : auth_list) {
      if (auto s = wire::as_text(ind)) {
        if (s->empty()) throw py_error{};  // ind[0] on ""
        if ((*s)[0] == '@') {
          auto rest = s->substr(1);
          if (rest == mod_name || rest == form || *s == plural) return spec_result::allow;
        }
      } else if (ind.is_object()) {
        if (ind.size() != 1) continue;
        auto it = ind.begin();
        const std::string& valid = it.key();
        if (valid.empty()) throw py_error{};
        if (valid[0] == '@') {
          auto rest = std::string_view(valid).substr(1);
          if (rest == mod_name && fun_check(it.value(), value(fun_name), get("arg"), get("kwarg")))
            return spec_result::allow;
          if ((rest == form || valid == plural) &&
              fun_check(it.value(), value(std::string(fun)), get("arg"), get("kwarg")))
            return spec_result::allow;
        }
      }
    }
  } catch (const py_error&) {
    return spec_result::deny;
  }
  return spec_result::deny;
}

value publisher_auth_list(const value& publisher_acl, std::string_view user) {
  value ret = value::array();
  if (!publisher_acl.is_object()) return ret;
  for (auto it = publisher_acl.begin(); it != publisher_acl.end(); ++it) {
    if (!expr_match(user, it.key())) continue;
    try {
      extend(ret, it.value());
    } catch (const py_error&) {
      spdlog::warn("eauth: publisher_acl entry {} is not a list: ignored", it.key());
    }
  }
  return ret;
}

bool user_is_blacklisted(const value& blacklist, std::string_view user) {
  const value* users = blacklist.is_object() ? wire::find(blacklist, "users") : nullptr;
  return !check_whitelist_blacklist(user, value(), users ? *users : value());
}

bool cmd_is_blacklisted(const value& blacklist, const value& cmd) {
  const value* mods = blacklist.is_object() ? wire::find(blacklist, "modules") : nullptr;
  std::vector<value> cmds;
  if (cmd.is_array()) cmds.assign(cmd.begin(), cmd.end());
  else cmds.push_back(cmd);
  for (const auto& f : cmds) {
    auto s = wire::as_text(f);
    if (!s) continue;
    if (!check_whitelist_blacklist(*s, value(), mods ? *mods : value())) return true;
  }
  return false;
}

}  // namespace sylvite::master::api::acl
