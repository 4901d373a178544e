// highstate_probe: the differential test's window into sylvite::output (test only).
// stdin: one JSON document per line, {"out": name, "data": ..., "opts": {...}}; stdout: for
// each, the length-prefixed ("<bytes>\n") text output::display() prints for it, exactly
// what the salt CLI writes for one minion's return. opts are Salt's names (color,
// state_output, state_verbose, state_output_diff, state_output_profile, state_output_pct,
// state_tabular, state_compress_ids, state_output_exclude, state_output_terse, arg, retcode).
#include <iostream>
#include <string>

#include "core/output/output.hpp"

namespace out = sylvite::output;
using sylvite::wire::value;

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    value c = value::parse(line, nullptr, false);
    if (c.is_discarded()) return 2;
    out::options o;
    const value& op = c["opts"];
    auto b = [&](const char* k, bool& dst) {
      if (op.contains(k)) dst = op[k].get<bool>();
    };
    b("color", o.color);
    b("state_verbose", o.state_verbose);
    b("state_output_diff", o.state_output_diff);
    b("state_output_profile", o.state_output_profile);
    b("state_output_pct", o.state_output_pct);
    b("state_tabular", o.state_tabular);
    b("state_compress_ids", o.state_compress_ids);
    if (op.contains("state_output")) o.state_output = op["state_output"].get<std::string>();
    if (op.contains("state_output_exclude")) o.state_output_exclude = op["state_output_exclude"];
    if (op.contains("state_output_terse")) o.state_output_terse = op["state_output_terse"];
    if (op.contains("arg")) o.cli_arg = op["arg"];
    if (op.contains("retcode")) o.retcode = op["retcode"].get<int>();
    std::string text = out::display(c["out"].get<std::string>(), c["data"], o);
    std::cout << text.size() << "\n" << text << std::flush;
  }
  return 0;
}
