// sylvite::cli argument handling shared by salt / salt-run: Salt's CLI argument typing
// (salt/utils/args.py yamlify_arg, parse_kwarg, parse_input, condition_input), target
// parsing (-L lists, compound functions) and nodegroup expansion
// (salt/utils/minions.py nodegroup_comp). Pure functions, no I/O. Thread-safety: none needed.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::cli {

// yaml.safe_load of one CLI argument with Salt's exceptions: "", "---", "..." stay text;
// digits with underscores stay text; args with \t \r \n stay text; a map/list result is
// kept only when the text starts with '{' / '['; "None" -> null; '#' args are typed only
// when they yield a non-string; "|" and "!" stay text. Plain scalars follow PyYAML's
// YAML 1.1 resolvers (yes/no/on/off booleans, 0x/0o/0b ints, "1.5", ".inf", "~").
wire::value yamlify_arg(const std::string& arg);

// Salt's KWARG_REGEX ^([^\d\W][\w.-]*)=(?!=)(.*)$ : {name, value} or nullopt.
std::optional<std::pair<std::string, std::string>> parse_kwarg(const std::string& arg);

struct parsed_input {
  wire::value args = wire::value::array();     // positional, typed
  wire::value kwargs = wire::value::object();  // name -> typed value (insertion order)
};
// parse_input(condition=False): kwargs named in no_parse keep their text.
parsed_input parse_input_split(const std::vector<std::string>& args, const std::set<std::string>& no_parse = {});
// parse_input(): positional args, 20-digit ints kept as text (jids), then one trailing
// {"__kwarg__": true, k: v...} map when there are kwargs.
wire::value parse_input(const std::vector<std::string>& args, const std::set<std::string>& no_parse = {});

// What `salt [opts] TARGET FUN [ARGS]` publishes.
struct salt_job {
  wire::value tgt;                 // string, or list for -L
  std::string tgt_type = "glob";
  wire::value fun;                 // string, or list for compound "f1,f2"
  wire::value arg = wire::value::array();  // list, or list of lists for compound
};
// positional = TARGET FUN ARGS... (at least 2 entries). list_target: -L given.
// Errors (Salt exit code 42): "Cannot execute compound command without defining all
// arguments." / "... with more arguments than commands."
struct salt_job_error {
  int exit_code;
  std::string message;
};
std::variant<salt_job, salt_job_error> make_salt_job(const std::vector<std::string>& positional, bool list_target,
                                                     const std::string& args_separator = ",",
                                                     const std::set<std::string>& no_parse = {});

// Nodegroup expansion to a compound expression ("( L@a,b or G@os:Debian )"); an unknown
// or recursive group -> nullopt. Words "N@x" inside compound targets are expanded too.
std::optional<std::string> expand_nodegroup(const std::string& name, const std::map<std::string, std::string>& groups);
// Resolve N@ words in a compound target. nullopt if a named group is unknown.
std::optional<std::string> expand_compound_nodegroups(const std::string& tgt,
                                                      const std::map<std::string, std::string>& groups);

// Python's str.split() (whitespace runs, no empties) and sorted(key=str.lower).
std::vector<std::string> split_ws(const std::string& s);
void sort_ignorecase(std::vector<std::string>& v);

}  // namespace sylvite::cli
