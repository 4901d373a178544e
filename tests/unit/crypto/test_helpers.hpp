// Shared helpers for the crypto unit tests: fixture paths, hex, file reading.
#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sylvite::crypto::test {

inline std::string source_path(std::string_view rel) {
  return std::string(SYLVITE_SOURCE_DIR) + "/" + std::string(rel);
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string key_file(std::string_view name) {
  return read_file(source_path("tests/fixtures/keys/" + std::string(name)));
}

inline std::string unhex(std::string_view h) {
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 0;
  };
  std::string out(h.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(nib(h[2 * i]) * 16 + nib(h[2 * i + 1]));
  return out;
}

inline const nlohmann::json& vectors() {
  static const nlohmann::json doc =
      nlohmann::json::parse(read_file(source_path("tests/fixtures/vectors/crypto.json")));
  return doc;
}

}  // namespace sylvite::crypto::test
