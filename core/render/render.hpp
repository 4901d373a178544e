// sylvite::render: Salt's renderer pipeline (salt/template.py compile_template) as one
// component: a file on disk + a context in, data out. Used by the pillar compiler now and
// by reactor/orchestration SLS later. The engine is Jinja2 itself (Debian python3-jinja2)
// in an embedded CPython inside worker processes (`sylvite-render`, see
// docs/architecture.md "Rendering"): exact Jinja semantics, no GIL or Python on the
// master's threads, and a template that never ends is stopped by killing its worker.
//
// Pipeline (per file, as Salt):
//   - the renderer string comes from the file's shebang line (`#!jinja|yaml`, `#!yaml`,
//     `#!json`, `#!jinja|json`, `#!yaml|gpg`, `#!jinja|yaml|gpg`) or else default_pipe;
//   - supported renderers: jinja, yaml, json, gpg (gpg_keydir). One Salt 3008.5 has but
//     sylvite does not run (py, mako, pyobjects, stateconf, toml, yamlex, ...) is
//     status::unsupported_renderer, the message naming the file and the renderer. As in
//     Salt's check_render_pipe_str: a renderer refused by renderer_blacklist /
//     renderer_whitelist is skipped with a logged warning (the rest of the pipe runs), and
//     a name Salt does not know at all gives an empty pipe, i.e. {} with a logged error;
//   - an empty result renders to an empty map, as Salt.
// Template variables the worker derives itself from path/sls (Salt's
// generate_sls_context: tplpath, tpldir, tpldot, tplfile, sls_path, slspath, slsdotpath,
// slscolonpath); the caller passes the data ones in `context`.
// Thread-safety: renderer::render is safe from any thread and blocks (call it from a
// worker pool, never from a network thread).
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::render {

// A call from a template back to the caller while the file renders (pillar Jinja's
// salt['mine.get']): the worker sends {"call": fun, "args": {...}} on its socketpair and
// waits; the pool answers with the handler's result. Only the names in callable_functions
// reach a handler (anything else ends the render as a protocol error: the worker is
// killed); at most pool_options::max_calls calls per file, each request at most
// max_call_bytes; the time counts against request::timeout. Without a handler the
// template gets an error ("... is not available here").
struct call_result {
  bool ok = true;
  wire::value value;  // ok: what the template gets
  std::string error;  // !ok: raised in the template
};
// fun: one of callable_functions; args: its keyword arguments (a map). Called on the
// rendering thread; may block (disk), never long.
using call_handler = std::function<call_result(std::string_view fun, const wire::value& args)>;
inline constexpr std::string_view callable_functions[] = {"mine.get"};

struct request {
  std::filesystem::path path;       // the file to render (absolute)
  std::string saltenv = "base";     // the environment the file belongs to
  std::string sls;                  // "a.b" for a/b.sls or a/b/init.sls; "" for a top file
  // The environment's roots in order: where {% include %}, {% import %}, {% from %},
  // import_yaml/import_json/import_text and salt:// names are looked up (relative names
  // "./x", "../x" from the including template's directory), as Salt's SaltCacheLoader.
  std::vector<std::filesystem::path> roots;
  std::string default_pipe = "jinja|yaml";  // master `renderer`
  std::vector<std::string> blacklist;       // renderer_blacklist
  std::vector<std::string> whitelist;       // renderer_whitelist (empty: all supported)
  // Template variables: grains, pillar, opts, saltenv, pillarenv, minion_id (and any
  // other the caller adds). `opts` also carries the renderer options the worker reads:
  // jinja_env, jinja_sls_env, jinja_trim_blocks, jinja_lstrip_blocks, gpg_keydir.
  // Every key becomes a template variable; Salt's pillar compiler also passes
  // `_pillar_rend: true` (its compile_template kwarg), so a pillar caller adds it too.
  // The `salt` functions read grains/pillar/opts from here (pillar.get reads `pillar`).
  wire::value context = wire::value::object();
  std::chrono::milliseconds timeout{30000};  // this file, worker time included
  call_handler call;                          // calls back from the template (may be empty)
};

struct outcome {
  enum class status {
    ok,
    render_error,          // the template or the data is wrong (message: Salt's exception text)
    unsupported_renderer,  // shebang/pipe names a renderer sylvite does not run, or refused by
                           // renderer_blacklist/whitelist
    timeout,               // request::timeout passed; the worker was killed and replaced
    unavailable,           // no worker could be started (message says why)
  };
  status st = status::unavailable;
  wire::value data;   // ok: the rendered data (a map for pillar; {} for an empty result)
  std::string error;  // otherwise: one-paragraph message, without the "Rendering SLS" prefix
  bool ok() const { return st == status::ok; }
};

class renderer {
 public:
  virtual ~renderer() = default;
  virtual outcome render(const request& r) = 0;
};

struct pool_options {
  // The worker executable; empty: `sylvite-render` beside the running executable
  // (/proc/self/exe's directory).
  std::filesystem::path worker;
  unsigned workers = 2;                      // processes, started lazily, restarted on death
  std::uint64_t worker_memory_mb = 1024;     // RLIMIT_AS of each worker
  std::size_t max_output_bytes = 64u << 20;  // a larger result is refused
  unsigned max_calls = 1000;                 // call_handler calls per file (more: render error)
  std::size_t max_call_bytes = 1u << 20;     // one call request from a worker
};

// The production renderer: a pool of sylvite-render worker processes.
std::unique_ptr<renderer> make_process_pool(const pool_options& opt);

}  // namespace sylvite::render
