// sylvite::render wire protocol (render_protocol.hpp).
#include "core/render/render_protocol.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace sylvite::render {
namespace {

constexpr char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64_encode(const std::vector<std::uint8_t>& in) {
  std::string out;
  out.reserve(4 * ((in.size() + 2) / 3));
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    std::uint32_t n = (std::uint32_t(in[i]) << 16) | (std::uint32_t(in[i + 1]) << 8) | in[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += b64_alphabet[(n >> s) & 63];
  }
  if (i < in.size()) {
    std::uint32_t n = std::uint32_t(in[i]) << 16;
    if (i + 1 < in.size()) n |= std::uint32_t(in[i + 1]) << 8;
    out += b64_alphabet[(n >> 18) & 63];
    out += b64_alphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? b64_alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool b64_decode(const std::string& in, std::vector<std::uint8_t>& out) {
  if (in.size() % 4 != 0) return false;
  out.clear();
  out.reserve(in.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    int v;
    if (c == '=') {
      if (i + 2 < in.size()) return false;
      ++pad;
      continue;
    }
    if (pad) return false;
    const char* p = std::strchr(b64_alphabet, c);
    if (c == '\0' || !p) return false;
    v = static_cast<int>(p - b64_alphabet);
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xff));
    }
  }
  return true;
}

// Binary -> tagged object (JSON has no bytes).
wire::value to_json(const wire::value& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    double d = v.get<double>();
    return wire::value::object({{float_tag, std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf")}});
  }
  if (v.is_binary()) return wire::value::object({{bytes_tag, b64_encode(v.get_binary())}});
  if (v.is_object()) {
    wire::value o = wire::value::object();
    for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = to_json(it.value());
    return o;
  }
  if (v.is_array()) {
    wire::value a = wire::value::array();
    for (const auto& e : v) a.push_back(to_json(e));
    return a;
  }
  return v;
}

void from_json(wire::value& v) {
  if (v.is_object()) {
    if (v.size() == 1 && v.contains(bytes_tag) && v[bytes_tag].is_string()) {
      std::vector<std::uint8_t> raw;
      if (b64_decode(v[bytes_tag].get<std::string>(), raw)) {
        v = wire::value::binary(std::move(raw));
        return;
      }
    }
    if (v.size() == 1 && v.contains(float_tag) && v[float_tag].is_string()) {
      const std::string f = v[float_tag].get<std::string>();
      if (f == "inf" || f == "-inf" || f == "nan") {
        v = f == "nan" ? std::numeric_limits<double>::quiet_NaN()
                       : (f == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
        return;
      }
    }
    for (auto& [k, e] : v.items()) from_json(e);
  } else if (v.is_array()) {
    for (auto& e : v) from_json(e);
  }
}

wire::value string_list(const std::vector<std::string>& l) {
  wire::value a = wire::value::array();
  for (const auto& s : l) a.push_back(s);
  return a;
}

}  // namespace

std::string frame_header(std::size_t len) {
  std::string h(4, '\0');
  h[0] = static_cast<char>((len >> 24) & 0xff);
  h[1] = static_cast<char>((len >> 16) & 0xff);
  h[2] = static_cast<char>((len >> 8) & 0xff);
  h[3] = static_cast<char>(len & 0xff);
  return h;
}

std::string encode_request(const request& r, std::size_t max_output_bytes) {
  wire::value roots = wire::value::array();
  for (const auto& p : r.roots) roots.push_back(p.string());
  wire::value j = wire::value::object();
  j["path"] = r.path.string();
  j["saltenv"] = r.saltenv;
  j["sls"] = r.sls;
  j["roots"] = std::move(roots);
  j["default_pipe"] = r.default_pipe;
  j["blacklist"] = string_list(r.blacklist);
  j["whitelist"] = string_list(r.whitelist);
  j["context"] = to_json(r.context);
  j["max_output_bytes"] = max_output_bytes;
  return j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

bool decode_reply(const std::string& body, outcome& out, std::string& err) {
  wire::value j = wire::value::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("status") || !j["status"].is_string()) {
    err = "not a reply document (" + std::to_string(body.size()) + " bytes)";
    return false;
  }
  const std::string st = j["status"].get<std::string>();
  if (st == "ok") {
    if (!j.contains("data")) {
      err = "reply without data";
      return false;
    }
    out.st = outcome::status::ok;
    out.data = std::move(j["data"]);
    from_json(out.data);
    return true;
  }
  if (!j.contains("error") || !j["error"].is_string()) {
    err = "error reply without a message";
    return false;
  }
  if (st == "render_error")
    out.st = outcome::status::render_error;
  else if (st == "unsupported_renderer")
    out.st = outcome::status::unsupported_renderer;
  else {
    err = "unknown status '" + st + "'";
    return false;
  }
  out.error = j["error"].get<std::string>();
  return true;
}

bool decode_call(const std::string& body, worker_call& out, std::string& err) {
  err.clear();
  // The worker writes {"call": ...} with "call" first (json.dumps keeps the order); a reply
  // starts with "status": no second parse of a (large) reply.
  if (body.rfind("{\"call\"", 0) != 0) return false;
  wire::value j = wire::value::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("call")) return false;
  if (!j["call"].is_string()) {
    err = "call name is not a string";
    return false;
  }
  out.fun = j["call"].get<std::string>();
  auto it = j.find("args");
  if (it == j.end() || !it->is_object()) {
    err = "call '" + out.fun + "' without an args map";
    return false;
  }
  out.args = std::move(*it);
  from_json(out.args);
  return true;
}

std::string encode_call_result(const call_result& r) {
  wire::value j = wire::value::object();
  j["ok"] = r.ok;
  if (r.ok)
    j["value"] = to_json(r.value);
  else
    j["error"] = r.error;
  return j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

}  // namespace sylvite::render
