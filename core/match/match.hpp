// sylvite::match: Salt's target matchers, shared by the master (which minions to expect,
// topic filtering) and the minion (does this publish target me?).
//   glob     fnmatch on the id (*, ?, [seq], [!seq]); case-sensitive
//   pcre     Python re.match semantics: anchored at the start only (ECMAScript regex)
//   list     list of ids, or a comma-separated string
//   grain    "key:sub:value" glob against the nested grains (delimiter default ':');
//            lists in grains match if any element matches
//   grain_pcre  as grain, regex value
//   pillar   as grain, against pillar
//   ipcidr   id's ipv4 grain in a CIDR
//   compound "G@os:Debian and web* or not L@a,b" with G@ E@ P@ L@ I@ J@ S@ N@ R@,
//            and/or/not and parentheses; a bare word is a glob
// Thread-safety: pure functions.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::match {

// What is known about a minion when matching. grains/pillar may be null (unknown).
struct minion_facts {
  std::string id;
  const wire::value* grains = nullptr;
  const wire::value* pillar = nullptr;
};

bool glob_match(std::string_view pattern, std::string_view text);
bool pcre_match(std::string_view pattern, std::string_view text);  // invalid regex -> false
// grain-style "path:value" match of expr against data (delimiter between path parts).
bool data_match(const wire::value& data, std::string_view expr, char delimiter = ':', bool regex = false);

// Does tgt (string, or list for tgt_type list) with tgt_type select this minion?
// Unknown tgt_type -> false. nodegroups expand N@ in compound.
bool matches(const wire::value& tgt, std::string_view tgt_type, const minion_facts& m,
             char delimiter = ':', const std::map<std::string, std::string>* nodegroups = nullptr);

// Master side (CkMinions): which of `ids` the target selects. For types that need data
// (grain, pillar, compound with G@/P@/I@...), a minion without cached data is included
// ("greedy") only when greedy is true. facts_of returns nullptr-data facts if unknown.
struct check_result {
  std::vector<std::string> minions;  // sorted
  bool needs_broadcast = false;      // true unless tgt_type is glob/pcre/list (topic filter)
};

}  // namespace sylvite::match
