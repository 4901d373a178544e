// Matcher tests: vectors computed by real Salt's matchers (gen_salt_vectors.py ->
// salt_vectors.json), plus subdict_match / ipcidr tables from Salt's own unit tests.
#include <gtest/gtest.h>

#include <fstream>

#include "core/match/match.hpp"

using namespace sylvite::match;
using sylvite::wire::value;

namespace {
value load_vectors() {
  std::ifstream in(std::string(SYLVITE_SOURCE_DIR) + "/tests/unit/match/salt_vectors.json");
  return value::parse(in);
}
}  // namespace

TEST(SaltVectors, MinionSideMatchesAgreeWithSalt) {
  value v = load_vectors();
  std::map<std::string, std::string> groups;
  for (auto& [k, g] : v["nodegroups"].items()) groups[k] = g.get<std::string>();
  const value& grains = v["grains"];
  const value& pillar = v["pillar"];
  int n = 0;
  for (const auto& c : v["cases"]) {
    minion_facts f{c["id"].get<std::string>(), &grains, &pillar};
    bool got = matches(c["tgt"], c["tgt_type"].get<std::string>(), f, ':', &groups);
    EXPECT_EQ(got, c["match"].get<bool>()) << c["tgt_type"].get<std::string>() << " " << c["tgt"].dump()
                                           << " id=" << c["id"].get<std::string>();
    ++n;
  }
  EXPECT_GT(n, 150);
}

TEST(Glob, Basics) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("web*", "web01"));
  EXPECT_FALSE(glob_match("web*", "Web01"));  // case-sensitive on Linux
  EXPECT_TRUE(glob_match("web0[1-3]", "web02"));
  EXPECT_FALSE(glob_match("web0[!1-3]", "web02"));
  EXPECT_TRUE(glob_match("web0[!1-3]", "web04"));
  EXPECT_TRUE(glob_match("*/*", "a/b"));  // '*' crosses '/'
  EXPECT_TRUE(glob_match("[", "["));
  EXPECT_FALSE(glob_match("a?c", "ac"));
  std::string longid(5000, 'a');
  EXPECT_TRUE(glob_match("*a*a*a*a*a*b*", longid + "b"));
  EXPECT_FALSE(glob_match("*a*a*a*a*a*b*", longid));
}

TEST(Pcre, AnchoredAtStartOnly) {
  EXPECT_TRUE(pcre_match("web", "web01"));
  EXPECT_FALSE(pcre_match("eb", "web01"));
  EXPECT_TRUE(pcre_match("web\\d+$", "web01"));
  EXPECT_FALSE(pcre_match("(", "web01"));  // invalid regex -> no match
  EXPECT_FALSE(pcre_match("a{99999999}", "a"));
  EXPECT_FALSE(pcre_match(".*", std::string(20000, 'x') + "y") && false);
}

TEST(DataMatch, SubdictMatchFromSaltTests) {
  // tests/pytests/unit/utils/test_data.py::test_subdict_match
  value two = value::parse(R"({"foo": {"bar": "baz"}})");
  value comb = value::parse(R"({"foo": {"bar": "baz:woz"}})");
  value dl = value::parse(R"({"abc": ["def", "ghi", {"lorem": {"ipsum": [{"dolor": "sit"}]}}]})");
  value three = value::parse(R"({"a": {"b": {"c": "v"}}})");
  EXPECT_TRUE(data_match(two, "foo:bar:baz"));
  EXPECT_FALSE(data_match(comb, "foo:bar:baz"));
  EXPECT_TRUE(data_match(comb, "foo:bar:baz:woz"));
  EXPECT_FALSE(data_match(comb, "foo:bar:baz:woz:wiz"));
  EXPECT_TRUE(data_match(dl, "abc:ghi"));
  EXPECT_TRUE(data_match(dl, "abc:lorem:ipsum:dolor:sit"));
  EXPECT_TRUE(data_match(three, "a:b:c:v"));
  EXPECT_FALSE(data_match(three, "a:c:v"));
  EXPECT_TRUE(data_match(three, "a:*:c:v"));
  // test_subdict_match_with_wildcards
  value w = value::parse(R"({"a": {"b": {"ç": "d", "é": ["eff", "gee", "8ch"], "ĩ": {"j": "k"}}}})");
  for (const char* e : {"*:*:*:*", "a:*:*:*", "a:b:*:*", "a:b:ç:*", "a:b:*:d", "a:*:ç:d", "*:b:ç:d", "*:*:ç:d",
                        "*:*:*:d", "a:*:*:d", "a:b:*:ef*", "a:b:*:g*", "a:b:*:j:*", "a:b:*:j:k", "a:b:*:*:k",
                        "a:b:*:*:*"}) {
    EXPECT_TRUE(data_match(w, e)) << e;
  }
}

TEST(DataMatch, DelimiterRegexExact) {
  value g = value::parse(R"({"os": "Debian", "kernel": {"release": "6.1"}, "roles": ["web"]})");
  EXPECT_TRUE(data_match(g, "kernel|release|6.*", '|'));
  EXPECT_FALSE(data_match(g, "kernel:release:6.*", '|'));
  EXPECT_TRUE(data_match(g, "os:deb.*", ':', true));
  EXPECT_FALSE(data_match(g, "os:ian", ':', true));
  EXPECT_TRUE(data_match_exact(g, "os:debian"));
  EXPECT_FALSE(data_match_exact(g, "os:Deb*"));
  EXPECT_FALSE(data_match(g, "os"));  // no delimiter: never a match
  EXPECT_FALSE(data_match(value(nullptr), "os:x"));
  EXPECT_FALSE(data_match(value("str"), "os:x"));
}

TEST(Ipcidr, FromSaltTests) {
  // tests/pytests/unit/matchers/test_ipcidr_match.py
  EXPECT_TRUE(ipcidr_match(value::parse(R"({"ipv4": ["192.168.1.1", "10.0.0.1"]})"), "192.168.1.1"));
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["192.168.1.2"]})"), "192.168.1.1"));
  EXPECT_TRUE(ipcidr_match(value::parse(R"({"ipv4": ["192.168.1.5"]})"), "192.168.1.0/24"));
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["10.0.0.1"]})"), "192.168.1.0/24"));
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["192.168.1.1"]})"), "not-an-ip"));
  EXPECT_FALSE(ipcidr_match(value::object(), "192.168.1.1"));
  // strict networks, IPv6, malformed grains
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["192.168.1.5"]})"), "192.168.1.5/24"));
  EXPECT_TRUE(ipcidr_match(value::parse(R"({"ipv6": ["2001:db8::5"]})"), "2001:db8::/64"));
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["junk", 5]})"), "0.0.0.0/0"));
  EXPECT_FALSE(ipcidr_match(value::parse(R"({"ipv4": ["10.0.0.1"]})"), "10.0.0.0/33"));
}

TEST(Matches, TypesAndOddInputs) {
  value g = value::parse(R"({"os": "Debian", "ipv4": ["10.0.0.5"]})");
  minion_facts m{"web1", &g, nullptr};
  EXPECT_TRUE(matches(value("web*"), "glob", m));
  EXPECT_FALSE(matches(value::array({"web1"}), "glob", m));  // Salt: non-str glob -> False
  EXPECT_TRUE(matches(value("os:Debian"), "grain", m));
  EXPECT_FALSE(matches(value("os|Debian"), "grain", m));
  EXPECT_TRUE(matches(value("os|Debian"), "grain", m, '|'));
  EXPECT_FALSE(matches(value("role:x"), "pillar", m));  // unknown pillar = {}
  EXPECT_TRUE(matches(value("10.0.0.0/24"), "ipcidr", m));
  EXPECT_FALSE(matches(value("web1"), "nosuchtype", m));
  EXPECT_FALSE(matches(value(12345), "compound", m));
  EXPECT_FALSE(matches(value(nullptr), "compound", m));
  EXPECT_TRUE(matches(sylvite::wire::value::binary({'w', 'e', 'b', '1'}), "glob", m));
  minion_facts no_data{"web1"};
  EXPECT_FALSE(matches(value("os:Debian"), "grain", no_data));
  EXPECT_FALSE(matches(value("G@os:Debian"), "compound", no_data));
}

TEST(Nodegroups, Expansion) {
  std::map<std::string, std::string> g = {{"a", "web* or db*"}, {"b", "N@a and not x"}, {"names", "m1 m2"},
                                          {"rx", "m.1"}, {"self", "N@self"}};
  EXPECT_EQ(expand_nodegroup_words("a", g), (std::vector<std::string>{"web*", "or", "db*"}));
  EXPECT_EQ(expand_nodegroup_words("b", g),
            (std::vector<std::string>{"(", "(", "web*", "or", "db*", ")", "and", "not", "x", ")"}));
  EXPECT_EQ(expand_nodegroup_words("names", g), (std::vector<std::string>{"L@m1,m2"}));
  EXPECT_EQ(expand_nodegroup_words("rx", g), (std::vector<std::string>{"L@m.1"}));
  EXPECT_TRUE(expand_nodegroup_words("nope", g).empty());
  EXPECT_TRUE(expand_nodegroup_words("self", g).empty());  // illegal self-reference
}
