// sylvite::master::api lowstate dispatch: one lowstate chunk of the REST API run through
// the master's own services, as salt/netapi/__init__.py NetapiClient.run does through
// Salt's clients:
//   local        a waiting publish through the CLI service (cli_service::handle, the
//                command salt sends) -> {id: return} of the minions that answered
//   local_async  a publish without wait -> {"jid", "minions"}
//   local_batch  gather (test.ping) then waiting publishes of `batch` minions at a time;
//                one {id: return} item per minion (Salt's cmd_batch yields them)
//   local_subset sys.list_functions on the target, then a waiting publish to `subset`
//                (default 3) of the answering minions that list fun, picked at random
//                (LocalClient.cmd_subset) -> {id: return}; cli=True: one item per minion
//   ssh          refused (400, logged once): sylvite has no salt-ssh
//   runner       the CLI service's "runner" command -> the runner's return
//   runner_async the same, not waited for -> {"tag": "salt/run/<jid>", "jid"}
//   wheel        the key wheel (salt/wheel/key.py) on the key store, changes announced
//                through the key service -> {"tag", "data": {fun, jid, user, return,
//                success, tag}}
//   wheel_async  the same, answered at once -> {"tag", "jid"}
// Salt's error behaviour: a publish the master refuses (no minion matched, ...) gives {}
// for local/local_async (LocalClient._check_pub_data); an unknown client is a 400.
// Authentication and the ACL are the caller's (api_server): chunks arrive checked.
// Thread-safety: run() from any thread (it blocks: call it from the API's workers);
// the services behind it lock.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/pki/key_store.hpp"
#include "core/wire/value.hpp"
#include "master/services.hpp"

namespace sylvite::master::api {

// What the dispatcher uses of the master (master_core in the daemon, fakes in tests).
struct lowstate_services {
  const config::master_config* cfg = nullptr;
  // cli_service::handle: the commands of master/ipc_protocol.hpp.
  std::function<void(const wire::value& body, std::shared_ptr<cli_reply> out)> cli;
  const pki::key_store* keys = nullptr;
  // key_service::key_event after the key files changed (act accept|reject|delete).
  std::function<void(const std::string& act, const std::vector<std::string>& ids)> key_event;
  // event_hub::fire (the wheel's salt/wheel/<jid>/new and /ret events).
  std::function<void(const std::string& tag, const wire::value& data)> fire;
};

struct chunk_result {
  int status = 200;    // 200, or the status of a refusal (400: unknown client, bad args;
                       // 503: the master's CLI service is busy or stopping)
  std::string error;   // set with a refusal
  // The chunk's return; with `many` an array whose elements each become one element of
  // the reply's "return" list (Salt's `yield from` of a generator client).
  wire::value ret = nullptr;
  bool many = false;
  // group (api_group.hpp): members of the master group that did not answer (URLs); the
  // routes name them in the X-Sylvite-Group-Unreachable header.
  std::vector<std::string> unreachable;
};

class lowstate_runner {
 public:
  explicit lowstate_runner(lowstate_services s);
  // Run one chunk for user (the identity's name; Salt's `user` in the job). Blocks up to
  // the chunk's timeout (local) or the runner's run time.
  chunk_result run(const wire::value& chunk, const std::string& user) const;
  // Stop waiting: running calls return what they have (daemon shutdown).
  void stop();

 private:
  chunk_result local(const wire::value& chunk, const std::string& user, bool wait) const;
  chunk_result local_batch(const wire::value& chunk, const std::string& user) const;
  chunk_result local_subset(const wire::value& chunk, const std::string& user) const;
  chunk_result runner(const wire::value& chunk, const std::string& user, bool wait) const;
  chunk_result wheel(const wire::value& chunk, const std::string& user, bool wait) const;
  wire::value wheel_call(const std::string& fun, const wire::value& args, const wire::value& kwargs,
                         std::string& error) const;

  static const std::vector<std::string>& netapi_known();

  lowstate_services s_;
  std::shared_ptr<std::atomic<bool>> stopping_;
};

// Salt's RunnerClient/WheelClient _reformat_low: positional `arg` (name=value strings
// become keyword arguments, as parse_input(condition=False)), `kwarg`, and every other
// key of the chunk that is not the client's own (client, fun, token, eauth, username,
// password, user, key, timeout, full_return, arg, kwarg) -> {args, kwargs}.
struct call_args {
  wire::value args = wire::value::array();
  wire::value kwargs = wire::value::object();
};
call_args reformat_low(const wire::value& chunk);

}  // namespace sylvite::master::api
