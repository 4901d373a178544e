// sylvite::transport::detail::req_pool: the ZeroMQ REQ clients' pool (libzmq REQ sockets
// in zmq_client.cpp, native ZMTP connections in zmtp_client.cpp). A REQ connection
// carries one request at a time, so concurrent requests take one connection each, up to
// `cap`; further requests queue until one is answered. A request that times out discards
// its connection (a late reply would be out of step); a lost connection fails its
// request at once (a REQ socket would wait for a reply that cannot come).
// The transport supplies: encode() (any thread), open_slot() (a new connection, or
// nullptr: the request fails with errc::connect_failed), transmit() (send the slot's
// call, now or once the connection is up; false: lost) and release() (close the slot's
// connection). It reports back with reply_arrived() and fail_slot().
// Thread-safety: async_request()/close() from any thread; everything else on strand_.
#pragma once
#include <algorithm>
#include <deque>
#include <vector>

#include "core/transport/detail/client_ops.hpp"
#include "core/wire/value.hpp"

namespace sylvite::transport::detail {

struct req_call : pending_op<result<wire::value>> {
  using pending_op::pending_op;
  std::shared_ptr<const std::string> bytes;  // the request as it goes on the wire
};
using req_call_ptr = std::shared_ptr<req_call>;

// What every slot has; a transport's slot derives from it.
struct req_slot {
  req_call_ptr call;  // in flight on this connection
  bool dead = false;  // discarded: callbacks for it are stale
};

template <class Slot>
class req_pool : public std::enable_shared_from_this<req_pool<Slot>> {
 public:
  using slot_ptr = std::shared_ptr<Slot>;

  req_pool(const asio::any_io_executor& ex, std::size_t cap) : strand_(asio::make_strand(ex)), cap_(cap) {}
  virtual ~req_pool() = default;

  template <class Token>
  auto async_request(wire::value body, std::chrono::milliseconds timeout, Token&& token) {
    return initiate_op<req_call>(
        strand_, std::forward<Token>(token),
        [self = this->shared_from_this()](req_call_ptr c, wire::value b, std::chrono::milliseconds t) {
          c->bytes = std::make_shared<const std::string>(self->encode(b));  // off the strand
          asio::post(self->strand_, [self, c = std::move(c), t] { self->start(c, t); });
        },
        std::move(body), timeout);
  }

  void close() {
    asio::post(strand_, [self = this->shared_from_this()] { self->do_close(); });
  }

 protected:
  virtual std::string encode(const wire::value& body) const = 0;
  virtual slot_ptr open_slot() = 0;
  virtual bool transmit(const slot_ptr& s) = 0;
  virtual void release(Slot& s) = 0;

  // The reply to s's call (or why it has none while the connection stays usable).
  void reply_arrived(const slot_ptr& s, result<wire::value> r) {
    auto p = std::move(s->call);
    s->call = nullptr;
    if (!p || p->done) {  // a reply nobody waits for: the connection is out of step
      discard(s);
      serve();
      return;
    }
    std::erase(busy_, s);
    idle_.push_back(s);
    p->complete(std::move(r));
    serve();
  }

  // s is unusable: discard it and fail its call with ec.
  void fail_slot(const slot_ptr& s, error_code ec) {
    auto p = s->call;
    discard(s);
    if (p) p->complete(ec);
    serve();
  }

  void discard(const slot_ptr& s) {
    if (!s || s->dead) return;
    s->dead = true;
    release(*s);
    if (open_) --open_;
    s->call = nullptr;
    std::erase(idle_, s);
    std::erase(busy_, s);
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
      } else if (open_ < cap_) {
        s = open_slot();
        if (!s) {
          queue_.pop_front();
          p->complete(make_error_code(errc::connect_failed));
          continue;
        }
        ++open_;
      } else {
        return;  // wait for a connection to come back
      }
      queue_.pop_front();
      s->call = p;
      busy_.push_back(s);
      if (!transmit(s)) {
        discard(s);
        p->complete(make_error_code(errc::disconnected));
      }
    }
  }

  bool closed() const { return closed_; }

  client_strand strand_;

 private:
  void start(const req_call_ptr& p, std::chrono::milliseconds timeout) {
    if (closed_) return p->complete(make_error_code(errc::closed));
    p->timer.expires_after(timeout);
    p->timer.async_wait([self = this->shared_from_this(), p](const error_code& ec) {
      if (!ec) self->on_timeout(p);
    });
    queue_.push_back(p);
    serve();
  }

  void on_timeout(const req_call_ptr& p) {
    if (p->done) return;
    // The connection carrying it (if any) is discarded: its reply, if it ever comes, is stale.
    for (auto s : std::vector<slot_ptr>(busy_))
      if (s->call == p) discard(s);
    p->complete(make_error_code(errc::timeout));
    serve();
  }

  void do_close() {
    if (closed_) return;
    closed_ = true;
    auto q = std::move(queue_);
    queue_.clear();
    for (auto& p : q) p->complete(make_error_code(errc::closed));
    for (auto s : std::vector<slot_ptr>(busy_)) {
      auto p = s->call;
      discard(s);
      if (p) p->complete(make_error_code(errc::closed));
    }
    for (auto s : std::vector<slot_ptr>(idle_)) discard(s);
  }

  const std::size_t cap_;
  bool closed_ = false;
  std::deque<req_call_ptr> queue_;
  std::vector<slot_ptr> idle_;
  std::vector<slot_ptr> busy_;
  std::size_t open_ = 0;
};

}  // namespace sylvite::transport::detail
