// sylvite::master mine: Salt's mine store and its lookups, as Salt 3008.5
// salt/daemons/masterapi.py RemoteFuncs._mine, _mine_get, _mine_delete, _mine_flush and
// salt/utils/mine.py (minion-side ACL entries).
//
// Storage, byte-compatible with Salt's localfs cache (bank "mine", key = minion id):
//   <cachedir>/mine/<id>.p   msgpack as salt.payload.dump (use_bin_type=True), a map
//                            {function alias: data | {"__saltmine_acl__": 1, "__data__": data,
//                             "allow_tgt": ..., "allow_tgt_type": ...}}
// A Salt master pointed at the same cachedir reads sylvite's mine and the other way round.
// Every write is temp + fsync + rename (readers on any master see a whole file or the
// previous one); a read-modify-write (_mine update, _mine_delete) holds this process's
// mutex (one for every store of the process: fcntl locks do not exclude threads of one
// process) and an fcntl lock on <cachedir>/.mine.lock, so the masters of a cluster sharing
// cachedir never lose each other's updates of one minion's mine. Nothing is kept in
// memory: every lookup reads the files, so each master sees what any master stored.
// Stored only when minion_data_cache or enforce_mine_cache is true (Salt's rule);
// otherwise the requests are answered as Salt does and nothing is kept.
//
// Refusals (logged once per 10 s with the count): a load that is not a map, data that is
// not a map, an unparsable mine file (treated as empty, as a missing one).
// Thread-safety: every method from any thread; blocking disk I/O (call from workers).
#pragma once
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/util/rate_limit.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

class mine_store {
 public:
  struct options {
    std::filesystem::path cachedir;  // the master's cachedir (shared by a cluster)
    bool enabled = true;             // minion_data_cache || enforce_mine_cache
    // The master's `mine_get` option (Salt: {regex on the requesting id: [regex on the
    // function]}); null when the option is not set (everything allowed).
    wire::value mine_get_acl;
  };
  // CkMinions.check_minions(tgt, tgt_type, greedy)["minions"]: the accepted minions a
  // target selects (tgt_type already mapped: pillar -> pillar_exact, compound ->
  // compound_pillar_exact).
  using targeter = std::function<std::vector<std::string>(const wire::value& tgt, const std::string& tgt_type,
                                                          bool greedy)>;

  mine_store(options opt, targeter target);

  // The AES commands (load without tok/nonce; "id" is the requesting minion). Answers
  // are Salt's: {} when a required key is missing, else True/False or the lookup.
  wire::value handle_mine(const wire::value& load);    // _mine: id, data, clear
  wire::value handle_get(const wire::value& load);     // _mine_get: id, tgt, fun, tgt_type
  wire::value handle_delete(const wire::value& load);  // _mine_delete: id, fun
  wire::value handle_flush(const wire::value& load);   // _mine_flush: id

  // A lookup on behalf of `requester` (the minion-side ACLs are checked against it):
  // pillar Jinja's salt['mine.get'] (the minion the pillar is for) and the mine runner
  // (the master's own id). fun: a string (comma-separated) or a list.
  wire::value get(const std::string& requester, const wire::value& tgt, const wire::value& fun,
                  const std::string& tgt_type = "glob");

  // One minion's stored mine ({} when there is none or it is unreadable).
  wire::value fetch(const std::string& id);
  std::filesystem::path file_of(const std::string& id) const { return dir_ / (id + ".p"); }

 private:
  bool store(const std::string& id, const wire::value& data);
  void refuse(const std::string& what);

  options opt_;
  targeter target_;
  std::filesystem::path dir_;        // <cachedir>/mine
  std::filesystem::path lock_path_;  // <cachedir>/.mine.lock
  util::log_limiter refuse_log_;
};

}  // namespace sylvite::master
