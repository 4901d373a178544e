// Test helpers for core/wire: hex <-> bytes.
#pragma once
#include <cctype>
#include <string>
#include <string_view>

namespace sylvite::wire::test {

// Bytes from hex; spaces, newlines and '|' separators are ignored.
inline std::string unhex(std::string_view h) {
  std::string out;
  int hi = -1;
  for (char c : h) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<char>(hi * 16 + v));
      hi = -1;
    }
  }
  return out;
}

inline std::string hex(std::string_view b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  out.reserve(b.size() * 2);
  for (unsigned char c : b) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

}  // namespace sylvite::wire::test
