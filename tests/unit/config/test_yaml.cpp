// Tests for parse_yaml()/to_yaml(): scalar typing as Salt's loader (PyYAML SafeLoader +
// Salt's leading-zero quirk), checked against salt.utils.yaml.safe_load in Salt 3008.5.
#include <gtest/gtest.h>

#include <cmath>

#include "core/config/config.hpp"

using sylvite::config::parse_yaml;
using sylvite::config::to_yaml;
using sylvite::wire::value;

namespace {

value scalar(const std::string& text) {
  auto r = parse_yaml("k: " + text + "\n");
  EXPECT_TRUE(r.has_value()) << text << ": " << (r ? "" : r.error());
  if (!r) return value("<error>");
  return (*r)["k"];
}

struct typing_case {
  const char* text;
  value expected;
};

}  // namespace

TEST(Yaml, ScalarTypingTable) {
  // Expected values are what `salt.utils.yaml.safe_load("k: " + text)` returns.
  const typing_case cases[] = {
      {"0x1F", 31},          {"0x1f", 31},        {"+0x10", 16},        {"0x_1", 1},
      {"017", 17},           {"0755", 755},       {"00", 0},            {"0", 0},
      {"-0", 0},             {"-12", -12},        {"+5", 5},            {"1_000", 1000},
      {"1__0", 10},          {"-1_0", -10},       {"0b101", 5},         {"-0b11", -3},
      {"1:30", 90},          {"-1:30", -90},      {"190:20:30", 685230}, {"12 # comment", 12},
      {"0o17", "0o17"},      {"09", "09"},        {"0x", "0x"},         {"0b", "0b"},
      {"0b2", "0b2"},        {"1:60", "1:60"},    {"_1", "_1"},         {"1,000", "1,000"},
      {"1e3", "1e3"},        {"1.0e3", "1.0e3"},  {"0.1.2", "0.1.2"},   {"10.0.0.1:4506", "10.0.0.1:4506"},
      {"yEs", "yEs"},        {"y", "y"},          {"n", "n"},           {"tRUE", "tRUE"},
      {"nUll", "nUll"},      {"2024-01-01", "2024-01-01"},              {"+", "+"},
      {".", "."},            {"_.5", "_.5"},      {"'123'", "123"},     {"\"yes\"", "yes"},
      {"!!str 12", "12"},    {"!!int \"12\"", 12}, {"\"a\\nb\"", "a\nb"}, {"'0x10'", "0x10"},
      {"yes", true},         {"Yes", true},       {"YES", true},        {"on", true},
      {"On", true},          {"ON", true},        {"true", true},       {"True", true},
      {"TRUE", true},        {"no", false},       {"No", false},        {"NO", false},
      {"off", false},        {"Off", false},      {"OFF", false},       {"false", false},
      {"False", false},      {"FALSE", false},    {"null", nullptr},    {"Null", nullptr},
      {"NULL", nullptr},     {"~", nullptr},      {"", nullptr},
      {"1.5", 1.5},          {"1.0e+3", 1000.0},  {".5", 0.5},          {"1.", 1.0},
      {"3.", 3.0},           {"08.5", 8.5},       {"1:30.5", 90.5},     {"-1.5e-3", -0.0015},
      {"1.5E+3", 1500.0},    {"1_0.5", 10.5},     {"1.5_", 1.5},
  };
  for (const auto& c : cases) {
    value got = scalar(c.text);
    EXPECT_EQ(got, c.expected) << "'" << c.text << "' -> " << got.dump() << " (type " << got.type_name() << ")";
    EXPECT_EQ(got.type_name(), std::string(c.expected.type_name())) << c.text;
  }
}

TEST(Yaml, InfAndNan) {
  EXPECT_TRUE(std::isinf(scalar(".inf").get<double>()));
  EXPECT_GT(scalar("+.inf").get<double>(), 0);
  EXPECT_LT(scalar("-.inf").get<double>(), 0);
  EXPECT_TRUE(std::isnan(scalar(".nan").get<double>()));
  EXPECT_TRUE(std::isnan(scalar(".NaN").get<double>()));
  EXPECT_EQ(scalar("-.5"), value("-.5"));  // PyYAML: a sign before ".5" is not a float
}

TEST(Yaml, BlockScalarsAreStrings) {
  auto r = parse_yaml("a: |\n  123\nb: >\n  yes\n");
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["a"], value("123\n"));
  EXPECT_EQ((*r)["b"], value("yes\n"));
}

TEST(Yaml, Structure) {
  auto r = parse_yaml(
      "file_roots:\n"
      "  base:\n"
      "    - /srv/salt\n"
      "  dev: [/srv/dev, /srv/x]\n"
      "master:\n"
      "- a\n"
      "- b:4506\n"
      "1: int key\n"
      "yes: bool key\n"
      "~: null key\n"
      "empty_map: {}\n"
      "empty_list: []\n");
  ASSERT_TRUE(r) << r.error();
  const value& v = *r;
  EXPECT_EQ(v["file_roots"]["base"], value::array({"/srv/salt"}));
  EXPECT_EQ(v["file_roots"]["dev"], value::array({"/srv/dev", "/srv/x"}));
  EXPECT_EQ(v["master"], value::array({"a", "b:4506"}));
  EXPECT_EQ(v["1"], value("int key"));
  EXPECT_EQ(v["True"], value("bool key"));  // Python str(True)
  EXPECT_EQ(v["None"], value("null key"));
  EXPECT_TRUE(v["empty_map"].is_object());
  EXPECT_TRUE(v["empty_list"].is_array());
  // Insertion order is kept.
  EXPECT_EQ(v.begin().key(), "file_roots");
}

TEST(Yaml, AnchorsAliasesAndMergeKeys) {
  auto r = parse_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ((*r)["other"]["x"], value(1));
  EXPECT_EQ((*r)["other"]["y"], value(3));
}

TEST(Yaml, EmptyDocumentIsNull) {
  auto r = parse_yaml("");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->is_null());
  r = parse_yaml("# only a comment\n");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->is_null());
}

TEST(Yaml, ErrorsCarryLineAndColumn) {
  auto r = parse_yaml("a: 1\nb: c: d\n");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("line 2, column 5"), std::string::npos) << r.error();

  r = parse_yaml("a: [1, 2\n");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("line "), std::string::npos) << r.error();

  r = parse_yaml("a: 1\nb: 2\na: 3\n");  // Salt refuses duplicate keys
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "line 3, column 1: found conflicting ID 'a'");

  r = parse_yaml("--- a\n--- b\n");
  ASSERT_FALSE(r);

  r = parse_yaml("k: !!int abc\n");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("line 1, column 4"), std::string::npos) << r.error();

  r = parse_yaml("? [a, b]\n: v\n");
  ASSERT_FALSE(r);
}

TEST(Yaml, AliasBombIsRefused) {
  std::string doc = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'j'; ++c) {
    doc += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) doc += std::string(i ? ", *" : "*") + prev;
    doc += "]\n";
    prev = c;
  }
  auto r = parse_yaml(doc);
  EXPECT_FALSE(r);
}

TEST(Yaml, ToYamlScalarsAndQuoting) {
  EXPECT_EQ(to_yaml(value("plain")), "plain\n");
  EXPECT_EQ(to_yaml(value(42)), "42\n");
  EXPECT_EQ(to_yaml(value(true)), "true\n");
  EXPECT_EQ(to_yaml(value(nullptr)), "null\n");
  EXPECT_EQ(to_yaml(value(1.5)), "1.5\n");
  EXPECT_EQ(to_yaml(value(1e16)), "1.0e+16\n");
  EXPECT_EQ(to_yaml(value(1.0)), "1.0\n");
  // Strings PyYAML would retype are quoted: single quotes as PyYAML when printable ASCII
  // on one line, double quotes with escapes otherwise.
  for (const char* s : {"yes", "no", "on", "off", "true", "null", "~", "", "123", "0755", "1.5", "0x10", "1:30",
                        "-a", "a: b", "# c", "x #c", "[a]", "{a}", "*a", "&a", "!a", " lead", "trail ",
                        "20261127135736123456", "99999999999999999999999"}) {
    std::string out = to_yaml(value(s));
    EXPECT_EQ(out.front(), '\'') << s << " -> " << out;
  }
  EXPECT_EQ(to_yaml(value("it's")), "it's\n");
  EXPECT_EQ(to_yaml(value("'q' 1")), "'''q'' 1'\n");
  EXPECT_EQ(to_yaml(value("a\nb")).front(), '"');
  EXPECT_EQ(to_yaml(value("a\"b\\c\n")), "\"a\\\"b\\\\c\\n\"\n");
}

TEST(Yaml, ToYamlBlockStyle) {
  value v = value::object();
  v["minion1"] = value::object({{"os", "Debian"}, {"ipv4", value::array({"10.0.0.1", "127.0.0.1"})}});
  v["list"] = value::array({value::object({{"a", 1}, {"b", value::array({1, 2})}}), value::array({"x"}), "y"});
  v["empty"] = value::object();
  v["none"] = nullptr;
  EXPECT_EQ(to_yaml(v),
            "minion1:\n"
            "  os: Debian\n"
            "  ipv4:\n"
            "  - 10.0.0.1\n"
            "  - 127.0.0.1\n"
            "list:\n"
            "- a: 1\n"
            "  b:\n"
            "  - 1\n"
            "  - 2\n"
            "-\n"
            "  - x\n"
            "- y\n"
            "empty: {}\n"
            "none: null\n");
}

TEST(Yaml, ToYamlRoundTrips) {
  value v = value::object();
  v["strings"] = value::array({"yes", "0755", "1e3", "plain", "with space", "a: b", "", "\t", "é", "-", "?", "x,y"});
  v["nums"] = value::array({0, -1, 123456789012LL, 0.1, -2.5e-7, 1e100});
  v["bools"] = value::array({true, false});
  v["nested"] = value::object({{"a", value::object({{"b", value::array({value::object({{"c", nullptr}})})}})}});
  v["weird key: #"] = 1;
  v["123"] = "numeric key stays a string key";
  auto back = parse_yaml(to_yaml(v));
  ASSERT_TRUE(back) << back.error() << "\n" << to_yaml(v);
  EXPECT_EQ(*back, v) << to_yaml(v);
}
