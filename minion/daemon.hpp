// sylvite::minion drivers: the thin Asio layer around the sans-I/O pieces.
//   run_minion_daemon  - salt-minion: connection_fsm + auth + publish + jobs on a pool.
//   call_client        - salt-call without --local: authenticate as the minion (same keys
//                        and code), fetch pillar, serve master_link for the function and
//                        send the `_return` (jid "req").
// Threads: one io thread runs every socket, timer and protocol step; execution modules run
// on a job pool (daemon) or the caller's thread (salt-call) and reach the master through
// master_link, which hops onto the io thread and blocks the calling job thread only.
// The few RSA operations of a sign-in (about 1 ms) run on the io thread: a minion has one
// master connection and nothing else to serve there.
#pragma once
#include <memory>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "minion/modules.hpp"

namespace sylvite::minion {

// Runs until SIGTERM/SIGINT (returns 0) or a fatal sign-in outcome: 77 (key rejected,
// after Salt's 10-20 s pause) or 42 (master_finger mismatch). grains: collect_grains(cfg).
int run_minion_daemon(const config::minion_config& cfg, wire::value grains);

class call_client {
 public:
  static std::unique_ptr<call_client> create(const config::minion_config& cfg, wire::value grains);
  virtual ~call_client() = default;
  // Sign in and fetch pillar. 0 on success, else the process exit code salt-call uses
  // (2: key not accepted yet, 77: rejected, 42: master_finger mismatch, 1: other failure).
  virtual int connect() = 0;
  virtual master_link& link() = 0;
  virtual std::shared_ptr<const wire::value> pillar() const = 0;
  // Stop the io thread (also done by the destructor).
  virtual void close() = 0;
};

}  // namespace sylvite::minion
