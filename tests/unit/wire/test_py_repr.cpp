// Unit tests for core/wire/py_repr.hpp: Python repr()/str() in the three caller styles,
// floats as CPython in every style.
#include <gtest/gtest.h>

#include "core/wire/py_repr.hpp"

namespace sylvite::wire {
namespace {

using strings = py_style::strings;

TEST(PyRepr, FloatPython) {
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(100.0), "100.0");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(21183886914793296.0), "2.1183886914793296e+16");
}

TEST(PyRepr, EveryStylePrintsFloatsAsPython) {
  // Salt str()s the value for the matchers and the eauth argument check too.
  for (const py_style& st : {py_style_output, py_style_match, py_style_acl}) {
    EXPECT_EQ(py_repr(value(100.0), st), "100.0");
    EXPECT_EQ(py_repr(value(2.0), st), "2.0");
    EXPECT_EQ(py_repr(value(1e15), st), "1000000000000000.0");
    EXPECT_EQ(py_repr(value(1.5e-5), st), "1.5e-05");
    EXPECT_EQ(py_repr(value(21183886914793296.0), st), "2.1183886914793296e+16");
    EXPECT_EQ(py_str(value(100.0), st), "100.0");
  }
}

TEST(PyRepr, StringEscapes) {
  EXPECT_EQ(py_str_repr("it's"), "\"it's\"");
  EXPECT_EQ(py_str_repr("a'\""), "'a\\'\"'");
  EXPECT_EQ(py_str_repr("a\\b\n"), "'a\\\\b\\n'");
  EXPECT_EQ(py_str_repr("\x01\xc2\xa0\xc3\xa9"), "'\\x01\\xa0\xc3\xa9'");
  EXPECT_EQ(py_str_repr("\x01\x7f\xc3\xa9", strings::ascii_controls), "'\\x01\\x7f\xc3\xa9'");
  EXPECT_EQ(py_str_repr("\x01\t", strings::minimal), "'\x01\\t'");
  EXPECT_EQ(py_bytes_repr("a\xff'"), "b\"a\\xff'\"");
}

TEST(PyRepr, ValuesPerStyle) {
  value v = value::parse(R"({"k": [1, true, null, 1.5, "s"]})");
  EXPECT_EQ(py_repr(v), "{'k': [1, True, None, 1.5, 's']}");
  EXPECT_EQ(py_str(v, py_style_acl), "{'k': [1, True, None, 1.5, 's']}");
  EXPECT_EQ(py_str(value("x")), "x");
  const value bin = make_bin("ab");
  EXPECT_EQ(py_repr(bin), "b'ab'");
  EXPECT_EQ(py_str(bin), "b'ab'");
  EXPECT_EQ(py_repr(bin, py_style_match), "'ab'");
  EXPECT_EQ(py_str(bin, py_style_match), "ab");
  const value ext = value::binary({1, 2}, 78);
  EXPECT_EQ(py_str(ext, py_style_match), std::string("\x01\x02"));
  EXPECT_EQ(py_str(ext, py_style_acl), "");
}

}  // namespace
}  // namespace sylvite::wire
