// sylvite::master internal helpers (not a public contract): Salt hash_type digests of
// strings and files (hashlib names: md5, sha1, sha224, sha256, sha384, sha512), and
// jid time helpers, path containment helpers. OpenSSL EVP, streaming for files.
// Thread-safety: pure functions.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace sylvite::master::detail {

// Lowercase hex digest; nullopt if hash_type is unknown.
std::optional<std::string> hex_digest(std::string_view data, std::string_view hash_type);
// Hex digest of a file's content read in 64 KiB pieces; nullopt if unreadable/unknown type.
std::optional<std::string> file_hex_digest(const std::filesystem::path& p, std::string_view hash_type);

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
