// sylvite::minion Asio drivers (see daemon.hpp). The only minion file that includes Asio.
//
// session:   one master: req_client, sign-in (de-duplicated: concurrent re-auth requests
//            wait for the one in flight), credentials (publish AES + v3 session Crypticles),
//            AES requests with Salt's "decrypt failed -> re-auth -> retry once" rule, and the
//            send_private pillar fetch. All state lives on the io thread.
// daemon:    every configured master (a single master is a list of one) under masters_fsm
//            (hot mode or failover, minion/masters.hpp): each action is performed and the
//            outcome fed back as an event. One master_conn per master; a connection attempt
//            resolves the name, runs connection_fsm (sign-in, publish socket, pillar) and
//            reports `connected`; the publish socket's closed handler reports the loss; a
//            heartbeat loop pings every connected master (clear `ping`, Salt's
//            status.ping_master) unless it answered something recently.
//            Publishes: decode (AES rotation -> jittered re-auth, held publishes replayed),
//            target, de-dup by jid across masters, hand the job to the pool; the pool thread
//            runs the module and returns to the master that published the job (hot) or the
//            active master (failover); a return that cannot be delivered goes to the on-disk
//            return_queue and is flushed when a master connects.
// call:      salt-call's session (no publish socket).
#include "minion/daemon.hpp"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <ctime>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "core/crypto/crypticle.hpp"
#include "core/transport/transport.hpp"
#include "core/util/pub_serial.hpp"
#include "minion/auth.hpp"
#include "minion/channel.hpp"
#include "minion/connection.hpp"
#include "minion/errors.hpp"
#include "minion/jobs.hpp"
#include "minion/masters.hpp"
#include "minion/replay_guard.hpp"
#include "minion/return_queue.hpp"

// GCC 12 reports a false -Wmismatched-new-delete on Asio coroutine frames when a
// coroutine is inlined into its caller (seen with -O2 and with the sanitizer flags): Asio's
// awaitable_frame_base pairs its own operator new/delete. clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace sylvite::minion {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

std::string asctime_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a %b %e %H:%M:%S %Y", &tm);  // Python time.asctime()
  return buf;
}

int rand_between(int lo, int hi) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  if (hi <= lo) return lo;
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

transport::options transport_options(const config::minion_config& cfg) {
  transport::options o;
  o.max_frame_size = static_cast<std::size_t>(cfg.max_message_size);
  o.tcp_keepalive = cfg.tcp_keepalive;
  o.keepalive_idle = cfg.tcp_keepalive_idle;
  o.keepalive_intvl = cfg.tcp_keepalive_intvl;
  o.keepalive_cnt = cfg.tcp_keepalive_cnt;
  o.connect_timeout = milliseconds(std::max(1, cfg.auth_timeout) * 1000);
  return o;
}

// A one-shot event coroutines can wait for (io thread only).
class io_event {
 public:
  explicit io_event(asio::any_io_executor ex) : timer_(ex) { timer_.expires_at(asio::steady_timer::time_point::max()); }
  awaitable<void> wait() {
    if (fired_) co_return;
    co_await timer_.async_wait(asio::as_tuple(use_awaitable));
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

// Salt's status.ping_master request: {"cmd": "ping", "id"} in the clear (the master echoes
// it). The heartbeat and the probes send it.
wire::value clear_ping_body(const std::string& id) {
  wire::value load = wire::value::object();
  load["cmd"] = "ping";
  load["id"] = id;
  wire::value body = wire::value::object();
  body["enc"] = "clear";
  body["load"] = std::move(load);
  body["version"] = 3;
  return body;
}

// Runs the coroutine make() returns on the io thread and blocks the calling thread (a job
// thread or salt-call's main thread, never the io thread) until it is done; an exception
// gives on_error. make and what it captures live until the coroutine ends.
template <class F, class T = typename std::invoke_result_t<F&>::value_type>
T run_on_io(asio::io_context& io, F make, std::type_identity_t<T> on_error) {
  auto prom = std::make_shared<std::promise<T>>();
  auto fut = prom->get_future();
  asio::co_spawn(
      io,
      [prom, make = std::move(make), on_error = std::move(on_error)]() mutable -> awaitable<void> {
        try {
          prom->set_value(co_await make());
        } catch (...) {
          prom->set_value(std::move(on_error));
        }
      },
      asio::detached);
  return fut.get();
}

enum class attempt_kind { result, timeout, io_error };
struct attempt_outcome {
  attempt_kind kind = attempt_kind::io_error;
  auth_result res;
};

// ---------------------------------------------------------------------------------------------
// session: one master connection (request side) + credentials.
// ---------------------------------------------------------------------------------------------
class session : public master_link, public std::enable_shared_from_this<session> {
 public:
  // host/port: the master this session talks to (an address already resolved by the
  // daemon, or the configured name for salt-call). label: the master as configured.
  session(asio::io_context& io, const config::minion_config& cfg, std::shared_ptr<const auth_client> auth,
          std::shared_ptr<const wire::value> grains, std::string host, int port, transport::options topt,
          std::string label = {})
      : io_(io), cfg_(cfg), auth_(std::move(auth)), grains_(std::move(grains)),
        pillar_(std::make_shared<const wire::value>(wire::value::object())) {
    master_host_ = std::move(host);
    master_port_ = port;
    label_ = label.empty() ? master_host_ : std::move(label);
    who_.id = cfg_.id;
    who_.tok = auth_->tok();
    who_.enc_name = cfg_.encryption_algorithm;
    who_.sig_name = cfg_.signing_algorithm;
    req_ = transport::req_client::create(io_.get_executor(),
                                         transport::endpoint{master_host_, static_cast<std::uint16_t>(master_port_), {}},
                                         std::move(topt));
  }

  const config::minion_config& cfg() const { return cfg_; }
  const auth_client& auth() const { return *auth_; }
  const std::string& master_host() const { return master_host_; }
  const std::string& label() const { return label_; }
  // Steady time of the last request the master answered (heartbeats skip busy links).
  std::chrono::steady_clock::time_point last_ok() const { return last_ok_; }
  std::shared_ptr<const wire::value> grains() const { return grains_; }
  std::shared_ptr<const wire::value> pillar() const {
    std::lock_guard lk(mu_);
    return pillar_;
  }
  void set_pillar(wire::value p) {
    std::lock_guard lk(mu_);
    pillar_ = std::make_shared<const wire::value>(std::move(p));
  }
  bool has_creds() const { return static_cast<bool>(aes_); }
  std::shared_ptr<crypto::crypticle> aes() const { return aes_; }
  const crypto::rsa_key* master_key() const { return master_key_ ? &*master_key_ : nullptr; }
  // Fatal outcome seen on any path (77 rejected, 42 finger): the daemon exits with it.
  std::optional<int> fatal_exit() const { return fatal_exit_; }
  std::function<void(int)> on_fatal;  // daemon hook (io thread)

  void forget_creds() {
    aes_.reset();
    session_.reset();
  }
  void close() {
    closed_ = true;
    if (req_) req_->close();
    for (auto& w : auth_waiters_) w->fire();
    auth_waiters_.clear();
  }

  // One sign-in request (io thread). Installs credentials when accepted.
  awaitable<attempt_outcome> sign_in_attempt(milliseconds timeout) {
    attempt_outcome out;
    sign_in_request req = auth_->make_request();
    auto r = co_await req_->request(req.body, timeout);
    if (!r) {
      out.kind = r.error() == transport::errc::timeout ? attempt_kind::timeout : attempt_kind::io_error;
      spdlog::debug("Sign-in request to {}:{} failed: {}", master_host_, master_port_, r.error().message());
      co_return out;
    }
    out.kind = attempt_kind::result;
    last_ok_ = std::chrono::steady_clock::now();
    out.res = auth_->handle_reply(req, *r);
    if (out.res.status == auth_status::accepted) install(out.res.creds);
    co_return out;
  }

  // De-duplicated re-authentication for the request and publish paths: waits for a
  // sign-in in flight, or runs one (auth_tries attempts on timeout). true if we have creds.
  awaitable<bool> reauth() {
    if (closed_) co_return false;
    if (auth_running_) {
      auto ev = std::make_shared<io_event>(io_.get_executor());
      auth_waiters_.push_back(ev);
      co_await ev->wait();
      co_return has_creds();
    }
    auth_running_ = true;
    forget_creds();
    bool ok = false;
    for (int i = 0; i < std::max(1, cfg_.auth_tries) && !closed_; ++i) {
      auto o = co_await sign_in_attempt(milliseconds(cfg_.auth_timeout * 1000));
      if (o.kind == attempt_kind::timeout) continue;
      if (o.kind == attempt_kind::result) {
        ok = o.res.status == auth_status::accepted;
        if (o.res.status == auth_status::rejected) fatal(77);
        if (o.res.status == auth_status::finger_mismatch) fatal(42);
      }
      break;
    }
    end_auth();
    co_return ok;
  }

  // FSM path: mark the sign-in as in flight so concurrent reauth() calls wait for it.
  awaitable<attempt_outcome> fsm_sign_in(milliseconds timeout) {
    while (auth_running_) {
      auto ev = std::make_shared<io_event>(io_.get_executor());
      auth_waiters_.push_back(ev);
      co_await ev->wait();
      if (has_creds()) {
        attempt_outcome o;
        o.kind = attempt_kind::result;
        o.res.status = auth_status::accepted;
        o.res.creds = creds_;
        co_return o;
      }
    }
    auth_running_ = true;
    auto o = co_await sign_in_attempt(timeout);
    end_auth();
    co_return o;
  }

  // AES request (io thread): v3 envelope, session key, nonce; decrypt failure or a text
  // reply -> re-auth and retry once; transport timeouts retried up to `tries`.
  awaitable<result<wire::value>> request(wire::value load, milliseconds timeout, int tries) {
    if (!has_creds() && !(co_await reauth())) co_return make_error_code(errc::not_connected);
    bool reauthed = false;
    error_code last = make_error_code(errc::timeout);
    for (int attempt = 1; attempt <= std::max(1, tries);) {
      if (closed_) co_return make_error_code(errc::stopped);
      auto sess = session_;
      if (!sess) {
        if (!(co_await reauth())) co_return make_error_code(errc::not_connected);
        continue;
      }
      const std::string nonce = crypto::uuid4_hex();
      wire::value body = package_aes(load, who_, *sess, nonce, static_cast<std::int64_t>(std::time(nullptr)));
      auto r = co_await req_->request(std::move(body), timeout);
      if (!r) {
        last = r.error();
        ++attempt;
        continue;
      }
      last_ok_ = std::chrono::steady_clock::now();
      auto d = decode_aes_reply(*r, *sess, nonce);
      if (d) co_return std::move(*d);
      if (reauthed) co_return d.error();
      reauthed = true;
      spdlog::debug("Reply to {} could not be decrypted; re-authenticating", wire::get_text(load, "cmd").value_or("?"));
      if (!(co_await reauth())) co_return make_error_code(errc::auth_failed);
    }
    co_return last;
  }

  // `_pillar` (send_private): re-auth and ask again once when the reply has no `key`.
  awaitable<result<wire::value>> pillar_request() {
    if (!has_creds() && !(co_await reauth())) co_return make_error_code(errc::not_connected);
    wire::value load = wire::value::object();
    load["id"] = cfg_.id;
    load["grains"] = *grains_;
    load["saltenv"] = wire::value();
    load["pillarenv"] = wire::value();
    load["pillar_override"] = wire::value::object();
    load["extra_minion_data"] = wire::value::object();
    load["ver"] = "2";
    load["cmd"] = "_pillar";
    const std::string nonce = crypto::uuid4_hex();
    result<wire::value> r = make_error_code(errc::timeout);
    for (int round = 0; round < 2; ++round) {
      auto sess = session_;
      if (!sess) {
        if (!(co_await reauth())) co_return make_error_code(errc::not_connected);
        sess = session_;
        if (!sess) co_return make_error_code(errc::not_connected);
      }
      r = make_error_code(errc::timeout);
      for (int t = 0; t < 3 && !r; ++t) {
        wire::value body = package_aes(load, who_, *sess, nonce, static_cast<std::int64_t>(std::time(nullptr)));
        r = co_await req_->request(std::move(body), seconds(60));
        if (!r && r.error() != transport::errc::timeout) break;
      }
      if (!r) co_return r.error();
      if (r->is_object() && wire::find(*r, "key")) break;
      if (round == 0) {
        spdlog::debug("Pillar reply has no key; re-authenticating");
        if (!(co_await reauth())) co_return make_error_code(errc::auth_failed);
      }
    }
    if (!r->is_object() || !wire::find(*r, "key")) {
      spdlog::error("Master did not return a session key for pillar request");
      co_return make_error_code(errc::bad_pillar);
    }
    if (!master_key_) co_return make_error_code(errc::bad_pillar);
    auto enc = crypto::parse_enc_algo(cfg_.encryption_algorithm).value_or(crypto::enc_algo::oaep_sha1);
    auto sig = crypto::parse_sig_algo(cfg_.signing_algorithm).value_or(crypto::sig_algo::pkcs1v15_sha1);
    auto p = decode_private_reply(*r, auth_->key(), enc, *master_key_, sig, nonce);
    if (!p && p.error() == errc::bad_pillar) {
      // Salt re-authenticates once when the signature does not verify (master key reload).
      if (co_await reauth()) p = decode_private_reply(*r, auth_->key(), enc, *master_key_, sig, nonce);
    }
    if (!p) co_return p.error();
    co_return std::move(*p);
  }

  awaitable<bool> fire_event(std::string tag, wire::value data) {
    wire::value load = wire::value::object();
    load["id"] = cfg_.id;
    load["cmd"] = "_minion_event";
    load["pretag"] = wire::value();
    load["tok"] = wire::make_bin(auth_->tok());
    load["data"] = std::move(data);
    load["tag"] = tag;
    auto r = co_await request(std::move(load), seconds(60), 1);
    if (!r) {
      spdlog::info("fire_master failed: {}", r.error().message());
      co_return false;
    }
    co_return true;
  }

  // The clear ping on this session's connection: the application-level heartbeat and probe.
  awaitable<bool> ping(milliseconds timeout) {
    if (closed_) co_return false;
    auto r = co_await req_->request(clear_ping_body(cfg_.id), timeout);
    if (!r) co_return false;
    last_ok_ = std::chrono::steady_clock::now();
    co_return true;
  }

  // master_link (job threads) ------------------------------------------------------------
  result<wire::value> send(wire::value load, milliseconds timeout, int tries) override {
    if (closed_) return make_error_code(errc::stopped);
    return run_on_io(
        io_,
        [self = shared_from_this(), load = std::move(load), timeout, tries]() mutable {
          return self->request(std::move(load), timeout, tries);
        },
        make_error_code(errc::stopped));
  }

  result<wire::value> fetch_pillar() override {
    if (closed_) return make_error_code(errc::stopped);
    auto r = run_on_io(
        io_, [self = shared_from_this()] { return self->pillar_request(); }, make_error_code(errc::stopped));
    if (r) set_pillar(*r);
    return r;
  }

 private:
  void install(const auth_creds& c) {
    if (!aes_ || creds_.aes != c.aes) {
      auto a = crypto::crypticle::from_key_string(c.aes);
      if (a) aes_ = std::make_shared<crypto::crypticle>(std::move(*a));
      else spdlog::error("The master sent an unusable AES key");
    }
    if (!session_ || creds_.session != c.session) {
      auto s = crypto::crypticle::from_key_string(c.session);
      if (s) session_ = std::make_shared<crypto::crypticle>(std::move(*s));
      else spdlog::error("The master sent an unusable session key");
    }
    creds_ = c;
    if (auto mk = auth_->master_key()) master_key_ = std::move(*mk);
  }
  void end_auth() {
    auth_running_ = false;
    auto waiters = std::move(auth_waiters_);
    auth_waiters_.clear();
    for (auto& w : waiters) w->fire();
  }
  void fatal(int code) {
    if (!fatal_exit_) fatal_exit_ = code;
    if (on_fatal) on_fatal(code);
  }

  asio::io_context& io_;
  const config::minion_config& cfg_;
  std::shared_ptr<const auth_client> auth_;
  request_identity who_;
  std::string master_host_;
  std::string label_;
  std::chrono::steady_clock::time_point last_ok_{};
  int master_port_ = 4506;
  std::shared_ptr<transport::req_client> req_;
  // io thread only:
  auth_creds creds_;
  std::shared_ptr<crypto::crypticle> aes_, session_;
  std::optional<crypto::rsa_key> master_key_;
  bool auth_running_ = false;
  std::vector<std::shared_ptr<io_event>> auth_waiters_;
  std::optional<int> fatal_exit_;
  std::atomic<bool> closed_{false};
  // shared with job threads:
  mutable std::mutex mu_;
  std::shared_ptr<const wire::value> grains_;
  std::shared_ptr<const wire::value> pillar_;
};

// ---------------------------------------------------------------------------------------------
// daemon: every configured master (one master is a list of one), driven by masters_fsm.
// ---------------------------------------------------------------------------------------------
mm_time mm_now() { return std::chrono::time_point_cast<mm_ms>(std::chrono::steady_clock::now()); }

loss_reason loss_of(const error_code& why) {
  if (why == asio::error::connection_reset || why == asio::error::connection_aborted ||
      why == asio::error::broken_pipe)
    return loss_reason::rst;
  if (why == asio::error::timed_out || why == transport::errc::timeout) return loss_reason::timeout;
  return loss_reason::eof;
}

// One configured master: its current attempt or connection. io thread only.
struct master_conn {
  std::size_t index = 0;
  std::string label;  // as configured (logs, return queue)
  std::string host;   // parsed name or address
  int port = 4506;
  std::uint64_t gen = 0;  // bumped by every connect/disconnect: late callbacks are ignored
  std::shared_ptr<session> sess;
  std::shared_ptr<transport::pub_client> pub;
  bool serving = false;
  bool pub_lost = false;
  bool ever_served = false;
  bool reauth_scheduled = false;
  bool flushing = false;
  bool pinging = false;
  std::deque<wire::value> held;  // publishes waiting for a (jittered) re-authentication
  std::shared_ptr<asio::steady_timer> timer;  // connect delay / acceptance wait / reauth delay
};

class daemon : public std::enable_shared_from_this<daemon> {
 public:
  daemon(asio::io_context& io, const config::minion_config& cfg, std::shared_ptr<const auth_client> auth,
         std::shared_ptr<const wire::value> grains, std::uint64_t seed)
      : io_(io), cfg_(cfg), auth_(std::move(auth)), grains_(std::move(grains)),
        fsm_(masters_settings_from(cfg, seed)),
        guard_(replay_settings{static_cast<std::int64_t>(cfg.publish_replay_window) * 1'000'000, util::now_micros(),
                               static_cast<std::size_t>(std::max(1, cfg.minion_jid_queue_hwm))}),
        queue_(cfg.cachedir / "return_queue", static_cast<std::size_t>(std::max(0, cfg.return_queue_max))),
        pool_(16, 1024), stop_ev_(io.get_executor()) {
    for (std::size_t i = 0; i < cfg_.master.size(); ++i) {
      auto c = std::make_shared<master_conn>();
      c->index = i;
      c->label = cfg_.master[i];
      auto addr = config::parse_master_address(cfg_.master[i], cfg_.master_port);
      c->host = addr ? addr->host : cfg_.master[i];
      c->port = addr ? addr->port : cfg_.master_port;
      conns_.push_back(std::move(c));
    }
    single_ = conns_.size() == 1;
  }

  static connection_settings settings(const config::minion_config& cfg) {
    connection_settings s;
    s.auth_tries = cfg.auth_tries;
    s.auth_timeout = milliseconds(std::max(1, cfg.auth_timeout) * 1000);
    s.acceptance_wait = milliseconds(std::max(0, cfg.acceptance_wait_time) * 1000);
    s.acceptance_wait_max = milliseconds(std::max(0, cfg.acceptance_wait_time_max) * 1000);
    s.rejected_retry = cfg.rejected_retry;
    s.publish_port_override = cfg.publish_port;
    return s;
  }

  void request_stop() {
    if (stopping_) return;
    stopping_ = true;
    spdlog::info("Shutting down the Salt Minion");
    stop_ev_.fire();
    for (auto& c : conns_) close_conn(*c);
    for (auto& [id, t] : timers_) t->cancel();
    if (hb_timer_) hb_timer_->cancel();
  }

  awaitable<int> main_loop() {
    if (conns_.empty()) {
      spdlog::critical("No master configured");
      co_return 1;
    }
    if (fsm_.mode() == mm_mode::hot && !single_ && (cfg_.random_master || cfg_.master_shuffle))
      spdlog::warn("random_master/master_shuffle are ignored with several hot masters (master_type: str)");
    feed(mm_event::make(mm_event::kind::start, mm_now()));
    asio::co_spawn(io_, heartbeat_loop(shared_from_this()), asio::detached);
    co_await stop_ev_.wait();
    co_return exit_code_;
  }

  bool shutdown_pool() {
    if (pool_.busy() > 0) {
      spdlog::warn("{} job(s) still running at shutdown; not waiting for them", pool_.busy());
      return false;
    }
    pool_.stop();
    return true;
  }

  // master_link for a job published by master `index` (job threads).
  result<wire::value> link_send(std::size_t index, wire::value load, milliseconds timeout, int tries) {
    if (stopping_) return make_error_code(errc::stopped);
    return run_on_io(
        io_,
        [self = shared_from_this(), index, load = std::move(load), timeout, tries]() mutable {
          return self->route_request(index, std::move(load), timeout, tries);
        },
        make_error_code(errc::stopped));
  }

  result<wire::value> link_pillar(std::size_t index) {
    if (stopping_) return make_error_code(errc::stopped);
    return run_on_io(
        io_, [self = shared_from_this(), index] { return self->pillar_of(index); }, make_error_code(errc::stopped));
  }

 private:

  class routed_link : public master_link {
   public:
    routed_link(std::shared_ptr<daemon> d, std::size_t index) : d_(std::move(d)), index_(index) {}
    result<wire::value> send(wire::value load, milliseconds timeout, int tries) override {
      return d_->link_send(index_, std::move(load), timeout, tries);
    }
    result<wire::value> fetch_pillar() override { return d_->link_pillar(index_); }

   private:
    std::shared_ptr<daemon> d_;
    std::size_t index_;
  };

  transport::options topts() const {
    transport::options o = transport_options(cfg_);
    // A silently dead master must not hold a socket with unacknowledged data for the
    // kernel's default 15 minutes; the heartbeat notices it first anyway.
    const auto window = fsm_.settings().alive_window + fsm_.settings().probe_timeout;
    o.user_timeout_ms = static_cast<int>(std::min<long long>(window.count(), 600000));
    return o;
  }

  // The session a job's requests and return go to: hot mode, the master that published
  // it; failover, the active master (the job's master may be gone).
  std::shared_ptr<session> target_session(std::size_t index) {
    if (fsm_.mode() == mm_mode::failover) {
      auto a = fsm_.active();
      if (!a) return nullptr;
      index = *a;
    }
    if (index >= conns_.size() || !conns_[index]->serving) return nullptr;
    return conns_[index]->sess;
  }

  awaitable<result<wire::value>> route_request(std::size_t index, wire::value load, milliseconds timeout, int tries) {
    const bool event = wire::get_text(load, "cmd").value_or("") == "_minion_event";
    if (event && fsm_.mode() == mm_mode::hot && !single_) {
      // Events go to every master that is up (Salt's fire_master in hot mode), without
      // waiting on a dead one.
      std::vector<std::shared_ptr<session>> up;
      for (auto& c : conns_)
        if (c->serving && c->sess) up.push_back(c->sess);
      if (up.empty()) co_return make_error_code(errc::not_connected);
      result<wire::value> first = make_error_code(errc::not_connected);
      bool any = false;
      for (auto& s : up) {
        wire::value copy = load;
        auto r = co_await s->request(std::move(copy), timeout, tries);
        if (r && !any) {
          first = std::move(r);
          any = true;
        }
      }
      co_return first;
    }
    auto s = target_session(index);
    if (!s) co_return make_error_code(errc::not_connected);
    co_return co_await s->request(std::move(load), timeout, tries);
  }

  // link_pillar on the io thread: the pillar from master `index`, kept by its session.
  awaitable<result<wire::value>> pillar_of(std::size_t index) {
    auto s = target_session(index);
    if (!s) co_return make_error_code(errc::not_connected);
    auto r = co_await s->pillar_request();
    if (r) s->set_pillar(*r);
    co_return r;
  }

  // ---- the state machine --------------------------------------------------------------------
  void feed(const mm_event& ev) {
    if (stopping_) return;
    auto actions = fsm_.handle(ev);
    for (auto& a : actions) perform(a);
  }

  void perform(const mm_action& a) {
    switch (a.type) {
      case mm_action::kind::connect: do_connect(a.index, a.at); break;
      case mm_action::kind::disconnect: do_disconnect(a.index, a.text); break;
      case mm_action::kind::send_probe: asio::co_spawn(io_, probe(shared_from_this(), a.index), asio::detached); break;
      case mm_action::kind::schedule: do_schedule(a.timer, a.at); break;
      case mm_action::kind::log: do_log(a.level, a.text); break;
      case mm_action::kind::fire_event: do_fire(a.text, a.data); break;
      case mm_action::kind::return_queue_flush: do_flush(a.index); break;
      case mm_action::kind::reauth: do_reauth(a.index, a.at); break;
    }
  }

  static void do_log(mm_log_level l, const std::string& text) {
    switch (l) {
      case mm_log_level::debug: spdlog::debug("{}", text); break;
      case mm_log_level::info: spdlog::info("{}", text); break;
      case mm_log_level::warning: spdlog::warn("{}", text); break;
      case mm_log_level::error: spdlog::error("{}", text); break;
      case mm_log_level::critical: spdlog::critical("{}", text); break;
    }
  }

  void close_conn(master_conn& c) {
    ++c.gen;
    c.serving = false;
    c.pub_lost = false;
    c.reauth_scheduled = false;
    c.held.clear();
    if (c.timer) c.timer->cancel();
    c.timer.reset();
    if (c.pub) c.pub->close();
    c.pub.reset();
    if (c.sess) c.sess->close();
    c.sess.reset();
  }

  void do_connect(std::size_t i, mm_time at) {
    if (i >= conns_.size()) return;
    auto& c = *conns_[i];
    close_conn(c);
    const std::uint64_t gen = c.gen;
    auto self = shared_from_this();
    const auto delay = at - mm_now();
    if (delay <= mm_ms(0)) {
      asio::co_spawn(io_, attempt(self, i, gen), asio::detached);
      return;
    }
    spdlog::info("Connecting to master {} in {} ms", c.label, delay.count());
    c.timer = std::make_shared<asio::steady_timer>(io_.get_executor());
    c.timer->expires_after(delay);
    c.timer->async_wait([self, i, gen](const error_code& ec) {
      if (ec || self->stopping_ || self->conns_[i]->gen != gen) return;
      asio::co_spawn(self->io_, self->attempt(self, i, gen), asio::detached);
    });
  }

  void do_disconnect(std::size_t i, const std::string& why) {
    if (i >= conns_.size()) return;
    spdlog::debug("Closing the connection to master {} ({})", conns_[i]->label, why);
    close_conn(*conns_[i]);
  }

  void do_schedule(timer_id id, mm_time at) {
    auto& t = timers_[id];
    if (t) t->cancel();
    t = std::make_shared<asio::steady_timer>(io_.get_executor());
    t->expires_at(std::chrono::steady_clock::time_point(at.time_since_epoch()));
    auto self = shared_from_this();
    t->async_wait([self, id](const error_code& ec) {
      if (ec || self->stopping_) return;
      mm_event e = mm_event::make(mm_event::kind::timer, mm_now());
      e.timer = id;
      self->feed(e);
    });
  }

  void do_fire(const std::string& tag, const std::map<std::string, std::string>& data) {
    wire::value d = wire::value::object();
    for (const auto& [k, v] : data) d[k] = v;
    std::vector<std::shared_ptr<session>> to;
    for (auto& c : conns_) {
      if (!c->serving || !c->sess) continue;
      if (fsm_.mode() == mm_mode::failover && fsm_.active() != c->index) continue;
      to.push_back(c->sess);
    }
    for (auto& s : to) {
      asio::co_spawn(
          io_,
          [s, tag, d]() -> awaitable<void> {
            std::string t = tag;
            wire::value dd = d;
            co_await s->fire_event(std::move(t), std::move(dd));
          },
          asio::detached);
    }
  }

  void do_reauth(std::size_t i, mm_time at) {
    if (i >= conns_.size()) return;
    auto& c = *conns_[i];
    if (!c.serving || !c.sess) return;
    c.reauth_scheduled = true;
    const std::uint64_t gen = c.gen;
    auto self = shared_from_this();
    auto delay = std::max(mm_ms(0), at - mm_now());
    if (delay > mm_ms(0)) spdlog::info("The master {} rotated its AES key; re-authenticating in {} ms", c.label, delay.count());
    c.timer = std::make_shared<asio::steady_timer>(io_.get_executor());
    c.timer->expires_after(delay);
    c.timer->async_wait([self, i, gen](const error_code& ec) {
      if (ec || self->stopping_ || self->conns_[i]->gen != gen) return;
      asio::co_spawn(self->io_, self->reauth_and_replay(self, i, gen), asio::detached);
    });
  }

  static awaitable<void> reauth_and_replay(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen) {
    auto c = self->conns_[i];
    auto sess = c->sess;
    if (!sess) co_return;
    bool ok = co_await sess->reauth();
    if (self->stopping_ || c->gen != gen) co_return;
    c->reauth_scheduled = false;
    auto held = std::move(c->held);
    c->held.clear();
    if (!ok) {
      spdlog::error("Re-authentication with master {} failed; {} publish(es) dropped", c->label, held.size());
      co_return;
    }
    for (auto& body : held) {
      auto aes = sess->aes();
      if (!aes) break;
      auto d = decode_publish(body, *aes, self->cfg_.sign_pub_messages, sess->master_key());
      if (d.verdict == publish_verdict::reauth) {
        spdlog::error("Payload decryption failed even after re-authenticating with master {}", c->label);
        continue;
      }
      self->accept_publish(i, std::move(d));
    }
  }

  void do_flush(std::size_t i) {
    if (i >= conns_.size()) return;
    auto& c = *conns_[i];
    if (c.flushing || !c.serving) return;
    if (queue_.size() == 0) return;
    c.flushing = true;
    asio::co_spawn(io_, flush(shared_from_this(), i, c.gen), asio::detached);
  }

  static awaitable<void> flush(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen) {
    auto c = self->conns_[i];
    const bool any_ok = self->fsm_.mode() == mm_mode::failover;
    auto entries = self->queue_.pending(c->label, any_ok);
    std::size_t sent = 0;
    for (auto& e : entries) {
      if (self->stopping_ || c->gen != gen || !c->sess) break;
      auto sess = c->sess;
      const std::string jid(wire::get_text(e.load, "jid").value_or("?"));
      wire::value load = e.load;
      auto r = co_await sess->request(std::move(load), seconds(std::max(5, self->cfg_.return_retry_timer)), 1);
      if (!r) {
        spdlog::warn("Could not deliver the queued return of job {} to master {}: {}", jid, c->label, r.error().message());
        break;
      }
      self->queue_.remove(e.name);
      ++sent;
      spdlog::info("Delivered the queued return of job {} to master {}", jid, c->label);
    }
    if (c->gen == gen) c->flushing = false;
    // Returns queued while this flush ran go out with the next one.
    if (sent > 0 && c->gen == gen && !self->queue_.pending(c->label, any_ok).empty()) self->do_flush(i);
  }

  // A return that could not be delivered now (job thread): queue it, then flush to a
  // master that is up.
  void queue_return(std::size_t index, const wire::value& ret) {
    const bool failover = fsm_.mode() == mm_mode::failover;
    const std::string label = failover ? std::string() : conns_[index]->label;
    const std::string jid(wire::get_text(ret, "jid").value_or("?"));
    auto r = queue_.push(label, ret);
    if (!r) {
      spdlog::error("The return of job {} is LOST: the return queue refused it ({}; return_queue_max {})", jid,
                    r.error().message(), cfg_.return_queue_max);
      return;
    }
    spdlog::warn("The return of job {} could not be delivered; queued as {} until a master is reachable", jid, *r);
    auto self = shared_from_this();
    asio::post(io_, [self, index, failover] {
      if (failover) {
        if (auto a = self->fsm_.active()) self->do_flush(*a);
      } else {
        self->do_flush(index);
      }
    });
  }

  // ---- one connection attempt: resolve, sign in, publish socket, session ---------------------
  // GCC 12 reports a false -Wmismatched-new-delete on this coroutine's frame (Asio's
  // awaitable_frame_base has matching class-level operator new/delete); clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
  static awaitable<void> attempt(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen) {
    auto c = self->conns_[i];
    std::string ip;
    {
      asio::ip::tcp::resolver res(self->io_);
      std::string host = c->host;
      std::string port = std::to_string(c->port);
      auto resolved = co_await res.async_resolve(host, port, asio::as_tuple(use_awaitable));
      const error_code ec = std::get<0>(resolved);
      const auto& results = std::get<1>(resolved);
      if (self->stale(*c, gen)) co_return;
      if (ec || results.empty()) {
        spdlog::error("Master hostname: '{}' not found or not responsive. Retrying.", c->host);
        self->feed(mm_event::make(mm_event::kind::dns_failed, mm_now(), i));
        co_return;
      }
      for (const auto& r : results) {
        if (r.endpoint().address().is_v4()) {
          ip = r.endpoint().address().to_string();
          break;
        }
      }
      if (ip.empty()) ip = results.begin()->endpoint().address().to_string();
      mm_event e = mm_event::make(mm_event::kind::dns_resolved, mm_now(), i);
      e.ip = ip;
      self->feed(e);
      if (self->stale(*c, gen)) co_return;
    }
    auto sess = std::make_shared<session>(self->io_, self->cfg_, self->auth_, self->grains_, ip, c->port,
                                          self->topts(), c->label);
    c->sess = sess;
    sess->on_fatal = [self, i, gen](int code) { self->on_fatal(i, gen, code); };
    connection_fsm cf(settings(self->cfg_));
    const bool move_on = self->fsm_.mode() == mm_mode::failover && !self->single_;
    conn_action a = cf.handle({conn_event::kind::start});
    for (;;) {
      if (self->stale(*c, gen)) co_return;
      conn_event ev;
      switch (a.type) {
        case conn_action::kind::none:
          co_return;
        case conn_action::kind::send_auth: {
          auto o = co_await sess->fsm_sign_in(a.delay);
          if (self->stale(*c, gen)) co_return;
          if (o.kind == attempt_kind::timeout) {
            spdlog::warn("SaltReqTimeoutError: the master at {} did not answer the sign-in in {} s", c->label,
                         a.delay.count() / 1000);
            ev.type = conn_event::kind::auth_timeout;
          } else if (o.kind == attempt_kind::io_error) {
            ev.type = conn_event::kind::auth_io_error;
          } else {
            ev.type = conn_event::kind::auth_result;
            ev.status = o.res.status;
            ev.publish_port = o.res.creds.publish_port;
            if (!self->single_ && (o.res.status == auth_status::rejected ||
                                   o.res.status == auth_status::finger_mismatch)) {
              spdlog::critical("Master {} {}; trying it again later", c->label,
                               o.res.status == auth_status::rejected ? "rejected this minion's key"
                                                                     : "does not match master_finger");
              self->feed(mm_event::make(mm_event::kind::connect_failed, mm_now(), i));
              co_return;
            }
            if (move_on && (o.res.status == auth_status::pending || o.res.status == auth_status::rejected_retry)) {
              spdlog::warn("Master {} has not accepted this minion's key yet; trying the next master", c->label);
              self->feed(mm_event::make(mm_event::kind::connect_failed, mm_now(), i));
              co_return;
            }
          }
          break;
        }
        case conn_action::kind::wait:
          if (a.drop_connection) {
            spdlog::info("Master {} is not reachable", c->label);
            self->feed(mm_event::make(mm_event::kind::connect_failed, mm_now(), i));
            co_return;
          }
          spdlog::info("Waiting {} seconds before retry.", a.delay.count() / 1000);
          c->timer = std::make_shared<asio::steady_timer>(self->io_.get_executor());
          c->timer->expires_after(a.delay);
          {
            auto t = c->timer;
            co_await t->async_wait(asio::as_tuple(use_awaitable));
          }
          ev.type = conn_event::kind::timer;
          break;
        case conn_action::kind::connect_pub:
          ev.type = (co_await self->connect_pub(self, i, gen, a.port)) ? conn_event::kind::pub_connected
                                                                      : conn_event::kind::pub_failed;
          break;
        case conn_action::kind::start_session: {
          const bool first = self->fsm_.mode() == mm_mode::failover ? !self->ever_served_ : !c->ever_served;
          ev.type = (co_await self->start_session(sess, first)) ? conn_event::kind::session_ok
                                                                : conn_event::kind::session_failed;
          break;
        }
        case conn_action::kind::serve: {
          if (c->pub_lost || !c->pub || !c->pub->connected()) {
            self->feed(mm_event::make(mm_event::kind::connect_failed, mm_now(), i));
            co_return;
          }
          if (!self->ever_served_) spdlog::info("Minion is ready to receive requests!");
          c->serving = true;
          c->ever_served = true;
          self->ever_served_ = true;
          mm_event e = mm_event::make(mm_event::kind::connected, mm_now(), i);
          e.ip = ip;
          self->feed(e);
          co_return;  // from now on the publish socket's closed handler reports the loss
        }
        case conn_action::kind::exit:
          if (a.delay.count() > 0) {
            c->timer = std::make_shared<asio::steady_timer>(self->io_.get_executor());
            c->timer->expires_after(a.delay);
            auto t = c->timer;
            co_await t->async_wait(asio::as_tuple(use_awaitable));
          }
          self->exit_code_ = a.exit_code;
          self->request_stop();
          co_return;
      }
      a = cf.handle(ev);
    }
  }

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  bool stale(const master_conn& c, std::uint64_t gen) const { return stopping_ || c.gen != gen; }

  void on_fatal(std::size_t i, std::uint64_t gen, int code) {
    if (single_) {
      spdlog::critical("Fatal sign-in outcome; the minion exits with code {}", code);
      exit_code_ = code;
      request_stop();
      return;
    }
    auto& c = *conns_[i];
    if (c.gen != gen || !c.serving) return;
    spdlog::critical("Master {} {}", c.label, code == 77 ? "rejected this minion's key" : "does not match master_finger");
    c.serving = false;
    mm_event e = mm_event::make(mm_event::kind::connection_lost, mm_now(), i);
    e.reason = loss_reason::eof;
    feed(e);
  }

  static awaitable<bool> connect_pub(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, int port) {
    auto c = self->conns_[i];
    if (c->pub) c->pub->close();
    auto sess = c->sess;
    auto aes = sess ? sess->aes() : nullptr;
    if (!aes) co_return false;
    c->pub = transport::pub_client::create(self->io_.get_executor(), self->topts());
    c->pub_lost = false;
    wire::value hello = make_hello(self->cfg_.id, sess->auth().tok(), *aes);
    // Named locals only: GCC 12 mishandles temporaries with destructors inside co_await
    // expressions (double destruction), so nothing is constructed in the call below.
    transport::endpoint ep{sess->master_host(), static_cast<std::uint16_t>(port), {}};
    transport::pub_client::message_handler on_msg = [self, i, gen](wire::value body) {
      if (self->stopping_ || self->conns_[i]->gen != gen) return;
      asio::co_spawn(self->io_, self->handle_publish(self, i, gen, std::move(body)), asio::detached);
    };
    transport::pub_client::closed_handler on_closed = [self, i, gen](error_code why) {
      auto cc = self->conns_[i];
      if (self->stopping_ || cc->gen != gen) return;
      spdlog::debug("Publish connection to {} closed: {}", cc->label, why.message());
      cc->pub_lost = true;
      if (!cc->serving) return;  // the attempt in progress sees pub_lost
      cc->serving = false;
      mm_event e = mm_event::make(mm_event::kind::connection_lost, mm_now(), i);
      e.reason = loss_of(why);
      self->feed(e);
    };
    auto pub = c->pub;
    auto r = co_await pub->connect(std::move(ep), std::move(hello), std::move(on_msg), std::move(on_closed));
    if (!r) {
      spdlog::error("Unable to connect to the publish port {}:{}: {}", c->label, port, r.error().message());
      co_return false;
    }
    spdlog::debug("Connected to the publish port {}:{}", c->label, port);
    co_return true;
  }

  awaitable<bool> start_session(std::shared_ptr<session> sess, bool first) {
    const std::string data = "Minion " + cfg_.id + " started at " + asctime_now();
    auto p = co_await sess->pillar_request();
    if (!p) {
      spdlog::error("Exception getting pillar: {}", p.error().message());
      co_return false;
    }
    sess->set_pillar(std::move(*p));
    if (first) {
      if (cfg_.enable_legacy_startup_events) {
        std::string legacy_tag = "minion_start";
        wire::value d1 = data;
        co_await sess->fire_event(std::move(legacy_tag), std::move(d1));
      }
      std::string tag = "salt/minion/" + cfg_.id + "/start";
      wire::value d2 = data;
      co_await sess->fire_event(std::move(tag), std::move(d2));
    }
    co_return true;
  }

  // ---- liveness --------------------------------------------------------------------------------
  static awaitable<void> heartbeat_loop(std::shared_ptr<daemon> self) {
    const auto interval = std::chrono::duration_cast<milliseconds>(self->fsm_.heartbeat_interval());
    const auto ping_timeout = std::min(interval * 4 / 5, milliseconds(self->fsm_.settings().probe_timeout));
    self->hb_timer_ = std::make_shared<asio::steady_timer>(self->io_.get_executor());
    while (!self->stopping_) {
      self->hb_timer_->expires_after(interval);
      auto t = self->hb_timer_;
      co_await t->async_wait(asio::as_tuple(use_awaitable));
      if (self->stopping_) break;
      const auto now = std::chrono::steady_clock::now();
      for (auto& c : self->conns_) {
        if (!c->serving || !c->sess || c->pinging) continue;
        if (now - c->sess->last_ok() < interval) {
          self->feed(mm_event::make(mm_event::kind::heartbeat_ok, mm_now(), c->index));
          continue;
        }
        c->pinging = true;
        asio::co_spawn(self->io_, heartbeat(self, c->index, c->gen, ping_timeout), asio::detached);
      }
    }
  }

  static awaitable<void> heartbeat(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, milliseconds timeout) {
    auto c = self->conns_[i];
    auto sess = c->sess;
    const bool ok = sess && co_await sess->ping(timeout);
    c->pinging = false;
    if (self->stopping_ || c->gen != gen || !c->serving) co_return;
    if (!ok) spdlog::debug("Heartbeat to master {} missed", c->label);
    self->feed(mm_event::make(ok ? mm_event::kind::heartbeat_ok : mm_event::kind::heartbeat_missed, mm_now(), i));
  }

  // Liveness probe of a connected master, or failback probe of one we are not connected to.
  static awaitable<void> probe(std::shared_ptr<daemon> self, std::size_t i) {
    if (i >= self->conns_.size()) co_return;
    auto c = self->conns_[i];
    const auto timeout = milliseconds(self->fsm_.settings().probe_timeout);
    bool ok = false;
    if (c->serving && c->sess) {
      auto sess = c->sess;
      ok = co_await sess->ping(timeout);
    } else {
      transport::options o = self->topts();
      o.connect_timeout = timeout;
      auto client = transport::req_client::create(
          self->io_.get_executor(), transport::endpoint{c->host, static_cast<std::uint16_t>(c->port), {}}, o);
      auto r = co_await client->request(clear_ping_body(self->cfg_.id), timeout);
      client->close();
      ok = static_cast<bool>(r);
    }
    if (self->stopping_) co_return;
    spdlog::debug("Probe of master {}: {}", c->label, ok ? "answered" : "no answer");
    self->feed(mm_event::make(ok ? mm_event::kind::probe_ok : mm_event::kind::probe_failed, mm_now(), i));
  }

  // ---- publishes and jobs ------------------------------------------------------------------------
  static awaitable<void> handle_publish(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen,
                                        wire::value body) {
    try {
      auto c = self->conns_[i];
      if (c->gen != gen || !c->sess) co_return;
      auto sess = c->sess;
      auto aes = sess->aes();
      if (!aes || c->reauth_scheduled) {
        self->hold(*c, std::move(body));
        if (!c->reauth_scheduled) self->do_reauth(i, mm_now());
        co_return;
      }
      auto d = decode_publish(body, *aes, self->cfg_.sign_pub_messages, sess->master_key(),
                              self->cfg_.verify_master_pubkey_sign);
      if (d.verdict == publish_verdict::reauth) {
        // The master rotated its AES key (or, with verify_master_pubkey_sign, its key pair:
        // salt-run cluster.rotate_key): re-authenticate, jittered over random_reauth_delay
        // so a fleet does not sign in at the same instant, then decode what was held.
        self->hold(*c, std::move(body));
        mm_event e = mm_event::make(mm_event::kind::aes_rotated, mm_now(), i);
        self->feed(e);
        if (!c->reauth_scheduled && c->gen == gen) self->do_reauth(i, mm_now());
        co_return;
      }
      self->accept_publish(i, std::move(d));
    } catch (const std::exception& e) {
      spdlog::error("Unexpected error while handling a publish: {}", e.what());
    }
  }

  void hold(master_conn& c, wire::value body) {
    constexpr std::size_t k_max_held = 256;
    if (c.held.size() >= k_max_held) {
      spdlog::error("Too many publishes from {} waiting for re-authentication; dropping one", c.label);
      return;
    }
    c.held.push_back(std::move(body));
  }

  void accept_publish(std::size_t i, publish_decoded d) {
    auto c = conns_[i];
    if (d.verdict != publish_verdict::ok) {
      if (d.verdict == publish_verdict::drop) {
        if (auto n = guard_.log_hit(util::now_micros(), d.reason))
          spdlog::warn("Discarding publish from {}: {} [{} refusal(s) since the last such line]", c->label, d.reason,
                       n);
      }
      return;
    }
    if (!c->sess) return;
    wire::value& load = d.load;
    // Replay: a sylvite master's serial is its clock; refuse what is outside the window.
    if (auto r = guard_.check_time(d.serial, util::now_micros()); r.verdict != replay_verdict::ok) {
      if (r.log_count)
        spdlog::warn("Refused a publish (jid {}) from master {}: {} [{} refusal(s) since the last such line]",
                     wire::get_text(load, "jid").value_or("?"), c->label, r.reason, r.log_count);
      return;
    }
    auto grains = c->sess->grains();
    auto pillar = c->sess->pillar();
    if (!is_job_for_me(load, target_facts{cfg_.id, grains.get(), pillar.get()})) {
      spdlog::debug("Publish not targeted at this minion: {}", load.value("tgt", wire::value()).dump());
      return;
    }
    // Salt 3008.5's _target_load annotates the load (resource targeting); jobs see these
    // keys as __pub_resource_targets etc., so keep them for identical module returns.
    load["resource_targets"] = wire::value::array();
    load["pure_resource_target"] = false;
    load["minion_is_target"] = true;
    const std::string jid(wire::get_text(load, "jid").value_or(""));
    if (auto r = guard_.check_jid(jid, util::now_micros()); r.verdict != replay_verdict::ok) {
      // With several masters the same jid can legitimately come twice (info); with one
      // master it is a replay (warning).
      if (r.log_count)
        spdlog::log(single_ ? spdlog::level::warn : spdlog::level::info,
                    "Refused a publish from master {}: {} [{} refusal(s) since the last such line]", c->label,
                    r.reason, r.log_count);
      return;
    }
    if (auto why = unsupported_job_reason(load); !why.empty()) {
      spdlog::error("Job {}: {}", jid, why);
      return;
    }
    const std::string fun(wire::get_text(load, "fun").value_or(""));
    if (auto user = wire::get_text(load, "user"))
      spdlog::info("User {} Executing command {} with jid {}", *user, fun, jid);
    else
      spdlog::info("Executing command {} with jid {}", fun, jid);
    auto self = shared_from_this();
    auto pillar_now = pillar;
    if (!pool_.submit([self, i, pillar_now, load = std::move(load)]() mutable {
          self->run_job(i, std::move(pillar_now), std::move(load));
        })) {
      spdlog::error("Job queue full: dropping job {}", jid);
      return;
    }
    mm_event e = mm_event::make(mm_event::kind::job_started, mm_now(), i);
    e.jid = jid;
    feed(e);
  }

  // Job thread.
  void run_job(std::size_t i, std::shared_ptr<const wire::value> pillar, wire::value load) {
    const std::string jid(wire::get_text(load, "jid").value_or(""));
    const std::string fun(wire::get_text(load, "fun").value_or(""));
    wire::value info = wire::value::object();
    info["pid"] = static_cast<long long>(::getpid());
    for (const auto& [k, v] : load.items()) info[k] = v;
    running_.add(jid, info);
    routed_link link(shared_from_this(), i);
    call_context ctx;
    ctx.cfg = &cfg_;
    ctx.grains = grains_;
    ctx.pillar = pillar ? pillar : std::make_shared<const wire::value>(wire::value::object());
    ctx.master = &link;
    ctx.running = &running_;
    ctx.jid = jid;
    ctx.pub = load;
    ctx.local = cfg_.file_client == "local";
    spdlog::info("Starting a new job {} with PID {}", jid, ::getpid());
    exec_outcome o = module_registry::builtin().call(fun, load.value("arg", wire::value::array()), ctx);
    running_.remove(jid);
    if (stopping_) return;
    wire::value ret = make_return_load(cfg_.id, load, o);
    spdlog::info("Returning information for job: {}", jid);
    const int tries = std::max(1, cfg_.return_retry_tries);
    const int lo = std::max(1, cfg_.return_retry_timer);
    const int hi = std::max(lo, cfg_.return_retry_timer_max);
    wire::value copy = ret;
    auto r = link_send(i, std::move(copy), seconds(rand_between(lo, hi)), tries);
    if (!r && !stopping_) {
      if (r.error() == errc::bad_reply || r.error() == errc::auth_failed) {
        spdlog::warn("The master refused the return of job {}: {}", jid, r.error().message());
      } else {
        queue_return(i, ret);
      }
    }
    auto self = shared_from_this();
    asio::post(io_, [self, jid] {
      mm_event e = mm_event::make(mm_event::kind::job_finished, mm_now());
      e.jid = jid;
      self->feed(e);
    });
  }

  asio::io_context& io_;
  const config::minion_config& cfg_;
  std::shared_ptr<const auth_client> auth_;
  std::shared_ptr<const wire::value> grains_;
  masters_fsm fsm_;
  std::vector<std::shared_ptr<master_conn>> conns_;
  bool single_ = true;
  bool ever_served_ = false;
  replay_guard guard_;  // time window + jid memory (issue 14 item 7)
  return_queue queue_;
  running_jobs running_;
  job_pool pool_;
  io_event stop_ev_;
  std::map<timer_id, std::shared_ptr<asio::steady_timer>> timers_;
  std::shared_ptr<asio::steady_timer> hb_timer_;
  std::atomic<bool> stopping_{false};
  int exit_code_ = 0;
};

// ---------------------------------------------------------------------------------------------
// salt-call
// ---------------------------------------------------------------------------------------------
class call_client_impl : public call_client {
 public:
  call_client_impl(const config::minion_config& cfg, auth_client auth, wire::value grains)
      : cfg_(cfg), guard_(asio::make_work_guard(io_)) {
    // salt-call talks to the first configured master (Salt's salt-call does the same in
    // hot mode; in failover it would evaluate the list, which sylvite leaves to the daemon).
    auto addr = config::parse_master_address(cfg_.master.empty() ? std::string("salt") : cfg_.master.front(),
                                             cfg_.master_port);
    std::string host = addr ? addr->host : std::string("salt");
    int port = addr ? addr->port : cfg_.master_port;
    sess_ = std::make_shared<session>(io_, cfg_, std::make_shared<const auth_client>(std::move(auth)),
                                      std::make_shared<const wire::value>(std::move(grains)), host, port,
                                      transport_options(cfg_));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~call_client_impl() override { close(); }

  int connect() override {
    int code = run_on_io(io_, [s = sess_, &cfg = cfg_] { return sign_in(s, cfg); }, 1);
    if (code == 77) std::this_thread::sleep_for(seconds(rand_between(10, 20)));
    return code;
  }

  master_link& link() override { return *sess_; }
  std::shared_ptr<const wire::value> pillar() const override { return sess_->pillar(); }

  void close() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [s = sess_] { s->close(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  // connect() on the io thread: sign in (auth_tries attempts on timeout), fetch pillar.
  // Gives connect()'s exit code.
  static awaitable<int> sign_in(std::shared_ptr<session> s, const config::minion_config& cfg) {
    int code = 1;
    try {
      attempt_outcome o;
      for (int i = 0; i < std::max(1, cfg.auth_tries); ++i) {
        o = co_await s->fsm_sign_in(milliseconds(std::max(1, cfg.auth_timeout) * 1000));
        if (o.kind != attempt_kind::timeout) break;
      }
      if (o.kind == attempt_kind::timeout) {
        spdlog::error("Attempt to authenticate with the salt master failed with timeout error");
        code = 1;
      } else if (o.kind == attempt_kind::io_error) {
        spdlog::error("Unable to connect to the salt master at {}", s->master_host());
        code = 1;
      } else {
        switch (o.res.status) {
          case auth_status::accepted: {
            auto p = co_await s->pillar_request();
            if (!p) {
              spdlog::error("Exception getting pillar: {}", p.error().message());
              code = 1;
            } else {
              s->set_pillar(std::move(*p));
              code = 0;
            }
            break;
          }
          case auth_status::pending:
          case auth_status::rejected_retry:
            std::fputs("Minion failed to authenticate with the master, has the minion key been accepted?\n", stdout);
            std::fflush(stdout);
            code = 2;
            break;
          case auth_status::rejected:
            code = 77;
            break;
          case auth_status::finger_mismatch:
            code = 42;
            break;
          default:
            spdlog::error("Attempt to authenticate with the salt master failed: {}", o.res.message);
            code = 1;
        }
      }
    } catch (const std::exception& e) {
      spdlog::error("salt-call: {}", e.what());
    }
    co_return code;
  }

  const config::minion_config& cfg_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::shared_ptr<session> sess_;
  std::thread thread_;
};

}  // namespace

int run_minion_daemon(const config::minion_config& cfg, wire::value grains) {
  auto as = auth_settings::from_config(cfg, grains);
  if (!as) {
    spdlog::critical("Unsupported encryption_algorithm/signing_algorithm: {} / {}", cfg.encryption_algorithm,
                     cfg.signing_algorithm);
    return 1;
  }
  auto auth = auth_client::create(std::move(*as));
  if (!auth) {
    spdlog::critical("Cannot load or create the minion keys in {}: {}", cfg.pki_dir.string(), auth.error().message());
    return 1;
  }
  // Heap-allocated so that a shutdown with jobs still running can leave them (and the
  // objects they use) alive until the process exits: job threads may still touch the
  // session, and joining them could take as long as the longest job.
  auto* io_ptr = new asio::io_context(1);
  asio::io_context& io = *io_ptr;
  auto d = std::make_shared<daemon>(io, cfg, std::make_shared<const auth_client>(std::move(*auth)),
                                    std::make_shared<const wire::value>(std::move(grains)),
                                    std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  auto* signals = new asio::signal_set(io, SIGTERM, SIGINT);
  signals->async_wait([d](const error_code& ec, int sig) {
    if (ec) return;
    spdlog::warn("Minion received a {} signal, exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    d->request_stop();
  });
  int code = 0;
  asio::co_spawn(
      io,
      [d, &code, signals, &io]() -> awaitable<void> {
        try {
          code = co_await d->main_loop();
        } catch (const std::exception& e) {
          spdlog::critical("Minion main loop failed: {}", e.what());
          code = 1;
        }
        error_code ignored;
        signals->cancel(ignored);
        d->request_stop();
        io.stop();  // the transport may still hold reads/timers; nothing else must run
      },
      asio::detached);
  io.run();
  if (!d->shutdown_pool()) {
    // Jobs still running: leak on purpose; the caller exits the process right away.
    new std::shared_ptr<daemon>(d);
    return code;
  }
  delete signals;
  d.reset();
  delete io_ptr;
  return code;
}

std::unique_ptr<call_client> call_client::create(const config::minion_config& cfg, wire::value grains) {
  auto as = auth_settings::from_config(cfg, grains);
  if (!as) {
    spdlog::critical("Unsupported encryption_algorithm/signing_algorithm: {} / {}", cfg.encryption_algorithm,
                     cfg.signing_algorithm);
    return nullptr;
  }
  auto auth = auth_client::create(std::move(*as));
  if (!auth) {
    spdlog::critical("Cannot load or create the minion keys in {}: {}", cfg.pki_dir.string(), auth.error().message());
    return nullptr;
  }
  return std::make_unique<call_client_impl>(cfg, std::move(*auth), std::move(grains));
}

}  // namespace sylvite::minion
