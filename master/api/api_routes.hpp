// sylvite::master::api routes: salt-api's rest_cherrypy URL set (Salt 3008.5
// salt/netapi/rest_cherrypy/app.py) as one function from a parsed request to a response,
// with no socket in sight (api_server.cpp feeds it; the unit tests call it directly):
//   GET  /                 welcome + clients            POST /            lowstate (session)
//   GET  /login            "Please log in"              POST /login       eauth -> token
//   POST /logout           revoke the token             POST /token       eauth -> Salt token
//   GET  /minions[/<id>]   grains.items (local)         POST /minions     local_async, 202
//   GET  /jobs[/<jid>]     jobs.list_jobs / list_job    GET  /keys[/<id>] key.list_all / finger
//   POST /keys             key.gen_accept as a tarball  POST /run         lowstate, creds inside
//   POST <webhook_url>/... fire salt/netapi/hook/...    GET  /stats       API counters
//   GET  /console[/<path>] the web console's assets     OPTIONS *         CORS preflight
// GET /events (Server-Sent Events) is the server's (a stream); it asks authorize_stream().
// Status codes: 400 malformed input, 401 no/bad/expired token or credentials, 403 the ACL
// says no (or api_acl / authorized_ips), 404 unknown path, 405 wrong method, 406 no
// acceptable reply type, 413 body too large (the server), 415 unsupported body type.
// Every refusal is logged (one line per refusal, rate limited against floods).
// Thread-safety: handle() from any thread (it blocks on lowstate runs: call it from the
// server's workers); the counters are atomics.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/wire/value.hpp"
#include "master/api/api_http.hpp"
#include "master/api/api_lowstate.hpp"
#include "master/api/console_assets.hpp"
#include "master/api/eauth.hpp"

namespace sylvite::master::api {

struct api_request {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // decoded, without the query
  std::string query;                           // raw query string
  std::map<std::string, std::string> headers;  // names lower-cased; Beast joins repeats
  std::string body;
  std::string remote;                          // peer address (logs, api_acl)
  const std::string* header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

struct api_response {
  unsigned status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type
  std::string content_type = "application/json";
  std::string body;
};

struct api_counters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> logins{0};
  std::atomic<std::uint64_t> lowstate_chunks{0};
  std::atomic<std::uint64_t> sse_clients{0};      // open now
  std::atomic<std::uint64_t> sse_events{0};       // delivered
  std::atomic<std::uint64_t> sse_dropped{0};      // clients dropped for lagging
  std::atomic<std::uint64_t> busy{0};             // 503: worker queue full
};

struct api_routes_deps {
  const config::master_config* cfg = nullptr;
  api_options opts;
  const eauth_service* eauth = nullptr;  // null: every login and token is refused (401)
  std::shared_ptr<lowstate_runner> runner;
  std::function<void(const std::string& tag, const wire::value& data)> fire;  // event_hub::fire
  std::function<const console_asset*(std::string_view)> console;             // empty: 404
  std::function<wire::value()> master_stats;                                  // extra /stats
  // group (api_group.hpp, set when master_group is configured): the signed internal
  // endpoints under /group/, and the group-wide run of a checked chunk.
  std::function<api_response(const api_request&)> group_internal;
  std::function<chunk_result(const wire::value& chunk, const std::string& user)> group_run;
};

class api_routes {
 public:
  explicit api_routes(api_routes_deps d);
  api_response handle(const api_request& req);

  // GET /events: the token (X-Auth-Token, session_id cookie, or the token / salt_token
  // query parameter) -> its data; else `refusal` is the response to send.
  std::optional<token_data> authorize_stream(const api_request& req, api_response& refusal);

  api_counters& counters() noexcept { return counters_; }
  const api_options& options() const noexcept { return d_.opts; }
  // The response for a refusal (also used by the server: 413, 503, 400 on a bad head).
  api_response refuse(const api_request& req, unsigned status, const std::string& why, media m = media::json);

 private:
  struct context;
  api_response route(const api_request& req, context& c);
  api_response reply(context& c, unsigned status, const wire::value& body);
  std::optional<token_data> session_token(const api_request& req) const;
  bool require_session(const api_request& req, context& c, api_response& out);
  // Runs lowstate through the runner with authorization per chunk; token (a session's
  // identity) or per-chunk credentials (/run). Returns the "return" list or a refusal.
  std::optional<wire::value> exec_lowstate(const api_request& req, context& c, wire::value lowstate,
                                           const std::optional<token_data>& session, const char* force_client,
                                           api_response& refusal);
  void log_refusal(const api_request& req, unsigned status, const std::string& why);

  api_routes_deps d_;
  api_counters counters_;
  std::mutex log_mu_;
  std::int64_t log_second_ = 0;
  std::uint64_t log_count_ = 0;
  std::uint64_t log_suppressed_ = 0;
};

// A ustar archive of (name, content) files, mode 0644, as Python's tarfile writes them
// for POST /keys (Salt's gen_accept tarball: minion.pub, minion.pem).
std::string make_tar(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace sylvite::master::api
