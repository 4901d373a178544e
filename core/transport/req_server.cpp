// sylvite::transport::req_server: request/reply server. Each frame is handed to the
// request handler on the connection strand with a responder that echoes the request
// head unchanged on reply() (Salt matches replies by head.mid) and adds "more": true
// on push() (streaming). Thread-safety: public methods are thread-safe; responders may
// be used from any thread.
#include <spdlog/spdlog.h>

#include "core/transport/detail/server.hpp"

namespace sylvite::transport {

namespace {

class session_responder final : public responder {
 public:
  session_responder(std::shared_ptr<detail::server_session> s, wire::value head)
      : s_(std::move(s)), head_(std::move(head)) {
    s_->request_started();
  }
  ~session_responder() override {
    if (!done_.exchange(true)) s_->request_done();
  }

  void reply(wire::value body) override {
    if (replied_.exchange(true)) return;  // reply() is single-shot
    std::shared_ptr<const std::string> f;
    if (s_->alive()) f = detail::pack_shared(head_, body);  // else dropped silently
    if (!done_.exchange(true)) {
      s_->reply_done(std::move(f));  // the reply and the request's end: one hop
    } else if (f) {
      s_->send(std::move(f));
    }
  }

  void mark_authenticated() override { s_->mark_authenticated(); }

  bool push(wire::value body) override {
    if (replied_.load() || !s_->alive()) return false;
    wire::value head = head_;
    head["more"] = true;
    auto f = detail::pack_shared(head, body);
    return f && s_->send(std::move(f));
  }

  bool alive() const override { return s_->alive(); }
  const peer_info& peer() const override { return s_->peer(); }

 private:
  std::shared_ptr<detail::server_session> s_;
  const wire::value head_;
  std::atomic<bool> replied_{false};
  std::atomic<bool> done_{false};  // request_done() reported (reply or destruction)
};

}  // namespace

struct req_server::impl final : detail::server_base {
  impl(asio::io_context& io, endpoint ep, options opt, request_handler h)
      : server_base(io, std::move(ep), std::move(opt), "req"), handler_(std::move(h)) {}

  void on_frame(const std::shared_ptr<detail::server_session>& s, wire::frame&& f) override {
    if (!f.head.is_object()) {
      // The reply must echo the head as a map; anything else is not a Salt request.
      spdlog::warn("transport: closing connection from {}: request head is not a map", s->peer().address);
      s->close();
      return;
    }
    if (!handler_) return;
    // Exceptions are caught by the session (logged, connection kept).
    handler_(std::move(f.body), std::make_shared<session_responder>(s, std::move(f.head)));
  }

  request_handler handler_;
};

req_server::req_server(asio::io_context& io, endpoint ep, options opt, request_handler h)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(opt), std::move(h))) {}

req_server::~req_server() { impl_->stop(); }

result<void> req_server::start() { return impl_->start(); }
void req_server::stop() { impl_->stop(); }
std::uint16_t req_server::bound_port() const { return impl_->bound_port(); }
std::size_t req_server::connection_count() const { return impl_->connection_count(); }

}  // namespace sylvite::transport
