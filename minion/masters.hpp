// sylvite::minion multi-master state machine (sans-I/O): which masters the minion talks to,
// when it connects, gives up on, probes, fails over and fails back. No sockets, no clock, no
// sleeps: the driver feeds events (each carrying `now`, a steady time point in ms) and
// performs the returned actions in order. Not wired into the daemon yet (next step).
// Thread-safety: none; owned and driven by one thread (the daemon's io thread).
//
// ---------------------------------------------------------------------------------------
// Actions (what the driver does)                 Events (what the driver reports)
//   connect(i, at)      sign in to master i and     start                  once
//                       open its channels, not      connected(i, ip)       after connect(i)
//                       before `at`                 connect_failed(i)      after connect(i)
//   disconnect(i, why)  close master i, forget its  dns_resolved(i, ip) / dns_failed(i)
//                       session/AES key             connection_lost(i, rst|eof|timeout)
//   send_probe(i)       one request-channel ping    heartbeat_ok(i) / heartbeat_missed(i)
//                       (Salt's status.ping_master) probe_ok(i) / probe_failed(i)
//   schedule(id, at)    (re)arm timer `id` for `at` timer(id)
//   log(level, msg)                                 job_started(jid) / job_finished(jid)
//   fire_event(tag, data) on the master bus         aes_rotated(i)
//   return_queue_flush(i) send queued job returns
//   reauth(i, at)       sign in again on the existing connection of master i at `at`
// Timers are never cancelled: a timer event for an id that is not armed, or that arrives
// before the time it is armed for (it was re-armed later), is ignored.
// Events naming an unknown master index, or a master the rules do not expect (a late
// `connected` from an abandoned attempt in failover, or for a hot-mode master that is
// backing off: it gets disconnect(i, "superseded")), never crash and never change the
// active master. Jobs: the driver reports job_finished for every job_started, also for
// jobs that time out or are killed, or a pending failback (F5) waits for ever.
//
// Rules, common to both modes
//   C1 Back-off with jitter: a failed attempt waits b' = b / 2 + uniform(0 .. b / 2), where b
//      starts at backoff_initial (1 s) and doubles per consecutive failure up to backoff_max
//      = max(acceptance_wait_time, acceptance_wait_time_max), at least 1 s (Salt waits
//      acceptance_wait_time between passes; _max is its growth bound). Reset on connected.
//   C2 Liveness: the driver sends an application heartbeat on each connection every
//      heartbeat_interval() = alive_window / heartbeat_misses and reports ok (with the time
//      the master last answered and, for a ping, its round trip) or missed.
//      alive_window = master_alive_interval (30 s when it is 0: Salt's 0 means "never
//      notice", which is the #38116 complaint). The master is suspected when it answered
//      nothing for alive_window (timer `suspect`, re-armed at last answer + alive_window on
//      every answer) or when `heartbeat_misses` misses fall within the last alive_window.
//      A suspect gets one probe (send_probe) whose deadline is
//        max(now + accrual timeout, last answer + alive_window)
//      where the accrual timeout comes from the measured ping round trips (rtt_accrual:
//      mean + 5.61 sigma, phi = 8, sigma at least 25 ms; at least probe_floor (250 ms), at
//      most probe_timeout; probe_timeout itself until 3 round trips were measured). At the
//      deadline, or on probe_failed, a master that still answered nothing for alive_window
//      is dead (disconnect reason "heartbeat"); any answer (heartbeat_ok, probe_ok) ends
//      the suspicion. So a blackholed master is left within alive_window + the accrual
//      timeout (about alive_window + 0.25 s on a LAN), while a loaded master that answers
//      late but within the window is kept, and a slow one raises its own timeout.
//      connection_lost (rst/eof/timeout) is immediate: no probe.
//   C3 IP change: when a master resolves or connects with an IP different from the last one
//      recorded, log warning "Master ip address changed from X to Y" (Salt's text). In
//      failover the recorded IP is the one of the last active master, so, as in Salt, the
//      line also appears on a switch; in hot mode it is per master.
//   C4 On every connected after the first one of a master (hot) or of the minion
//      (failover), fire `salt/minion/<id>/reconnect` with data {master, previous, reason:
//      reconnect|failover|failback} instead of a fake start event (Salt #66497), and on
//      every connected emit return_queue_flush(i): returns queued while down go out now.
//   C5 aes_rotated(i) on a connected master -> reauth(i, now + uniform(0 .. random_reauth_delay))
//      from the seeded RNG (Salt's documented herd protection, #25447); one pending reauth
//      per master: rotations reported before that time add nothing.
//
// Hot mode (`master_type: str` with a list): every master is independent.
//   H1 start: connect(i) for every master at once, in list order.
//   H2 a failed attempt, dns_failed or a lost/dead connection affects only that master: it
//      retries alone with its own C1 back-off (schedule retry(i), then connect(i)); the
//      others are never delayed (Salt #14128, #28875). dns_failed waits at least retry_dns
//      seconds when retry_dns > 0.
//   H3 job de-duplication by jid is not done here (the job queue does it); the state is
//      which masters are up (is_up(i)).
//   H4 random_master/master_shuffle is ignored in hot mode (as Salt, which warns).
//
// Failover mode (`master_type: failover`): one master at a time.
//   F1 start: try the masters in list order; the first that connects wins. random_master or
//      master_shuffle shuffles the list with the seeded RNG; with master_failback only the
//      secondaries (positions 1..n-1) are shuffled: the first entry stays the primary.
//   F2 a failed attempt (connect_failed, connection_lost before connected, dns_failed) moves
//      on to the next master at once: retry_dns is forced to 0 as Salt does (#21082).
//   F3 when the active master dies (C2, or connection_lost): disconnect it, log
//      "Connection to master X lost (why)", move it to the END of the list (Salt #35041
//      semantics, no 3-master dead loop) and start a pass from the new head. The connect
//      after a switch is a re-authentication of the whole fleet against another master, so
//      it is jittered like C5: connect(next, now + uniform(0 .. random_reauth_delay)).
//   F4 when a whole pass fails: wait C1 (growing, jittered, bounded) and start a new pass
//      from the head of the (rotated) list; forever (Salt's master_tries ends in a process
//      restart that does the same thing). The first master that answers is connected.
//   F5 master_failback: while active on a non-primary master, probe the primary (send_probe)
//      every failback_interval (master_failback_interval; master_alive_interval when 0, as
//      Salt; 60 s when both are 0). Switch back only after `failback_probes` consecutive
//      probe_ok (hysteresis, default 3; a probe_failed or deadline resets the count; Salt
//      switches on one ping, so a flapping primary makes it flap too) and only when no job
//      is running (job_started/job_finished): the switch then waits for the last
//      job_finished. At most one switch back per failback_interval. A switch back restores
//      the original (shuffled) order, disconnects the secondary (reason "failback") and
//      connects the primary with the F3 jitter; if the primary fails, the pass goes on.
//   F6 jobs do not hold a failover from a dead master: their returns queue and C4 flushes
//      them to the new master.
// ---------------------------------------------------------------------------------------
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace sylvite::config {
struct minion_config;
}

namespace sylvite::minion {

using mm_ms = std::chrono::milliseconds;
using mm_time = std::chrono::time_point<std::chrono::steady_clock, mm_ms>;

enum class mm_mode { hot, failover };
enum class loss_reason { rst, eof, timeout };
std::string_view to_string(loss_reason r);
enum class mm_log_level { debug, info, warning, error, critical };

struct masters_settings {
  std::vector<std::string> masters;     // as configured (host or host:port)
  mm_mode mode = mm_mode::hot;
  std::string minion_id;                // for the reconnect event tag
  bool shuffle = false;                 // random_master || master_shuffle (failover only)
  bool failback = false;
  mm_ms alive_window{30000};            // C2
  int heartbeat_misses = 3;             // C2
  mm_ms probe_timeout{5000};            // C2: the accrual timeout's ceiling; failback probes
  mm_ms probe_floor{250};               // C2: the accrual timeout's floor
  mm_ms failback_interval{60000};       // F5
  int failback_probes = 3;              // F5 hysteresis
  mm_ms random_reauth_delay{10000};     // C5 / F3 (0: no jitter)
  mm_ms backoff_initial{1000};          // C1
  mm_ms backoff_max{10000};             // C1
  mm_ms retry_dns{30000};               // H2 (failover: ignored, F2)
  std::uint64_t seed = 0;               // RNG seed (tests: fixed; daemon: random_device)
};

// Salt option mapping (rules C1, C2, F5 give the defaults for 0 values).
masters_settings masters_settings_from(const config::minion_config& c, std::uint64_t seed);

struct timer_id {
  enum class kind { retry, cycle, failback, probe_deadline, suspect } type = kind::retry;
  std::size_t index = 0;  // retry, probe_deadline, suspect: the master; others: 0
  bool operator==(const timer_id&) const = default;
  auto operator<=>(const timer_id&) const = default;
};

struct mm_action {
  enum class kind { connect, disconnect, send_probe, schedule, log, fire_event, return_queue_flush, reauth };
  kind type = kind::log;
  std::size_t index = 0;                       // connect, disconnect, send_probe, flush, reauth
  mm_time at{};                                // connect, schedule, reauth
  mm_ms timeout{0};                            // send_probe: how long the probe may wait
  timer_id timer{};                            // schedule
  mm_log_level level = mm_log_level::info;     // log
  std::string text;                            // disconnect: reason; log: message; fire_event: tag
  std::map<std::string, std::string> data;     // fire_event
};

struct mm_event {
  enum class kind { start, connected, connect_failed, connection_lost, heartbeat_ok, heartbeat_missed,
                    probe_ok, probe_failed, timer, job_started, job_finished, aes_rotated,
                    dns_resolved, dns_failed };
  kind type = kind::start;
  mm_time now{};
  std::size_t index = 0;
  std::string ip;                              // connected, dns_resolved
  loss_reason reason = loss_reason::eof;       // connection_lost
  timer_id timer{};                            // timer
  std::string jid;                             // job_started, job_finished
  mm_time answered{};                          // heartbeat_ok: when the master answered ({}: now)
  std::chrono::microseconds rtt{-1};           // heartbeat_ok, probe_ok: a ping's round trip (<0: none)
  std::vector<std::chrono::microseconds> samples;  // heartbeat_ok: light requests' round trips

  static mm_event make(kind k, mm_time now, std::size_t i = 0) {
    mm_event e;
    e.type = k;
    e.now = now;
    e.index = i;
    return e;
  }
};

// C2's accrual estimate of how long an answer may take: the last 64 measured round trips,
// mean + z * sigma with z = 5.61 (phi = -log10 P(later) = 8 under a normal fit), sigma at
// least 25 ms. Empty until 3 samples.
class rtt_accrual {
 public:
  static constexpr std::size_t kSamples = 64;
  static constexpr std::size_t kMinSamples = 3;
  void add(std::chrono::microseconds rtt);
  std::size_t size() const noexcept { return n_; }
  std::optional<std::chrono::microseconds> timeout() const;

 private:
  std::array<double, kSamples> us_{};
  std::size_t n_ = 0, next_ = 0;
};

class masters_fsm {
 public:
  explicit masters_fsm(masters_settings s);

  std::vector<mm_action> handle(const mm_event& ev);

  mm_mode mode() const noexcept { return s_.mode; }
  std::size_t size() const noexcept { return m_.size(); }
  bool is_up(std::size_t i) const noexcept;
  std::optional<std::size_t> active() const noexcept { return active_; }      // failover
  std::optional<std::size_t> attempting() const noexcept { return attempt_; }  // failover
  const std::vector<std::size_t>& order() const noexcept { return order_; }    // failover
  std::size_t primary() const noexcept { return original_.empty() ? 0 : original_.front(); }
  std::size_t jobs_in_flight() const noexcept { return jobs_.size(); }
  int failback_ok_count() const noexcept { return failback_ok_; }
  mm_ms heartbeat_interval() const noexcept;
  // C2: the deadline a liveness probe of master i gets now (the accrual timeout).
  mm_ms probe_timeout_of(std::size_t i) const;
  const masters_settings& settings() const noexcept { return s_; }

 private:
  struct master {
    enum class st { idle, connecting, up, backoff } state = st::idle;
    std::string ip;            // last IP seen (hot mode C3)
    mm_ms backoff{0};
    std::deque<mm_time> misses;
    bool probing = false;      // liveness probe outstanding
    mm_time last_answer{};     // C2: the master's last answer (or connected)
    rtt_accrual rtt;           // C2: its measured ping round trips
    bool ever_up = false;
    mm_time reauth_until{};
    bool reauth_pending = false;
  };
  using out = std::vector<mm_action>;

  void arm(out& o, timer_id id, mm_time at);
  void log(out& o, mm_log_level l, std::string msg);
  mm_ms jitter_upto(mm_ms n);
  mm_ms next_backoff(mm_ms& b);
  void note_ip(out& o, std::size_t i, const std::string& ip);

  void on_timer(out& o, const mm_event& ev);
  void on_connected(out& o, const mm_event& ev);
  void on_attempt_failed(out& o, std::size_t i, mm_time now, const std::string& why, bool dns);
  void on_dead(out& o, std::size_t i, mm_time now, const std::string& why);
  void on_heartbeat_missed(out& o, std::size_t i, mm_time now);
  void on_answer(out& o, std::size_t i, mm_time at, std::chrono::microseconds rtt,
                 std::span<const std::chrono::microseconds> samples = {});
  void suspect(out& o, std::size_t i, mm_time now, const std::string& why);
  void on_probe(out& o, std::size_t i, mm_time now, bool ok,
                std::chrono::microseconds rtt = std::chrono::microseconds(-1));
  void on_aes(out& o, std::size_t i, mm_time now);

  // failover
  void try_position(out& o, std::size_t pos, mm_time at);
  void start_pass(out& o, mm_time now, bool jitter);
  void maybe_failback(out& o, mm_time now);

  masters_settings s_;
  std::mt19937_64 rng_;
  std::vector<master> m_;
  std::map<timer_id, mm_time> armed_;
  // failover
  std::vector<std::size_t> original_;  // order after the start shuffle (failback restores it)
  std::vector<std::size_t> order_;     // current order (the dead move to the end)
  std::size_t pos_ = 0;                // position of the current attempt in order_
  std::optional<std::size_t> attempt_;
  std::optional<std::size_t> active_;
  std::optional<std::size_t> previous_;
  std::string switch_reason_;          // reason of the next reconnect event
  std::string last_ip_;                // C3 in failover (Salt's opts["master_ip"])
  bool ever_connected_ = false;
  mm_ms cycle_backoff_{0};
  int failback_ok_ = 0;
  bool failback_probe_out_ = false;
  bool failback_pending_ = false;
  std::optional<mm_time> last_failback_;
  std::set<std::string> jobs_;
  bool started_ = false;
};

}  // namespace sylvite::minion
