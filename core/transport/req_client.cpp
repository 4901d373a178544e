// sylvite::transport::req_client and request_once: one connection, many requests in
// flight matched by head.mid (uuid4), per-request deadlines, lazy reconnect.
// Thread-safety: request()/close() may be called from any thread; all state lives in
// req_core on a strand. Completions are posted to the caller's executor.
//
// Lifetime: the public object holds req_core; async operations hold req_core, and a
// running request() holds the public object. Destroying the last handle closes the
// connection and fails outstanding requests with errc::closed.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "core/transport/detail/client.hpp"
#include "core/transport/detail/client_ops.hpp"

namespace sylvite::transport {

namespace {

using item_fn = std::function<void(const wire::value&)>;

class req_core : public std::enable_shared_from_this<req_core> {
 public:
  req_core(asio::any_io_executor ex, endpoint ep, options opt)
      : strand_(asio::make_strand(ex)), ep_(std::move(ep)), opt_(std::move(opt)) {}

  template <class Token>
  auto async_request(wire::value body, item_fn on_item, std::chrono::milliseconds timeout, Token&& token) {
    // Completions are posted to the caller's executor, never run inline on our strand.
    return detail::initiate_op<pending>(
        strand_, std::forward<Token>(token),
        [self = shared_from_this()](pending_ptr p, wire::value b, item_fn items, std::chrono::milliseconds t) {
          self->initiate(std::move(p), std::move(b), std::move(items), t);
        },
        std::move(body), std::move(on_item), timeout);
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->do_close(); });
  }

 private:
  struct pending : detail::pending_op<result<wire::value>> {
    using pending_op::pending_op;
    item_fn on_item;
  };
  using pending_ptr = std::shared_ptr<pending>;
  enum class state { idle, connecting, connected, closed };

  // Any thread: encode here (off the strand), then hand over.
  void initiate(pending_ptr p, wire::value body, item_fn on_item, std::chrono::milliseconds timeout) {
    p->on_item = std::move(on_item);
    std::string mid = detail::uuid4();
    wire::value head = wire::value::object();
    head["mid"] = mid;
    auto frame = detail::pack_shared(head, body);
    asio::post(strand_, [self = shared_from_this(), p, mid = std::move(mid), frame = std::move(frame), timeout] {
      self->start_request(p, mid, frame, timeout);
    });
  }

  void start_request(const pending_ptr& p, const std::string& mid, std::shared_ptr<const std::string> frame,
                     std::chrono::milliseconds timeout) {
    if (state_ == state::closed) return complete(p, make_error_code(errc::closed));
    if (!frame) return complete(p, make_error_code(errc::bad_frame));
    pending_.emplace(mid, p);
    p->timer.expires_after(timeout);
    p->timer.async_wait([self = shared_from_this(), p, mid](const error_code& ec) {
      if (!ec) self->on_timeout(mid, p);
    });
    if (state_ == state::connected) {
      if (!conn_->write(std::move(frame))) {
        pending_.erase(mid);
        complete(p, make_error_code(errc::queue_full));
      }
      return;
    }
    waiting_.emplace_back(mid, std::move(frame));
    if (state_ == state::idle) start_connect();
  }

  void start_connect() {
    state_ = state::connecting;
    connector_ = std::make_shared<detail::connector>(strand_, ep_, opt_);
    connector_->start([self = shared_from_this()](error_code ec, detail::client_socket sock) {
      self->on_connected(ec, std::move(sock));
    });
  }

  void on_connected(error_code ec, detail::client_socket sock) {
    connector_.reset();
    if (state_ != state::connecting) return;  // closed meanwhile
    if (ec) {
      state_ = state::idle;
      spdlog::debug("transport: request connection to {} failed: {}", detail::describe(ep_), ec.message());
      fail_all(ec);
      return;
    }
    conn_ = std::make_shared<detail::client_conn>(std::move(sock), opt_, detail::describe(ep_));
    state_ = state::connected;
    std::weak_ptr<req_core> w = weak_from_this();
    std::weak_ptr<detail::client_conn> wc = conn_;
    conn_->start_read(
        [w](wire::frame&& f) {
          if (auto self = w.lock()) self->on_frame(std::move(f));
        },
        [w, wc](error_code lost) {
          if (auto self = w.lock()) self->on_lost(wc.lock(), lost);
        });
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& [mid, frame] : waiting) {
      if (!conn_ || conn_->write(std::move(frame))) continue;
      if (auto it = pending_.find(mid); it != pending_.end()) {
        auto p = it->second;
        pending_.erase(it);
        complete(p, make_error_code(errc::queue_full));
      }
    }
  }

  void on_frame(wire::frame&& f) {
    auto mid = wire::get_text(f.head, "mid");
    if (!mid) {
      spdlog::debug("transport: reply from {} without mid dropped", detail::describe(ep_));
      return;
    }
    auto it = pending_.find(std::string(*mid));
    if (it == pending_.end()) {
      spdlog::debug("transport: reply from {} for unknown mid {} dropped", detail::describe(ep_), *mid);
      return;
    }
    if (wire::get_bool(f.head, "more").value_or(false)) {
      auto p = it->second;  // keep alive while the callback runs
      if (p->on_item) {
        try {
          p->on_item(f.body);
        } catch (const std::exception& e) {
          spdlog::error("transport: stream item handler failed: {}", e.what());
        } catch (...) {
          spdlog::error("transport: stream item handler failed");
        }
      }
      return;
    }
    auto p = it->second;
    pending_.erase(it);
    complete(p, std::move(f.body));
  }

  void on_lost(const std::shared_ptr<detail::client_conn>& c, error_code ec) {
    if (!c || c != conn_) return;
    spdlog::debug("transport: request connection to {} lost: {}", detail::describe(ep_), ec.message());
    conn_.reset();
    state_ = state::idle;
    fail_all(make_error_code(errc::disconnected));
  }

  void on_timeout(const std::string& mid, const pending_ptr& p) {
    auto it = pending_.find(mid);
    if (it == pending_.end() || it->second != p) return;
    pending_.erase(it);
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return w.first == mid; }),
                   waiting_.end());
    complete(p, make_error_code(errc::timeout));
  }

  void do_close() {
    if (state_ == state::closed) return;
    state_ = state::closed;
    if (connector_) {
      auto c = std::move(connector_);
      c->cancel();
    }
    if (conn_) {
      conn_->close();
      conn_.reset();
    }
    fail_all(make_error_code(errc::closed));
  }

  void fail_all(error_code ec) {
    auto all = std::move(pending_);
    pending_.clear();
    waiting_.clear();
    for (auto& [mid, p] : all) complete(p, ec);
  }

  static void complete(const pending_ptr& p, result<wire::value> r) {
    p->complete(std::move(r));
    p->on_item = nullptr;
  }

  detail::client_strand strand_;
  const endpoint ep_;
  const options opt_;
  // Strand-only state.
  state state_ = state::idle;
  std::shared_ptr<detail::client_conn> conn_;
  std::shared_ptr<detail::connector> connector_;
  std::unordered_map<std::string, pending_ptr> pending_;
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> waiting_;  // until connected
};

class req_client_impl final : public req_client {
 public:
  req_client_impl(asio::any_io_executor ex, endpoint ep, options opt)
      : ep_(ep), core_(std::make_shared<req_core>(std::move(ex), std::move(ep), std::move(opt))) {}
  ~req_client_impl() override { core_->close(); }

  asio::awaitable<result<wire::value>> request(wire::value body, std::chrono::milliseconds timeout) override {
    auto keep = shared_from_this();
    co_return co_await core_->async_request(std::move(body), nullptr, timeout, asio::use_awaitable);
  }

  asio::awaitable<result<wire::value>> request_stream(wire::value body, std::function<void(const wire::value&)> on_item,
                                                      std::chrono::milliseconds timeout) override {
    auto keep = shared_from_this();
    co_return co_await core_->async_request(std::move(body), std::move(on_item), timeout, asio::use_awaitable);
  }

  void close() override { core_->close(); }
  const endpoint& remote() const override { return ep_; }

 private:
  const endpoint ep_;
  std::shared_ptr<req_core> core_;
};

}  // namespace

std::shared_ptr<req_client> req_client::create(asio::any_io_executor ex, endpoint ep, options opt) {
  return std::make_shared<req_client_impl>(std::move(ex), std::move(ep), std::move(opt));
}

result<wire::value> request_stream_once(const endpoint& ep, const wire::value& body,
                                        const std::function<void(const wire::value&)>& on_item,
                                        std::chrono::milliseconds timeout, const options& opt) {
  try {
    asio::io_context io(1);
    std::optional<result<wire::value>> out;
    auto client = req_client::create(io.get_executor(), ep, opt);
    asio::co_spawn(
        io,
        [client, body, on_item, timeout, out_ptr = &out]() -> asio::awaitable<void> {
          auto r = co_await client->request_stream(body, on_item, timeout);
          client->close();
          *out_ptr = std::move(r);
        },
        asio::detached);
    io.run();
    if (!out) return make_error_code(errc::disconnected);
    return std::move(*out);
  } catch (const std::exception& e) {
    spdlog::error("transport: request to {} failed: {}", detail::describe(ep), e.what());
  } catch (...) {
    spdlog::error("transport: request to {} failed", detail::describe(ep));
  }
  return make_error_code(errc::disconnected);
}

result<wire::value> request_once(const endpoint& ep, const wire::value& body, std::chrono::milliseconds timeout,
                                 const options& opt) {
  return request_stream_once(ep, body, nullptr, timeout, opt);
}

}  // namespace sylvite::transport
