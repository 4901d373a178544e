// sylvite::master internal helpers (not a public contract): jid time helpers, log-safe
// text, path containment helpers. (Salt hash_type digests are core/crypto's hash_hex and
// file_hash_hex.)
// Thread-safety: pure functions.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace sylvite::master::detail {

// Microseconds since the Unix epoch (UTC) of a jid's first 20 digits; nullopt if not a jid.
std::optional<std::int64_t> jid_micros(std::string_view jid);
// Salt's jid_to_time: "2026, Nov 21 12:00:00.123456"; "" if not a jid.
std::string jid_to_time(std::string_view jid);

// Untrusted text made safe for a log line: non-printable bytes as \xNN, at most 200 bytes.
std::string printable(std::string_view s);

// realpath(3) of p; nullopt if it does not resolve (missing, dangling link...).
std::optional<std::string> real_path(const std::filesystem::path& p);
// True if the resolved path p_real is root_real or inside it.
bool is_under(const std::string& root_real, const std::string& p_real);

}  // namespace sylvite::master::detail
