// Salt's ACL evaluation (master/api/eauth_acl.hpp): cases from Salt's documentation
// (ref/publisheracl, topics/eauth/access_control) and from Salt's unit tests
// (tests/pytests/unit/utils/test_minions.py: auth_check / spec_check / fill_auth_list).
// tests/e2e/test_eauth_vs_salt.py compares a generated matrix with Salt's own code.
#include <gtest/gtest.h>

#include <map>

#include "master/api/eauth_acl.hpp"

namespace sylvite::master::api::acl {
namespace {

using wire::value;

value J(const char* s) { return value::parse(s); }

// A fixed minion set: check_minions(expr, "compound") over it with globs only.
expander fake_expander() {
  return [](const value& tgt, const std::string& tt) {
    static const std::vector<std::string> all = {"web1", "web2", "db1", "dev-web1"};
    std::vector<std::string> out;
    if (tt == "list") {
      for (const auto& t : tgt) out.push_back(t.get<std::string>());
      return out;
    }
    auto s = wire::as_text(tgt);
    if (!s) return out;
    for (const auto& m : all) {
      // compound of a single glob word (enough for these tables) or a glob.
      if (expr_match(m, *s) && (tt == "glob" || tt == "compound")) out.push_back(m);
    }
    return out;
  };
}

TEST(EauthAcl, MatchCheckIsReMatchAnchoredAtStart) {
  EXPECT_TRUE(match_check("test.*", value("test.ping")));
  EXPECT_TRUE(match_check("test", value("test.ping")));  // re.match: prefix
  EXPECT_FALSE(match_check("ping", value("test.ping")));
  EXPECT_TRUE(match_check(".*", J(R"(["a.b","c.d"])")));
  EXPECT_FALSE(match_check("a.*", J(R"(["a.b","c.d"])")));  // all or nothing
  EXPECT_FALSE(match_check("(", value("x")));               // invalid regex
  EXPECT_FALSE(match_check(".*", J("[]")));                  // empty list
}

TEST(EauthAcl, ExprMatchGlobThenAnchoredRegex) {
  EXPECT_TRUE(expr_match("fred", "fred"));
  EXPECT_TRUE(expr_match("fred", "f*"));
  EXPECT_TRUE(expr_match("fred", "fr.d"));
  EXPECT_FALSE(expr_match("fredx", "fr.d"));
  EXPECT_TRUE(expr_match("bob", "a|bob"));  // \Aa|bob\Z
}

TEST(EauthAcl, FillAuthListUserNameIsThePattern) {
  // Salt's docs example (topics/eauth): thatch, steve, admins%, '*'.
  value provider = J(R"({
    "thatch": [".*"],
    "steve": [".*"],
    "admins%": ["@wheel", "@runner"],
    "*": ["test.ping"],
    "web*": ["disk.usage"]
  })");
  bool matched = false;
  EXPECT_EQ(fill_auth_list(provider, "thatch", {}, false, &matched), J(R"([".*"])"));
  EXPECT_TRUE(matched);
  // Not named: '*' applies.
  EXPECT_EQ(fill_auth_list(provider, "mallory", {}, false, &matched), J(R"(["test.ping"])"));
  EXPECT_TRUE(matched);
  // Group member: the group's entries and '*' (no user key matched).
  EXPECT_EQ(fill_auth_list(provider, "mallory", {"admins"}, false), J(R"(["@wheel","@runner","test.ping"])"));
  // expr_match(config_key, user): "web*" as a key does not glob the user "web1"...
  EXPECT_EQ(fill_auth_list(provider, "web1", {}, false), J(R"(["test.ping"])"));
  // ... but a user name that is itself a pattern matches keys (Salt quirk).
  EXPECT_EQ(fill_auth_list(provider, "st.*", {}, false), J(R"([".*"])"));
  // permissive_acl: '*' only if the user name matches the key "*" as a pattern.
  EXPECT_EQ(fill_auth_list(provider, "thatch", {}, true), J(R"([".*"])"));
  // Nobody, no '*': nothing, and not in the table.
  value no_star = J(R"({"thatch": [".*"], "^filename": "/etc/x"})");
  EXPECT_EQ(fill_auth_list(no_star, "mallory", {}, false, &matched), J("[]"));
  EXPECT_FALSE(matched);
  // '^' options never become permissions, even for a user named ".*".
  EXPECT_EQ(fill_auth_list(no_star, ".*", {}, false), J(R"([".*"])"));
}

TEST(EauthAcl, AuthCheckFunctionsAndTargets) {
  auto ex = fake_expander();
  auto web = std::vector<std::string>{"web1", "web2"};
  auto all = std::vector<std::string>{"web1", "web2", "db1", "dev-web1"};
  // Salt docs: fred: ['web*': ['test.*', 'network.*'], 'test.ping']
  value fred = J(R"([{"web*": ["test.*", "network.*"]}, "test.ping"])");
  EXPECT_TRUE(auth_check(fred, value("test.ping"), J("[]"), all, {}, ex));      // plain entry: every minion
  EXPECT_TRUE(auth_check(fred, value("test.echo"), J(R"(["x"])"), web, {}, ex));  // web* allows test.*
  EXPECT_FALSE(auth_check(fred, value("test.echo"), J("[]"), all, {}, ex));     // db1 not in web*
  EXPECT_TRUE(auth_check(fred, value("network.ip_addrs"), J("[]"), web, {}, ex));
  EXPECT_FALSE(auth_check(fred, value("cmd.run"), J(R"(["id"])"), web, {}, ex));
  // The whitelist the publisher passes.
  EXPECT_TRUE(auth_check(J("[]"), value("saltutil.find_job"), J("[]"), all, {"saltutil.find_job"}, ex));
  EXPECT_FALSE(auth_check(J("[]"), value("test.ping"), J("[]"), all, {"saltutil.find_job"}, ex));
  // Empty target: a subset of every ACL target (validate_tgt).
  EXPECT_TRUE(auth_check(fred, value("test.echo"), J("[]"), {}, {}, ex));
  // '*' target and @-targets.
  EXPECT_TRUE(auth_check(J(R"([{"*": ["disk.*"]}])"), value("disk.usage"), J("[]"), all, {}, ex));
  EXPECT_FALSE(auth_check(J(R"([{"@runner": [".*"]}])"), value("disk.usage"), J("[]"), all, {}, ex));
  // Compound job: allowed as soon as one function is (Salt quirk).
  EXPECT_TRUE(auth_check(J(R"(["test.ping"])"), J(R"(["test.ping","cmd.run"])"), J(R"([[],["id"]])"), all, {}, ex));
  EXPECT_FALSE(auth_check(J(R"(["test.ping"])"), J(R"(["cmd.run","pkg.install"])"), J(R"([[],[]])"), all, {}, ex));
  // Malformed: a dict with two keys is skipped.
  EXPECT_FALSE(auth_check(J(R"([{"web*": ["test.*"], "db*": ["test.*"]}])"), value("test.ping"), J("[]"), web, {}, ex));
}

TEST(EauthAcl, AuthCheckArgumentSpecs) {
  auto ex = fake_expander();
  std::vector<std::string> all = {"web1"};
  // Salt docs (access_control "args and kwargs"):
  value acl = J(R"([{"*": [
      {"test.echo": {"args": ["hello.*"]}},
      {"cmd.run": [{"args": ["ls", null], "kwargs": {"cwd": "/tmp.*"}}]},
      {"pkg.install": {"kwargs": {"name": null}}}
  ]}])");
  EXPECT_TRUE(auth_check(acl, value("test.echo"), J(R"(["hello world"])"), all, {}, ex));
  EXPECT_FALSE(auth_check(acl, value("test.echo"), J(R"(["bye"])"), all, {}, ex));
  EXPECT_FALSE(auth_check(acl, value("test.echo"), J("[]"), all, {}, ex));
  EXPECT_TRUE(auth_check(acl, value("cmd.run"), J(R"(["ls", "-l", {"__kwarg__": true, "cwd": "/tmp/x"}])"), all, {}, ex));
  EXPECT_FALSE(auth_check(acl, value("cmd.run"), J(R"(["ls", "-l", {"__kwarg__": true, "cwd": "/etc"}])"), all, {}, ex));
  EXPECT_FALSE(auth_check(acl, value("cmd.run"), J(R"(["ls", "-l"])"), all, {}, ex));  // kwarg missing
  EXPECT_FALSE(auth_check(acl, value("cmd.run"), J(R"(["ls"])"), all, {}, ex));        // second arg missing
  EXPECT_TRUE(auth_check(acl, value("pkg.install"), J(R"([{"__kwarg__": true, "name": "vim"}])"), all, {}, ex));
  EXPECT_FALSE(auth_check(acl, value("pkg.install"), J(R"(["vim"])"), all, {}, ex));
  // str(arg) as Python prints it.
  value num = J(R"([{"*": [{"test.arg": {"args": ["5$", "True", "None"]}}]}])");
  EXPECT_TRUE(auth_check(num, value("test.arg"), J("[5, true, null]"), all, {}, ex));
  EXPECT_FALSE(auth_check(num, value("test.arg"), J("[6, true, null]"), all, {}, ex));
}

TEST(EauthAcl, SpecCheckRunnerWheelJobs) {
  value args = J(R"({"arg": [], "kwarg": {}})");
  EXPECT_EQ(spec_check(J(R"(["@runner"])"), "jobs.list_jobs", args, "runner"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"(["@runners"])"), "jobs.list_jobs", args, "runner"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"(["@jobs"])"), "jobs.list_jobs", args, "runner"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"(["@jobs"])"), "manage.up", args, "runner"), spec_result::deny);
  EXPECT_EQ(spec_check(J(R"(["@wheel"])"), "jobs.list_jobs", args, "runner"), spec_result::deny);
  EXPECT_EQ(spec_check(J(R"([".*"])"), "jobs.list_jobs", args, "runner"), spec_result::deny);  // plain entries: minions only
  EXPECT_EQ(spec_check(J(R"(["@wheel"])"), "key.list_all", J("{}"), "wheel"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"(["@key"])"), "key.list_all", J("{}"), "wheel"), spec_result::allow);
  EXPECT_EQ(spec_check(J("[]"), "key.list_all", J("{}"), "wheel"), spec_result::deny);
  EXPECT_EQ(spec_check(J(R"(["@wheel"])"), "keylist", J("{}"), "wheel"), spec_result::syntax_error);
  EXPECT_EQ(spec_check(J(R"(["@wheel"])"), "a.b.c", J("{}"), "wheel"), spec_result::syntax_error);
  // Dict forms: '@wheel': ['key.list.*'] checks the full name; '@key': ['list.*'] the function part.
  EXPECT_EQ(spec_check(J(R"([{"@wheel": ["key.list.*"]}])"), "key.list_all", J("{}"), "wheel"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"([{"@wheel": ["key.list.*"]}])"), "key.delete", J("{}"), "wheel"), spec_result::deny);
  EXPECT_EQ(spec_check(J(R"([{"@key": ["list.*"]}])"), "key.list_all", J("{}"), "wheel"), spec_result::allow);
  EXPECT_EQ(spec_check(J(R"([{"@key": ["key.list.*"]}])"), "key.list_all", J("{}"), "wheel"), spec_result::deny);
  // Argument specs read arg/kwarg inside the load's kwarg map.
  value spec = J(R"([{"@runner": [{"jobs.lookup_jid": {"kwargs": {"jid": "2026.*"}}}]}])");
  EXPECT_EQ(spec_check(spec, "jobs.lookup_jid", J(R"({"arg": [], "kwarg": {"jid": "20261127"}})"), "runner"),
            spec_result::allow);
  EXPECT_EQ(spec_check(spec, "jobs.lookup_jid", J(R"({"arg": [], "kwarg": {"jid": "19"}})"), "runner"),
            spec_result::deny);
  // An empty string entry raises in Salt (ind[0]): deny.
  EXPECT_EQ(spec_check(J(R"(["", "@runner"])"), "jobs.list_jobs", args, "runner"), spec_result::deny);
}

TEST(EauthAcl, PublisherAcl) {
  // Salt docs (ref/publisheracl).
  value pacl = J(R"({"fred": ["test.ping", "network.*"], "web.*": ["test.*"], "bob": [{"web*": ["pkg.*"]}]})");
  EXPECT_EQ(publisher_auth_list(pacl, "fred"), J(R"(["test.ping","network.*"])"));
  EXPECT_EQ(publisher_auth_list(pacl, "webadmin"), J(R"(["test.*"])"));  // expr_match(user, key)
  EXPECT_EQ(publisher_auth_list(pacl, "mallory"), J("[]"));
  value bl = J(R"({"users": ["root", "^.*_prod$"], "modules": ["cmd.*", "test.echo"]})");
  EXPECT_TRUE(user_is_blacklisted(bl, "root"));
  EXPECT_TRUE(user_is_blacklisted(bl, "app_prod"));
  EXPECT_FALSE(user_is_blacklisted(bl, "fred"));
  EXPECT_TRUE(cmd_is_blacklisted(bl, value("cmd.run")));
  EXPECT_TRUE(cmd_is_blacklisted(bl, J(R"(["test.ping","test.echo"])")));
  EXPECT_FALSE(cmd_is_blacklisted(bl, value("test.ping")));
  EXPECT_FALSE(user_is_blacklisted(J("{}"), "root"));
}

TEST(EauthAcl, LoginPermsSortedAsSaltApi) {
  value eauth = J(R"({"fred": ["test.*", {"web*": ["disk.*"]}, "@wheel"], "*": ["test.ping", "@wheel"],
                      "admins%": ["@runner"]})");
  EXPECT_EQ(login_perms(eauth, "fred", {"admins", "users"}),
            J(R"(["@runner", "@wheel", "test.*", "test.ping", {"web*": ["disk.*"]}])"));
}

TEST(EauthAcl, PyStr) {
  EXPECT_EQ(py_str(J("1.5")), "1.5");
  EXPECT_EQ(py_str(J("2.0")), "2.0");
  EXPECT_EQ(py_str(J(R"(["a", 1, null, true])")), "['a', 1, None, True]");
  EXPECT_EQ(py_str(J(R"({"k": "v"})")), "{'k': 'v'}");
}

}  // namespace
}  // namespace sylvite::master::api::acl
