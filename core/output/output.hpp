// sylvite::output: Salt's outputters for CLI results: nested (default, colour off when
// not a tty or --no-color), json (indent 4, sorted keys as Salt's json_out with
// --out-indent), yaml, txt ("id: value" lines), raw (Python repr-like). Binary values
// that are valid UTF-8 print as text; others as base64 tagged "<bytes:...>".
// Thread-safety: pure functions.
#pragma once
#include <string>
#include <string_view>

#include "core/wire/value.hpp"

namespace sylvite::output {

struct options {
  bool color = false;
  int indent = 4;  // json indent (--out-indent)
};

// Names: "nested", "json", "yaml", "txt", "raw", "newline_values_only", "quiet".
bool known(std::string_view name);
// Render data as the named outputter would for `salt` (data is usually {id: ret}).
std::string render(std::string_view outputter, const wire::value& data, const options& opt = {});

}  // namespace sylvite::output
