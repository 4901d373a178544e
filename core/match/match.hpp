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
//            and/or/not and parentheses; a bare word is a glob. R@ (range server) is
//            not available, as in a Salt without seco.range: the compound matches nothing.
//   grain/pillar values and patterns are compared lower-cased (Salt's subdict_match).
// Thread-safety: pure functions.
#pragma once
#include <functional>
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

// tgt_type: glob, pcre, list (ids only), grain, grain_pcre, pillar, pillar_pcre,
// pillar_exact, ipcidr (cached grains/pillar from facts_of), compound,
// compound_pillar_exact, nodegroup (tgt = group name, expanded from nodegroups).
// Data-needing checks include a minion whose data is unknown (nullptr) iff greedy.
// facts_of is called only when a target needs data. An invalid compound selects nobody.
check_result check_minions(const wire::value& tgt, std::string_view tgt_type,
                           const std::vector<std::string>& accepted_ids,
                           const std::function<minion_facts(const std::string&)>& facts_of, bool greedy = true,
                           char delimiter = ':', const std::map<std::string, std::string>* nodegroups = nullptr);

// pillar_exact: as data_match, but the value must equal (case-insensitively) the last part.
bool data_match_exact(const wire::value& data, std::string_view expr, char delimiter = ':');
// ipcidr on a grains map: tgt is an address (member of grains ipv4/ipv6) or a network in
// CIDR form with no host bits set (Python ipaddress strict); invalid tgt -> false.
bool ipcidr_match(const wire::value& grains, std::string_view tgt);
// salt.utils.minions.nodegroup_comp: the compound words a nodegroup expands to ({} if unknown).
std::vector<std::string> expand_nodegroup_words(const std::string& name,
                                                const std::map<std::string, std::string>& nodegroups);

}  // namespace sylvite::match
