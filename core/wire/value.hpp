// sylvite::wire value model: every Salt message is an nlohmann::ordered_json.
//   - maps keep insertion order (Salt builds maps in a fixed order; we keep it);
//   - byte strings are json binary (byte_container_with_subtype); a msgpack ext type
//     (Salt uses 78 = datetime, 79 = constant) is a binary with subtype = ext code;
//   - text is json string (always valid UTF-8; the decoder turns invalid UTF-8 text
//     into binary, as Salt's decode_embedded_strs does the other way round).
// Because Salt cannot tell str from bin reliably, readers MUST accept both for every
// "text" field: use as_text()/get_text() below, never v.get<std::string>() on input.
// Thread-safety: plain values.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sylvite::wire {

using value = nlohmann::ordered_json;

// A binary value holding these bytes (msgpack bin on the frame, raw str in a Salt payload).
value make_bin(std::string_view bytes);

// The bytes of a string or binary value; nullopt for any other type.
std::optional<std::string_view> as_bytes(const value& v);
// Same as as_bytes (name used where the field is "text" in Salt).
inline std::optional<std::string_view> as_text(const value& v) { return as_bytes(v); }

// Map lookup that accepts str or bin: nullopt if v is not a map, key missing, or not bytes.
std::optional<std::string_view> get_text(const value& map, std::string_view key);
// Map lookup returning a pointer to the member or nullptr (v not a map / key missing).
const value* find(const value& map, std::string_view key);
// Integer member (any msgpack int type; also bool false/true -> 0/1 is NOT accepted).
std::optional<std::int64_t> get_int(const value& map, std::string_view key);
// Bool member.
std::optional<bool> get_bool(const value& map, std::string_view key);

// Recursively turn binary values that are valid UTF-8 (and have no ext subtype) into
// strings, as Salt's decode_embedded_strs does. Used before printing or JSON output.
value decode_embedded_strs(const value& v);

// True if s is valid UTF-8.
bool is_utf8(std::string_view s);

}  // namespace sylvite::wire
