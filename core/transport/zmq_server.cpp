// sylvite::transport ZeroMQ servers (master side): zmq_pub_server (XPUB on publish_port)
// and zmq_req_server (ROUTER on ret_port). See zmq.hpp for Salt's framing.
//
// Pre-authentication rule on the request port. ZeroMQ hides connections behind one
// socket, so the limits are per message, not per connection: every request envelope is
// decoded with the pre-auth object and depth limits (a real envelope is a handful of
// objects whatever its size: an AES load is one binary string), and a clear (non-AES)
// envelope above pre_auth_max_frame_size is refused unread (a sign-in is a few KiB). An
// AES envelope may use the full max_message_size (ZMQ_MAXMSGSIZE; libzmq drops a peer
// that sends more): it cannot be opened without an accepted minion's key.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <zmq.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <map>
#include <mutex>
#include <set>

#include "core/transport/detail/common.hpp"
#include "core/transport/detail/zmtp.hpp"
#include "core/transport/zmq_socket.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::transport {

using zmq_detail::zsock;

std::optional<zmq_engine> parse_engine(std::string_view s) {
  if (s == "native") return zmq_engine::native;
  if (s == "libzmq") return zmq_engine::libzmq;
  return std::nullopt;
}

namespace {

zmtp::heartbeat heartbeat_of(const zmq_options& z) {
  zmtp::heartbeat hb;
  if (z.heartbeat_ivl_ms > 0) {
    hb.ivl_ms = z.heartbeat_ivl_ms;
    hb.timeout_ms = z.heartbeat_timeout_ms > 0 ? z.heartbeat_timeout_ms : z.heartbeat_ivl_ms * 3;
  }
  return hb;
}

std::uint16_t port_of_endpoint(const std::string& ep) {
  auto c = ep.rfind(':');
  if (c == std::string::npos) return 0;
  try {
    return static_cast<std::uint16_t>(std::stoi(ep.substr(c + 1)));
  } catch (...) {
    return 0;
  }
}

std::string peer_of_fd(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

constexpr int k_conn_events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                              ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_ACCEPT_FAILED;

// Connection bookkeeping from monitor events (strand) read from any thread.
class conn_table {
 public:
  void on_event(const zmq_detail::socket_event& e) {
    std::lock_guard lk(mu_);
    if (e.event == ZMQ_EVENT_ACCEPTED) {
      auto addr = peer_of_fd(e.value);
      fds_[e.value] = addr;
      addrs_[addr]++;
    } else if (e.event == ZMQ_EVENT_DISCONNECTED) {
      auto it = fds_.find(e.value);
      if (it == fds_.end()) return;
      auto a = addrs_.find(it->second);
      if (a != addrs_.end() && --a->second == 0) addrs_.erase(a);
      fds_.erase(it);
    }
  }
  std::size_t count() const {
    std::lock_guard lk(mu_);
    return fds_.size();
  }
  std::vector<std::string> addresses() const {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& [a, n] : addrs_) out.push_back(a);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<int, std::string> fds_;
  std::map<std::string, int> addrs_;
};

void log_event(const std::string& what, const zmq_detail::socket_event& e) {
  spdlog::info("{}: zmq_monitor: {} {} (value {})", what, zmq_detail::event_name(e.event), e.endpoint, e.value);
}

}  // namespace

// ---------------------------------------------------------------- publish server ----

struct zmq_pub_server::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io, endpoint e, options o, zmq_options z)
      : strand(asio::make_strand(io.get_executor())), ep(std::move(e)), opt(std::move(o)), zopt(z) {}

  zmq_detail::zstrand strand;
  endpoint ep;
  options opt;
  zmq_options zopt;
  std::shared_ptr<zsock> sock;
  std::atomic<std::uint16_t> port{0};
  conn_table conns;
  mutable std::mutex topics_mu;
  std::set<std::string> topics;
  util::log_limiter drop_log;

  void send_all(const std::vector<std::vector<std::string>>& msgs) {
    if (!sock || sock->closed()) return;
    const std::size_t failed = sock->send_many(msgs);
    if (failed) {
      if (auto n = drop_log.hit())
        spdlog::warn("publish port: {} publish message(s) not sent in the last interval ({})", n,
                     zmq_strerror(errno));
    }
  }
};

zmq_pub_server::zmq_pub_server(asio::io_context& io, endpoint ep, options opt, zmq_options zopt)
    : filtering_(zopt.filtering) {
  if (zopt.engine == zmq_engine::native) {
    opt.max_frame_size = 4096;  // subscriptions are topics: never large
    opt.drop_when_full = true;  // pub_hwm: drop for a slow subscriber, as libzmq's PUB
    if (zopt.pub_hwm > 0) opt.max_queue_frames = static_cast<std::size_t>(zopt.pub_hwm);
    native_ = std::make_shared<zmtp::xpub_server>(io, std::move(ep), std::move(opt), heartbeat_of(zopt));
  } else {
    impl_ = std::make_shared<impl>(io, std::move(ep), std::move(opt), zopt);
  }
}

zmq_pub_server::~zmq_pub_server() { stop(); }

result<void> zmq_pub_server::start() {
  if (native_) return native_->start();
  auto& d = *impl_;
  d.sock = std::make_shared<zsock>(d.strand, ZMQ_XPUB, "publish port (zeromq)");
  if (!d.sock->ok()) return make_error_code(errc::closed);
  d.sock->apply_common(d.opt, d.zopt, true);
  d.sock->set_int(ZMQ_SNDHWM, d.zopt.pub_hwm);
  d.sock->set_int(ZMQ_RCVHWM, d.zopt.pub_hwm);
  d.sock->set_int(ZMQ_BACKLOG, d.zopt.backlog);
  const std::int64_t sub_max = 4096;   // subscriptions are topics: never large
  zmq_setsockopt(d.sock->raw(), ZMQ_MAXMSGSIZE, &sub_max, sizeof sub_max);
  std::weak_ptr<impl> w = impl_;
  d.sock->watch(k_conn_events | (d.zopt.monitor ? ZMQ_EVENT_ALL : 0), [w](const zmq_detail::socket_event& e) {
    auto self = w.lock();
    if (!self) return;
    self->conns.on_event(e);
    if (self->zopt.monitor) log_event("publish port", e);
  });
  if (auto r = d.sock->bind(zmq_detail::tcp_uri(d.ep.host, d.ep.port, true)); !r) {
    d.sock->close();
    return r.error();
  }
  d.port = port_of_endpoint(d.sock->last_endpoint());
  d.sock->start([w](zmq_detail::message&& m) {
    // XPUB: subscription messages, \x01topic (subscribe) / \x00topic (last subscriber gone).
    auto self = w.lock();
    if (!self || m.frames.size() != 1 || m.frames[0].empty()) return;
    const auto& f = m.frames[0];
    std::lock_guard lk(self->topics_mu);
    if (f[0] == 1) self->topics.insert(f.substr(1));
    else if (f[0] == 0) self->topics.erase(f.substr(1));
  });
  return {};
}

void zmq_pub_server::stop() {
  if (native_) return native_->stop();
  auto d = impl_;
  if (!d->sock) return;
  asio::dispatch(d->strand, [d] {
    if (d->sock) d->sock->close();
  });
}

std::uint16_t zmq_pub_server::bound_port() const { return native_ ? native_->bound_port() : impl_->port.load(); }

void zmq_pub_server::publish_all(std::shared_ptr<const std::string> payload) {
  if (native_) {
    for (const auto& m : zmq_framing::publish_messages(*payload, nullptr, filtering_)) native_->send(m);
    return;
  }
  auto d = impl_;
  asio::post(d->strand, [d, payload = std::move(payload)] {
    d->send_all(zmq_framing::publish_messages(*payload, nullptr, d->zopt.filtering));
  });
}

void zmq_pub_server::publish_to(std::shared_ptr<const std::string> payload, const std::vector<std::string>& ids) {
  if (!filtering_) return publish_all(std::move(payload));
  if (native_) {
    for (const auto& m : zmq_framing::publish_messages(*payload, &ids, true)) native_->send(m);
    return;
  }
  auto d = impl_;
  asio::post(d->strand, [d, payload = std::move(payload), ids] {
    d->send_all(zmq_framing::publish_messages(*payload, &ids, true));
  });
}

std::size_t zmq_pub_server::connection_count() const {
  return native_ ? native_->connection_count() : impl_->conns.count();
}
std::vector<std::string> zmq_pub_server::peer_addresses() const {
  return native_ ? native_->peer_addresses() : impl_->conns.addresses();
}
std::vector<std::string> zmq_pub_server::topics() const {
  if (native_) return native_->topics();
  std::lock_guard lk(impl_->topics_mu);
  return {impl_->topics.begin(), impl_->topics.end()};
}

// ---------------------------------------------------------------- request server ----

struct zmq_req_server::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io, endpoint e, options o, zmq_options z, request_handler h)
      : strand(asio::make_strand(io.get_executor())),
        ep(std::move(e)),
        opt(std::move(o)),
        zopt(z),
        handler(std::move(h)) {}

  zmq_detail::zstrand strand;
  endpoint ep;
  options opt;
  zmq_options zopt;
  request_handler handler;
  std::shared_ptr<zsock> sock;
  std::atomic<std::uint16_t> port{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> next_id{0};
  conn_table conns;
  util::log_limiter refuse_log;

  void refuse(const std::string& peer, const char* why) {
    refused++;
    if (auto n = refuse_log.hit())
      spdlog::warn("request port (zeromq): refused {} message(s) in the last interval, e.g. from {}: {}", n,
                   peer.empty() ? "?" : peer, why);
  }

  // Replies wait here for the strand; the first one queued posts a flush, which sends
  // all that are queued by then (a burst of requests read in one pump is answered in one
  // pass, with one look for input at the end instead of one per reply).
  std::mutex out_mu;
  std::vector<std::vector<std::string>> outq;

  void on_message(zmq_detail::message&& m);
  void reply(std::vector<std::string> envelope, std::string payload) {
    envelope.push_back(std::move(payload));
    bool first = false;
    {
      std::lock_guard lk(out_mu);
      first = outq.empty();
      outq.push_back(std::move(envelope));
    }
    if (first) asio::post(strand, [self = shared_from_this()] { self->flush(); });
  }
  void flush() {
    std::vector<std::vector<std::string>> q;
    {
      std::lock_guard lk(out_mu);
      q.swap(outq);
    }
    if (q.empty() || !sock || sock->closed()) return;
    sock->send_many(q);  // a client that left is dropped silently (ROUTER)
  }
};

namespace {

class zmq_responder final : public responder {
 public:
  zmq_responder(std::weak_ptr<zmq_req_server::impl> srv, std::vector<std::string> envelope, peer_info p)
      : srv_(std::move(srv)), envelope_(std::move(envelope)), peer_(std::move(p)) {}
  void reply(wire::value body) override {
    if (done_.exchange(true)) return;
    auto s = srv_.lock();
    if (!s) return;
    s->reply(std::move(envelope_), wire::pack_payload(body));
  }
  bool push(wire::value) override { return false; }
  bool alive() const override { return !done_.load() && !srv_.expired(); }
  const peer_info& peer() const override { return peer_; }

 private:
  std::weak_ptr<zmq_req_server::impl> srv_;
  std::vector<std::string> envelope_;
  peer_info peer_;
  std::atomic<bool> done_{false};
};

}  // namespace

void zmq_req_server::impl::on_message(zmq_detail::message&& m) {
  const std::string peer = m.peer;
  auto routed = zmq_framing::split_routed(std::move(m.frames));
  if (!routed) return refuse(peer, "not a REQ message (no empty delimiter, or more than one body frame)");
  wire::limits lim;
  lim.max_bytes = opt.max_frame_size ? opt.max_frame_size : lim.max_bytes;
  if (opt.pre_auth_max_nodes) lim.max_nodes = opt.pre_auth_max_nodes;
  if (opt.pre_auth_max_depth) lim.max_depth = opt.pre_auth_max_depth;
  auto body = wire::unpack(routed->payload, lim);
  if (!body) return refuse(peer, "not a msgpack request envelope within the limits");
  if (opt.pre_auth_max_frame_size && routed->payload.size() > opt.pre_auth_max_frame_size) {
    const auto enc = wire::get_text(*body, "enc");
    if (!enc || *enc != "aes")
      return refuse(peer, "clear request larger than pre_auth_max_message_size");
  }
  peer_info p;
  p.address = peer.empty() ? std::string("zmq") : peer;
  p.conn_id = ++next_id;
  auto r = std::make_shared<zmq_responder>(weak_from_this(), std::move(routed->envelope), std::move(p));
  handler(std::move(*body), std::move(r));
}

zmq_req_server::zmq_req_server(asio::io_context& io, endpoint ep, options opt, zmq_options zopt, request_handler h) {
  if (zopt.engine == zmq_engine::native) {
    native_ = std::make_shared<zmtp::router_server>(io, std::move(ep), std::move(opt), heartbeat_of(zopt), std::move(h));
  } else {
    impl_ = std::make_shared<impl>(io, std::move(ep), std::move(opt), zopt, std::move(h));
  }
}

zmq_req_server::~zmq_req_server() { stop(); }

result<void> zmq_req_server::start() {
  if (native_) return native_->start();
  auto& d = *impl_;
  d.sock = std::make_shared<zsock>(d.strand, ZMQ_ROUTER, "request port (zeromq)");
  if (!d.sock->ok()) return make_error_code(errc::closed);
  d.sock->apply_common(d.opt, d.zopt, true);
  // Salt: ROUTER_HANDOVER=1 (a reconnecting client with the same identity takes over).
  d.sock->set_int(ZMQ_ROUTER_HANDOVER, 1);
  d.sock->set_int(ZMQ_BACKLOG, d.zopt.backlog);
  if (d.zopt.rcv_hwm > 0) d.sock->set_int(ZMQ_RCVHWM, d.zopt.rcv_hwm);
  std::weak_ptr<impl> w = impl_;
  d.sock->watch(k_conn_events | (d.zopt.monitor ? ZMQ_EVENT_ALL : 0), [w](const zmq_detail::socket_event& e) {
    auto self = w.lock();
    if (!self) return;
    self->conns.on_event(e);
    if (self->zopt.monitor) log_event("request port", e);
  });
  if (auto r = d.sock->bind(zmq_detail::tcp_uri(d.ep.host, d.ep.port, true)); !r) {
    d.sock->close();
    return r.error();
  }
  d.port = port_of_endpoint(d.sock->last_endpoint());
  d.sock->start([w](zmq_detail::message&& m) {
    if (auto self = w.lock()) self->on_message(std::move(m));
  });
  return {};
}

void zmq_req_server::stop() {
  if (native_) return native_->stop();
  auto d = impl_;
  if (!d->sock) return;
  asio::dispatch(d->strand, [d] {
    if (d->sock) d->sock->close();
  });
}

std::uint16_t zmq_req_server::bound_port() const { return native_ ? native_->bound_port() : impl_->port.load(); }
std::size_t zmq_req_server::connection_count() const {
  return native_ ? native_->connection_count() : impl_->conns.count();
}
std::uint64_t zmq_req_server::refused() const { return native_ ? native_->refused() : impl_->refused.load(); }

}  // namespace sylvite::transport
