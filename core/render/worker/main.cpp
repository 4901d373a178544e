// sylvite-render: one render worker process of the sylvite::render pool (render.hpp).
// Embeds CPython (isolated config: no PYTHON* environment, no user site) with Debian's
// dist-packages on sys.path, loads the Python glue compiled into this binary and runs its
// serve loop: framed JSON requests on stdin, replies on stdout, logs on stderr. It never
// imports Salt. Options: --debug-hooks (tests only: jinja globals that crash the worker).
// Thread-safety: single-threaded process.
#include <Python.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sylvite/render_glue.hpp"

// Embedded CPython keeps its interpreter state until exit by design: no leak reports.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace {

bool check(PyStatus st, PyConfig* cfg) {
  if (!PyStatus_Exception(st)) return true;
  std::fprintf(stderr, "sylvite-render: cannot initialise Python: %s\n", st.err_msg ? st.err_msg : "?");
  PyConfig_Clear(cfg);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool debug_hooks = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--debug-hooks") == 0) {
      debug_hooks = true;
    } else {
      std::fprintf(stderr, "usage: sylvite-render [--debug-hooks]  (framed JSON on stdin/stdout)\n");
      return 2;
    }
  }
  PyConfig cfg;
  PyConfig_InitIsolatedConfig(&cfg);
  cfg.site_import = 1;           // Debian's site.py adds /usr/lib/python3/dist-packages
  cfg.user_site_directory = 0;
  cfg.write_bytecode = 0;
  cfg.install_signal_handlers = 0;
  if (!check(PyConfig_SetString(&cfg, &cfg.program_name, L"/usr/bin/python3"), &cfg)) return 1;
  if (!check(PyConfig_SetString(&cfg, &cfg.home, L"/usr"), &cfg)) return 1;
  if (!check(Py_InitializeFromConfig(&cfg), &cfg)) return 1;
  PyConfig_Clear(&cfg);

  int rc = 1;
  std::string source;
  for (const char* const* c = sylvite::render::glue::chunks; *c; ++c) source += *c;
  PyObject* code = Py_CompileString(source.c_str(), "sylvite_render.py", Py_file_input);
  PyObject* mod = code ? PyImport_ExecCodeModule("sylvite_render", code) : nullptr;
  PyObject* serve = mod ? PyObject_GetAttrString(mod, "serve") : nullptr;
  PyObject* res = serve ? PyObject_CallFunction(serve, "i", debug_hooks ? 1 : 0) : nullptr;
  if (res) {
    rc = static_cast<int>(PyLong_AsLong(res));
  } else {
    PyErr_Print();
  }
  Py_XDECREF(res);
  Py_XDECREF(serve);
  Py_XDECREF(mod);
  Py_XDECREF(code);
  std::fflush(stderr);
  // Skip Py_Finalize: nothing to flush, and it can block on threads a template started.
  std::_Exit(rc);
}
