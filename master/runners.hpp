// sylvite::master runners (salt-run): jobs.list_jobs, jobs.lookup_jid, jobs.print_job,
// manage.up, manage.down, manage.status, manage.present, manage.not_present.
// Runners run on the master's worker pool. manage.* ping the accepted minions through
// the context (a real test.ping publish, as Salt does) and split them into up/down.
// Return values are Salt's (salt/runners/jobs.py, manage.py, 3008):
//   jobs.list_jobs [search_function= search_target= search_metadata=]
//       -> {jid: {Function, Arguments, Target, Target-type, User, [Metadata], StartTime}}
//   jobs.lookup_jid JID [missing=True] -> {id: return}, or, when the first stored return
//       has an "out", {"outputter": out, "data": {id: return}} (Salt's shape: print data
//       with that outputter)
//   jobs.print_job JID -> {jid: {Function, ..., StartTime, Result: {id: {return, retcode,
//       success, out?}}}}
//   manage.status [tgt] [tgt_type] [timeout=] -> {"up": [...], "down": [...]} (sorted)
//   manage.up / manage.down -> sorted list; manage.present / not_present [subset=]
//       -> connected ids / accepted ids not connected (sorted)
// Errors: retcode 1 and a message string ("'x.y' is not available.", "Passed invalid
// arguments: lookup_jid() missing 1 required positional argument: 'jid'.").
// Thread-safety: call from a worker thread; the context callbacks are thread-safe.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/pki/key_store.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/job_store.hpp"

namespace sylvite::master {

struct runner_context {
  const job_store* jobs = nullptr;
  const pki::key_store* keys = nullptr;
  // ids with an identified publish connection now
  std::function<std::vector<std::string>()> connected_ids;
  // publish test.ping to every accepted minion, wait up to timeout, return responders
  std::function<std::vector<std::string>(std::chrono::seconds timeout)> ping_all;
  int timeout = 5;  // master `timeout` option
};

struct runner_outcome {
  wire::value ret;  // what salt-run prints
  int retcode = 0;  // 0 ok; 1 error (message in ret)
};

// fun = "jobs.lookup_jid"; args positional; kwargs map (may be empty object).
runner_outcome run_runner(const runner_context& ctx, const std::string& fun,
                          const wire::value& args, const wire::value& kwargs);
std::vector<std::string> runner_functions();

}  // namespace sylvite::master
