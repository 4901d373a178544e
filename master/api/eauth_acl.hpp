// sylvite::master::api::acl: Salt's ACL evaluation, as pure functions over wire values,
// ported line by line from Salt 3008.5 so that every allow/deny matches:
//   salt/utils/minions.py CkMinions: match_check, fill_auth_list, auth_check (the
//     non-expanded form), validate_tgt, spec_check (wheel_check / runner_check),
//     __fun_check, __args_check;
//   salt/utils/stringutils.py expr_match, check_whitelist_blacklist;
//   salt/utils/master.py get_values_of_matching_keys (publisher_acl);
//   salt/acl PublisherACL (user_is_blacklisted, cmd_is_blacklisted);
//   salt/netapi sum_permissions + sorted_permissions (the perms /login shows).
// Salt quirks kept on purpose (each one is a test case in tests/unit/master/test_eauth_acl):
//   - fill_auth_list calls expr_match(config_key, user): the *user name* is the pattern;
//   - auth_check allows a compound job as soon as one of its functions is allowed;
//   - validate_tgt with an empty target set is true;
//   - runner/wheel argument specs read "arg"/"kwarg" inside the load's kwarg map.
// Where Salt would raise (an empty ACL string, a malformed entry), the answer is "deny".
// Thread-safety: pure functions (the expander callback must be thread-safe itself).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master::api::acl {

// Expands a target to the minion ids it selects (CkMinions.check_minions(...)["minions"]).
using expander = std::function<std::vector<std::string>(const wire::value& tgt, const std::string& tgt_type)>;

// Python str() of a value as __args_check compares it ("True", "None", "1.5", "['a', 1]").
std::string py_str(const wire::value& v);

// re.match(regex, fun) for every fun (a string or a list of strings): all must match;
// an empty list or an invalid regex is false.
bool match_check(std::string_view regex, const wire::value& fun);

// stringutils.expr_match(line, expr): fnmatch(line, expr) or re.match(r"\A{expr}\Z", line).
bool expr_match(std::string_view line, std::string_view expr);

// stringutils.check_whitelist_blacklist(value, whitelist, blacklist); each list is a
// string or a list of strings (null: none).
bool check_whitelist_blacklist(std::string_view value, const wire::value& whitelist, const wire::value& blacklist);

// CkMinions.fill_auth_list(auth_provider, name, groups): the entries of one eauth backend
// (keys starting with '^' are the backend's options and are skipped) this user gets.
// name_matched (optional out): whether a user or group key matched (not only '*').
wire::value fill_auth_list(const wire::value& auth_provider, std::string_view name,
                           const std::vector<std::string>& groups, bool permissive, bool* name_matched = nullptr);

// netapi.sum_permissions + sorted_permissions: the perms salt-api's /login returns.
wire::value login_perms(const wire::value& auth_provider, std::string_view name, const std::vector<std::string>& groups);

// CkMinions.validate_tgt(valid, expr, tgt_type, minions=minions).
bool validate_tgt(std::string_view valid, const std::vector<std::string>& minions, const expander& expand);

// CkMinions.auth_check(auth_list, funs, args, tgt, tgt_type, minions=minions,
// whitelist=whitelist) with auth.enable_expanded_auth_matching off. funs: a string or a
// list; args: the load's arg (a list, or a list of lists when funs is a list).
bool auth_check(const wire::value& auth_list, const wire::value& funs, const wire::value& args,
                const std::vector<std::string>& minions, const std::vector<std::string>& whitelist,
                const expander& expand);

// CkMinions.spec_check(auth_list, fun, args, form) for form "runner" / "wheel".
enum class spec_result { deny, allow, syntax_error };
spec_result spec_check(const wire::value& auth_list, std::string_view fun, const wire::value& args, std::string_view form);

// salt.utils.master.get_values_of_matching_keys(publisher_acl, user).
wire::value publisher_auth_list(const wire::value& publisher_acl, std::string_view user);

// salt.acl.PublisherACL(blacklist).user_is_blacklisted / cmd_is_blacklisted.
bool user_is_blacklisted(const wire::value& blacklist, std::string_view user);
bool cmd_is_blacklisted(const wire::value& blacklist, const wire::value& cmd);

}  // namespace sylvite::master::api::acl
