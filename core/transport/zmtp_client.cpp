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
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <random>

#include "core/transport/detail/client.hpp"
#include "core/transport/detail/req_pool.hpp"
#include "core/transport/detail/zmtp_codec.hpp"
#include "core/transport/zmq.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::transport {

namespace {

using detail::client_conn;
using detail::client_strand;
using detail::connector;

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

struct zmtp_slot : detail::req_slot {
  explicit zmtp_slot(client_strand s) : retry(std::move(s)) {}
  std::shared_ptr<connector> dialing;
  std::shared_ptr<client_conn> conn;
  asio::steady_timer retry;
  std::chrono::milliseconds recon{0};
  bool dialed = false;  // the first dial started
  bool ready = false;   // the peer's READY arrived
};

class zmtp_req_core final : public detail::req_pool<zmtp_slot> {
 public:
  zmtp_req_core(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : req_pool(ex, k_max_req_connections), ep_(std::move(ep)), opt_(std::move(opt)), zopt_(z) {}

 private:
  std::shared_ptr<zmtp_req_core> self() { return std::static_pointer_cast<zmtp_req_core>(shared_from_this()); }

  std::string encode(const wire::value& body) const override { return zmtp::request(wire::pack_payload(body)); }

  slot_ptr open_slot() override {
    auto s = std::make_shared<zmtp_slot>(strand_);
    s->recon = first_recon(zopt_);
    return s;
  }

  // A new slot dials once its call is assigned; its call goes out when the peer's READY is in.
  bool transmit(const slot_ptr& s) override {
    if (!s->dialed) {
      dial(s);
      return true;
    }
    if (!s->ready) return true;
    return s->conn && s->call && s->conn->write(s->call->bytes);
  }

  void release(zmtp_slot& s) override {
    if (s.dialing) s.dialing->cancel();
    s.dialing = nullptr;
    s.retry.cancel();
    if (s.conn) s.conn->close();
    s.conn = nullptr;
  }

  void dial(const slot_ptr& s) {
    s->dialed = true;
    s->dialing = std::make_shared<connector>(strand_, ep_, opt_);
    std::weak_ptr<zmtp_req_core> w = self();
    std::weak_ptr<zmtp_slot> ws = s;
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
    if (zopt_.connect_events || closed()) {
      // Refused (or unreachable): libzmq would keep re-dialling; the caller decides.
      fail_slot(s, ec == make_error_code(errc::closed) ? ec : make_error_code(errc::connect_failed));
      return;
    }
    // As a libzmq REQ without a monitor: re-dial until the request's deadline discards us.
    s->retry.expires_after(s->recon);
    s->recon = next_recon(s->recon, zopt_);
    std::weak_ptr<zmtp_req_core> w = self();
    std::weak_ptr<zmtp_slot> ws = s;
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
    std::weak_ptr<zmtp_req_core> w = self();
    std::weak_ptr<zmtp_slot> ws = s;
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
      if (s->call && !s->call->done && !transmit(s)) fail_slot(s, make_error_code(errc::disconnected));
      return;
    }
    reply_arrived(s, std::move(f.body));
  }

  void on_lost(const slot_ptr& s, error_code ec) {
    if (s->call)
      spdlog::debug("request channel to {}: connection lost with a request in flight: {}", ep_.host, ec.message());
    fail_slot(s, make_error_code(errc::disconnected));
  }

  const endpoint ep_;
  const options opt_;
  const zmq_options zopt_;
};

// ------------------------------------------------------------------- pub client ----

class zmtp_sub_core final : public detail::sub_core_base {
 public:
  zmtp_sub_core(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : sub_core_base(ex), opt_(std::move(opt)), zopt_(z), hexid_(zmq_framing::topic_of(id)), retry_(strand_) {}

 private:
  std::shared_ptr<zmtp_sub_core> self() { return std::static_pointer_cast<zmtp_sub_core>(shared_from_this()); }

  void start(const attempt_ptr& a, endpoint ep, pub_client::message_handler on_msg,
             pub_client::closed_handler on_closed) override {
    const std::uint64_t gen = replace(std::move(on_msg), std::move(on_closed));
    ep_ = std::move(ep);
    recon_ = first_recon(zopt_);
    if (!zopt_.connect_events) {
      // As a libzmq SUB without a monitor: connected at once, dialled in the background.
      connected_ = true;
      finish(a, {});
      dial(gen);
      return;
    }
    attempt_ = a;
    std::weak_ptr<zmtp_sub_core> w = self();
    a->timer.expires_after(opt_.connect_timeout);
    a->timer.async_wait([w, a, gen](const error_code& ec) {
      auto self = w.lock();
      if (ec || !self || a->done) return;
      if (self->gen_ == gen) self->drop(false, {});
      finish(a, make_error_code(errc::timeout));
    });
    dial(gen);
  }

  void release_connection() override {
    if (dialing_) dialing_->cancel();
    dialing_ = nullptr;
    retry_.cancel();
    if (conn_) conn_->close();
    conn_ = nullptr;
    ready_ = false;
  }

  void dial(std::uint64_t gen) {
    dialing_ = std::make_shared<connector>(strand_, ep_, opt_);
    std::weak_ptr<zmtp_sub_core> w = self();
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
    std::weak_ptr<zmtp_sub_core> w = self();
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
      if (auto a = take_attempt()) {
        connected_ = true;
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
      if (auto a = take_attempt()) {
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
    std::weak_ptr<zmtp_sub_core> w = self();
    retry_.async_wait([w, gen](const error_code& tec) {
      auto self = w.lock();
      if (tec || !self || self->gen_ != gen) return;
      self->dial(gen);
    });
  }

  const options opt_;
  const zmq_options zopt_;
  const std::string hexid_;
  endpoint ep_;
  asio::steady_timer retry_;
  std::chrono::milliseconds recon_{0};
  std::shared_ptr<connector> dialing_;
  std::shared_ptr<client_conn> conn_;
  bool ready_ = false;
  util::log_limiter bad_log_;
};

}  // namespace

std::shared_ptr<req_client> make_zmtp_req_client(asio::any_io_executor ex, endpoint ep, options opt,
                                                 zmq_options zopt) {
  auto core = std::make_shared<zmtp_req_core>(std::move(ex), ep, std::move(opt), zopt);
  return std::make_shared<detail::req_client_of<zmtp_req_core>>(std::move(ep), std::move(core));
}

std::shared_ptr<pub_client> make_zmtp_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                 std::string minion_id) {
  return std::make_shared<detail::pub_client_of<zmtp_sub_core>>(
      std::make_shared<zmtp_sub_core>(std::move(ex), std::move(opt), zopt, std::move(minion_id)));
}

}  // namespace sylvite::transport
