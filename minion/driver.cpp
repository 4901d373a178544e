// sylvite::minion driver (see driver.hpp). Asio: performs what masters_fsm and each master's
// session_fsm decide and reports back what happened; the rules live in those machines
// (minion/masters.hpp, minion/session.hpp), publish admission in minion/intake.hpp and the
// request channel in minion/master_channel.hpp. What stays here is plumbing: one coroutine or
// timer per action, the job pool, and where a job's requests and return go.
#include "minion/driver.hpp"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <ctime>
#include <map>
#include <random>

#include <spdlog/spdlog.h>

#include "core/util/pub_serial.hpp"
#include "minion/intake.hpp"
#include "minion/jobs.hpp"
#include "minion/master_channel.hpp"
#include "minion/masters.hpp"
#include "minion/return_queue.hpp"
#include "minion/session.hpp"

// GCC 12 reports a false -Wmismatched-new-delete on Asio coroutine frames when a
// coroutine is inlined into its caller (seen with -O2 and with the sanitizer flags): Asio's
// awaitable_frame_base pairs its own operator new/delete. clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace sylvite::minion {

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

mm_time mm_now() { return std::chrono::time_point_cast<mm_ms>(std::chrono::steady_clock::now()); }

loss_reason loss_of(const error_code& why) {
  if (why == asio::error::connection_reset || why == asio::error::connection_aborted ||
      why == asio::error::broken_pipe)
    return loss_reason::rst;
  if (why == asio::error::timed_out || why == transport::errc::timeout) return loss_reason::timeout;
  return loss_reason::eof;
}

void do_log(mm_log_level l, const std::string& text) {
  switch (l) {
    case mm_log_level::debug: spdlog::debug("{}", text); break;
    case mm_log_level::info: spdlog::info("{}", text); break;
    case mm_log_level::warning: spdlog::warn("{}", text); break;
    case mm_log_level::error: spdlog::error("{}", text); break;
    case mm_log_level::critical: spdlog::critical("{}", text); break;
  }
}

connection_settings connection_settings_from(const config::minion_config& cfg) {
  connection_settings s;
  s.auth_tries = cfg.auth_tries;
  s.auth_timeout = milliseconds(std::max(1, cfg.auth_timeout) * 1000);
  s.acceptance_wait = milliseconds(std::max(0, cfg.acceptance_wait_time) * 1000);
  s.acceptance_wait_max = milliseconds(std::max(0, cfg.acceptance_wait_time_max) * 1000);
  s.rejected_retry = cfg.rejected_retry;
  s.publish_port_override = cfg.publish_port;
  return s;
}

// One configured master: its session machine and the I/O objects of its current connection.
// io thread only.
struct master_conn {
  std::size_t index = 0;
  std::string label;  // as configured (logs, return queue)
  std::string host;   // parsed name or address
  int port = 4506;
  session_fsm fsm;
  std::shared_ptr<master_channel> chan;
  std::shared_ptr<transport::pub_client> pub;
  std::shared_ptr<asio::steady_timer> timer;  // the session's one wait

  explicit master_conn(session_settings s) : fsm(std::move(s)) {}
};

class daemon : public std::enable_shared_from_this<daemon> {
 public:
  daemon(asio::io_context& io, const config::minion_config& cfg, std::shared_ptr<const auth_client> auth,
         std::shared_ptr<const wire::value> grains, std::uint64_t seed)
      : io_(io), cfg_(cfg), auth_(std::move(auth)), grains_(std::move(grains)),
        fsm_(masters_settings_from(cfg, seed)),
        intake_(replay_settings{static_cast<std::int64_t>(cfg.publish_replay_window) * 1'000'000, util::now_micros(),
                                static_cast<std::size_t>(std::max(1, cfg.minion_jid_queue_hwm))},
                cfg.master.size() <= 1),
        queue_(cfg.cachedir / "return_queue", static_cast<std::size_t>(std::max(0, cfg.return_queue_max))),
        pool_(16, 1024), stop_ev_(io.get_executor()) {
    single_ = cfg_.master.size() == 1;
    for (std::size_t i = 0; i < cfg_.master.size(); ++i) {
      session_settings s;
      s.index = i;
      s.label = cfg_.master[i];
      auto addr = config::parse_master_address(cfg_.master[i], cfg_.master_port);
      s.host = addr ? addr->host : cfg_.master[i];
      s.single = single_;
      s.failover = fsm_.mode() == mm_mode::failover;
      s.conn = connection_settings_from(cfg_);
      s.heartbeat_interval = fsm_.heartbeat_interval();
      s.probe_timeout = fsm_.settings().probe_timeout;
      auto c = std::make_shared<master_conn>(std::move(s));
      c->index = i;
      c->label = cfg_.master[i];
      c->host = c->fsm.settings().host;
      c->port = addr ? addr->port : cfg_.master_port;
      conns_.push_back(std::move(c));
    }
  }

  void request_stop() {
    if (stopping_) return;
    stopping_ = true;
    spdlog::info("Shutting down the Salt Minion");
    stop_ev_.fire();
    for (std::size_t i = 0; i < conns_.size(); ++i) feed_session(i, session_event::make(session_event::kind::stop, mm_now()));
    for (auto& [id, t] : timers_) t->cancel();
    if (hb_timer_) hb_timer_->cancel();
    if (mine_timer_) mine_timer_->cancel();
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

  // ---- routing ---------------------------------------------------------------------------------
  // The channel a job's requests and return go to: hot mode, the master that published it;
  // failover, the active master (the job's master may be gone).
  std::shared_ptr<master_channel> target_channel(std::size_t index) {
    if (fsm_.mode() == mm_mode::failover) {
      auto a = fsm_.active();
      if (!a) return nullptr;
      index = *a;
    }
    if (index >= conns_.size() || !conns_[index]->fsm.serving()) return nullptr;
    return conns_[index]->chan;
  }

  awaitable<result<wire::value>> route_request(std::size_t index, wire::value load, milliseconds timeout, int tries) {
    const bool event = wire::get_text(load, "cmd").value_or("") == "_minion_event";
    if (event && fsm_.mode() == mm_mode::hot && !single_) {
      // Events go to every master that is up (Salt's fire_master in hot mode), without
      // waiting on a dead one.
      std::vector<std::shared_ptr<master_channel>> up;
      for (auto& c : conns_)
        if (c->fsm.serving() && c->chan) up.push_back(c->chan);
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
    auto s = target_channel(index);
    if (!s) co_return make_error_code(errc::not_connected);
    co_return co_await s->request(std::move(load), timeout, tries);
  }

  // link_pillar on the io thread: the pillar from master `index`, kept by its channel.
  awaitable<result<wire::value>> pillar_of(std::size_t index) {
    auto s = target_channel(index);
    if (!s) co_return make_error_code(errc::not_connected);
    auto r = co_await s->pillar_request();
    if (r) s->set_pillar(*r);
    co_return r;
  }

  // ---- masters_fsm ------------------------------------------------------------------------------
  void feed(const mm_event& ev) {
    if (stopping_) return;
    auto actions = fsm_.handle(ev);
    for (auto& a : actions) perform(a);
  }

  void perform(const mm_action& a) {
    using S = session_event::kind;
    switch (a.type) {
      case mm_action::kind::connect: {
        auto e = session_event::make(S::connect, mm_now());
        e.at = a.at;
        feed_session(a.index, std::move(e));
        break;
      }
      case mm_action::kind::disconnect: {
        auto e = session_event::make(S::disconnect, mm_now());
        e.why = a.text;
        feed_session(a.index, std::move(e));
        break;
      }
      case mm_action::kind::send_probe: {
        auto e = session_event::make(S::probe, mm_now());
        e.timeout = a.timeout;
        feed_session(a.index, std::move(e));
        break;
      }
      case mm_action::kind::schedule: do_schedule(a.timer, a.at); break;
      case mm_action::kind::log: do_log(a.level, a.text); break;
      case mm_action::kind::fire_event: do_fire(a.text, a.data); break;
      case mm_action::kind::return_queue_flush: flush_to(a.index); break;
      case mm_action::kind::reauth: {
        auto e = session_event::make(S::reauth, mm_now());
        e.at = a.at;
        feed_session(a.index, std::move(e));
        break;
      }
    }
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
    std::vector<std::shared_ptr<master_channel>> to;
    for (auto& c : conns_) {
      if (!c->fsm.serving() || !c->chan) continue;
      if (fsm_.mode() == mm_mode::failover && fsm_.active() != c->index) continue;
      to.push_back(c->chan);
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

  void flush_to(std::size_t i) {
    auto e = session_event::make(session_event::kind::flush, mm_now());
    e.queued = queue_.size();
    feed_session(i, std::move(e));
  }

  // ---- session_fsm ------------------------------------------------------------------------------
  void feed_session(std::size_t i, session_event ev) {
    if (i >= conns_.size()) return;
    if (stopping_ && ev.type != session_event::kind::stop) return;
    ev.minion_served = ever_served_;
    run(i, conns_[i]->fsm.handle(ev));
  }

  void run(std::size_t i, std::vector<session_action> actions) {
    auto c = conns_[i];
    for (auto& a : actions) {
      // A report earlier in this batch may have made masters_fsm reconnect or drop this master.
      if (a.gen != c->fsm.gen()) continue;
      if (stopping_ && a.type != session_action::kind::close) continue;
      perform(*c, a);
    }
  }

  void perform(master_conn& c, session_action& a) {
    using K = session_action::kind;
    auto self = shared_from_this();
    const std::size_t i = c.index;
    const std::uint64_t gen = a.gen;
    switch (a.type) {
      case K::close:
        if (c.timer) c.timer->cancel();
        c.timer.reset();
        if (c.pub) c.pub->close();
        c.pub.reset();
        if (c.chan) c.chan->close();
        c.chan.reset();
        break;
      case K::wait: {
        c.timer = std::make_shared<asio::steady_timer>(io_.get_executor());
        c.timer->expires_after(a.delay);
        const std::uint64_t seq = a.seq;
        c.timer->async_wait([self, i, seq](const error_code& ec) {
          if (ec || self->stopping_) return;
          auto e = session_event::make(session_event::kind::timer, mm_now());
          e.seq = seq;
          self->feed_session(i, std::move(e));
        });
        break;
      }
      case K::resolve: asio::co_spawn(io_, resolve(self, i, gen), asio::detached); break;
      case K::open:
        c.chan = std::make_shared<master_channel>(io_, cfg_, auth_, grains_, a.ip, c.port, topts(), c.label);
        c.chan->on_fatal = [self, i, gen](int code) {
          auto e = session_event::make(session_event::kind::fatal, mm_now(), gen);
          e.code = code;
          self->feed_session(i, std::move(e));
        };
        break;
      case K::sign_in: asio::co_spawn(io_, sign_in(self, i, gen, a.delay), asio::detached); break;
      case K::connect_pub: asio::co_spawn(io_, connect_pub(self, i, gen, a.port), asio::detached); break;
      case K::start: asio::co_spawn(io_, start(self, i, gen, a.first), asio::detached); break;
      case K::exit:
        if (a.delay.count() > 0) {
          c.timer = std::make_shared<asio::steady_timer>(io_.get_executor());
          c.timer->expires_after(a.delay);
          asio::co_spawn(io_, exit_after(self, c.timer, a.code), asio::detached);
        } else {
          exit_code_ = a.code;
          request_stop();
        }
        break;
      case K::report:
        if (a.event.type == mm_event::kind::connected) {
          ever_served_ = true;
          start_mine();  // Salt's __mine_interval schedule (run_on_start)
        }
        feed(a.event);
        if (a.follow_up) feed_session(i, session_event::make(session_event::kind::rotation_reported, mm_now(), gen));
        break;
      case K::log: do_log(a.level, a.text); break;
      case K::reauth:
        if (c.chan) asio::co_spawn(io_, reauth(self, i, gen, c.chan), asio::detached);
        break;
      case K::decode: decode(c, std::move(a.bodies.front())); break;
      case K::replay: replay(c, std::move(a.bodies)); break;
      case K::ping: asio::co_spawn(io_, ping(self, i, gen, c.chan, a.delay), asio::detached); break;
      case K::probe:
        asio::co_spawn(io_, probe(self, i, a.on_channel ? c.chan : nullptr, a.delay), asio::detached);
        break;
      case K::flush: asio::co_spawn(io_, flush(self, i, gen), asio::detached); break;
    }
  }

  // ---- the actions' coroutines (each reports one event) ----------------------------------------
  static awaitable<void> resolve(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen) {
    auto c = self->conns_[i];
    asio::ip::tcp::resolver res(self->io_);
    std::string host = c->host;
    std::string port = std::to_string(c->port);
    auto resolved = co_await res.async_resolve(host, port, asio::as_tuple(use_awaitable));
    const error_code ec = std::get<0>(resolved);
    const auto& results = std::get<1>(resolved);
    if (ec || results.empty()) {
      self->feed_session(i, session_event::make(session_event::kind::resolve_failed, mm_now(), gen));
      co_return;
    }
    std::string ip;
    for (const auto& r : results) {
      if (r.endpoint().address().is_v4()) {
        ip = r.endpoint().address().to_string();
        break;
      }
    }
    if (ip.empty()) ip = results.begin()->endpoint().address().to_string();
    auto e = session_event::make(session_event::kind::resolved, mm_now(), gen);
    e.ip = ip;
    self->feed_session(i, std::move(e));
  }

  static awaitable<void> sign_in(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, milliseconds timeout) {
    auto chan = self->conns_[i]->chan;
    sign_in_attempt_result o;
    if (chan) o = co_await chan->fsm_sign_in(timeout);
    auto e = session_event::make(session_event::kind::signed_in, mm_now(), gen);
    e.outcome = o.kind;
    e.status = o.res.status;
    e.publish_port = o.res.creds.publish_port;
    self->feed_session(i, std::move(e));
  }

  static awaitable<void> connect_pub(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, int port) {
    const bool ok = co_await open_pub(self, i, gen, port);
    self->feed_session(i, session_event::make(ok ? session_event::kind::pub_connected : session_event::kind::pub_failed,
                                              mm_now(), gen));
  }

  static awaitable<bool> open_pub(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, int port) {
    auto c = self->conns_[i];
    if (c->pub) c->pub->close();
    auto chan = c->chan;
    auto aes = chan ? chan->aes() : nullptr;
    if (!aes) co_return false;
    c->pub = transport::make_pub_client(transport_kind(self->cfg_), self->io_.get_executor(), self->topts(),
                                        zmq_options_of(self->cfg_), self->cfg_.id);
    wire::value hello = make_hello(self->cfg_.id, chan->auth().tok(), *aes);
    // Named locals only: GCC 12 mishandles temporaries with destructors inside co_await
    // expressions (double destruction), so nothing is constructed in the call below.
    transport::endpoint ep{chan->master_host(), static_cast<std::uint16_t>(port), {}};
    transport::pub_client::message_handler on_msg = [self, i, gen](wire::value body) {
      if (self->stopping_ || self->conns_[i]->fsm.gen() != gen) return;
      asio::post(self->io_, [self, i, gen, body = std::move(body)]() mutable {
        try {
          auto& cc = *self->conns_[i];
          auto e = session_event::make(session_event::kind::publish, mm_now(), gen);
          e.has_creds = cc.chan && cc.chan->aes();
          e.body = std::move(body);
          self->feed_session(i, std::move(e));
        } catch (const std::exception& ex) {
          spdlog::error("Unexpected error while handling a publish: {}", ex.what());
        }
      });
    };
    transport::pub_client::closed_handler on_closed = [self, i, gen](error_code why) {
      auto cc = self->conns_[i];
      if (self->stopping_ || cc->fsm.gen() != gen) return;
      spdlog::debug("Publish connection to {} closed: {}", cc->label, why.message());
      auto e = session_event::make(session_event::kind::pub_closed, mm_now(), gen);
      e.reason = loss_of(why);
      self->feed_session(i, std::move(e));
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

  // _pillar, then (first session) the start events, as Salt's minion does on connect.
  static awaitable<void> start(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen, bool first) {
    auto c = self->conns_[i];
    auto chan = c->chan;
    const bool ok = chan && co_await self->start_session(chan, first);
    auto e = session_event::make(ok ? session_event::kind::started : session_event::kind::start_failed, mm_now(), gen);
    e.pub_up = c->pub && c->pub->connected();
    self->feed_session(i, std::move(e));
  }

  awaitable<bool> start_session(std::shared_ptr<master_channel> chan, bool first) {
    const std::string data = "Minion " + cfg_.id + " started at " + asctime_now();
    auto p = co_await chan->pillar_request();
    if (!p) {
      spdlog::error("Exception getting pillar: {}", p.error().message());
      co_return false;
    }
    chan->set_pillar(std::move(*p));
    if (first) {
      if (cfg_.enable_legacy_startup_events) {
        std::string legacy_tag = "minion_start";
        wire::value d1 = data;
        co_await chan->fire_event(std::move(legacy_tag), std::move(d1));
      }
      std::string tag = "salt/minion/" + cfg_.id + "/start";
      wire::value d2 = data;
      co_await chan->fire_event(std::move(tag), std::move(d2));
    }
    co_return true;
  }

  // Salt's rejected-key pause: the exit happens even if the wait is cut short (SIGTERM).
  static awaitable<void> exit_after(std::shared_ptr<daemon> self, std::shared_ptr<asio::steady_timer> t, int code) {
    co_await t->async_wait(asio::as_tuple(use_awaitable));
    self->exit_code_ = code;
    self->request_stop();
  }

  static awaitable<void> reauth(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen,
                                std::shared_ptr<master_channel> chan) {
    const bool ok = co_await chan->reauth();
    auto e = session_event::make(session_event::kind::reauth_done, mm_now(), gen);
    e.ok = ok;
    self->feed_session(i, std::move(e));
  }

  static awaitable<void> ping(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen,
                              std::shared_ptr<master_channel> chan, milliseconds timeout) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = chan && co_await chan->ping(timeout);
    auto e = session_event::make(session_event::kind::ping_done, mm_now(), gen);
    e.ok = ok;
    if (ok) e.rtt = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
    self->feed_session(i, std::move(e));
  }

  // Liveness probe of a connected master (on its channel), or failback probe of one we are not
  // connected to (a fresh connection).
  static awaitable<void> probe(std::shared_ptr<daemon> self, std::size_t i, std::shared_ptr<master_channel> chan,
                               milliseconds timeout) {
    auto c = self->conns_[i];
    bool ok = false;
    const auto t0 = std::chrono::steady_clock::now();
    if (chan) {
      ok = co_await chan->ping(timeout);
    } else {
      transport::options o = self->topts();
      o.connect_timeout = timeout;
      auto client = transport::make_req_client(transport_kind(self->cfg_), self->io_.get_executor(),
                                               transport::endpoint{c->host, static_cast<std::uint16_t>(c->port), {}},
                                               o, zmq_options_of(self->cfg_));
      auto r = co_await client->request(clear_ping_body(self->cfg_.id), timeout);
      client->close();
      ok = static_cast<bool>(r);
    }
    auto e = session_event::make(session_event::kind::probe_done, mm_now());
    e.ok = ok;
    if (ok && chan) e.rtt = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
    self->feed_session(i, std::move(e));
  }

  // Sends the returns queued for master i (failover: any) until one fails.
  static awaitable<void> flush(std::shared_ptr<daemon> self, std::size_t i, std::uint64_t gen) {
    auto c = self->conns_[i];
    const bool any_ok = self->fsm_.mode() == mm_mode::failover;
    auto entries = self->queue_.pending(c->label, any_ok);
    std::size_t sent = 0;
    for (auto& e : entries) {
      if (self->stopping_ || c->fsm.gen() != gen || !c->chan) break;
      auto chan = c->chan;
      const std::string jid(wire::get_text(e.load, "jid").value_or("?"));
      wire::value load = e.load;
      auto r = co_await chan->request(std::move(load), seconds(std::max(5, self->cfg_.return_retry_timer)), 1);
      if (!r) {
        spdlog::warn("Could not deliver the queued return of job {} to master {}: {}", jid, c->label, r.error().message());
        break;
      }
      self->queue_.remove(e.name);
      ++sent;
      spdlog::info("Delivered the queued return of job {} to master {}", jid, c->label);
    }
    auto done = session_event::make(session_event::kind::flush_done, mm_now(), gen);
    done.sent = sent;
    done.queued = self->queue_.pending(c->label, any_ok).size();
    self->feed_session(i, std::move(done));
  }

  // ---- liveness ---------------------------------------------------------------------------------
  static awaitable<void> heartbeat_loop(std::shared_ptr<daemon> self) {
    const auto interval = std::chrono::duration_cast<milliseconds>(self->fsm_.heartbeat_interval());
    self->hb_timer_ = std::make_shared<asio::steady_timer>(self->io_.get_executor());
    while (!self->stopping_) {
      self->hb_timer_->expires_after(interval);
      auto t = self->hb_timer_;
      co_await t->async_wait(asio::as_tuple(use_awaitable));
      if (self->stopping_) break;
      for (std::size_t i = 0; i < self->conns_.size(); ++i) {
        auto c = self->conns_[i];
        if (!c->chan) continue;
        auto e = session_event::make(session_event::kind::heartbeat, mm_now());
        e.last_ok = std::chrono::time_point_cast<mm_ms>(c->chan->last_ok());
        e.samples = c->chan->take_rtt_samples();
        self->feed_session(i, std::move(e));
      }
    }
  }

  // ---- publishes and jobs -----------------------------------------------------------------------
  void decode(master_conn& c, wire::value body) {
    auto aes = c.chan ? c.chan->aes() : nullptr;
    if (!aes) return;
    auto d = decode_publish(body, *aes, cfg_.sign_pub_messages, c.chan->master_key(), cfg_.verify_master_pubkey_sign);
    if (d.verdict == publish_verdict::reauth) {
      auto e = session_event::make(session_event::kind::publish_rotated, mm_now(), c.fsm.gen());
      e.body = std::move(body);
      feed_session(c.index, std::move(e));
      return;
    }
    admit(c.index, std::move(d));
  }

  // The publishes held during a re-authentication, decoded with the new key.
  void replay(master_conn& c, std::vector<wire::value> bodies) {
    auto chan = c.chan;
    if (!chan) return;
    for (auto& body : bodies) {
      auto aes = chan->aes();
      if (!aes) break;
      auto d = decode_publish(body, *aes, cfg_.sign_pub_messages, chan->master_key());
      if (d.verdict == publish_verdict::reauth) {
        spdlog::error("Payload decryption failed even after re-authenticating with master {}", c.label);
        continue;
      }
      admit(c.index, std::move(d));
    }
  }

  void admit(std::size_t i, publish_decoded d) {
    auto c = conns_[i];
    if (!c->chan) return;
    auto grains = c->chan->grains();
    auto pillar = c->chan->pillar();
    auto r = intake_.admit(c->label, std::move(d), target_facts{cfg_.id, grains.get(), pillar.get()},
                           util::now_micros());
    for (const auto& [level, text] : r.logs) do_log(level, text);
    if (!r.run) return;
    auto self = shared_from_this();
    if (!pool_.submit([self, i, pillar, load = std::move(r.load)]() mutable {
          self->run_job(i, std::move(pillar), std::move(load));
        })) {
      spdlog::error("Job queue full: dropping job {}", r.jid);
      return;
    }
    mm_event e = mm_event::make(mm_event::kind::job_started, mm_now(), i);
    e.jid = r.jid;
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

  // ---- mine: Salt's __mine_interval schedule job -------------------------------------------------
  // mine.update every mine_interval minutes (default 60), the first run once a master is
  // connected (run_on_start); mine_enabled: False turns it off. Each run goes to every
  // connected master (as each of Salt's per-master Minion objects runs its own schedule);
  // a run still going when the next is due is not doubled.
  void start_mine() {
    if (mine_started_ || stopping_) return;
    mine_started_ = true;
    if (!wire::get_bool(cfg_.raw, "mine_enabled").value_or(true)) return;
    double minutes = 60;
    if (const wire::value* v = wire::find(cfg_.raw, "mine_interval"); v && v->is_number()) minutes = v->get<double>();
    if (minutes <= 0) {
      spdlog::info("mine_interval is {}: mine.update is not scheduled", minutes);
      return;
    }
    spdlog::info("Added mine.update to scheduler");
    const auto interval = std::chrono::duration_cast<milliseconds>(std::chrono::duration<double, std::ratio<60>>(minutes));
    asio::co_spawn(io_, mine_loop(shared_from_this(), std::max(interval, milliseconds(1000))), asio::detached);
  }

  static awaitable<void> mine_loop(std::shared_ptr<daemon> self, milliseconds interval) {
    self->mine_timer_ = std::make_shared<asio::steady_timer>(self->io_.get_executor());
    while (!self->stopping_) {
      for (std::size_t i = 0; i < self->conns_.size(); ++i) {
        auto c = self->conns_[i];
        if (!c->chan || self->mine_running_.load() >= static_cast<int>(self->conns_.size())) continue;
        auto pillar = c->chan->pillar();
        self->mine_running_++;
        if (!self->pool_.submit([self, i, pillar] {
              self->run_mine_update(i, pillar);
              self->mine_running_--;
            })) {
          self->mine_running_--;
          spdlog::warn("Job queue full: mine.update skipped");
        }
      }
      self->mine_timer_->expires_after(interval);
      auto t = self->mine_timer_;
      co_await t->async_wait(asio::as_tuple(use_awaitable));
    }
  }

  // Job thread.
  void run_mine_update(std::size_t i, std::shared_ptr<const wire::value> pillar) {
    routed_link link(shared_from_this(), i);
    call_context ctx;
    ctx.cfg = &cfg_;
    ctx.grains = grains_;
    ctx.pillar = pillar ? pillar : std::make_shared<const wire::value>(wire::value::object());
    ctx.master = &link;
    ctx.running = &running_;
    ctx.local = cfg_.file_client == "local";
    exec_outcome o = module_registry::builtin().call("mine.update", wire::value::array(), ctx);
    if (!o.success) spdlog::warn("mine.update failed: {}", o.ret.dump());
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
        if (auto a = self->fsm_.active()) self->flush_to(*a);
      } else {
        self->flush_to(index);
      }
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
  publish_intake intake_;  // replay window, targeting, jid de-dup across masters
  return_queue queue_;
  running_jobs running_;
  job_pool pool_;
  io_event stop_ev_;
  std::map<timer_id, std::shared_ptr<asio::steady_timer>> timers_;
  std::shared_ptr<asio::steady_timer> hb_timer_;
  std::shared_ptr<asio::steady_timer> mine_timer_;
  bool mine_started_ = false;        // io thread
  std::atomic<int> mine_running_{0};
  std::atomic<bool> stopping_{false};
  int exit_code_ = 0;
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
  // channels, and joining them could take as long as the longest job.
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

}  // namespace sylvite::minion
