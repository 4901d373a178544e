// sylvite::config internal helpers shared by yaml.cpp and config.cpp (not installed,
// not part of the contract). Thread-safety: pure functions.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "core/wire/value.hpp"

namespace sylvite::config::detail {

// Resolve a plain (unquoted, untagged) YAML scalar the way Salt's YAML loader does
// (PyYAML 1.1 implicit resolvers + Salt's "leading zeros are decimal" quirk).
wire::value resolve_plain_scalar(std::string_view s);

// Python's repr(float) (shortest round-trip, "1e+16", "1.5e-05", "inf", "nan").
std::string python_float_repr(double d);

// Python's str() of a scalar value: True/False/None, ints, floats; strings as is.
std::string python_str(const wire::value& v);

// Bytes of a string or binary value (does not need wire's .cpp).
std::optional<std::string_view> bytes_of(const wire::value& v);

}  // namespace sylvite::config::detail
