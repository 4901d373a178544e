// sylvite::transport client internals shared by every client core (req_client.cpp,
// zmq_client.cpp, zmtp_client.cpp):
//   pending_op<R>  one awaited operation: the caller's handler, the caller's executor
//                  (outstanding work tracked), a deadline timer on the core's strand;
//                  complete() runs once and posts the handler to the caller's executor,
//                  never inline on the strand.
//   initiate_op    the async_initiate wrapper that builds a pending_op for a token.
//   sub_core_base  what the SUB cores share (connect operation, handlers, drop()).
//   req_client_of / pub_client_of
//                  the public client objects over a core: they hold the core, keep it
//                  alive across an awaited call, and close it when destroyed.
// Thread-safety: a pending_op is touched on its core's strand only (initiate_op's init
// runs on the calling thread, before the op is handed to the strand).
#pragma once
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/transport/detail/client.hpp"
#include "core/transport/transport.hpp"

namespace sylvite::transport::detail {

template <class R>
struct pending_op {
  using signature = void(R);
  // Boost 1.81's any_completion_handler move-assignment recurses forever (it wraps
  // itself): it is only ever move-constructed here.
  pending_op(client_strand s, asio::any_completion_handler<signature> h, const asio::any_io_executor& hex)
      : handler(std::move(h)), work(asio::prefer(hex, asio::execution::outstanding_work.tracked)), timer(std::move(s)) {}
  pending_op(const pending_op&) = delete;
  pending_op& operator=(const pending_op&) = delete;

  // Once: cancel the deadline and hand r to the caller's executor.
  void complete(R r) {
    if (done) return;
    done = true;
    timer.cancel();
    auto ex = std::move(work);
    work = {};
    asio::post(ex, [h = std::move(handler), r = std::move(r)]() mutable { std::move(h)(std::move(r)); });
  }

  asio::any_completion_handler<signature> handler;
  asio::any_io_executor work;
  asio::steady_timer timer;
  bool done = false;
};

// Start an operation whose state is Op (a pending_op<R> or a type derived from it with
// the same constructor): init(std::shared_ptr<Op>, args...) runs on the calling thread
// (encode there, off the strand) and hands the op to the strand itself.
template <class Op, class Token, class Init, class... Args>
auto initiate_op(const client_strand& strand, Token&& token, Init init, Args&&... args) {
  return asio::async_initiate<Token, typename Op::signature>(
      [strand, init = std::move(init)](auto handler, auto&&... a) mutable {
        asio::any_io_executor hex = asio::get_associated_executor(handler, strand);
        auto op = std::make_shared<Op>(strand, asio::any_completion_handler<typename Op::signature>(std::move(handler)),
                                       hex);
        init(std::move(op), std::forward<decltype(a)>(a)...);
      },
      token, std::forward<Args>(args)...);
}

// What both SUB cores (libzmq, native) share: the connect operation, the handlers, the
// generation that makes callbacks of a replaced connection stale, and drop().
class sub_core_base : public std::enable_shared_from_this<sub_core_base> {
 public:
  using attempt = pending_op<result<void>>;
  using attempt_ptr = std::shared_ptr<attempt>;

  explicit sub_core_base(const asio::any_io_executor& ex) : strand_(asio::make_strand(ex)) {}
  virtual ~sub_core_base() = default;

  template <class Token>
  auto async_connect(endpoint ep, pub_client::message_handler on_msg, pub_client::closed_handler on_closed,
                     Token&& token) {
    return initiate_op<attempt>(
        strand_, std::forward<Token>(token),
        [self = shared_from_this()](attempt_ptr a, endpoint e, pub_client::message_handler m,
                                    pub_client::closed_handler c) {
          asio::post(self->strand_, [self, a = std::move(a), e = std::move(e), m = std::move(m),
                                     c = std::move(c)]() mutable {
            self->start(a, std::move(e), std::move(m), std::move(c));
          });
        },
        std::move(ep), std::move(on_msg), std::move(on_closed));
  }

  bool connected() const { return connected_.load(); }
  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->drop(false, {}); });
  }

 protected:
  // On the strand: replace the connection (replace() first) and finish a later.
  virtual void start(const attempt_ptr& a, endpoint ep, pub_client::message_handler on_msg,
                     pub_client::closed_handler on_closed) = 0;
  // Close the transport's connection (drop() does the rest).
  virtual void release_connection() = 0;

  static void finish(const attempt_ptr& a, result<void> r) {
    if (a) a->complete(r);
  }
  // A connect begins: the old connection goes silently, the new handlers take over; the
  // generation of the new connection.
  std::uint64_t replace(pub_client::message_handler on_msg, pub_client::closed_handler on_closed) {
    drop(false, {});
    const std::uint64_t gen = ++gen_;
    on_msg_ = std::move(on_msg);
    on_closed_ = std::move(on_closed);
    return gen;
  }
  // The pending connect, taken (nullptr if none).
  attempt_ptr take_attempt() {
    auto a = std::move(attempt_);
    attempt_ = nullptr;
    return a;
  }

  // Close the connection; report the loss once if it was up and report is set.
  void drop(bool report, error_code why) {
    const bool was = connected_.exchange(false);
    ++gen_;
    release_connection();
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    on_msg_ = nullptr;
    if (report && was && cb) cb(why);
  }

  client_strand strand_;
  std::atomic<bool> connected_{false};
  std::uint64_t gen_ = 0;  // bumped by drop(): callbacks of an older connection are stale
  attempt_ptr attempt_;    // a connect waiting for the peer
  pub_client::message_handler on_msg_;
  pub_client::closed_handler on_closed_;
};

// The public REQ client over a core with async_request(body, timeout, token) and close().
// Streaming is not part of REQ/REP: request_stream() is a plain request.
template <class Core>
class req_client_of final : public req_client {
 public:
  req_client_of(endpoint ep, std::shared_ptr<Core> core) : ep_(std::move(ep)), core_(std::move(core)) {}
  ~req_client_of() override { core_->close(); }

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
  std::shared_ptr<Core> core_;
};

// The public SUB client over a core with async_connect(ep, on_msg, on_closed, token),
// connected() and close(). A SUB socket sends nothing after its subscriptions.
template <class Core>
class pub_client_of final : public pub_client {
 public:
  explicit pub_client_of(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~pub_client_of() override { core_->close(); }
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
  std::shared_ptr<Core> core_;
};

}  // namespace sylvite::transport::detail
