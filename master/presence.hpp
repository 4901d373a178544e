// sylvite::master presence table (salt-run sylvite.minions): per minion, the last time
// this master heard from it (a publish connection identified or closed, any
// authenticated request on the request port: _auth, _return, _pillar, _mine,
// _minion_event, ...), and, in a cluster, what every peer reported of its own: which
// minions hold a publish connection to it and when it last heard from each.
// Cost: seen() is one clock read by the caller, one of 16 shard mutexes and one hash-map
// lookup (an allocation only the first time an id is heard); no disk write, no event.
// Memory: about (id + 48 bytes) per id heard from since start (callers pass
// authenticated ids only: bounded by the accepted keys; prune() drops ids whose key is
// gone), plus the same per peer for what that peer reported.
// Cluster (master_core::maintenance, every 5 s): the ids heard from since the last tick
// go to the peers as a delta ("presence" peer message), the whole local table every
// 30 s and when a peer link comes up. A peer not heard from for stale_after (90 s) is
// counted as holding no connection; its last-seen times stay. Times are wall-clock
// milliseconds since the epoch (the masters' clocks are assumed in step, NTP).
// Thread-safety: every method is safe from any thread.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sylvite::master {

// One minion as one master reports it.
struct presence_item {
  std::string id;
  bool connected = false;   // holds a publish connection to that master
  std::int64_t last_ms = 0;  // last heard (ms since the epoch), 0: never
};
using presence_report = std::vector<presence_item>;

// One minion across the cluster (presence_table::view).
struct minion_presence {
  std::vector<std::string> masters;  // masters it holds a publish connection to (sorted)
  std::int64_t last_ms = 0;          // the latest last-seen over every master, 0: never
};

class presence_table {
 public:
  static constexpr std::int64_t k_stale_after_ms = 90'000;
  // track_changes: keep the set take_changes() returns (a cluster member); off, seen()
  // only updates the time.
  explicit presence_table(bool track_changes = false) : track_changes_(track_changes) {}

  // This master heard from id at now_ms (callers: authenticated ids only).
  void seen(const std::string& id, std::int64_t now_ms);
  // The local last-seen of id, 0 when never.
  std::int64_t last_seen(const std::string& id) const;
  // What changed since the last call (the ids heard from), each with connected(id);
  // clears the change set.
  presence_report take_changes(const std::function<bool(const std::string&)>& connected);
  // The whole local table plus the connected ids never heard from otherwise.
  presence_report snapshot(const std::vector<std::string>& connected_ids) const;
  // A peer's report: full replaces what that peer said before, a delta updates it.
  void apply_peer(const std::string& peer, bool full, const presence_report& r, std::int64_t now_ms);
  void forget_peer(const std::string& peer);
  // Keep only these ids (the accepted keys) locally and in the peers' reports.
  void prune(const std::set<std::string>& keep);
  // Local ids with a connection here are local_connected (the publish server's truth);
  // a peer's connected ids count while the peer was heard from within stale_after_ms.
  std::map<std::string, minion_presence> view(const std::string& self_id,
                                              const std::vector<std::string>& local_connected, std::int64_t now_ms,
                                              std::int64_t stale_after_ms = k_stale_after_ms) const;
  std::size_t size() const;  // local entries

 private:
  static constexpr std::size_t k_shards = 16;
  struct shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::int64_t> last;  // id -> last heard (ms)
    std::unordered_set<std::string> changed;
  };
  shard& shard_of(const std::string& id);
  const shard& shard_of(const std::string& id) const;
  const bool track_changes_;
  std::array<shard, k_shards> shards_;
  struct peer_report {
    std::int64_t heard_ms = 0;  // when its last report arrived
    std::unordered_map<std::string, presence_item> items;
  };
  mutable std::mutex peers_mu_;
  std::map<std::string, peer_report> peers_;
};

// "2026-11-27T20:40:42.123Z" (ISO 8601, UTC) for ms since the epoch.
std::string iso_utc_ms(std::int64_t ms);
// Wall-clock now in ms since the epoch.
std::int64_t wall_ms();

}  // namespace sylvite::master
