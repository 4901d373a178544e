// sylvite::minion session (sans-I/O): the life of ONE configured master's connection, from
// masters_fsm's connect(i) to the loss of the publish socket. No sockets, no clock, no sleeps:
// the driver (minion/driver.cpp) feeds events, each carrying `now`, and performs the returned
// actions in order. masters_fsm decides WHICH master and WHEN; connection_fsm decides the
// sign-in/acceptance/back-off steps of one attempt; this machine ties them to one master's
// channels and owns every per-master rule in between.
// Thread-safety: none; owned and driven by one thread (the driver's io thread).
//
// Generations: every connect (and disconnect/stop) bumps gen(). Each action carries the gen it
// was issued under and each result event carries it back: a result of an older gen is ignored
// (late callbacks of an abandoned connection), and the driver skips a queued action whose gen is
// no longer current (a `report` earlier in the same batch may have made masters_fsm reconnect
// or disconnect this master). Timer events carry the seq of the wait they answer; one wait per
// master is armed at a time (a new wait replaces the old one).
//
// ---------------------------------------------------------------------------------------
//   event                      -> actions (phase change)
//   connect(at)                   close; at > now: log + wait -> timer -> resolve;
//                                 else resolve                  (delaying / resolving)
//   resolved(ip)                  report dns_resolved(ip), open(ip), then connection_fsm start
//                                 -> sign_in                    (attempting)
//   resolve_failed                log error, report dns_failed  (idle)
//   signed_in(timeout|io_error|result)
//                                 several masters and rejected/finger mismatch: log critical,
//                                 report connect_failed (idle: masters_fsm retries it later);
//                                 failover with several masters and pending/rejected_retry:
//                                 log, report connect_failed (the next master is tried);
//                                 else connection_fsm's next step:
//                                   sign_in again | wait(acceptance) -> timer -> sign_in |
//                                   connect_pub(port) | exit(code, delay) (exiting) |
//                                   failed attempt: log, report connect_failed (idle)
//   pub_connected | pub_failed    start(first) | failed attempt
//                                 first: the first session of this master (hot) or of the
//                                 minion (failover): _pillar + start events; else _pillar only
//   started(pub_up) | start_failed
//                                 the publish socket closed meanwhile (or !pub_up): report
//                                 connect_failed (idle); else log "ready" (first of the
//                                 minion), report connected(ip) (serving)
//   pub_closed(reason)            serving: report connection_lost(reason) (idle); otherwise
//                                 remembered: the attempt in progress fails at `started`
//   fatal(code)                   (a request-path re-auth was rejected / finger mismatch)
//                                 one master: exit(code) now; several: serving -> log
//                                 critical, report connection_lost(eof) (idle)
//   disconnect(why)               log, close (idle)
//   stop                          close (stopped: every later event is ignored)
//   reauth(at)                    serving: wait until at -> timer -> reauth; publishes held
//                                 meanwhile
//   reauth_done(ok)               replay the held publishes (ok) or log them dropped
//   publish(body, has_creds)      no credentials or a reauth pending: hold it (at most
//                                 max_held) and, serving, reauth now; else decode(body)
//   publish_rotated(body)         (the decode asked for a re-auth: AES key rotated) hold it,
//                                 report aes_rotated (masters_fsm's C5 jitter gives reauth(at))
//                                 with follow_up -> rotation_reported: still no reauth
//                                 pending (C5 added nothing): reauth now
//   heartbeat(last_ok)            serving, no ping out: the master answered within
//                                 heartbeat_interval -> report heartbeat_ok(answered =
//                                 last_ok); else ping. Its samples go with the next
//                                 heartbeat_ok.
//   ping_done(ok, rtt)            serving: report heartbeat_ok(answered = now, rtt) |
//                                 heartbeat_missed
//   probe(timeout)                probe(on_channel = serving, delay = timeout, else
//                                 probe_timeout) -> probe_done(ok, rtt): report
//                                 probe_ok(rtt) | probe_failed
//   flush(queued)                 serving, none running, queued > 0: flush -> flush_done(
//                                 sent, queued): sent some and more wait -> flush again
// ---------------------------------------------------------------------------------------
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/wire/value.hpp"
#include "minion/auth.hpp"
#include "minion/connection.hpp"
#include "minion/masters.hpp"

namespace sylvite::minion {

struct session_settings {
  std::size_t index = 0;         // position in the configured master list (masters_fsm's i)
  std::string label;             // the master as configured (logs)
  std::string host;              // the parsed host name (DNS log line)
  bool single = true;            // the only configured master
  bool failover = false;         // master_type: failover
  connection_settings conn;      // connection_fsm's
  std::function<int(int, int)> jitter;  // connection_fsm's rejected-exit delay (tests: fixed)
  mm_ms heartbeat_interval{10000};      // masters_fsm::heartbeat_interval()
  mm_ms probe_timeout{5000};            // masters_settings::probe_timeout
  std::size_t max_held = 256;           // publishes held while re-authenticating
};

enum class session_phase { idle, delaying, resolving, attempting, serving, exiting, stopped };
std::string_view to_string(session_phase p);

// What a sign-in request came to (the driver's view of one `_auth` round trip).
enum class sign_in_outcome { result, timeout, io_error };

struct session_event {
  enum class kind {
    connect, timer, resolved, resolve_failed, signed_in, pub_connected, pub_failed, started, start_failed,
    pub_closed, fatal, disconnect, stop, reauth, reauth_done, publish, publish_rotated, rotation_reported,
    heartbeat, ping_done, probe, probe_done, flush, flush_done
  };
  kind type = kind::connect;
  mm_time now{};
  std::uint64_t gen = 0;         // results: the gen of the action answered
  std::uint64_t seq = 0;         // timer: the seq of the wait answered
  bool minion_served = false;    // every event: some master has served since the minion started
  mm_time at{};                  // connect, reauth
  std::string ip;                // resolved
  sign_in_outcome outcome = sign_in_outcome::io_error;  // signed_in
  auth_status status = auth_status::failed;             // signed_in (result)
  int publish_port = 0;                                 // signed_in (accepted)
  bool pub_up = true;            // started: the publish socket is still connected
  loss_reason reason = loss_reason::eof;  // pub_closed
  int code = 0;                  // fatal
  std::string why;               // disconnect
  bool ok = false;               // reauth_done, ping_done, probe_done
  bool has_creds = true;         // publish: the channel holds the publish AES key
  wire::value body;              // publish, publish_rotated
  mm_time last_ok{};             // heartbeat: when the master last answered a request
  std::chrono::microseconds rtt{-1};  // ping_done, probe_done (ok): the round trip
  std::vector<std::chrono::microseconds> samples;  // heartbeat: light requests' round trips
  mm_ms timeout{0};              // probe: how long it may wait (0: probe_timeout)
  std::size_t queued = 0;        // flush, flush_done: returns waiting for this master
  std::size_t sent = 0;          // flush_done

  static session_event make(kind k, mm_time now, std::uint64_t gen = 0) {
    session_event e;
    e.type = k;
    e.now = now;
    e.gen = gen;
    return e;
  }
};

struct session_action {
  enum class kind {
    close,        // drop the publish socket, the request channel and the timer
    wait,         // (re)arm the master's timer for `delay` -> timer(seq)
    resolve,      // resolve the master's host -> resolved(ip) | resolve_failed
    open,         // a new request channel to ip
    sign_in,      // one de-duplicated sign-in, `delay` timeout -> signed_in
    connect_pub,  // publish socket on `port`, hello -> pub_connected | pub_failed
    start,        // _pillar, then the start events when `first` -> started(pub_up) | start_failed
    exit,         // the minion exits with `code` after `delay`
    report,       // feed `event` to masters_fsm; then, if follow_up, rotation_reported back
    log,          // `level`, `text`
    reauth,       // re-authenticate on the channel -> reauth_done(ok)
    decode,       // decode bodies[0]: admit it or report publish_rotated
    replay,       // decode `bodies` after a re-authentication (a second rotation is an error)
    ping,         // clear ping on the channel, `delay` timeout -> ping_done(ok)
    probe,        // clear ping, `delay` timeout, on the channel if on_channel else on a fresh
                  // connection -> probe_done(ok)
    flush,        // send the queued returns -> flush_done(sent, queued)
  };
  kind type = kind::log;
  std::uint64_t gen = 0;
  mm_ms delay{0};                 // wait, sign_in, exit, ping, probe
  std::uint64_t seq = 0;          // wait
  std::string ip;                 // open
  int port = 0;                   // connect_pub
  bool first = false;             // start
  int code = 0;                   // exit
  mm_event event;                 // report
  bool follow_up = false;         // report
  mm_log_level level = mm_log_level::info;  // log
  std::string text;               // log
  std::vector<wire::value> bodies;  // decode, replay
  bool on_channel = false;        // probe
};

class session_fsm {
 public:
  explicit session_fsm(session_settings s);

  std::vector<session_action> handle(const session_event& ev);

  session_phase phase() const noexcept { return phase_; }
  bool serving() const noexcept { return phase_ == session_phase::serving; }
  std::uint64_t gen() const noexcept { return gen_; }
  bool ever_served() const noexcept { return ever_served_; }
  bool reauth_pending() const noexcept { return reauth_pending_; }
  bool pub_lost() const noexcept { return pub_lost_; }
  bool pinging() const noexcept { return pinging_; }
  bool flushing() const noexcept { return flushing_; }
  std::size_t held() const noexcept { return held_.size(); }
  const std::string& ip() const noexcept { return ip_; }
  // The attempt's connection machine (nullopt outside an attempt).
  const std::optional<connection_fsm>& attempt() const noexcept { return conn_; }
  const session_settings& settings() const noexcept { return s_; }

 private:
  using out = std::vector<session_action>;
  enum class timer_use { none, connect_delay, attempt_wait, reauth };

  session_action act(session_action::kind k) const;
  void log(out& o, mm_log_level l, std::string text) const;
  void report(out& o, mm_event::kind k, mm_time now, bool follow_up = false) const;
  void wait(out& o, mm_ms delay, timer_use use);
  void close(out& o);
  void resolve(out& o);
  void step(out& o, const conn_action& a, const session_event& ev);
  void feed_conn(out& o, conn_event::kind k, const session_event& ev);
  void attempt_failed(out& o, const session_event& ev);
  void schedule_reauth(out& o, mm_time at, mm_time now);
  void hold(out& o, wire::value body);

  void on_timer(out& o, const session_event& ev);
  void on_signed_in(out& o, const session_event& ev);
  void on_started(out& o, const session_event& ev);
  void on_fatal(out& o, const session_event& ev);

  session_settings s_;
  session_phase phase_ = session_phase::idle;
  std::uint64_t gen_ = 0;
  std::uint64_t seq_ = 0;
  timer_use timer_ = timer_use::none;
  std::optional<connection_fsm> conn_;
  mm_ms sign_in_timeout_{0};
  std::string ip_;
  bool ever_served_ = false;
  bool pub_lost_ = false;
  bool reauth_pending_ = false;
  bool pinging_ = false;
  std::vector<std::chrono::microseconds> samples_;  // C2: for the next heartbeat_ok report
  bool flushing_ = false;
  std::deque<wire::value> held_;
};

}  // namespace sylvite::minion
