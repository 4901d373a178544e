// sylvite::master pillar compiler (see pillar.hpp), following Salt 3008.5's
// salt/pillar/__init__.py line by line: PillarCache.compile_pillar -> Pillar.compile_pillar
// (get_top -> top_matches -> render_pillar/render_pstate, ext_pillar) and
// salt/utils/dictupdate.py for the merges. Error texts are Salt's
// (pillar_safe_render_error, default on: render details go to the log, the minion sees
// "Rendering SLS '<x>' failed. Please see master log for details.").
// Thread-safety: compile() keeps its state on the stack; shared_ (cache, log-once) locks.
#include "master/pillar.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/detail.hpp"
#include "master/pillar_ext.hpp"

namespace sylvite::master {
namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

// ---- merges (salt/utils/dictupdate.py, salt/utils/aggregation.py) --------------------

namespace {

// dictupdate.update(dest, upd, merge_lists): dest modified in place.
void dict_update(wire::value& dest, const wire::value& upd, bool merge_lists) {
  for (auto it = upd.begin(); it != upd.end(); ++it) {
    auto dst = dest.find(it.key());
    if (dst != dest.end() && dst->is_object() && it->is_object()) {
      dict_update(*dst, *it, merge_lists);
    } else if (dst != dest.end() && dst->is_array() && it->is_array() && merge_lists) {
      for (const auto& x : *it)
        if (std::find(dst->begin(), dst->end(), x) == dst->end()) dst->push_back(x);
    } else {
      dest[it.key()] = *it;
    }
  }
}

// aggregation.aggregate with plain (unmarked) values below the first level: maps keep
// only obj_b's keys (aggregated where obj_a has them); anything else is obj_b.
wire::value aggregate_plain(const wire::value& a, const wire::value& b) {
  if (!a.is_object() || !b.is_object()) return b;
  wire::value out = b;
  for (auto it = b.begin(); it != b.end(); ++it)
    if (auto ai = a.find(it.key()); ai != a.end()) out[it.key()] = aggregate_plain(*ai, *it);
  return out;
}

// yamlex merge_recursive(a, b, level=1): both sides marked as aggregated maps.
wire::value aggregate_level1(const wire::value& a, const wire::value& b) {
  wire::value out = a;
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (auto ai = a.find(it.key()); ai != a.end())
      out[it.key()] = aggregate_plain(*ai, *it);
    else
      out[it.key()] = *it;
  }
  return out;
}

}  // namespace

wire::value pillar_merge(const wire::value& a, const wire::value& b, bool merge_lists) {
  if (!a.is_object() || !b.is_object()) return b;
  wire::value out = a;
  dict_update(out, b, merge_lists);
  return out;
}

wire::value pillar_merge(const wire::value& a, const wire::value& b, const std::string& strategy_in,
                         const std::string& renderer, bool merge_lists) {
  if (!a.is_object() || !b.is_object()) return b;
  std::string strategy = strategy_in;
  if (strategy == "smart") {
    auto bar = renderer.rfind('|');
    std::string last = bar == std::string::npos ? renderer : renderer.substr(bar + 1);
    strategy = (last == "yamlex" || renderer.starts_with("yamlex_")) ? "aggregate" : "recurse";
  }
  if (strategy == "list") {
    wire::value out = wire::value::object();
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (auto bi = b.find(it.key()); bi != b.end())
        out[it.key()] = wire::value::array({*it, *bi});
      else
        out[it.key()] = *it;
    }
    return out;
  }
  if (strategy == "recurse") return pillar_merge(a, b, merge_lists);
  if (strategy == "aggregate") return aggregate_level1(a, b);
  if (strategy == "overwrite") {
    wire::value out = a;
    for (auto it = b.begin(); it != b.end(); ++it) out[it.key()] = *it;
    return out;
  }
  if (strategy == "none") return pillar_merge(a, b, false);
  spdlog::warn("Unknown merging strategy '{}', fallback to recurse", strategy);
  return pillar_merge(a, b, false);
}

// ---- shared state: log-once set and pillar_cache -------------------------------------

struct pillar_compiler::shared {
  std::mutex mu;
  std::set<std::string> logged;
  struct entry {
    std::int64_t expires = 0;  // unix seconds
    wire::value data;
  };
  std::map<std::string, entry> memory;

  bool first_time(const std::string& key) {
    std::lock_guard lk(mu);
    if (logged.size() > 10000) return false;
    return logged.insert(key).second;
  }
};

namespace {

constexpr int max_include_depth = 64;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string text_of(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_number() || v.is_boolean()) return v.dump();
  return {};
}

// Python truthiness of a rendered value.
bool truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

// dict.update (shallow).
void shallow_update(wire::value& dest, const wire::value& src) {
  if (!src.is_object()) return;
  for (auto it = src.begin(); it != src.end(); ++it) dest[it.key()] = *it;
}

// Relative path components of a salt path; nullopt if it could leave the root.
std::optional<std::string> clean_rel(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != std::string_view::npos) return std::nullopt;
  std::string out;
  std::size_t pos = 0;
  while (pos <= p.size()) {
    std::size_t slash = p.find('/', pos);
    if (slash == std::string_view::npos) slash = p.size();
    std::string_view c = p.substr(pos, slash - pos);
    if (c == "..") return std::nullopt;
    if (!c.empty() && c != ".") {
      if (!out.empty()) out += '/';
      out += c;
    }
    pos = slash + 1;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    auto c = s.find(sep, pos);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

struct located {
  std::string path;
  bool init = false;  // found as <sls>/init.sls
};

// Python's int() of a top file "order" value; nullopt: TypeError.
std::optional<std::int64_t> order_of(const wire::value& o) {
  if (o.is_boolean()) return o.get<bool>() ? 1 : 0;
  if (o.is_number_integer()) return o.get<std::int64_t>();
  if (o.is_number_float()) return static_cast<std::int64_t>(o.get<double>());
  if (auto t = wire::as_text(o)) {
    std::string s(*t);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    s = s.substr(i);
    try {
      std::size_t used = 0;
      auto n = std::stoll(s, &used);
      if (used == s.size()) return n;
    } catch (...) {
    }
    return 0;  // ValueError -> 0
  }
  return std::nullopt;
}


// One compile (Salt's Pillar object for one request).
class compiler {
 public:
  compiler(const config::master_config& cfg, render::renderer& r, std::function<bool(const std::string&)> first_time)
      : cfg_(cfg), renderer_(r), first_time_(std::move(first_time)) {}

  // --- per-request inputs
  std::string minion_id;
  wire::value grains = wire::value::object();
  std::optional<std::string> saltenv;
  std::optional<std::string> pillarenv;
  config::roots_map roots;
  wire::value opts = wire::value::object();
  wire::value pillar_data = wire::value::object();  // Salt's self.pillar_data (`pillar` in templates)
  wire::value extra_minion_data = wire::value::object();
  std::string state_top = "top.sls";
  std::vector<std::string> env_order;
  clock::time_point deadline = clock::time_point::max();
  bool timed_out = false;
  render::call_handler call;  // the templates' calls back to the master

  std::map<std::string, std::vector<std::string>> ignored;  // env -> sls (ignore_missing)

  wire::value merge(const wire::value& a, const wire::value& b) const {
    return pillar_merge(a, b, cfg_.pillar_source_merging_strategy, cfg_.renderer, cfg_.pillar_merge_lists);
  }

  std::vector<std::string> envs() const {  // Salt's _get_envs
    std::vector<std::string> e{"base"};
    for (const auto& [k, _] : roots)
      if (k != "base") e.push_back(k);
    return e;
  }

  // First root of env holding rel (a regular file resolving inside that root).
  std::optional<std::string> find_in_env(const std::string& env, const std::string& rel) const {
    auto it = roots.find(env);
    if (it == roots.end()) return std::nullopt;
    for (const auto& root : it->second) {
      fs::path full = fs::path(root) / rel;
      struct stat st {};
      if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      auto rr = detail::real_path(root);
      auto fr = detail::real_path(full);
      if (!rr || !fr) continue;
      if (!detail::is_under(*rr, *fr)) {
        if (first_time_("outside:" + full.string()))
          spdlog::warn("pillar: ignoring {}: it resolves to {}, outside pillar root {}", full.string(), *fr, root);
        continue;
      }
      return full.string();
    }
    return std::nullopt;
  }

  // Salt's fileclient.get_state: "a.b" -> a/b.sls, then a/b/init.sls.
  std::optional<located> find_sls(const std::string& env, const std::string& sls) const {
    std::string base = sls;
    auto slash = base.rfind('/');
    std::string leaf = slash == std::string::npos ? base : base.substr(slash + 1);
    if (leaf.find('.') != std::string::npos) std::replace(base.begin(), base.end(), '.', '/');
    auto rel = clean_rel(base);
    if (!rel) {
      spdlog::warn("pillar: refusing sls name '{}' in environment '{}'", detail::printable(sls), env);
      return std::nullopt;
    }
    if (auto p = find_in_env(env, *rel + ".sls")) return located{*p, false};
    if (auto p = find_in_env(env, *rel + "/init.sls")) return located{*p, true};
    return std::nullopt;
  }

  // Sorted sls names available in env (Salt's list_states); nullptr if env is not one of
  // _get_envs().
  const std::vector<std::string>* avail(const std::string& env) {
    if (auto it = avail_.find(env); it != avail_.end()) return &it->second;
    auto all = envs();
    if (std::find(all.begin(), all.end(), env) == all.end()) return nullptr;
    std::set<std::string> names;
    if (auto rit = roots.find(env); rit != roots.end()) {
      for (const auto& root : rit->second) {
        std::error_code ec;
        fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
        for (; !ec && it != end; it.increment(ec)) {
          if (it.depth() > max_include_depth) {
            it.disable_recursion_pending();
            continue;
          }
          std::error_code ec2;
          if (!it->is_regular_file(ec2)) continue;
          std::string rel = it->path().lexically_relative(root).generic_string();
          if (!rel.ends_with(".sls")) continue;
          if (rel.ends_with("/init.sls"))
            rel.resize(rel.size() - 9);
          else
            rel.resize(rel.size() - 4);
          std::replace(rel.begin(), rel.end(), '/', '.');
          names.insert(rel);
        }
      }
    }
    return &(avail_[env] = std::vector<std::string>(names.begin(), names.end()));
  }

  struct rendered {
    bool ok = false;
    wire::value data;
    render::outcome::status st = render::outcome::status::unavailable;
    std::string error;  // the detail (without the "Rendering ... failed" prefix)
  };

  // One file through the renderer with Salt's template variables.
  rendered render_file(const std::string& path, const std::string& env, const std::string& sls,
                       const wire::value& defaults) {
    rendered out;
    auto now = clock::now();
    if (now >= deadline) {
      timed_out = true;
      out.st = render::outcome::status::timeout;
      out.error = path + ": not rendered: pillar_compile_timeout (" + std::to_string(cfg_.pillar_compile_timeout) +
                  " s) passed";
      return out;
    }
    render::request rq;
    rq.path = path;
    rq.saltenv = env;
    rq.sls = sls;
    if (auto it = roots.find(env); it != roots.end())
      for (const auto& r : it->second) rq.roots.emplace_back(r);
    rq.default_pipe = cfg_.renderer;
    rq.blacklist = cfg_.renderer_blacklist;
    rq.whitelist = cfg_.renderer_whitelist;
    rq.call = call;
    // salt.template.compile_template(..., saltenv, sls, **defaults) -> the jinja
    // renderer's JINJA(salt=, grains=, opts=, pillar=, saltenv=, sls=, ..., **kws).
    wire::value ctx = wire::value::object();
    ctx["grains"] = grains;
    ctx["opts"] = opts;
    ctx["pillar"] = pillar_data;
    ctx["saltenv"] = env;
    ctx["sls"] = sls;
    if (defaults.is_object()) {
      static const std::set<std::string> reserved = {"saltenv", "sls",     "grains",   "opts", "pillar",
                                                     "salt",    "context", "tmplpath", "proxy"};
      for (auto it = defaults.begin(); it != defaults.end(); ++it) {
        if (reserved.contains(it.key())) {
          out.st = render::outcome::status::render_error;
          out.error = "got multiple values for keyword argument '" + it.key() + "'";
          return out;
        }
        ctx[it.key()] = *it;
      }
    }
    rq.context = std::move(ctx);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    rq.timeout = std::min<std::chrono::milliseconds>(std::chrono::seconds(cfg_.pillar_render_timeout),
                                                     std::max(left, std::chrono::milliseconds(1)));
    render::outcome o;
    try {
      o = renderer_.render(rq);
    } catch (const std::exception& e) {
      o.st = render::outcome::status::unavailable;
      o.error = e.what();
    }
    out.st = o.st;
    if (o.ok()) {
      out.ok = true;
      out.data = o.data.is_null() ? wire::value::object() : std::move(o.data);
      return out;
    }
    switch (o.st) {
      case render::outcome::status::timeout:
        // Cut by the compile deadline (not by pillar_render_timeout): the compile is over.
        if (clock::now() >= deadline || rq.timeout < std::chrono::seconds(cfg_.pillar_render_timeout))
          timed_out = true;
        out.error = path + ": render timed out after " + std::to_string((rq.timeout.count() + 999) / 1000) + " s";
        if (first_time_("timeout:" + path)) spdlog::warn("pillar: {} (minion {})", out.error, minion_id);
        break;
      case render::outcome::status::unsupported_renderer:
        out.error = o.error.empty() ? path + ": unsupported renderer" : o.error;
        if (first_time_("unsupported:" + path + ":" + out.error)) spdlog::warn("pillar: {}", out.error);
        break;
      case render::outcome::status::unavailable:
        out.error = o.error.empty() ? "no render worker available" : o.error;
        if (first_time_("unavailable:" + out.error)) spdlog::error("pillar: cannot render {}: {}", path, out.error);
        break;
      default:
        out.error = o.error;
        break;
    }
    return out;
  }

  // --- get_tops / merge_tops / sort_top_targets (get_top)
  using top_t = std::vector<std::pair<std::string, std::vector<std::pair<std::string, wire::value>>>>;

  top_t get_top(std::vector<std::string>& errors) {
    std::vector<std::pair<std::string, std::vector<wire::value>>> tops;  // env -> rendered tops
    auto tops_of = [&](const std::string& env) -> std::vector<wire::value>& {
      for (auto& t : tops)
        if (t.first == env) return t.second;
      tops.push_back({env, {}});
      return tops.back().second;
    };
    std::vector<std::string> saltenvs;
    if (pillarenv) {
      if (!roots.contains(*pillarenv))
        spdlog::debug("pillarenv '{}' not found in the configured pillar environments", *pillarenv);
      else
        saltenvs.push_back(*pillarenv);
    } else {
      saltenvs = envs();
      if (cfg_.pillar_source_merging_strategy == "none") {
        std::string only = saltenv && !saltenv->empty() ? *saltenv : "base";
        bool has = std::find(saltenvs.begin(), saltenvs.end(), only) != saltenvs.end();
        saltenvs.clear();
        if (has) saltenvs.push_back(only);
      }
    }
    for (const auto& env : saltenvs) {
      if (timed_out) break;
      auto path = find_in_env(env, state_top);
      if (!path) continue;
      auto r = render_file(*path, env, "", wire::value::object());
      if (!r.ok && timed_out) break;
      if (!r.ok) {
        errors.push_back("Rendering Primary Top file failed, render error:\n" + r.error);
        spdlog::error("Pillar rendering failed for minion {}: {}", minion_id, r.error);
        break;  // Salt's try/except is around the whole loop
      }
      tops_of(env).push_back(std::move(r.data));
    }
    // One level of include: in top files.
    std::vector<std::pair<std::string, std::vector<std::string>>> include;
    for (auto& [env, ctops] : tops) {
      for (auto& ct : ctops) {
        if (!ct.is_object() || !ct.contains("include")) continue;
        std::vector<std::string> incs;
        if (ct["include"].is_array())
          for (const auto& i : ct["include"])
            if (auto s = text_of(i); !s.empty()) incs.push_back(s);
        ct.erase("include");
        if (!incs.empty()) include.push_back({env, std::move(incs)});
      }
    }
    std::map<std::string, std::set<std::string>> done;
    for (const auto& [env, states] : include) {
      for (const auto& sls : states) {
        if (timed_out) break;
        if (done[env].contains(sls)) continue;
        done[env].insert(sls);
        auto loc = find_sls(env, sls);
        if (!loc) {  // compile_template(False): {}
          tops_of(env).push_back(wire::value::object());
          continue;
        }
        auto r = render_file(loc->path, env, "", wire::value::object());
        if (!r.ok)
          errors.push_back("Rendering Top file " + sls + " failed, render error:\n" + r.error);
        else
          tops_of(env).push_back(std::move(r.data));
      }
    }

    // merge_tops: a TypeError anywhere empties the whole top.
    top_t top;
    std::map<std::string, std::map<std::string, std::int64_t>> orders;
    auto env_body = [&](const std::string& env) -> std::vector<std::pair<std::string, wire::value>>& {
      for (auto& t : top)
        if (t.first == env) return t.second;
      top.push_back({env, {}});
      return top.back().second;
    };
    bool bad = false;
    for (const auto& [_, ctops] : tops) {
      for (const auto& ctop : ctops) {
        if (bad) break;
        if (!ctop.is_object()) {
          bad = !(ctop.is_null() || (ctop.is_array() && ctop.empty()));
          continue;
        }
        for (auto eit = ctop.begin(); eit != ctop.end() && !bad; ++eit) {
          const std::string& env = eit.key();
          if (env == "include") continue;
          if (!eit->is_object()) {
            if ((eit->is_array() || eit->is_string()) && eit->empty()) continue;  // nothing to iterate
            bad = true;
            break;
          }
          for (auto tit = eit->begin(); tit != eit->end(); ++tit) {
            const std::string& tgt = tit.key();
            std::vector<wire::value> comps;
            if (tit->is_array()) {
              for (const auto& x : *tit) comps.push_back(x);
            } else if (tit->is_object()) {
              for (auto k = tit->begin(); k != tit->end(); ++k) comps.emplace_back(k.key());
            } else if (tit->is_string()) {
              for (char ch : tit->get_ref<const std::string&>()) comps.emplace_back(std::string(1, ch));
            } else {
              bad = true;
              break;
            }
            wire::value matches = wire::value::array();
            std::vector<std::string> states;
            orders[env][tgt] = 0;
            bool ignore_missing = false;
            for (const auto& comp : comps) {
              if (comp.is_object()) {
                if (comp.contains("match")) matches.push_back(comp);
                if (const auto* o = wire::find(comp, "order")) {
                  auto n = order_of(*o);
                  if (!n) {
                    bad = true;
                    break;
                  }
                  orders[env][tgt] = *n;
                }
                if (const auto* im = wire::find(comp, "ignore_missing"); im && truthy(*im)) ignore_missing = true;
              } else if (auto t = wire::as_text(comp); t && comp.is_string()) {
                if (std::find(states.begin(), states.end(), *t) == states.end()) states.emplace_back(*t);
              }
            }
            if (bad) break;
            if (ignore_missing) ignored[env].insert(ignored[env].end(), states.begin(), states.end());
            for (const auto& s : states) matches.push_back(s);
            auto& body = env_body(env);
            auto bit = std::find_if(body.begin(), body.end(), [&](const auto& p) { return p.first == tgt; });
            if (bit == body.end())
              body.push_back({tgt, std::move(matches)});
            else
              bit->second = std::move(matches);
          }
        }
      }
    }
    if (bad) {
      errors.push_back("Error encountered while rendering pillar top file.");
      return {};
    }
    for (auto& [env, body] : top) {
      auto& ord = orders[env];
      std::stable_sort(body.begin(), body.end(),
                       [&](const auto& a, const auto& b) { return ord[a.first] < ord[b.first]; });
    }
    return top;
  }

  bool confirm_top(const std::string& tgt, const wire::value& data) const {
    std::string matcher = "compound";  // Salt's confirm_top default
    for (const auto& item : data)
      if (item.is_object())
        if (auto m = wire::get_text(item, "match")) matcher = std::string(*m);
    match::minion_facts facts;
    facts.id = minion_id;
    facts.grains = &grains;
    facts.pillar = &pillar_data;
    if (matcher == "nodegroup") {
      auto it = cfg_.nodegroups.find(tgt);
      if (it == cfg_.nodegroups.end()) return false;
      return match::matches(wire::value(it->second), "compound", facts, ':', &cfg_.nodegroups);
    }
    return match::matches(wire::value(tgt), matcher, facts, ':', &cfg_.nodegroups);
  }

  std::vector<std::pair<std::string, std::vector<std::string>>> top_matches(const top_t& top) const {
    std::vector<std::pair<std::string, std::vector<std::string>>> matches;
    for (const auto& entry : top) {
      const std::string& env = entry.first;  // named, not a structured binding: clang 14 can't capture those
      if (pillarenv && env != *pillarenv) continue;
      for (const auto& [tgt, data] : entry.second) {
        if (!confirm_top(tgt, data)) continue;
        auto mit = std::find_if(matches.begin(), matches.end(), [&](const auto& p) { return p.first == env; });
        if (mit == matches.end()) {
          matches.push_back({env, {}});
          mit = matches.end() - 1;
        }
        for (const auto& item : data)
          if (item.is_string() &&
              std::find(mit->second.begin(), mit->second.end(), item.get<std::string>()) == mit->second.end())
            mit->second.push_back(item.get<std::string>());
      }
    }
    return matches;
  }

  // --- render_pstate: (state, errors); state null when nothing rendered.
  std::pair<wire::value, std::vector<std::string>> render_pstate(const std::string& sls, const std::string& env,
                                                                 wire::value& mods, const wire::value& defaults_in,
                                                                 int depth) {
    std::vector<std::string> errors;
    if (timed_out || clock::now() >= deadline) {  // pillar_compile_timeout: render nothing more
      timed_out = true;
      return {nullptr, errors};
    }
    if (depth > max_include_depth) {
      errors.push_back("Include depth limit reached while rendering SLS '" + sls + "'");
      return {nullptr, errors};
    }
    auto loc = find_sls(env, sls);
    wire::value state = nullptr;
    if (!loc) {
      auto& ign = ignored[env];
      if (std::find(ign.begin(), ign.end(), sls) != ign.end()) {
        spdlog::debug("Skipping ignored and missing SLS '{}' in environment '{}'", sls, env);
        return {nullptr, errors};
      }
      auto rit = roots.find(env);
      if (rit != roots.end() && !rit->second.empty()) {
        std::string msg = "Specified SLS '" + sls + "' in environment '" + env + "' is not available on the salt master";
        spdlog::error("{}", msg);
        errors.push_back(msg);
        // Salt goes on with compile_template(False), which returns {}.
        mods[sls] = wire::value::object();
        return {wire::value::object(), errors};
      }
      spdlog::debug("Specified SLS '{}' in environment '{}' was not found.", sls, env);
      return {nullptr, errors};
    }
    auto r = render_file(loc->path, env, sls, defaults_in);
    if (r.ok) {
      state = std::move(r.data);
    } else {
      std::string msg = "Rendering SLS '" + sls + "' failed, render error:\n" + r.error;
      spdlog::critical("{}", msg);
      // A renderer sylvite refuses is, to the minion, a file that failed to render: Salt's
      // entry (the file and the renderer are named in the log above).
      if ((r.st == render::outcome::status::render_error || r.st == render::outcome::status::unsupported_renderer) &&
          cfg_.pillar_safe_render_error)
        errors.push_back("Rendering SLS '" + sls + "' failed. Please see master log for details.");
      else
        errors.push_back(msg);
    }
    mods[sls] = state;
    if (!truthy(state)) return {state, errors};
    if (!state.is_object()) {
      std::string msg = "SLS '" + sls + "' does not render to a dictionary";
      spdlog::error("{}", msg);
      errors.push_back(msg);
      return {state, errors};
    }
    auto inc_it = state.find("include");
    if (inc_it == state.end()) return {state, errors};
    if (!inc_it->is_array()) {
      std::string msg = "Include Declaration in SLS '" + sls + "' is not formed as a list";
      spdlog::error("{}", msg);
      errors.push_back(msg);
      return {state, errors};
    }
    wire::value include = std::move(*inc_it);
    state.erase("include");
    mods[sls] = state;  // Salt's mods[sls] is the same dict, include popped
    std::vector<wire::value> include_states;
    wire::value defaults = defaults_in;  // Salt reuses the parameter across entries
    std::vector<std::string> err;        // ... and the last sub-render's errors
    for (const auto& entry : include) {
      std::string sub;
      std::string key;
      if (entry.is_object()) {
        if (entry.empty()) continue;
        sub = entry.begin().key();
        const auto& v = entry.begin().value();
        defaults = wire::value::object();
        if (v.is_object()) {
          if (const auto* d = wire::find(v, "defaults")) defaults = *d;
          if (auto k = wire::get_text(v, "key")) key = std::string(*k);
        }
      } else {
        sub = text_of(entry);
      }
      if (sub.empty()) continue;
      std::vector<std::string> matched;
      const auto* av = avail(env);
      if (!av) {
        errors.push_back("No matching pillar environment for environment '" + env + "' found");
        matched.push_back(sub);
      } else {
        std::string first = sub;
        first.erase(0, first.find_first_not_of('.') == std::string::npos ? first.size() : first.find_first_not_of('.'));
        std::replace(first.begin(), first.end(), '/', '.');
        for (const auto& a : *av)
          if (match::glob_match(first, a)) matched.push_back(a);
        if (sub.starts_with(".")) {
          auto parts = split(sls, '.');
          if (!loc->init && !parts.empty()) parts.pop_back();
          std::string resolved;
          for (const auto& p : parts) resolved += p + ".";
          resolved += sub.substr(1);
          sub = resolved;
        }
        for (const auto& a : *av)
          if (match::glob_match(sub, a)) matched.push_back(a);
        if (matched.empty()) matched.push_back(sub);
      }
      for (const auto& m : matched) {
        wire::value nstate;
        if (!mods.contains(m)) {
          auto [ns, e] = render_pstate(m, env, mods, defaults, depth + 1);
          nstate = std::move(ns);
          err = std::move(e);
        } else {
          nstate = mods[m];
        }
        if (truthy(nstate) && nstate.is_object()) {
          if (!key.empty()) {
            auto frags = split(key, ':');
            for (auto it = frags.rbegin(); it != frags.rend(); ++it) {
              wire::value w = wire::value::object();
              w[*it] = std::move(nstate);
              nstate = std::move(w);
            }
          }
          if (cfg_.pillar_includes_override_sls)
            state = merge(state, nstate);
          else
            include_states.push_back(std::move(nstate));
        }
        errors.insert(errors.end(), err.begin(), err.end());
      }
    }
    if (!cfg_.pillar_includes_override_sls) {
      // The including SLS is merged last so its own values win.
      include_states.push_back(std::move(state));
      wire::value merged = nullptr;
      for (auto& s : include_states) merged = merged.is_null() ? std::move(s) : merge(merged, s);
      state = std::move(merged);
    }
    return {state, errors};
  }

  // --- render_pillar
  wire::value render_pillar(const std::vector<std::pair<std::string, std::vector<std::string>>>& matches_in,
                            std::vector<std::string>& errors, const wire::value& override) {
    wire::value pillar = override.is_object() ? override : wire::value::object();
    auto matches = matches_in;
    if (!env_order.empty()) {
      std::vector<std::pair<std::string, std::vector<std::string>>> ordered;
      for (const auto& e : env_order)
        for (const auto& m : matches)
          if (m.first == e &&
              std::find_if(ordered.begin(), ordered.end(), [&](const auto& o) { return o.first == e; }) == ordered.end())
            ordered.push_back(m);
      for (const auto& m : matches)
        if (std::find_if(ordered.begin(), ordered.end(), [&](const auto& o) { return o.first == m.first; }) ==
            ordered.end())
          ordered.push_back(m);
      matches = std::move(ordered);
    }
    for (const auto& [env, pstates] : matches) {
      std::vector<std::string> files;
      wire::value mods = wire::value::object();
      for (const auto& m : pstates) {
        const auto* av = avail(env);
        std::vector<std::string> hit;
        if (!av)
          errors.push_back("No matching pillar environment for environment '" + env + "' found");
        else
          for (const auto& a : *av)
            if (match::glob_match(m, a)) hit.push_back(a);
        if (hit.empty()) hit.push_back(m);
        files.insert(files.end(), hit.begin(), hit.end());
      }
      for (const auto& sls : files) {
        if (timed_out) break;
        auto [p, err] = render_pstate(sls, env, mods, wire::value::object(), 0);
        errors.insert(errors.end(), err.begin(), err.end());
        if (p.is_null()) continue;
        if (!p.is_object()) {
          spdlog::error(
              "The rendered pillar sls file, '{}' state did not return the expected data format. This is a sign of "
              "a malformed pillar sls file.",
              sls);
          continue;
        }
        pillar = merge(pillar, p);
      }
    }
    return pillar;
  }

  // --- ext_pillar
  wire::value ext_pillar(wire::value pillar, std::vector<std::string>& errors, const wire::value& override,
                         const pillar_ext::context& ectx) {
    if (override.is_object() && !override.empty()) pillar = merge(pillar, override);
    for (const auto& run : cfg_.ext_pillar) {
      if (!run.is_object()) {
        errors.push_back("The \"ext_pillar\" option is malformed");
        spdlog::critical("{}", errors.back());
        return wire::value::object();
      }
      wire::value ext = nullptr;
      for (auto it = run.begin(); it != run.end(); ++it) {
        const std::string& key = it.key();
        if (!pillar_ext::supported(key)) {
          errors.push_back("ext_pillar interface named " + key + " is unavailable (sylvite runs cmd_yaml, "
                           "cmd_json and file_tree)");
          continue;
        }
        if (clock::now() >= deadline) {
          timed_out = true;
          return pillar;
        }
        auto res = pillar_ext::run(key, *it, ectx);
        if (res.timed_out) timed_out = true;
        if (res.error) {
          errors.push_back(*res.error);
          spdlog::error("Exception caught loading ext_pillar '{}': {}", key, *res.error);
          continue;
        }
        ext = std::move(res.data);
        if (truthy(ext) && !ext.is_object()) {
          errors.push_back("Failed to load ext_pillar " + key + ": it returned " + ext.type_name() +
                           ", not a dictionary");
          spdlog::error("{}", errors.back());
          ext = nullptr;
        }
      }
      if (truthy(ext)) pillar = merge(pillar, ext);
    }
    return pillar;
  }

 private:
  const config::master_config& cfg_;
  render::renderer& renderer_;
  std::function<bool(const std::string&)> first_time_;
  std::map<std::string, std::vector<std::string>> avail_;
};

std::optional<std::string> opt_text(const wire::value& v) {
  if (v.is_null()) return std::nullopt;
  auto t = text_of(v);
  return t;
}

// A cache file name for a pillar_key: refused (nullopt) if it could leave the directory.
bool safe_key(const std::string& k) {
  return !k.empty() && k.front() != '.' && k.find('/') == std::string::npos && k.find('\0') == std::string::npos &&
         k.size() < 1024;
}

}  // namespace

pillar_compiler::pillar_compiler(const config::master_config& cfg, render::renderer& renderer)
    : cfg_(cfg), renderer_(renderer), shared_(std::make_unique<shared>()) {
  state_top_ = cfg.state_top;
  if (state_top_.starts_with("salt://")) state_top_ = state_top_.substr(7);
  while (!state_top_.empty() && state_top_.front() == '/') state_top_.erase(0, 1);
  if (state_top_.empty()) state_top_ = "top.sls";
  if (cfg.raw.is_object())
    if (const auto* eo = wire::find(cfg.raw, "env_order"); eo && eo->is_array())
      for (const auto& e : *eo)
        if (auto t = wire::as_text(e)) env_order_.emplace_back(*t);
  for (const auto& run : cfg.ext_pillar)
    if (run.is_object())
      for (auto it = run.begin(); it != run.end(); ++it)
        if (!pillar_ext::supported(it.key()))
          spdlog::critical(
              "ext_pillar interface named {} is unavailable: sylvite runs the ext_pillar modules cmd_yaml, cmd_json "
              "and file_tree; minions get this error in their pillar's _errors",
              it.key());
}

pillar_compiler::~pillar_compiler() = default;

wire::value pillar_compiler::compile(const std::string& minion_id, const wire::value& grains,
                                     const wire::value& pillarenv) const {
  pillar_request r;
  r.minion_id = minion_id;
  r.grains = grains;
  r.pillarenv = pillarenv;
  return compile(r);
}

wire::value pillar_compiler::compile(const pillar_request& req) const {
  try {
    const auto started = clock::now();
    compiler c(cfg_, renderer_, [this](const std::string& k) { return shared_->first_time(k); });
    c.minion_id = req.minion_id;
    if (render_call_)
      c.call = [f = &render_call_, id = req.minion_id](std::string_view fun, const wire::value& args) {
        return (*f)(id, fun, args);
      };
    c.state_top = state_top_;
    c.env_order = env_order_;
    c.deadline = started + std::chrono::seconds(cfg_.pillar_compile_timeout);
    if (req.grains.is_object()) c.grains = req.grains;
    c.grains["id"] = req.minion_id;  // AESFuncs._pillar: load["grains"]["id"] = load["id"]
    c.saltenv = opt_text(req.saltenv);
    // Pillar.__init__ / __gen_opts: the request's pillarenv, else the saltenv with
    // pillarenv_from_saltenv, else the master's pillarenv.
    if (!req.pillarenv.is_null())
      c.pillarenv = opt_text(req.pillarenv);
    else if (cfg_.pillarenv_from_saltenv)
      c.pillarenv = c.saltenv;
    else
      c.pillarenv = cfg_.pillarenv;
    if (c.pillarenv && c.pillarenv->empty()) c.pillarenv.reset();
    if (req.extra_minion_data.is_object()) c.extra_minion_data = req.extra_minion_data;

    // pillar_roots __env__: the pillarenv, saltenv or base (one path component only).
    c.roots = cfg_.pillar_roots;
    if (auto it = c.roots.find("__env__"); it != c.roots.end()) {
      std::string env = c.pillarenv ? *c.pillarenv : (c.saltenv && !c.saltenv->empty() ? *c.saltenv : "base");
      auto dirs = it->second;
      c.roots.erase(it);
      bool safe = env != "." && env != ".." && env.find('/') == std::string::npos &&
                  env.find('\0') == std::string::npos;
      if (!c.roots.contains(env) && safe) {
        for (auto& d : dirs) {
          std::size_t pos = 0;
          while ((pos = d.find("__env__", pos)) != std::string::npos) {
            d.replace(pos, 7, env);
            pos += env.size();
          }
        }
        c.roots[env] = std::move(dirs);
      } else if (!safe && shared_->first_time("envname:" + env)) {
        spdlog::warn("pillar: environment name '{}' not substituted into the __env__ pillar_roots",
                     detail::printable(env));
      }
    }

    // The master options the templates see as `opts`.
    wire::value opts = cfg_.raw.is_object() ? cfg_.raw : wire::value::object();
    opts.erase("cluster_secret");
    opts["id"] = req.minion_id;
    opts["minion_id"] = req.minion_id;
    opts["saltenv"] = c.saltenv ? wire::value(*c.saltenv) : wire::value(nullptr);
    opts["pillarenv"] = c.pillarenv ? wire::value(*c.pillarenv) : wire::value(nullptr);
    opts["grains"] = c.grains;
    opts["file_client"] = "local";
    opts["state_top"] = "salt://" + state_top_;
    wire::value pr = wire::value::object();
    for (const auto& [env, dirs] : c.roots) pr[env] = dirs;
    opts["pillar_roots"] = pr;
    wire::value fr = wire::value::object();
    for (const auto& [env, dirs] : cfg_.file_roots) fr[env] = dirs;
    opts["file_roots"] = fr;
    opts["renderer"] = cfg_.renderer;
    opts["renderer_blacklist"] = cfg_.renderer_blacklist;
    opts["renderer_whitelist"] = cfg_.renderer_whitelist;
    opts["jinja_env"] = cfg_.jinja_env;
    opts["jinja_sls_env"] = cfg_.jinja_sls_env;
    opts["jinja_trim_blocks"] = cfg_.jinja_trim_blocks;
    opts["jinja_lstrip_blocks"] = cfg_.jinja_lstrip_blocks;
    fs::path cdir = cfg_.config_dir.empty() ? fs::path("/etc/salt") : cfg_.config_dir;
    opts["gpg_keydir"] = cfg_.gpg_keydir ? *cfg_.gpg_keydir : (cdir / "gpgkeys").string();
    if (!opts.contains("conf_file")) opts["conf_file"] = (cdir / "master").string();
    c.opts = opts;

    // get_pillar: PillarCache when pillar_cache or minion_data_cache (Salt's master
    // default): the request's pillar_override is then merged only after the cache.
    wire::value override = wire::value::object();
    if (req.pillar_override.is_object())
      override = req.pillar_override;
    else if (!req.pillar_override.is_null())
      spdlog::error("Pillar data must be a dictionary");
    const bool via_cache = cfg_.pillar_cache || cfg_.minion_data_cache;
    const wire::value inner_override = via_cache ? wire::value::object() : override;

    std::string cache_key = c.pillarenv ? req.minion_id + ":" + *c.pillarenv : req.minion_id;
    const bool use_cache = cfg_.pillar_cache && safe_key(cache_key);
    wire::value pillar = nullptr;
    if (use_cache) {
      if (req.clean_cache) {
        std::lock_guard lk(shared_->mu);
        shared_->memory.erase(cache_key);
        if (cfg_.pillar_cache_backend == "disk") {
          std::error_code ec;
          fs::remove(cfg_.cachedir / "pillar_cache" / (cache_key + ".p"), ec);
        }
      }
      const auto now = unix_now();
      if (cfg_.pillar_cache_backend == "memory") {
        std::lock_guard lk(shared_->mu);
        if (auto it = shared_->memory.find(cache_key); it != shared_->memory.end()) {
          if (it->second.expires > now)
            pillar = it->second.data;
          else
            shared_->memory.erase(it);
        }
      } else if (auto text = util::read_file(cfg_.cachedir / "pillar_cache" / (cache_key + ".p"))) {
        auto v = wire::unpack(*text);
        if (v && v->is_object()) {
          auto exp = wire::get_int(*v, "_expires");
          if (exp && *exp > now)
            if (const auto* d = wire::find(*v, "data")) pillar = *d;
        }
      }
      if (truthy(pillar) && pillar.is_object())
        spdlog::debug("Pillar cache hit for minion {} and pillarenv {}", req.minion_id,
                      c.pillarenv ? *c.pillarenv : "None");
      else
        pillar = nullptr;
    }

    if (pillar.is_null()) {
      // --- Pillar.compile_pillar(ext=True)
      std::vector<std::string> top_errors;
      auto top = c.get_top(top_errors);
      std::vector<std::string> errors;
      pillar_ext::context ectx;
      ectx.minion_id = req.minion_id;
      ectx.grains = c.grains;
      ectx.opts = opts;
      ectx.opts["id"] = cfg_.id;  // ext_pillar_opts keep the master's id
      ectx.pillarenv = c.pillarenv;
      ectx.pillar_roots = c.roots;
      ectx.nodegroups = cfg_.nodegroups;
      ectx.cfg = &cfg_;
      ectx.renderer = &renderer_;
      ectx.deadline = c.deadline;
      ectx.render_timeout = std::chrono::seconds(cfg_.pillar_render_timeout);
      if (cfg_.ext_pillar_first) {
        wire::value p = c.ext_pillar(inner_override, errors, inner_override, ectx);
        shallow_update(c.pillar_data, p);
        auto matches = c.top_matches(top);
        p = c.render_pillar(matches, errors, inner_override);
        p = c.merge(c.pillar_data, p);
        shallow_update(c.pillar_data, p);
      } else {
        auto matches = c.top_matches(top);
        wire::value p = c.render_pillar(matches, errors, inner_override);
        shallow_update(c.pillar_data, p);
        p = c.ext_pillar(c.pillar_data, errors, inner_override, ectx);
        shallow_update(c.pillar_data, p);
      }
      pillar = std::move(c.pillar_data);
      errors.insert(errors.end(), top_errors.begin(), top_errors.end());
      if (c.timed_out || clock::now() >= c.deadline) {
        std::string msg = "Pillar compilation for minion '" + req.minion_id + "' stopped: pillar_compile_timeout (" +
                          std::to_string(cfg_.pillar_compile_timeout) + " s) passed; the pillar is incomplete";
        spdlog::error("{}", msg);
        errors.push_back(msg);
      }
      if (!errors.empty()) {
        wire::value errs = wire::value::array();
        for (const auto& e : errors) {
          spdlog::critical("Pillar render error: {}", e);
          errs.push_back(e);
        }
        pillar["_errors"] = std::move(errs);
      }
      if (!inner_override.empty()) pillar = c.merge(pillar, inner_override);

      if (use_cache) {
        const auto expires = unix_now() + cfg_.pillar_cache_ttl;
        if (cfg_.pillar_cache_backend == "memory") {
          std::lock_guard lk(shared_->mu);
          if (shared_->memory.size() < 1000000) shared_->memory[cache_key] = {expires, pillar};
        } else {
          wire::value doc = wire::value::object();
          doc["_expires"] = expires;
          doc["data"] = pillar;
          auto w = util::write_file_atomic(cfg_.cachedir / "pillar_cache" / (cache_key + ".p"),
                                           wire::pack(doc, wire::packing::frame), 0600);
          if (!w && shared_->first_time("cachewrite"))
            spdlog::warn("pillar: cannot write the pillar cache in {}: {}", (cfg_.cachedir / "pillar_cache").string(),
                         w.error().message());
        }
      }
    }
    // PillarCache: the override is never baked into the cache.
    if (via_cache && !override.empty()) pillar = c.merge(pillar, override);
    return pillar;
  } catch (const std::exception& e) {
    spdlog::error("pillar: compiling pillar for {} failed: {}", req.minion_id, e.what());
    wire::value out = wire::value::object();
    out["_errors"] = wire::value::array({std::string("Pillar compilation failed: ") + e.what()});
    return out;
  }
}

}  // namespace sylvite::master
