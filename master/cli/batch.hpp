// sylvite::cli batch execution of `salt -b N|N%` (Salt 3008.5: salt/cli/batch.py Batch,
// salt/utils/batch_state.py, salt/utils/batch_output.py CLIOutput, salt/cli/salt.py
// _run_batch). Two layers:
//   - batch_machine: Salt's state machine (progress_batch) with no I/O and no clock of its
//     own: slot accounting (rolling windows: a new minion starts as soon as one finishes),
//     --batch-wait cool-downs, --failhard, the timeout sweep (timeout + gather_job_timeout).
//   - run_batch: the driver on top of the master's CLI IPC (master/ipc_protocol.hpp): the
//     gather step (test.ping to the target: who is up), then one waiting `publish` per
//     window (a list target, all windows under one jid as Salt's batch_jid), each stream on
//     its own thread; prints Salt's lines and every return through the chosen outputter,
//     returns Salt's exit code.
// Thread-safety: batch_machine is single-threaded; run_batch owns its window threads and
// joins them before it returns (it touches env.out/err only from the calling thread).
#pragma once
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/wire/value.hpp"
#include "master/cli/common.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::cli {

// Salt's Batch.get_bnum (the legacy check the CLI runs on the spec): "10" -> 10, "10%" of
// n minions -> int(n * 10 / 100), or 1 when that is below 1 but above 0 (ceil); "0" -> 0.
// nullopt: not a number (Salt prints "Invalid batch data sent: ...").
std::optional<long long> batch_bnum(const std::string& spec, std::size_t n_minions);
// Salt's batch_state.get_batch_size: as batch_bnum but at least 1. nullopt when invalid.
std::optional<std::size_t> batch_size_of(const std::string& spec, std::size_t n_minions);
// The local client's batches (salt-api `local` with `batch`): `up` (the minions that
// answered the gather) cut into windows of batch_size_of(spec) in order. nullopt when the
// spec is invalid.
std::optional<std::vector<std::vector<std::string>>> batch_windows(const std::string& spec,
                                                                   const std::vector<std::string>& up);

// Python's float(text) / int(text) (blanks around, sign; int: decimal digits with single
// underscores between; float: no hex). nullopt where Python raises ValueError.
std::optional<double> py_float_text(const std::string& text);
std::optional<long long> py_int_text(const std::string& text);

// Python's repr() of a list of strings: ['a', 'b'] ("Executing run on [...]").
std::string py_list_repr(const std::vector<std::string>& items);

// One minion's finished job as the machine sees it.
struct batch_return {
  int retcode = 0;      // Salt's _collapse_retcode (max of a map of retcodes)
  bool failed = false;  // {"failed": True}: the minion was reported missing for its window
};

struct batch_action {
  std::vector<std::string> publish;         // start these now (one window, in pending order)
  std::vector<std::string> finished;        // returns taken (in the order given)
  std::vector<std::string> timed_out;       // driver-reported or swept timeouts
  bool halted = false;                      // --failhard tripped
};

class batch_machine {
 public:
  using clock = std::chrono::steady_clock;
  struct settings {
    std::size_t batch_size = 1;
    bool failhard = false;
    std::chrono::milliseconds batch_wait{0};
    // A window's minion is given up on after timeout + gather_job_timeout (Salt's sweep).
    std::chrono::milliseconds timeout{5000};
    std::chrono::milliseconds gather_job_timeout{10000};
  };
  batch_machine(std::vector<std::string> minions, settings s);

  // Salt's progress_batch: take new returns (in arrival order) and driver timeouts, sweep,
  // prune expired waits, then fill free slots (batch_size - active - waiting) from pending.
  batch_action progress(const std::vector<std::pair<std::string, batch_return>>& new_returns,
                        const std::vector<std::string>& timed_out, clock::time_point now);
  // Salt's is_batch_done: halted, or nothing pending and nothing active.
  bool done() const { return halted_ || (pending_.empty() && active_.empty()); }
  bool halted() const { return halted_; }
  // When the earliest --batch-wait cool-down or timeout sweep is due (nullopt: none).
  std::optional<clock::time_point> next_due() const;

  const std::vector<std::string>& pending() const { return pending_; }
  const std::map<std::string, clock::time_point>& active() const { return active_; }
  const std::set<std::string>& finished() const { return done_; }
  const std::map<std::string, std::string>& failed() const { return failed_; }  // id -> "failed"|"timeout"
  std::size_t batch_size() const { return s_.batch_size; }

 private:
  settings s_;
  std::vector<std::string> pending_;
  std::map<std::string, clock::time_point> active_;
  std::set<std::string> done_;
  std::map<std::string, std::string> failed_;
  std::vector<clock::time_point> wait_;
  bool halted_ = false;
};

// What `salt -b` was asked to do (parsed by salt_main; the job is already typed).
struct batch_request {
  std::string spec;                   // -b/--batch/--batch-size (or --batch-safe-size)
  double batch_wait = 0;              // --batch-wait seconds
  bool failhard = false;
  bool quiet = false;                 // --static: print only the final merged output
  int timeout = 5;                    // -t (already defaulted from the master config)
  int gather_job_timeout = 10;        // the master config's gather_job_timeout
  bool log_errors = true;             // console log level lets "[ERROR   ]" lines through
  master::ipc::publish job;           // the job (tgt, tgt_type, fun, arg, publish options)
  // --batch-safe-limit: when > 1, the gather's matched minions decide: at least this many
  // -> print Salt's NOTICE and run the batch; fewer -> return nullopt from run_batch (the
  // caller runs the job normally).
  long long safe_limit = 0;
};

struct batch_output {
  output_flags flags;
  output::options opt;
};

// Runs the batch; returns the exit code, or nullopt when --batch-safe-limit was not
// reached (nothing was printed; the caller publishes the job the ordinary way).
std::optional<int> run_batch(const batch_request& req, const batch_output& out, const config::master_config& cfg,
                             cli_env& env);

}  // namespace sylvite::cli
