// sylvite::minion execution-module registry, Salt's argument handling and the small modules
// (test, grains, pillar, saltutil, sys). cmd lives in mod_cmd.cpp, cp in mod_cp.cpp.
#include "minion/modules.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/config/config.hpp"
#include "core/match/match.hpp"
#include "sylvite/version.hpp"

namespace sylvite::minion {

// ---- running jobs ------------------------------------------------------------------------

void running_jobs::add(const std::string& jid, wire::value info) {
  std::lock_guard lk(mu_);
  jobs_[jid] = std::move(info);
}
void running_jobs::remove(const std::string& jid) {
  std::lock_guard lk(mu_);
  jobs_.erase(jid);
}
std::vector<wire::value> running_jobs::list(const std::string& exclude_jid) const {
  std::lock_guard lk(mu_);
  std::vector<wire::value> out;
  for (const auto& [jid, info] : jobs_)
    if (jid != exclude_jid) out.push_back(info);
  return out;
}
std::size_t running_jobs::size() const {
  std::lock_guard lk(mu_);
  return jobs_.size();
}

// ---- helpers -----------------------------------------------------------------------------

namespace {

const wire::value& null_value() {
  static const wire::value v;
  return v;
}

// Python str() of a value, for messages.
std::string py_str(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string short_name(const std::string& fun) {
  auto pos = fun.rfind('.');
  return pos == std::string::npos ? fun : fun.substr(pos + 1);
}

std::string quoted_list(const std::vector<std::string>& names) {
  // Python: 'a' / 'a' and 'b' / 'a', 'b', and 'c'
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) {
      if (names.size() == 2) out += " and ";
      else if (i + 1 == names.size()) out += ", and ";
      else out += ", ";
    }
    out += "'" + names[i] + "'";
  }
  return out;
}

bool py_truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (auto b = wire::as_bytes(v)) return !b->empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::optional<long long> parse_py_int(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  s = s.substr(b, e - b);
  if (s.empty()) return std::nullopt;
  std::size_t i = 0;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i = 1;
  }
  if (i >= s.size()) return std::nullopt;
  long long v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') continue;
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
    if (v > (1LL << 53)) return std::nullopt;
  }
  return neg ? -v : v;
}

}  // namespace

std::string missing_fun_string(const std::string& fun) { return "'" + fun + "' is not available."; }

std::optional<std::pair<std::string, std::string>> parse_kwarg(const std::string& s) {
  // KWARG_REGEX = ^([^\d\W][\w.-]*)=(?!=)(.*)$   ('.' does not match a newline)
  if (s.empty()) return std::nullopt;
  auto is_word = [](unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; };
  unsigned char c0 = static_cast<unsigned char>(s[0]);
  if (!is_word(c0) || std::isdigit(c0)) return std::nullopt;
  std::size_t i = 1;
  while (i < s.size() && (is_word(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '-')) ++i;
  if (i >= s.size() || s[i] != '=') return std::nullopt;
  if (i + 1 < s.size() && s[i + 1] == '=') return std::nullopt;
  std::string val = s.substr(i + 1);
  // '$' also matches before one trailing newline; any other newline fails the match.
  std::string_view check = val;
  if (!check.empty() && check.back() == '\n') check.remove_suffix(1);
  if (check.find('\n') != std::string_view::npos) return std::nullopt;
  return std::make_pair(s.substr(0, i), val);
}

wire::value yamlify_arg(const std::string& arg) {
  auto strip = [](std::string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
  };
  const std::string_view st = strip(arg);
  if (st.empty() || st == "---" || st == "...") return arg;
  if (arg.find('_') != std::string::npos &&
      std::all_of(st.begin(), st.end(), [](char c) { return (c >= '0' && c <= '9') || c == '_'; }))
    return arg;
  if (arg.find_first_of("\t\r\n") != std::string::npos) return arg;
  if (arg == "None") return wire::value();
  auto parsed = config::parse_yaml(arg);
  if (!parsed) return arg;
  const wire::value& v = *parsed;
  if (arg.find('#') != std::string::npos) {
    if (v.is_string() || v.is_null()) return arg;
    return v;
  }
  if (v.is_object()) return arg.rfind('{', 0) == 0 ? v : wire::value(arg);
  if (v.is_array()) return arg.rfind('[', 0) == 0 ? v : wire::value(arg);
  if (v.is_null()) {
    if (st.rfind('#', 0) == 0 || arg == "!") return arg;
    return v;
  }
  if (v.is_string()) {
    if (v.get<std::string>().empty() && (arg == "|" || arg == "!")) return arg;
    return v;
  }
  if (v.is_number() || v.is_boolean()) return v;
  return arg;
}

wire::value traverse(const wire::value& data, const std::string& key, const wire::value& def,
                     const std::string& delimiter) {
  const wire::value* ptr = &data;
  std::vector<std::string> parts;
  if (delimiter.empty()) {
    parts.push_back(key);
  } else {
    std::size_t start = 0;
    for (;;) {
      auto pos = key.find(delimiter, start);
      parts.push_back(key.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
      if (pos == std::string::npos) break;
      start = pos + delimiter.size();
    }
  }
  for (const auto& each : parts) {
    if (ptr->is_object()) {
      auto it = ptr->find(each);
      if (it == ptr->end()) return def;
      ptr = &*it;
    } else if (ptr->is_array()) {
      if (auto idx = parse_py_int(each)) {
        long long n = static_cast<long long>(ptr->size());
        long long i = *idx < 0 ? *idx + n : *idx;
        if (i < 0 || i >= n) return def;
        ptr = &(*ptr)[static_cast<std::size_t>(i)];
      } else {
        const wire::value* found = nullptr;
        for (const auto& emb : *ptr) {
          if (emb.is_object()) {
            auto it = emb.find(each);
            if (it != emb.end()) {
              found = &*it;
              break;
            }
          }
        }
        if (!found) return def;
        ptr = found;
      }
    } else {
      return def;
    }
  }
  return *ptr;
}

// ---- binding -----------------------------------------------------------------------------

const wire::value& bound_args::operator[](const std::string& n) const {
  auto it = named.find(n);
  if (it != named.end()) return *it;
  auto kt = kwargs.find(n);
  if (kt != kwargs.end()) return *kt;
  return null_value();
}

bool bound_args::is_set(const std::string& n) const { return !(*this)[n].is_null(); }

boost::system::result<bound_args, exec_error> bind_arguments(const fn_spec& f, const wire::value& arg_list,
                                                             const wire::value& pub) {
  auto has_param = [&](const std::string& k) {
    return std::any_of(f.params.begin(), f.params.end(), [&](const param& p) { return p.name == k; });
  };
  std::vector<wire::value> args;
  wire::value kwargs = wire::value::object();
  std::vector<std::string> invalid;
  auto take_kw = [&](const std::string& k, const wire::value& v) {
    if (f.varkw || has_param(k)) kwargs[k] = v;
    else invalid.push_back(k + "=" + py_str(v));
  };
  if (arg_list.is_array()) {
    for (const auto& a : arg_list) {
      if (a.is_object()) {
        auto it = a.find("__kwarg__");
        if (it != a.end() && it->is_boolean() && it->get<bool>()) {
          for (const auto& [k, v] : a.items())
            if (k != "__kwarg__") take_kw(k, v);
          continue;
        }
      }
      if (auto t = wire::as_text(a); t && a.is_string()) {
        if (auto kv = parse_kwarg(std::string(*t))) {
          take_kw(kv->first, yamlify_arg(kv->second));
          continue;
        }
      }
      args.push_back(a);
    }
  } else if (!arg_list.is_null()) {
    args.push_back(arg_list);
  }
  if (!invalid.empty()) {
    std::string msg = "The following keyword arguments are not valid: ";
    for (std::size_t i = 0; i < invalid.size(); ++i) msg += (i ? ", " : "") + invalid[i];
    return exec_error{exec_error::kind::invocation, msg};
  }
  if (f.varkw && pub.is_object())
    for (const auto& [k, v] : pub.items()) kwargs["__pub_" + k] = v;

  // Python binding.
  const std::string fname = short_name(f.name) + "()";
  bound_args b;
  std::vector<const param*> positional;
  for (const auto& p : f.params)
    if (!p.kwonly) positional.push_back(&p);
  std::vector<bool> filled(f.params.size(), false);
  std::size_t ai = 0;
  for (std::size_t pi = 0; pi < positional.size() && ai < args.size(); ++pi, ++ai)
    b.named[positional[pi]->name] = args[ai];
  if (ai < args.size()) {
    if (!f.varargs) {
      std::size_t required = static_cast<std::size_t>(
          std::count_if(positional.begin(), positional.end(), [](const param* p) { return !p->def; }));
      std::string takes = required == positional.size()
                              ? std::to_string(positional.size()) + " positional argument" +
                                    (positional.size() == 1 ? "" : "s")
                              : "from " + std::to_string(required) + " to " + std::to_string(positional.size()) +
                                    " positional arguments";
      return exec_error{exec_error::kind::type, fname + " takes " + takes + " but " + std::to_string(args.size()) +
                                                    (args.size() == 1 ? " was" : " were") + " given"};
    }
    for (; ai < args.size(); ++ai) b.varargs.push_back(args[ai]);
  }
  for (const auto& [k, v] : kwargs.items()) {
    if (has_param(k)) {
      if (b.named.contains(k))
        return exec_error{exec_error::kind::type, fname + " got multiple values for argument '" + k + "'"};
      b.named[k] = v;
    } else {
      b.kwargs[k] = v;
    }
  }
  std::vector<std::string> missing, missing_kw;
  for (const auto& p : f.params) {
    if (b.named.contains(p.name)) continue;
    if (p.def) b.named[p.name] = *p.def;
    else (p.kwonly ? missing_kw : missing).push_back(p.name);
  }
  if (!missing.empty())
    return exec_error{exec_error::kind::type, fname + " missing " + std::to_string(missing.size()) +
                                                  " required positional argument" + (missing.size() == 1 ? "" : "s") +
                                                  ": " + quoted_list(missing)};
  if (!missing_kw.empty())
    return exec_error{exec_error::kind::type, fname + " missing " + std::to_string(missing_kw.size()) +
                                                  " required keyword-only argument" +
                                                  (missing_kw.size() == 1 ? "" : "s") + ": " + quoted_list(missing_kw)};
  // Keep declaration order in `named` (nicer for debugging; Python has no order here).
  wire::value ordered = wire::value::object();
  for (const auto& p : f.params) ordered[p.name] = b.named[p.name];
  b.named = std::move(ordered);
  return b;
}

// ---- registry ----------------------------------------------------------------------------

void module_registry::add(fn_spec f) {
  std::string n = f.name;
  fns_[n] = std::move(f);
}

const fn_spec* module_registry::find(const std::string& fun) const {
  auto it = fns_.find(fun);
  return it == fns_.end() ? nullptr : &it->second;
}

std::vector<std::string> module_registry::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : fns_) out.push_back(n);
  return out;
}

void register_mine_module(module_registry& r);  // minion/mod_mine.cpp
void register_event_module(module_registry& r);  // minion/mod_event.cpp (events part)

const module_registry& module_registry::builtin() {
  static const module_registry reg = [] {
    module_registry r;
    register_test_module(r);
    register_cmd_module(r);
    register_grains_module(r);
    register_pillar_module(r);
    register_cp_module(r);
    register_saltutil_module(r);
    register_sys_module(r);
    register_mine_module(r);
    register_event_module(r);
    return r;
  }();
  return reg;
}

exec_outcome module_registry::call(const std::string& fun, const wire::value& arg_list, call_context& ctx) const {
  exec_outcome o;
  const fn_spec* f = find(fun);
  if (!f) {
    o.ret = missing_fun_string(fun);
    o.retcode = 1;
    o.success = false;
    o.out = "nested";
    o.missing = true;
    return o;
  }
  auto fail = [&](const exec_error& e) {
    switch (e.type) {
      case exec_error::kind::command_not_found:
        o.ret = "Command required for '" + fun + "' not found: " + e.message;
        break;
      case exec_error::kind::execution:
        o.ret = "ERROR: " + e.message;
        break;
      case exec_error::kind::invocation:
      case exec_error::kind::client:
        o.ret = "ERROR executing '" + fun + "': " + e.message;
        break;
      case exec_error::kind::type:
        o.ret = "Passed invalid arguments to " + fun + ": " + e.message + "\n" + f->doc;
        break;
      case exec_error::kind::generic:
        o.ret = "The minion function caused an exception: " + e.message;
        break;
    }
    o.retcode = 1;
    o.success = false;
    o.out = "nested";
    o.error = e;
    return o;
  };
  auto bound = bind_arguments(*f, arg_list, ctx.pub);
  if (!bound) return fail(bound.error());
  ctx.retcode.reset();
  fn_result r = [&]() -> fn_result {
    try {
      return f->handler(ctx, *bound);
    } catch (const std::exception& e) {  // nlohmann/yaml errors inside a module: never escape
      return exec_error{exec_error::kind::generic, e.what()};
    }
  }();
  if (!r) return fail(r.error());
  o.ret = std::move(*r);
  int retcode = ctx.retcode.value_or(0);
  if (retcode == 0 && o.ret.is_object()) {
    for (const char* k : {"result", "success"}) {
      auto it = o.ret.find(k);
      if (it != o.ret.end() && !py_truthy(*it)) retcode = 1;
    }
  }
  o.retcode = retcode;
  o.success = retcode == 0;
  if (f->outputter) o.out = f->outputter;
  return o;
}

// ---- test --------------------------------------------------------------------------------

void register_test_module(module_registry& r) {
  r.add({"test.ping", {}, false, false, "Used to make sure the minion is up and responding. Not an ICMP ping.\n\nReturns ``True``.", {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           spdlog::debug("test.ping received for minion '{}'", ctx.cfg ? ctx.cfg->id : "");
           return wire::value(true);
         }});
  r.add({"test.echo", {{"text", {}}}, false, false, "Return a string - used for testing the connection", {},
         [](call_context&, const bound_args& a) -> fn_result { return a["text"]; }});
  r.add({"test.sleep", {{"length", {}}}, false, false,
         "Instruct the minion to initiate a process that will sleep for a given period of time.", {},
         [](call_context&, const bound_args& a) -> fn_result {
           const wire::value& l = a["length"];
           std::optional<long long> secs;
           if (l.is_number_integer()) secs = l.get<long long>();
           else if (l.is_number_float()) secs = static_cast<long long>(l.get<double>());
           else if (auto t = wire::as_text(l)) secs = parse_py_int(*t);
           if (!secs)
             return exec_error{exec_error::kind::generic,
                               "ValueError: invalid literal for int() with base 10: '" + py_str(l) + "'"};
           if (*secs > 0) std::this_thread::sleep_for(std::chrono::seconds(*secs));
           return wire::value(true);
         }});
  r.add({"test.version", {}, false, false, "Return the version of salt on the minion", {},
         [](call_context&, const bound_args&) -> fn_result { return wire::value(std::string(salt_compat_version)); }});
  r.add({"test.versions_report", {}, false, false, "Returns versions of components used by salt", {},
         [](call_context&, const bound_args&) -> fn_result {
           return wire::value(std::string("Salt Version:\n          Salt: ") + salt_compat_version +
                              "\n\nsylvite Version:\n       sylvite: " + sylvite_version + "\n");
         }});
  r.add({"test.arg", {}, true, true,
         "Print out the data passed into the function ``*args`` and ``kwargs``, this is used to both test the "
         "publication data and CLI argument passing, but also to display the information available within the "
         "publication data.",
         {}, [](call_context&, const bound_args& a) -> fn_result {
           wire::value out = wire::value::object();
           out["args"] = a.varargs;
           out["kwargs"] = a.kwargs;
           return out;
         }});
  r.add({"test.true", {}, false, false, "Always return True", {},
         [](call_context&, const bound_args&) -> fn_result { return wire::value(true); }});
  r.add({"test.false", {}, false, false, "Always return False", {},
         [](call_context&, const bound_args&) -> fn_result { return wire::value(false); }});
  r.add({"test.retcode", {{"code", wire::value(42)}}, false, false,
         "Test that the returncode system is functioning correctly", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           const wire::value& c = a["code"];
           ctx.retcode = c.is_number_integer() ? static_cast<int>(c.get<long long>()) : 42;
           return wire::value(true);
         }});
}

// ---- grains ------------------------------------------------------------------------------

void register_grains_module(module_registry& r) {
  r.add({"grains.items", {{"sanitize", wire::value(false)}}, false, false, "Return all of the minion's grains", "nested",
         [](call_context& ctx, const bound_args&) -> fn_result { return *ctx.grains; }});
  r.add({"grains.item", {}, true, true, "Return one or more grains", "nested",
         [](call_context& ctx, const bound_args& a) -> fn_result {
           wire::value def = a.kwargs.contains("default") ? a.kwargs["default"] : wire::value("");
           std::string delim = ":";
           if (a.kwargs.contains("delimiter"))
             if (auto t = wire::as_text(a.kwargs["delimiter"])) delim = std::string(*t);
           wire::value out = wire::value::object();
           for (const auto& arg : a.varargs) {
             std::string k = py_str(arg);
             out[k] = traverse(*ctx.grains, k, def, delim);
           }
           return out;
         }});
  r.add({"grains.get",
         {{"key", {}}, {"default", wire::value("")}, {"delimiter", wire::value(":")}, {"ordered", wire::value(true)}},
         false,
         false,
         "Attempt to retrieve the named value from grains, if the named value is not available return the passed "
         "default. The default return is an empty string.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           std::string delim = std::string(wire::as_text(a["delimiter"]).value_or(":"));
           return traverse(*ctx.grains, py_str(a["key"]), a["default"], delim);
         }});
  r.add({"grains.ls", {}, false, false, "Return a list of all available grains", {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           std::vector<std::string> keys;
           for (const auto& [k, v] : ctx.grains->items()) keys.push_back(k);
           std::sort(keys.begin(), keys.end());
           wire::value out = wire::value::array();
           for (auto& k : keys) out.push_back(k);
           return out;
         }});
}

// ---- pillar ------------------------------------------------------------------------------

namespace {

// salt.utils.secret.serial (3008.5): every truthy scalar leaf (str, bytes, int, float,
// bool) becomes "**********"; falsy scalars, None and containers' shapes are kept.
wire::value mask_serial(const wire::value& v) {
  if (v.is_object()) {
    wire::value out = wire::value::object();
    for (const auto& [k, x] : v.items()) out[k] = mask_serial(x);
    return out;
  }
  if (v.is_array()) {
    wire::value out = wire::value::array();
    for (const auto& x : v) out.push_back(mask_serial(x));
    return out;
  }
  if (v.is_binary()) return wire::as_bytes(v)->empty() ? v : wire::make_bin("**********");
  if (py_truthy(v) && (v.is_string() || v.is_number() || v.is_boolean())) return wire::value("**********");
  return v;
}

// unmask=None -> the function's default; truthy -> plain values.
wire::value pillar_out(const wire::value& v, const wire::value& unmask, bool default_unmasked) {
  const bool plain = unmask.is_null() ? default_unmasked : py_truthy(unmask);
  return plain ? v : mask_serial(v);
}

// The freshest pillar: from the master when connected (Salt's pillar.items compiles a new
// pillar through _pillar), else the pillar the job started with.
wire::value current_pillar(call_context& ctx) {
  if (ctx.master && !ctx.local) {
    if (auto p = ctx.master->fetch_pillar()) return *p;
    else spdlog::warn("pillar refresh from the master failed ({}); using the cached pillar", p.error().message());
  }
  return *ctx.pillar;
}

wire::value pillar_item(const bound_args& a, const wire::value& pillar) {
  wire::value def = a["default"].is_null() ? wire::value("") : a["default"];
  std::string delim = a["delimiter"].is_null() ? std::string(":") : py_str(a["delimiter"]);
  wire::value out = wire::value::object();
  for (const auto& arg : a.varargs) {
    std::string k = py_str(arg);
    out[k] = traverse(pillar, k, def, delim);
  }
  return out;
}

bool mask_output_enabled(const call_context& ctx) {
  if (!ctx.cfg) return true;
  auto v = wire::get_bool(ctx.cfg->raw, "pillar_mask_output");
  return v.value_or(true);
}

}  // namespace

void register_pillar_module(module_registry& r) {
  // Salt 3008.5 masks pillar values in these functions' returns unless unmask=True
  // (salt.utils.secret.mask_pillar; pillar.items also honours pillar_mask_output: False;
  // pillar.raw defaults to unmasked).
  r.add({"pillar.items",
         {{"pillar", wire::value(), true},
          {"pillar_enc", wire::value(), true},
          {"pillarenv", wire::value(), true},
          {"saltenv", wire::value(), true},
          {"unmask", wire::value(), true}},
         true,
         false,
         "Calls the master for a fresh pillar and generates the pillar data on the fly",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           wire::value p = current_pillar(ctx);
           if (!a.varargs.empty()) return pillar_out(pillar_item(a, p), a["unmask"], false);
           return pillar_out(p, a["unmask"], !mask_output_enabled(ctx));
         }});
  r.add({"pillar.item",
         {{"default", wire::value(), true},
          {"delimiter", wire::value(), true},
          {"pillarenv", wire::value(), true},
          {"saltenv", wire::value(), true},
          {"unmask", wire::value(), true}},
         true,
         false,
         "Return one or more pillar entries from the in-memory pillar data.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           return pillar_out(pillar_item(a, *ctx.pillar), a["unmask"], false);
         }});
  r.add({"pillar.raw", {{"key", wire::value()}, {"unmask", wire::value()}}, false, false,
         "Return the raw pillar data that is currently loaded into the minion.", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           wire::value v = *ctx.pillar;
           if (py_truthy(a["key"])) {
             auto it = ctx.pillar->find(py_str(a["key"]));
             v = it == ctx.pillar->end() ? wire::value::object() : *it;
           }
           return pillar_out(v, a["unmask"], true);
         }});
  r.add({"pillar.get",
         {{"key", {}},
          {"default", wire::value("")},
          {"merge", wire::value(false)},
          {"merge_nested_lists", wire::value()},
          {"delimiter", wire::value(":")},
          {"pillarenv", wire::value()},
          {"saltenv", wire::value()},
          {"unmask", wire::value()}},
         false,
         false,
         "Attempt to retrieve the named value from the in-memory pillar data, if the named value is not available "
         "return the passed default. The default return is an empty string.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           std::string delim = std::string(wire::as_text(a["delimiter"]).value_or(":"));
           const std::string key = py_str(a["key"]);
           const wire::value& def = a["default"];
           if (py_truthy(a["merge"]) && (def.is_object() || def.is_array())) {
             wire::value found = traverse(*ctx.pillar, key, def.is_object() ? wire::value::object() : wire::value::array(), delim);
             if (def.is_object() && found.is_object()) {
               wire::value merged = def;
               merged.update(found, true);
               return pillar_out(merged, a["unmask"], false);
             }
             if (def.is_array() && found.is_array()) {
               wire::value merged = def;
               for (const auto& x : found)
                 if (std::find(merged.begin(), merged.end(), x) == merged.end()) merged.push_back(x);
               return pillar_out(merged, a["unmask"], false);
             }
           }
           return pillar_out(traverse(*ctx.pillar, key, def, delim), a["unmask"], false);
         }});
}

// ---- saltutil ----------------------------------------------------------------------------

void register_saltutil_module(module_registry& r) {
  r.add({"saltutil.running", {}, false, false, "Return the data on all running salt processes on the minion", {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           wire::value out = wire::value::array();
           if (ctx.running)
             for (auto& j : ctx.running->list(ctx.jid)) out.push_back(std::move(j));
           return out;
         }});
  r.add({"saltutil.find_job", {{"jid", {}}}, false, false,
         "Return the data for a specific job id that is currently running.", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           const std::string jid = py_str(a["jid"]);
           if (ctx.running)
             for (auto& j : ctx.running->list(ctx.jid))
               if (wire::get_text(j, "jid").value_or("") == jid) return j;
           return wire::value::object();
         }});
  r.add({"saltutil.refresh_pillar",
         {{"wait", wire::value(false)}, {"timeout", wire::value(30)}, {"clean_cache", wire::value(true)}},
         false,
         true,
         "Signal the minion to refresh the in-memory pillar data.",
         {},
         [](call_context& ctx, const bound_args&) -> fn_result {
           if (ctx.master && !ctx.local) {
             auto p = ctx.master->fetch_pillar();  // the driver stores the new pillar
             if (!p) return wire::value(false);
           }
           return wire::value(true);
         }});
  r.add({"saltutil.sync_all",
         {{"saltenv", wire::value()}, {"refresh", wire::value(true)}, {"extmod_whitelist", wire::value()},
          {"extmod_blacklist", wire::value()}, {"clean_pillar_cache", wire::value(false)}},
         false,
         false,
         "Sync down all of the dynamic modules from the file server (sylvite has no dynamic modules: nothing to sync).",
         {},
         [](call_context&, const bound_args&) -> fn_result {
           wire::value out = wire::value::object();
           for (const char* k : {"beacons", "clouds", "engines", "executors", "grains", "log_handlers", "matchers",
                                 "modules", "output", "proxymodules", "renderers", "returners", "sdb", "serializers",
                                 "states", "thorium", "utils"})
             out[k] = wire::value::array();
           return out;
         }});
}

// ---- sys ---------------------------------------------------------------------------------

namespace {

bool fun_selected(const std::string& name, const wire::value& patterns) {
  if (!patterns.is_array() || patterns.empty()) return true;
  for (const auto& p : patterns) {
    std::string pat = py_str(p);
    if (pat.find_first_of("*?[") != std::string::npos) {
      if (match::glob_match(pat, name)) return true;
    } else if (name == pat || name.rfind(pat + ".", 0) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

void register_sys_module(module_registry& r) {
  r.add({"sys.list_functions", {}, true, true, "List the functions for all modules.", {},
         [](call_context&, const bound_args& a) -> fn_result {
           wire::value out = wire::value::array();
           for (const auto& n : module_registry::builtin().names())
             if (fun_selected(n, a.varargs)) out.push_back(n);
           return out;
         }});
  r.add({"sys.list_modules", {}, true, false, "List the modules loaded on the minion", {},
         [](call_context&, const bound_args& a) -> fn_result {
           std::vector<std::string> mods;
           for (const auto& n : module_registry::builtin().names()) {
             std::string m = n.substr(0, n.find('.'));
             bool sel = a.varargs.empty();
             for (const auto& p : a.varargs)
               if (match::glob_match(py_str(p), m)) sel = true;
             if (sel && std::find(mods.begin(), mods.end(), m) == mods.end()) mods.push_back(m);
           }
           wire::value out = wire::value::array();
           for (auto& m : mods) out.push_back(m);
           return out;
         }});
  r.add({"sys.doc", {}, true, false, "Return the docstrings for all modules.", {},
         [](call_context&, const bound_args& a) -> fn_result {
           wire::value out = wire::value::object();
           const auto& reg = module_registry::builtin();
           for (const auto& n : reg.names())
             if (fun_selected(n, a.varargs)) out[n] = reg.find(n)->doc;
           return out;
         }});
}

}  // namespace sylvite::minion
