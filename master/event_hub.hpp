// sylvite::master event hub: the master's in-process event bus. Events are (tag, data);
// subscribers either listen to one jid (returns of salt/job/<jid>/ret/<id>, keyed for
// O(1) fan-out) or to everything. Handlers run on the firing thread, outside the hub's
// lock; they must be quick (push to a queue) and must not throw.
// Origin: an event fired by this master (a minion's request, a publish, a key change) is
// `local`; one this master received from a cluster peer is `peer`. subscribe_all sees
// both; subscribe_local only the local ones (the reactor: one reaction per event in the
// cluster, by the master that first saw it).
// Salt's fire_event: every event's data is a map and gets "_stamp" (the UTC time, Python's
// datetime.isoformat(), e.g. 2026-11-27T14:02:03.123456+00:00) when fired locally; a
// peer's event keeps the stamp its master gave it. Data that is not a map is refused
// (Salt raises ValueError there): logged once per 10 s, counted in refused().
// fire_jid_only: a peer's job return relayed to the job's owner (cluster/peer_messages
// "return") reaches the jid subscribers only (the CLI waiting for it); the cluster's
// event forwarding (master/cluster_node) brings the same event to subscribe_all once.
// Thread-safety: all methods safe from any thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master {

class event_hub {
 public:
  using handler = std::function<void(const std::string& tag, const wire::value& data)>;
  // jid-keyed subscription: receives events fired with that jid.
  std::uint64_t subscribe_jid(const std::string& jid, handler h);
  enum class origin { local, peer };
  // wanted (optional, called under the hub's lock, must be cheap and take no lock): false
  // while the subscriber has no use for events (the event bus socket without clients); an
  // event no subscriber wants costs no copy of its data.
  std::uint64_t subscribe_all(handler h, std::function<bool()> wanted = {});
  std::uint64_t subscribe_local(handler h);
  void unsubscribe(std::uint64_t id);
  // jid may be empty (not a job event).
  void fire(const std::string& tag, const wire::value& data, const std::string& jid = {},
            origin from = origin::local);
  void fire_jid_only(const std::string& tag, const wire::value& data, const std::string& jid);
  std::size_t subscriber_count() const;
  std::uint64_t fired() const noexcept { return fired_.load(); }
  std::uint64_t refused() const noexcept { return refused_.load(); }

  // Python's datetime.now(timezone.utc).isoformat() for now.
  static std::string stamp_now();

 private:
  struct sub {
    std::string jid;
    std::shared_ptr<handler> h;
    bool local_only = false;
    std::function<bool()> wanted;  // empty: always
  };
  mutable std::mutex mu_;
  std::uint64_t next_ = 1;
  std::map<std::uint64_t, sub> subs_;
  std::multimap<std::string, std::uint64_t> by_jid_;
  std::atomic<std::uint64_t> fired_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::int64_t> refused_log_ms_{0};
};

}  // namespace sylvite::master
