// Jid-time, log-text and path helpers for the master services (see detail.hpp).
#include "master/detail.hpp"

#include <cstdlib>
#include <ctime>

namespace sylvite::master::detail {

namespace {
struct jid_parts {
  int year, mon, day, hour, min, sec, usec;
};

std::optional<jid_parts> parse_jid(std::string_view jid) {
  // Salt's is_jid: exactly 20 digits, or 20 digits + '_' + suffix (unique_jid).
  if (jid.size() < 20 || (jid.size() != 20 && (jid.size() <= 21 || jid[20] != '_'))) return std::nullopt;
  for (std::size_t i = 0; i < 20; ++i)
    if (jid[i] < '0' || jid[i] > '9') return std::nullopt;
  auto num = [&](std::size_t pos, std::size_t len) {
    int v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) v = v * 10 + (jid[i] - '0');
    return v;
  };
  jid_parts p{num(0, 4), num(4, 2), num(6, 2), num(8, 2), num(10, 2), num(12, 2), num(14, 6)};
  if (p.mon < 1 || p.mon > 12 || p.day < 1 || p.day > 31 || p.hour > 23 || p.min > 59 || p.sec > 60)
    return std::nullopt;
  return p;
}
}  // namespace

std::optional<std::int64_t> jid_micros(std::string_view jid) {
  auto p = parse_jid(jid);
  if (!p) return std::nullopt;
  std::tm tm{};
  tm.tm_year = p->year - 1900;
  tm.tm_mon = p->mon - 1;
  tm.tm_mday = p->day;
  tm.tm_hour = p->hour;
  tm.tm_min = p->min;
  tm.tm_sec = p->sec;
  std::time_t t = ::timegm(&tm);
  return static_cast<std::int64_t>(t) * 1000000 + p->usec;
}

std::string jid_to_time(std::string_view jid) {
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  auto p = parse_jid(jid);
  if (!p) return {};
  // "{year}, {Mon} {day} {hour}:{minute}:{second}.{micro}" with the jid's own digits.
  std::string out;
  out += std::string(jid.substr(0, 4)) + ", " + months[p->mon - 1] + " " + std::string(jid.substr(6, 2)) + " ";
  out += std::string(jid.substr(8, 2)) + ":" + std::string(jid.substr(10, 2)) + ":" + std::string(jid.substr(12, 2));
  out += "." + std::string(jid.substr(14, 6));
  return out;
}

std::string printable(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 200; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* d = "0123456789abcdef";
      out += "\\x";
      out.push_back(d[c >> 4]);
      out.push_back(d[c & 15]);
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

std::optional<std::string> real_path(const std::filesystem::path& p) {
  char* r = ::realpath(p.c_str(), nullptr);
  if (!r) return std::nullopt;
  std::string out(r);
  std::free(r);
  return out;
}

bool is_under(const std::string& root_real, const std::string& p_real) {
  if (p_real == root_real || root_real == "/") return true;
  return p_real.size() > root_real.size() && p_real.compare(0, root_real.size(), root_real) == 0 &&
         p_real[root_real.size()] == '/';
}

}  // namespace sylvite::master::detail
