// sylvite::cli salt-run state.event (state_event.hpp).
#include "master/cli/state_event.hpp"

#include <algorithm>
#include <iostream>
#include <vector>

#include "core/output/output.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::cli {

using wire::value;
namespace ipc = master::ipc;

namespace {

std::string base64(std::string_view in) {
  static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += tbl[(n >> 18) & 63];
    out += tbl[(n >> 12) & 63];
    out += tbl[(n >> 6) & 63];
    out += tbl[n & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned n = static_cast<unsigned char>(in[i]) << 16;
    out += tbl[(n >> 18) & 63];
    out += tbl[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned n = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += tbl[(n >> 18) & 63];
    out += tbl[(n >> 12) & 63];
    out += tbl[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

// decode(data, keep=True) then _json_safe: UTF-8 bytes become text, other bytes base64;
// sort: keys in Python's sorted() order (code points: the bytes of UTF-8 text).
value json_safe(const value& v, bool sort) {
  switch (v.type()) {
    case value::value_t::binary: {
      const auto& b = v.get_binary();
      std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
      if (!b.has_subtype() && wire::is_utf8(s)) return std::string(s);
      return base64(s);
    }
    case value::value_t::array: {
      value out = value::array();
      for (const auto& e : v) out.push_back(json_safe(e, sort));
      return out;
    }
    case value::value_t::object: {
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      if (sort) std::sort(keys.begin(), keys.end());
      value out = value::object();
      for (const auto& k : keys) out[k] = json_safe(v.at(k), sort);
      return out;
    }
    default:
      return v;
  }
}

}  // namespace

std::string state_event_line(const std::string& tag, const value& data, bool pretty) {
  output::options o;
  o.indent = pretty ? 4 : -1;
  o.indent_explicit = true;
  return tag + "\t" + output::render("json", json_safe(data, pretty), o);
}

bool py_truthy(const value& v) {
  switch (v.type()) {
    case value::value_t::null: return false;
    case value::value_t::boolean: return v.get<bool>();
    case value::value_t::number_integer:
    case value::value_t::number_unsigned: return v.get<std::int64_t>() != 0;
    case value::value_t::number_float: return v.get<double>() != 0.0;
    case value::value_t::string: return !v.get_ref<const std::string&>().empty();
    case value::value_t::binary: return !v.get_binary().empty();
    default: return !v.empty();
  }
}

int run_state_event(const config::master_config& cfg, const value& args, const value& kwargs, const output_flags& of,
                    cli_env& env) {
  // pretty (positional 5th, or pretty=) and quiet (3rd, or quiet=) are the printer's.
  bool pretty = false, quiet = false;
  if (args.is_array()) {
    if (args.size() > 2) quiet = py_truthy(args[2]);
    if (args.size() > 4) pretty = py_truthy(args[4]);
  }
  if (const value* q = wire::find(kwargs, "quiet")) quiet = py_truthy(*q);
  if (const value* p = wire::find(kwargs, "pretty")) pretty = py_truthy(*p);
  ipc::runner req{"state.event", args, kwargs, std::nullopt, std::nullopt};
  std::string bad;
  auto on_item = [&](const value& body) {
    auto e = ipc::decode_event_item(body);
    if (!e) {
      bad = e.error;
      return;
    }
    if (quiet) return;
    (*env.out) << state_event_line(e->tag, e->data, pretty) << "\n" << std::flush;
  };
  // Streams until interrupted: no overall deadline worth the name (10 years).
  auto r = env.request_stream(cfg, ipc::encode(req), on_item, std::chrono::hours(24 * 365 * 10));
  if (!r.body) {
    (*env.err) << r.error << "\n";
    return ex_generic;
  }
  if (!bad.empty()) (*env.err) << "The master sent an event salt-run cannot read: " << bad << "\n";
  auto d = ipc::decode_runner_reply(*r.body);
  if (!d) {
    (*env.err) << "The master sent a reply salt-run cannot read: " << d.error << "\n";
    return ex_generic;
  }
  auto oo = make_output_options(of);
  if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
    (*env.out) << output::display(of.out.empty() ? "nested" : of.out, value(e->error), oo) << std::flush;
    return ex_generic;
  }
  const auto& rep = std::get<ipc::runner_reply>(*d);
  emit(of, output::display(of.out.empty() ? "nested" : of.out, rep.ret, oo), *env.out);
  return static_cast<int>(rep.retcode);
}

}  // namespace sylvite::cli
