// sylvite::master presence table (presence.hpp).
#include "master/presence.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace sylvite::master {

presence_table::shard& presence_table::shard_of(const std::string& id) {
  return shards_[std::hash<std::string>{}(id) % k_shards];
}
const presence_table::shard& presence_table::shard_of(const std::string& id) const {
  return shards_[std::hash<std::string>{}(id) % k_shards];
}

void presence_table::seen(const std::string& id, std::int64_t now_ms) {
  if (id.empty()) return;
  auto& s = shard_of(id);
  std::lock_guard lk(s.mu);
  auto [it, fresh] = s.last.try_emplace(id, now_ms);
  if (!fresh && it->second < now_ms) it->second = now_ms;
  if (track_changes_) s.changed.insert(id);
}

std::int64_t presence_table::last_seen(const std::string& id) const {
  const auto& s = shard_of(id);
  std::lock_guard lk(s.mu);
  auto it = s.last.find(id);
  return it == s.last.end() ? 0 : it->second;
}

presence_report presence_table::take_changes(const std::function<bool(const std::string&)>& connected) {
  presence_report out;
  for (auto& s : shards_) {
    std::unordered_set<std::string> ids;
    {
      std::lock_guard lk(s.mu);
      ids.swap(s.changed);
      for (const auto& id : ids) {
        auto it = s.last.find(id);
        out.push_back({id, false, it == s.last.end() ? 0 : it->second});
      }
    }
  }
  // connected() may lock the publish server: outside the shard locks.
  if (connected)
    for (auto& i : out) i.connected = connected(i.id);
  return out;
}

presence_report presence_table::snapshot(const std::vector<std::string>& connected_ids) const {
  std::set<std::string> conn(connected_ids.begin(), connected_ids.end());
  presence_report out;
  for (const auto& s : shards_) {
    std::lock_guard lk(s.mu);
    for (const auto& [id, ms] : s.last) out.push_back({id, conn.erase(id) > 0, ms});
  }
  for (const auto& id : conn) out.push_back({id, true, 0});
  return out;
}

void presence_table::apply_peer(const std::string& peer, bool full, const presence_report& r, std::int64_t now_ms) {
  std::lock_guard lk(peers_mu_);
  auto& p = peers_[peer];
  p.heard_ms = now_ms;
  if (full) p.items.clear();
  for (const auto& i : r) {
    auto& e = p.items[i.id];
    e.id = i.id;
    e.connected = i.connected;
    e.last_ms = std::max(e.last_ms, i.last_ms);
  }
}

void presence_table::forget_peer(const std::string& peer) {
  std::lock_guard lk(peers_mu_);
  peers_.erase(peer);
}

void presence_table::prune(const std::set<std::string>& keep) {
  for (auto& s : shards_) {
    std::lock_guard lk(s.mu);
    std::erase_if(s.last, [&](const auto& kv) { return !keep.contains(kv.first); });
    std::erase_if(s.changed, [&](const auto& id) { return !keep.contains(id); });
  }
  std::lock_guard lk(peers_mu_);
  for (auto& [_, p] : peers_) std::erase_if(p.items, [&](const auto& kv) { return !keep.contains(kv.first); });
}

std::map<std::string, minion_presence> presence_table::view(const std::string& self_id,
                                                            const std::vector<std::string>& local_connected,
                                                            std::int64_t now_ms, std::int64_t stale_after_ms) const {
  std::map<std::string, minion_presence> out;
  for (const auto& s : shards_) {
    std::lock_guard lk(s.mu);
    for (const auto& [id, ms] : s.last) {
      auto& m = out[id];
      m.last_ms = std::max(m.last_ms, ms);
    }
  }
  for (const auto& id : local_connected) out[id].masters.push_back(self_id);
  {
    std::lock_guard lk(peers_mu_);
    for (const auto& [peer, p] : peers_) {
      if (peer == self_id) continue;
      const bool fresh = now_ms - p.heard_ms <= stale_after_ms;
      for (const auto& [id, i] : p.items) {
        auto& m = out[id];
        m.last_ms = std::max(m.last_ms, i.last_ms);
        if (fresh && i.connected) m.masters.push_back(peer);
      }
    }
  }
  for (auto& [_, m] : out) {
    std::sort(m.masters.begin(), m.masters.end());
    m.masters.erase(std::unique(m.masters.begin(), m.masters.end()), m.masters.end());
  }
  return out;
}

std::size_t presence_table::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lk(s.mu);
    n += s.last.size();
  }
  return n;
}

std::string iso_utc_ms(std::int64_t ms) {
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace sylvite::master
