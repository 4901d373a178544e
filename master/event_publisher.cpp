// sylvite::master event publisher (event_publisher.hpp): Salt's master_event_pub.ipc.
#include "master/event_publisher.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::master {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using wire::value;

std::string pack_salt_event(const std::string& tag, const value& data) {
  std::string out = tag;
  out += "\n\n";
  wire::pack_append(out, data, wire::packing::frame);
  return out;
}

std::string frame_salt_event(const std::string& tag, const value& data) {
  return wire::pack_frame(value::object(), wire::make_bin(pack_salt_event(tag, data)));
}

std::optional<std::pair<std::string, value>> unpack_salt_event(std::string_view packed) {
  auto p = packed.find("\n\n");
  if (p == std::string_view::npos) return std::nullopt;
  auto d = wire::unpack(packed.substr(p + 2));
  if (!d) return std::nullopt;
  return std::make_pair(std::string(packed.substr(0, p)), std::move(*d));
}

struct event_publisher::book {
  std::mutex mu;
  std::list<std::shared_ptr<conn>> conns;
  bool stopped = false;  // under mu; set once by stop()
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::size_t> count{0};  // conns.size(), read by the hub without mu

  void drop(const std::shared_ptr<conn>& c);
};

struct event_publisher::conn : std::enable_shared_from_this<conn> {
  conn(local::socket s, std::shared_ptr<book> b)
      : sock(std::move(s)), strand(asio::make_strand(sock.get_executor())), owner(std::move(b)) {}
  local::socket sock;
  asio::strand<asio::any_io_executor> strand;
  std::shared_ptr<book> owner;
  std::mutex mu;
  std::deque<std::shared_ptr<const std::string>> q;
  std::size_t bytes = 0;  // of q
  bool writing = false;
  bool closed = false;
  char rbuf[512];

  // Subscribers send nothing; reading notices when one goes away. On the strand.
  void read_loop() {
    auto self = shared_from_this();
    sock.async_read_some(asio::buffer(rbuf), asio::bind_executor(strand, [self](boost::system::error_code ec, std::size_t) {
                           if (ec) {
                             self->owner->drop(self);
                             return;
                           }
                           self->read_loop();
                         }));
  }
  // Write the queue's head; on the strand, one chain at a time (writing).
  void write_next() {
    std::shared_ptr<const std::string> f;
    {
      std::lock_guard lk(mu);
      if (closed || q.empty()) {
        writing = false;
        return;
      }
      f = q.front();
    }
    auto self = shared_from_this();
    asio::async_write(sock, asio::buffer(*f), asio::bind_executor(strand, [self, f](boost::system::error_code ec,
                                                                                    std::size_t) {
                        if (ec) {
                          self->owner->drop(self);
                          std::lock_guard lk(self->mu);
                          self->writing = false;
                          return;
                        }
                        self->owner->sent++;
                        {
                          std::lock_guard lk(self->mu);
                          if (!self->q.empty()) {
                            self->bytes -= std::min(self->bytes, self->q.front()->size());
                            self->q.pop_front();
                          }
                        }
                        self->write_next();
                      }));
  }
};

event_publisher::event_publisher(asio::io_context& io, settings s, event_hub& hub)
    : io_(io), s_(std::move(s)), hub_(hub), acceptor_(io), book_(std::make_shared<book>()) {}

event_publisher::~event_publisher() { stop(); }

result<void> event_publisher::start() {
  const std::string path = s_.path.string();
  boost::system::error_code ec;
  // A stale socket file (a master that died) is removed; a live one means another master.
  {
    local::socket probe(io_);
    probe.connect(local::endpoint(path), ec);
    if (!ec) {
      spdlog::error("event publisher: another process is listening on {}", path);
      return make_error_code(asio::error::address_in_use);
    }
    ::unlink(path.c_str());
  }
  acceptor_.open(local(), ec);
  if (!ec) acceptor_.bind(local::endpoint(path), ec);
  if (ec) {
    spdlog::error("event publisher: cannot bind {}: {}", path, ec.message());
    return ec;
  }
  created_ = true;
  // Salt: pub_path_perms 0o660 (group may read the bus; sock_dir itself is 0700).
  if (::chmod(path.c_str(), 0660) != 0) {
    boost::system::error_code cec(errno, boost::system::system_category());
    spdlog::error("event publisher: cannot chmod {}: {}", path, cec.message());
    acceptor_.close(ec);
    ::unlink(path.c_str());
    created_ = false;
    return cec;
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    spdlog::error("event publisher: cannot listen on {}: {}", path, ec.message());
    return ec;
  }
  // Wanted only while a client is connected: otherwise an event costs the hub no copy.
  sub_ = hub_.subscribe_all([this](const std::string& tag, const value& data) { on_event(tag, data); },
                            [b = book_] { return b->count.load(std::memory_order_relaxed) > 0; });
  accept();
  spdlog::info("event bus for external subscribers on {}", path);
  return {};
}

void event_publisher::stop() {
  std::list<std::shared_ptr<conn>> cs;
  boost::system::error_code ec;
  {
    // Under the book's lock: an accept handler that is running finishes first, and any
    // later one sees `stopped` and returns without touching this object.
    std::lock_guard lk(book_->mu);
    if (book_->stopped) return;
    book_->stopped = true;
    acceptor_.close(ec);
    cs.swap(book_->conns);
    book_->count = 0;
  }
  if (sub_) hub_.unsubscribe(sub_);
  sub_ = 0;
  for (auto& c : cs) {
    std::lock_guard lk(c->mu);
    c->closed = true;
    c->q.clear();
    c->sock.close(ec);
  }
  if (created_) ::unlink(s_.path.string().c_str());
  created_ = false;
}

std::size_t event_publisher::subscribers() const {
  std::lock_guard lk(book_->mu);
  return book_->conns.size();
}

std::uint64_t event_publisher::sent() const noexcept { return book_->sent.load(); }

void event_publisher::accept() {
  // From start(), or from the previous handler with the book's lock held, so that stop()
  // never closes the acceptor while a handler is re-arming it.
  acceptor_.async_accept([this, b = book_](boost::system::error_code ec, local::socket s) {
    if (ec) return;
    std::lock_guard lk(b->mu);
    if (b->stopped) return;  // this object may be gone: touch nothing of it
    auto c = std::make_shared<conn>(std::move(s), b);
    if (b->conns.size() >= s_.max_subscribers) {
      if (shed_log_.hit())
        spdlog::warn("event publisher: {} subscribers already (max); refused a new one ({} event(s) shed so far)",
                     s_.max_subscribers, shed_.load());
      boost::system::error_code ignored;
      c->sock.close(ignored);
    } else {
      b->conns.push_back(c);
      b->count = b->conns.size();
      asio::post(c->strand, [c] { c->read_loop(); });
    }
    accept();
  });
}

void event_publisher::book::drop(const std::shared_ptr<conn>& c) {
  {
    std::lock_guard lk(c->mu);
    if (c->closed) return;
    c->closed = true;
    c->q.clear();
    boost::system::error_code ec;
    c->sock.close(ec);
  }
  std::lock_guard lk(mu);
  conns.remove(c);
  count = conns.size();
}

void event_publisher::on_event(const std::string& tag, const value& data) {
  std::vector<std::shared_ptr<conn>> cs;
  {
    std::lock_guard lk(book_->mu);
    if (book_->stopped || book_->conns.empty()) return;
    cs.assign(book_->conns.begin(), book_->conns.end());
  }
  auto frame = std::make_shared<const std::string>(frame_salt_event(tag, data));
  for (auto& c : cs) {
    bool start = false;
    {
      std::lock_guard lk(c->mu);
      if (c->closed) continue;
      if (c->q.size() >= s_.max_queue || (!c->q.empty() && c->bytes + frame->size() > s_.max_bytes)) {
        shed_++;
        if (auto n = shed_log_.hit())
          spdlog::warn("event publisher: a subscriber of {} is not reading: {} event(s) shed in the last 10 s "
                       "(queue of {} events / {} bytes full; {} shed in all)",
                       s_.path.string(), n, s_.max_queue, s_.max_bytes, shed_.load());
        continue;
      }
      c->q.push_back(frame);
      c->bytes += frame->size();
      if (!c->writing) c->writing = start = true;
    }
    if (start) asio::post(c->strand, [c] { c->write_next(); });
  }
}

}  // namespace sylvite::master
