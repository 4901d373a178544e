// sylvite::transport ZeroMQ clients (minion side): a REQ-socket pool behind req_client and
// a SUB socket behind pub_client (zmq.hpp). Same completion rules as the TCP clients:
// completions are posted to the awaiting coroutine's executor; state lives on a strand.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <deque>
#include <random>

#include "core/transport/zmq_socket.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::transport {

using zmq_detail::zsock;

namespace {

using reply_sig = void(result<wire::value>);
using connect_sig = void(result<void>);

constexpr int k_client_events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_DISCONNECTED |
                                ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;
constexpr std::size_t k_max_req_sockets = 8;

wire::limits reply_limits(const options& opt) {
  wire::limits l;
  if (opt.max_frame_size) l.max_bytes = opt.max_frame_size;
  return l;
}

std::string client_uri(const endpoint& ep) { return zmq_detail::tcp_uri(ep.host, ep.port, false); }

// ------------------------------------------------------------------- req client ----

class zreq_core : public std::enable_shared_from_this<zreq_core> {
 public:
  zreq_core(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : strand_(asio::make_strand(ex)), ep_(std::move(ep)), opt_(std::move(opt)), zopt_(z), uri_(client_uri(ep_)) {}

  template <class Token>
  auto async_request(wire::value body, std::chrono::milliseconds timeout, Token&& token) {
    return asio::async_initiate<Token, reply_sig>(
        [self = shared_from_this()](auto handler, wire::value b, std::chrono::milliseconds t) {
          asio::any_io_executor hex = asio::get_associated_executor(handler, self->strand_);
          auto p = std::make_shared<pending>(self->strand_, asio::any_completion_handler<reply_sig>(std::move(handler)));
          p->work = asio::prefer(hex, asio::execution::outstanding_work.tracked);
          p->payload = wire::pack_payload(b);  // off the strand
          asio::post(self->strand_, [self, p, t] { self->start(p, t); });
        },
        token, std::move(body), timeout);
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->do_close(); });
  }

 private:
  struct pending {
    pending(zmq_detail::zstrand s, asio::any_completion_handler<reply_sig> h)
        : handler(std::move(h)), timer(std::move(s)) {}
    asio::any_completion_handler<reply_sig> handler;
    asio::any_io_executor work;
    std::string payload;
    asio::steady_timer timer;
    bool done = false;
  };
  using pending_ptr = std::shared_ptr<pending>;
  struct slot {
    std::shared_ptr<zsock> sock;
    pending_ptr call;
    bool connected = false;
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

  // Give queued calls a socket: an idle one, else a new one up to the cap.
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
      } else if (open_ < k_max_req_sockets) {
        s = open_slot();
        if (!s) {
          queue_.pop_front();
          complete(p, make_error_code(errc::connect_failed));
          continue;
        }
      } else {
        return;  // wait for a socket to come back
      }
      queue_.pop_front();
      s->call = p;
      busy_.push_back(s);
      if (!s->sock->send_one(p->payload)) {
        discard(s);
        complete(p, make_error_code(errc::disconnected));
      }
    }
  }

  slot_ptr open_slot() {
    auto s = std::make_shared<slot>();
    s->sock = std::make_shared<zsock>(strand_, ZMQ_REQ, "request channel to " + ep_.host);
    if (!s->sock->ok()) return nullptr;
    s->sock->apply_common(opt_, zopt_, true);
    s->sock->set_int(ZMQ_RECONNECT_IVL, std::max(1, zopt_.recon_default_ms));
    s->sock->set_int(ZMQ_RECONNECT_IVL_MAX, 5000);  // Salt's RequestClient
    std::weak_ptr<zreq_core> w = weak_from_this();
    std::weak_ptr<slot> ws = s;
    if (zopt_.connect_events) {
      s->sock->watch(k_client_events | (zopt_.monitor ? ZMQ_EVENT_ALL : 0), [w, ws](const zmq_detail::socket_event& e) {
        auto self = w.lock();
        auto sl = ws.lock();
        if (self && sl) self->on_event(sl, e);
      });
    }
    if (auto r = s->sock->connect(uri_); !r) {
      spdlog::warn("request channel: cannot connect to {}: {}", uri_, r.error().message());
      s->sock->close();
      return nullptr;
    }
    s->sock->start([w, ws](zmq_detail::message&& m) {
      auto self = w.lock();
      auto sl = ws.lock();
      if (self && sl) self->on_reply(sl, std::move(m));
    });
    ++open_;
    return s;
  }

  void on_event(const slot_ptr& s, const zmq_detail::socket_event& e) {
    if (zopt_.monitor)
      spdlog::info("request channel to {}: zmq_monitor: {} {}", ep_.host, zmq_detail::event_name(e.event), e.endpoint);
    if (e.event == ZMQ_EVENT_CONNECTED || e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      s->connected = true;
      return;
    }
    if (e.event == ZMQ_EVENT_CONNECT_RETRIED && !s->connected) {
      // Refused (or unreachable): libzmq would keep re-dialling; the caller decides.
      auto p = s->call;
      discard(s);
      if (p) complete(p, make_error_code(errc::connect_failed));
      serve();
      return;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
        e.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      // Lost (or the handshake failed): a REQ socket would wait forever for a reply the
      // master will never send.
      auto p = s->call;
      discard(s);
      if (p) complete(p, make_error_code(errc::disconnected));
      serve();
    }
  }

  void on_reply(const slot_ptr& s, zmq_detail::message&& m) {
    auto p = s->call;
    s->call = nullptr;
    if (!p || p->done) {  // nothing waits (cannot happen with REQ; be safe)
      discard(s);
      serve();
      return;
    }
    // REQ strips the envelope: one frame, the payload.
    if (m.frames.size() != 1) {
      discard(s);
      complete(p, make_error_code(errc::bad_frame));
      serve();
      return;
    }
    auto v = wire::unpack(m.frames[0], reply_limits(opt_));
    std::erase(busy_, s);
    idle_.push_back(s);
    if (!v) complete(p, make_error_code(errc::bad_frame));
    else complete(p, std::move(*v));
    serve();
  }

  void on_timeout(const pending_ptr& p) {
    if (p->done) return;
    // The socket carrying it (if any) is discarded: its reply, if it ever comes, is stale.
    for (auto s : std::vector<slot_ptr>(busy_))
      if (s->call == p) discard(s);
    complete(p, make_error_code(errc::timeout));
    serve();
  }

  void discard(const slot_ptr& s) {
    if (!s || !s->sock) return;
    if (!s->sock->closed()) {
      s->sock->close();
      if (open_) --open_;
    }
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
    for (auto& s : idle_) s->sock->close();
    idle_.clear();
  }

  zmq_detail::zstrand strand_;
  const endpoint ep_;
  const options opt_;
  const zmq_options zopt_;
  const std::string uri_;
  bool closed_ = false;
  std::deque<pending_ptr> queue_;
  std::vector<slot_ptr> idle_;
  std::vector<slot_ptr> busy_;
  std::size_t open_ = 0;
};

class zmq_req_client final : public req_client {
 public:
  zmq_req_client(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : ep_(ep), core_(std::make_shared<zreq_core>(std::move(ex), std::move(ep), std::move(opt), z)) {}
  ~zmq_req_client() override { core_->close(); }

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
  std::shared_ptr<zreq_core> core_;
};

// ------------------------------------------------------------------- pub client ----

class zsub_core : public std::enable_shared_from_this<zsub_core> {
 public:
  zsub_core(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : strand_(asio::make_strand(ex)),
        opt_(std::move(opt)),
        zopt_(z),
        id_(std::move(id)),
        hexid_(zmq_framing::topic_of(id_)) {}

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
    attempt(zmq_detail::zstrand s, asio::any_completion_handler<connect_sig> h) : handler(std::move(h)), timer(std::move(s)) {}
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
    on_msg_ = std::move(on_msg);
    on_closed_ = std::move(on_closed);
    attempt_ = a;
    sock_ = std::make_shared<zsock>(strand_, ZMQ_SUB, "publish channel to " + ep.host);
    if (!sock_->ok()) return finish(a, make_error_code(errc::connect_failed));
    sock_->apply_common(opt_, zopt_, true);
    if (zopt_.filtering) {
      sock_->set_bytes(ZMQ_SUBSCRIBE, std::string(zmq_framing::broadcast_topic));
      sock_->set_bytes(ZMQ_SUBSCRIBE, hexid_);
    } else {
      sock_->set_bytes(ZMQ_SUBSCRIBE, "");
    }
    if (!id_.empty()) sock_->set_bytes(ZMQ_ROUTING_ID, id_.substr(0, 255));
    int recon = std::max(1, zopt_.recon_default_ms);
    if (zopt_.recon_randomize) {
      static thread_local std::mt19937 rng{std::random_device{}()};
      recon = std::uniform_int_distribution<int>(recon, recon + std::max(0, zopt_.recon_max_ms))(rng);
    }
    sock_->set_int(ZMQ_RECONNECT_IVL, recon);
    if (zopt_.recon_max_ms > 0) sock_->set_int(ZMQ_RECONNECT_IVL_MAX, zopt_.recon_max_ms);
    std::weak_ptr<zsub_core> w = weak_from_this();
    if (zopt_.connect_events || zopt_.monitor) {
      sock_->watch(k_client_events | (zopt_.monitor ? ZMQ_EVENT_ALL : 0), [w, gen](const zmq_detail::socket_event& e) {
        if (auto self = w.lock()) self->on_event(gen, e);
      });
    }
    if (auto r = sock_->connect(client_uri(ep)); !r) {
      drop(false, {});
      return finish(a, make_error_code(errc::resolve_failed));
    }
    sock_->start([w, gen](zmq_detail::message&& m) {
      if (auto self = w.lock()) self->on_message(gen, std::move(m));
    });
    if (!zopt_.connect_events) {
      // No monitor (two descriptors per socket fewer): libzmq dials in the background and
      // re-dials by itself; the connection's loss is never reported.
      connected_ = true;
      attempt_ = nullptr;
      return finish(a, {});
    }
    a->timer.expires_after(opt_.connect_timeout);
    a->timer.async_wait([w, a, gen](const error_code& ec) {
      auto self = w.lock();
      if (ec || !self || a->done) return;
      if (self->gen_ == gen) self->drop(false, {});
      self->finish(a, make_error_code(errc::timeout));
    });
  }

  void on_event(std::uint64_t gen, const zmq_detail::socket_event& e) {
    if (gen != gen_) return;
    if (zopt_.monitor) spdlog::info("publish channel: zmq_monitor: {} {}", zmq_detail::event_name(e.event), e.endpoint);
    if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || e.event == ZMQ_EVENT_CONNECTED) {
      if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || !connected_) {
        connected_ = true;
        auto a = std::move(attempt_);
        attempt_ = nullptr;
        finish(a, {});
      }
      return;
    }
    if (e.event == ZMQ_EVENT_CONNECT_RETRIED && !connected_) {
      auto a = std::move(attempt_);
      attempt_ = nullptr;
      drop(false, {});
      finish(a, make_error_code(errc::connect_failed));
      return;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
        e.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      if (attempt_) {
        auto a = std::move(attempt_);
        attempt_ = nullptr;
        drop(false, {});
        finish(a, make_error_code(errc::connect_failed));
        return;
      }
      drop(true, asio::error::eof);
    }
  }

  void on_message(std::uint64_t gen, zmq_detail::message&& m) {
    if (gen != gen_ || !on_msg_) return;
    auto payload = zmq_framing::accept_publish(std::move(m.frames), hexid_);
    if (!payload) {
      if (auto n = bad_log_.hit()) spdlog::warn("publish channel: {} malformed ZeroMQ publish(es) ignored", n);
      return;
    }
    if (!*payload) return;  // another minion's topic
    on_msg_(wire::make_bin(**payload));
  }

  // Close the socket; report the loss once if it was up and report is set.
  void drop(bool report, error_code why) {
    const bool was = connected_.exchange(false);
    ++gen_;
    if (sock_) {
      sock_->close();
      sock_ = nullptr;
    }
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    on_msg_ = nullptr;
    if (report && was && cb) cb(why);
  }

  zmq_detail::zstrand strand_;
  const options opt_;
  const zmq_options zopt_;
  const std::string id_;
  const std::string hexid_;
  std::shared_ptr<zsock> sock_;
  attempt_ptr attempt_;
  std::uint64_t gen_ = 0;
  std::atomic<bool> connected_{false};
  pub_client::message_handler on_msg_;
  pub_client::closed_handler on_closed_;
  util::log_limiter bad_log_;
};

class zmq_pub_client final : public pub_client {
 public:
  zmq_pub_client(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : core_(std::make_shared<zsub_core>(std::move(ex), std::move(opt), z, std::move(id))) {}
  ~zmq_pub_client() override { core_->close(); }
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
  std::shared_ptr<zsub_core> core_;
};

}  // namespace

std::shared_ptr<req_client> make_zmq_req_client(asio::any_io_executor ex, endpoint ep, options opt, zmq_options zopt) {
  return std::make_shared<zmq_req_client>(std::move(ex), std::move(ep), std::move(opt), zopt);
}

std::shared_ptr<pub_client> make_zmq_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                std::string minion_id) {
  return std::make_shared<zmq_pub_client>(std::move(ex), std::move(opt), zopt, std::move(minion_id));
}

std::shared_ptr<req_client> make_req_client(kind k, asio::any_io_executor ex, endpoint ep, options opt,
                                            const zmq_options& zopt) {
  if (k == kind::zeromq && zopt.client_engine == zmq_engine::native)
    return make_zmtp_req_client(std::move(ex), std::move(ep), std::move(opt), zopt);
  if (k == kind::zeromq) return make_zmq_req_client(std::move(ex), std::move(ep), std::move(opt), zopt);
  return req_client::create(std::move(ex), std::move(ep), std::move(opt));
}

std::shared_ptr<pub_client> make_pub_client(kind k, asio::any_io_executor ex, options opt, const zmq_options& zopt,
                                            const std::string& minion_id) {
  if (k == kind::zeromq && zopt.client_engine == zmq_engine::native)
    return make_zmtp_pub_client(std::move(ex), std::move(opt), zopt, minion_id);
  if (k == kind::zeromq) return make_zmq_pub_client(std::move(ex), std::move(opt), zopt, minion_id);
  return pub_client::create(std::move(ex), std::move(opt));
}

}  // namespace sylvite::transport
