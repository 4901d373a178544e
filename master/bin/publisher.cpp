// sylvite-publisher: one publish process of a salt-master with `publish_processes` > 0
// (master/pub_processes.hpp starts it; the link is master/pub_link.hpp). It accepts
// minions' publish connections on the master's publish_port (its own listening socket of
// the port's SO_REUSEPORT group, inherited from the master) and sends them what the master publishes;
// the master checks each minion's hello and answers with the id. Not for operators to run.
//
// Descriptors: 3 = the link to the master (AF_UNIX stream), 4 = the listening socket.
// Logs go to the master's log_file (its settings arrive in the init message) and stderr.
// It exits when the link closes (the master stopped or died) or on SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <array>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>

#include "core/transport/transport.hpp"
#include "core/util/log.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/msgpack.hpp"
#include "master/pub_link.hpp"

namespace asio = boost::asio;
using sylvite::wire::value;
namespace pub_link = sylvite::master::pub_link;
namespace transport = sylvite::transport;

namespace {

constexpr int k_link_fd = 3;
constexpr int k_listen_fd = 4;
// Hellos waiting to reach the master beyond this are dropped (the minion sends its hello
// again when it reconnects); ups, downs and counts are never dropped.
constexpr std::size_t k_max_link_queue = 64u << 20;
// Frames a minion sends on its publish connection are hellos (its id and token, a few
// hundred bytes); larger ones are not forwarded to the master.
constexpr std::size_t k_max_hello = 64u << 10;

class publisher {
 public:
  publisher(asio::io_context& io, int index) : io_(io), link_(io), timer_(io), index_(index) {}

  int run() {
    boost::system::error_code ec;
    link_.assign(asio::local::stream_protocol(), k_link_fd, ec);
    if (ec) {
      std::fprintf(stderr, "sylvite-publisher: descriptor %d is not the master's link: %s\n", k_link_fd,
                   ec.message().c_str());
      return 2;
    }
    read();
    return 0;
  }

 private:
  void read() {
    link_.async_read_some(asio::buffer(rbuf_), [this](boost::system::error_code ec, std::size_t n) {
      if (ec) return finish(ec == asio::error::eof ? "the master closed the link" : ec.message());
      reader_.feed(std::string_view(rbuf_.data(), n));
      for (;;) {
        auto m = reader_.next();
        if (!m) return finish("bad message from the master");
        if (!*m) break;
        if (!handle(**m)) return;
      }
      read();
    });
  }

  bool handle(const pub_link::message& m) {
    switch (m.op) {
      case 'O':
        return init(m.payload);
      case 'A':
        if (pub_) pub_->publish_all(std::make_shared<const std::string>(m.payload));
        return true;
      case 'T': {
        auto t = pub_link::decode_to(m.payload);
        if (!t) {
          finish("bad targeted publish from the master");
          return false;
        }
        if (pub_) pub_->publish_to(std::make_shared<const std::string>(t->frame), t->ids);
        return true;
      }
      case 'I': {
        auto v = sylvite::wire::unpack(m.payload);
        if (v && v->is_array() && v->size() == 2 && (*v)[0].is_number_unsigned()) {
          auto id = sylvite::wire::as_text((*v)[1]);
          if (id && pub_) pub_->identify((*v)[0].get<std::uint64_t>(), std::string(*id));
        }
        return true;
      }
      case 'D':
        if (pub_) {
          auto n = pub_->disconnect(m.payload);
          if (n) spdlog::info("closed {} publish connection(s) of {} (key deleted or rejected)", n, m.payload);
        }
        return true;
      case 'R':
        sylvite::util::reopen_logs();
        return true;
      case 'P':  // the master's liveness check: answered from this (the only) io thread
        send(pub_link::encode('K', m.payload), false);
        return true;
      default:
        finish(std::string("unknown message '") + m.op + "' from the master");
        return false;
    }
  }

  bool init(const std::string& payload) {
    if (pub_) return true;
    auto v = sylvite::wire::unpack(payload);
    if (!v || !v->is_object()) {
      finish("bad init message from the master");
      return false;
    }
    const value& s = *v;
    auto text = [&](const char* k) { return std::string(sylvite::wire::get_text(s, k).value_or("")); };
    auto num = [&](const char* k, std::int64_t d) { return sylvite::wire::get_int(s, k).value_or(d); };
    sylvite::util::init_logging("sylvite-publisher", text("log_level"), text("log_file"), text("log_level_logfile"));
    link_limit_ = static_cast<std::size_t>(num("link_limit", static_cast<std::int64_t>(pub_link::k_max_message)));
    reader_.set_max(link_limit_);
    transport::options o;
    o.max_frame_size = static_cast<std::size_t>(num("max_frame_size", static_cast<std::int64_t>(o.max_frame_size)));
    o.max_queue_bytes = static_cast<std::size_t>(num("max_queue_bytes", static_cast<std::int64_t>(o.max_queue_bytes)));
    o.max_queue_frames = static_cast<std::size_t>(num("max_queue_frames", static_cast<std::int64_t>(o.max_queue_frames)));
    o.tcp_keepalive = sylvite::wire::get_bool(s, "tcp_keepalive").value_or(true);
    o.keepalive_idle = static_cast<int>(num("keepalive_idle", o.keepalive_idle));
    o.keepalive_intvl = static_cast<int>(num("keepalive_intvl", o.keepalive_intvl));
    o.keepalive_cnt = static_cast<int>(num("keepalive_cnt", o.keepalive_cnt));
    o.user_timeout_ms = static_cast<int>(num("user_timeout_ms", o.user_timeout_ms));
    o.pre_auth_max_frame_size = static_cast<std::size_t>(num("pre_auth_max_frame_size", 0));
    o.pre_auth_max_nodes = static_cast<std::size_t>(num("pre_auth_max_nodes", 0));
    o.pre_auth_max_depth = static_cast<std::size_t>(num("pre_auth_max_depth", 0));
    if (auto b = num("pre_auth_budget", 0); b > 0)
      o.pre_auth_budget = std::make_shared<transport::byte_budget>(static_cast<std::size_t>(b));
    o.frame_timeout = std::chrono::milliseconds(num("frame_timeout_ms", 0));
    o.pre_auth_idle_timeout = std::chrono::milliseconds(num("pre_auth_idle_timeout_ms", 0));
    o.max_connections = static_cast<std::size_t>(num("max_connections", 0));
    o.pre_auth_max_connections = static_cast<std::size_t>(num("pre_auth_max_connections", 0));
    o.pre_auth_max_connections_per_source = static_cast<std::size_t>(num("pre_auth_max_connections_per_source", 0));
    o.reserved_fds = static_cast<std::size_t>(num("reserved_fds", 0));
    o.listen_fd = k_listen_fd;
    const auto raised = transport::raise_open_files_limit();
    pub_ = std::make_unique<transport::pub_server>(
        io_, transport::endpoint{}, o,
        [this](const value& body, const transport::peer_info& p) -> std::optional<std::string> {
          value h = value::array();
          h.push_back(p.conn_id);
          h.push_back(p.address);
          h.push_back(body);
          auto msg = pub_link::encode_value('H', h);
          if (msg.size() > k_max_hello) {  // a hello is a few hundred bytes
            if (const auto n = big_log_.hit())
              spdlog::info("publish process {}: ignored {} frame(s) too large for a hello, e.g. from {}", index_, n,
                           p.address);
            return std::nullopt;
          }
          send(std::move(msg), true);
          return std::nullopt;  // the master answers with 'I'
        },
        [this](const std::string& id, bool connected) { send(pub_link::encode(connected ? 'U' : 'W', id), false); });
    if (auto r = pub_->start(); !r) {
      spdlog::critical("publish process {}: cannot accept on the publish port: {}", index_, r.error().message());
      finish("cannot accept");
      return false;
    }
    spdlog::info("publish process {} (pid {}) accepting on port {} (open files limit {})", index_, ::getpid(),
                 pub_->bound_port(), raised);
    send(pub_link::encode_value('Y', value(pub_->bound_port())), false);
    tick();
    return true;
  }

  // Report the connection count when it changed (once a second).
  void tick() {
    timer_.expires_after(std::chrono::seconds(1));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || done_) return;
      const auto n = pub_ ? pub_->connection_count() : 0;
      if (n != reported_) {
        reported_ = n;
        send(pub_link::encode_value('C', value(static_cast<std::uint64_t>(n))), false);
      }
      tick();
    });
  }

  // Every call runs on the io thread (the process has one).
  void send(std::string msg, bool droppable) {
    if (done_) return;
    if (droppable && queued_ > k_max_link_queue) {
      if (const auto n = drop_log_.hit())
        spdlog::warn("publish process {}: the master is not reading; dropped {} hello(s) in the last interval "
                     "(minions send theirs again)",
                     index_, n);
      return;
    }
    queued_ += msg.size();
    q_.push_back(std::move(msg));
    if (q_.size() == 1) write();
  }

  void write() {
    asio::async_write(link_, asio::buffer(q_.front()), [this](boost::system::error_code ec, std::size_t) {
      if (ec) return finish("link to the master: " + ec.message());
      queued_ -= q_.front().size();
      q_.pop_front();
      if (!q_.empty()) write();
    });
  }

  void finish(const std::string& why) {
    if (done_) return;
    done_ = true;
    spdlog::info("publish process {} stopping: {}", index_, why);
    timer_.cancel();
    if (pub_) pub_->stop();
    boost::system::error_code ec;
    link_.close(ec);
    io_.stop();
  }

  asio::io_context& io_;
  asio::local::stream_protocol::socket link_;
  asio::steady_timer timer_;
  const int index_;
  std::array<char, 64 * 1024> rbuf_{};
  pub_link::reader reader_;
  std::unique_ptr<transport::pub_server> pub_;
  std::deque<std::string> q_;
  std::size_t queued_ = 0;
  std::size_t reported_ = static_cast<std::size_t>(-1);
  bool done_ = false;
  sylvite::util::log_limiter drop_log_{std::chrono::seconds(10)}, big_log_{std::chrono::seconds(10)};
  std::size_t link_limit_ = pub_link::k_max_message;

 public:
  void stop(const std::string& why) { finish(why); }
};

}  // namespace

int main(int argc, char** argv) {
  int index = 0;
  if (argc == 3 && std::string(argv[1]) == "--index") index = std::atoi(argv[2]);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::fcntl(k_link_fd, F_GETFD) < 0 || ::fcntl(k_listen_fd, F_GETFD) < 0) {
    std::fprintf(stderr, "sylvite-publisher is started by salt-master (publish_processes); it is not run by hand\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context io(1);
  publisher p(io, index);
  if (int rc = p.run(); rc != 0) return rc;
  asio::signal_set sigs(io, SIGINT, SIGTERM);
  sigs.async_wait([&](boost::system::error_code ec, int sig) {
    if (!ec) p.stop("signal " + std::to_string(sig));
  });
  io.run();
  spdlog::shutdown();
  return 0;
}
