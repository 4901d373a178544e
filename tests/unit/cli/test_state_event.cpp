// salt-run state.event's line format (master/cli/state_event.hpp), pinned against
// Python 3.11: json.dumps(data, sort_keys=pretty, indent=4 if pretty else None,
// ensure_ascii=False, default=_json_safe).
#include <gtest/gtest.h>

#include "master/cli/state_event.hpp"

using sylvite::wire::value;
using sylvite::cli::state_event_line;

TEST(StateEvent, one_line_keeps_insertion_order) {
  value d = value::object();
  d["b"] = 1;
  d["a"] = value::array({true, nullptr, 1.5});
  d["_stamp"] = "2026-01-01T00:00:00.000001+00:00";
  // python: json.dumps({"b":1,"a":[True,None,1.5],"_stamp":"..."})
  EXPECT_EQ(state_event_line("my/tag", d, false),
            "my/tag\t{\"b\": 1, \"a\": [true, null, 1.5], \"_stamp\": \"2026-01-01T00:00:00.000001+00:00\"}");
}

TEST(StateEvent, pretty_sorts_and_indents) {
  value d = value::object();
  d["b"] = value{{"z", 1}, {"y", value::object()}};
  d["a"] = "é";
  // python: json.dumps(d, sort_keys=True, indent=4, ensure_ascii=False)
  EXPECT_EQ(state_event_line("t", d, true),
            "t\t{\n    \"a\": \"é\",\n    \"b\": {\n        \"y\": {},\n        \"z\": 1\n    }\n}");
}

TEST(StateEvent, bytes_utf8_as_text_else_base64) {
  value d = value::object();
  d["t"] = sylvite::wire::make_bin("ok");
  d["b"] = sylvite::wire::make_bin(std::string("\xff\x00\x01", 3));
  EXPECT_EQ(state_event_line("t", d, false), "t\t{\"t\": \"ok\", \"b\": \"/wAB\"}");
}

TEST(StateEvent, truthiness) {
  EXPECT_TRUE(sylvite::cli::py_truthy(value(true)));
  EXPECT_FALSE(sylvite::cli::py_truthy(value(0)));
  EXPECT_FALSE(sylvite::cli::py_truthy(value("")));
  EXPECT_TRUE(sylvite::cli::py_truthy(value("False")));  // a string, as Python
  EXPECT_FALSE(sylvite::cli::py_truthy(value::array()));
}
