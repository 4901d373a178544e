// sylvite::transport ZeroMQ clients without libzmq (zmq_options::client_engine = native):
// ZMTP 3.1 spoken on the TCP transport's client connections (detail/client.hpp) with the
// codec's client roles (detail/zmtp_codec.hpp). The same bytes as libzmq's REQ and SUB
// sockets, and the same behaviour as the libzmq clients of zmq_client.cpp:
//   req: a pool of up to 8 connections, one request in flight on each (REQ), a connection
//     whose request timed out is discarded; with connect_events a refused connection fails
//     the request at once (errc::connect_failed), without them the connection is re-dialled
//     every recon_default_ms until the request's deadline. A connection lost while a
//     request waits fails it with errc::disconnected (libzmq's REQ would wait for the
//     deadline: the reply can never come).
//   sub: subscribes "" (or "broadcast" and the minion's topic with zmq_filtering) as
//     \x01topic messages; with connect_events, connect() waits for the peer's READY and a
//     lost connection fires on_closed once; without them connect() returns at once and
//     the client re-dials by itself after a loss (recon_default_ms, doubling up to
//     recon_max_ms), as libzmq does, without telling the owner.
// Both send ZMTP PINGs every zmq_heartbeat_ivl and drop a connection that sent nothing for
// zmq_heartbeat_timeout (ZMQ_HEARTBEAT_IVL/TIMEOUT), and answer the peer's PINGs.
// Threading: state lives on the client's strand; completions are posted to the awaiting
// coroutine's executor; public methods may be called from any thread.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <deque>
#include <random>

#include "core/transport/detail/client.hpp"
#include "core/transport/detail/zmtp_codec.hpp"
#include "core/transport/zmq.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::transport {

namespace {

using detail::client_conn;
using detail::client_strand;
using detail::connector;
using reply_sig = void(result<wire::value>);
using connect_sig = void(result<void>);

constexpr std::size_t k_max_req_connections = 8;

// The first re-dial delay (Salt's recon_default, randomised up to + recon_max as Salt's
// minion does with recon_randomize).
std::chrono::milliseconds first_recon(const zmq_options& z) {
  int recon = std::max(1, z.recon_default_ms);
  if (z.recon_randomize) {
    static thread_local std::mt19937 rng{std::random_device{}()};
    recon = std::uniform_int_distribution<int>(recon, recon + std::max(0, z.recon_max_ms))(rng);
  }
  return std::chrono::milliseconds(recon);
}

std::chrono::milliseconds next_recon(std::chrono::milliseconds cur, const zmq_options& z) {
  if (z.recon_max_ms <= 0 || cur.count() >= z.recon_max_ms) return cur;
  return std::min(cur * 2, std::chrono::milliseconds(z.recon_max_ms));
}

void start_heartbeat(const std::shared_ptr<client_conn>& c, const zmq_options& z) {
  if (z.heartbeat_ivl_ms <= 0) return;
  const int timeout = z.heartbeat_timeout_ms > 0 ? z.heartbeat_timeout_ms : z.heartbeat_ivl_ms * 3;
  c->start_heartbeat(std::chrono::milliseconds(z.heartbeat_ivl_ms), std::chrono::milliseconds(timeout),
                     zmtp::ping(0));  // TTL 0: libzmq's default ZMQ_HEARTBEAT_TTL
}

// ------------------------------------------------------------------- req client ----

class zmtp_req_core : public std::enable_shared_from_this<zmtp_req_core> {
 public:
  zmtp_req_core(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : strand_(asio::make_strand(ex)), ep_(std::move(ep)), opt_(std::move(opt)), zopt_(z) {}

  template <class Token>
  auto async_request(wire::value body, std::chrono::milliseconds timeout, Token&& token) {
    return asio::async_initiate<Token, reply_sig>(
        [self = shared_from_this()](auto handler, wire::value b, std::chrono::milliseconds t) {
          asio::any_io_executor hex = asio::get_associated_executor(handler, self->strand_);
          auto p = std::make_shared<pending>(self->strand_, asio::any_completion_handler<reply_sig>(std::move(handler)));
          p->work = asio::prefer(hex, asio::execution::outstanding_work.tracked);
          p->bytes = std::make_shared<const std::string>(zmtp::request(wire::pack_payload(b)));  // off the strand
          asio::post(self->strand_, [self, p, t] { self->start(p, t); });
        },
        token, std::move(body), timeout);
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->do_close(); });
  }

 private:
  struct pending {
    pending(client_strand s, asio::any_completion_handler<reply_sig> h) : handler(std::move(h)), timer(std::move(s)) {}
    asio::any_completion_handler<reply_sig> handler;
    asio::any_io_executor work;
    std::shared_ptr<const std::string> bytes;
    asio::steady_timer timer;
    bool done = false;
  };
  using pending_ptr = std::shared_ptr<pending>;
  struct slot {
    explicit slot(client_strand s) : retry(std::move(s)) {}
    std::shared_ptr<connector> dialing;
    std::shared_ptr<client_conn> conn;
    pending_ptr call;
    asio::steady_timer retry;
    std::chrono::milliseconds recon{0};
    bool ready = false;  // the peer's READY arrived
    bool dead = false;
  };
  using slot_ptr = std::shared_ptr<slot>;

  void start(const pending_ptr& p, std::chrono::milliseconds timeout) {
    if (closed_) return complete(p, make_error_code(errc::closed));
    p->timer.expires_after(timeout);
    p->timer.async_wait([self = shared_from_this(), p](const error_code& ec) {
      if (!ec) self->on_timeout(p);
    });
    queue_.push_back(p);
    serve();
  }

  // Give queued calls a connection: an idle one, else a new one up to the cap.
  void serve() {
    while (!queue_.empty() && !closed_) {
      auto p = queue_.front();
      if (p->done) {
        queue_.pop_front();
        continue;
      }
      slot_ptr s;
      if (!idle_.empty()) {
        s = idle_.back();
        idle_.pop_back();
      } else if (open_ < k_max_req_connections) {
        s = std::make_shared<slot>(strand_);
        s->recon = first_recon(zopt_);
        ++open_;
        dial(s);
      } else {
        return;  // wait for a connection to come back
      }
      queue_.pop_front();
      s->call = p;
      busy_.push_back(s);
      if (s->ready) send(s);
    }
  }

  void send(const slot_ptr& s) {
    auto p = s->call;
    if (!p || p->done) return;
    if (!s->conn || !s->conn->write(p->bytes)) {
      discard(s);
      complete(p, make_error_code(errc::disconnected));
      serve();
    }
  }

  void dial(const slot_ptr& s) {
    s->dialing = std::make_shared<connector>(strand_, ep_, opt_);
    std::weak_ptr<zmtp_req_core> w = weak_from_this();
    std::weak_ptr<slot> ws = s;
    s->dialing->start([w, ws](error_code ec, detail::client_socket sock) {
      auto self = w.lock();
      auto sl = ws.lock();
      if (!self || !sl || sl->dead) return;
      sl->dialing = nullptr;
      if (ec) return self->on_dial_failed(sl, ec);
      self->on_connected(sl, std::move(sock));
    });
  }

  void on_dial_failed(const slot_ptr& s, error_code ec) {
    if (zopt_.connect_events || closed_) {
      // Refused (or unreachable): libzmq would keep re-dialling; the caller decides.
      auto p = s->call;
      discard(s);
      if (p) complete(p, ec == make_error_code(errc::closed) ? ec : make_error_code(errc::connect_failed));
      serve();
      return;
    }
    // As a libzmq REQ without a monitor: re-dial until the request's deadline discards us.
    s->retry.expires_after(s->recon);
    s->recon = next_recon(s->recon, zopt_);
    std::weak_ptr<zmtp_req_core> w = weak_from_this();
    std::weak_ptr<slot> ws = s;
    s->retry.async_wait([w, ws](const error_code& tec) {
      auto self = w.lock();
      auto sl = ws.lock();
      if (tec || !self || !sl || sl->dead) return;
      self->dial(sl);
    });
  }

  void on_connected(const slot_ptr& s, detail::client_socket sock) {
    s->conn = std::make_shared<client_conn>(std::move(sock), opt_, detail::describe(ep_),
                                            std::make_unique<zmtp::codec>(zmtp::role::req));
    std::weak_ptr<zmtp_req_core> w = weak_from_this();
    std::weak_ptr<slot> ws = s;
    s->conn->start_read(
        [w, ws](wire::frame&& f) {
          auto self = w.lock();
          auto sl = ws.lock();
          if (self && sl && !sl->dead) self->on_frame(sl, std::move(f));
        },
        [w, ws](error_code ec) {
          auto self = w.lock();
          auto sl = ws.lock();
          if (self && sl && !sl->dead) self->on_lost(sl, ec);
        });
    start_heartbeat(s->conn, zopt_);
  }

  void on_frame(const slot_ptr& s, wire::frame&& f) {
    if (!s->ready) {
      s->ready = true;  // the codec yields the peer's READY first, once
      s->recon = first_recon(zopt_);
      if (s->call) send(s);
      return;
    }
    auto p = s->call;
    s->call = nullptr;
    if (!p || p->done) {  // a reply nobody waits for: the connection is out of step
      discard(s);
      serve();
      return;
    }
    std::erase(busy_, s);
    idle_.push_back(s);
    complete(p, std::move(f.body));
    serve();
  }

  void on_lost(const slot_ptr& s, error_code ec) {
    auto p = s->call;
    discard(s);
    if (p) {
      spdlog::debug("request channel to {}: connection lost with a request in flight: {}", ep_.host, ec.message());
      complete(p, make_error_code(errc::disconnected));
    }
    serve();
  }

  void on_timeout(const pending_ptr& p) {
    if (p->done) return;
    // The connection carrying it (if any) is discarded: its reply, if it ever comes, is stale.
    for (auto s : std::vector<slot_ptr>(busy_))
      if (s->call == p) discard(s);
    complete(p, make_error_code(errc::timeout));
    serve();
  }

  void discard(const slot_ptr& s) {
    if (!s || s->dead) return;
    s->dead = true;
    if (s->dialing) s->dialing->cancel();
    s->dialing = nullptr;
    s->retry.cancel();
    if (s->conn) s->conn->close();
    s->conn = nullptr;
    if (open_) --open_;
    s->call = nullptr;
    std::erase(idle_, s);
    std::erase(busy_, s);
  }

  void complete(const pending_ptr& p, result<wire::value> r) {
    if (p->done) return;
    p->done = true;
    p->timer.cancel();
    auto ex = std::move(p->work);
    p->work = {};
    asio::post(ex, [h = std::move(p->handler), r = std::move(r)]() mutable { std::move(h)(std::move(r)); });
  }

  void do_close() {
    if (closed_) return;
    closed_ = true;
    auto q = std::move(queue_);
    queue_.clear();
    for (auto& p : q) complete(p, make_error_code(errc::closed));
    for (auto s : std::vector<slot_ptr>(busy_)) {
      auto p = s->call;
      discard(s);
      if (p) complete(p, make_error_code(errc::closed));
    }
    for (auto s : std::vector<slot_ptr>(idle_)) discard(s);
  }

  client_strand strand_;
  const endpoint ep_;
  const options opt_;
  const zmq_options zopt_;
  bool closed_ = false;
  std::deque<pending_ptr> queue_;
  std::vector<slot_ptr> idle_;
  std::vector<slot_ptr> busy_;
  std::size_t open_ = 0;
};

class zmtp_req_client final : public req_client {
 public:
  zmtp_req_client(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : ep_(ep), core_(std::make_shared<zmtp_req_core>(std::move(ex), std::move(ep), std::move(opt), z)) {}
  ~zmtp_req_client() override { core_->close(); }

  asio::awaitable<result<wire::value>> request(wire::value body, std::chrono::milliseconds timeout) override {
    auto keep = core_;
    co_return co_await core_->async_request(std::move(body), timeout, asio::use_awaitable);
  }
  asio::awaitable<result<wire::value>> request_stream(wire::value body, std::function<void(const wire::value&)>,
                                                      std::chrono::milliseconds timeout) override {
    auto keep = core_;
    co_return co_await core_->async_request(std::move(body), timeout, asio::use_awaitable);
  }
  void close() override { core_->close(); }
  const endpoint& remote() const override { return ep_; }

 private:
  const endpoint ep_;
  std::shared_ptr<zmtp_req_core> core_;
};

// ------------------------------------------------------------------- pub client ----

class zmtp_sub_core : public std::enable_shared_from_this<zmtp_sub_core> {
 public:
  zmtp_sub_core(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : strand_(asio::make_strand(ex)),
        opt_(std::move(opt)),
        zopt_(z),
        hexid_(zmq_framing::topic_of(id)),
        retry_(strand_) {}

  template <class Token>
  auto async_connect(endpoint ep, pub_client::message_handler on_msg, pub_client::closed_handler on_closed,
                     Token&& token) {
    return asio::async_initiate<Token, connect_sig>(
        [self = shared_from_this()](auto handler, endpoint e, pub_client::message_handler m,
                                    pub_client::closed_handler c) {
          asio::any_io_executor hex = asio::get_associated_executor(handler, self->strand_);
          auto a = std::make_shared<attempt>(self->strand_, asio::any_completion_handler<connect_sig>(std::move(handler)));
          a->work = asio::prefer(hex, asio::execution::outstanding_work.tracked);
          asio::post(self->strand_, [self, a, e = std::move(e), m = std::move(m), c = std::move(c)]() mutable {
            self->start(a, std::move(e), std::move(m), std::move(c));
          });
        },
        token, std::move(ep), std::move(on_msg), std::move(on_closed));
  }

  bool connected() const { return connected_.load(); }
  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->drop(false, {}); });
  }

 private:
  struct attempt {
    attempt(client_strand s, asio::any_completion_handler<connect_sig> h) : handler(std::move(h)), timer(std::move(s)) {}
    asio::any_completion_handler<connect_sig> handler;
    asio::any_io_executor work;
    asio::steady_timer timer;
    bool done = false;
  };
  using attempt_ptr = std::shared_ptr<attempt>;

  void finish(const attempt_ptr& a, result<void> r) {
    if (!a || a->done) return;
    a->done = true;
    a->timer.cancel();
    auto ex = std::move(a->work);
    a->work = {};
    asio::post(ex, [h = std::move(a->handler), r]() mutable { std::move(h)(r); });
  }

  void start(const attempt_ptr& a, endpoint ep, pub_client::message_handler on_msg,
             pub_client::closed_handler on_closed) {
    drop(false, {});  // a new connect replaces the old connection silently
    const std::uint64_t gen = ++gen_;
    ep_ = std::move(ep);
    on_msg_ = std::move(on_msg);
    on_closed_ = std::move(on_closed);
    recon_ = first_recon(zopt_);
    if (!zopt_.connect_events) {
      // As a libzmq SUB without a monitor: connected at once, dialled in the background.
      connected_ = true;
      finish(a, {});
      dial(gen);
      return;
    }
    attempt_ = a;
    std::weak_ptr<zmtp_sub_core> w = weak_from_this();
    a->timer.expires_after(opt_.connect_timeout);
    a->timer.async_wait([w, a, gen](const error_code& ec) {
      auto self = w.lock();
      if (ec || !self || a->done) return;
      if (self->gen_ == gen) self->drop(false, {});
      self->finish(a, make_error_code(errc::timeout));
    });
    dial(gen);
  }

  void dial(std::uint64_t gen) {
    dialing_ = std::make_shared<connector>(strand_, ep_, opt_);
    std::weak_ptr<zmtp_sub_core> w = weak_from_this();
    dialing_->start([w, gen](error_code ec, detail::client_socket sock) {
      auto self = w.lock();
      if (!self || self->gen_ != gen) return;
      self->dialing_ = nullptr;
      if (ec) return self->on_lost_or_failed(gen, ec);
      self->on_connected(gen, std::move(sock));
    });
  }

  void on_connected(std::uint64_t gen, detail::client_socket sock) {
    conn_ = std::make_shared<client_conn>(std::move(sock), opt_, detail::describe(ep_),
                                          std::make_unique<zmtp::codec>(zmtp::role::sub));
    ready_ = false;
    std::weak_ptr<zmtp_sub_core> w = weak_from_this();
    std::weak_ptr<client_conn> wc = conn_;
    conn_->start_read(
        [w, gen](wire::frame&& f) {
          if (auto self = w.lock(); self && self->gen_ == gen) self->on_frame(std::move(f));
        },
        [w, gen, wc](error_code ec) {
          auto self = w.lock();
          if (!self || self->gen_ != gen || self->conn_ != wc.lock()) return;
          self->on_lost_or_failed(gen, ec);
        });
    start_heartbeat(conn_, zopt_);
  }

  void on_frame(wire::frame&& f) {
    if (!ready_) {
      ready_ = true;  // the codec yields the peer's READY first, once
      recon_ = first_recon(zopt_);
      // Subscribe only now: libzmq reads a message that arrives before it has sent its
      // own READY as a handshake command and drops the connection
      // (ZMQ_PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND); its own SUB waits the same way.
      if (zopt_.filtering) {
        conn_->write(std::make_shared<const std::string>(zmtp::subscribe(zmq_framing::broadcast_topic)));
        conn_->write(std::make_shared<const std::string>(zmtp::subscribe(hexid_)));
      } else {
        conn_->write(std::make_shared<const std::string>(zmtp::subscribe("")));
      }
      if (attempt_) {
        connected_ = true;
        auto a = std::move(attempt_);
        attempt_ = nullptr;
        finish(a, {});
      }
      return;
    }
    if (!on_msg_) return;
    if (wire::find(f.head, "malformed")) {
      if (auto n = bad_log_.hit()) spdlog::warn("publish channel: {} malformed ZeroMQ publish(es) ignored", n);
      return;
    }
    if (const auto topic = wire::get_text(f.head, "topic")) {
      if (*topic != zmq_framing::broadcast_topic && *topic != hexid_) return;  // another minion's
    }
    on_msg_(std::move(f.body));
  }

  // The dial failed or the connection was lost (gen is current).
  void on_lost_or_failed(std::uint64_t gen, error_code ec) {
    if (conn_) conn_->close();
    conn_ = nullptr;
    if (zopt_.connect_events) {
      if (attempt_) {
        auto a = std::move(attempt_);
        attempt_ = nullptr;
        drop(false, {});
        finish(a, ec == make_error_code(errc::resolve_failed) ? ec : make_error_code(errc::connect_failed));
        return;
      }
      drop(true, ec);
      return;
    }
    // Silent re-dial, as libzmq: the owner learns of a new master key from the publishes.
    if (ready_) spdlog::debug("publish channel to {}: connection lost ({}), re-dialling", ep_.host, ec.message());
    ready_ = false;
    retry_.expires_after(recon_);
    recon_ = next_recon(recon_, zopt_);
    std::weak_ptr<zmtp_sub_core> w = weak_from_this();
    retry_.async_wait([w, gen](const error_code& tec) {
      auto self = w.lock();
      if (tec || !self || self->gen_ != gen) return;
      self->dial(gen);
    });
  }

  // Close the connection; report the loss once if it was up and report is set.
  void drop(bool report, error_code why) {
    const bool was = connected_.exchange(false);
    ++gen_;
    if (dialing_) dialing_->cancel();
    dialing_ = nullptr;
    retry_.cancel();
    if (conn_) conn_->close();
    conn_ = nullptr;
    ready_ = false;
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    on_msg_ = nullptr;
    if (report && was && cb) cb(why);
  }

  client_strand strand_;
  const options opt_;
  const zmq_options zopt_;
  const std::string hexid_;
  endpoint ep_;
  asio::steady_timer retry_;
  std::chrono::milliseconds recon_{0};
  std::shared_ptr<connector> dialing_;
  std::shared_ptr<client_conn> conn_;
  attempt_ptr attempt_;
  std::uint64_t gen_ = 0;
  bool ready_ = false;
  std::atomic<bool> connected_{false};
  pub_client::message_handler on_msg_;
  pub_client::closed_handler on_closed_;
  util::log_limiter bad_log_;
};

class zmtp_pub_client final : public pub_client {
 public:
  zmtp_pub_client(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : core_(std::make_shared<zmtp_sub_core>(std::move(ex), std::move(opt), z, std::move(id))) {}
  ~zmtp_pub_client() override { core_->close(); }
  asio::awaitable<result<void>> connect(endpoint ep, wire::value, message_handler on_msg,
                                        closed_handler on_closed) override {
    auto keep = core_;
    co_return co_await core_->async_connect(std::move(ep), std::move(on_msg), std::move(on_closed),
                                            asio::use_awaitable);
  }
  bool send(wire::value) override { return false; }
  bool connected() const override { return core_->connected(); }
  void close() override { core_->close(); }

 private:
  std::shared_ptr<zmtp_sub_core> core_;
};

}  // namespace

std::shared_ptr<req_client> make_zmtp_req_client(asio::any_io_executor ex, endpoint ep, options opt,
                                                 zmq_options zopt) {
  return std::make_shared<zmtp_req_client>(std::move(ex), std::move(ep), std::move(opt), zopt);
}

std::shared_ptr<pub_client> make_zmtp_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                 std::string minion_id) {
  return std::make_shared<zmtp_pub_client>(std::move(ex), std::move(opt), zopt, std::move(minion_id));
}

}  // namespace sylvite::transport
