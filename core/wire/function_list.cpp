// sylvite::wire function_list (function_list.hpp).
#include "core/wire/function_list.hpp"

#include <set>

namespace sylvite::wire {

std::optional<function_list_t> function_list(const value& fun) {
  if (auto s = as_text(fun)) {
    std::set<std::string> uniq;
    std::size_t pos = 0;
    for (;;) {
      auto c = s->find(',', pos);
      uniq.emplace(s->substr(pos, c == std::string_view::npos ? std::string_view::npos : c - pos));
      if (c == std::string_view::npos) break;
      pos = c + 1;
    }
    function_list_t out{{uniq.begin(), uniq.end()}, false};
    out.keyed = out.functions.size() > 1;
    return out;
  }
  if (fun.is_array()) {
    function_list_t out{{}, true};
    for (const auto& f : fun)
      if (auto t = as_text(f)) out.functions.emplace_back(*t);
    return out;
  }
  return std::nullopt;
}

}  // namespace sylvite::wire
