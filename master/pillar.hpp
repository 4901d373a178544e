// sylvite::master pillar compiler: Salt 3008.5's salt/pillar/__init__.py (Pillar,
// PillarCache) for one minion's `_pillar` request. Every file (top files, SLS, file_tree
// templates) goes through render::renderer (core/render/render.hpp: the `renderer`
// pipeline, shebangs, Jinja in worker processes); this file never parses Jinja itself.
//   get_tops: pillar_roots[env]/<state_top> of every env (base first, then pillar_roots
//     order), or only `pillarenv`, or only the request saltenv with strategy `none`; one
//     level of `include:` in top files. Rendered with grains, opts, pillar ({}),
//     saltenv=env. The first top that fails to render stops the rest (as Salt).
//   merge_tops / sort_top_targets / top_matches: env -> {target: [match dicts, sls]},
//     {"match": ...} (default compound), {"order": n}, {"ignore_missing": true};
//     a malformed top empties the whole top ("Error encountered while rendering pillar
//     top file.").
//   render_pillar / render_pstate: sls names globbed against the env's available sls
//     ("a.b" is a/b.sls or a/b/init.sls, first root wins); `include:` (globs, ".rel",
//     {name: {key: "x:y", defaults: {...}}}), pillar_includes_override_sls; each SLS is
//     rendered with grains, pillar (what Salt passes: {} or the ext_pillar data with
//     ext_pillar_first), opts (master options with id, saltenv, pillarenv, grains...),
//     saltenv, sls and the include's `defaults` as top-level variables.
//   ext_pillar (ext_pillar_first before or else after the SLS): cmd_yaml, cmd_json,
//     file_tree (master/pillar_ext.hpp); other names are refused (logged once at startup,
//     and reported in _errors).
//   Merges: pillar_source_merging_strategy with pillar_merge_lists (pillar_merge below).
//   Errors go to the "_errors" list with Salt's texts; unsupported renderers, render
//     timeouts (pillar_render_timeout per file) and pillar_compile_timeout (per minion:
//     compiling stops, what was compiled is returned with an _errors entry) too.
//   pillar_cache (PillarCache): keyed "<id>" or "<id>:<pillarenv>", TTL
//     pillar_cache_ttl, backend disk (cachedir/pillar_cache) or memory; a request's
//     pillar_override is merged after the cache (never stored), as Salt with
//     minion_data_cache or pillar_cache on.
// Thread-safety: compile() is safe from any thread (state on the stack; the cache and the
// log-once set behind a mutex). It blocks (renders, commands, disk): call it from the
// master's worker pool, never from a network thread.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

// The fields of a `_pillar` request the compiler uses (Salt's AESFuncs._pillar).
struct pillar_request {
  std::string minion_id;
  wire::value grains = nullptr;             // the minion's grains (id is set to minion_id)
  wire::value saltenv = nullptr;            // load saltenv (or its old name env)
  wire::value pillarenv = nullptr;          // null: the master's pillarenv option
  wire::value pillar_override = nullptr;    // merged last (a map; anything else ignored)
  wire::value extra_minion_data = nullptr;  // for ext_pillar modules that take it
  bool clean_cache = false;                 // drop this minion's pillar_cache entry first
};

class pillar_compiler {
 public:
  // cfg and renderer must outlive the compiler.
  pillar_compiler(const config::master_config& cfg, render::renderer& renderer);
  ~pillar_compiler();
  pillar_compiler(const pillar_compiler&) = delete;
  pillar_compiler& operator=(const pillar_compiler&) = delete;

  wire::value compile(const pillar_request& req) const;
  // Shorthand: compile({minion_id, grains, saltenv=null, pillarenv}).
  wire::value compile(const std::string& minion_id, const wire::value& grains,
                      const wire::value& pillarenv = nullptr) const;

  // Calls from the templates back to the master (render::call_handler), with the id of the
  // minion the pillar is for (salt['mine.get'] answered by master/mine). Set before serving.
  using render_call = std::function<render::call_result(const std::string& minion_id, std::string_view fun,
                                                        const wire::value& args)>;
  void set_render_call(render_call f) { render_call_ = std::move(f); }

 private:
  struct shared;  // pillar cache + log-once set (mutex inside)
  const config::master_config& cfg_;
  render::renderer& renderer_;
  std::string state_top_ = "top.sls";
  std::vector<std::string> env_order_;
  std::unique_ptr<shared> shared_;
  render_call render_call_;
};

// Salt's salt.utils.dictupdate.merge(a, b, strategy, renderer, merge_lists): smart
// (aggregate when the renderer pipe ends in yamlex, else recurse), recurse, aggregate
// (yamlex merge_recursive, level 1), overwrite, none, list; an unknown strategy falls
// back to recurse (logged).
wire::value pillar_merge(const wire::value& a, const wire::value& b, const std::string& strategy,
                         const std::string& renderer = "yaml", bool merge_lists = false);
// merge_recurse: a copy of a with b merged in recursively (maps merge, later wins; lists
// replaced, or extended without duplicates if merge_lists).
wire::value pillar_merge(const wire::value& a, const wire::value& b, bool merge_lists = false);

}  // namespace sylvite::master
