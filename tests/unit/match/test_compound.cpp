// Compound precedence (not > and > or), malformed expressions, and the master-side
// check_minions() (ids only for glob/pcre/list; cached facts + greedy for the rest).
#include <gtest/gtest.h>

#include "core/match/match.hpp"

using namespace sylvite::match;
using sylvite::wire::value;

namespace {
bool c(const std::string& expr, const std::string& id = "m1") {
  static const value grains = value::parse(R"({"os": "Debian", "roles": ["web"], "ipv4": ["10.0.0.5"]})");
  return matches(value(expr), "compound", minion_facts{id, &grains, nullptr});
}
}  // namespace

TEST(Compound, Precedence) {
  // "T" = m1 (true), "F" = x (false)
  EXPECT_TRUE(c("m1 or x and x"));        // or(m1, and(x, x))
  EXPECT_FALSE(c("( m1 or x ) and x"));
  EXPECT_TRUE(c("x and x or m1"));
  EXPECT_TRUE(c("not x and m1"));         // and(not x, m1)
  EXPECT_FALSE(c("not m1 and m1"));
  EXPECT_FALSE(c("not ( x or m1 )"));
  EXPECT_TRUE(c("not x or x"));
  EXPECT_TRUE(c("m1 not x"));             // implicit "and"
  EXPECT_FALSE(c("m1 not m1"));
  EXPECT_FALSE(c("not not m1"));  // Salt inserts "and" after "not": "not and not True" is invalid
  EXPECT_TRUE(c("G@os:Debian and ( L@a,b or E@m\\d ) and not S@192.168.0.0/16"));
}

TEST(Compound, MalformedNeverCrashesAndNeverMatches) {
  for (const char* e : {"", "and", "or m1", "m1 and", "m1 or", "( m1", "m1 )", "( and m1 )", "m1 m1", "not",
                        "( ( ( m1", "E@(", "R@%foo or m1", "T@x:y or m1", "M@m1", ") (", "not and m1"}) {
    EXPECT_FALSE(c(e)) << e;
  }
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "( ";
  deep += "m1";
  for (int i = 0; i < 5000; ++i) deep += " )";
  EXPECT_FALSE(c(deep));  // too deep: refused rather than overflowing the stack
  std::string nots;
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_FALSE(c(nots + "m1"));
}

TEST(Compound, NodegroupsExpandInCompound) {
  std::map<std::string, std::string> groups = {{"web", "G@roles:web or L@db1"}, {"loop", "N@loop"}};
  value grains = value::parse(R"({"roles": ["web"]})");
  minion_facts m{"m1", &grains, nullptr};
  EXPECT_TRUE(matches(value("N@web"), "compound", m, ':', &groups));
  EXPECT_TRUE(matches(value("web"), "nodegroup", m, ':', &groups));
  EXPECT_FALSE(matches(value("nope"), "nodegroup", m, ':', &groups));
  EXPECT_FALSE(matches(value("N@loop"), "compound", m, ':', &groups));
  EXPECT_FALSE(matches(value("N@web"), "compound", m));  // no nodegroups: N@ vanishes, nothing left
}

namespace {
struct fixture {
  std::vector<std::string> ids = {"db1", "db2", "web1", "web2", "nodata"};
  std::map<std::string, value> grains = {
      {"db1", value::parse(R"({"os": "Debian", "roles": ["db"], "ipv4": ["10.0.1.1"]})")},
      {"db2", value::parse(R"({"os": "RedHat", "roles": ["db"], "ipv4": ["10.0.1.2"]})")},
      {"web1", value::parse(R"({"os": "Debian", "roles": ["web"], "ipv4": ["10.0.2.1"]})")},
      {"web2", value::parse(R"({"os": "Debian", "roles": ["web"], "ipv4": ["10.0.2.2"]})")},
  };
  std::map<std::string, value> pillar = {{"web1", value::parse(R"({"tier": "front"})")}};
  int calls = 0;
  std::function<minion_facts(const std::string&)> facts() {
    return [this](const std::string& id) {
      ++calls;
      minion_facts f{id};
      if (auto it = grains.find(id); it != grains.end()) f.grains = &it->second;
      if (auto it = pillar.find(id); it != pillar.end()) f.pillar = &it->second;
      return f;
    };
  }
};
using V = std::vector<std::string>;
}  // namespace

TEST(CheckMinions, IdOnlyTypes) {
  fixture fx;
  auto r = check_minions(value("web*"), "glob", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"web1", "web2"}));
  EXPECT_FALSE(r.needs_broadcast);
  r = check_minions(value("db[0-9]"), "pcre", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "db2"}));
  EXPECT_FALSE(r.needs_broadcast);
  r = check_minions(value("("), "pcre", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_TRUE(r.minions.empty());
  r = check_minions(value("web2,db1,,ghost"), "list", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "web2"}));
  r = check_minions(value::array({"web1", "ghost"}), "list", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"web1"}));
  EXPECT_FALSE(r.needs_broadcast);
  EXPECT_EQ(fx.calls, 0);  // no data was needed
}

TEST(CheckMinions, DataTypesAndGreedy) {
  fixture fx;
  auto r = check_minions(value("os:Debian"), "grain", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "nodata", "web1", "web2"}));  // greedy: unknown data included
  EXPECT_TRUE(r.needs_broadcast);
  r = check_minions(value("os:Debian"), "grain", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "web1", "web2"}));
  r = check_minions(value("os:red.*"), "grain_pcre", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db2"}));
  r = check_minions(value("tier:front"), "pillar", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"web1"}));
  r = check_minions(value("10.0.1.0/24"), "ipcidr", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "db2", "nodata"}));
  r = check_minions(value("os|Debian"), "grain", fx.ids, fx.facts(), false, '|', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "web1", "web2"}));
}

TEST(CheckMinions, Compound) {
  fixture fx;
  auto r = check_minions(value("G@os:Debian and not web1"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "web2"}));
  EXPECT_TRUE(r.needs_broadcast);
  r = check_minions(value("G@os:Debian and not web1"), "compound", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "nodata", "web2"}));
  r = check_minions(value("web* or G@roles:db and G@os:RedHat"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db2", "web1", "web2"}));
  r = check_minions(value("not G@roles:db"), "compound", fx.ids, fx.facts(), true, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"web1", "web2"}));  // greedy puts nodata in G@, so "not" drops it
  // The master closes unbalanced "(" (set expression quirk); a stray ")" is refused.
  r = check_minions(value("( web1 or db1"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "web1"}));
  r = check_minions(value("web1 )"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_TRUE(r.minions.empty());
  r = check_minions(value("and web1"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_TRUE(r.minions.empty());
  r = check_minions(value("R@%x"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_TRUE(r.minions.empty());
  fx.calls = 0;
  r = check_minions(value("L@web1,db2 or E@db1"), "compound", fx.ids, fx.facts(), false, ':', nullptr);
  EXPECT_EQ(r.minions, (V{"db1", "db2", "web1"}));
  EXPECT_EQ(fx.calls, 0);  // id-only atoms never fetch facts
}

TEST(CheckMinions, Nodegroup) {
  fixture fx;
  std::map<std::string, std::string> groups = {{"webs", "web*"}, {"dbs", "db1 db2"}, {"mix", "N@dbs or G@os:Debian"}};
  auto r = check_minions(value("webs"), "nodegroup", fx.ids, fx.facts(), false, ':', &groups);
  EXPECT_EQ(r.minions, (V{"web1", "web2"}));
  r = check_minions(value("dbs"), "nodegroup", fx.ids, fx.facts(), false, ':', &groups);
  EXPECT_EQ(r.minions, (V{"db1", "db2"}));
  r = check_minions(value("N@mix"), "compound", fx.ids, fx.facts(), false, ':', &groups);
  EXPECT_EQ(r.minions, (V{"db1", "db2", "web1", "web2"}));
  r = check_minions(value("ghost"), "nodegroup", fx.ids, fx.facts(), false, ':', &groups);
  EXPECT_TRUE(r.minions.empty());
}
