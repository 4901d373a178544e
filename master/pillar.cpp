// sylvite::master pillar compiler (see pillar.hpp), following salt/pillar/__init__.py:
// get_tops -> merge_tops -> sort_top_targets -> top_matches -> render_pillar/render_pstate.
// Error texts are Salt's (pillar_safe_render_error default: YAML details go to the log,
// the minion sees "Rendering SLS '<x>' failed. Please see master log for details.").
// Salt renders with jinja|yaml; we only parse YAML, and say so for files with Jinja.
// Thread-safety: compile() is const and keeps all its state on the stack.
#include "master/pillar.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "master/detail.hpp"

namespace sylvite::master {
namespace fs = std::filesystem;

namespace {

constexpr int max_include_depth = 64;

std::string text_of(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_number() || v.is_boolean()) return v.dump();
  return {};
}

bool has_jinja(std::string_view s) {
  return s.find("{%") != std::string_view::npos || s.find("{{") != std::string_view::npos ||
         s.find("{#") != std::string_view::npos;
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

struct located {
  std::string path;
  bool init = false;  // found as <sls>/init.sls
};

class compiler {
 public:
  compiler(const config::roots_map& roots, const std::map<std::string, std::string>& nodegroups,
           const std::string& state_top, bool merge_lists, bool includes_override)
      : roots_(roots),
        nodegroups_(nodegroups),
        state_top_(state_top),
        merge_lists_(merge_lists),
        includes_override_(includes_override) {}

  std::vector<std::string> errors;
  std::map<std::string, std::vector<std::string>> ignored;  // env -> sls (ignore_missing)

  // First root of env holding rel (a regular file resolving inside that root).
  std::optional<std::string> find_in_env(const std::string& env, const std::string& rel) const {
    auto it = roots_.find(env);
    if (it == roots_.end()) return std::nullopt;
    for (const auto& root : it->second) {
      fs::path full = fs::path(root) / rel;
      struct stat st {};
      if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      auto rr = detail::real_path(root);
      auto fr = detail::real_path(full);
      if (!rr || !fr) continue;
      if (!detail::is_under(*rr, *fr)) {
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
      spdlog::warn("pillar: refusing sls name '{}' in environment '{}'", sls, env);
      return std::nullopt;
    }
    if (auto p = find_in_env(env, *rel + ".sls")) return located{*p, false};
    if (auto p = find_in_env(env, *rel + "/init.sls")) return located{*p, true};
    return std::nullopt;
  }

  // Sorted sls names available in env (Salt's list_states); nullopt if env is unknown.
  const std::vector<std::string>* avail(const std::string& env) {
    if (auto it = avail_.find(env); it != avail_.end()) return &it->second;
    auto rit = roots_.find(env);
    if (rit == roots_.end()) return nullptr;
    std::set<std::string> names;
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
    return &(avail_[env] = std::vector<std::string>(names.begin(), names.end()));
  }

  // Read + parse one file. nullopt on error (the error is recorded).
  std::optional<wire::value> render(const std::string& path, const std::string& what_failed,
                                    bool show_detail) {
    auto text = util::read_file(path);
    if (!text) {
      errors.push_back(what_failed + (show_detail ? ", render error:\ncannot read " + path : ""));
      return std::nullopt;
    }
    if (has_jinja(*text)) {
      std::string msg = "Jinja is not rendered by sylvite: " + path;
      spdlog::error("pillar: {}", msg);
      errors.push_back(msg);
      return std::nullopt;
    }
    auto v = config::parse_yaml(*text);
    if (!v) {
      spdlog::critical("pillar: {} ({}), render error: {}", what_failed, path, v.error());
      errors.push_back(show_detail ? what_failed + ", render error:\n" + v.error()
                                   : what_failed + ". Please see master log for details.");
      return std::nullopt;
    }
    if (v->is_null()) return wire::value::object();  // an empty template renders to {}
    return std::move(*v);
  }

  wire::value merge(const wire::value& a, const wire::value& b) const { return pillar_merge(a, b, merge_lists_); }

  // Salt's render_pstate. Returns null when nothing is to be merged.
  wire::value render_pstate(const std::string& sls, const std::string& env, wire::value& mods, int depth) {
    if (depth > max_include_depth) {
      errors.push_back("Include depth limit reached while rendering SLS '" + sls + "'");
      return nullptr;
    }
    auto loc = find_sls(env, sls);
    if (!loc) {
      auto& ign = ignored[env];
      if (std::find(ign.begin(), ign.end(), sls) != ign.end()) {
        spdlog::debug("pillar: skipping ignored and missing SLS '{}' in environment '{}'", sls, env);
        return nullptr;
      }
      auto rit = roots_.find(env);
      if (rit != roots_.end() && !rit->second.empty()) {
        std::string msg = "Specified SLS '" + sls + "' in environment '" + env + "' is not available on the salt master";
        spdlog::error("pillar: {}", msg);
        errors.push_back(msg);
      } else {
        spdlog::debug("pillar: Specified SLS '{}' in environment '{}' was not found.", sls, env);
      }
      return nullptr;
    }
    auto rendered = render(loc->path, "Rendering SLS '" + sls + "' failed", false);
    if (!rendered) {
      mods[sls] = nullptr;
      return nullptr;
    }
    wire::value state = std::move(*rendered);
    if (!state.is_object()) {
      if (!state.is_null() && !(state.is_string() && state.get<std::string>().empty())) {
        std::string msg = "SLS '" + sls + "' does not render to a dictionary";
        spdlog::error("pillar: {}", msg);
        errors.push_back(msg);
      }
      mods[sls] = nullptr;
      return nullptr;
    }
    wire::value include;
    bool has_include = false;
    if (auto it = state.find("include"); it != state.end()) {
      include = *it;
      has_include = true;
      state.erase("include");
    }
    mods[sls] = state;  // before the includes: a cycle sees this entry and stops
    if (!has_include) return state.empty() ? wire::value(nullptr) : state;
    if (!include.is_array()) {
      std::string msg = "Include Declaration in SLS '" + sls + "' is not formed as a list";
      spdlog::error("pillar: {}", msg);
      errors.push_back(msg);
      return state.empty() ? wire::value(nullptr) : state;
    }
    std::vector<wire::value> include_states;
    for (const auto& entry : include) {
      std::string sub;
      std::string key;
      if (entry.is_object() && !entry.empty()) {
        sub = entry.begin().key();
        const auto& opts = entry.begin().value();
        if (opts.is_object())
          if (auto k = wire::get_text(opts, "key")) key = std::string(*k);
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
        std::string target = sub;
        if (sub.starts_with(".")) {
          // Relative include: from a/init.sls ".x" is a.x, from a/b.sls ".x" is a.x too.
          std::vector<std::string> parts;
          std::size_t pos = 0;
          while (pos <= sls.size()) {
            auto dot = sls.find('.', pos);
            if (dot == std::string::npos) dot = sls.size();
            parts.push_back(sls.substr(pos, dot - pos));
            pos = dot + 1;
          }
          if (!loc->init && !parts.empty()) parts.pop_back();
          target.clear();
          for (const auto& p : parts) target += p + ".";
          target += sub.substr(1);
        } else {
          std::replace(target.begin(), target.end(), '/', '.');
        }
        for (const auto& a : *av)
          if (match::glob_match(target, a)) matched.push_back(a);
        if (matched.empty()) matched.push_back(target);
      }
      for (const auto& m : matched) {
        wire::value nstate = mods.contains(m) ? mods[m] : render_pstate(m, env, mods, depth + 1);
        if (nstate.is_null() || (nstate.is_object() && nstate.empty())) continue;
        if (!key.empty()) {
          // key "x:y" nests the included data as {x: {y: data}}.
          std::vector<std::string> frags;
          std::size_t pos = 0;
          while (pos <= key.size()) {
            auto c = key.find(':', pos);
            if (c == std::string::npos) c = key.size();
            frags.push_back(key.substr(pos, c - pos));
            pos = c + 1;
          }
          for (auto it = frags.rbegin(); it != frags.rend(); ++it) {
            wire::value w = wire::value::object();
            w[*it] = std::move(nstate);
            nstate = std::move(w);
          }
        }
        if (includes_override_)
          state = merge(state, nstate);
        else
          include_states.push_back(std::move(nstate));
      }
    }
    if (!includes_override_) {
      // The including SLS is merged last so its own values win.
      include_states.push_back(std::move(state));
      wire::value merged = wire::value::object();
      for (const auto& s : include_states)
        if (s.is_object()) merged = merge(merged, s);
      state = std::move(merged);
    }
    return state.empty() ? wire::value(nullptr) : state;
  }

  bool confirm_top(const std::string& tgt, const wire::value& data, const std::string& minion_id,
                   const wire::value& grains) const {
    std::string matcher = "compound";  // Salt's confirm_top default
    for (const auto& item : data)
      if (item.is_object())
        if (auto m = wire::get_text(item, "match")) matcher = std::string(*m);
    match::minion_facts facts;
    facts.id = minion_id;
    facts.grains = grains.is_object() ? &grains : nullptr;
    facts.pillar = nullptr;
    if (matcher == "nodegroup") {
      auto it = nodegroups_.find(tgt);
      if (it == nodegroups_.end()) return false;
      return match::matches(wire::value(it->second), "compound", facts, ':', &nodegroups_);
    }
    return match::matches(wire::value(tgt), matcher, facts, ':', &nodegroups_);
  }

 private:
  const config::roots_map& roots_;
  const std::map<std::string, std::string>& nodegroups_;
  std::string state_top_;
  bool merge_lists_;
  bool includes_override_;
  std::map<std::string, std::vector<std::string>> avail_;
};

}  // namespace

wire::value pillar_merge(const wire::value& a, const wire::value& b, bool merge_lists) {
  if (!a.is_object() || !b.is_object()) return b;
  wire::value out = a;
  for (auto it = b.begin(); it != b.end(); ++it) {
    auto dst = out.find(it.key());
    if (dst != out.end() && dst->is_object() && it->is_object()) {
      *dst = pillar_merge(*dst, *it, merge_lists);
    } else if (dst != out.end() && dst->is_array() && it->is_array() && merge_lists) {
      wire::value merged = *dst;
      for (const auto& x : *it)
        if (std::find(merged.begin(), merged.end(), x) == merged.end()) merged.push_back(x);
      *dst = std::move(merged);
    } else {
      out[it.key()] = *it;
    }
  }
  return out;
}

pillar_compiler::pillar_compiler(const config::master_config& cfg)
    : roots_(cfg.pillar_roots), nodegroups_(cfg.nodegroups) {
  state_top_ = cfg.state_top;
  if (state_top_.starts_with("salt://")) state_top_ = state_top_.substr(7);
  while (!state_top_.empty() && state_top_.front() == '/') state_top_.erase(0, 1);
  if (state_top_.empty()) state_top_ = "top.sls";
  if (cfg.raw.is_object()) {
    if (auto b = wire::get_bool(cfg.raw, "pillar_merge_lists")) merge_lists_ = *b;
    if (auto b = wire::get_bool(cfg.raw, "pillar_includes_override_sls")) includes_override_sls_ = *b;
    if (const auto* eo = wire::find(cfg.raw, "env_order"); eo && eo->is_array())
      for (const auto& e : *eo)
        if (auto t = wire::as_text(e)) env_order_.emplace_back(*t);
  }
}

wire::value pillar_compiler::compile(const std::string& minion_id, const wire::value& grains,
                                     const wire::value& pillarenv) const {
  try {
    compiler c(roots_, nodegroups_, state_top_, merge_lists_, includes_override_sls_);
    std::string penv;
    if (!pillarenv.is_null()) penv = text_of(pillarenv);

    // --- get_tops: envs = base + pillar_roots (or only pillarenv when given).
    std::vector<std::string> envs;
    if (!penv.empty()) {
      if (roots_.contains(penv))
        envs.push_back(penv);
      else
        spdlog::debug("pillar: pillarenv '{}' not found in the configured pillar environments", penv);
    } else {
      envs.push_back("base");
      for (const auto& [e, _] : roots_)
        if (e != "base") envs.push_back(e);
    }
    std::vector<std::string> top_errors;
    std::vector<std::pair<std::string, std::vector<wire::value>>> tops;  // env -> rendered tops
    {
      std::vector<std::string> saved;
      saved.swap(c.errors);
      for (const auto& env : envs) {
        auto path = c.find_in_env(env, state_top_);
        if (!path) continue;
        auto t = c.render(*path, "Rendering Primary Top file failed", true);
        if (!t) continue;
        tops.push_back({env, {std::move(*t)}});
      }
      // One level of include: in top files, as Salt.
      for (auto& [env, ctops] : tops) {
        std::vector<std::string> incs;
        for (auto& ct : ctops) {
          if (!ct.is_object() || !ct.contains("include")) continue;
          if (ct["include"].is_array())
            for (const auto& i : ct["include"])
              if (auto s = text_of(i); !s.empty()) incs.push_back(s);
          ct.erase("include");
        }
        std::set<std::string> done;
        for (const auto& sls : incs) {
          if (!done.insert(sls).second) continue;
          auto loc = c.find_sls(env, sls);
          if (!loc) {
            c.errors.push_back("Rendering Top file " + sls + " failed, render error:\nnot found");
            continue;
          }
          if (auto t = c.render(loc->path, "Rendering Top file " + sls + " failed", true)) ctops.push_back(std::move(*t));
        }
      }
      top_errors.swap(c.errors);
      c.errors = std::move(saved);
    }

    // --- merge_tops + sort_top_targets.
    wire::value top = wire::value::object();  // env -> tgt -> [match dicts..., sls...]
    std::map<std::string, std::map<std::string, std::int64_t>> orders;
    bool bad_top = false;
    for (const auto& [_, ctops] : tops) {
      for (const auto& ctop : ctops) {
        if (!ctop.is_object()) {
          bad_top = true;
          continue;
        }
        for (auto eit = ctop.begin(); eit != ctop.end(); ++eit) {
          const std::string& saltenv = eit.key();
          if (saltenv == "include") continue;
          if (!eit->is_object()) {
            bad_top = true;
            continue;
          }
          for (auto tit = eit->begin(); tit != eit->end(); ++tit) {
            const std::string& tgt = tit.key();
            if (!tit->is_array()) {
              bad_top = true;
              continue;
            }
            wire::value matches = wire::value::array();
            std::vector<std::string> states;
            std::int64_t order = 0;
            bool ignore_missing = false;
            for (const auto& comp : *tit) {
              if (comp.is_object()) {
                if (comp.contains("match")) matches.push_back(comp);
                if (const auto* o = wire::find(comp, "order")) {
                  if (o->is_number_integer())
                    order = o->get<std::int64_t>();
                  else if (auto t = wire::as_text(*o)) {
                    try {
                      order = std::stoll(std::string(*t));
                    } catch (...) {
                      order = 0;
                    }
                  }
                }
                if (auto im = wire::get_bool(comp, "ignore_missing"); im && *im) ignore_missing = true;
              } else if (auto t = wire::as_text(comp)) {
                if (std::find(states.begin(), states.end(), *t) == states.end()) states.emplace_back(*t);
              }
            }
            orders[saltenv][tgt] = order;
            if (ignore_missing) c.ignored[saltenv].insert(c.ignored[saltenv].end(), states.begin(), states.end());
            for (const auto& s : states) matches.push_back(s);
            top[saltenv][tgt] = std::move(matches);
          }
        }
      }
    }
    if (bad_top) top_errors.push_back("Error encountered while rendering pillar top file.");
    for (auto& [env, body] : top.items()) {
      std::vector<std::string> keys;
      for (auto it = body.begin(); it != body.end(); ++it) keys.push_back(it.key());
      auto& ord = orders[env];
      std::stable_sort(keys.begin(), keys.end(),
                       [&](const std::string& a, const std::string& b) { return ord[a] < ord[b]; });
      wire::value sorted = wire::value::object();
      for (const auto& k : keys) sorted[k] = body[k];
      body = std::move(sorted);
    }

    // --- top_matches.
    std::vector<std::pair<std::string, std::vector<std::string>>> matches;
    for (auto eit = top.begin(); eit != top.end(); ++eit) {
      if (!penv.empty() && eit.key() != penv) continue;
      for (auto tit = eit->begin(); tit != eit->end(); ++tit) {
        if (!c.confirm_top(tit.key(), *tit, minion_id, grains)) continue;
        auto mit = std::find_if(matches.begin(), matches.end(), [&](const auto& p) { return p.first == eit.key(); });
        if (mit == matches.end()) {
          matches.push_back({eit.key(), {}});
          mit = matches.end() - 1;
        }
        for (const auto& item : *tit)
          if (item.is_string() && std::find(mit->second.begin(), mit->second.end(), item.get<std::string>()) == mit->second.end())
            mit->second.push_back(item.get<std::string>());
      }
    }
    if (!env_order_.empty()) {
      std::vector<std::pair<std::string, std::vector<std::string>>> ordered;
      for (const auto& e : env_order_)
        for (auto& m : matches)
          if (m.first == e && !m.second.empty()) {
            ordered.push_back(std::move(m));
            m.second.clear();
          }
      for (auto& m : matches)
        if (!m.second.empty()) ordered.push_back(std::move(m));
      matches = std::move(ordered);
    }

    // --- render_pillar.
    wire::value pillar = wire::value::object();
    for (const auto& [env, pstates] : matches) {
      std::vector<std::string> files;
      for (const auto& m : pstates) {
        const auto* av = c.avail(env);
        std::vector<std::string> hit;
        if (!av)
          c.errors.push_back("No matching pillar environment for environment '" + env + "' found");
        else
          for (const auto& a : *av)
            if (match::glob_match(m, a)) hit.push_back(a);
        if (hit.empty()) hit.push_back(m);
        files.insert(files.end(), hit.begin(), hit.end());
      }
      wire::value mods = wire::value::object();
      for (const auto& sls : files) {
        wire::value p = c.render_pstate(sls, env, mods, 0);
        if (p.is_object()) pillar = c.merge(pillar, p);
      }
    }
    std::vector<std::string> errors = std::move(c.errors);
    errors.insert(errors.end(), top_errors.begin(), top_errors.end());
    if (!errors.empty()) {
      for (const auto& e : errors) spdlog::critical("Pillar render error: {}", e);
      wire::value errs = wire::value::array();
      for (const auto& e : errors) errs.push_back(e);
      pillar["_errors"] = std::move(errs);
    }
    return pillar;
  } catch (const std::exception& e) {
    spdlog::error("pillar: compiling pillar for {} failed: {}", minion_id, e.what());
    wire::value out = wire::value::object();
    out["_errors"] = wire::value::array({std::string("Pillar compilation failed: ") + e.what()});
    return out;
  }
}

}  // namespace sylvite::master
