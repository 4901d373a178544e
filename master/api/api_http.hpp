// sylvite::master::api HTTP pieces of the REST API (salt-api's rest_cherrypy, Salt 3008.5
// salt/netapi/rest_cherrypy/app.py) that need no socket: content negotiation (the Accept
// header), request bodies (hypermedia_in's processors and lowdata_fmt), reply bodies
// (ct_out_map), query strings, cookies, Server-Sent Events framing and the
// `rest_cherrypy` option block. The server (api_server.cpp) and the unit tests use them.
// Errors are values (status + message), never exceptions.
// Thread-safety: pure functions.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master::api {

// The reply formats salt-api serves (ct_out_map, in its order of preference).
enum class media { json, yaml };

// CherryPy's cptools.accept(["application/json", "application/x-yaml"]): the best media
// type the Accept header allows (q-values, "*/*", "application/*"); no header or an empty
// one -> json; nullopt -> 406 Not Acceptable.
std::optional<media> negotiate(std::string_view accept);
std::string_view content_type_of(media m);
// The reply body in that format: JSON (Salt's json.dumps separators), or YAML block style
// (safe_dump default_flow_style=False). Binary values that are UTF-8 become text.
std::string serialize(const wire::value& v, media m);

// A parsed request body, or why it was refused.
struct body_result {
  int status = 0;         // 0 ok; else 400 (malformed) or 415 (unsupported type)
  std::string error;      // for the log and the reply
  wire::value data;       // null when there is no body
  std::string raw;        // the body text (the webhook's "body")
};
// hypermedia_in: application/x-www-form-urlencoded (repeated keys -> list, `arg` and
// `kwarg` typed as on the CLI: yamlify_arg), application/json, application/x-yaml and
// text/yaml, text/plain (JSON if it parses, else the text). An empty body -> null data.
// Content-Type parameters (charset) are ignored; an absent Content-Type with a body is
// read as urlencoded (what curl -d sends without -H).
body_result parse_body(std::string_view content_type, std::string_view body);

// lowdata_fmt: a map becomes [map] (its `arg` made a list); anything else is kept.
wire::value lowstate_of(const wire::value& data);

// "a=1&b=x%20y" -> [(a, 1), (b, x y)] ('+' is a space). Malformed escapes are kept.
std::vector<std::pair<std::string, std::string>> parse_query(std::string_view q);
std::string url_decode(std::string_view s, bool plus_is_space = true);

// The value of cookie `name` in a Cookie header ("a=1; session_id=abc").
std::optional<std::string> cookie_value(std::string_view header, std::string_view name);

// Salt's token check: int(token, 16) succeeds (hex digits, optional 0x, surrounding
// blanks; not empty).
bool is_hex_token(std::string_view t);

// One SSE event as salt-api writes it: "tag: <tag>\ndata: <json of {tag, data}>\n\n".
std::string sse_event(const std::string& tag, const wire::value& data);
// The first line of the stream.
inline constexpr std::string_view sse_retry = "retry: 400\n";

// salt.netapi.CLIENTS of Salt 3008.5 (GET / lists them).
const std::vector<std::string>& netapi_clients();

// sorted_permissions: strings sorted and de-duplicated, then the other entries (sorted by
// their JSON text, standing in for Python's repr).
wire::value sorted_permissions(const wire::value& perms);

// The `rest_cherrypy` block of the master config (Salt's option names and defaults).
struct api_options {
  std::string host = "0.0.0.0";
  std::uint16_t port = 8000;
  std::string ssl_crt;
  std::string ssl_key;
  bool disable_ssl = false;
  std::string webhook_url = "/hook";
  bool webhook_disable_auth = false;
  bool stats_disable_auth = false;
  bool debug = false;
  std::size_t max_request_body_size = 1048576;
  int thread_pool = 100;     // Salt's default; sylvite caps its worker threads (see .cpp)
  int socket_queue_size = 30;
  bool expire_responses = true;
  std::string app_path = "/app";
  std::vector<std::string> authorized_ips;  // salt_ip_verify: only these (Remote-Addr)
  wire::value api_acl = nullptr;            // api_acl: {users: {name: [ips]}}
  bool enable_sessions = true;
  // sylvite: events queued for one /events client; a client that lets it fill is dropped.
  std::size_t sse_queue_events = 10000;
};
struct options_result {
  std::optional<api_options> opts;  // nullopt with error empty: no block, no API
  std::string error;                 // a bad option: what was expected
};
// Reads cfg.raw["rest_cherrypy"]. Refuses: not a map, a port outside 1..65535, ssl on
// (disable_ssl false) without ssl_crt and ssl_key (salt-api does not start then either).
options_result parse_api_options(const wire::value& raw_config);

// Salt's api_acl tool: may `user` log in from `ip`? (no acl -> yes)
bool api_acl_allows(const wire::value& api_acl, const std::string& user, const std::string& ip);

}  // namespace sylvite::master::api
