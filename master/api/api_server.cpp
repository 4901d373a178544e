// sylvite::master::api server (api_server.hpp): Boost.Beast over plain TCP or TLS. One
// coroutine per connection (on its own strand); the request itself runs on the API's
// worker pool and the coroutine waits for it on a timer the worker cancels (posted to
// the connection's strand, so the wake-up cannot overtake the wait). GET /events keeps
// the connection: a chunked text/event-stream fed from an event_hub subscription through
// a bounded queue (salt-api writes "retry: 400", then "tag: ..." and "data: {json}" per
// event). Comments (": keep-alive") go out every 15 s of silence so a vanished client
// is noticed; the stream ends when the token expires.
#include "master/api/api_server.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "core/util/rate_limit.hpp"
#include "master/api/api_ws.hpp"
#include "master/event_hub.hpp"
#include "master/worker_pool.hpp"

namespace sylvite::master::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using wire::value;
using steady = std::chrono::steady_clock;

namespace {

constexpr auto kReadTimeout = std::chrono::seconds(30);
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr auto kKeepAlive = std::chrono::seconds(15);
constexpr std::uint32_t kHeaderLimit = 16 * 1024;
constexpr int kMaxRequestsPerConnection = 1000;
constexpr std::size_t kMaxWorkers = 64;      // thread_pool is capped here (Salt: 100 threads)
constexpr std::size_t kWorkerQueue = 1024;   // requests waiting for a worker; then 503

struct conn_base {
  virtual ~conn_base() = default;
  virtual void close() = 0;  // posted to the connection's strand
};

template <class Stream>
struct connection : conn_base {
  template <class... A>
  explicit connection(A&&... a) : stream(std::forward<A>(a)...) {}
  Stream stream;
  void close() override {
    auto ex = stream.get_executor();
    asio::post(ex, [this, keep = keep_alive_ref] {
      boost::system::error_code ignore;
      beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignore);
      beast::get_lowest_layer(stream).close();
    });
  }
  std::shared_ptr<conn_base> keep_alive_ref;  // set while the session runs
};

// A request handed to a worker; the worker cancels `timer` when `res` is ready.
struct pending {
  explicit pending(const asio::any_io_executor& ex) : timer(ex, steady::time_point::max()) {}
  asio::steady_timer timer;
  api_response res;
};

// One /events client: the hub's handler fills q (any thread); the session drains it.
struct sse_feed {
  explicit sse_feed(const asio::any_io_executor& ex) : wake(ex), ex_(ex) {}
  std::mutex mu;
  std::deque<std::pair<std::string, value>> q;
  bool overflow = false;
  bool notified = false;
  bool closed = false;
  asio::steady_timer wake;
  asio::any_io_executor ex_;
  std::uint64_t sub = 0;
};

// One /ws client's reader state, shared with its writer (both on the connection's strand).
struct ws_state {
  bool ready = false;        // "websocket client ready" received: events flow
  std::size_t acks = 0;      // "server received message" replies owed
  bool reader_done = false;  // the read side has ended (close frame, error, shutdown)
};
constexpr std::size_t kWsMessageMax = 64 * 1024;  // what a /ws client may send in one message
constexpr auto kWsIdle = std::chrono::seconds(30);  // pings at half of it; no pong: dropped

bool benign(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
         ec == asio::error::connection_reset || ec == asio::error::eof || ec == asio::error::broken_pipe ||
         ec == ssl::error::stream_truncated;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

api_request to_request(const http::request<http::string_body>& r, const std::string& remote) {
  api_request q;
  q.method = std::string(r.method_string());
  std::string_view target(r.target().data(), r.target().size());
  if (auto p = target.find('?'); p != std::string_view::npos) {
    q.query = std::string(target.substr(p + 1));
    target = target.substr(0, p);
  }
  q.path = url_decode(target, false);
  for (const auto& f : r) {
    auto name = lower(std::string_view(f.name_string().data(), f.name_string().size()));
    std::string v(f.value().data(), f.value().size());
    auto it = q.headers.find(name);
    if (it == q.headers.end()) q.headers.emplace(std::move(name), std::move(v));
    else it->second += (name == "cookie" ? "; " : ", ") + v;
  }
  q.body = r.body();
  q.remote = remote;
  return q;
}

http::response<http::string_body> to_http(const api_response& a, unsigned version, bool keep) {
  http::response<http::string_body> res{static_cast<http::status>(a.status), version};
  res.set(http::field::server, "sylvite");
  res.set(http::field::content_type, a.content_type);
  for (const auto& [k, v] : a.headers) res.insert(k, v);
  res.body() = a.body;
  res.keep_alive(keep);
  res.prepare_payload();
  return res;
}

std::string chunk(std::string_view data) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
  std::string out(hex);
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace

struct api_server::impl : std::enable_shared_from_this<impl> {
  explicit impl(api_server_deps deps) : d(std::move(deps)), routes(d.routes) {}

  api_server_deps d;
  asio::io_context io{static_cast<int>(std::max<std::size_t>(1, d.io_threads))};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  tcp::acceptor acceptor{io};
  std::unique_ptr<ssl::context> tls;
  api_routes routes;
  std::unique_ptr<worker_pool> pool;
  std::vector<std::thread> threads;
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};
  std::atomic<std::size_t> open{0};
  std::atomic<std::uint16_t> port{0};
  std::mutex mu;
  std::uint64_t next_key = 0;
  std::map<std::uint64_t, std::weak_ptr<conn_base>> conns;
  std::map<std::uint64_t, std::weak_ptr<sse_feed>> feeds;
  util::log_limiter busy_log{std::chrono::seconds(10)};
  util::log_limiter drop_log{std::chrono::seconds(10)};

  void forget(std::uint64_t key) {
    std::lock_guard lk(mu);
    conns.erase(key);
    feeds.erase(key);
  }

  // Hand fn to a worker; the worker cancels the returned pending's timer when its
  // result is in. The caller awaits that timer on its strand. Null: the queue is full.
  // (Not a coroutine itself: GCC 12 mishandles lambdas passed by value to coroutines.)
  std::shared_ptr<pending> submit(const asio::any_io_executor& ex, std::function<api_response()> fn) {
    auto p = std::make_shared<pending>(ex);
    bool ok = pool->submit([p, fn = std::move(fn)] {
      try {
        p->res = fn();
      } catch (const std::exception& e) {
        p->res.status = 400;
        p->res.body = "{\"status\": 400, \"return\": \"bad request\"}";
        spdlog::warn("api: request failed: {}", e.what());
      }
      asio::post(p->timer.get_executor(), [p] { p->timer.cancel(); });
    });
    return ok ? p : nullptr;
  }

  template <class Stream>
  asio::awaitable<void> session(std::shared_ptr<connection<Stream>> c, std::uint64_t key, std::string remote);
  template <class Stream>
  asio::awaitable<std::optional<token_data>> authorize_stream(std::shared_ptr<connection<Stream>> c,
                                                              std::shared_ptr<const api_request> auth,
                                                              unsigned version);
  template <class Stream>
  asio::awaitable<void> events(std::shared_ptr<connection<Stream>> c, std::uint64_t key,
                               std::shared_ptr<const api_request> reqp, unsigned version);
  template <class Stream>
  asio::awaitable<void> websocket_stream(std::shared_ptr<connection<Stream>> c, std::uint64_t key,
                                         http::request<http::string_body> hreq,
                                         std::shared_ptr<const api_request> reqp);
  template <class WS>
  asio::awaitable<void> websocket_reader(WS& ws, std::shared_ptr<ws_state> st, std::shared_ptr<sse_feed> feed);
  asio::awaitable<void> accept_loop();
};

template <class Stream>
asio::awaitable<void> api_server::impl::session(std::shared_ptr<connection<Stream>> c, std::uint64_t key,
                                                std::string remote) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  constexpr bool is_tls = !std::is_same_v<Stream, beast::tcp_stream>;
  auto self = shared_from_this();
  auto& lowest = beast::get_lowest_layer(c->stream);
  bool handshake_ok = true;
  if constexpr (is_tls) {
    lowest.expires_after(kReadTimeout);
    auto [ec] = co_await c->stream.async_handshake(ssl::stream_base::server, tok);
    if (ec) {
      handshake_ok = false;
      spdlog::debug("api: TLS handshake with {} failed: {}", remote, ec.message());
    }
  }
  beast::flat_buffer buf;
  for (int n = 0; handshake_ok && n < kMaxRequestsPerConnection && !stopped.load(); ++n) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(d.routes.opts.max_request_body_size);
    lowest.expires_after(kReadTimeout);
    auto [ec, got] = co_await http::async_read_header(c->stream, buf, parser, tok);
    (void)got;
    api_request head_only;
    head_only.remote = remote;
    auto refuse_and_close = [&](unsigned status, const std::string& why) -> asio::awaitable<void> {
      auto res = to_http(routes.refuse(head_only, status, why), 11, false);
      lowest.expires_after(kWriteTimeout);
      auto [wec, wn] = co_await http::async_write(c->stream, res, tok);
      (void)wn;
      if (wec || status != 413) co_return;
      // Lingering close: a client still sending the body it was refused would get a reset
      // (and never read the 413) if we closed now. Stop writing, then read and discard
      // for a little while (bounded in bytes and time).
      boost::system::error_code ignore;
      lowest.socket().shutdown(tcp::socket::shutdown_send, ignore);
      lowest.expires_after(std::chrono::seconds(5));
      std::size_t drained = 0;
      std::array<char, 16384> sink;
      while (drained < (64u << 20)) {
        auto [rec, rn] = co_await c->stream.async_read_some(asio::buffer(sink), tok);
        if (rec) break;
        drained += rn;
      }
    };
    if (ec == http::error::body_limit) {  // Content-Length over the limit: known from the head
      co_await refuse_and_close(413, "Request body too large (max_request_body_size " +
                                         std::to_string(d.routes.opts.max_request_body_size) + ")");
      break;
    }
    if (ec) {
      if (!benign(ec)) co_await refuse_and_close(ec == http::error::header_limit ? 431 : 400, ec.message());
      break;
    }
    {
      const auto& h = parser.get();
      head_only.method = std::string(h.method_string());
      head_only.path = std::string(h.target().data(), h.target().size());
    }
    if (auto cl = parser.content_length(); cl && *cl > d.routes.opts.max_request_body_size) {
      co_await refuse_and_close(413, "Request body too large: " + std::to_string(*cl) + " bytes (max_request_body_size " +
                                         std::to_string(d.routes.opts.max_request_body_size) + ")");
      break;
    }
    if (auto ex = parser.get()[http::field::expect]; beast::iequals(ex, "100-continue")) {
      static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
      lowest.expires_after(kWriteTimeout);
      auto [wec, wn] = co_await asio::async_write(c->stream, asio::buffer(cont), tok);
      (void)wn;
      if (wec) break;
    }
    if (!parser.is_done()) {
      lowest.expires_after(kReadTimeout);
      auto [bec, bn] = co_await http::async_read(c->stream, buf, parser, tok);
      (void)bn;
      if (bec == http::error::body_limit) {
        co_await refuse_and_close(413, "Request body too large (max_request_body_size " +
                                           std::to_string(d.routes.opts.max_request_body_size) + ")");
        break;
      }
      if (bec) {
        if (!benign(bec)) co_await refuse_and_close(400, bec.message());
        break;
      }
    }
    const unsigned version = parser.get().version();
    const bool keep_wanted = parser.get().keep_alive();
    api_request req = to_request(parser.get(), remote);
    if (req.method == "GET" && (req.path == "/events" || req.path == "/events/") && d.hub) {
      co_await events(c, key, std::make_shared<const api_request>(std::move(req)), version);
      break;
    }
    if (req.method == "GET" && (req.path == "/ws" || req.path.starts_with("/ws/")) && d.hub) {
      co_await websocket_stream(c, key, parser.release(), std::make_shared<const api_request>(std::move(req)));
      break;
    }
    auto shared_req = std::make_shared<api_request>(std::move(req));
    auto job = submit(c->stream.get_executor(), [this, shared_req] { return routes.handle(*shared_req); });
    api_response out;
    if (job) {
      co_await job->timer.async_wait(tok);
      out = std::move(job->res);
    } else {
      routes.counters().busy++;
      if (auto k = busy_log.hit()) spdlog::warn("api: worker queue full: {} request(s) answered 503", k);
      out.status = 503;
      out.body = "{\"status\": 503, \"return\": \"The API is busy, try again\"}";
      out.headers.emplace_back("Retry-After", "1");
    }
    const bool keep = keep_wanted && n + 1 < kMaxRequestsPerConnection && !stopped.load();
    auto http_res = to_http(out, version, keep);
    lowest.expires_after(kWriteTimeout);
    auto [wec, wn] = co_await http::async_write(c->stream, http_res, tok);
    (void)wn;
    if (wec || !keep) break;
  }
  if constexpr (is_tls) {
    if (handshake_ok) {
      lowest.expires_after(std::chrono::seconds(2));
      co_await c->stream.async_shutdown(tok);
    }
  }
  boost::system::error_code ignore;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignore);
  lowest.close();
  c->keep_alive_ref.reset();
  forget(key);
  open.fetch_sub(1);
}

// /events and /ws: the token lookup reads a file (maybe on a shared file system), so it
// runs on a worker. A refusal (or a full worker queue: 503) is written here; the caller
// gets the grant or nothing.
template <class Stream>
asio::awaitable<std::optional<token_data>> api_server::impl::authorize_stream(
    std::shared_ptr<connection<Stream>> c, std::shared_ptr<const api_request> auth, unsigned version) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  auto grant = std::make_shared<std::optional<token_data>>();
  auto job = submit(c->stream.get_executor(), [this, auth, grant] {
    api_response refusal;
    *grant = routes.authorize_stream(*auth, refusal);
    return refusal;
  });
  if (job) co_await job->timer.async_wait(tok);
  if (job && *grant) co_return std::move(*grant);
  api_response out = job ? job->res : api_response{503, {}, "application/json", "{\"status\": 503}"};
  auto http_res = to_http(out, version, false);
  beast::get_lowest_layer(c->stream).expires_after(kWriteTimeout);
  co_await http::async_write(c->stream, http_res, tok);
  co_return std::nullopt;
}

template <class Stream>
asio::awaitable<void> api_server::impl::events(std::shared_ptr<connection<Stream>> c, std::uint64_t key,
                                               std::shared_ptr<const api_request> reqp, unsigned version) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  const api_request& req = *reqp;
  auto& lowest = beast::get_lowest_layer(c->stream);
  auto grant = co_await authorize_stream(c, reqp, version);
  if (!grant) co_return;
  const double expire = grant->expire;
  auto feed = std::make_shared<sse_feed>(c->stream.get_executor());
  const std::size_t qmax = d.routes.opts.sse_queue_events;
  feed->sub = d.hub->subscribe_all([feed, qmax](const std::string& tag, const value& data) {
    std::lock_guard lk(feed->mu);
    if (feed->closed || feed->overflow) return;
    if (feed->q.size() >= qmax) {
      feed->overflow = true;
    } else {
      feed->q.emplace_back(tag, data);
    }
    if (!feed->notified) {
      feed->notified = true;
      asio::post(feed->ex_, [feed] { feed->wake.cancel(); });
    }
  });
  {
    std::lock_guard lk(mu);
    feeds[key] = feed;
  }
  routes.counters().sse_clients++;
  spdlog::info("api: /events stream opened for {} from {}", grant->who.name, req.remote);
  std::string head = "HTTP/1." + std::to_string(version % 10) +
                     " 200 OK\r\nServer: sylvite\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     "Connection: keep-alive\r\nAccess-Control-Allow-Origin: *\r\nTransfer-Encoding: chunked\r\n\r\n";
  head += chunk(sse_retry);
  lowest.expires_after(kWriteTimeout);
  auto [hec, hn] = co_await asio::async_write(c->stream, asio::buffer(head), tok);
  (void)hn;
  std::string why = "client gone";
  if (!hec) {
    for (;;) {
      if (stopped.load()) {
        why = "server stopping";
        break;
      }
      std::deque<std::pair<std::string, value>> items;
      bool overflow;
      {
        std::lock_guard lk(feed->mu);
        items.swap(feed->q);
        overflow = feed->overflow;
        feed->notified = false;
      }
      if (overflow) {
        routes.counters().sse_dropped++;
        if (auto k = drop_log.hit())
          spdlog::warn("api: /events client {} dropped: it let {} events queue up ({} client(s) dropped lately)",
                       req.remote, qmax, k);
        why = "too slow";
        break;
      }
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      if (expire > 0 && now >= expire) {
        why = "token expired";
        break;
      }
      std::string out;
      if (!items.empty()) {
        std::string text;
        for (auto& [tag, data] : items) text += sse_event(tag, data);
        out = chunk(text);
        routes.counters().sse_events += items.size();
      } else {
        feed->wake.expires_after(kKeepAlive);
        auto [wec] = co_await feed->wake.async_wait(tok);
        if (wec != asio::error::operation_aborted) out = chunk(": keep-alive\n\n");  // 15 s of silence
        else continue;
      }
      lowest.expires_after(kWriteTimeout);
      auto [wec, wn] = co_await asio::async_write(c->stream, asio::buffer(out), tok);
      (void)wn;
      if (wec) break;
    }
  }
  {
    std::lock_guard lk(feed->mu);
    feed->closed = true;
  }
  d.hub->unsubscribe(feed->sub);
  routes.counters().sse_clients--;
  spdlog::info("api: /events stream of {} ended ({})", req.remote, why);
  if (why != "client gone") {
    lowest.expires_after(std::chrono::seconds(2));
    std::string end = "0\r\n\r\n";
    co_await asio::async_write(c->stream, asio::buffer(end), tok);
  }
}

// GET /ws (salt-api's WebsocketEndpoint): the token from /ws/<token>, else as /events
// takes it; upgrade; nothing is sent until the client says "websocket client ready"
// (every message it sends is answered "server received message"); then one text frame
// per bus event, "data: {json}\n\n", or with ?format_events SaltInfo's {"jobs"} /
// {"minions"} frames. The hub fills a bounded queue; a client that lets it fill, or
// that blocks a write, is dropped (its socket closed), never waited for. Beast pings
// every 15 s and drops a client that answers nothing for 30 s.
template <class Stream>
asio::awaitable<void> api_server::impl::websocket_stream(std::shared_ptr<connection<Stream>> c, std::uint64_t key,
                                                         http::request<http::string_body> hreq,
                                                         std::shared_ptr<const api_request> reqp) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  const api_request& req = *reqp;
  auto& lowest = beast::get_lowest_layer(c->stream);
  if (!websocket::is_upgrade(hreq)) {  // ws4py's handshake check comes first: 400
    api_response out = routes.refuse(req, 400, "A WebSocket upgrade is required on /ws");
    auto http_res = to_http(out, hreq.version(), false);
    lowest.expires_after(kWriteTimeout);
    co_await http::async_write(c->stream, http_res, tok);
    co_return;
  }
  // The token as authorize_stream reads it; /ws/<token> wins; ?format_events is ours.
  auto auth = std::make_shared<api_request>(req);
  if (req.path.size() > 4) auth->headers["x-auth-token"] = req.path.substr(4);
  bool format_events = false;
  {
    std::string q;
    std::string_view rest = req.query;
    while (!rest.empty()) {
      auto amp = rest.find('&');
      std::string_view part = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (part.substr(0, part.find('=')) == "format_events") {
        format_events = true;
      } else if (!part.empty()) {
        if (!q.empty()) q += '&';
        q += part;
      }
    }
    auth->query = q;
  }
  auto grant = co_await authorize_stream(c, auth, hreq.version());
  if (!grant) co_return;
  const double expire = grant->expire;
  const identity who = grant->who;
  lowest.expires_never();  // the websocket stream keeps its own timeouts
  websocket::stream<Stream&> ws(c->stream);
  websocket::stream_base::timeout to{};
  to.handshake_timeout = kReadTimeout;
  to.idle_timeout = kWsIdle;
  to.keep_alive_pings = true;
  ws.set_option(to);
  ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& r) { r.set(http::field::server, "sylvite"); }));
  ws.read_message_max(kWsMessageMax);
  {
    auto [aec] = co_await ws.async_accept(hreq, tok);
    if (aec) {
      spdlog::info("api: /ws upgrade from {} failed: {}", req.remote, aec.message());
      co_return;
    }
  }
  auto feed = std::make_shared<sse_feed>(c->stream.get_executor());
  auto st = std::make_shared<ws_state>();
  {
    std::lock_guard lk(mu);
    feeds[key] = feed;
  }
  spdlog::info("api: /ws stream opened for {} from {}{}", who.name, req.remote,
               format_events ? " (format_events)" : "");
  asio::co_spawn(c->stream.get_executor(), websocket_reader(ws, st, feed), asio::detached);
  const std::size_t qmax = d.routes.opts.sse_queue_events;
  std::weak_ptr<conn_base> weak_conn = c;
  bool subscribed = false;
  salt_info info;
  std::string why = "client gone";
  ws.text(true);
  for (;;) {
    if (stopped.load()) {
      why = "server stopping";
      break;
    }
    if (st->reader_done) break;
    bool failed = false;
    for (; st->acks > 0 && !failed; --st->acks) {
      static const std::string ack = "server received message";
      auto [wec, wn] = co_await ws.async_write(asio::buffer(ack), tok);
      (void)wn;
      failed = static_cast<bool>(wec);
    }
    if (failed) break;
    if (st->ready && !subscribed) {
      subscribed = true;
      feed->sub = d.hub->subscribe_all([feed, qmax, weak_conn](const std::string& tag, const value& data) {
        std::lock_guard lk(feed->mu);
        if (feed->closed || feed->overflow) return;
        if (feed->q.size() >= qmax) {
          // The writer is behind (maybe blocked on a client that stopped reading):
          // close the socket so its write fails now instead of holding anything.
          feed->overflow = true;
          if (auto cc = weak_conn.lock()) cc->close();
        } else {
          feed->q.emplace_back(tag, data);
        }
        if (!feed->notified) {
          feed->notified = true;
          asio::post(feed->ex_, [feed] { feed->wake.cancel(); });
        }
      });
    }
    std::deque<std::pair<std::string, value>> items;
    bool overflow;
    {
      std::lock_guard lk(feed->mu);
      items.swap(feed->q);
      overflow = feed->overflow;
      feed->notified = false;
    }
    if (overflow) break;
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (expire > 0 && now >= expire) {
      why = "token expired";
      break;
    }
    if (items.empty()) {
      feed->wake.expires_after(kKeepAlive);
      co_await feed->wake.async_wait(tok);
      continue;
    }
    for (auto& [tag, data] : items) {
      std::vector<std::string> frames;
      if (format_events) {
        auto o = info.process(tag, data);
        frames = std::move(o.frames);
        if (!o.grains_tgt.empty() && d.routes.eauth && d.routes.runner) {
          // SaltInfo runs grains.items on new minions with the stream's token.
          auto eauth = d.routes.eauth;
          auto runner = d.routes.runner;
          pool->submit([eauth, runner, who, tgt = o.grains_tgt] {
            value chunk{{"client", "local_async"}, {"tgt", tgt}, {"fun", "grains.items"}};
            if (eauth->check(who, chunk).allowed) runner->run(chunk, who.name);
          });
        }
      } else {
        frames.push_back(ws_event_frame(tag, data));
      }
      for (const auto& f : frames) {
        auto [wec, wn] = co_await ws.async_write(asio::buffer(f), tok);
        (void)wn;
        if (wec) {
          failed = true;
          break;
        }
      }
      if (failed) break;
    }
    if (failed) break;
  }
  bool overflowed;
  {
    std::lock_guard lk(feed->mu);
    feed->closed = true;
    overflowed = feed->overflow;
  }
  if (subscribed) d.hub->unsubscribe(feed->sub);
  if (overflowed) {  // its socket was closed by the hub's handler (a write may have failed first)
    why = "too slow";
    if (auto k = drop_log.hit())
      spdlog::warn("api: /ws client {} dropped: it let {} events queue up ({} client(s) dropped lately)", req.remote,
                   qmax, k);
  }
  spdlog::info("api: /ws stream of {} ended ({})", req.remote, why);
  if (why == "token expired" || why == "server stopping") {
    auto [cec] = co_await ws.async_close(websocket::close_code::going_away, tok);
    (void)cec;
  }
  // End the reader before `ws` goes away: shut the socket, wait for it to notice.
  boost::system::error_code ignore;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignore);
  lowest.socket().close(ignore);
  while (!st->reader_done) {
    feed->wake.expires_after(std::chrono::milliseconds(200));
    co_await feed->wake.async_wait(tok);
  }
}

template <class WS>
asio::awaitable<void> api_server::impl::websocket_reader(WS& ws, std::shared_ptr<ws_state> st,
                                                         std::shared_ptr<sse_feed> feed) {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  beast::flat_buffer b;
  for (;;) {
    auto [ec, n] = co_await ws.async_read(b, tok);
    (void)n;
    if (ec) break;
    if (beast::buffers_to_string(b.data()) == "websocket client ready") st->ready = true;
    b.consume(b.size());
    st->acks++;
    feed->wake.cancel();
  }
  st->reader_done = true;
  feed->wake.cancel();
}

asio::awaitable<void> api_server::impl::accept_loop() {
  constexpr auto tok = asio::as_tuple(asio::use_awaitable);
  auto self = shared_from_this();
  while (!stopped.load()) {
    auto [ec, sock] = co_await acceptor.async_accept(asio::make_strand(io), tok);
    if (ec) {
      if (ec == asio::error::operation_aborted || stopped.load() || !acceptor.is_open()) co_return;
      spdlog::warn("api: accept failed: {}", ec.message());
      asio::steady_timer t(io, std::chrono::milliseconds(100));
      co_await t.async_wait(tok);
      continue;
    }
    if (open.load() >= d.max_connections) {
      boost::system::error_code ignore;
      sock.close(ignore);
      continue;
    }
    boost::system::error_code rec;
    auto rep = sock.remote_endpoint(rec);
    std::string remote = rec ? std::string("?") : rep.address().to_string();
    if (remote.starts_with("::ffff:")) remote = remote.substr(7);
    boost::system::error_code ignore;
    sock.set_option(tcp::no_delay(true), ignore);
    std::uint64_t key;
    {
      std::lock_guard lk(mu);
      key = next_key++;
    }
    open.fetch_add(1);
    if (tls) {
      using S = beast::ssl_stream<beast::tcp_stream>;
      auto c = std::make_shared<connection<S>>(std::move(sock), *tls);
      c->keep_alive_ref = c;
      {
        std::lock_guard lk(mu);
        conns[key] = c;
      }
      asio::co_spawn(c->stream.get_executor(), session<S>(c, key, std::move(remote)), asio::detached);
    } else {
      using S = beast::tcp_stream;
      auto c = std::make_shared<connection<S>>(std::move(sock));
      c->keep_alive_ref = c;
      {
        std::lock_guard lk(mu);
        conns[key] = c;
      }
      asio::co_spawn(c->stream.get_executor(), session<S>(c, key, std::move(remote)), asio::detached);
    }
  }
}

api_server::api_server(api_server_deps d) : impl_(std::make_shared<impl>(std::move(d))) {}

api_server::~api_server() { stop(); }

api_routes& api_server::routes() { return impl_->routes; }

std::uint16_t api_server::bound_port() const { return impl_->port.load(); }

std::string api_server::start() {
  auto& s = *impl_;
  if (s.started.exchange(true)) return "already started";
  const auto& o = s.d.routes.opts;
  if (!o.disable_ssl) {
    s.tls = std::make_unique<ssl::context>(ssl::context::tls_server);
    boost::system::error_code ec;
    s.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                           ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                       ec);
    s.tls->use_certificate_chain_file(o.ssl_crt, ec);
    if (ec) return "rest_cherrypy: ssl_crt " + o.ssl_crt + ": " + ec.message();
    s.tls->use_private_key_file(o.ssl_key, ssl::context::pem, ec);
    if (ec) return "rest_cherrypy: ssl_key " + o.ssl_key + ": " + ec.message();
  }
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  auto results = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return "rest_cherrypy: host " + o.host + ": " + (ec ? ec.message() : "not found");
  const tcp::endpoint where = results.begin()->endpoint();
  s.acceptor.open(where.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(where, ec);
  if (!ec) s.acceptor.listen(std::max(1, o.socket_queue_size), ec);
  if (ec) {
    boost::system::error_code ignore;
    s.acceptor.close(ignore);
    return "rest_cherrypy: cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message();
  }
  s.port.store(s.acceptor.local_endpoint().port());
  const std::size_t workers = std::clamp<std::size_t>(static_cast<std::size_t>(o.thread_pool), 1, kMaxWorkers);
  s.pool = std::make_unique<worker_pool>(workers, kWorkerQueue);
  s.guard.emplace(s.io.get_executor());
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  for (std::size_t i = 0; i < std::max<std::size_t>(1, s.d.io_threads); ++i)
    s.threads.emplace_back([&s] {
      for (;;) {
        try {
          s.io.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("api: io thread: {}", e.what());
        }
      }
    });
  return {};
}

void api_server::stop() {
  auto self = impl_;
  if (!self->started.load() || self->stopped.exchange(true)) return;
  if (self->d.routes.runner) self->d.routes.runner->stop();
  asio::post(self->io, [self] {
    boost::system::error_code ignore;
    self->acceptor.close(ignore);
  });
  std::vector<std::shared_ptr<conn_base>> live;
  std::vector<std::shared_ptr<sse_feed>> feeds;
  {
    std::lock_guard lk(self->mu);
    for (auto& [k, w] : self->conns)
      if (auto c = w.lock()) live.push_back(std::move(c));
    for (auto& [k, w] : self->feeds)
      if (auto f = w.lock()) feeds.push_back(std::move(f));
  }
  for (auto& f : feeds) {
    {
      std::lock_guard lk(f->mu);
      f->closed = true;
    }
    if (self->d.hub) self->d.hub->unsubscribe(f->sub);
    asio::post(f->ex_, [f] { f->wake.cancel(); });
  }
  for (auto& c : live) c->close();
  if (self->pool) self->pool->stop();
  self->guard.reset();
  // Give the sessions a moment to finish their writes, then stop the loop.
  const auto deadline = steady::now() + std::chrono::seconds(2);
  while (self->open.load() > 0 && steady::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  self->io.stop();
  for (auto& t : self->threads)
    if (t.joinable()) t.join();
  self->threads.clear();
}

}  // namespace sylvite::master::api
