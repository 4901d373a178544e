// sylvite::wire Salt's function-list argument (mine.get's `fun`, a comma list or a list).
// Thread-safety: pure function.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::wire {

// Salt's function-list argument (mine.get's `fun`): "a,b" is split at commas, de-duplicated
// and sorted; a list is taken as given (its text items). keyed: the answer is keyed by
// function (more than one in a string, or any list). nullopt for anything else.
struct function_list_t {
  std::vector<std::string> functions;
  bool keyed = false;
};
std::optional<function_list_t> function_list(const value& fun);

}  // namespace sylvite::wire
