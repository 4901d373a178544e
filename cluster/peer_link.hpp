// sylvite::cluster outbound peer link state machine (sans-I/O): one link from this master
// to one peer address (peer_bus.hpp): the handshake, the back-off after a failed one, the
// bounded queue, batching and the acknowledgement of each batch. No sockets, no clock, no
// sleeps: the driver (peer_bus.cpp) feeds events and performs the returned actions in order.
//
// Driver events (each answers the one action the driver was waiting on)   Actions
//   start            once                                                  connect      make the connection (lazy)
//   connect_failed   the hello request failed (transport error, timeout)   send_hello   hello, wait for the welcome
//   welcome_refused  the reply is no valid welcome (why)                   send_batch   seal {seq, msgs}, wait for ack
//   welcome          a valid welcome (peer id, link id; duplicate: another arm_timer    wait `delay` (or a wake)
//                    link to that peer is up)                              close        close the connection
//   ack / ack_failed the batch was acknowledged / not (why)                report_up    the link to `peer` is up
//   timer_fired      the wait ended (delay elapsed, or woken)               hand_over    move the queue to the other
// External events (any thread, under the bus lock)                                      link to `peer` (duplicate)
//   offer(msg)       a message for this peer                               log          level + text
//   removed          peers/<id>.pub is gone: drop the queue and the link   wake         end the current wait early
//   revived          the peer joined again                                 finish       the link is over
//   stop             the bus stops
// Every driver event yields exactly one waiting action (send_hello, send_batch, arm_timer
// or finish), last in the list; external events yield only close, wake and log.
//
// Rules
//   L1 start: handshake at once (connect + send_hello), even with nothing queued.
//   L2 a failed handshake: log (warning, once per distinct reason), close, and wait the
//      back-off b/2 + uniform(0 .. b/2), b = 0.5 s doubling per consecutive failure up to
//      10 s; then handshake again. A message offered meanwhile wakes the wait (an
//      immediate attempt). A refusal saying "a hello from myself" ends the link (the
//      address is this master: status self, queue discarded).
//   L3 welcome: status up, back-off reset, link id and seq = 1 kept; log info "is up",
//      report_up; then send what is queued, or wait idle (60 s, woken by an offer).
//      A welcome from a peer already linked at another address ends this link (status
//      duplicate): its queue is handed over to that link.
//   L4 batches: the first min(batch, queued) messages, with the link's seq. ack: they
//      leave the queue, seq + 1, the next batch goes at once. ack_failed (any reason,
//      "unknown link" included: the peer restarted): log once per distinct reason, close,
//      and handshake again at once (no back-off): the queue is kept and sent again.
//   L5 the queue holds at most max_queue messages: more are dropped and counted, with one
//      error log until a batch is acknowledged again. A link that is self, duplicate,
//      removed or stopped takes no message.
//   L6 removed: status removed, queue discarded, the link forgotten; it waits (2 s
//      rounds) until revived (status connecting, a new handshake) or stopped.
//   L7 stop: close and wake; the next driver event finishes the link.
// Thread-safety: none; the bus guards each machine with its lock.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/peer_protocol.hpp"

namespace sylvite::cluster {

struct link_settings {
  std::string addr;                          // for logs
  std::string self_id;                       // this master (status self)
  std::size_t max_queue = 100000;            // messages
  std::size_t batch = 256;                   // messages per request
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{10000};
  std::chrono::milliseconds idle_wait{60000};     // up, nothing queued
  std::chrono::milliseconds removed_wait{2000};   // removed, waiting to be revived
  std::uint64_t seed = 0;                    // back-off jitter (tests: fixed)
};

// What operators see in salt-run cluster.peers.
enum class link_status { connecting, up, backoff, self, duplicate, removed };
std::string_view to_string(link_status s);

enum class link_log_level { debug, info, warning, error };

struct link_event {
  enum class kind { start, connect_failed, welcome_refused, welcome, ack, ack_failed, timer_fired, removed, revived,
                    stop };
  kind type = kind::start;
  std::string why;        // connect_failed, welcome_refused, ack_failed
  std::string peer_id;    // welcome
  std::string link_id;    // welcome
  bool duplicate = false; // welcome
  std::uint64_t seq = 0;  // ack

  static link_event make(kind k, std::string why = {}) {
    link_event e;
    e.type = k;
    e.why = std::move(why);
    return e;
  }
  static link_event welcome(std::string peer, std::string link, bool duplicate = false) {
    link_event e;
    e.type = kind::welcome;
    e.peer_id = std::move(peer);
    e.link_id = std::move(link);
    e.duplicate = duplicate;
    return e;
  }
  static link_event ack(std::uint64_t seq) {
    link_event e;
    e.type = kind::ack;
    e.seq = seq;
    return e;
  }
};

struct link_action {
  enum class kind { connect, send_hello, send_batch, arm_timer, close, report_up, hand_over, log, wake, finish };
  kind type = kind::log;
  std::chrono::milliseconds delay{0};   // arm_timer
  std::string link_id;                  // send_batch
  std::uint64_t seq = 0;                // send_batch
  std::vector<peer_message> batch;      // send_batch
  std::string peer_id;                  // report_up, hand_over
  link_log_level level = link_log_level::info;  // log
  std::string text;                     // log
};

class peer_link {
 public:
  explicit peer_link(link_settings s);

  std::vector<link_action> resume(const link_event& ev);

  struct offer_result {
    bool queued = false;
    std::vector<link_action> actions;
  };
  offer_result offer(peer_message m);
  // duplicate: the queue to hand over; the receiver appends it (no bound: it was queued
  // within bounds already) and returns the actions for itself (a wake).
  std::deque<peer_message> take_queue();
  std::vector<link_action> adopt(std::deque<peer_message> q);

  // Takes messages (not self, duplicate, removed or stopped).
  bool sendable() const noexcept;
  link_status status() const noexcept { return status_; }
  const std::string& peer_id() const noexcept { return peer_id_; }  // known after a welcome
  const std::string& last_error() const noexcept { return last_error_; }
  std::size_t queued() const noexcept { return q_.size(); }
  std::uint64_t sent() const noexcept { return sent_; }
  std::uint64_t dropped() const noexcept { return dropped_; }
  bool stopped() const noexcept { return stopped_; }
  // Observers for tests.
  std::chrono::milliseconds backoff() const noexcept { return backoff_; }
  std::uint64_t seq() const noexcept { return seq_; }
  bool linked() const noexcept { return !link_id_.empty(); }
  const link_settings& settings() const noexcept { return s_; }

 private:
  // What the driver is doing (status_ is what operators see; they differ: a handshake
  // after a failed one shows "backoff", as it always did).
  enum class phase { idle, handshaking, backoff, up_idle, sending, removed, over };
  using out = std::vector<link_action>;

  void log(out& o, link_log_level l, std::string text);
  void handshake(out& o);
  void next_after_up(out& o);
  void wait(out& o, std::chrono::milliseconds d);
  void finish(out& o);
  void on_handshake_failed(out& o, const std::string& why);
  void on_welcome(out& o, const link_event& ev);

  link_settings s_;
  std::mt19937_64 rng_;
  phase phase_ = phase::idle;
  link_status status_ = link_status::connecting;
  bool stopped_ = false;
  std::string peer_id_;
  std::string last_error_;
  std::deque<peer_message> q_;
  std::size_t in_flight_ = 0;  // messages in the batch being sent
  std::string link_id_;
  std::uint64_t seq_ = 1;
  std::chrono::milliseconds backoff_{0};
  std::uint64_t sent_ = 0;
  std::uint64_t dropped_ = 0;
  bool warned_full_ = false;
};

}  // namespace sylvite::cluster
