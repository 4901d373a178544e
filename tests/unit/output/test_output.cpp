// Unit tests for sylvite::output: golden strings produced by Salt 3008's own outputters
// (tests/unit/output/gen_golden.py -> golden.json) plus binary/edge cases.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "core/config/config.hpp"
#include "core/output/output.hpp"

namespace {

using sylvite::wire::value;
namespace out = sylvite::output;

value load_golden() {
  std::ifstream f(std::string(SYLVITE_SOURCE_DIR) + "/tests/unit/output/golden.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return value::parse(ss.str());
}

out::options opts_of(const value& o) {
  out::options opt;
  if (o.contains("indent")) {
    opt.indent = o["indent"].get<int>();
    opt.indent_explicit = true;
  }
  if (o.contains("retcode")) opt.retcode = o["retcode"].get<int>();
  if (o.contains("color")) opt.color = o["color"].get<bool>();
  return opt;
}

TEST(Output, GoldenFromSalt) {
  value cases = load_golden();
  ASSERT_TRUE(cases.is_array());
  ASSERT_GT(cases.size(), 50u);
  int checked = 0;
  int yaml_text_diffs = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>() + "/" + c["outputter"].get<std::string>();
    const std::string outputter = c["outputter"].get<std::string>();
    const std::string expected = c["expected"].get<std::string>();
    std::string got = out::display(outputter, c["data"], opts_of(c["opts"]));
    if (outputter == "yaml") {
      // yaml text comes from core/config's emitter: compare what it means, not its quoting.
      auto e = sylvite::config::parse_yaml(expected);
      auto g = sylvite::config::parse_yaml(got);
      EXPECT_TRUE(e.has_value()) << name;
      EXPECT_TRUE(g.has_value()) << name << "\n" << got;
      if (e.has_value() && g.has_value()) {
        EXPECT_EQ(*g, *e) << name << "\nexpected:\n" << expected << "got:\n" << got;
      }
      if (got != expected) ++yaml_text_diffs;
    } else {
      EXPECT_EQ(got, expected) << name;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
  std::cout << "yaml cases whose text differs from PyYAML (same data): " << yaml_text_diffs << "\n";
}

TEST(Output, BinaryUtf8PrintsAsText) {
  value data = {{"m1", sylvite::wire::make_bin("hello")}};
  EXPECT_EQ(out::display("nested", data), "m1:\n    hello\n");
  EXPECT_EQ(out::render("json", data), "{\n    \"m1\": \"hello\"\n}");
}

TEST(Output, BinaryNotUtf8PrintsBytesRepr) {
  value data = {{"m1", sylvite::wire::make_bin(std::string("\xff\x00'a", 4))}};
  EXPECT_EQ(out::display("nested", data), "m1:\n    b\"\\xff\\x00'a\"\n");
  EXPECT_EQ(out::render("json", data, {.indent = -1}), "{\"m1\": \"b\\\"\\\\xff\\\\x00'a\\\"\"}");
  EXPECT_EQ(out::render("raw", data), "{'m1': b\"\\xff\\x00'a\"}");
}

TEST(Output, QuietPrintsNothing) {
  EXPECT_EQ(out::display("quiet", value{{"m1", true}}), "");
  EXPECT_TRUE(out::known("quiet"));
  EXPECT_TRUE(out::known("highstate"));
  EXPECT_FALSE(out::known("no_such_outputter"));
}

TEST(Output, UnknownFallsBackToNested) {
  EXPECT_EQ(out::display("no_such_outputter", value{{"m1", true}}), "m1:\n    True\n");
  // highstate on a return that is no state output: nested, as Salt's try_printout.
  EXPECT_EQ(out::display("highstate", value{{"m1", true}}), "m1:\n    True\n");
}

TEST(Output, NewlineValuesOnly) {
  value data = {{"m1", value::array({"a", "b"})}, {"m2", 3}, {"m3", "x"}};
  EXPECT_EQ(out::render("newline_values_only", data), "a\nb\n3\nx");
}

TEST(Output, FloatRepr) {
  EXPECT_EQ(out::py_float_repr(1.0), "1.0");
  EXPECT_EQ(out::py_float_repr(0.1), "0.1");
  EXPECT_EQ(out::py_float_repr(1e16), "1e+16");
  EXPECT_EQ(out::py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(out::py_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(out::py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(out::py_float_repr(-2.5), "-2.5");
  EXPECT_EQ(out::py_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(out::py_float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(out::py_float_repr(-0.0), "-0.0");
}

TEST(Output, TxtNonString) {
  value data = {{"m1", value{{"a", 1}}}, {"m2", "two\nlines"}};
  EXPECT_EQ(out::render("txt", data), "m1: {'a': 1}\nm2: two\nm2: lines\n");
}

TEST(Output, NestedIndentBase) {
  out::options o;
  o.nested_indent = 4;
  EXPECT_EQ(out::render("nested", value{{"k", "v"}}, o), "    ----------\n    k:\n        v");
}

}  // namespace
