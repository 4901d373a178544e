// sylvite::cli salt-run state.event (events part): the client side of the streaming
// runner (master/ipc_protocol.hpp "runner" fun state.event) and Salt's line format
// (salt/modules/state.py event, 3008.5):
//   print("{tag}\t{json}") with json = json.dumps(decode(data, keep=True),
//     sort_keys=pretty, indent=4 if pretty else None, ensure_ascii=False,
//     default=_json_safe)   (bytes that are not UTF-8: base64 text)
// The stream lasts until count events matched or the user interrupts salt-run.
// Thread-safety: pure functions / single-threaded CLI.
#pragma once
#include <string>

#include "core/wire/value.hpp"
#include "master/cli/common.hpp"

namespace sylvite::cli {

// One line as Salt's state.event prints it (no trailing newline).
std::string state_event_line(const std::string& tag, const wire::value& data, bool pretty);

// Python truthiness of a parsed CLI argument (True, 1, "x", [..]).
bool py_truthy(const wire::value& v);

// salt-run state.event: stream, print, return the exit code. args/kwargs as parsed.
int run_state_event(const config::master_config& cfg, const wire::value& args, const wire::value& kwargs,
                    const output_flags& of, cli_env& env);

}  // namespace sylvite::cli
