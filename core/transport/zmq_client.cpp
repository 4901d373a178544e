// sylvite::transport ZeroMQ clients (minion side): a REQ-socket pool behind req_client and
// a SUB socket behind pub_client (zmq.hpp). Same completion rules as the TCP clients:
// completions are posted to the awaiting coroutine's executor; state lives on a strand.
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <random>

#include "core/transport/detail/req_pool.hpp"
#include "core/transport/zmq_socket.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::transport {

using zmq_detail::zsock;

namespace {

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

struct zmq_slot : detail::req_slot {
  std::shared_ptr<zsock> sock;
  bool connected = false;
};

class zreq_core final : public detail::req_pool<zmq_slot> {
 public:
  zreq_core(asio::any_io_executor ex, endpoint ep, options opt, zmq_options z)
      : req_pool(ex, k_max_req_sockets), ep_(std::move(ep)), opt_(std::move(opt)), zopt_(z), uri_(client_uri(ep_)) {}

 private:
  std::shared_ptr<zreq_core> self() { return std::static_pointer_cast<zreq_core>(shared_from_this()); }

  std::string encode(const wire::value& body) const override { return wire::pack_payload(body); }

  slot_ptr open_slot() override {
    auto s = std::make_shared<zmq_slot>();
    s->sock = std::make_shared<zsock>(strand_, ZMQ_REQ, "request channel to " + ep_.host);
    if (!s->sock->ok()) return nullptr;
    s->sock->apply_common(opt_, zopt_, true);
    s->sock->set_int(ZMQ_RECONNECT_IVL, std::max(1, zopt_.recon_default_ms));
    s->sock->set_int(ZMQ_RECONNECT_IVL_MAX, 5000);  // Salt's RequestClient
    std::weak_ptr<zreq_core> w = self();
    std::weak_ptr<zmq_slot> ws = s;
    if (zopt_.connect_events) {
      s->sock->watch(k_client_events | (zopt_.monitor ? ZMQ_EVENT_ALL : 0), [w, ws](const zmq_detail::socket_event& e) {
        auto self = w.lock();
        auto sl = ws.lock();
        if (self && sl && !sl->dead) self->on_event(sl, e);
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
      if (self && sl && !sl->dead) self->on_reply(sl, std::move(m));
    });
    return s;
  }

  bool transmit(const slot_ptr& s) override { return s->call && s->sock->send_one(*s->call->bytes); }

  void release(zmq_slot& s) override {
    if (s.sock && !s.sock->closed()) s.sock->close();
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
      fail_slot(s, make_error_code(errc::connect_failed));
      return;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
        e.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      // Lost (or the handshake failed): a REQ socket would wait forever for a reply the
      // master will never send.
      fail_slot(s, make_error_code(errc::disconnected));
    }
  }

  void on_reply(const slot_ptr& s, zmq_detail::message&& m) {
    // REQ strips the envelope: one frame, the payload.
    if (m.frames.size() != 1) return fail_slot(s, make_error_code(errc::bad_frame));
    auto v = wire::unpack(m.frames[0], reply_limits(opt_));
    if (!v) return reply_arrived(s, make_error_code(errc::bad_frame));
    reply_arrived(s, std::move(*v));
  }

  const endpoint ep_;
  const options opt_;
  const zmq_options zopt_;
  const std::string uri_;
};

// ------------------------------------------------------------------- pub client ----

class zsub_core final : public detail::sub_core_base {
 public:
  zsub_core(asio::any_io_executor ex, options opt, zmq_options z, std::string id)
      : sub_core_base(ex), opt_(std::move(opt)), zopt_(z), id_(std::move(id)), hexid_(zmq_framing::topic_of(id_)) {}

 private:
  std::shared_ptr<zsub_core> self() { return std::static_pointer_cast<zsub_core>(shared_from_this()); }

  void start(const attempt_ptr& a, endpoint ep, pub_client::message_handler on_msg,
             pub_client::closed_handler on_closed) override {
    const std::uint64_t gen = replace(std::move(on_msg), std::move(on_closed));
    attempt_ = a;
    sock_ = std::make_shared<zsock>(strand_, ZMQ_SUB, "publish channel to " + ep.host);
    if (!sock_->ok()) return finish(take_attempt(), make_error_code(errc::connect_failed));
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
    std::weak_ptr<zsub_core> w = self();
    if (zopt_.connect_events || zopt_.monitor) {
      sock_->watch(k_client_events | (zopt_.monitor ? ZMQ_EVENT_ALL : 0), [w, gen](const zmq_detail::socket_event& e) {
        if (auto self = w.lock()) self->on_event(gen, e);
      });
    }
    if (auto r = sock_->connect(client_uri(ep)); !r) {
      auto pending = take_attempt();
      drop(false, {});
      return finish(pending, make_error_code(errc::resolve_failed));
    }
    sock_->start([w, gen](zmq_detail::message&& m) {
      if (auto self = w.lock()) self->on_message(gen, std::move(m));
    });
    if (!zopt_.connect_events) {
      // No monitor (two descriptors per socket fewer): libzmq dials in the background and
      // re-dials by itself; the connection's loss is never reported.
      connected_ = true;
      return finish(take_attempt(), {});
    }
    a->timer.expires_after(opt_.connect_timeout);
    a->timer.async_wait([w, a, gen](const error_code& ec) {
      auto self = w.lock();
      if (ec || !self || a->done) return;
      if (self->gen_ == gen) self->drop(false, {});
      finish(a, make_error_code(errc::timeout));
    });
  }

  void release_connection() override {
    if (sock_) {
      sock_->close();
      sock_ = nullptr;
    }
  }

  void on_event(std::uint64_t gen, const zmq_detail::socket_event& e) {
    if (gen != gen_) return;
    if (zopt_.monitor) spdlog::info("publish channel: zmq_monitor: {} {}", zmq_detail::event_name(e.event), e.endpoint);
    if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || e.event == ZMQ_EVENT_CONNECTED) {
      if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || !connected_) {
        connected_ = true;
        finish(take_attempt(), {});
      }
      return;
    }
    if (e.event == ZMQ_EVENT_CONNECT_RETRIED && !connected_) {
      auto a = take_attempt();
      drop(false, {});
      finish(a, make_error_code(errc::connect_failed));
      return;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED || e.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
        e.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      if (auto a = take_attempt()) {
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

  const options opt_;
  const zmq_options zopt_;
  const std::string id_;
  const std::string hexid_;
  std::shared_ptr<zsock> sock_;
  util::log_limiter bad_log_;
};

}  // namespace

std::shared_ptr<req_client> make_zmq_req_client(asio::any_io_executor ex, endpoint ep, options opt, zmq_options zopt) {
  auto core = std::make_shared<zreq_core>(std::move(ex), ep, std::move(opt), zopt);
  return std::make_shared<detail::req_client_of<zreq_core>>(std::move(ep), std::move(core));
}

std::shared_ptr<pub_client> make_zmq_pub_client(asio::any_io_executor ex, options opt, zmq_options zopt,
                                                std::string minion_id) {
  return std::make_shared<detail::pub_client_of<zsub_core>>(
      std::make_shared<zsub_core>(std::move(ex), std::move(opt), zopt, std::move(minion_id)));
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
