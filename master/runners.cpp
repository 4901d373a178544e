// sylvite::master runners, mirroring salt/runners/{jobs,manage,fileserver,saltutil}.py
// (3008.5) over the job store, the key store and the runner_context callbacks.
// What sylvite decides where Salt has a Python loader:
//   saltutil.sync_* on the master: Salt copies salt://_<form>/*.py into
//   extension_modules for its loader. sylvite's master has no Python loader, so nothing
//   is ever synced: the answer is Salt's shape with every list empty (what Salt answers
//   when there is nothing new), and each custom module file found under file_roots is
//   logged once as a warning (it would not run on sylvite's master).
//   fileserver.update: sylvite's roots file server reads file_roots live (no file list or
//   mtime cache to refresh): True, as Salt; fileserver.clear_file_list_cache: {} (nothing
//   cached), as Salt with no cache.
// Arguments: positional `args`, keyword `kwargs`; a positional "name=value" string for a
// known parameter name counts as a keyword (what salt-run's parse_input does).
// Errors (retcode 1) use Salt's texts: "Passed invalid arguments: <fun>() missing 1
// required positional argument: '<p>'."; an unknown runner is "'<fun>' is not available."
// with retcode 0 (salt-run 3008.5's exit code).
// Thread-safety: stateless; the context's callbacks must be thread-safe.
#include "master/runners.hpp"

#include <spdlog/spdlog.h>

#include <ifaddrs.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/match/match.hpp"
#include "master/detail.hpp"
#include "master/fileserver.hpp"
#include "sylvite/version.hpp"

namespace sylvite::master {
namespace {

struct call_args {
  std::vector<wire::value> pos;
  std::map<std::string, wire::value> kw;
};

// Positional args with "key=value" strings for known names moved into kwargs.
call_args split_args(const wire::value& args, const wire::value& kwargs, const std::set<std::string>& names) {
  call_args out;
  if (args.is_array()) {
    for (const auto& a : args) {
      if (auto t = wire::as_text(a)) {
        auto eq = t->find('=');
        if (eq != std::string_view::npos && names.contains(std::string(t->substr(0, eq)))) {
          out.kw[std::string(t->substr(0, eq))] = std::string(t->substr(eq + 1));
          continue;
        }
      }
      out.pos.push_back(a);
    }
  } else if (!args.is_null()) {
    out.pos.push_back(args);
  }
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      if (!it.key().starts_with("__")) out.kw[it.key()] = *it;
  return out;
}

// Parameter by position or name.
const wire::value* param(const call_args& a, std::size_t index, const std::string& name) {
  if (auto it = a.kw.find(name); it != a.kw.end()) return &it->second;
  if (index < a.pos.size()) return &a.pos[index];
  return nullptr;
}

std::optional<std::string> text_param(const call_args& a, std::size_t index, const std::string& name) {
  const wire::value* v = param(a, index, name);
  if (!v) return std::nullopt;
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_number_integer()) return v->dump();  // a jid typed without quotes
  return std::nullopt;
}

bool truthy(const wire::value* v, bool def) {
  if (!v) return def;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer()) return v->get<std::int64_t>() != 0;
  if (auto t = wire::as_text(*v)) {
    std::string s(*t);
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s == "true" || s == "yes" || s == "1" || s == "on";
  }
  return def;
}

runner_outcome fail(std::string msg) {
  runner_outcome o;
  o.ret = std::move(msg);
  o.retcode = 1;
  return o;
}

// Salt's answer to a function it does not have: the message, and exit code 0 (salt-run
// 3008.5 exits 0: the error is only printed; checked by the interop differential test).
runner_outcome not_available(const std::string& fun) {
  runner_outcome o;
  o.ret = "'" + fun + "' is not available.";
  o.retcode = 0;
  return o;
}

runner_outcome missing(const std::string& fun, const std::string& p) {
  auto dot = fun.find('.');
  return fail("Passed invalid arguments: " + fun.substr(dot + 1) + "() missing 1 required positional argument: '" + p +
              "'.");
}

// salt.utils.jid.format_jid_instance.
wire::value format_jid_instance(const std::string& jid, const wire::value& job) {
  auto get = [&](const char* k, wire::value def) -> wire::value {
    if (const auto* v = wire::find(job, k)) return *v;
    return def;
  };
  wire::value r = wire::value::object();
  r["Function"] = get("fun", "unknown-function");
  wire::value arg = get("arg", wire::value::array());
  r["Arguments"] = arg.is_array() ? arg : wire::value::array({arg});
  r["Target"] = get("tgt", "unknown-target");
  r["Target-type"] = get("tgt_type", "list");
  r["User"] = get("user", "root");
  if (const auto* m = wire::find(job, "metadata")) {
    r["Metadata"] = *m;
  } else if (const auto* kw = wire::find(job, "kwargs"); kw && kw->is_object() && kw->contains("metadata")) {
    r["Metadata"] = (*kw)["metadata"];
  } else if (arg.is_array()) {
    for (const auto& a : arg)
      if (a.is_object() && a.contains("__kwarg__") && a["__kwarg__"] == true && a.contains("metadata")) {
        r["Metadata"] = a["metadata"];
        break;
      }
  }
  r["StartTime"] = detail::jid_to_time(jid);
  return r;
}

// salt/runners/jobs.py _format_jid_instance: an empty load is an Error; the load's
// Minions (local_cache get_load adds them, sorted) are kept.
wire::value format_jid_instance_jobs(const std::string& jid, const wire::value& job,
                                     const std::vector<std::string>& minions) {
  wire::value r;
  if (!job.is_object() || job.empty()) {
    r = wire::value::object();
    r["Error"] = "Cannot contact returner or no job with this jid";
  } else {
    r = format_jid_instance(jid, job);
    r.erase("StartTime");
  }
  if (!minions.empty()) {
    std::set<std::string> m(minions.begin(), minions.end());
    r["Minions"] = wire::value(std::vector<std::string>(m.begin(), m.end()));
  } else if (const auto* jm = wire::find(job, "Minions")) {
    r["Minions"] = *jm;
  }
  r["StartTime"] = detail::jid_to_time(jid);
  return r;
}

// Python's truth value of a return.
bool py_truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string() || v.is_binary() || v.is_array() || v.is_object()) {
    if (v.is_string()) return !v.get_ref<const std::string&>().empty();
    if (v.is_binary()) return !v.get_binary().empty();
    return !v.empty();
  }
  return true;
}

// A time as dateutil.parser.parse reads the forms operators type: "2015, Mar 16 19:00",
// "Mar 16 2015 19:00:00.5", "2015-03-16 19:00", "2015-03-16T19:00:00", "03/16/2015",
// "19:00" (today). Missing date parts are today's (UTC), a missing time is 00:00:00.
// Comparable tuple (year, month, day, hour, minute, second, microsecond).
using when_t = std::tuple<int, int, int, int, int, int, int>;
std::optional<when_t> parse_when(const std::string& text) {
  static const char* months[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                 "jul", "aug", "sep", "oct", "nov", "dec"};
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  int Y = tm.tm_year + 1900, M = tm.tm_mon + 1, D = tm.tm_mday, h = 0, mi = 0, sec = 0, us = 0;
  bool have_date = false, have_time = false, month_named = false;
  std::vector<std::string> nums;
  std::string tok;
  std::vector<std::string> toks;
  for (char c : text + " ") {
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '-' || c == '/' || c == 'T') {
      if (!tok.empty()) toks.push_back(tok);
      tok.clear();
      if (c == '-' || c == '/') toks.emplace_back(1, c);
    } else {
      tok += c;
    }
  }
  std::vector<int> date_nums;
  bool year_first = false;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const auto& t = toks[i];
    if (t == "-" || t == "/") continue;
    if (t.find(':') != std::string::npos) {
      int a = 0, b = 0, c = 0;
      double frac = 0;
      std::string tt = t;
      std::replace(tt.begin(), tt.end(), ':', ' ');
      std::istringstream is(tt);
      if (!(is >> a >> b)) return std::nullopt;
      std::string rest;
      if (is >> rest) {
        try {
          std::size_t used = 0;
          double s = std::stod(rest, &used);
          if (used != rest.size()) return std::nullopt;
          c = static_cast<int>(s);
          frac = s - c;
        } catch (...) {
          return std::nullopt;
        }
      }
      if (a > 23 || b > 59 || c > 59) return std::nullopt;
      h = a, mi = b, sec = c, us = static_cast<int>(frac * 1000000 + 0.5);
      have_time = true;
      continue;
    }
    std::string low = t;
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return std::tolower(ch); });
    bool named = false;
    for (int m = 0; m < 12; ++m)
      if (low.size() >= 3 && low.compare(0, 3, months[m]) == 0) {
        M = m + 1;
        month_named = named = have_date = true;
      }
    if (named) continue;
    if (!std::all_of(t.begin(), t.end(), [](unsigned char ch) { return std::isdigit(ch); })) return std::nullopt;
    if (date_nums.empty() && t.size() == 4) year_first = true;
    date_nums.push_back(std::stoi(t.substr(0, 9)));
    have_date = true;
  }
  if (!have_date && !have_time) return std::nullopt;
  if (month_named) {
    for (int n : date_nums) {
      if (n > 31) Y = n;
      else D = n;
    }
  } else if (year_first) {
    if (date_nums.size() > 0) Y = date_nums[0];
    if (date_nums.size() > 1) M = date_nums[1];
    if (date_nums.size() > 2) D = date_nums[2];
  } else if (!date_nums.empty()) {
    if (date_nums.size() == 1) {
      if (date_nums[0] > 31) Y = date_nums[0];
      else D = date_nums[0];
    } else {
      M = date_nums[0];
      D = date_nums[1];
      if (date_nums.size() > 2) Y = date_nums[2] < 100 ? 2000 + date_nums[2] : date_nums[2];
    }
  }
  if (M < 1 || M > 12 || D < 1 || D > 31) return std::nullopt;
  return when_t{Y, M, D, h, mi, sec, us};
}

// when_t of a jid (its StartTime).
std::optional<when_t> jid_when(const std::string& jid) {
  if (jid.size() < 20) return std::nullopt;
  for (int i = 0; i < 20; ++i)
    if (!std::isdigit(static_cast<unsigned char>(jid[i]))) return std::nullopt;
  auto n = [&](int off, int len) { return std::stoi(jid.substr(off, len)); };
  return when_t{n(0, 4), n(4, 2), n(6, 2), n(8, 2), n(10, 2), n(12, 2), n(14, 6)};
}

std::vector<std::string> split_input(const wire::value& v) {
  std::vector<std::string> out;
  auto add_csv = [&](std::string_view s) {
    std::size_t pos = 0;
    while (pos <= s.size()) {
      auto c = s.find(',', pos);
      if (c == std::string_view::npos) c = s.size();
      std::string part(s.substr(pos, c - pos));
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      if (!part.empty()) out.push_back(part);
      pos = c + 1;
    }
  };
  if (v.is_array()) {
    for (const auto& e : v)
      if (auto t = wire::as_text(e)) add_csv(*t);
  } else if (auto t = wire::as_text(v)) {
    add_csv(*t);
  }
  return out;
}

runner_outcome jobs_list_jobs(const runner_context& ctx, const call_args& a) {
  if (!ctx.jobs) return fail("The job cache is not available.");
  const wire::value* sf = param(a, 99, "search_function");
  const wire::value* st = param(a, 99, "search_target");
  const wire::value* sm = param(a, 99, "search_metadata");
  auto funs = sf ? split_input(*sf) : std::vector<std::string>{};
  auto tgts = st ? split_input(*st) : std::vector<std::string>{};
  std::optional<when_t> start, end;
  for (auto [name, slot] : {std::pair{"start_time", &start}, std::pair{"end_time", &end}}) {
    const wire::value* v = param(a, 99, name);
    if (!v || !py_truthy(*v)) continue;
    std::string t = wire::as_text(*v) ? std::string(*wire::as_text(*v)) : v->dump();
    *slot = parse_when(t);
    if (!*slot) return fail("Exception occurred in runner jobs.list_jobs: ParserError: Unknown string format: " + t);
  }
  auto jobs = ctx.jobs->list_jobs();
  std::reverse(jobs.begin(), jobs.end());  // oldest first: the order salt-run prints
  wire::value out = wire::value::object();
  for (const auto& j : jobs) {
    wire::value f = format_jid_instance(j.jid, j.load);
    bool ok = true;
    if (sm && !sm->is_null()) {
      ok = false;
      if (sm->is_object() && f.contains("Metadata") && f["Metadata"].is_object())
        for (auto it = sm->begin(); it != sm->end(); ++it)
          if (f["Metadata"].contains(it.key()) && f["Metadata"][it.key()] == *it) ok = true;
    }
    if (ok && !tgts.empty()) {
      ok = false;
      std::vector<std::string> targets;
      if (f["Target"].is_array()) {
        for (const auto& t : f["Target"])
          if (auto s = wire::as_text(t)) targets.emplace_back(*s);
      } else if (auto s = wire::as_text(f["Target"])) {
        targets.emplace_back(*s);
      }
      for (const auto& t : targets)
        for (const auto& k : tgts)
          if (match::glob_match(k, t)) ok = true;
    }
    if (ok && !funs.empty()) {
      ok = false;
      if (auto fn = wire::as_text(f["Function"]))
        for (const auto& k : funs)
          if (match::glob_match(k, *fn)) ok = true;
    }
    if (ok && start) {
      auto w = jid_when(j.jid);
      ok = w && *w >= *start;
    }
    if (ok && end) {
      auto w = jid_when(j.jid);
      ok = w && *w <= *end;
    }
    if (ok) out[j.jid] = std::move(f);
  }
  runner_outcome o;
  if (auto op = text_param(a, 1, "outputter"); op && !op->empty()) {
    wire::value w = wire::value::object();
    w["outputter"] = *op;
    w["data"] = std::move(out);
    o.ret = std::move(w);
    return o;
  }
  o.ret = std::move(out);
  return o;
}

runner_outcome jobs_lookup_jid(const runner_context& ctx, const call_args& a) {
  auto jid = text_param(a, 0, "jid");
  if (!jid) return missing("jobs.lookup_jid", "jid");
  if (!ctx.jobs) return fail("The job cache is not available.");
  const bool returned = truthy(param(a, 2, "returned"), true);
  const bool want_missing = truthy(param(a, 3, "missing"), false);
  wire::value returns = ctx.jobs->get_returns(*jid);
  wire::value ret = wire::value::object();
  if (returned)
    for (auto it = returns.begin(); it != returns.end(); ++it)
      ret[it.key()] = it->is_object() && it->contains("return") ? (*it)["return"] : wire::value(nullptr);
  if (want_missing)
    for (const auto& m : ctx.jobs->get_minions(*jid))
      if (!returns.contains(m)) ret[m] = "Minion did not return";
  // As Salt: the first return's "out" selects the outputter.
  if (!returns.empty()) {
    const auto& first = *returns.begin();
    if (first.is_object() && first.contains("out"))
      if (auto out = wire::as_text(first["out"]); out && !out->empty()) {
        wire::value w = wire::value::object();
        w["outputter"] = std::string(*out);
        w["data"] = std::move(ret);
        runner_outcome o;
        o.ret = std::move(w);
        return o;
      }
  }
  runner_outcome o;
  o.ret = std::move(ret);
  return o;
}

runner_outcome jobs_print_job(const runner_context& ctx, const call_args& a) {
  auto jid = text_param(a, 0, "jid");
  if (!jid) return missing("jobs.print_job", "jid");
  if (!ctx.jobs) return fail("The job cache is not available.");
  auto load = ctx.jobs->get_load(*jid);
  wire::value job = format_jid_instance_jobs(*jid, load && load->is_object() ? *load : wire::value::object(),
                                             ctx.jobs->get_minions(*jid));
  job["Result"] = ctx.jobs->get_returns(*jid);
  wire::value out = wire::value::object();
  out[*jid] = std::move(job);
  runner_outcome o;
  o.ret = std::move(out);
  return o;
}

// jobs.list_job: {"jid": jid, <the job>, "Result": {id: stored return}}.
wire::value list_job(const runner_context& ctx, const std::string& jid) {
  auto load = ctx.jobs->get_load(jid);
  wire::value job = format_jid_instance_jobs(jid, load && load->is_object() ? *load : wire::value::object(),
                                             ctx.jobs->get_minions(jid));
  wire::value r = wire::value::object();
  r["jid"] = jid;
  for (auto it = job.begin(); it != job.end(); ++it) r[it.key()] = *it;
  r["Result"] = ctx.jobs->get_returns(jid);
  return r;
}

runner_outcome jobs_list_job(const runner_context& ctx, const call_args& a) {
  auto jid = text_param(a, 0, "jid");
  if (!jid) return missing("jobs.list_job", "jid");
  if (!ctx.jobs) return fail("The job cache is not available.");
  runner_outcome o;
  o.ret = list_job(ctx, *jid);
  return o;
}

// jobs.exit_success: every expected minion -> its return is truthy (False when missing).
runner_outcome jobs_exit_success(const runner_context& ctx, const call_args& a) {
  auto jid = text_param(a, 0, "jid");
  if (!jid) return missing("jobs.exit_success", "jid");
  if (!ctx.jobs) return fail("The job cache is not available.");
  wire::value data = list_job(ctx, *jid);
  const wire::value& result = data["Result"];
  wire::value ret = wire::value::object();
  if (data.contains("Minions") && data["Minions"].is_array())
    for (const auto& m : data["Minions"]) {
      auto id = wire::as_text(m);
      if (!id) continue;
      std::string k(*id);
      ret[k] = result.is_object() && result.contains(k) && result[k].is_object() && result[k].contains("return") &&
               py_truthy(result[k]["return"]);
    }
  if (result.is_object())
    for (auto it = result.begin(); it != result.end(); ++it)
      if (it->is_object() && it->contains("return") && py_truthy((*it)["return"])) ret[it.key()] = true;
  runner_outcome o;
  o.ret = std::move(ret);
  return o;
}

// jobs.active: saltutil.running on every minion, grouped by jid (Salt's shape).
runner_outcome jobs_active(const runner_context& ctx, const call_args&) {
  wire::value ret = wire::value::object();
  wire::value active = ctx.collect ? ctx.collect("saltutil.running", std::chrono::seconds(ctx.timeout))
                                   : wire::value::object();
  for (auto it = active.begin(); it != active.end(); ++it) {
    const wire::value* data = wire::find(*it, "return");
    if (!data || !data->is_array()) continue;
    for (const auto& job : *data) {
      if (!job.is_object()) continue;
      auto jidv = wire::find(job, "jid");
      if (!jidv) continue;
      std::string jid = wire::as_text(*jidv) ? std::string(*wire::as_text(*jidv)) : jidv->dump();
      wire::value pid = job.contains("pid") ? job["pid"] : wire::value(nullptr);
      wire::value run = wire::value::object();
      run[it.key()] = pid;
      if (!ret.contains(jid)) {
        wire::value f = format_jid_instance_jobs(jid, job, {});
        f["Running"] = wire::value::array({run});
        f["Returned"] = wire::value::array();
        ret[jid] = std::move(f);
      } else {
        ret[jid]["Running"].push_back(run);
      }
    }
  }
  if (ctx.jobs)
    for (auto it = ret.begin(); it != ret.end(); ++it) {
      wire::value got = ctx.jobs->get_returns(it.key());
      for (auto r = got.begin(); r != got.end(); ++r) (*it)["Returned"].push_back(r.key());
    }
  runner_outcome o;
  o.ret = std::move(ret);
  return o;
}

// Accepted ids selected by tgt/tgt_type (glob, pcre or list; other types: all).
std::vector<std::string> targeted(const runner_context& ctx, const call_args& a) {
  std::vector<std::string> acc;
  if (ctx.keys) acc = ctx.keys->list(pki::key_state::accepted);
  std::string tgt = text_param(a, 0, "tgt").value_or("*");
  std::string type = text_param(a, 1, "tgt_type").value_or("glob");
  if (tgt == "*" && type == "glob") return acc;
  std::vector<std::string> out;
  for (const auto& id : acc) {
    match::minion_facts f;
    f.id = id;
    const wire::value* tv = param(a, 0, "tgt");
    if (match::matches(tv ? *tv : wire::value(tgt), type, f)) out.push_back(id);
  }
  return out;
}

// {"up": [...], "down": [...]} for the targeted accepted minions, via ping_all.
wire::value status_of(const runner_context& ctx, const call_args& a) {
  auto expected = targeted(ctx, a);
  int timeout = ctx.timeout;
  if (const auto* t = param(a, 2, "timeout")) {
    if (t->is_number_integer() && t->get<std::int64_t>() > 0)
      timeout = static_cast<int>(t->get<std::int64_t>());
    else if (auto s = wire::as_text(*t)) {
      try {
        int v = std::stoi(std::string(*s));
        if (v > 0) timeout = v;
      } catch (...) {
      }
    }
  }
  std::set<std::string> responders;
  if (ctx.ping_all && !expected.empty())
    for (auto& id : ctx.ping_all(std::chrono::seconds(timeout))) responders.insert(std::move(id));
  std::set<std::string> exp(expected.begin(), expected.end());
  wire::value up = wire::value::array(), down = wire::value::array();
  for (const auto& id : responders)
    if (exp.contains(id)) up.push_back(id);
  for (const auto& id : exp)
    if (!responders.contains(id)) down.push_back(id);
  wire::value r = wire::value::object();
  r["up"] = std::move(up);
  r["down"] = std::move(down);
  return r;
}

std::vector<std::string> present_ids(const runner_context& ctx) {
  std::set<std::string> ids;
  if (ctx.connected_ids)
    for (auto& id : ctx.connected_ids()) ids.insert(std::move(id));
  return {ids.begin(), ids.end()};
}

std::optional<std::set<std::string>> subset_of(const call_args& a) {
  const wire::value* s = param(a, 0, "subset");
  if (!s || s->is_null()) return std::nullopt;
  auto v = split_input(*s);
  return std::set<std::string>(v.begin(), v.end());
}

// ---- presence with show_ip (salt.utils.minions.CkMinions.connected_ids)

// This host's addresses (no loopback): salt.utils.network.ip_addrs / ip_addrs6.
std::set<std::string> host_addrs(bool v6) {
  std::set<std::string> out;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return out;
  for (auto* p = ifa; p; p = p->ifa_next) {
    if (!p->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (!v6 && p->ifa_addr->sa_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(p->ifa_addr);
      if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) continue;
      if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) out.insert(buf);
    } else if (v6 && p->ifa_addr->sa_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(p->ifa_addr);
      if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) continue;
      if (inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf)) out.insert(buf);
    }
  }
  freeifaddrs(ifa);
  return out;
}

// Salt's local_port_tcp(port): remote addresses of established connections whose local
// port is `port` (/proc/net/tcp and tcp6), loopback replaced by this host's addresses.
std::set<std::string> proc_publish_peers(int port) {
  std::set<std::string> addrs;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream is(line);
      std::string sl, local, remote, st;
      if (!(is >> sl >> local >> remote >> st)) continue;
      if (st != "01") continue;  // ESTABLISHED
      auto lc = local.rfind(':'), rc = remote.rfind(':');
      if (lc == std::string::npos || rc == std::string::npos) continue;
      int lport = 0;
      try {
        lport = std::stoi(local.substr(lc + 1), nullptr, 16);
      } catch (...) {
        continue;
      }
      if (lport != port) continue;
      std::string hex = remote.substr(0, rc);
      char buf[INET6_ADDRSTRLEN] = {};
      if (hex.size() == 8) {
        in_addr a{};
        a.s_addr = static_cast<in_addr_t>(std::stoul(hex, nullptr, 16));
        if (inet_ntop(AF_INET, &a, buf, sizeof buf)) addrs.insert(buf);
      } else if (hex.size() == 32) {
        in6_addr a{};
        for (int w = 0; w < 4; ++w) {
          auto word = static_cast<std::uint32_t>(std::stoul(hex.substr(w * 8, 8), nullptr, 16));
          std::memcpy(&a.s6_addr[w * 4], &word, 4);
        }
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
          in_addr v4{};
          std::memcpy(&v4, &a.s6_addr[12], 4);
          if (inet_ntop(AF_INET, &v4, buf, sizeof buf)) addrs.insert(buf);
        } else if (inet_ntop(AF_INET6, &a, buf, sizeof buf)) {
          addrs.insert(buf);
        }
      }
    }
  }
  if (addrs.erase("127.0.0.1")) addrs.merge(host_addrs(false));
  if (addrs.erase("::1")) addrs.merge(host_addrs(true));
  return addrs;
}

// manage.present & co: sorted ids, or {id: ip} with show_ip.
wire::value list_state(const runner_context& ctx, const std::optional<std::set<std::string>>& subset, bool show_ip) {
  auto ids = present_ids(ctx);
  if (!show_ip) {
    wire::value out = wire::value::array();
    for (const auto& id : ids)
      if (!subset || subset->contains(id)) out.push_back(id);
    return out;
  }
  std::set<std::string> addrs;
  if (ctx.publish_peers) addrs = ctx.publish_peers();
  else if (ctx.cfg) addrs = proc_publish_peers(ctx.cfg->publish_port);
  wire::value out = wire::value::object();
  for (const auto& id : ids) {
    if (subset && !subset->contains(id)) continue;
    wire::value g = ctx.grains ? ctx.grains(id) : wire::value(nullptr);
    wire::value ip = nullptr;
    for (const char* fam : {"ipv6", "ipv4"}) {  // Salt: an ipv6 match overrides (set of tuples, dict())
      if (const auto* l = wire::find(g, fam); l && l->is_array())
        for (const auto& a : *l)
          if (auto t = wire::as_text(a); t && addrs.contains(std::string(*t))) {
            if (ip.is_null()) ip = std::string(*t);
            break;
          }
    }
    out[id] = ip;
  }
  return out;
}

wire::value list_not_state(const runner_context& ctx, const std::optional<std::set<std::string>>& subset) {
  auto present = present_ids(ctx);
  std::set<std::string> p(present.begin(), present.end());
  wire::value out = wire::value::array();
  if (ctx.keys)
    for (const auto& id : ctx.keys->list(pki::key_state::accepted))
      if (!p.contains(id) && (!subset || subset->contains(id))) out.push_back(id);
  return out;
}

// ---- manage.versions

// SaltStackVersion enough for cmp: numeric parts, then a pre-release (rcN) sorts before
// the release. (numbers, is_release, rc)
std::tuple<std::vector<int>, int, int> parse_version(const std::string& v) {
  std::vector<int> nums;
  std::size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    int n = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) n = n * 10 + (v[i++] - '0');
    nums.push_back(n);
    if (i < v.size() && v[i] == '.') ++i;
    else break;
  }
  while (nums.size() < 3) nums.push_back(0);
  int rc = 0, release = 1;
  if (auto p = v.find("rc", i); p != std::string::npos) {
    release = 0;
    rc = std::atoi(v.c_str() + p + 2);
  }
  return {nums, release, rc};
}

runner_outcome manage_versions(const runner_context& ctx) {
  static const std::map<int, std::string> labels = {{-2, "Minion offline"},
                                                    {-1, "Minion requires update"},
                                                    {0, "Up to date"},
                                                    {1, "Minion newer than master"}};
  const std::string master_version = salt_compat_version;
  wire::value rets = ctx.collect ? ctx.collect("test.version", std::chrono::seconds(ctx.timeout))
                                 : wire::value::object();
  wire::value ret = wire::value::object();
  const auto mv = parse_version(master_version);
  for (auto it = rets.begin(); it != rets.end(); ++it) {
    const wire::value* r = wire::find(*it, "return");
    const wire::value* rc = wire::find(*it, "retcode");
    bool failed = rc && ((rc->is_number_integer() && rc->get<std::int64_t>() != 0) ||
                         (rc->is_number_unsigned() && rc->get<std::uint64_t>() != 0));
    auto text = r ? wire::as_text(*r) : std::nullopt;
    if (!r || !py_truthy(*r) || failed || !text) {
      ret[labels.at(-2)][it.key()] = false;
      continue;
    }
    auto v = parse_version(std::string(*text));
    int diff = v < mv ? -1 : (mv < v ? 1 : 0);
    ret[labels.at(diff)][it.key()] = std::string(*text);
  }
  ret["Master"] = master_version;
  runner_outcome o;
  o.ret = std::move(ret);
  return o;
}

// ---- fileserver

std::vector<std::string> configured_backends(const runner_context& ctx) {
  std::vector<std::string> out;
  const wire::value* fb = ctx.cfg ? wire::find(ctx.cfg->raw, "fileserver_backend") : nullptr;
  if (!fb || fb->is_null()) return {"roots"};
  if (fb->is_array()) {
    for (const auto& b : *fb)
      if (auto t = wire::as_text(b)) out.emplace_back(*t);
  } else if (auto t = wire::as_text(*fb)) {
    out = split_input(*fb);
  }
  return out;
}

// Salt's Fileserver.backends(back): the enabled backends, narrowed by `back` (a list or a
// comma list; all "-x" subtracts). Only backends this master serves count ("roots"):
// the others are skipped, as Salt skips a backend whose module is not loaded.
std::vector<std::string> backends(const runner_context& ctx, const wire::value* back) {
  auto enabled = configured_backends(ctx);
  auto served = [&](const std::string& b) {
    return b == "roots" && std::find(enabled.begin(), enabled.end(), "roots") != enabled.end();
  };
  std::vector<std::string> req;
  if (back && py_truthy(*back)) {
    if (back->is_array()) {
      for (const auto& b : *back) req.push_back(wire::as_text(b) ? std::string(*wire::as_text(b)) : b.dump());
    } else {
      std::string t = wire::as_text(*back) ? std::string(*wire::as_text(*back)) : back->dump();
      std::size_t pos = 0;
      while (true) {
        auto c = t.find(',', pos);
        req.push_back(t.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
    }
  } else {
    req = enabled;
  }
  std::vector<std::string> out;
  if (!req.empty() && std::all_of(req.begin(), req.end(), [](const std::string& b) { return b.starts_with("-"); })) {
    out = enabled;
    for (const auto& b : req)
      if (served(b.substr(1))) out.erase(std::remove(out.begin(), out.end(), b.substr(1)), out.end());
  } else {
    for (const auto& b : req)
      if (served(b)) out.push_back(b);
  }
  // Only what this master can serve is asked.
  out.erase(std::remove_if(out.begin(), out.end(), [&](const std::string& b) { return !served(b); }), out.end());
  return out;
}

std::string saltenv_of(const call_args& a) {
  const wire::value* v = param(a, 0, "saltenv");
  if (!v || v->is_null()) return v ? "None" : "base";
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_boolean()) return v->get<bool>() ? "True" : "False";
  return v->dump();
}

runner_outcome fileserver_runner(const runner_context& ctx, const std::string& fun, const call_args& a) {
  runner_outcome o;
  if (fun == "fileserver.envs") {
    std::set<std::string> envs;
    if (ctx.cfg && !backends(ctx, param(a, 0, "backend")).empty())
      for (const auto& [env, _] : ctx.cfg->file_roots) envs.insert(env);
    if (truthy(param(a, 1, "sources"), false)) {
      wire::value r = wire::value::object();
      if (!envs.empty()) r["roots"] = wire::value(std::vector<std::string>(envs.begin(), envs.end()));
      o.ret = std::move(r);
    } else {
      o.ret = wire::value(std::vector<std::string>(envs.begin(), envs.end()));
    }
    return o;
  }
  if (fun == "fileserver.update") {
    (void)backends(ctx, param(a, 0, "backend"));
    o.ret = true;
    return o;
  }
  if (fun == "fileserver.clear_file_list_cache") {
    o.ret = wire::value::object();
    return o;
  }
  // file_list / dir_list / empty_dir_list / symlink_list (saltenv, backend)
  const bool symlinks = fun == "fileserver.symlink_list";
  const bool any = ctx.cfg && !backends(ctx, fun == "fileserver.empty_dir_list" ? nullptr : param(a, 1, "backend")).empty();
  if (!any) {
    o.ret = symlinks ? wire::value::object() : wire::value::array();
    return o;
  }
  static const std::map<std::string, std::string> cmd = {{"fileserver.file_list", "_file_list"},
                                                         {"fileserver.dir_list", "_dir_list"},
                                                         {"fileserver.empty_dir_list", "_file_list_emptydirs"},
                                                         {"fileserver.symlink_list", "_symlink_list"}};
  fileserver fs(*ctx.cfg);
  wire::value load = wire::value::object();
  load["saltenv"] = saltenv_of(a);
  o.ret = fs.handle(cmd.at(fun), load);
  return o;
}

// ---- saltutil (runner): nothing is synced on sylvite's master (see the file comment).

const std::vector<std::pair<std::string, std::string>>& sync_forms() {
  // sync_all's keys in Salt's order, with the directory (_<form>) each syncs.
  static const std::vector<std::pair<std::string, std::string>> f = {
      {"clouds", "clouds"},         {"modules", "modules"},   {"states", "states"},
      {"grains", "grains"},         {"renderers", "renderers"}, {"returners", "returners"},
      {"output", "output"},         {"proxymodules", "proxy"}, {"runners", "runners"},
      {"wheel", "wheel"},           {"engines", "engines"},   {"thorium", "thorium"},
      {"queues", "queues"},         {"pillar", "pillar"},     {"utils", "utils"},
      {"sdb", "sdb"},               {"cache", "cache"},       {"fileserver", "fileserver"},
      {"tops", "tops"},             {"tokens", "tokens"},     {"serializers", "serializers"},
      {"executors", "executors"},   {"wrapper", "wrapper"},   {"roster", "roster"}};
  return f;
}

// Custom modules that Salt would sync from salt://_<dir> in the given saltenvs: logged
// (sylvite's master does not load Python modules).
void warn_custom_modules(const runner_context& ctx, const std::string& dir, const std::string& saltenv) {
  if (!ctx.cfg) return;
  std::stringstream envs(saltenv);
  std::string env;
  while (std::getline(envs, env, ',')) {
    auto it = ctx.cfg->file_roots.find(env);
    if (it == ctx.cfg->file_roots.end()) continue;
    for (const auto& root : it->second) {
      std::error_code ec;
      std::filesystem::path d = std::filesystem::path(root) / ("_" + dir);
      if (!std::filesystem::is_directory(d, ec)) continue;
      for (auto f = std::filesystem::recursive_directory_iterator(d, ec);
           !ec && f != std::filesystem::recursive_directory_iterator(); f.increment(ec)) {
        auto ext = f->path().extension().string();
        if (ext == ".py" || ext == ".pyx" || ext == ".so" || ext == ".zip")
          spdlog::warn("saltutil.sync_{}: {} is not synced: sylvite's master does not load Python modules", dir,
                       f->path().string());
      }
    }
  }
}

runner_outcome saltutil_runner(const runner_context& ctx, const std::string& fun, const call_args& a) {
  std::string saltenv = "base";
  if (auto s = text_param(a, 0, "saltenv")) saltenv = *s;
  runner_outcome o;
  const std::string form = fun.substr(std::string("saltutil.sync_").size());
  if (form == "all") {
    wire::value r = wire::value::object();
    for (const auto& [key, dir] : sync_forms()) {
      warn_custom_modules(ctx, dir, saltenv);
      r[key] = wire::value::array();
    }
    o.ret = std::move(r);
    return o;
  }
  for (const auto& [key, dir] : sync_forms())
    if (dir == form || (form == "eauth_tokens" && key == "tokens") || (form == "proxymodules" && key == "proxymodules"))
      warn_custom_modules(ctx, dir, saltenv);
  o.ret = wire::value::array();
  return o;
}

// sylvite.minions (runners.hpp).
runner_outcome sylvite_minions(const runner_context& ctx, const call_args& a) {
  runner_outcome o;
  std::map<std::string, minion_presence> view;
  if (ctx.presence) {
    view = ctx.presence();
  } else if (ctx.connected_ids) {
    for (const auto& id : ctx.connected_ids()) view[id].masters.push_back(ctx.self_id);
  }
  const auto subset = subset_of(a);
  std::set<std::string> accepted;
  if (ctx.keys)
    for (auto& id : ctx.keys->list(pki::key_state::accepted)) accepted.insert(std::move(id));
  std::set<std::string> ids = accepted;
  for (const auto& [id, m] : view)
    if (!m.masters.empty()) ids.insert(id);
  auto key_of = [&](const std::string& id) -> std::string {
    if (accepted.contains(id)) return "accepted";
    if (!ctx.keys) return "none";
    static const std::pair<pki::key_state, const char*> others[] = {
        {pki::key_state::pending, "pending"}, {pki::key_state::rejected, "rejected"}, {pki::key_state::denied, "denied"}};
    for (const auto& [st, name] : others) {
      auto l = ctx.keys->list(st);
      if (std::binary_search(l.begin(), l.end(), id)) return name;
    }
    return "none";
  };
  wire::value out = wire::value::object();
  for (const auto& id : ids) {
    if (subset && !subset->contains(id)) continue;
    wire::value e = wire::value::object();
    e["key"] = key_of(id);
    auto it = view.find(id);
    const minion_presence none;
    const minion_presence& m = it == view.end() ? none : it->second;
    e["connected"] = !m.masters.empty();
    if (m.masters.empty())
      e["master"] = nullptr;
    else if (std::find(m.masters.begin(), m.masters.end(), ctx.self_id) != m.masters.end())
      e["master"] = ctx.self_id;
    else
      e["master"] = m.masters.front();
    e["masters"] = wire::value(m.masters);
    e["last_seen"] = m.last_ms > 0 ? wire::value(iso_utc_ms(m.last_ms)) : wire::value(nullptr);
    out[id] = std::move(e);
  }
  o.ret = std::move(out);
  return o;
}

const std::map<std::string, std::set<std::string>>& known() {
  static const std::map<std::string, std::set<std::string>> k = {
      {"jobs.active", {"display_progress"}},
      {"jobs.exit_success", {"jid", "ext_source"}},
      {"jobs.list_job", {"jid", "ext_source", "display_progress"}},
      {"manage.versions", {}},
      {"manage.alived", {"subset", "show_ip"}},
      {"manage.not_alived", {"subset", "show_ip"}},
      {"manage.allowed", {"subset", "show_ip"}},
      {"manage.not_allowed", {"subset", "show_ip"}},
      {"manage.joined", {"subset", "show_ip"}},
      {"manage.not_joined", {"subset", "show_ip"}},
      {"manage.reaped", {"subset", "show_ip"}},
      {"manage.not_reaped", {"subset", "show_ip"}},
      {"manage.list_state", {"subset", "show_ip"}},
      {"manage.list_not_state", {"subset", "show_ip"}},
      {"fileserver.envs", {"backend", "sources"}},
      {"fileserver.file_list", {"saltenv", "backend"}},
      {"fileserver.dir_list", {"saltenv", "backend"}},
      {"fileserver.empty_dir_list", {"saltenv", "backend"}},
      {"fileserver.symlink_list", {"saltenv", "backend"}},
      {"fileserver.update", {"backend"}},
      {"fileserver.clear_file_list_cache", {"saltenv", "backend"}},
      {"saltutil.sync_all", {"saltenv", "extmod_whitelist", "extmod_blacklist"}},
      {"jobs.list_jobs", {"ext_source", "outputter", "search_metadata", "search_function", "search_target",
                          "start_time", "end_time", "display_progress"}},
      {"jobs.lookup_jid", {"jid", "ext_source", "returned", "missing", "display_progress"}},
      {"jobs.print_job", {"jid", "ext_source"}},
      {"manage.down", {"removekeys", "tgt", "tgt_type", "timeout", "gather_job_timeout"}},
      {"manage.not_present", {"subset", "show_ip"}},
      {"manage.present", {"subset", "show_ip"}},
      {"manage.status", {"output", "tgt", "tgt_type", "timeout", "gather_job_timeout"}},
      {"manage.up", {"tgt", "tgt_type", "timeout", "gather_job_timeout"}},
      {"sylvite.minions", {"subset"}},
  };
  return k;
}

// saltutil.sync_* runner names (salt/runners/saltutil.py).
const std::set<std::string>& sync_names() {
  static const std::set<std::string> n = [] {
    std::set<std::string> s = {"saltutil.sync_all", "saltutil.sync_eauth_tokens"};
    for (const auto& [key, dir] : sync_forms())
      if (key != "tokens") s.insert("saltutil.sync_" + key);
    return s;
  }();
  return n;
}

bool sync_runner(const std::string& fun) { return sync_names().contains(fun); }

}  // namespace

std::vector<std::string> runner_functions() {
  std::set<std::string> out;
  for (const auto& [k, _] : known()) out.insert(k);
  for (const auto& f : sync_names()) out.insert(f);
  return {out.begin(), out.end()};  // sorted
}

runner_outcome run_runner(const runner_context& ctx, const std::string& fun, const wire::value& args,
                          const wire::value& kwargs) {
  try {
    static const std::set<std::string> sync_params = {"saltenv", "extmod_whitelist", "extmod_blacklist"};
    const bool is_sync = sync_runner(fun);
    auto k = known().find(fun);
    if (k == known().end() && !is_sync) return not_available(fun);
    call_args a = split_args(args, kwargs, is_sync ? sync_params : k->second);
    runner_outcome o;
    if (fun == "jobs.active") return jobs_active(ctx, a);
    if (fun == "jobs.exit_success") return jobs_exit_success(ctx, a);
    if (fun == "jobs.list_job") return jobs_list_job(ctx, a);
    if (fun == "manage.versions") return manage_versions(ctx);
    if (fun.starts_with("fileserver.")) return fileserver_runner(ctx, fun, a);
    if (is_sync) return saltutil_runner(ctx, fun, a);
    if (fun == "manage.alived" || fun == "manage.allowed" || fun == "manage.joined" || fun == "manage.reaped" ||
        fun == "manage.list_state") {
      o.ret = list_state(ctx, subset_of(a), truthy(param(a, 1, "show_ip"), false));
      return o;
    }
    if (fun == "manage.not_alived" || fun == "manage.not_allowed" || fun == "manage.not_joined" ||
        fun == "manage.not_reaped" || fun == "manage.list_not_state") {
      o.ret = list_not_state(ctx, subset_of(a));
      return o;
    }
    if (fun == "jobs.list_jobs") return jobs_list_jobs(ctx, a);
    if (fun == "sylvite.minions") return sylvite_minions(ctx, a);
    if (fun == "jobs.lookup_jid") return jobs_lookup_jid(ctx, a);
    if (fun == "jobs.print_job") return jobs_print_job(ctx, a);
    if (fun == "manage.status") {
      // status(output, tgt, tgt_type, timeout): shift to the tgt-first helpers.
      call_args b = a;
      if (!b.pos.empty()) b.pos.erase(b.pos.begin());
      o.ret = status_of(ctx, b);
      return o;
    }
    if (fun == "manage.up") {
      o.ret = status_of(ctx, a)["up"];
      return o;
    }
    if (fun == "manage.down") {
      // manage.down(removekeys, tgt, ...): key removal is salt-key's job here.
      call_args b = a;
      if (!b.pos.empty()) b.pos.erase(b.pos.begin());
      if (truthy(param(a, 0, "removekeys"), false))
        spdlog::warn("manage.down: removekeys is not supported by sylvite; use salt-key -d");
      o.ret = status_of(ctx, b)["down"];
      return o;
    }
    if (fun == "manage.present") {
      o.ret = list_state(ctx, subset_of(a), truthy(param(a, 1, "show_ip"), false));
      return o;
    }
    if (fun == "manage.not_present") {
      o.ret = list_not_state(ctx, subset_of(a));
      return o;
    }
    return not_available(fun);
  } catch (const std::exception& e) {
    spdlog::error("runner {} failed: {}", fun, e.what());
    return fail("Exception occurred in runner " + fun + ": " + e.what());
  }
}

}  // namespace sylvite::master
