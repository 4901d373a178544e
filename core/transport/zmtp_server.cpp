// sylvite::transport::zmtp servers: the master's ZeroMQ ports spoken natively
// (detail/zmtp.hpp). Both derive from server_base: accept, admission caps, the
// pre-authentication limits and budget, write queues and the sweeper are the TCP
// transport's; only the codec and what a frame means differ.
//
// Heartbeats: one timer per server ticks every min(ivl, timeout); each tick closes the
// connections whose PING went unanswered for timeout (nothing received since it was
// sent) and sends one shared PING to every other connection past the handshake that
// has none outstanding.
// Thread-safety: public methods are thread-safe. reg_mu_ guards each server's registry;
// it is never held while calling into a session.
#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/transport/detail/zmtp.hpp"

namespace sylvite::transport::zmtp {

namespace {

using session_ptr = std::shared_ptr<detail::server_session>;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// What both servers keep per connection past the handshake.
struct conn_state {
  std::weak_ptr<detail::server_session> s;
  std::int64_t ping_sent_ns = 0;   // 0: no PING outstanding
  std::vector<std::string> topics; // xpub: subscriptions (a topic twice counts twice)
};

class base : public detail::server_base {
 public:
  base(asio::io_context& io, endpoint ep, options opt, heartbeat hb, role r, const char* kind)
      : server_base(io, std::move(ep), std::move(opt), kind), hb_(hb), role_(r), timer_(io) {}

  result<void> start_all() {
    auto r = server_base::start();
    if (!r) return r;
    if (hb_.ivl_ms > 0) arm();
    return r;
  }
  void stop_all() {
    {
      std::lock_guard lk(reg_mu_);
      stopping_ = true;
      timer_.cancel();
    }
    server_base::stop();
  }

 protected:
  std::unique_ptr<detail::input_codec> make_codec() const override { return std::make_unique<codec>(role_); }

  // A connection finished the handshake.
  void on_ready(const session_ptr& s) {
    std::lock_guard lk(reg_mu_);
    if (!s->alive()) return;
    ready_.emplace(s->id(), conn_state{s, 0, {}});
  }
  void on_session_closed(const session_ptr& s) override {
    {
      std::lock_guard lk(reg_mu_);
      auto it = ready_.find(s->id());
      if (it != ready_.end()) {
        forget_locked(s->id(), it->second);
        ready_.erase(it);
      }
    }
    server_base::on_session_closed(s);
  }
  // reg_mu_ held: a closing connection's other registrations.
  virtual void forget_locked(std::uint64_t, conn_state&) {}
  void on_input_refused(const session_ptr&) override { input_refused_.fetch_add(1, std::memory_order_relaxed); }

 public:
  std::uint64_t refused_total() const noexcept { return refused_count() + input_refused_.load(); }

 protected:
  std::atomic<std::uint64_t> input_refused_{0};

  std::mutex reg_mu_;
  std::unordered_map<std::uint64_t, conn_state> ready_;

 private:
  void arm() {
    const int every = hb_.timeout_ms > 0 ? std::min(hb_.ivl_ms, hb_.timeout_ms) : hb_.ivl_ms;
    std::lock_guard lk(reg_mu_);
    if (stopping_) return;
    timer_.expires_after(std::chrono::milliseconds(std::max(every, 10)));
    timer_.async_wait([w = std::weak_ptr<server_base>(shared_from_this())](const error_code& ec) {
      if (ec) return;
      auto self = std::static_pointer_cast<base>(w.lock());
      if (!self) return;
      self->tick();
      self->arm();
    });
  }

  void tick() {
    const std::int64_t now = now_ns();
    const std::int64_t timeout = std::int64_t{hb_.timeout_ms > 0 ? hb_.timeout_ms : 3 * hb_.ivl_ms} * 1000000;
    std::vector<session_ptr> to_ping, to_close;
    {
      std::lock_guard lk(reg_mu_);
      for (auto& [id, c] : ready_) {
        auto s = c.s.lock();
        if (!s) continue;
        const std::int64_t rx = s->last_rx_ns();
        if (c.ping_sent_ns != 0 && rx < c.ping_sent_ns) {
          if (now - c.ping_sent_ns >= timeout) to_close.push_back(std::move(s));
          continue;
        }
        c.ping_sent_ns = now;
        to_ping.push_back(std::move(s));
      }
    }
    if (!to_ping.empty()) {
      const auto ttl = static_cast<std::uint16_t>(std::min<std::int64_t>(timeout / 100000000, 65535));
      auto frame = std::make_shared<const std::string>(ping(ttl));
      for (auto& s : to_ping) s->send(frame);
    }
    for (auto& s : to_close) {
      if (const auto n = hb_log_.hit())
        spdlog::info("transport: {} (zeromq) closed {} connection(s) in the last interval whose heartbeat went "
                     "unanswered for {} ms (zmq_heartbeat_timeout), e.g. {}",
                     kind_, n, timeout / 1000000, s->peer().address);
      s->close();
    }
  }

  const heartbeat hb_;
  const role role_;
  asio::steady_timer timer_;  // reg_mu_
  bool stopping_ = false;     // reg_mu_
  util::log_limiter hb_log_;
};

// ---------------------------------------------------------------- ROUTER ----

class router_responder final : public responder {
 public:
  router_responder(session_ptr s, wire::value envelope)
      : s_(std::move(s)), envelope_(std::move(envelope)) {
    peer_.address = s_->source();
    peer_.conn_id = s_->id();
    s_->request_started();
  }
  ~router_responder() override {
    if (!done_.exchange(true)) s_->request_done();
  }
  void reply(wire::value body) override {
    if (replied_.exchange(true)) return;
    std::shared_ptr<const std::string> frame;
    if (s_->alive()) {
      std::string payload;
      try {
        payload = wire::pack_payload(body);
      } catch (const std::exception& e) {
        spdlog::error("transport: cannot encode a reply to {}: {}", peer_.address, e.what());
      }
      if (!payload.empty()) {
        std::string out;
        out.reserve(payload.size() + 16);
        if (envelope_.is_array()) {
          for (const auto& f : envelope_) append_frame(out, wire::as_bytes(f).value_or(""), true);
        } else {
          append_frame(out, "", true);
        }
        append_frame(out, payload, false);
        frame = std::make_shared<const std::string>(std::move(out));
      }
    }
    if (!done_.exchange(true)) {
      s_->reply_done(std::move(frame));  // the reply and the request's end: one hop
    } else if (frame) {
      s_->send(std::move(frame));
    }
  }
  bool push(wire::value) override { return false; }
  void mark_authenticated() override { s_->mark_authenticated(); }
  bool alive() const override { return !replied_.load() && s_->alive(); }
  const peer_info& peer() const override { return peer_; }

 private:
  session_ptr s_;
  wire::value envelope_;  // null: [""]
  peer_info peer_;
  std::atomic<bool> replied_{false};
  std::atomic<bool> done_{false};
};

}  // namespace

struct router_server::impl final : base {
  impl(asio::io_context& io, endpoint ep, options opt, heartbeat hb, request_handler h)
      : base(io, std::move(ep), std::move(opt), hb, role::router, "request port"), handler_(std::move(h)) {}

  void on_frame(const session_ptr& s, wire::frame&& f) override {
    if (f.head.contains("ready")) {
      on_ready(s);
      return;
    }
    if (!handler_) return;
    wire::value env;
    if (auto it = f.head.find("envelope"); it != f.head.end()) env = std::move(*it);
    handler_(std::move(f.body), std::make_shared<router_responder>(s, std::move(env)));
  }

  request_handler handler_;
};

router_server::router_server(asio::io_context& io, endpoint ep, options opt, heartbeat hb, request_handler h)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(opt), hb, std::move(h))) {}
router_server::~router_server() { impl_->stop_all(); }
result<void> router_server::start() { return impl_->start_all(); }
void router_server::stop() { impl_->stop_all(); }
std::uint16_t router_server::bound_port() const { return impl_->bound_port(); }
std::size_t router_server::connection_count() const { return impl_->connection_count(); }
std::uint64_t router_server::refused() const { return impl_->refused_total(); }

// ---------------------------------------------------------------- XPUB ----

struct xpub_server::impl final : base {
  impl(asio::io_context& io, endpoint ep, options opt, heartbeat hb)
      : base(io, std::move(ep), std::move(opt), hb, role::xpub, "publish port") {}

  void on_frame(const session_ptr& s, wire::frame&& f) override {
    if (f.head.contains("ready")) {
      on_ready(s);
      s->mark_authenticated();  // a subscriber cannot prove who it is; the handshake is all there is
      return;
    }
    auto sub = f.head.find("sub");
    auto topic = wire::as_bytes(f.body);
    if (sub == f.head.end() || !topic) return;
    if (topic->size() > 255) {
      if (const auto n = long_log_.hit())
        spdlog::warn("transport: publish port (zeromq): ignored {} subscription(s) longer than 255 bytes in the "
                     "last interval, e.g. from {}",
                     n, s->peer().address);
      return;
    }
    std::lock_guard lk(reg_mu_);
    auto it = ready_.find(s->id());
    if (it == ready_.end()) return;
    auto& topics = it->second.topics;
    if (sub->get<bool>()) {
      topics.emplace_back(*topic);
      auto& bucket = by_topic_[std::string(*topic)];
      bucket[s->id()]++;
      max_topic_ = std::max(max_topic_, topic->size());
    } else {
      auto t = std::find(topics.begin(), topics.end(), *topic);
      if (t == topics.end()) return;
      topics.erase(t);
      drop_locked(s->id(), *topic);
    }
  }

  void forget_locked(std::uint64_t id, conn_state& c) override {
    for (const auto& t : c.topics) drop_locked(id, t);
    c.topics.clear();
  }

  void drop_locked(std::uint64_t id, std::string_view topic) {
    auto b = by_topic_.find(topic);
    if (b == by_topic_.end()) return;
    auto e = b->second.find(id);
    if (e != b->second.end() && --e->second == 0) b->second.erase(e);
    if (b->second.empty()) by_topic_.erase(b);
  }

  void send(const std::vector<std::string>& frames) {
    if (frames.empty()) return;
    const std::string_view first = frames[0];
    std::vector<session_ptr> targets;
    {
      std::lock_guard lk(reg_mu_);
      const std::size_t longest = std::min(first.size(), max_topic_);
      std::size_t buckets = 0;
      for (std::size_t len = 0; len <= longest; ++len) {
        auto b = by_topic_.find(first.substr(0, len));
        if (b == by_topic_.end()) continue;
        ++buckets;
        for (const auto& [id, n] : b->second) {
          auto c = ready_.find(id);
          if (c == ready_.end()) continue;
          if (auto s = c->second.s.lock()) targets.push_back(std::move(s));
        }
      }
      if (buckets > 1) {  // a connection subscribed to two matching prefixes gets one copy
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      }
    }
    if (targets.empty()) return;
    auto bytes = std::make_shared<const std::string>(encode_message(frames));
    std::size_t dropped = 0;
    for (auto& s : targets) {
      if (!s->send(bytes)) ++dropped;
    }
    (void)dropped;  // counted and logged by the sessions (high-water mark)
  }

  std::vector<std::string> addresses() {
    std::vector<session_ptr> live;
    {
      std::lock_guard lk(reg_mu_);
      for (auto& [id, c] : ready_)
        if (auto s = c.s.lock()) live.push_back(std::move(s));
    }
    std::set<std::string> out;
    for (auto& s : live) out.insert(s->source());
    return {out.begin(), out.end()};
  }

  std::vector<std::string> topic_list() {
    std::lock_guard lk(reg_mu_);
    std::vector<std::string> out;
    out.reserve(by_topic_.size());
    for (const auto& [t, ids] : by_topic_) out.push_back(t);
    std::sort(out.begin(), out.end());
    return out;
  }

  // reg_mu_: topic -> connection id -> how many times it subscribed it.
  std::unordered_map<std::string, std::unordered_map<std::uint64_t, int>, string_hash, std::equal_to<>> by_topic_;
  std::size_t max_topic_ = 0;  // longest topic ever subscribed (bounds the prefix lookups)
  util::log_limiter long_log_;
};

xpub_server::xpub_server(asio::io_context& io, endpoint ep, options opt, heartbeat hb)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(opt), hb)) {}
xpub_server::~xpub_server() { impl_->stop_all(); }
result<void> xpub_server::start() { return impl_->start_all(); }
void xpub_server::stop() { impl_->stop_all(); }
std::uint16_t xpub_server::bound_port() const { return impl_->bound_port(); }
void xpub_server::send(const std::vector<std::string>& frames) { impl_->send(frames); }
std::size_t xpub_server::connection_count() const { return impl_->connection_count(); }
std::vector<std::string> xpub_server::peer_addresses() const { return impl_->addresses(); }
std::vector<std::string> xpub_server::topics() const { return impl_->topic_list(); }

}  // namespace sylvite::transport::zmtp
