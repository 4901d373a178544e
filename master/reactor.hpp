// sylvite::master reactor: Salt 3008.5's reactor (salt/utils/reactor.py Reactor and
// ReactWrap) on the master's event hub. The master config's `reactor:` maps tag globs
// (Python fnmatch) to SLS files; an event whose tag matches is rendered through the
// master's renderer (render.hpp: shebang or `renderer`, Jinja with `tag` and `data`),
// compiled into low chunks as Salt's state compiler does (pad_funcs, verify_high,
// compile_high_data, order_chunks: by `order`, then "state+name+fun"), and each chunk
// runs one action:
//   local.<fun> / cmd.<fun>  a publish (job_service): tgt, tgt_type, arg/kwarg or args,
//                            ret, jid, metadata, ret_config, ret_kwargs
//   runner.<fun>             the runner through the CLI service, as salt-run (asynchronous)
//   wheel.key.accept|reject|delete  the key directories + key_service::key_event
//   anything else (caller, local_async, ...)  refused: logged, reported as an event.
// A failure (SLS missing, render error, bad structure, refused or failed action) is logged
// (rate-limited per SLS) and fired as `salt/reactor/error` {tag, sls, error, user:
// "Reactor"}; events whose data.user is "Reactor" are never reacted to (Salt's loop guard).
// Only events this master fired first reach the reactor (event_hub::subscribe_local): a
// cluster reacts once per event. Events wait in a bounded queue (reactor_worker_hwm;
// beyond it they are shed, counted, logged once per 10 s) for reactor_worker_threads
// threads. Ordering: the chunks of one event run in Salt's order; events run in parallel.
// Thread-safety: on_event from any thread (quick: match + queue); react/reactions from
// any thread (blocking: renderer, publish); start/stop from one thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config/config.hpp"
#include "core/pki/key_store.hpp"
#include "core/render/render.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/job_service.hpp"
#include "master/services.hpp"

namespace sylvite::master {

inline constexpr const char* reactor_error_tag = "salt/reactor/error";
inline constexpr const char* reactor_user = "Reactor";

// The result of compiling rendered high data (Salt's Compiler): ordered low chunks, or the
// errors that stop the whole event's reactions (as Salt returns [] then).
struct reactor_compiled {
  std::vector<wire::value> chunks;
  std::vector<std::string> errors;
};

// Salt's pad_funcs + verify_high + compile_high_data + order_chunks (requisites are not
// evaluated: reactions are fired, not run as states). high: {id: {state.fun: [args]}}
// with "__sls__" set in each body.
reactor_compiled compile_reactions(wire::value high);

// Salt's salt.utils.data.repack_dictlist (non-strict): [{"a": 1}, "b"] -> {"a": 1, "b":
// null}; nullopt when an element is neither a scalar nor a one-key map (Salt: {}).
std::optional<wire::value> repack_dictlist(const wire::value& list);

// Python fnmatch.fnmatch on POSIX ('*' crosses '/', no escapes).
bool tag_fnmatch(const std::string& pattern, const std::string& tag);

// wheel.key.* on a key store (salt/wheel/key.py over salt/key.py Key): accept(match,
// include_rejected, include_denied), reject(match, include_accepted, include_denied),
// delete(match). match: a glob, "a,b" or a list of globs. ret is Key.name_match(match)
// after the change (Salt's return); notify(act, ids) tells the key service.
struct wheel_outcome {
  wire::value ret;
  std::string error;  // non-empty: not run (unknown function, missing match)
};
wheel_outcome run_wheel_key(const pki::key_store& ks, const std::string& fun, const wire::value& arg,
                            const wire::value& kwarg,
                            const std::function<void(const std::string& act, const std::vector<std::string>& ids)>& notify);

// The runner hook over the CLI service's request path (what salt-run sends: ipc::runner):
// handle(body, reply) is cli_service::handle. The runner's return is logged (info; an
// error or a non-zero retcode at warning).
std::function<bool(const std::string&, const wire::value&, const wire::value&)> reactor_runner_via_cli(
    std::function<void(const wire::value& body, std::shared_ptr<cli_reply> out)> handle);

struct reactor_stats {
  std::uint64_t events = 0;     // events seen (local ones)
  std::uint64_t matched = 0;    // ... whose tag matched a reactor (queued or shed)
  std::uint64_t shed = 0;       // ... dropped: the queue was at reactor_worker_hwm
  std::uint64_t reactions = 0;  // events whose reactions were compiled and run
  std::uint64_t actions = 0;    // actions started (a publish made, a runner or wheel call handed over)
  std::uint64_t errors = 0;     // error events fired
};

// The reactor's options, read from the master config (config::master_config::raw; Salt's
// names and defaults, reactor_render_timeout is sylvite's). A value of the wrong type is
// logged at error and its default used. docs/operations.md "Reactor".
struct reactor_options {
  wire::value map = wire::value::array();  // `reactor`: [{glob: sls | [sls]}] or a file path
  int refresh_interval = 60;               // reactor_refresh_interval (accepted; no effect)
  int worker_threads = 10;                 // reactor_worker_threads (1..1024)
  int worker_hwm = 10000;                  // reactor_worker_hwm (>= 1)
  int render_timeout = 30;                 // reactor_render_timeout, seconds (1..86400)
  static reactor_options from(const wire::value& raw);
};

class reactor {
 public:
  // What the actions reach. Each must be thread-safe; any may be empty (the action is then
  // refused as unavailable).
  struct hooks {
    std::function<publish_result(const publish_request&)> publish;
    // Start a runner; its result is the callee's to log. False: could not be started.
    std::function<bool(const std::string& fun, const wire::value& arg, const wire::value& kwarg)> runner;
    std::function<wheel_outcome(const std::string& fun, const wire::value& arg, const wire::value& kwarg)> wheel;
    // Fire an event on this master's bus (error reports).
    std::function<void(const std::string& tag, const wire::value& data)> fire;
  };

  reactor(const config::master_config& cfg, render::renderer& rend, hooks h);
  ~reactor();
  reactor(const reactor&) = delete;
  reactor& operator=(const reactor&) = delete;

  // Subscribe to the hub's local events and start the threads; nothing when `reactor` is
  // empty. stop() unsubscribes, drops what is queued and joins.
  void start(event_hub& hub);
  void stop();
  bool enabled() const noexcept { return enabled_; }

  // The hub handler: tag matched against the map, the event queued (or shed).
  void on_event(const std::string& tag, const wire::value& data);

  // The SLS files configured for a tag, in the map's order (Salt's list_reactors).
  std::vector<std::string> list_reactors(const std::string& tag);
  // Render and compile (Salt's reactions()); render errors are in errors too, but do not
  // empty chunks (Salt goes on with the other files).
  reactor_compiled reactions(const std::string& tag, const wire::value& data, const std::vector<std::string>& files);
  // One event's whole reaction, synchronously (the threads run this; tests call it).
  void react(const std::string& tag, const wire::value& data, const std::vector<std::string>& files);
  // One chunk's action. Empty: done; else the error (already counted, not yet reported).
  std::string call(const wire::value& chunk);

  reactor_stats stats() const;

 private:
  struct queued {
    std::string tag;
    wire::value data;
    std::vector<std::string> files;
  };
  wire::value reactor_map();
  std::vector<std::filesystem::path> resolve(const std::string& ref);
  void report(const std::string& tag, const std::vector<std::string>& files, const std::string& error);
  void work();

  const config::master_config& cfg_;
  reactor_options opt_;
  render::renderer& rend_;
  hooks h_;
  bool enabled_ = false;
  event_hub* hub_ = nullptr;
  std::uint64_t sub_ = 0;
  // `reactor` given as a file: its map, re-read when the file changes.
  std::mutex map_mu_;
  wire::value file_map_ = wire::value::array();
  std::filesystem::file_time_type file_mtime_{};
  bool file_loaded_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<queued> q_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;

  std::atomic<std::uint64_t> events_{0}, matched_{0}, shed_{0}, reactions_{0}, actions_{0}, errors_{0};
  util::log_limiter shed_log_;
  std::mutex log_mu_;
  std::map<std::string, std::unique_ptr<util::log_limiter>> error_logs_;  // per SLS (bounded)
};

}  // namespace sylvite::master
