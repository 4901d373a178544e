// sylvite::master runners (salt-run), Salt 3008.5's salt/runners/{jobs,manage,fileserver,
// saltutil}.py over the job store, the key store, the master's connections and file_roots.
// Runners run on a CLI thread of the master. manage.up/down/status and jobs.active /
// manage.versions publish to the minions through the context (test.ping,
// saltutil.running, test.version: real publishes, as Salt's LocalClient does).
// Return values are Salt's (salt/runners/jobs.py, manage.py, 3008):
//   jobs.list_jobs [search_function= search_target= search_metadata= start_time= end_time=]
//       -> {jid: {Function, Arguments, Target, Target-type, User, [Metadata], StartTime}}
//       start_time/end_time: the timestamps dateutil reads in practice (see runners.cpp)
//   jobs.list_job JID -> {jid, Function, ..., [Minions], StartTime, Result}
//   jobs.exit_success JID -> {id: bool} (the return is truthy)
//   jobs.active -> {jid: {Function, ..., StartTime, Running: [{id: pid}], Returned: [id]}}
//   manage.versions -> {"Master": v, "Up to date": {id: v}, "Minion requires update": ...}
//   manage.alived/allowed/joined/reaped (= present), not_* (= not_present) [subset= show_ip=]
//       show_ip=True -> {id: ip} (Salt's connected_ids: the minion's grain address that has
//       a connection to publish_port, loopback read as this host's addresses)
//   fileserver.envs / file_list / dir_list / empty_dir_list / symlink_list [saltenv= backend=]
//       fileserver.update [backend=] -> True; fileserver.clear_file_list_cache -> {}
//       backends: "roots" only (a backend sylvite does not serve, e.g. gitfs, is skipped
//       exactly as Salt skips a backend that is not loaded: empty answers)
//   saltutil.sync_all / sync_<form> -> Salt's shape with nothing synced (see runners.cpp)
//   jobs.lookup_jid JID [missing=True] -> {id: return}, or, when the first stored return
//       has an "out", {"outputter": out, "data": {id: return}} (Salt's shape: print data
//       with that outputter)
//   jobs.print_job JID -> {jid: {Function, ..., StartTime, Result: {id: {return, retcode,
//       success, out?}}}}
//   manage.status [tgt] [tgt_type] [timeout=] -> {"up": [...], "down": [...]} (sorted)
//   manage.up / manage.down -> sorted list; manage.present / not_present [subset=]
//       -> connected ids / accepted ids not connected (sorted)
// sylvite's own (no Salt counterpart; the web console's minions page reads it):
//   sylvite.minions [subset=] -> {id: {"key": "accepted", "connected": bool,
//       "master": id of the master holding its publish connection (this master when it
//       does, else the first in "masters") or null, "masters": [every master it holds a
//       publish connection to, sorted], "last_seen": "2026-11-27T20:40:42.123Z" (ISO 8601
//       UTC: the last time any master heard from it: publish connection identified or
//       closed, any authenticated request) or null}}
//       for every accepted key and every connected id ("key" is then its key state:
//       pending, rejected, denied, or "none"). In a cluster it is cluster-wide: each master
//       learns the others' connections and last-seen times over the peer bus
//       (master/presence.hpp), within about 5 s. subset: ids (list or comma text).
// Errors: retcode 1 and a message string ("Passed invalid arguments: lookup_jid() missing
// 1 required positional argument: 'jid'."); an unknown runner: "'x.y' is not available."
// with retcode 0, as salt-run 3008.5 exits.
// Thread-safety: call from a worker thread; the context callbacks are thread-safe.
#pragma once
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/job_store.hpp"
#include "master/presence.hpp"

namespace sylvite::master {

struct runner_context {
  const job_store* jobs = nullptr;
  const pki::key_store* keys = nullptr;
  // ids with an identified publish connection now
  std::function<std::vector<std::string>()> connected_ids;
  // publish test.ping to every accepted minion, wait up to timeout, return responders
  std::function<std::vector<std::string>(std::chrono::seconds timeout)> ping_all;
  int timeout = 5;  // master `timeout` option
  // The master's config (file_roots, fileserver_backend, publish_port, cachedir); may be null.
  const config::master_config* cfg = nullptr;
  // Publish fun (no args) to every accepted minion, wait up to timeout (or until all
  // expected answered); {id: the return event's data ({"return", "retcode", ...})} and
  // {id: {"failed": true}} for an expected minion that did not answer.
  std::function<wire::value(const std::string& fun, std::chrono::seconds timeout)> collect;
  // Grains of a minion from the minion data cache (null if unknown).
  std::function<wire::value(const std::string& id)> grains;
  // Remote addresses of the established TCP connections to publish_port, loopback
  // replaced by this host's addresses (Salt's local_port_tcp); default reads /proc.
  std::function<std::set<std::string>()> publish_peers;
  // sylvite.minions: the cluster-wide presence view (presence_table::view); unset: the
  // connected ids alone, with this master (self_id) holding each, no last-seen times.
  std::function<std::map<std::string, minion_presence>()> presence;
  std::string self_id;
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
