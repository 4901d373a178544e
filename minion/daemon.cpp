// sylvite::minion Asio drivers (see daemon.hpp). The only minion file that includes Asio.
//
// session:   one master: req_client, sign-in (de-duplicated: concurrent re-auth requests
//            wait for the one in flight), credentials (publish AES + v3 session Crypticles),
//            AES requests with Salt's "decrypt failed -> re-auth -> retry once" rule, and the
//            send_private pillar fetch. All state lives on the io thread.
// daemon:    drives connection_fsm: each action is performed and answered with one event.
//            Publishes: decode (re-auth once on HMAC failure), target, de-dup, hand the job to
//            the pool; the pool thread runs the module and sends `_return`.
// call:      salt-call's session (no publish socket).
#include "minion/daemon.hpp"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <ctime>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/crypto/crypticle.hpp"
#include "core/transport/transport.hpp"
#include "minion/auth.hpp"
#include "minion/channel.hpp"
#include "minion/connection.hpp"
#include "minion/errors.hpp"
#include "minion/jobs.hpp"

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
  session(asio::io_context& io, const config::minion_config& cfg, auth_client auth, wire::value grains)
      : io_(io), cfg_(cfg), auth_(std::move(auth)), grains_(std::make_shared<const wire::value>(std::move(grains))),
        pillar_(std::make_shared<const wire::value>(wire::value::object())) {
    auto addr = config::parse_master_address(cfg_.master.empty() ? std::string("salt") : cfg_.master.front(),
                                             cfg_.master_port);
    master_host_ = addr ? addr->host : std::string("salt");
    master_port_ = addr ? addr->port : cfg_.master_port;
    who_.id = cfg_.id;
    who_.tok = auth_.tok();
    who_.enc_name = cfg_.encryption_algorithm;
    who_.sig_name = cfg_.signing_algorithm;
    req_ = transport::req_client::create(io_.get_executor(),
                                         transport::endpoint{master_host_, static_cast<std::uint16_t>(master_port_), {}},
                                         transport_options(cfg_));
  }

  const config::minion_config& cfg() const { return cfg_; }
  const auth_client& auth() const { return auth_; }
  const std::string& master_host() const { return master_host_; }
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
    sign_in_request req = auth_.make_request();
    auto r = co_await req_->request(req.body, timeout);
    if (!r) {
      out.kind = r.error() == transport::errc::timeout ? attempt_kind::timeout : attempt_kind::io_error;
      spdlog::debug("Sign-in request to {}:{} failed: {}", master_host_, master_port_, r.error().message());
      co_return out;
    }
    out.kind = attempt_kind::result;
    out.res = auth_.handle_reply(req, *r);
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
    auto p = decode_private_reply(*r, auth_.key(), enc, *master_key_, sig, nonce);
    if (!p && p.error() == errc::bad_pillar) {
      // Salt re-authenticates once when the signature does not verify (master key reload).
      if (co_await reauth()) p = decode_private_reply(*r, auth_.key(), enc, *master_key_, sig, nonce);
    }
    if (!p) co_return p.error();
    co_return std::move(*p);
  }

  awaitable<bool> fire_event(std::string tag, wire::value data) {
    wire::value load = wire::value::object();
    load["id"] = cfg_.id;
    load["cmd"] = "_minion_event";
    load["pretag"] = wire::value();
    load["tok"] = wire::make_bin(auth_.tok());
    load["data"] = std::move(data);
    load["tag"] = tag;
    auto r = co_await request(std::move(load), seconds(60), 1);
    if (!r) {
      spdlog::info("fire_master failed: {}", r.error().message());
      co_return false;
    }
    co_return true;
  }

  // master_link (job threads) ------------------------------------------------------------
  result<wire::value> send(wire::value load, milliseconds timeout, int tries) override {
    if (closed_) return make_error_code(errc::stopped);
    auto self = shared_from_this();
    auto prom = std::make_shared<std::promise<result<wire::value>>>();
    auto fut = prom->get_future();
    asio::co_spawn(
        io_,
        [self, prom, load = std::move(load), timeout, tries]() mutable -> awaitable<void> {
          try {
            prom->set_value(co_await self->request(std::move(load), timeout, tries));
          } catch (...) {
            prom->set_value(make_error_code(errc::stopped));
          }
        },
        asio::detached);
    return fut.get();
  }

  result<wire::value> fetch_pillar() override {
    if (closed_) return make_error_code(errc::stopped);
    auto self = shared_from_this();
    auto prom = std::make_shared<std::promise<result<wire::value>>>();
    auto fut = prom->get_future();
    asio::co_spawn(
        io_,
        [self, prom]() -> awaitable<void> {
          try {
            prom->set_value(co_await self->pillar_request());
          } catch (...) {
            prom->set_value(make_error_code(errc::stopped));
          }
        },
        asio::detached);
    auto r = fut.get();
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
    if (auto mk = auth_.master_key()) master_key_ = std::move(*mk);
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
  auth_client auth_;
  request_identity who_;
  std::string master_host_;
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
// daemon
// ---------------------------------------------------------------------------------------------
class daemon : public std::enable_shared_from_this<daemon> {
 public:
  daemon(asio::io_context& io, const config::minion_config& cfg, std::shared_ptr<session> s)
      : io_(io), cfg_(cfg), sess_(std::move(s)), fsm_(settings(cfg)), jids_(static_cast<std::size_t>(std::max(1, cfg.minion_jid_queue_hwm))),
        pool_(16, 1024), stop_ev_(io.get_executor()) {}

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
    if (serve_ev_) serve_ev_->fire();
    if (wait_timer_) wait_timer_->cancel();
    if (pub_) pub_->close();
    sess_->close();
  }

  awaitable<int> main_loop() {
    sess_->on_fatal = [self = shared_from_this()](int code) {
      spdlog::critical("Fatal sign-in outcome; the minion exits with code {}", code);
      self->exit_code_ = code;
      self->request_stop();
    };
    conn_action a = fsm_.handle({conn_event::kind::start});
    while (!stopping_) {
      conn_event ev;
      switch (a.type) {
        case conn_action::kind::none:
          co_return exit_code_;
        case conn_action::kind::send_auth: {
          auto o = co_await sess_->fsm_sign_in(a.delay);
          if (o.kind == attempt_kind::timeout) {
            spdlog::warn("SaltReqTimeoutError: the master at {} did not answer the sign-in in {} s", sess_->master_host(),
                         a.delay.count() / 1000);
            ev.type = conn_event::kind::auth_timeout;
          } else if (o.kind == attempt_kind::io_error) {
            ev.type = conn_event::kind::auth_io_error;
          } else {
            ev.type = conn_event::kind::auth_result;
            ev.status = o.res.status;
            ev.publish_port = o.res.creds.publish_port;
          }
          break;
        }
        case conn_action::kind::wait: {
          if (a.drop_connection) {
            drop_pub();
            sess_->forget_creds();
            spdlog::info("Master {} is not reachable; retrying in {} s", sess_->master_host(),
                         std::max<long long>(1, a.delay.count() / 1000));
          } else {
            spdlog::info("Waiting {} seconds before retry.", a.delay.count() / 1000);
          }
          co_await sleep(a.delay);
          ev.type = conn_event::kind::timer;
          break;
        }
        case conn_action::kind::connect_pub:
          ev.type = (co_await connect_pub(a.port)) ? conn_event::kind::pub_connected : conn_event::kind::pub_failed;
          break;
        case conn_action::kind::start_session:
          ev.type = (co_await start_session(a.first_session)) ? conn_event::kind::session_ok
                                                              : conn_event::kind::session_failed;
          if (ev.type == conn_event::kind::session_ok && a.first_session)
            spdlog::info("Minion is ready to receive requests!");
          break;
        case conn_action::kind::serve:
          if (pub_ && pub_->connected()) {
            serve_ev_ = std::make_shared<io_event>(io_.get_executor());
            if (pub_lost_) serve_ev_->fire();
            co_await serve_ev_->wait();
            serve_ev_.reset();
          }
          if (stopping_) co_return exit_code_;
          spdlog::warn("Connection to master {} lost", sess_->master_host());
          ev.type = conn_event::kind::pub_closed;
          break;
        case conn_action::kind::exit:
          if (a.delay.count() > 0) co_await sleep(a.delay);
          exit_code_ = a.exit_code;
          request_stop();
          co_return exit_code_;
      }
      if (stopping_) break;
      a = fsm_.handle(ev);
    }
    co_return exit_code_;
  }

  // false if jobs are still running (they are left alone: the process exits next and
  // their child processes keep running, as with Salt's detached job processes).
  bool shutdown_pool() {
    if (pool_.busy() > 0) {
      spdlog::warn("{} job(s) still running at shutdown; not waiting for them", pool_.busy());
      return false;
    }
    pool_.stop();
    return true;
  }
  int exit_code() const { return exit_code_; }

 private:
  awaitable<void> sleep(milliseconds d) {
    wait_timer_ = std::make_shared<asio::steady_timer>(io_.get_executor());
    wait_timer_->expires_after(d);
    auto t = wait_timer_;
    co_await t->async_wait(asio::as_tuple(use_awaitable));
  }

  void drop_pub() {
    ++pub_gen_;
    if (pub_) pub_->close();
    pub_.reset();
  }

  awaitable<bool> connect_pub(int port) {
    drop_pub();
    auto aes = sess_->aes();
    if (!aes) co_return false;
    pub_ = transport::pub_client::create(io_.get_executor(), transport_options(cfg_));
    pub_lost_ = false;
    const std::uint64_t gen = pub_gen_;
    auto self = shared_from_this();
    wire::value hello = make_hello(cfg_.id, sess_->auth().tok(), *aes);
    // Named locals only: GCC 12 mishandles temporaries with destructors inside co_await
    // expressions (double destruction), so nothing is constructed in the call below.
    transport::endpoint ep{sess_->master_host(), static_cast<std::uint16_t>(port), {}};
    transport::pub_client::message_handler on_msg = [self, gen](wire::value body) {
      if (gen != self->pub_gen_ || self->stopping_) return;
      asio::co_spawn(self->io_, self->handle_publish(std::move(body)), asio::detached);
    };
    transport::pub_client::closed_handler on_closed = [self, gen](error_code why) {
      if (gen != self->pub_gen_) return;
      spdlog::debug("Publish connection closed: {}", why.message());
      self->pub_lost_ = true;
      if (self->serve_ev_) self->serve_ev_->fire();
    };
    auto pub = pub_;
    auto r = co_await pub->connect(std::move(ep), std::move(hello), std::move(on_msg), std::move(on_closed));
    if (!r) {
      spdlog::error("Unable to connect to the publish port {}:{}: {}", sess_->master_host(), port, r.error().message());
      co_return false;
    }
    spdlog::debug("Connected to the publish port {}:{}", sess_->master_host(), port);
    co_return true;
  }

  awaitable<bool> start_session(bool first) {
    const std::string data = "Minion " + cfg_.id + " started at " + asctime_now();
    if (first) {
      auto p = co_await sess_->pillar_request();
      if (!p) {
        spdlog::error("Exception getting pillar: {}", p.error().message());
        co_return false;
      }
      sess_->set_pillar(std::move(*p));
      if (cfg_.enable_legacy_startup_events) {
        std::string legacy_tag = "minion_start";
        wire::value d1 = data;
        co_await sess_->fire_event(std::move(legacy_tag), std::move(d1));
      }
    }
    std::string tag = "salt/minion/" + cfg_.id + "/start";
    wire::value d2 = data;
    co_await sess_->fire_event(std::move(tag), std::move(d2));
    co_return true;
  }

  awaitable<void> handle_publish(wire::value body) {
    try {
      auto aes = sess_->aes();
      if (!aes) {
        if (!(co_await sess_->reauth())) co_return;
        aes = sess_->aes();
        if (!aes) co_return;
      }
      auto d = decode_publish(body, *aes, cfg_.sign_pub_messages, sess_->master_key());
      if (d.verdict == publish_verdict::reauth) {
        if (co_await sess_->reauth()) {
          aes = sess_->aes();
          if (aes) d = decode_publish(body, *aes, cfg_.sign_pub_messages, sess_->master_key());
        }
        if (d.verdict == publish_verdict::reauth) {
          spdlog::error("Payload decryption failed even after re-authenticating with master {}", sess_->master_host());
          co_return;
        }
      }
      if (d.verdict != publish_verdict::ok) {
        if (d.verdict == publish_verdict::drop) spdlog::warn("Discarding publish from {}: {}", sess_->master_host(), d.reason);
        co_return;
      }
      wire::value& load = d.load;
      auto grains = sess_->grains();
      auto pillar = sess_->pillar();
      if (!is_job_for_me(load, target_facts{cfg_.id, grains.get(), pillar.get()})) {
        spdlog::debug("Publish not targeted at this minion: {}", load.value("tgt", wire::value()).dump());
        co_return;
      }
      // Salt 3008.5's _target_load annotates the load (resource targeting); jobs see these
      // keys as __pub_resource_targets etc., so keep them for identical module returns.
      load["resource_targets"] = wire::value::array();
      load["pure_resource_target"] = false;
      load["minion_is_target"] = true;
      const std::string jid(wire::get_text(load, "jid").value_or(""));
      if (!jids_.add(jid)) {
        spdlog::debug("Jid {} already executed", jid);
        co_return;
      }
      if (auto why = unsupported_job_reason(load); !why.empty()) {
        spdlog::error("Job {}: {}", jid, why);
        co_return;
      }
      const std::string fun(wire::get_text(load, "fun").value_or(""));
      if (auto user = wire::get_text(load, "user"))
        spdlog::info("User {} Executing command {} with jid {}", *user, fun, jid);
      else
        spdlog::info("Executing command {} with jid {}", fun, jid);
      auto self = shared_from_this();
      if (!pool_.submit([self, load = std::move(load)]() mutable { self->run_job(std::move(load)); }))
        spdlog::error("Job queue full: dropping job {}", jid);
    } catch (const std::exception& e) {
      spdlog::error("Unexpected error while handling a publish: {}", e.what());
    }
  }

  // Job thread.
  void run_job(wire::value load) {
    const std::string jid(wire::get_text(load, "jid").value_or(""));
    const std::string fun(wire::get_text(load, "fun").value_or(""));
    wire::value info = wire::value::object();
    info["pid"] = static_cast<long long>(::getpid());
    for (const auto& [k, v] : load.items()) info[k] = v;
    running_.add(jid, info);
    call_context ctx;
    ctx.cfg = &cfg_;
    ctx.grains = sess_->grains();
    ctx.pillar = sess_->pillar();
    ctx.master = sess_.get();
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
    auto r = sess_->send(std::move(ret), seconds(rand_between(lo, hi)), tries);
    if (!r)
      spdlog::warn(
          "The minion failed to return the job information for job {}. This is often due to the master being shut "
          "down or overloaded. If the master is running, consider increasing the worker_threads value.",
          jid);
  }

  asio::io_context& io_;
  const config::minion_config& cfg_;
  std::shared_ptr<session> sess_;
  connection_fsm fsm_;
  jid_queue jids_;
  running_jobs running_;
  job_pool pool_;
  io_event stop_ev_;
  std::shared_ptr<io_event> serve_ev_;
  std::shared_ptr<asio::steady_timer> wait_timer_;
  std::shared_ptr<transport::pub_client> pub_;
  std::uint64_t pub_gen_ = 0;
  bool pub_lost_ = false;
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
    sess_ = std::make_shared<session>(io_, cfg_, std::move(auth), std::move(grains));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~call_client_impl() override { close(); }

  int connect() override {
    std::promise<int> prom;
    auto fut = prom.get_future();
    auto s = sess_;
    const config::minion_config& cfg = cfg_;
    asio::co_spawn(
        io_,
        [s, &prom, &cfg]() -> awaitable<void> {
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
          prom.set_value(code);
        },
        asio::detached);
    int code = fut.get();
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
  auto sess = std::make_shared<session>(io, cfg, std::move(*auth), std::move(grains));
  auto d = std::make_shared<daemon>(io, cfg, sess);
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
  sess.reset();
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
