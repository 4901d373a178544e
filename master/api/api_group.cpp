// sylvite::master::api group (api_group.hpp): signing, assignment, the member client
// (Boost.Beast over its own io_context per call, OpenSSL for https members), and the
// group-wide lowstate dispatch.
#include "master/api/api_group.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <ctime>
#include <thread>

#include "core/crypto/rsa.hpp"
#include "master/api/api_http.hpp"
#include "master/cli/batch.hpp"
#include "master/job_cache.hpp"

namespace sylvite::master::api {

using wire::value;
using steady = std::chrono::steady_clock;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

// ---- signing -------------------------------------------------------------------------

std::string group_signature(std::string_view secret, std::string_view group_id, std::string_view method,
                            std::string_view path, std::int64_t time, std::string_view nonce, std::string_view body) {
  std::string msg;
  msg.reserve(body.size() + 128);
  msg.append(method).append("\n").append(path).append("\n").append(std::to_string(time)).append("\n");
  msg.append(nonce).append("\n").append(group_id).append("\n").append(body);
  return crypto::hex(crypto::hmac_sha256(secret, msg));
}

const char* group_auth_text(group_auth a) {
  switch (a) {
    case group_auth::ok: return "ok";
    case group_auth::missing: return "unsigned group call";
    case group_auth::malformed: return "malformed group signature headers";
    case group_auth::stale: return "stale group call (time outside the replay window)";
    case group_auth::bad_signature: return "bad group signature";
    case group_auth::replayed: return "replayed group call (nonce seen)";
  }
  return "?";
}

group_verifier::group_verifier(std::string secret, std::string group_id)
    : secret_(std::move(secret)), group_id_(std::move(group_id)) {}

group_auth group_verifier::verify(std::string_view method, std::string_view path, const std::string* time,
                                  const std::string* nonce, const std::string* signature, std::string_view body,
                                  std::int64_t now) {
  if (!time || !nonce || !signature) return group_auth::missing;
  if (time->empty() || time->size() > 12 || nonce->size() < 16 || nonce->size() > 64 || signature->size() != 64)
    return group_auth::malformed;
  std::int64_t t = 0;
  for (char c : *time) {
    if (c < '0' || c > '9') return group_auth::malformed;
    t = t * 10 + (c - '0');
  }
  for (char c : *nonce)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return group_auth::malformed;
  if (t < now - kReplayWindow || t > now + kReplayWindow) return group_auth::stale;
  const std::string want = group_signature(secret_, group_id_, method, path, t, *nonce, body);
  if (!crypto::constant_time_equal(want, *signature)) return group_auth::bad_signature;
  std::lock_guard lk(mu_);
  if (now - last_prune_ >= 5 || seen_.size() >= kMaxNonces) {
    for (auto it = seen_.begin(); it != seen_.end();)
      it = it->second < now - kReplayWindow - 1 ? seen_.erase(it) : std::next(it);
    last_prune_ = now;
  }
  if (seen_.size() >= kMaxNonces) return group_auth::replayed;
  if (!seen_.emplace(*nonce, t).second) return group_auth::replayed;
  return group_auth::ok;
}

// ---- assignment ----------------------------------------------------------------------

std::vector<std::vector<std::string>> assign_minions(const std::vector<member_view>& views, std::size_t self) {
  std::vector<std::vector<std::string>> out(views.size());
  std::vector<std::size_t> order;
  if (self < views.size()) order.push_back(self);
  for (std::size_t i = 0; i < views.size(); ++i)
    if (i != self) order.push_back(i);
  std::set<std::string> all;
  for (const auto& v : views)
    if (v.reachable) all.insert(v.matched.begin(), v.matched.end());
  for (const auto& id : all) {
    std::optional<std::size_t> pick;
    for (auto i : order)
      if (views[i].reachable && views[i].matched.contains(id) && views[i].connected.contains(id)) {
        pick = i;
        break;
      }
    if (!pick)
      for (auto i : order)
        if (views[i].reachable && views[i].matched.contains(id)) {
          pick = i;
          break;
        }
    if (pick) out[*pick].push_back(id);  // sorted: `all` is
  }
  return out;
}

// ---- URLs ----------------------------------------------------------------------------

std::optional<group_url> parse_group_url(const std::string& url) {
  group_url u;
  std::string rest;
  if (url.starts_with("https://")) {
    u.tls = true;
    rest = url.substr(8);
  } else if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else {
    return std::nullopt;
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find('/') != std::string::npos) return std::nullopt;
  std::size_t colon;
  if (rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') return std::nullopt;
    u.host = rest.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    u.host = rest.substr(0, colon);
  }
  u.port = rest.substr(colon + 1);
  if (u.host.empty() || u.port.empty() || u.port.size() > 5) return std::nullopt;
  for (char c : u.port)
    if (c < '0' || c > '9') return std::nullopt;
  if (std::stoi(u.port) < 1 || std::stoi(u.port) > 65535) return std::nullopt;
  return u;
}

// ---- helpers -------------------------------------------------------------------------

namespace {

std::string text_of(const value* v, std::string dflt = {}) {
  if (!v || v->is_null()) return dflt;
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_number()) return v->dump();
  return dflt;
}

std::set<std::string> id_set(const value* v) {
  std::set<std::string> out;
  if (v && v->is_array())
    for (const auto& e : *v)
      if (auto t = wire::as_text(e)) out.emplace(*t);
  return out;
}

value to_array(const std::vector<std::string>& v) {
  value a = value::array();
  for (const auto& s : v) a.push_back(s);
  return a;
}

// Deep union of two answers: maps merge key by key, lists keep each element once (in
// first-seen order), anything else: the first answer's value stays.
void deep_union(value& into, const value& from) {
  if (into.is_object() && from.is_object()) {
    for (auto it = from.begin(); it != from.end(); ++it) {
      if (!into.contains(it.key())) into[it.key()] = it.value();
      else deep_union(into[it.key()], it.value());
    }
    return;
  }
  if (into.is_array() && from.is_array()) {
    for (const auto& e : from)
      if (std::find(into.begin(), into.end(), e) == into.end()) into.push_back(e);
    return;
  }
  if (into.is_null()) into = from;
}

void sort_lists(value& v) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) sort_lists(it.value());
  } else if (v.is_array()) {
    bool texts = std::all_of(v.begin(), v.end(), [](const value& e) { return e.is_string(); });
    if (texts) std::sort(v.begin(), v.end());
  }
}

std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }

// Runs the io_context until `done` or the deadline; at the deadline closes the socket (the
// pending operation completes with an error) and drains the handlers.
template <class Close>
bool run_step(asio::io_context& ioc, steady::time_point deadline, const bool& done, Close close) {
  ioc.restart();
  ioc.run_until(deadline);
  if (done) return true;
  close();
  ioc.restart();
  ioc.run();
  return false;
}

// The runners whose answer is a view of this master's minions or job cache: run on every
// member and merged.
bool merged_runner(const std::string& fun) {
  return fun == "manage.present" || fun == "manage.up" || fun == "manage.status" || fun == "manage.down" ||
         fun == "jobs.list_jobs" || fun == "jobs.list_job" || fun == "jobs.lookup_jid" || fun == "sylvite.minions";
}

// The key wheel functions applied on / read from every member (key.gen_accept makes a
// new key pair: it stays on the receiving member, as do the master's own key functions).
bool merged_wheel(const std::string& fun) {
  return fun.starts_with("key.") && fun != "key.gen" && fun != "key.gen_accept" && fun != "key.finger_master" &&
         fun != "key.master_key_str";
}

}  // namespace

// ---- the group -----------------------------------------------------------------------

master_group::master_group(group_services s)
    : s_(std::move(s)), g_(*s_.cfg->master_group), verifier_(g_.secret, g_.id) {}

std::unique_ptr<master_group> master_group::create(group_services s, std::string& error) {
  if (!s.cfg || !s.cfg->master_group || !s.local) {
    error = "master_group: not configured";
    return nullptr;
  }
  std::unique_ptr<master_group> g(new master_group(std::move(s)));
  const auto& gc = g->g_;
  bool any_tls = false;
  for (const auto& url : gc.masters) {
    auto u = parse_group_url(url);
    if (!u) {
      error = "master_group.masters: not an http[s]://host:port URL: " + url;
      return nullptr;
    }
    any_tls = any_tls || u->tls;
    g->members_.push_back(member{url, *u, false});
  }
  // Which member is this master: `self`, else the one URL on the API's port (several on
  // that port: the one whose host is one of this machine's names).
  std::vector<std::size_t> cand;
  if (!gc.self.empty()) {
    for (std::size_t i = 0; i < g->members_.size(); ++i)
      if (g->members_[i].url == gc.self) cand.push_back(i);
  } else {
    for (std::size_t i = 0; i < g->members_.size(); ++i)
      if (g->members_[i].where.port == std::to_string(g->s_.api_port)) cand.push_back(i);
    if (cand.size() > 1) {
      std::set<std::string> names = {"127.0.0.1", "localhost", "::1", g->s_.cfg->id};
      char hn[256] = {};
      if (::gethostname(hn, sizeof hn - 1) == 0) names.insert(hn);
      if (auto* rc = wire::find(g->s_.cfg->raw, "rest_cherrypy"))
        if (auto h = wire::get_text(*rc, "host")) names.emplace(*h);
      if (auto h = wire::get_text(g->s_.cfg->raw, "interface")) names.emplace(*h);
      std::vector<std::size_t> by_host;
      for (auto i : cand)
        if (names.contains(g->members_[i].where.host)) by_host.push_back(i);
      cand = by_host;
    }
  }
  if (cand.size() != 1) {
    error = "master_group: cannot tell which of masters is this master (rest_cherrypy port " +
            std::to_string(g->s_.api_port) + "): set master_group.self to this master's URL";
    return nullptr;
  }
  g->self_ = cand[0];
  g->members_[g->self_].self = true;
  if (any_tls) {
    try {
      auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
      ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
      ctx->set_verify_mode(ssl::verify_peer);
      boost::system::error_code ec;
      if (gc.ca_file) ctx->load_verify_file(gc.ca_file->string(), ec);
      else ctx->set_default_verify_paths(ec);
      if (ec) {
        error = "master_group.ca_file: cannot load " + (gc.ca_file ? gc.ca_file->string() : std::string("the system CA roots")) +
                ": " + ec.message();
        return nullptr;
      }
      g->tls_ = ctx;
    } catch (const std::exception& e) {
      error = std::string("master_group: TLS client context: ") + e.what();
      return nullptr;
    }
  }
  return g;
}

master_group::answer master_group::post(const member& m, const std::string& path, const value& body,
                                        std::chrono::seconds total) {
  answer a;
  const std::string payload = serialize(body, media::json);
  const std::int64_t t = now_s();
  const std::string nonce = crypto::hex(crypto::random_bytes(16));
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, m.where.host + ":" + m.where.port);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "application/json");
  req.set(kGroupTimeHeader, std::to_string(t));
  req.set(kGroupNonceHeader, nonce);
  req.set(kGroupSignatureHeader, group_signature(g_.secret, g_.id, "POST", path, t, nonce, payload));
  req.body() = payload;
  req.prepare_payload();

  const auto start = steady::now();
  const auto connect_deadline = start + std::chrono::seconds(g_.timeout);
  const auto deadline = start + std::chrono::seconds(g_.timeout) + total;
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    std::optional<beast::tcp_stream> plain;
    std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
    if (m.where.tls) secure.emplace(ioc, *std::static_pointer_cast<ssl::context>(tls_));
    else plain.emplace(ioc);
    beast::tcp_stream& low = secure ? beast::get_lowest_layer(*secure) : *plain;
    auto close = [&] {
      resolver.cancel();
      beast::error_code ignored;
      low.socket().close(ignored);
    };
    beast::error_code ec;
    bool done = false;
    tcp::resolver::results_type eps;
    resolver.async_resolve(m.where.host, m.where.port, [&](beast::error_code e, tcp::resolver::results_type r) {
      ec = e;
      eps = std::move(r);
      done = true;
    });
    if (!run_step(ioc, connect_deadline, done, close) || ec) {
      a.error = ec ? "resolve: " + ec.message() : "resolve: timed out";
      return a;
    }
    done = false;
    low.async_connect(eps, [&](beast::error_code e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    if (!run_step(ioc, connect_deadline, done, close) || ec) {
      a.error = ec ? "connect: " + ec.message() : "connect: timed out";
      return a;
    }
    if (secure) {
      if (!SSL_set_tlsext_host_name(secure->native_handle(), m.where.host.c_str())) {
        a.error = "tls: cannot set SNI";
        return a;
      }
      secure->set_verify_callback(ssl::host_name_verification(m.where.host));
      done = false;
      secure->async_handshake(ssl::stream_base::client, [&](beast::error_code e) {
        ec = e;
        done = true;
      });
      if (!run_step(ioc, connect_deadline, done, close) || ec) {
        a.error = ec ? "tls handshake: " + ec.message() : "tls handshake: timed out";
        return a;
      }
    }
    done = false;
    auto on_write = [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    };
    if (secure) http::async_write(*secure, req, on_write);
    else http::async_write(*plain, req, on_write);
    if (!run_step(ioc, deadline, done, close) || ec) {
      a.error = ec ? "write: " + ec.message() : "write: timed out";
      return a;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::uint64_t{512} << 20);
    done = false;
    auto on_read = [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    };
    if (secure) http::async_read(*secure, buf, parser, on_read);
    else http::async_read(*plain, buf, parser, on_read);
    if (!run_step(ioc, deadline, done, close) || ec) {
      a.error = ec ? "read: " + ec.message() : "read: timed out";
      return a;
    }
    close();
    auto& res = parser.get();
    if (res.result_int() != 200) {
      a.error = "HTTP " + std::to_string(res.result_int()) + ": " + res.body().substr(0, 200);
      return a;
    }
    a.body = value::parse(res.body(), nullptr, false);
    if (a.body.is_discarded()) {
      a.body = nullptr;
      a.error = "the answer is not JSON";
      return a;
    }
    a.ok = true;
  } catch (const std::exception& e) {
    a.error = e.what();
  }
  return a;
}

std::vector<master_group::answer> master_group::fan_out(const std::string& path,
                                                        const std::vector<std::optional<value>>& bodies,
                                                        std::chrono::seconds total,
                                                        const std::function<value(const value&)>& local_fn) {
  std::vector<answer> out(members_.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (i == self_ || !bodies[i]) continue;
    threads.emplace_back([this, i, &out, &path, &bodies, total] { out[i] = post(members_[i], path, *bodies[i], total); });
  }
  if (self_ < bodies.size() && bodies[self_]) {
    try {
      out[self_].body = local_fn(*bodies[self_]);
      out[self_].ok = true;
    } catch (const std::exception& e) {
      out[self_].error = e.what();
    }
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (bodies[i] && !out[i].ok) spdlog::warn("api group {}: {} {}: {}", g_.id, members_[i].url, path, out[i].error);
  return out;
}

value master_group::local_view(const value& req) const {
  value v = {{"id", s_.cfg->id}, {"group", g_.id}};
  v["connected"] = to_array(s_.connected_ids ? s_.connected_ids() : std::vector<std::string>{});
  v["accepted"] = to_array(s_.accepted_ids ? s_.accepted_ids() : std::vector<std::string>{});
  if (const value* tgt = wire::find(req, "tgt"); tgt && !tgt->is_null() && s_.check_minions)
    v["matched"] = to_array(s_.check_minions(*tgt, text_of(wire::find(req, "tgt_type"), "glob")));
  return v;
}

value master_group::local_run(const value& req) const {
  const value* chunk = wire::find(req, "chunk");
  auto r = s_.local->run(chunk ? *chunk : value(nullptr), text_of(wire::find(req, "user"), "root"));
  return value{{"status", r.status}, {"error", r.error}, {"ret", r.ret}, {"many", r.many}};
}

api_response master_group::handle_internal(const api_request& req) {
  api_response r;
  auto fail = [&](unsigned st, const std::string& why) {
    r.status = st;
    r.body = serialize(value{{"status", st}, {"return", why}}, media::json);
    return r;
  };
  const bool view = req.path == "/group/v1/view";
  const bool run = req.path == "/group/v1/run";
  if (!view && !run) return fail(404, "The path '" + req.path + "' was not found.");
  if (req.method != "POST") return fail(405, "Method not allowed");
  auto a = verifier_.verify(req.method, req.path, req.header(kGroupTimeHeader), req.header(kGroupNonceHeader),
                            req.header(kGroupSignatureHeader), req.body, now_s());
  if (a != group_auth::ok) return fail(401, std::string("group ") + g_.id + ": " + group_auth_text(a));
  value body = value::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return fail(400, "group call: the body must be a JSON map");
  value out = view ? local_view(body) : local_run(body);
  r.status = 200;
  r.body = serialize(out, media::json);
  return r;
}

chunk_result master_group::run(const value& chunk, const std::string& user) {
  const std::string client = text_of(wire::find(chunk, "client"));
  const std::string fun = text_of(wire::find(chunk, "fun"));
  if (client == "local" || client == "local_async") return run_local_clients(chunk, user);
  if (client == "local_batch") return run_batch(chunk, user);
  if (client == "runner" && fun == "sylvite.minions") return group_minions(chunk, user);
  if (client == "runner" && merged_runner(fun)) return run_everywhere(chunk, user);
  if ((client == "wheel" || client == "wheel_async") && merged_wheel(fun)) return run_everywhere(chunk, user);
  return s_.local->run(chunk, user);  // runners and the rest: once, here
}

chunk_result master_group::run_local_clients(const value& chunk, const std::string& user) {
  const bool wait = text_of(wire::find(chunk, "client")) == "local";
  const value* tgt = wire::find(chunk, "tgt");
  if (!tgt || tgt->is_null() || !wire::find(chunk, "fun")) return s_.local->run(chunk, user);  // its 400
  chunk_result r;
  value vq = {{"tgt", *tgt},
              {"tgt_type", text_of(wire::find(chunk, "tgt_type"), text_of(wire::find(chunk, "expr_form"), "glob"))}};
  std::vector<std::optional<value>> vb(members_.size(), vq);
  auto views = fan_out("/group/v1/view", vb, std::chrono::seconds(0), [this](const value& q) { return local_view(q); });
  std::vector<member_view> mv(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!views[i].ok) {
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    mv[i].reachable = true;
    mv[i].matched = id_set(wire::find(views[i].body, "matched"));
    mv[i].connected = id_set(wire::find(views[i].body, "connected"));
  }
  auto shares = assign_minions(mv, self_);
  std::string jid = text_of(wire::find(chunk, "jid"));
  if (jid.empty()) jid = new_jid();
  std::vector<std::optional<value>> rb(members_.size());
  bool any = false;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (shares[i].empty()) continue;
    value c = chunk;
    c["tgt"] = to_array(shares[i]);
    c["tgt_type"] = "list";
    c.erase("expr_form");
    c["jid"] = jid;
    rb[i] = value{{"chunk", c}, {"user", user}};
    any = true;
  }
  r.ret = value::object();
  if (!any) return r;  // Salt: no minion matched -> {}
  const int timeout = [&] {
    const value* t = wire::find(chunk, "timeout");
    if (t && t->is_number()) return std::max(1, t->get<int>());
    if (t)
      if (auto s = wire::as_text(*t)) try {
          return std::max(1, std::stoi(std::string(*s)));
        } catch (const std::exception&) {
        }
    return s_.cfg->timeout > 0 ? s_.cfg->timeout : 5;
  }();
  const int gather = std::max(1, s_.cfg->gather_job_timeout);
  const auto total = wait ? std::chrono::seconds(timeout * 4 + gather * 8 + 30) : std::chrono::seconds(30);
  auto runs = fan_out("/group/v1/run", rb, total, [this](const value& q) { return local_run(q); });
  value minions = value::array();
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!rb[i]) continue;
    if (!runs[i].ok) {
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    const value& b = runs[i].body;
    const int st = wire::find(b, "status") && (*wire::find(b, "status")).is_number() ? b["status"].get<int>() : 500;
    if (st != 200) {
      if (i == self_) {
        r.status = st;
        r.error = text_of(wire::find(b, "error"));
        return r;
      }
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    const value* ret = wire::find(b, "ret");
    if (!ret || !ret->is_object()) continue;
    if (wait) {
      for (auto it = ret->begin(); it != ret->end(); ++it) r.ret[it.key()] = it.value();
    } else if (const value* ms = wire::find(*ret, "minions"); ms && ms->is_array()) {
      for (const auto& m : *ms) minions.push_back(m);
    }
  }
  if (!wait && !minions.empty()) {
    std::sort(minions.begin(), minions.end());
    r.ret = value{{"jid", jid}, {"minions", minions}};
  }
  return r;
}

chunk_result master_group::run_batch(const value& chunk, const std::string& user) {
  chunk_result r;
  r.many = true;
  r.ret = value::array();
  const std::string spec = text_of(wire::find(chunk, "batch"), "10%");
  value ping = chunk;
  ping["client"] = "local";
  ping["fun"] = "test.ping";
  ping["arg"] = value::array();
  ping.erase("kwarg");
  ping.erase("jid");
  auto gathered = run_local_clients(ping, user);
  if (gathered.status != 200) return gathered;
  r.unreachable = gathered.unreachable;
  std::vector<std::string> up;
  for (auto it = gathered.ret.begin(); it != gathered.ret.end(); ++it) up.push_back(it.key());
  std::sort(up.begin(), up.end());
  // The batches as the local client cuts them (cli::batch_windows, as api_lowstate).
  auto windows = cli::batch_windows(spec, up);
  if (!windows) {
    r.status = 400;
    r.error = "Invalid batch data sent: " + spec;
    return r;
  }
  for (const auto& window : *windows) {
    value c = chunk;
    c["client"] = "local";
    c["tgt"] = to_array(window);
    c["tgt_type"] = "list";
    c.erase("expr_form");
    c.erase("jid");
    auto part = run_local_clients(c, user);
    if (part.status != 200) return part;
    for (auto& u : part.unreachable)
      if (std::find(r.unreachable.begin(), r.unreachable.end(), u) == r.unreachable.end()) r.unreachable.push_back(u);
    for (auto it = part.ret.begin(); it != part.ret.end(); ++it) r.ret.push_back(value{{it.key(), it.value()}});
  }
  return r;
}

chunk_result master_group::run_everywhere(const value& chunk, const std::string& user) {
  chunk_result r;
  const std::string client = text_of(wire::find(chunk, "client"));
  const std::string fun = text_of(wire::find(chunk, "fun"));
  std::vector<std::optional<value>> rb(members_.size(), value{{"chunk", chunk}, {"user", user}});
  // Quick calls (key files, job cache, presence): a member gets `timeout` to answer.
  auto runs = fan_out("/group/v1/run", rb, std::chrono::seconds(0), [this](const value& q) { return local_run(q); });
  // This member's answer first (its shape, its errors), then the others' merged in.
  const value& mine = runs[self_].body;
  const int st = wire::find(mine, "status") && mine["status"].is_number() ? mine["status"].get<int>() : 500;
  if (!runs[self_].ok || st != 200) {
    r.status = runs[self_].ok ? st : 500;
    r.error = runs[self_].ok ? text_of(wire::find(mine, "error")) : runs[self_].error;
    return r;
  }
  r.ret = wire::find(mine, "ret") ? mine["ret"] : value(nullptr);
  r.many = wire::find(mine, "many") && mine["many"].is_boolean() && mine["many"].get<bool>();
  const bool is_wheel = client == "wheel";
  const bool is_async = client == "wheel_async";
  bool success = true;
  auto wheel_ret = [](value& w) -> value* {
    if (value* d = w.is_object() && w.contains("data") ? &w["data"] : nullptr)
      if (d->is_object() && d->contains("return")) return &(*d)["return"];
    return nullptr;
  };
  auto wheel_ok = [](const value& w) {
    const value* d = wire::find(w, "data");
    const value* s = d ? wire::find(*d, "success") : nullptr;
    return !s || !s->is_boolean() || s->get<bool>();
  };
  if (is_wheel) success = wheel_ok(r.ret);
  // jobs.list_job of a jid this member does not know answers an Error map: the members
  // that know it win.
  auto no_job = [&](const value& v) { return fun == "jobs.list_job" && v.is_object() && v.contains("Error"); };
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (i == self_) continue;
    if (!runs[i].ok) {
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    const value& b = runs[i].body;
    const int s = wire::find(b, "status") && b["status"].is_number() ? b["status"].get<int>() : 500;
    if (s != 200 || !wire::find(b, "ret")) {
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    if (is_async) continue;  // {tag, jid} of this member
    value other = b["ret"];
    if (is_wheel) {
      success = success && wheel_ok(other);
      value* into = wheel_ret(r.ret);
      value* from = wheel_ret(other);
      if (into && from) deep_union(*into, *from);
      continue;
    }
    if (no_job(r.ret) && !no_job(other)) {
      value keep = other;
      r.ret = std::move(keep);
      continue;
    }
    if (no_job(other)) continue;
    deep_union(r.ret, other);
  }
  if (is_wheel) {
    if (value* into = wheel_ret(r.ret)) sort_lists(*into);
    if (r.ret.is_object() && r.ret.contains("data") && r.ret["data"].is_object()) r.ret["data"]["success"] = success;
  } else if (fun.starts_with("manage.")) {
    sort_lists(r.ret);
    // manage.status: a minion up on any member is up.
    if (r.ret.is_object() && r.ret.contains("up") && r.ret.contains("down") && r.ret["down"].is_array()) {
      auto up = id_set(&r.ret["up"]);
      value down = value::array();
      for (const auto& d : r.ret["down"])
        if (auto t = wire::as_text(d); !t || !up.contains(std::string(*t))) down.push_back(d);
      r.ret["down"] = down;
    }
  } else if (fun == "jobs.list_job" && r.ret.is_object() && r.ret.contains("Minions")) {
    sort_lists(r.ret["Minions"]);
  }
  return r;
}

chunk_result master_group::group_minions(const value& chunk, const std::string& user) {
  chunk_result r;
  std::vector<std::optional<value>> vb(members_.size(), value::object());
  auto views = fan_out("/group/v1/view", vb, std::chrono::seconds(0), [this](const value& q) { return local_view(q); });
  std::vector<std::optional<value>> rb(members_.size(), value{{"chunk", chunk}, {"user", user}});
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (!views[i].ok) rb[i].reset();  // not asked twice: one timeout per dead member
  auto runs = fan_out("/group/v1/run", rb, std::chrono::seconds(0), [this](const value& q) { return local_run(q); });
  value out = value::object();
  auto entry = [&](const std::string& id) -> value& {
    if (!out.contains(id))
      out[id] = value{{"key", "accepted"}, {"connected", false}, {"master", nullptr}, {"masters", value::array()},
                      {"last_seen", nullptr}};
    return out[id];
  };
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!views[i].ok) {
      r.unreachable.push_back(members_[i].url);
      continue;
    }
    const value& v = views[i].body;
    const std::string name = text_of(wire::find(v, "id"), members_[i].url);
    for (const auto& id : id_set(wire::find(v, "accepted"))) (void)entry(id);
    for (const auto& id : id_set(wire::find(v, "connected"))) {
      value& e = entry(id);
      e["connected"] = true;
      e["masters"].push_back(name);
      if (e["master"].is_null()) e["master"] = name;
    }
    // The member's own sylvite.minions answer (when it has that runner): key states
    // beyond accepted and last_seen (the latest of all members wins).
    if (!runs[i].ok) continue;
    const value& b = runs[i].body;
    const value* ret = wire::find(b, "ret");
    if (!ret || !ret->is_object() || !wire::find(b, "status") || b["status"] != 200) continue;
    for (auto it = ret->begin(); it != ret->end(); ++it) {
      if (!it.value().is_object()) continue;
      const bool fresh = !out.contains(it.key());
      value& e = entry(it.key());
      if (const value* k = wire::find(it.value(), "key"); k && k->is_string() && (fresh || e["key"] != "accepted"))
        e["key"] = *k;
      if (const value* ls = wire::find(it.value(), "last_seen"); ls && !ls->is_null())
        if (e["last_seen"].is_null() || (ls->is_number() && e["last_seen"].is_number() && *ls > e["last_seen"]) ||
            (ls->is_string() && e["last_seen"].is_string() && *ls > e["last_seen"]))
          e["last_seen"] = *ls;
      for (auto f = it.value().begin(); f != it.value().end(); ++f)
        if (!e.contains(f.key())) e[f.key()] = f.value();
    }
  }
  r.ret = std::move(out);
  return r;
}

}  // namespace sylvite::master::api
