// wire::parse_int (parse_int.hpp). Pure function.
#include "core/wire/parse_int.hpp"

#include <exception>
#include <string>

namespace sylvite::wire {

std::optional<std::int64_t> parse_int(const value& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>();
  if (auto t = as_text(v)) {
    try {
      std::size_t used = 0;
      auto n = std::stoll(std::string(*t), &used);
      if (used == t->size()) return n;
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

}  // namespace sylvite::wire
