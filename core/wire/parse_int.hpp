// Integer from a wire value, as options and arguments arrive from YAML, JSON bodies and
// form fields (the REST API's options, the CLI service's arguments).
// Thread-safety: pure function.
#pragma once
#include <cstdint>
#include <optional>

#include "core/wire/value.hpp"

namespace sylvite::wire {

// A number (any msgpack int type) or text that is wholly a base-10 integer (std::stoll:
// leading whitespace and a sign accepted, out of range refused); nullopt otherwise
// (floats and bools too). An unsigned beyond int64 wraps, as get<int64_t> does.
std::optional<std::int64_t> parse_int(const value& v);

}  // namespace sylvite::wire
