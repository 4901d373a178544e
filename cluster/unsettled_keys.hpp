// sylvite::cluster unsettled keys: the key changes a local-copy master made (salt-key
// there, its auto-accepts) that a member on the share has not confirmed yet, kept in
// <cluster_pki_dir>/.sylvite-unsettled-keys so they survive a restart of that master
// (docs/cluster.md, "Adding a master (join)", the local copy).
//
//   {"accepted": ["id", ...],                         accepted here, not yet on the share
//    "pending": ["id", ...],                          pending here (a sign-in), not yet listed there
//    "revoked": {"id": {"act": "reject"|"delete",     rejected/deleted here, still accepted
//                       "rotate": true|false}, ...}}  on the share when last seen
//
// Writers: the master (its whole state, after each change) and salt-key when the master
// is not running (merge_unsettled, one change). Both write under an fcntl lock on
// .sylvite-unsettled-keys.lock, temp file + rename. A file that cannot be parsed is
// refused whole (an error), an entry with an invalid id or act is skipped.
// Thread-safety: free functions; the lock excludes processes, not threads.
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/util/result.hpp"

namespace sylvite::cluster {

constexpr const char* k_unsettled_keys_file = ".sylvite-unsettled-keys";
constexpr std::size_t k_unsettled_keys_max_bytes = 16u << 20;

struct unsettled_keys {
  struct revoke {
    std::string act;  // reject | delete
    bool rotate = true;
    bool operator==(const revoke&) const = default;
  };
  std::set<std::string> accepted;
  std::map<std::string, revoke> revoked;
  std::set<std::string> pending;
  bool empty() const noexcept { return accepted.empty() && revoked.empty() && pending.empty(); }
  bool operator==(const unsettled_keys&) const = default;
  // One change made here: an accept drops a revoke of the id and the other way round;
  // either ends a pending entry ("pend": a key went pending here).
  void note(const std::string& act, const std::string& id, bool rotate);
};

// The file's text and back. parse: errc::invalid_argument when not the shape above
// (skipped entries are counted in *skipped when given).
std::string to_text(const unsettled_keys& u);
result<unsettled_keys> parse_unsettled_keys(const std::string& text, std::size_t* skipped = nullptr);

// Read dir's file (missing: empty; unreadable, too large or unparsable: the error).
result<unsettled_keys> read_unsettled_keys(const std::filesystem::path& dir, std::size_t* skipped = nullptr);
// Replace dir's file with u (empty: the file is removed), under the lock.
result<void> write_unsettled_keys(const std::filesystem::path& dir, const unsettled_keys& u);
// salt-key on a local copy whose master could not be told: add act for ids to the file
// under the lock (an unparsable file is replaced). act: accept | reject | delete.
result<void> merge_unsettled(const std::filesystem::path& dir, const std::string& act,
                             const std::vector<std::string>& ids, bool rotate);

}  // namespace sylvite::cluster
