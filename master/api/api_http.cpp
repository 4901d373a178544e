// sylvite::master::api HTTP pieces (api_http.hpp). Salt quirks kept on purpose:
//   - a urlencoded `arg` is always a list and each element is typed like a CLI argument
//     (salt.utils.args.yamlify_arg), `kwarg` too; other keys stay text;
//   - text/plain is read as JSON when it parses (salt-api's text_processor);
//   - a map body becomes a one-chunk lowstate, its `arg` made a list (lowdata_fmt).
// Where salt-api answers an unsupported Content-Type with a 500 (CherryPy calls the
// HTTPError it was given as default_proc), sylvite answers 415.
#include "master/api/api_http.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/config/config.hpp"
#include "core/wire/parse_int.hpp"
#include "master/cli/args.hpp"

namespace sylvite::master::api {

using wire::value;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    auto p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

// The media type of a Content-Type value, lower-cased, without parameters.
std::string media_type(std::string_view ct) {
  auto semi = ct.find(';');
  return lower(trim(ct.substr(0, semi)));
}

}  // namespace

std::optional<media> negotiate(std::string_view accept) {
  struct range {
    std::string type;
    double q = 1.0;
    std::size_t order = 0;
  };
  std::vector<range> ranges;
  std::size_t n = 0;
  for (auto part : split(accept, ',')) {
    auto fields = split(part, ';');
    range r;
    r.type = lower(trim(fields[0]));
    if (r.type.empty()) continue;
    for (std::size_t i = 1; i < fields.size(); ++i) {
      auto f = trim(fields[i]);
      if (f.size() > 2 && (f[0] == 'q' || f[0] == 'Q') && f[1] == '=') {
        try {
          r.q = std::stod(std::string(f.substr(2)));
        } catch (const std::exception&) {
          r.q = 0;  // unreadable q: not acceptable (CherryPy would fail the request)
        }
      }
    }
    r.order = n++;
    ranges.push_back(std::move(r));
  }
  if (ranges.empty()) return media::json;
  std::stable_sort(ranges.begin(), ranges.end(), [](const range& a, const range& b) { return a.q > b.q; });
  static const std::pair<std::string_view, media> offered[] = {{"application/json", media::json},
                                                               {"application/x-yaml", media::yaml}};
  for (const auto& r : ranges) {
    if (r.q <= 0) continue;
    if (r.type == "*/*") return media::json;
    if (r.type.size() >= 2 && r.type.ends_with("/*")) {
      auto prefix = std::string_view(r.type).substr(0, r.type.size() - 1);
      for (const auto& [name, m] : offered)
        if (name.starts_with(prefix)) return m;
      continue;
    }
    for (const auto& [name, m] : offered)
      if (r.type == name) return m;
  }
  return std::nullopt;
}

std::string_view content_type_of(media m) { return m == media::json ? "application/json" : "application/x-yaml"; }

std::string serialize(const value& v, media m) {
  const value plain = wire::decode_embedded_strs(v);
  if (m == media::yaml) return config::to_yaml(plain);
  return plain.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string url_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_query(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  if (q.empty()) return out;
  for (auto part : split(q, '&')) {
    if (part.empty()) continue;  // parse_qsl skips empty fields
    auto eq = part.find('=');
    if (eq == std::string_view::npos) continue;  // parse_qsl drops "a" without "=" (keep_blank_values=False)
    auto k = url_decode(part.substr(0, eq));
    auto v = url_decode(part.substr(eq + 1));
    if (v.empty()) continue;  // keep_blank_values=False
    out.emplace_back(std::move(k), std::move(v));
  }
  return out;
}

std::optional<std::string> cookie_value(std::string_view header, std::string_view name) {
  for (auto part : split(header, ';')) {
    part = trim(part);
    auto eq = part.find('=');
    if (eq == std::string_view::npos) continue;
    if (trim(part.substr(0, eq)) != name) continue;
    auto v = trim(part.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
  return std::nullopt;
}

bool is_hex_token(std::string_view t) {
  t = trim(t);
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) t.remove_prefix(2);
  if (t.empty()) return false;
  bool prev_us = true;  // Python allows single underscores between digits
  for (char c : t) {
    if (c == '_') {
      if (prev_us) return false;
      prev_us = true;
      continue;
    }
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    prev_us = false;
  }
  return !prev_us;
}

body_result parse_body(std::string_view content_type, std::string_view body) {
  body_result r;
  r.raw = std::string(body);
  r.data = nullptr;
  if (body.empty()) return r;
  std::string mt = media_type(content_type);
  if (mt.empty()) mt = "application/x-www-form-urlencoded";
  try {
    if (mt == "application/x-www-form-urlencoded") {
      value d = value::object();
      for (auto& [k, v] : parse_query(body)) {
        if (!d.contains(k)) {
          d[k] = v;
        } else {
          if (!d[k].is_array()) d[k] = value::array({d[k]});
          d[k].push_back(v);
        }
      }
      if (d.contains("kwarg")) {
        if (d["kwarg"].is_string()) d["kwarg"] = cli::yamlify_arg(d["kwarg"].get<std::string>());
      }
      if (d.contains("arg")) {
        value& a = d["arg"];
        if (!a.is_array()) a = value::array({a});
        for (auto& e : a)
          if (e.is_string()) e = cli::yamlify_arg(e.get<std::string>());
      }
      r.data = std::move(d);
      return r;
    }
    if (mt == "application/json") {
      auto v = value::parse(body, nullptr, false);
      if (v.is_discarded()) {
        r.status = 400;
        r.error = "Invalid JSON document";
        return r;
      }
      r.data = std::move(v);
      return r;
    }
    if (mt == "application/x-yaml" || mt == "text/yaml") {
      auto y = config::parse_yaml(std::string(body));
      if (!y) {
        r.status = 400;
        r.error = "Invalid YAML document";
        return r;
      }
      r.data = std::move(*y);
      return r;
    }
    if (mt == "text/plain") {
      auto v = value::parse(body, nullptr, false);
      r.data = v.is_discarded() ? value(std::string(body)) : std::move(v);
      return r;
    }
  } catch (const std::exception& e) {
    r.status = 400;
    r.error = std::string("Could not read the request body: ") + e.what();
    return r;
  }
  r.status = 415;
  r.error = "Content type not supported";
  return r;
}

value lowstate_of(const value& data) {
  if (data.is_object() && !data.empty()) {
    value d = data;
    if (d.contains("arg") && !d["arg"].is_array()) d["arg"] = value::array({d["arg"]});
    return value::array({d});
  }
  return data;
}

std::string sse_event(const std::string& tag, const value& data) {
  value full = value::object();
  full["data"] = wire::decode_embedded_strs(data);
  full["tag"] = tag;
  std::string out = "tag: " + tag + "\n";
  out += "data: " + full.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
  return out;
}

const std::vector<std::string>& netapi_clients() {
  static const std::vector<std::string> c = {"destroy", "local",  "local_async", "local_batch", "local_subset",
                                             "runner",  "runner_async", "ssh", "wheel", "wheel_async"};
  return c;
}

value sorted_permissions(const value& perms) {
  std::vector<std::string> strs;
  std::vector<value> others;
  std::set<std::string> seen_other;
  if (perms.is_array()) {
    for (const auto& e : perms) {
      if (auto t = wire::as_text(e)) {
        std::string s(*t);
        if (std::find(strs.begin(), strs.end(), s) == strs.end()) strs.push_back(std::move(s));
      } else if (seen_other.insert(e.dump()).second) {
        others.push_back(e);
      }
    }
  }
  std::sort(strs.begin(), strs.end());
  std::sort(others.begin(), others.end(), [](const value& a, const value& b) { return a.dump() < b.dump(); });
  value out = value::array();
  for (auto& s : strs) out.push_back(s);
  for (auto& o : others) out.push_back(o);
  return out;
}

namespace {

std::optional<bool> as_bool(const value& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (auto t = wire::as_text(v)) {
    auto s = lower(*t);
    if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
    if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  }
  return std::nullopt;
}

}  // namespace

options_result parse_api_options(const value& raw) {
  options_result r;
  const value* block = wire::find(raw, "rest_cherrypy");
  if (!block || block->is_null()) return r;
  if (!block->is_object()) {
    r.error = "rest_cherrypy: expected a map of options";
    return r;
  }
  api_options o;
  auto text = [&](const char* k, std::string& dst) -> bool {
    if (const value* v = wire::find(*block, k); v && !v->is_null()) {
      if (auto t = wire::as_text(*v)) {
        dst = std::string(*t);
      } else if (v->is_number()) {
        dst = v->dump();
      } else {
        r.error = std::string("rest_cherrypy: ") + k + ": expected a string";
        return false;
      }
    }
    return true;
  };
  auto flag = [&](const char* k, bool& dst) -> bool {
    if (const value* v = wire::find(*block, k); v && !v->is_null()) {
      auto b = as_bool(*v);
      if (!b) {
        r.error = std::string("rest_cherrypy: ") + k + ": expected True or False";
        return false;
      }
      dst = *b;
    }
    return true;
  };
  auto number = [&](const char* k, std::int64_t lo, std::int64_t hi, std::int64_t& dst) -> bool {
    if (const value* v = wire::find(*block, k); v && !v->is_null()) {
      auto n = wire::parse_int(*v);
      if (!n || *n < lo || *n > hi) {
        r.error = std::string("rest_cherrypy: ") + k + ": expected an integer from " + std::to_string(lo) + " to " +
                  std::to_string(hi);
        return false;
      }
      dst = *n;
    }
    return true;
  };
  std::int64_t port = o.port, body = static_cast<std::int64_t>(o.max_request_body_size), pool = o.thread_pool,
               queue = o.socket_queue_size, sse = static_cast<std::int64_t>(o.sse_queue_events);
  if (!text("host", o.host) || !text("ssl_crt", o.ssl_crt) || !text("ssl_key", o.ssl_key) ||
      !text("webhook_url", o.webhook_url) || !text("app_path", o.app_path) || !flag("disable_ssl", o.disable_ssl) ||
      !flag("webhook_disable_auth", o.webhook_disable_auth) || !flag("stats_disable_auth", o.stats_disable_auth) ||
      !flag("debug", o.debug) || !flag("expire_responses", o.expire_responses) ||
      !flag("enable_sessions", o.enable_sessions) || !number("port", 1, 65535, port) ||
      !number("max_request_body_size", 0, std::int64_t(1) << 34, body) || !number("thread_pool", 1, 100000, pool) ||
      !number("queue_size", 1, 100000, queue) || !number("sse_queue_events", 1, 10000000, sse))
    return r;
  o.port = static_cast<std::uint16_t>(port);
  o.max_request_body_size = static_cast<std::size_t>(body);
  o.thread_pool = static_cast<int>(pool);
  o.socket_queue_size = static_cast<int>(queue);
  o.sse_queue_events = static_cast<std::size_t>(sse);
  if (o.webhook_url.empty() || o.webhook_url.front() != '/') o.webhook_url = "/" + o.webhook_url;
  while (o.webhook_url.size() > 1 && o.webhook_url.back() == '/') o.webhook_url.pop_back();
  if (const value* ips = wire::find(*block, "authorized_ips"); ips && ips->is_array()) {
    for (const auto& ip : *ips)
      if (auto t = wire::as_text(ip)) o.authorized_ips.emplace_back(*t);
  }
  if (const value* acl = wire::find(*block, "api_acl"); acl && acl->is_object()) o.api_acl = *acl;
  if (!o.disable_ssl && (o.ssl_crt.empty() || o.ssl_key.empty())) {
    r.error = "rest_cherrypy: options 'ssl_crt' and 'ssl_key' are required if SSL is not disabled (disable_ssl)";
    return r;
  }
  r.opts = std::move(o);
  return r;
}

bool api_acl_allows(const value& api_acl, const std::string& user, const std::string& ip) {
  if (!api_acl.is_object()) return true;
  const value* users = wire::find(api_acl, "users");
  if (!users || !users->is_object() || users->empty()) return true;
  auto listed = [&](const value& ips) {
    if (!ips.is_array()) return false;
    for (const auto& e : ips) {
      auto t = wire::as_text(e);
      if (t && (*t == ip || *t == "*")) return true;
    }
    return false;
  };
  if (const value* mine = wire::find(*users, user)) return listed(*mine);
  if (const value* any = wire::find(*users, "*")) return listed(*any);
  return false;
}

}  // namespace sylvite::master::api
