// sylvite::master::api routes (api_routes.hpp). Salt behaviours kept on purpose:
//   - the session id IS the Salt eauth token (salt-api keeps a CherryPy session that maps
//     to one): the same hex string works as X-Auth-Token, as the session_id cookie, as a
//     lowstate `token`, and on every master sharing token_dir;
//   - lowstate chunks run one after the other; a refused chunk ends the request (the
//     chunks before it have run, as in salt-api's generator);
//   - netapi_enable_clients (master option, Salt's default []) must list a client before
//     it can be used: "Client disabled: ..." (400);
//   - /jobs/<jid> builds "return" from the Result of jobs.list_job, as Jobs.GET does.
// ACL refusals are 401 as in salt-api (the reason is in the body and the log).
// Differences (docs/operations.md): an unsupported Content-Type is 415 (salt-api: 500); CORS answers "*" without credentials (salt-api
// reflects any Origin with Allow-Credentials, which lets any site use a browser's
// session cookie); /events also takes token / salt_token in the query (3008.5 refuses
// query parameters there).
#include "master/api/api_routes.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace sylvite::master::api {

using wire::value;

struct api_routes::context {
  media m = media::json;
  std::vector<std::string> unreachable;  // group members that did not answer
};

namespace {

std::string http_date(double epoch) {
  std::time_t t = static_cast<std::time_t>(epoch);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

// "content-type" -> "Content-Type" (CherryPy's header names in the webhook's event).
std::string title_case(const std::string& n) {
  std::string out = n;
  bool up = true;
  for (auto& c : out) {
    c = up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
           : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    up = c == '-';
  }
  return out;
}

std::string text_of(const value* v) {
  if (!v || v->is_null()) return {};
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_number()) return v->dump();
  return {};
}

bool starts_with_segment(const std::string& path, const std::string& base) {
  return path == base || (path.size() > base.size() && path.starts_with(base) && path[base.size()] == '/');
}

}  // namespace

api_routes::api_routes(api_routes_deps d) : d_(std::move(d)) {}

void api_routes::log_refusal(const api_request& req, unsigned status, const std::string& why) {
  counters_.refused++;
  // One line per refusal, up to kRefusalLines a second; beyond that (a flood) one line
  // per second says how many went unlogged.
  constexpr std::uint64_t kRefusalLines = 50;
  const auto sec = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  std::uint64_t suppressed = 0;
  bool log_it = false;
  {
    std::lock_guard lk(log_mu_);
    if (sec != log_second_) {
      suppressed = log_suppressed_;
      log_suppressed_ = 0;
      log_count_ = 0;
      log_second_ = sec;
    }
    log_it = ++log_count_ <= kRefusalLines;
    if (!log_it) ++log_suppressed_;
  }
  if (suppressed) spdlog::warn("api: {} more refusal(s) were not logged (more than {} a second)", suppressed, kRefusalLines);
  if (log_it) spdlog::warn("api: {} {} from {} refused: {} {}", req.method, req.path, req.remote, status, why);
}

api_response api_routes::refuse(const api_request& req, unsigned status, const std::string& why, media m) {
  log_refusal(req, status, why);
  api_response r;
  r.status = status;
  r.content_type = std::string(content_type_of(m));
  r.body = serialize(value{{"status", status}, {"return", why}}, m);
  return r;
}

api_response api_routes::reply(context& c, unsigned status, const value& body) {
  api_response r;
  r.status = status;
  r.content_type = std::string(content_type_of(c.m));
  r.body = serialize(body, c.m);
  return r;
}

std::optional<token_data> api_routes::session_token(const api_request& req) const {
  std::string tok;
  if (const auto* h = req.header("x-auth-token"); h && !h->empty()) {
    tok = *h;
  } else if (const auto* ck = req.header("cookie")) {
    if (auto v = cookie_value(*ck, "session_id")) tok = *v;
  }
  if (tok.empty() || !is_hex_token(tok) || !d_.eauth) return std::nullopt;
  return d_.eauth->get_token(tok);
}

bool api_routes::require_session(const api_request& req, context& c, api_response& out) {
  if (auto t = session_token(req)) {
    (void)t;
    return true;
  }
  out = refuse(req, 401, "No valid session: log in at /login (X-Auth-Token header or session_id cookie)", c.m);
  return false;
}

std::optional<token_data> api_routes::authorize_stream(const api_request& req, api_response& refusal) {
  std::string tok;
  if (const auto* h = req.header("x-auth-token"); h && !h->empty()) tok = *h;
  if (tok.empty())
    if (const auto* ck = req.header("cookie"))
      if (auto v = cookie_value(*ck, "session_id")) tok = *v;
  for (auto& [k, v] : parse_query(req.query)) {
    if (k == "token" || k == "salt_token") {
      if (tok.empty()) tok = v;
    } else {
      refusal = refuse(req, 400, "The /events endpoint takes no query parameters but token and salt_token");
      return std::nullopt;
    }
  }
  if (tok.empty() || !is_hex_token(tok) || !d_.eauth) {
    refusal = refuse(req, 401, tok.empty() ? "No token given" : "Invalid token");
    return std::nullopt;
  }
  auto t = d_.eauth->get_token(tok);
  if (!t) refusal = refuse(req, 401, "Unknown or expired token");
  return t;
}

api_response api_routes::handle(const api_request& req) {
  counters_.requests++;
  context c;
  api_response res;
  try {
    res = route(req, c);
    if (!c.unreachable.empty()) {
      std::string list;
      for (const auto& u : c.unreachable) list += (list.empty() ? "" : ", ") + u;
      res.headers.emplace_back("X-Sylvite-Group-Unreachable", list);
    }
  } catch (const std::exception& e) {
    // Never a crash and never a 500 for input: whatever threw was caused by the request.
    res = refuse(req, 400, std::string("Bad request: ") + e.what(), c.m);
  }
  // CORS (salt-api's cors_tool, without credentials: see the file header).
  res.headers.emplace_back("Access-Control-Allow-Origin", "*");
  res.headers.emplace_back("Access-Control-Expose-Headers", "GET, POST");
  return res;
}

api_response api_routes::route(const api_request& req, context& c) {
  std::string path = req.path.empty() ? "/" : req.path;
  if (req.method == "OPTIONS") {
    api_response r;
    r.status = 200;
    r.content_type = "text/plain";
    if (const auto* m = req.header("access-control-request-method"); m && (*m == "GET" || *m == "POST")) {
      r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST");
      r.headers.emplace_back("Access-Control-Allow-Headers", "Content-Type, X-Auth-Token, X-Requested-With");
      r.headers.emplace_back("Access-Control-Max-Age", "1400");
    }
    return r;
  }
  // The console: static assets, no negotiation, no session (the page logs in itself).
  if (starts_with_segment(path, "/console")) {
    if (req.method != "GET" && req.method != "HEAD") return refuse(req, 405, "Method not allowed");
    if (path == "/console") {
      api_response r;
      r.status = 301;
      r.content_type = "text/plain";
      r.headers.emplace_back("Location", "/console/");
      return r;
    }
    const auto* a = d_.console ? d_.console(std::string_view(path).substr(std::string_view("/console/").size()))
                               : nullptr;
    if (!a) return refuse(req, 404, "Not found: " + path);
    api_response r;
    r.content_type = std::string(a->content_type);
    r.body = std::string(a->body);
    r.headers.emplace_back("Cache-Control", "no-cache");
    return r;
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();

  const std::string* accept = req.header("accept");
  auto m = negotiate(accept ? *accept : std::string_view());
  if (!m) return refuse(req, 406, "Your client does not accept application/json or application/x-yaml");
  c.m = *m;

  if (!d_.opts.authorized_ips.empty() &&
      std::find(d_.opts.authorized_ips.begin(), d_.opts.authorized_ips.end(), req.remote) ==
          d_.opts.authorized_ips.end())
    return refuse(req, 403, "Bad IP", c.m);

  // group: the members' signed internal calls (no session; the signature is checked there).
  if (d_.group_internal && starts_with_segment(path, "/group")) {
    auto r = d_.group_internal(req);
    if (r.status >= 400) log_refusal(req, r.status, r.body);
    return r;
  }

  auto not_allowed = [&](const char* allow) {
    auto r = refuse(req, 405, "Method not allowed", c.m);
    r.headers.emplace_back("Allow", allow);
    return r;
  };

  // Request bodies (POST): parsed once, refused once.
  value data = nullptr;
  std::string raw;
  if (req.method == "POST") {
    const std::string* ct = req.header("content-type");
    auto b = parse_body(ct ? *ct : std::string_view(), req.body);
    if (b.status != 0) return refuse(req, static_cast<unsigned>(b.status), b.error, c.m);
    data = std::move(b.data);
    raw = std::move(b.raw);
  }
  const value lowstate = lowstate_of(data);
  api_response out;

  if (path == "/") {
    if (req.method == "GET")
      return reply(c, 200, value{{"return", "Welcome"}, {"clients", netapi_clients()}});
    if (req.method != "POST") return not_allowed("GET, POST");
    auto session = session_token(req);
    if (!session) return refuse(req, 401, "No valid session: log in at /login", c.m);
    if (!lowstate.is_array()) return refuse(req, 400, "Lowstates must be a list", c.m);
    auto ret = exec_lowstate(req, c, lowstate, session, nullptr, out);
    if (!ret) return out;
    return reply(c, 200, value{{"return", *ret}});
  }

  if (path == "/login") {
    if (req.method == "GET") {
      auto r = reply(c, 200, value{{"status", 200}, {"return", "Please log in"}});
      r.headers.emplace_back("WWW-Authenticate", "Session");
      return r;
    }
    if (req.method != "POST") return not_allowed("GET, POST");
    value creds = lowstate.is_array() && !lowstate.empty() ? lowstate[0] : lowstate;
    if (!creds.is_object()) return refuse(req, 400, "Login needs username, password and eauth", c.m);
    const std::string user = text_of(wire::find(creds, "username"));
    const std::string pass = text_of(wire::find(creds, "password"));
    const std::string eauth = text_of(wire::find(creds, "eauth"));
    if (!api_acl_allows(d_.opts.api_acl, user, req.remote))
      return refuse(req, 401, "api_acl: " + user + " may not log in from " + req.remote, c.m);
    std::optional<identity> who;
    if (d_.eauth && !user.empty() && !eauth.empty()) who = d_.eauth->authenticate(eauth, user, pass);
    std::optional<token_data> tok;
    if (who) tok = d_.eauth->mint_token(*who);
    if (!tok) return refuse(req, 401, "Could not authenticate using provided credentials", c.m);
    counters_.logins++;
    value perms = d_.eauth->login_perms(tok->who);
    value entry = {{"token", tok->token},   {"expire", tok->expire},        {"start", tok->start},
                   {"user", tok->who.name}, {"eauth", tok->who.eauth},      {"perms", perms.empty() ? value::object() : perms}};
    auto r = reply(c, 200, value{{"return", value::array({entry})}});
    r.headers.emplace_back("X-Auth-Token", tok->token);
    r.headers.emplace_back("Set-Cookie", "session_id=" + tok->token + "; expires=" + http_date(tok->expire) + "; Path=/");
    return r;
  }

  if (path == "/logout") {
    if (req.method != "POST") return not_allowed("POST");
    auto session = session_token(req);
    if (!session) return refuse(req, 401, "No valid session", c.m);
    d_.eauth->delete_token(session->token);
    auto r = reply(c, 200, value{{"return", "Your token has been cleared"}});
    r.headers.emplace_back("Set-Cookie", "session_id=" + session->token +
                                             "; expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/");
    return r;
  }

  if (path == "/token") {
    if (req.method != "POST") return not_allowed("POST");
    if (!lowstate.is_array()) return refuse(req, 400, "Require \"username\", \"password\", and \"eauth\" params", c.m);
    value list = value::array();
    for (const auto& creds : lowstate) {
      if (!creds.is_object() || !creds.contains("username") || !creds.contains("password") || !creds.contains("eauth"))
        return refuse(req, 400, "Require \"username\", \"password\", and \"eauth\" params", c.m);
      std::optional<identity> who;
      if (d_.eauth)
        who = d_.eauth->authenticate(text_of(wire::find(creds, "eauth")), text_of(wire::find(creds, "username")),
                                     text_of(wire::find(creds, "password")));
      std::optional<token_data> tok;
      if (who) tok = d_.eauth->mint_token(*who);
      if (!tok) return refuse(req, 401, "Authentication failure of type \"eauth\" occurred.", c.m);
      list.push_back({{"start", tok->start}, {"token", tok->token}, {"expire", tok->expire}, {"name", tok->who.name},
                      {"eauth", tok->who.eauth}});
    }
    return reply(c, 200, list);
  }

  if (starts_with_segment(path, "/minions")) {
    std::string mid = path.size() > 9 ? path.substr(9) : std::string();
    auto session = session_token(req);
    if (req.method == "GET") {
      if (!session) return refuse(req, 401, "No valid session", c.m);
      value ls = value::array({{{"client", "local"}, {"tgt", mid.empty() ? "*" : mid}, {"fun", "grains.items"}}});
      auto ret = exec_lowstate(req, c, ls, session, nullptr, out);
      if (!ret) return out;
      return reply(c, 200, value{{"return", *ret}});
    }
    if (req.method != "POST" || !mid.empty()) return not_allowed("GET, POST");
    if (!session) return refuse(req, 401, "No valid session", c.m);
    if (!lowstate.is_array()) return refuse(req, 400, "Lowstates must be a list", c.m);
    auto ret = exec_lowstate(req, c, lowstate, session, "local_async", out);
    if (!ret) return out;
    value links = value::array();
    for (const auto& j : *ret)
      if (j.is_object() && j.contains("jid")) links.push_back({{"href", "/jobs/" + text_of(wire::find(j, "jid"))}});
    return reply(c, 202, value{{"return", *ret}, {"_links", {{"jobs", links}}}});
  }

  if (starts_with_segment(path, "/jobs")) {
    if (req.method != "GET") return not_allowed("GET");
    auto session = session_token(req);
    if (!session) return refuse(req, 401, "No valid session", c.m);
    std::string jid = path.size() > 6 ? path.substr(6) : std::string();
    value chunk = {{"client", "runner"}};
    if (!jid.empty()) {
      chunk["fun"] = "jobs.list_job";
      chunk["jid"] = jid;
    } else {
      chunk["fun"] = "jobs.list_jobs";
    }
    auto ret = exec_lowstate(req, c, value::array({chunk}), session, nullptr, out);
    if (!ret) return out;
    value first = ret->empty() ? value::object() : (*ret)[0];
    if (jid.empty()) return reply(c, 200, value{{"return", value::array({first})}});
    value minion_ret = value::object();
    if (const value* res = wire::find(first, "Result"); res && res->is_object())
      for (auto it = res->begin(); it != res->end(); ++it) {
        const value* r = wire::find(it.value(), "return");
        minion_ret[it.key()] = r ? *r : value(nullptr);
      }
    return reply(c, 200, value{{"info", value::array({first})}, {"return", value::array({minion_ret})}});
  }

  if (starts_with_segment(path, "/keys")) {
    std::string mid = path.size() > 6 ? path.substr(6) : std::string();
    if (req.method == "GET") {
      auto session = session_token(req);
      if (!session) return refuse(req, 401, "No valid session", c.m);
      value chunk = {{"client", "wheel"}};
      if (!mid.empty()) {
        chunk["fun"] = "key.finger";
        chunk["match"] = mid;
      } else {
        chunk["fun"] = "key.list_all";
      }
      auto ret = exec_lowstate(req, c, value::array({chunk}), session, nullptr, out);
      if (!ret) return out;
      value r = value::object();
      if (!ret->empty())
        if (const value* d = wire::find((*ret)[0], "data"))
          if (const value* rr = wire::find(*d, "return")) r = *rr;
      return reply(c, 200, value{{"return", r}});
    }
    if (req.method != "POST" || !mid.empty()) return not_allowed("GET, POST");
    // Salt's Keys.POST: credentials in the body (no session), key.gen_accept, a tarball.
    if (!lowstate.is_array() || lowstate.empty() || !lowstate[0].is_object())
      return refuse(req, 400, "POST /keys needs mid, username, password and eauth", c.m);
    value chunk = lowstate[0];
    chunk["client"] = "wheel";
    chunk["fun"] = "key.gen_accept";
    if (chunk.contains("mid")) {
      chunk["id_"] = chunk["mid"];
      chunk.erase("mid");
    }
    const std::string id = text_of(wire::find(chunk, "id_"));
    auto ret = exec_lowstate(req, c, value::array({chunk}), std::nullopt, nullptr, out);
    if (!ret) return out;
    value r = value::object();
    if (!ret->empty())
      if (const value* d = wire::find((*ret)[0], "data"))
        if (const value* rr = wire::find(*d, "return")) r = *rr;
    api_response t;
    t.content_type = "application/x-tar";
    t.body = make_tar({{"minion.pub", text_of(wire::find(r, "pub"))}, {"minion.pem", text_of(wire::find(r, "priv"))}});
    t.headers.emplace_back("Content-Disposition", "attachment; filename=\"saltkeys-" + id + ".tar\"");
    t.headers.emplace_back("Cache-Control", "no-cache");
    return t;
  }

  if (path == "/run") {
    if (req.method != "POST") return not_allowed("POST");
    if (!lowstate.is_array()) return refuse(req, 400, "Lowstates must be a list", c.m);
    auto ret = exec_lowstate(req, c, lowstate, std::nullopt, nullptr, out);
    if (!ret) return out;
    return reply(c, 200, value{{"return", *ret}});
  }

  if (path == "/stats") {
    if (req.method != "GET") return not_allowed("GET");
    if (!d_.opts.stats_disable_auth && !session_token(req)) return refuse(req, 401, "No valid session", c.m);
    value s = {{"requests", counters_.requests.load()},         {"refused", counters_.refused.load()},
               {"logins", counters_.logins.load()},             {"lowstate_chunks", counters_.lowstate_chunks.load()},
               {"sse_clients", counters_.sse_clients.load()},   {"sse_events", counters_.sse_events.load()},
               {"sse_dropped", counters_.sse_dropped.load()},   {"busy", counters_.busy.load()}};
    value body = {{"sylvite-api", s}};
    if (d_.master_stats) body["sylvite-master"] = d_.master_stats();
    return reply(c, 200, body);
  }

  if (starts_with_segment(path, d_.opts.webhook_url)) {
    if (req.method != "POST") return not_allowed("POST");
    if (!d_.opts.webhook_disable_auth && !session_token(req)) return refuse(req, 401, "No valid session", c.m);
    std::string tag = "salt/netapi/hook";
    if (path.size() > d_.opts.webhook_url.size()) tag += path.substr(d_.opts.webhook_url.size());
    value headers = value::object();
    for (const auto& [k, v] : req.headers) headers[title_case(k)] = v;
    headers["Remote-Addr"] = req.remote;
    value post = data;
    if (post.is_null() || (post.is_object() && post.empty()) || (post.is_array() && post.empty()) ||
        (post.is_string() && post.get<std::string>().empty()))
      post = value::object();
    if (d_.fire) d_.fire(tag, value{{"body", raw}, {"post", post}, {"headers", headers}});
    return reply(c, 200, value{{"success", d_.fire != nullptr}});
  }

  if (path == "/events") return not_allowed("GET");
  return refuse(req, 404, "The path '" + path + "' was not found.", c.m);
}

std::optional<value> api_routes::exec_lowstate(const api_request& req, context& c, value lowstate,
                                               const std::optional<token_data>& session, const char* force_client,
                                               api_response& refusal) {
  if (!lowstate.is_array()) {
    refusal = refuse(req, 400, "Lowstates must be a list", c.m);
    return std::nullopt;
  }
  const value* enabled = d_.cfg ? wire::find(d_.cfg->raw, "netapi_enable_clients") : nullptr;
  value out = value::array();
  for (auto& chunk : lowstate) {
    if (!chunk.is_object()) {
      refusal = refuse(req, 400, "Lowstate chunks must be maps", c.m);
      return std::nullopt;
    }
    if (force_client) chunk["client"] = force_client;
    if (const value* t = wire::find(chunk, "token")) {
      auto tt = wire::as_text(*t);
      if (!tt || !is_hex_token(*tt)) {
        refusal = refuse(req, 401, "Invalid token", c.m);
        return std::nullopt;
      }
    }
    if (const value* a = wire::find(chunk, "arg"); a && !a->is_array()) chunk["arg"] = value::array({*a});
    const std::string client = text_of(wire::find(chunk, "client"));
    const auto& known = netapi_clients();
    if (std::find(known.begin(), known.end(), client) == known.end()) {
      refusal = refuse(req, 400, "Invalid client specified: '" + client + "'", c.m);
      return std::nullopt;
    }
    bool on = false;
    if (enabled && enabled->is_array())
      for (const auto& e : *enabled)
        if (auto t = wire::as_text(e); t && *t == client) on = true;
    if (!on) {
      refusal = refuse(req, 400,
                       "Client disabled: '" + client +
                           "'. Add to 'netapi_enable_clients' master config option to enable.",
                       c.m);
      return std::nullopt;
    }
    // Who runs it: the session, else the chunk's token, else its eauth credentials.
    std::optional<identity> who;
    if (session) {
      who = session->who;
    } else if (const value* t = wire::find(chunk, "token")) {
      if (d_.eauth)
        if (auto td = d_.eauth->get_token(text_of(t))) who = td->who;
      if (!who) {
        refusal = refuse(req, 401, "Authentication failure of type \"token\" occurred.", c.m);
        return std::nullopt;
      }
    } else if (wire::find(chunk, "eauth")) {
      if (d_.eauth)
        who = d_.eauth->authenticate(text_of(wire::find(chunk, "eauth")), text_of(wire::find(chunk, "username")),
                                     text_of(wire::find(chunk, "password")));
      if (!who) {
        refusal = refuse(req, 401, "Authentication failure of type \"eauth\" occurred.", c.m);
        return std::nullopt;
      }
    } else {
      refusal = refuse(req, 401, "No authentication credentials given", c.m);
      return std::nullopt;
    }
    // The chunk without credentials: what the ACL and the client see.
    for (const char* k : {"token", "eauth", "username", "password"}) chunk.erase(k);
    if (!d_.eauth) {
      refusal = refuse(req, 401, "External authentication is not configured", c.m);
      return std::nullopt;
    }
    auto dec = d_.eauth->check(*who, chunk);
    if (dec.allowed && client == "local_subset") {
      // cmd_subset publishes sys.list_functions to the target first: the ACL must allow it.
      value probe = chunk;
      probe["fun"] = "sys.list_functions";
      probe["arg"] = value::array();
      probe.erase("kwarg");
      dec = d_.eauth->check(*who, probe);
    }
    if (!dec.allowed) {
      // salt-api answers 401 for an ACL refusal too (EauthAuthenticationError): clients
      // written for it (pepper, scripts) rely on that.
      unsigned st = dec.why == api::refusal::bad_request ? 400u : 401u;
      refusal = refuse(req, st,
                       dec.reason.empty() ? std::string("Authorization error occurred.") : dec.reason, c.m);
      return std::nullopt;
    }
    counters_.lowstate_chunks++;
    auto res = d_.group_run ? d_.group_run(chunk, who->name) : d_.runner->run(chunk, who->name);
    for (auto& u : res.unreachable)
      if (std::find(c.unreachable.begin(), c.unreachable.end(), u) == c.unreachable.end()) c.unreachable.push_back(u);
    if (res.status != 200) {
      refusal = refuse(req, static_cast<unsigned>(res.status), res.error, c.m);
      return std::nullopt;
    }
    if (res.many && res.ret.is_array()) {
      for (auto& e : res.ret) out.push_back(std::move(e));
    } else {
      out.push_back(std::move(res.ret));
    }
  }
  return out;
}

std::string make_tar(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  const auto now = static_cast<long long>(std::time(nullptr));
  for (const auto& [name, content] : files) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.substr(0, 99).c_str());
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(content.size()));
    std::snprintf(h + 136, 12, "%011llo", static_cast<unsigned long long>(now));
    std::memset(h + 148, ' ', 8);
    h[156] = '0';
    std::memcpy(h + 257, "ustar\0" "00", 8);
    unsigned sum = 0;
    for (unsigned char ch : h) sum += ch;
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    out.append(h, 512);
    out += content;
    out.append((512 - content.size() % 512) % 512, '\0');
  }
  out.append(1024, '\0');
  // tarfile pads the archive to a multiple of RECORDSIZE (20 blocks).
  out.append((10240 - out.size() % 10240) % 10240, '\0');
  return out;
}

}  // namespace sylvite::master::api
