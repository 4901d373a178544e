// sylvite::master job service: a job's whole life on the master.
//   publish      target -> expected minions, the load saved in the job store, the
//                salt/job/<jid>/new and salt/job/<jid>/publish events, the frame wrapped
//                (AES, serial, signature) and handed to the publish port, and in a
//                cluster to every peer;
//   record_return  a minion's _return: stored in the job store (first return wins), the
//                salt/job/<jid>/ret/<id> event, and in a cluster routed to the master that
//                published the job (the owner map);
//   relays       a peer's publish sent to this master's minions (serials kept increasing
//                per connection), a peer's return fired on this master's bus;
//   cleanup      keep_jobs_seconds.
// Salt references: ClearFuncs.publish/_prep_pub, PubServerChannel.wrap_payload,
// AESFuncs._return (salt/master.py), salt/utils/job.py store_job.
// Topic filtering: glob/pcre/list go only to the identified connections of the matched
// ids; every other target type is broadcast (minions filter themselves).
// Thread-safety: every method is safe from any thread; publish and record_return block on
// the job store (workers only), except a record_return that records_without_io accepts.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/job_store.hpp"
#include "master/key_service.hpp"
#include "master/minion_data.hpp"
#include "master/services.hpp"

namespace sylvite::master {

struct publish_request {
  wire::value tgt = "*";
  std::string tgt_type = "glob";
  std::string fun;
  wire::value arg = wire::value::array();
  wire::value kwarg = wire::value::object();  // CLI key=val -> trailing {"__kwarg__": true, ...}
  std::string ret;
  std::string user = "root";
  std::string delimiter = ":";
  std::string jid;                    // empty -> new_jid()
  wire::value kwargs = wire::value::object();  // publish options (metadata, ret_config, ...)
};

struct publish_result {
  std::string jid;
  std::vector<std::string> minions;  // expected
  std::vector<std::string> missing;  // listed (tgt_type list) but not accepted
  std::string error;                 // non-empty: nothing published
};

class job_service {
 public:
  job_service(const config::master_config& cfg, master_links& links, master_counters& counters, event_hub& events,
              key_service& keys, minion_data_cache& mdata, std::unique_ptr<job_store> store);

  job_store& store() noexcept { return *store_; }

  publish_result publish(const publish_request& req);
  // A minion's _return load (jid "req": salt-call's own job). Answers nothing (Salt's
  // None); refusals are silent as in Salt.
  void record_return(wire::value& load);
  // True when record_return(load) waits on no disk write: a single master whose store
  // answers from memory and an append (job_store::records_without_io), or no job cache;
  // not salt-call's jid "req" (its load is saved first). The request router then answers
  // the _return on the io thread.
  bool records_without_io(const wire::value& load) const;
  // Expected minions of a target (CkMinions.check_minions with greedy=true).
  std::vector<std::string> check_minions(const wire::value& tgt, const std::string& tgt_type,
                                         const std::string& delimiter = ":");
  // Build the frame body bytes of a publish for load with the current AES key; adds
  // "serial" (this master's clock in microseconds, strictly increasing:
  // core/util/pub_serial.hpp). The caller holds keys.publish_lock() until the frame is
  // handed to the publish server (serial order == send order).
  std::string wrap_publish(wire::value load);
  // A publish frame relayed by a cluster peer, made ready for this master's minions (caller
  // holds keys.publish_lock()): the peer's frame itself when its serial is above the last
  // one this master sent, else the load re-wrapped with a serial of this master. A frame
  // that cannot be read with the cluster AES key is passed on as it is (logged).
  std::shared_ptr<const std::string> relay_frame(const std::string& frame);

  // ---- cluster (called by the cluster node)
  // "publish": send a peer's job to this master's minions (targets: null = everyone).
  void peer_publish(const std::string& from, const std::string& jid, const std::string& frame,
                    const std::optional<std::vector<std::string>>& targets);
  // "return": a return of a job this master published, stored by the peer that got it.
  void peer_return(const std::string& jid, const std::string& id, const wire::value& load);

  // keep_jobs_seconds, at most once an hour.
  void maintenance(sys_clock::time_point now);

 private:
  bool clustered() const noexcept { return cfg_.cluster_id.has_value(); }
  bool topic_fallback(pub_sink& sink, const std::vector<std::string>& targets) const;
  void note_owner(const std::string& jid, const std::string& master);
  std::optional<std::string> owner_of(const std::string& jid);

  const config::master_config& cfg_;
  master_links& links_;
  master_counters& counters_;
  event_hub& events_;
  key_service& keys_;
  minion_data_cache& mdata_;
  std::unique_ptr<job_store> store_;
  std::int64_t pub_serial_ = 0;  // last publish serial sent (time, us); under keys_.publish_lock()
  std::mutex owners_mu_;
  std::map<std::string, std::string> jid_owner_;  // jid -> master that published it
  std::deque<std::string> jid_order_;
  std::mutex clean_mu_;
  sys_clock::time_point last_clean_;
};

// Salt's publish load (key order of ClearFuncs._prep_pub) for a request and jid.
wire::value make_publish_load(const publish_request& req, const std::string& jid);
// Wrap a publish load into the salt_payload bytes that form the frame body.
std::string wrap_publish_payload(const wire::value& load, const crypto::crypticle& aes,
                                 const crypto::rsa_key* sign_key, std::string_view sig_algo_name);

}  // namespace sylvite::master
