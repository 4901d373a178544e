// sylvite::minion master_channel: the request side of one master connection (Asio; included
// only by the minion's Asio translation units: master_channel.cpp, driver.cpp, call_client.cpp).
//   - a transport::req_client to the master;
//   - the credentials of the last accepted sign-in (publish AES key, v3 session key, the
//     master's public key);
//   - de-duplicated sign-in: a sign-in (or re-authentication) asked for while one is in
//     flight waits for it instead of sending another;
//   - AES requests with Salt's "decrypt failed -> re-auth -> retry once" rule and transport
//     timeouts retried up to `tries`;
//   - the send_private `_pillar` fetch (re-auth and ask once more when the reply has no key or
//     its signature does not verify), `_minion_event`, and the clear `ping`;
//   - master_link for job threads (hops onto the io thread, blocks only the caller).
// Which master, when and what a sign-in outcome means are decided elsewhere (session_fsm,
// masters_fsm); fatal outcomes of a re-authentication are reported through on_fatal.
// Thread-safety: every coroutine and the credentials on the io thread; pillar()/set_pillar()
// and the master_link calls from any thread (a job thread, salt-call's main thread; never
// the io thread: they block until the io thread answers).
#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/config/config.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/transport/transport.hpp"
#include "core/transport/zmq.hpp"
#include "core/wire/value.hpp"
#include "minion/auth.hpp"
#include "minion/channel.hpp"
#include "minion/errors.hpp"
#include "minion/modules.hpp"
#include "minion/session.hpp"

namespace sylvite::minion {

namespace asio = boost::asio;

// The transport options of the minion config (frame size, keepalive, connect timeout).
transport::options transport_options(const config::minion_config& cfg);
// The minion's transport (`transport`: zeromq, Salt's default, or tcp) and its ZeroMQ options.
transport::kind transport_kind(const config::minion_config& cfg);
transport::zmq_options zmq_options_of(const config::minion_config& cfg);

// Salt's status.ping_master request: {"cmd": "ping", "id"} in the clear (the master echoes
// it). The heartbeat and the probes send it.
wire::value clear_ping_body(const std::string& id);

// A uniform integer in [lo, hi] (hi <= lo: lo).
int rand_between(int lo, int hi);

// A one-shot event coroutines can wait for (io thread only).
class io_event {
 public:
  explicit io_event(asio::any_io_executor ex) : timer_(ex) { timer_.expires_at(asio::steady_timer::time_point::max()); }
  asio::awaitable<void> wait() {
    if (fired_) co_return;
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  void fire() {
    fired_ = true;
    timer_.cancel();
  }
  bool fired() const { return fired_; }

 private:
  asio::steady_timer timer_;
  bool fired_ = false;
};

// Runs the coroutine make() returns on the io thread and blocks the calling thread (a job
// thread or salt-call's main thread, never the io thread) until it is done; an exception
// gives on_error. make and what it captures live until the coroutine ends.
template <class F, class T = typename std::invoke_result_t<F&>::value_type>
T run_on_io(asio::io_context& io, F make, std::type_identity_t<T> on_error) {
  auto prom = std::make_shared<std::promise<T>>();
  auto fut = prom->get_future();
  asio::co_spawn(
      io,
      [prom, make = std::move(make), on_error = std::move(on_error)]() mutable -> asio::awaitable<void> {
        try {
          prom->set_value(co_await make());
        } catch (...) {
          prom->set_value(std::move(on_error));
        }
      },
      asio::detached);
  return fut.get();
}

struct sign_in_attempt_result {
  sign_in_outcome kind = sign_in_outcome::io_error;
  auth_result res;
};

class master_channel : public master_link, public std::enable_shared_from_this<master_channel> {
 public:
  // host/port: the master this channel talks to (an address already resolved by the
  // driver, or the configured name for salt-call). label: the master as configured.
  master_channel(asio::io_context& io, const config::minion_config& cfg, std::shared_ptr<const auth_client> auth,
                 std::shared_ptr<const wire::value> grains, std::string host, int port, transport::options topt,
                 std::string label = {});

  const config::minion_config& cfg() const { return cfg_; }
  const auth_client& auth() const { return *auth_; }
  const std::string& master_host() const { return master_host_; }
  const std::string& label() const { return label_; }
  // Steady time of the last request the master answered (heartbeats skip busy links).
  std::chrono::steady_clock::time_point last_ok() const { return last_ok_; }
  // Round trips of the light requests answered since the last call (_return,
  // _minion_event: the master acknowledges them without work): the liveness detector's
  // samples beside its own pings (io thread; at most 64 kept).
  std::vector<std::chrono::microseconds> take_rtt_samples() { return std::exchange(rtt_samples_, {}); }
  std::shared_ptr<const wire::value> grains() const { return grains_; }
  std::shared_ptr<const wire::value> pillar() const;
  void set_pillar(wire::value p);
  bool has_creds() const { return static_cast<bool>(aes_); }
  std::shared_ptr<crypto::crypticle> aes() const { return aes_; }
  const crypto::rsa_key* master_key() const { return master_key_ ? &*master_key_ : nullptr; }
  // A re-authentication was rejected (77) or the master_finger did not match (42).
  std::function<void(int)> on_fatal;  // io thread

  void forget_creds();
  void close();

  // One sign-in request. Installs credentials when accepted.
  asio::awaitable<sign_in_attempt_result> sign_in_attempt(std::chrono::milliseconds timeout);
  // De-duplicated re-authentication for the request and publish paths: waits for a
  // sign-in in flight, or runs one (auth_tries attempts on timeout). true if we have creds.
  asio::awaitable<bool> reauth();
  // The connection attempt's sign-in: waits for one in flight (and takes its credentials),
  // else marks its own as in flight so that concurrent reauth() calls wait for it.
  asio::awaitable<sign_in_attempt_result> fsm_sign_in(std::chrono::milliseconds timeout);
  // AES request: v3 envelope, session key, nonce; decrypt failure or a text reply ->
  // re-auth and retry once; transport timeouts retried up to `tries`.
  asio::awaitable<result<wire::value>> request(wire::value load, std::chrono::milliseconds timeout, int tries);
  // `_pillar` (send_private).
  asio::awaitable<result<wire::value>> pillar_request();
  // `_minion_event` (fire_master).
  asio::awaitable<bool> fire_event(std::string tag, wire::value data);
  // The clear ping on this channel's connection: the application-level heartbeat and probe.
  asio::awaitable<bool> ping(std::chrono::milliseconds timeout);

  // master_link (job threads, salt-call's main thread).
  result<wire::value> send(wire::value load, std::chrono::milliseconds timeout, int tries) override;
  result<wire::value> fetch_pillar() override;

 private:
  void install(const auth_creds& c);
  void end_auth();
  void fatal(int code);

  asio::io_context& io_;
  const config::minion_config& cfg_;
  std::shared_ptr<const auth_client> auth_;
  request_identity who_;
  std::string master_host_;
  std::string label_;
  std::chrono::steady_clock::time_point last_ok_{};
  std::vector<std::chrono::microseconds> rtt_samples_;
  int master_port_ = 4506;
  std::shared_ptr<transport::req_client> req_;
  // io thread only:
  auth_creds creds_;
  std::shared_ptr<crypto::crypticle> aes_, session_;
  std::optional<crypto::rsa_key> master_key_;
  bool auth_running_ = false;
  std::vector<std::shared_ptr<io_event>> auth_waiters_;
  std::atomic<bool> closed_{false};
  // shared with job threads:
  mutable std::mutex mu_;
  std::shared_ptr<const wire::value> grains_;
  std::shared_ptr<const wire::value> pillar_;
};

}  // namespace sylvite::minion
