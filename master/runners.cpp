// sylvite::master runners, mirroring salt/runners/jobs.py and salt/runners/manage.py
// (3008) over the local_cache job cache and the runner_context callbacks.
// Arguments: positional `args`, keyword `kwargs`; a positional "name=value" string for a
// known parameter name counts as a keyword (what salt-run's parse_input does).
// Errors (retcode 1) use Salt's texts: "'<fun>' is not available." and
// "Passed invalid arguments: <fun>() missing 1 required positional argument: '<p>'.".
// Thread-safety: stateless; the context's callbacks must be thread-safe.
#include "master/runners.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/match/match.hpp"
#include "master/detail.hpp"

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
    if (ok) out[j.jid] = std::move(f);
  }
  runner_outcome o;
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
  wire::value job = format_jid_instance(*jid, load && load->is_object() ? *load : wire::value::object());
  job["Result"] = ctx.jobs->get_returns(*jid);
  wire::value out = wire::value::object();
  out[*jid] = std::move(job);
  runner_outcome o;
  o.ret = std::move(out);
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

const std::map<std::string, std::set<std::string>>& known() {
  static const std::map<std::string, std::set<std::string>> k = {
      {"jobs.list_jobs", {"ext_source", "outputter", "search_metadata", "search_function", "search_target",
                          "start_time", "end_time", "display_progress"}},
      {"jobs.lookup_jid", {"jid", "ext_source", "returned", "missing", "display_progress"}},
      {"jobs.print_job", {"jid", "ext_source"}},
      {"manage.down", {"removekeys", "tgt", "tgt_type", "timeout", "gather_job_timeout"}},
      {"manage.not_present", {"subset", "show_ip"}},
      {"manage.present", {"subset", "show_ip"}},
      {"manage.status", {"output", "tgt", "tgt_type", "timeout", "gather_job_timeout"}},
      {"manage.up", {"tgt", "tgt_type", "timeout", "gather_job_timeout"}},
  };
  return k;
}

}  // namespace

std::vector<std::string> runner_functions() {
  std::vector<std::string> out;
  for (const auto& [k, _] : known()) out.push_back(k);
  return out;  // sorted (map order)
}

runner_outcome run_runner(const runner_context& ctx, const std::string& fun, const wire::value& args,
                          const wire::value& kwargs) {
  try {
    auto k = known().find(fun);
    if (k == known().end()) return fail("'" + fun + "' is not available.");
    call_args a = split_args(args, kwargs, k->second);
    runner_outcome o;
    if (fun == "jobs.list_jobs") return jobs_list_jobs(ctx, a);
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
      auto subset = subset_of(a);
      wire::value out = wire::value::array();
      for (const auto& id : present_ids(ctx))
        if (!subset || subset->contains(id)) out.push_back(id);
      o.ret = std::move(out);
      return o;
    }
    if (fun == "manage.not_present") {
      auto subset = subset_of(a);
      auto present = present_ids(ctx);
      std::set<std::string> p(present.begin(), present.end());
      wire::value out = wire::value::array();
      if (ctx.keys)
        for (const auto& id : ctx.keys->list(pki::key_state::accepted))
          if (!p.contains(id) && (!subset || subset->contains(id))) out.push_back(id);
      o.ret = std::move(out);
      return o;
    }
    return fail("'" + fun + "' is not available.");
  } catch (const std::exception& e) {
    spdlog::error("runner {} failed: {}", fun, e.what());
    return fail("Exception occurred in runner " + fun + ": " + e.what());
  }
}

}  // namespace sylvite::master
