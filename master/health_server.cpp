// sylvite::master health/readiness endpoint: see health_server.hpp.
// Why a probe thread and a deadline: a GlusterFS client blocks every file-system call on
// a volume for `network.ping-timeout` (42 s by default) when a brick server vanishes,
// and a stat() stuck in the kernel cannot be cancelled. So the file system is touched
// only on the probe thread; the HTTP handler reads the last results plus "a probe has
// been running since T", and reports not ready once T is older than the deadline.
// The Beast includes stay in this file (heavy translation unit).
#include "master/health_server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

namespace sylvite::master {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// ------------------------------------------------------------------ readiness_probe

struct readiness_probe::state {
  std::vector<probe_target> targets;
  options opts;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool first_done = false;
  bool shutting_down = false;
  std::string probe_failure;  // first failed target of the last round ("" = all fine)
  std::map<std::string, std::string> blockers;
  std::atomic<std::int64_t> in_flight_since{0};  // steady_clock ns since epoch; 0 = idle
  std::atomic<std::size_t> in_flight_index{0};
};

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string errno_text(int e) { return std::strerror(e); }

void probe_round(readiness_probe::state& s) {
  std::string failure;
  for (std::size_t i = 0; i < s.targets.size(); ++i) {
    s.in_flight_index.store(i);
    s.in_flight_since.store(now_ns());
    std::string r;
    try {
      r = s.opts.check ? s.opts.check(s.targets[i]) : readiness_probe::check_target(s.targets[i]);
    } catch (const std::exception& e) {
      r = s.targets[i].name + " probe failed: " + e.what();
    }
    s.in_flight_since.store(0);
    if (!r.empty() && failure.empty()) failure = std::move(r);
  }
  std::lock_guard lk(s.mu);
  if (failure != s.probe_failure) {
    if (failure.empty()) spdlog::info("readiness: file-system probes pass again");
    else spdlog::warn("readiness: {}", failure);
  }
  s.probe_failure = std::move(failure);
  s.first_done = true;
}

}  // namespace

readiness_probe::readiness_probe(std::vector<probe_target> targets, options opts)
    : s_(std::make_shared<state>()) {
  s_->targets = std::move(targets);
  s_->opts = opts;
}

readiness_probe::~readiness_probe() { stop(); }

void readiness_probe::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lk(s_->mu);
    if (s_->stop) return;
  }
  thread_ = std::thread([s = s_] {
    std::unique_lock lk(s->mu);
    while (!s->stop) {
      lk.unlock();
      probe_round(*s);
      lk.lock();
      s->cv.wait_for(lk, s->opts.interval, [&] { return s->stop; });
    }
  });
}

void readiness_probe::stop() {
  {
    std::lock_guard lk(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  if (!thread_.joinable()) return;
  const std::int64_t since = s_->in_flight_since.load();
  const auto deadline = std::chrono::duration_cast<std::chrono::nanoseconds>(s_->opts.deadline).count();
  if (since != 0 && now_ns() - since > deadline) {
    // Stuck in the kernel on a stalled mount: the thread holds its own reference to the
    // state and exits by itself when the call returns.
    spdlog::warn("readiness probe stuck on {}: not waiting for it",
                 s_->targets[s_->in_flight_index.load()].dir.string());
    thread_.detach();
  } else {
    thread_.join();
  }
}

void readiness_probe::probe_once() { probe_round(*s_); }

readiness readiness_probe::snapshot() const {
  const std::int64_t since = s_->in_flight_since.load();
  const std::size_t idx = s_->in_flight_index.load();
  std::lock_guard lk(s_->mu);
  if (s_->shutting_down) return {false, "shutting down"};
  if (!s_->blockers.empty()) return {false, s_->blockers.begin()->second};
  if (since != 0 && idx < s_->targets.size()) {
    const auto ran = std::chrono::nanoseconds(now_ns() - since);
    if (ran > s_->opts.deadline) {
      const auto& t = s_->targets[idx];
      return {false, t.name + " " + t.dir.string() + " unreachable: file-system probe still running after " +
                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(ran).count()) + " ms"};
    }
  }
  if (!s_->first_done) return {false, "starting: first file-system probe pending"};
  if (!s_->probe_failure.empty()) return {false, s_->probe_failure};
  return {true, ""};
}

void readiness_probe::set_blocker(const std::string& name, const std::string& reason) {
  std::lock_guard lk(s_->mu);
  auto& r = s_->blockers[name];
  if (r != reason) spdlog::info("readiness: not ready: {}", reason);
  r = reason;
}

void readiness_probe::clear_blocker(const std::string& name) {
  std::lock_guard lk(s_->mu);
  if (s_->blockers.erase(name)) spdlog::info("readiness: condition '{}' cleared", name);
}

void readiness_probe::set_shutting_down() {
  std::lock_guard lk(s_->mu);
  s_->shutting_down = true;
}

std::string readiness_probe::check_target(const probe_target& t) {
  const std::string what = t.name + " " + t.dir.string();
  struct ::stat st {};
  if (::stat(t.dir.c_str(), &st) != 0) return what + " unreachable: " + errno_text(errno);
  if (!S_ISDIR(st.st_mode)) return what + " is not a directory";
  // Read the directory (goes to the server on a network mount; stat alone may be cached).
  DIR* d = ::opendir(t.dir.c_str());
  if (!d) return what + " unreadable: " + errno_text(errno);
  errno = 0;
  while (::readdir(d) != nullptr) {
  }
  const int rerr = errno;
  ::closedir(d);
  if (rerr != 0) return what + " unreadable: " + errno_text(rerr);
  if (t.write) {
    // Host name + pid: masters on several hosts probe the same shared directory.
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    const auto f = t.dir / (std::string(".sylvite-ready-probe.") + host + "." + std::to_string(::getpid()));
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return what + " not writable: " + errno_text(errno);
    const char byte = '1';
    int err = 0;
    if (::write(fd, &byte, 1) != 1) err = errno ? errno : EIO;
    if (!err && ::fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    if (::unlink(f.c_str()) != 0 && !err) err = errno;
    if (err) return what + " not writable: " + errno_text(err);
  }
  return "";
}

// ------------------------------------------------------------------ health_server

namespace {

struct connection {
  explicit connection(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
};

}  // namespace

struct health_server::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io_, health_endpoint ep_, std::function<readiness()> snap, std::string id_, limits lim_)
      : io(io_),
        ep(std::move(ep_)),
        snapshot(std::move(snap)),
        id(std::move(id_)),
        lim(lim_),
        strand(asio::make_strand(io_)),
        acceptor(strand) {}

  asio::io_context& io;
  health_endpoint ep;
  std::function<readiness()> snapshot;
  std::string id;
  limits lim;
  asio::strand<asio::io_context::executor_type> strand;  // the acceptor's
  tcp::acceptor acceptor;
  std::atomic<std::uint16_t> port{0};
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};
  std::atomic<std::size_t> open{0};
  std::mutex mu;
  std::uint64_t next_key = 0;
  std::map<std::uint64_t, std::weak_ptr<connection>> conns;

  readiness ready_now() const {
    try {
      return snapshot ? snapshot() : readiness{true, ""};
    } catch (const std::exception& e) {
      return {false, std::string("readiness check failed: ") + e.what()};
    } catch (...) {
      return {false, "readiness check failed"};
    }
  }

  // The response to one parsed request.
  http::response<http::string_body> answer(const http::request<http::empty_body>& req) const {
    http::response<http::string_body> res;
    res.version(req.version());
    res.set(http::field::server, "sylvite");
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    std::string_view target(req.target().data(), req.target().size());
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    nlohmann::json body;
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "GET, HEAD");
      body = {{"error", "method not allowed"}};
    } else if (target == "/health") {
      res.result(http::status::ok);
      body = {{"status", "up"}, {"id", id}};
    } else if (target == "/ready") {
      readiness r = ready_now();
      if (r.ready) {
        res.result(http::status::ok);
        body = {{"status", "ready"}, {"id", id}};
      } else {
        res.result(http::status::service_unavailable);
        body = {{"status", "not ready"}, {"id", id}, {"reason", r.reason}};
      }
    } else {
      res.result(http::status::not_found);
      body = {{"error", "not found"}, {"paths", {"/health", "/ready"}}};
    }
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    res.prepare_payload();
    if (req.method() == http::verb::head) {
      // Same headers (Content-Length of the GET body), no body.
      const auto len = res.body().size();
      res.body().clear();
      res.content_length(len);
    }
    return res;
  }

  void forget(std::uint64_t key) {
    std::lock_guard lk(mu);
    conns.erase(key);
  }
};

namespace {

http::response<http::string_body> bad_request(unsigned version, const std::string& why) {
  http::response<http::string_body> res{http::status::bad_request, version == 10 ? 10u : 11u};
  res.set(http::field::server, "sylvite");
  res.set(http::field::content_type, "application/json");
  res.body() = nlohmann::json{{"error", "bad request"}, {"detail", why}}.dump() + "\n";
  res.prepare_payload();
  res.keep_alive(false);
  return res;
}

asio::awaitable<void> session(std::shared_ptr<health_server::impl> self, std::shared_ptr<connection> c,
                              std::uint64_t key) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  beast::flat_buffer buf(self->lim.max_header_bytes + 1024);
  for (int n = 0; n < self->lim.max_requests_per_connection && !self->stopped.load(); ++n) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(self->lim.max_header_bytes));
    parser.body_limit(0);
    c->stream.expires_after(self->lim.read_timeout);
    auto [ec, bytes] = co_await http::async_read(c->stream, buf, parser, tok);
    (void)bytes;
    if (ec) {
      // Clean close, deadline, shutdown: nothing to say. Anything else is a malformed
      // request: answer 400 once and close.
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
          ec == asio::error::connection_reset || ec == asio::error::eof)
        break;
      spdlog::debug("health: bad request from {}: {}", [&] {
        boost::system::error_code e2;
        auto r = c->stream.socket().remote_endpoint(e2);
        return e2 ? std::string("?") : r.address().to_string();
      }(), ec.message());
      auto res = bad_request(parser.is_header_done() ? parser.get().version() : 11, ec.message());
      c->stream.expires_after(self->lim.read_timeout);
      co_await http::async_write(c->stream, res, tok);
      break;
    }
    const auto& req = parser.get();
    auto res = self->answer(req);
    const bool keep = req.keep_alive() && n + 1 < self->lim.max_requests_per_connection;
    res.keep_alive(keep);
    c->stream.expires_after(self->lim.read_timeout);
    auto [wec, wbytes] = co_await http::async_write(c->stream, res, tok);
    (void)wbytes;
    if (wec || !keep) break;
  }
  boost::system::error_code ignore;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ignore);
  c->stream.close();
  self->forget(key);
  self->open.fetch_sub(1);
}

asio::awaitable<void> accept_loop(std::shared_ptr<health_server::impl> self) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  while (!self->stopped.load()) {
    auto [ec, sock] = co_await self->acceptor.async_accept(asio::make_strand(self->io), tok);
    if (ec) {
      if (ec == asio::error::operation_aborted || self->stopped.load() || !self->acceptor.is_open()) co_return;
      // EMFILE and friends: back off instead of spinning.
      spdlog::warn("health: accept failed: {}", ec.message());
      asio::steady_timer t(self->strand, std::chrono::milliseconds(100));
      co_await t.async_wait(tok);
      continue;
    }
    if (self->open.load() >= self->lim.max_connections) {
      spdlog::debug("health: connection limit {} reached, closing a new connection", self->lim.max_connections);
      boost::system::error_code ignore;
      sock.close(ignore);
      continue;
    }
    boost::system::error_code ignore;
    sock.set_option(tcp::no_delay(true), ignore);
    auto c = std::make_shared<connection>(std::move(sock));
    std::uint64_t key;
    {
      std::lock_guard lk(self->mu);
      key = self->next_key++;
      self->conns.emplace(key, c);
    }
    self->open.fetch_add(1);
    auto ex = c->stream.get_executor();
    asio::co_spawn(ex, session(self, std::move(c), key), asio::detached);
  }
}

}  // namespace

health_server::health_server(asio::io_context& io, health_endpoint ep, std::function<readiness()> snapshot,
                             std::string id)
    : health_server(io, std::move(ep), std::move(snapshot), std::move(id), limits{}) {}

health_server::health_server(asio::io_context& io, health_endpoint ep, std::function<readiness()> snapshot,
                             std::string id, limits lim)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(snapshot), std::move(id), lim)) {}

health_server::~health_server() { stop(); }

result<void> health_server::start() {
  auto& s = *impl_;
  if (s.started.exchange(true)) return boost::system::error_code(asio::error::already_started);
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  const std::string host = s.ep.host.empty() ? "0.0.0.0" : s.ep.host;
  auto results = resolver.resolve(host, std::to_string(s.ep.port), tcp::resolver::passive, ec);
  if (ec) return ec;
  if (results.empty()) return boost::system::error_code(asio::error::host_not_found);
  const tcp::endpoint where = results.begin()->endpoint();
  s.acceptor.open(where.protocol(), ec);
  if (ec) return ec;
  s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  s.acceptor.bind(where, ec);
  if (ec) {
    boost::system::error_code ignore;
    s.acceptor.close(ignore);
    return ec;
  }
  s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignore;
    s.acceptor.close(ignore);
    return ec;
  }
  s.port.store(s.acceptor.local_endpoint().port());
  asio::co_spawn(s.strand, accept_loop(impl_), asio::detached);
  return {};
}

void health_server::stop() {
  auto self = impl_;
  if (self->stopped.exchange(true)) return;
  asio::post(self->strand, [self] {
    boost::system::error_code ignore;
    self->acceptor.close(ignore);
  });
  std::vector<std::shared_ptr<connection>> live;
  {
    std::lock_guard lk(self->mu);
    for (auto& [k, w] : self->conns)
      if (auto c = w.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) {
    auto ex = c->stream.get_executor();
    asio::post(ex, [c] { c->stream.close(); });
  }
}

std::uint16_t health_server::bound_port() const { return impl_->port.load(); }

std::size_t health_server::connection_count() const { return impl_->open.load(); }

}  // namespace sylvite::master
