// sylvite::output: Salt's outputters for CLI results (salt/output/*.py, 3008):
//   nested  (default) Salt's NestDisplay: maps sorted by key, "----------" before nested
//           maps, "- item" for list items, "|_" before containers in lists, Python
//           repr for numbers, True/False/None; ANSI colour only when options.color.
//   json    json_out: indent 4 by default, keys in insertion order (Salt prints the
//           return dict as received), ensure_ascii off; --out-indent N (negative ->
//           one line with ", " / ": " separators, as Python json.dumps(indent=None)).
//   yaml    yaml_out (keys sorted as PyYAML does; block style; negative indent -> flow).
//   txt     "key: line" per line of each top-level value.
//   raw     Python str() of the data (repr-like: {'id': True}).
//   newline_values_only, quiet (prints nothing), no_return (Salt's missing-minion view).
//   highstate (core/output/highstate.cpp) highstate.py: state returns per minion with the
//           summary block; full|terse|mixed|changes|filter (+ _id), state_verbose,
//           state_output_diff, state_output_profile, state_output_pct, state_tabular
//           (True only), state_compress_ids. Data highstate.py cannot format (where Python
//           raises) goes to nested, as Salt's try_printout does.
// Binary values that are valid UTF-8 print as text (wire::decode_embedded_strs); other
// binary prints as a Python bytes repr (b'\xff'), as Salt's json_out default=repr does.
// Thread-safety: pure functions.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::output {

struct options {
  bool color = false;
  int indent = 4;                // json/yaml indent (--out-indent); negative -> one line
  bool indent_explicit = false;  // --out-indent given (yaml: default indent 2 otherwise)
  int retcode = 0;               // nested: non-zero paints keys/lists red, as Salt's _retcode
  int nested_indent = 0;         // nested: base indent (Salt's nested_indent)
  // highstate (Salt's option names; defaults are the master's, salt/config DEFAULT_MASTER_OPTS)
  std::string state_output = "full";  // full|terse|mixed|changes|filter, each with an optional _id
  bool state_verbose = true;          // False: successful states without changes are hidden
  bool state_output_diff = false;     // --output-diff: only states that changed or failed
  bool state_output_profile = true;   // Started/Duration lines and "Total run time"
  bool state_output_pct = false;      // "Success %" / "Failure %" in the summary
  bool state_tabular = false;         // terse lines aligned (Salt's state_tabular: True)
  bool state_compress_ids = false;    // one line per ID for states with many names
  wire::value state_output_exclude = wire::value::array();  // filter mode (list or "a,b")
  wire::value state_output_terse = wire::value::array();    // filter mode
  wire::value cli_arg = wire::value::array();  // the job's args (filter: exclude=/terse= kwargs)
};

// Names: "nested", "json", "yaml", "txt" (alias "text"), "raw", "newline_values_only",
// "quiet", "no_return", "highstate".
bool known(std::string_view name);
// Render data as the named outputter returns it (no trailing newline is guaranteed;
// callers printing to a terminal use display()). Unknown names fall back to nested,
// as Salt's get_printout does.
std::string render(std::string_view outputter, const wire::value& data, const options& opt = {});
// What Salt's display_output prints: render() with trailing whitespace stripped plus
// "\n", or "" when there is nothing to print.
std::string display(std::string_view outputter, const wire::value& data, const options& opt = {});

// highstate.py's output(data) (data as Salt's CLI passes it: {minion: return}); nullopt
// where Salt's outputter raises (KeyError/TypeError/AttributeError: render() then uses
// nested, as try_printout does). Defined in core/output/highstate.cpp.
std::optional<std::string> render_highstate(const wire::value& data, const options& opt);

// Python helpers used by the outputters and the CLIs.
std::vector<std::string> py_splitlines(std::string_view s);  // str.splitlines()
std::string strip_esc(std::string s);                         // ESC -> '?' (strip_esc_sequence)
std::string py_repr(const wire::value& v);       // repr(): 'str', True, None, [1, 'a'], {'k': 1}
std::string py_str(const wire::value& v);        // str(): strings as-is, else repr
std::string py_float_repr(double d);             // repr(float): 1.0, 1e+16, 1.5e-05, inf, nan
// ANSI colours as salt.utils.color.get_colors(True) with the default theme.
namespace colors {
inline constexpr std::string_view red = "\x1b[0;31m";
inline constexpr std::string_view light_red = "\x1b[0;1;31m";
inline constexpr std::string_view green = "\x1b[0;32m";
inline constexpr std::string_view light_green = "\x1b[0;1;32m";
inline constexpr std::string_view yellow = "\x1b[0;33m";
inline constexpr std::string_view light_yellow = "\x1b[0;1;33m";
inline constexpr std::string_view blue = "\x1b[0;34m";
inline constexpr std::string_view light_blue = "\x1b[0;1;34m";
inline constexpr std::string_view magenta = "\x1b[0;35m";
inline constexpr std::string_view light_magenta = "\x1b[0;1;35m";
inline constexpr std::string_view cyan = "\x1b[0;36m";
inline constexpr std::string_view endc = "\x1b[0;0m";
}  // namespace colors

}  // namespace sylvite::output
