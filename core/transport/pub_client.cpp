// sylvite::transport::pub_client: minion side of the publish stream. connect() dials,
// sends the hello frame first, then delivers every received frame body in order on the
// client strand; on_closed fires once per lost connection (EOF, error, keepalive or
// TCP_USER_TIMEOUT expiry, write queue overflow). close() is silent.
// Thread-safety: public methods may be called from any thread; state lives on a strand.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "core/transport/detail/client.hpp"

namespace sylvite::transport {

namespace {

using connect_sig = void(result<void>);

class pub_core : public std::enable_shared_from_this<pub_core> {
 public:
  pub_core(asio::any_io_executor ex, options opt) : strand_(asio::make_strand(ex)), opt_(std::move(opt)) {}

  template <class Token>
  auto async_connect(endpoint ep, wire::value hello, pub_client::message_handler on_msg,
                     pub_client::closed_handler on_closed, Token&& token) {
    return asio::async_initiate<Token, connect_sig>(
        [self = shared_from_this()](auto handler, endpoint e, wire::value h, pub_client::message_handler m,
                                    pub_client::closed_handler c) {
          asio::any_io_executor hex = asio::get_associated_executor(handler, self->strand_);
          auto a = std::make_shared<attempt>(asio::any_completion_handler<connect_sig>(std::move(handler)));
          a->work = asio::prefer(hex, asio::execution::outstanding_work.tracked);
          a->ep = std::move(e);
          a->hello = detail::pack_shared(wire::value::object(), h);
          a->on_msg = std::move(m);
          a->on_closed = std::move(c);
          self->closing_ = false;
          asio::post(self->strand_, [self, a] { self->start(a); });
        },
        token, std::move(ep), std::move(hello), std::move(on_msg), std::move(on_closed));
  }

  bool send(const wire::value& body) {
    if (!connected_.load()) return false;
    auto f = detail::pack_shared(wire::value::object(), body);
    if (!f) return false;
    asio::post(strand_, [self = shared_from_this(), f = std::move(f)]() mutable {
      if (!self->conn_) return;
      if (!self->conn_->write(std::move(f))) {
        spdlog::warn("transport: publish connection to {}: write queue full, disconnecting", self->conn_->peer());
        auto c = self->conn_;
        c->close();
        self->on_lost(c, make_error_code(errc::queue_full));
      }
    });
    return true;
  }

  bool connected() const { return connected_.load(); }

  void close() {
    closing_ = true;
    connected_ = false;
    asio::post(strand_, [self = shared_from_this()] { self->do_close(); });
  }

 private:
  struct attempt {
    // Boost 1.81's any_completion_handler move-assignment recurses forever (it wraps
    // itself): only ever move-construct it.
    explicit attempt(asio::any_completion_handler<connect_sig> h) : handler(std::move(h)) {}
    asio::any_completion_handler<connect_sig> handler;
    asio::any_io_executor work;  // caller's executor, outstanding work tracked
    endpoint ep;
    std::shared_ptr<const std::string> hello;
    pub_client::message_handler on_msg;
    pub_client::closed_handler on_closed;
  };

  void start(const std::shared_ptr<attempt>& a) {
    // A new connect replaces whatever was there (silently, like close()).
    do_close();
    if (!a->hello) return complete(a, make_error_code(errc::bad_frame));
    auto c = std::make_shared<detail::connector>(strand_, a->ep, opt_);
    connector_ = c;
    c->start([self = shared_from_this(), a, c](error_code ec, detail::client_socket sock) {
      self->on_connected(a, c, ec, std::move(sock));
    });
  }

  void on_connected(const std::shared_ptr<attempt>& a, const std::shared_ptr<detail::connector>& c, error_code ec,
                    detail::client_socket sock) {
    if (connector_ == c) connector_.reset();
    if (ec) return complete(a, ec);
    conn_ = std::make_shared<detail::client_conn>(std::move(sock), opt_, detail::describe(a->ep));
    on_msg_ = std::move(a->on_msg);
    on_closed_ = std::move(a->on_closed);
    std::weak_ptr<pub_core> w = weak_from_this();
    std::weak_ptr<detail::client_conn> wc = conn_;
    conn_->start_read(
        [w, wc](wire::frame&& f) {
          if (auto self = w.lock()) self->deliver(wc.lock(), std::move(f));
        },
        [w, wc](error_code lost) {
          if (auto self = w.lock()) self->on_lost(wc.lock(), lost);
        });
    conn_->write(a->hello);  // hello first, before anything send() queues
    connected_ = true;
    complete(a, {});
  }

  void deliver(const std::shared_ptr<detail::client_conn>& c, wire::frame&& f) {
    if (!c || c != conn_ || closing_.load() || !on_msg_) return;
    try {
      on_msg_(std::move(f.body));
    } catch (const std::exception& e) {
      spdlog::error("transport: publish handler failed: {}", e.what());
    } catch (...) {
      spdlog::error("transport: publish handler failed");
    }
  }

  void on_lost(const std::shared_ptr<detail::client_conn>& c, error_code ec) {
    if (!c || c != conn_) return;
    conn_.reset();
    connected_ = false;
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    on_msg_ = nullptr;
    if (cb && !closing_.load()) {
      try {
        cb(ec);
      } catch (const std::exception& e) {
        spdlog::error("transport: publish closed handler failed: {}", e.what());
      } catch (...) {
        spdlog::error("transport: publish closed handler failed");
      }
    }
  }

  void do_close() {
    if (connector_) {
      auto c = std::move(connector_);
      c->cancel();  // completes the pending connect() with errc::closed
    }
    if (conn_) {
      conn_->close();
      conn_.reset();
    }
    connected_ = false;
    on_msg_ = nullptr;
    on_closed_ = nullptr;
  }

  void complete(const std::shared_ptr<attempt>& a, error_code ec) {
    if (!a->handler) return;
    auto ex = std::move(a->work);
    a->work = {};
    result<void> r = ec ? result<void>(ec) : result<void>();
    asio::post(ex, [h = std::move(a->handler), r]() mutable { std::move(h)(r); });
  }

  detail::client_strand strand_;
  const options opt_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> closing_{false};
  // Strand-only state.
  std::shared_ptr<detail::client_conn> conn_;
  std::shared_ptr<detail::connector> connector_;
  pub_client::message_handler on_msg_;
  pub_client::closed_handler on_closed_;
};

class pub_client_impl final : public pub_client {
 public:
  pub_client_impl(asio::any_io_executor ex, options opt)
      : core_(std::make_shared<pub_core>(std::move(ex), std::move(opt))) {}
  ~pub_client_impl() override { core_->close(); }

  asio::awaitable<result<void>> connect(endpoint ep, wire::value hello_body, message_handler on_msg,
                                        closed_handler on_closed) override {
    auto keep = shared_from_this();
    co_return co_await core_->async_connect(std::move(ep), std::move(hello_body), std::move(on_msg),
                                            std::move(on_closed), asio::use_awaitable);
  }
  bool send(wire::value body) override { return core_->send(body); }
  bool connected() const override { return core_->connected(); }
  void close() override { core_->close(); }

 private:
  std::shared_ptr<pub_core> core_;
};

}  // namespace

std::shared_ptr<pub_client> pub_client::create(asio::any_io_executor ex, options opt) {
  return std::make_shared<pub_client_impl>(std::move(ex), std::move(opt));
}

}  // namespace sylvite::transport
