// sylvite::minion call_client: what salt-call (without --local) uses to talk to a master:
// authenticate as the minion (same keys and code as the daemon), fetch pillar, serve
// master_link for the function and send the `_return` (jid "req").
// salt-call talks to the first configured master (Salt's salt-call does the same in hot mode;
// in failover it would evaluate the list, which sylvite leaves to the daemon).
// Threads: one io thread of its own runs the socket; the function runs on the caller's thread
// and reaches the master through link(), which blocks the caller only.
#pragma once
#include <memory>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "minion/modules.hpp"

namespace sylvite::minion {

class call_client {
 public:
  // nullptr (logged) when the algorithms or the minion keys are unusable.
  static std::unique_ptr<call_client> create(const config::minion_config& cfg, wire::value grains);
  virtual ~call_client() = default;
  // Sign in and fetch pillar. 0 on success, else the process exit code salt-call uses
  // (2: key not accepted yet, 77: rejected (after Salt's 10-20 s pause), 42: master_finger
  // mismatch, 1: other failure).
  virtual int connect() = 0;
  virtual master_link& link() = 0;
  virtual std::shared_ptr<const wire::value> pillar() const = 0;
  // Stop the io thread (also done by the destructor).
  virtual void close() = 0;
};

}  // namespace sylvite::minion
