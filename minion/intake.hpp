// sylvite::minion publish intake (sans-I/O): what happens to a decoded publish before it
// becomes a job, whichever master it came from (one intake for all of them):
//   1. a publish the decoder dropped is logged (rate-limited: whoever can inject publishes
//      can repeat them);
//   2. replay_guard's time window on the serial;
//   3. _target_load: not for this minion -> debug line, nothing else;
//   4. the load is annotated as Salt 3008.5's _target_load does (resource_targets,
//      pure_resource_target, minion_is_target: jobs see them as __pub_*);
//   5. jid de-duplication across masters (a second copy is info with several masters, a
//      replay warning with one);
//   6. unsupported jobs (multi-function) are refused with an error line;
//   7. the "Executing command" line.
// The caller logs `logs` in order and, when `run`, hands `load` to the job pool.
// Thread-safety: none; used on the minion's io thread only.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/wire/value.hpp"
#include "minion/channel.hpp"
#include "minion/jobs.hpp"
#include "minion/masters.hpp"
#include "minion/replay_guard.hpp"

namespace sylvite::minion {

struct intake_result {
  bool run = false;
  wire::value load;  // run: the annotated load
  std::string jid;   // run
  std::vector<std::pair<mm_log_level, std::string>> logs;
};

class publish_intake {
 public:
  // single: one configured master (a repeated jid is then a replay, logged as a warning).
  publish_intake(replay_settings s, bool single) : guard_(s), single_(single) {}

  // label: the master the publish came from, as configured. now_us: wall clock.
  intake_result admit(const std::string& label, publish_decoded d, const target_facts& me, std::int64_t now_us);

  const replay_guard& guard() const noexcept { return guard_; }

 private:
  replay_guard guard_;
  bool single_;
};

}  // namespace sylvite::minion
