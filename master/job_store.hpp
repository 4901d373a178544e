// sylvite::master job store: where jobs (publish loads, expected minions) and returns are
// kept. The job service and the runners see only this interface; the default
// implementation is the file cache in Salt's local_cache layout (master/job_cache.hpp).
// A store on a database (master_job_cache) implements the same calls.
// Thread-safety: implementations are safe from any thread; calls may block on I/O (run
// them on workers, never on an io thread; records_without_io names the exception).
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

struct job_summary {
  std::string jid;
  wire::value load;            // the saved publish load map
  std::vector<std::string> minions;
};

// How record_return ended when it did not fail.
enum class return_record {
  stored,     // the first return of (jid, id): kept
  duplicate,  // (jid, id) had a return already: the first one wins, as in Salt
  not_kept,   // the store does not keep this job (jid "nocache", an unknown non-jid)
};

class job_store {
 public:
  virtual ~job_store() = default;
  // Save the publish load and the expected minions.
  virtual result<void> save_load(const std::string& jid, const wire::value& load,
                                 const std::vector<std::string>& minions) = 0;
  // Add minions to a job's expected minions.
  virtual result<void> add_minions(const std::string& jid, const std::vector<std::string>& minions) = 0;
  // Store one minion return (the load as the minion sent it). A return of a job the
  // store does not know but whose jid is well formed (a minion's schedule, a cleaned
  // job) is kept under a new job, as Salt's store_job (prep_jid(passed_jid)) does.
  virtual result<return_record> record_return(const std::string& jid, const std::string& id,
                                              const wire::value& ret_load) = 0;
  virtual std::optional<wire::value> get_load(const std::string& jid) const = 0;
  virtual std::vector<std::string> get_minions(const std::string& jid) const = 0;
  // id -> {"return", "retcode", "success", "out"?} for every stored return.
  virtual wire::value get_returns(const std::string& jid) const = 0;
  // Every job (newest first) with its load; limited to `max` (0 = all).
  virtual std::vector<job_summary> list_jobs(std::size_t max = 0) const = 0;
  // Remove jobs older than keep. Returns how many were removed.
  virtual std::size_t clean_old(std::chrono::seconds keep) = 0;
  // True when record_return for this jid would wait on no disk write (an in-memory
  // decision and an append to a journal at most): the master may then call it on an io
  // thread. A hint: false is always safe.
  virtual bool records_without_io(const std::string& /*jid*/) const { return false; }
  // Block until every write made so far is durable.
  virtual void flush() = 0;
};

// salt.utils.jid.is_jid: 20 digits, optionally followed by "_<suffix>".
bool is_jid(const std::string& jid);

}  // namespace sylvite::master
