// sylvite::master CLI service: the commands salt, salt-run and salt-key send over the
// master's Unix socket (master/ipc_protocol.hpp), each handed to the service that owns
// it: publish (job service; the wait for returns is the state machine of
// master/cli_wait.hpp, driven by one thread for every waiting call), runners
// (master/runners.hpp; cluster.* through the key service and the cluster node), key
// events (key service), a salt-call return stored locally (job service).
// Thread-safety: handle() from any thread; shutdown() finishes the waits (each CLI gets
// its {"done"} reply) and joins the threads.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "master/api/eauth.hpp"
#include "master/cluster_node.hpp"
#include "master/event_hub.hpp"
#include "master/ipc_protocol.hpp"
#include "master/job_service.hpp"
#include "master/key_service.hpp"
#include "master/presence.hpp"
#include "master/services.hpp"

namespace sylvite::master {

class cli_service {
 public:
  cli_service(const config::master_config& cfg, master_links& links, event_hub& hub, key_service& keys,
              job_service& jobs, cluster_node& cluster, presence_table& presence);
  ~cli_service();
  cli_service(const cli_service&) = delete;
  cli_service& operator=(const cli_service&) = delete;

  // One CLI request; the reply (and, for a waiting publish, the pushed returns) goes to
  // out. Never blocks the caller for long.
  void handle(const wire::value& body, std::shared_ptr<cli_reply> out);
  void shutdown();

 private:
  struct cli_state;
  void cli_publish(const wire::value& body, std::shared_ptr<cli_reply> out);
  void cli_runner(const wire::value& body, std::shared_ptr<cli_reply> out);
  // salt-run state.event: streams the bus's matching events to the CLI (events part).
  void cli_state_event(const wire::value& args, const wire::value& kwargs, std::shared_ptr<cli_reply> out);
  void store_runner_job(const std::string& jid, const ipc::runner& rq, const wire::value& ret, std::int64_t retcode);
  bool spawn_cli(std::function<void()> fn);
  void init_cli();
  std::vector<std::string> ping_all(std::chrono::seconds timeout);
  // Publish fun to every minion; {id: return event data}, {"failed": true} for an
  // expected minion that did not answer in time.
  wire::value collect(const std::string& fun, std::chrono::seconds timeout);
  bool clustered() const noexcept { return cfg_.cluster_id.has_value(); }
  std::vector<std::string> connected_ids() const;
  publish_result publish(const publish_request& req) { return jobs_->publish(req); }

  const config::master_config& cfg_;
  master_links& links_;
  event_hub& hub_;
  key_service* keys_;
  job_service* jobs_;
  cluster_node* cluster_;
  presence_table* presence_;  // last seen per minion, the peers' reports (sylvite.minions)
  std::unique_ptr<cli_state> cli_;
  // publisher_acl / publisher_acl_blacklist for the salt CLI (eauth part of issue 19).
  std::unique_ptr<api::eauth_service> eauth_;
};

}  // namespace sylvite::master
