// sylvite::config loaders: CONFIG_DIR/master (minion) + master.d/*.conf (minion.d/*.conf).
// Each struct field is visited twice by the same visit_*() list: once by a `reader` that
// validates the merged file options into the struct, once by a `writer` that puts the
// final value into `raw`. Salt quirks reproduced here (salt/config/__init__.py, 3008):
//   - prepend_root_dir(): absolute paths get root_dir prepended unless already under it;
//     relative paths are joined to root_dir; log_file URIs (udp://...) are left alone;
//     file_roots/pillar_roots are never re-rooted.
//   - sock_dir longer than cachedir + 10 chars becomes <cachedir>/.salt-unix.
//   - id: a non-string id is str()'d; empty/null id means the default (fqdn / host_master).
//   - cluster_peers / cluster_pki_dir are ignored (reset) without cluster_id.
//   - log_level_logfile defaults to log_level.
//   - failover: master_shuffle -> random_master; master_failback_interval 0 with
//     master_failback -> master_alive_interval (minion.py eval_master).
// Thread-safety: pure functions (default_*_id() call the resolver).
#include <netdb.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "core/config/config.hpp"
#include "core/config/detail.hpp"
#include "core/util/files.hpp"

namespace sylvite::config {
namespace fs = std::filesystem;

namespace {

// Options merged from all files, with the file each one came from.
struct source {
  wire::value opts = wire::value::object();
  std::map<std::string, std::string> origin;
};

config_error make_error(const std::string& file, const std::string& option, const std::string& expected,
                        const std::string& got) {
  config_error e;
  e.file = file;
  e.option = option;
  e.expected = expected;
  e.message = (file.empty() ? std::string("(defaults)") : file) + ": option '" + option + "': expected " +
              expected + ", got " + got;
  return e;
}

config_error file_error(const std::string& file, const std::string& what) {
  config_error e;
  e.file = file;
  e.expected = "a readable YAML map of options";
  e.message = file + ": " + what;
  return e;
}

std::string show(const wire::value& v) {
  if (v.is_binary()) return wire::value(std::string(*detail::bytes_of(v))).dump();
  return v.dump(-1, ' ', false, wire::value::error_handler_t::replace);
}

// Read and merge one file into src. Missing -> nothing (when allow_missing).
std::optional<config_error> merge_file(const fs::path& p, source& src, bool allow_missing) {
  auto text = util::read_file(p);
  if (!text) {
    if (allow_missing && text.error() == util::errc::not_found) return std::nullopt;
    return file_error(p.string(), "cannot read file (" + text.error().message() + ")");
  }
  auto doc = parse_yaml(*text);
  if (!doc) return file_error(p.string(), doc.error());
  if (doc->is_null()) return std::nullopt;  // empty file
  if (!doc->is_object()) {
    return file_error(p.string(), "line 1, column 1: the file must be a map of options, not " +
                                      std::string(doc->type_name()));
  }
  for (auto& [k, v] : doc->items()) {
    src.opts[k] = v;
    src.origin[k] = p.string();
  }
  return std::nullopt;
}

std::optional<config_error> load_sources(const fs::path& config_dir, const std::string& role, source& src) {
  if (auto e = merge_file(config_dir / role, src, true)) return e;
  fs::path dropin = config_dir / (role + ".d");
  for (const auto& name : util::list_dir(dropin)) {
    if (name.size() <= 5 || !name.ends_with(".conf")) continue;
    if (auto e = merge_file(dropin / name, src, false)) return e;
  }
  return std::nullopt;
}

// Python int() of a string: surrounding whitespace, sign, digits with single '_' between.
std::optional<std::int64_t> python_int(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  __extension__ __int128 v = 0;
  char prev = 0;
  for (char c : s) {
    if (c == '_') {
      if (prev == '_') return std::nullopt;
    } else if (c >= '0' && c <= '9') {
      v = v * 10 + (c - '0');
      if (v > static_cast<decltype(v)>(INT64_MAX) + 1) return std::nullopt;
    } else {
      return std::nullopt;
    }
    prev = c;
  }
  if (neg) v = -v;
  if (v > INT64_MAX || v < INT64_MIN) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

std::string range_text(std::int64_t lo, std::int64_t hi) {
  constexpr std::int64_t big = INT32_MAX;
  if (lo == 1 && hi == 65535) return "an integer between 1 and 65535";
  if (hi >= big && lo <= -big) return "an integer";
  if (hi >= big) return "an integer >= " + std::to_string(lo);
  return "an integer between " + std::to_string(lo) + " and " + std::to_string(hi);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

// Reader: validates options present in the files into the struct fields.
class reader {
 public:
  explicit reader(const source& s) : src_(s) {}
  std::optional<config_error> error;

  const wire::value* get(const std::string& name) const {
    auto it = src_.opts.find(name);
    return it == src_.opts.end() ? nullptr : &*it;
  }
  std::string file_of(const std::string& name) const {
    auto it = src_.origin.find(name);
    return it == src_.origin.end() ? std::string() : it->second;
  }
  void fail(const std::string& name, const std::string& expected, const wire::value& got) {
    if (!error) error = make_error(file_of(name), name, expected, show(got));
  }

  template <class I>
  void integer(const std::string& name, I& out, std::int64_t lo = INT32_MIN, std::int64_t hi = INT32_MAX) {
    const wire::value* v = get(name);
    if (!v || error) return;
    auto n = to_int(*v);
    if (!n || *n < lo || *n > hi) return fail(name, range_text(lo, hi), *v);
    out = static_cast<I>(*n);
  }
  void opt_integer(const std::string& name, std::optional<int>& out, std::int64_t lo, std::int64_t hi) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out.reset();
      return;
    }
    auto n = to_int(*v);
    if (!n || *n < lo || *n > hi) return fail(name, range_text(lo, hi) + " or null", *v);
    out = static_cast<int>(*n);
  }
  void port(const std::string& name, int& out) { integer(name, out, 1, 65535); }
  void boolean(const std::string& name, bool& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (!v->is_boolean()) return fail(name, "a boolean (true/false, yes/no, on/off)", *v);
    out = v->get<bool>();
  }
  // Booleans where Salt also takes None (auto): null -> false.
  void boolean_or_null(const std::string& name, bool& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out = false;
      return;
    }
    boolean(name, out);
  }
  void string(const std::string& name, std::string& out, bool null_is_empty = false) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null() && null_is_empty) {
      out.clear();
      return;
    }
    auto s = to_string(*v);
    if (!s) return fail(name, "a string", *v);
    out = *s;
  }
  void opt_string(const std::string& name, std::optional<std::string>& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out.reset();
      return;
    }
    auto s = to_string(*v);
    if (!s) return fail(name, "a string or null", *v);
    out = *s;
  }
  void path(const std::string& name, fs::path& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (!v->is_string() || v->get_ref<const std::string&>().empty()) return fail(name, "a path", *v);
    out = v->get<std::string>();
  }
  void opt_path(const std::string& name, std::optional<fs::path>& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out.reset();
      return;
    }
    if (!v->is_string() || v->get_ref<const std::string&>().empty()) return fail(name, "a path or null", *v);
    out = fs::path(v->get<std::string>());
  }
  void enumeration(const std::string& name, std::string& out, const std::vector<std::string>& allowed,
                   bool lower = false) {
    const wire::value* v = get(name);
    if (!v || error) return;
    std::string what = "one of " + join(allowed, ", ");
    auto s = to_string(*v);
    if (!s || !v->is_string()) return fail(name, what, *v);
    std::string val = *s;
    if (lower)
      for (auto& c : val) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (std::find(allowed.begin(), allowed.end(), val) == allowed.end()) return fail(name, what, *v);
    out = val;
  }
  void roots(const std::string& name, roots_map& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    const std::string what = "a map of environment names to lists of directories";
    if (!v->is_object()) return fail(name, what, *v);
    roots_map m;
    for (auto& [env, dirs] : v->items()) {
      std::vector<std::string> list;
      if (!dirs.is_null()) {  // Salt turns a null env into an empty list
        if (!dirs.is_array()) return fail(name, what, *v);
        for (const auto& d : dirs) {
          if (!d.is_string()) return fail(name, what, *v);
          list.push_back(d.get<std::string>());
        }
      }
      m[env] = std::move(list);
    }
    out = std::move(m);
  }
  // exact > 0: the list must have that many entries.
  void string_list(const std::string& name, std::vector<std::string>& out, std::size_t exact = 0) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out.clear();
      return;
    }
    if (!v->is_array()) return fail(name, "a list of strings", *v);
    std::vector<std::string> list;
    for (const auto& x : *v) {
      if (!x.is_string()) return fail(name, "a list of strings", *v);
      list.push_back(x.get<std::string>());
    }
    if (exact && list.size() != exact) return fail(name, "a list of " + std::to_string(exact) + " strings", *v);
    out = std::move(list);
  }
  void nodegroup_map(const std::string& name, std::map<std::string, std::string>& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    const std::string what = "a map of nodegroup names to compound targets (strings or lists of strings)";
    if (v->is_null()) {
      out.clear();
      return;
    }
    if (!v->is_object()) return fail(name, what, *v);
    std::map<std::string, std::string> m;
    for (auto& [group, expr] : v->items()) {
      if (expr.is_string()) {
        m[group] = expr.get<std::string>();
      } else if (expr.is_array()) {
        // Salt splits a string on whitespace and uses a list as the words: joining the
        // list with spaces gives the same words.
        std::vector<std::string> words;
        for (const auto& w : expr) {
          auto s = to_string(w);
          if (!s) return fail(name, what, *v);
          words.push_back(*s);
        }
        m[group] = join(words, " ");
      } else {
        return fail(name, what, *v);
      }
    }
    out = std::move(m);
  }
  // A list of single-key maps ({module: argument}), as Salt's ext_pillar; null: [].
  void map_list(const std::string& name, wire::value& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out = wire::value::array();
      return;
    }
    const std::string what = "a list of one-key maps ({module: argument})";
    if (!v->is_array()) return fail(name, what, *v);
    for (const auto& x : *v)
      if (!x.is_object() || x.size() != 1) return fail(name, what, *v);
    out = *v;
  }
  void any_map(const std::string& name, wire::value& out) {
    const wire::value* v = get(name);
    if (!v || error) return;
    if (v->is_null()) {
      out = wire::value::object();
      return;
    }
    if (!v->is_object()) return fail(name, "a map", *v);
    out = *v;
  }

  static std::optional<std::int64_t> to_int(const wire::value& v) {
    if (v.is_number_integer() && !v.is_boolean()) {
      if (v.is_number_unsigned()) {
        auto u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<std::int64_t>(u);
      }
      return v.get<std::int64_t>();
    }
    if (v.is_string()) return python_int(v.get_ref<const std::string&>());
    return std::nullopt;
  }
  // Salt's str options accept anything str() converts except containers; we also refuse
  // null and booleans, which are almost always mistakes.
  static std::optional<std::string> to_string(const wire::value& v) {
    if (v.is_string() || v.is_binary()) return std::string(*detail::bytes_of(v));
    if (v.is_number()) return detail::python_str(v);
    return std::nullopt;
  }

 private:
  const source& src_;
};

// Writer: every visited field into raw (final values).
class writer {
 public:
  explicit writer(wire::value& raw) : raw_(raw) {}
  template <class I>
  void integer(const std::string& name, I& v, std::int64_t = 0, std::int64_t = 0) { raw_[name] = v; }
  void opt_integer(const std::string& name, std::optional<int>& v, std::int64_t, std::int64_t) {
    raw_[name] = v ? wire::value(*v) : wire::value(nullptr);
  }
  void port(const std::string& name, int& v) { raw_[name] = v; }
  void boolean(const std::string& name, bool& v) { raw_[name] = v; }
  void boolean_or_null(const std::string& name, bool& v) { raw_[name] = v; }
  void string(const std::string& name, std::string& v, bool = false) { raw_[name] = v; }
  void opt_string(const std::string& name, std::optional<std::string>& v) {
    raw_[name] = v ? wire::value(*v) : wire::value(nullptr);
  }
  void path(const std::string& name, fs::path& v) { raw_[name] = v.string(); }
  void opt_path(const std::string& name, std::optional<fs::path>& v) {
    raw_[name] = v ? wire::value(v->string()) : wire::value(nullptr);
  }
  void enumeration(const std::string& name, std::string& v, const std::vector<std::string>&, bool = false) {
    raw_[name] = v;
  }
  void roots(const std::string& name, roots_map& v) {
    wire::value o = wire::value::object();
    for (auto& [env, dirs] : v) o[env] = dirs;
    raw_[name] = o;
  }
  void string_list(const std::string& name, std::vector<std::string>& v, std::size_t = 0) { raw_[name] = v; }
  void nodegroup_map(const std::string& name, std::map<std::string, std::string>& v) {
    wire::value o = wire::value::object();
    for (auto& [k, s] : v) o[k] = s;
    raw_[name] = o;
  }
  void any_map(const std::string& name, wire::value& v) { raw_[name] = v; }
  void map_list(const std::string& name, wire::value& v) { raw_[name] = v; }

 private:
  wire::value& raw_;
};

const std::vector<std::string> k_hash_types = {"sha256", "sha1", "sha224", "sha384", "sha512", "md5"};
const std::vector<std::string> k_sig_algos = {"PKCS1v15-SHA1", "PKCS1v15-SHA224"};
const std::vector<std::string> k_enc_algos = {"OAEP-SHA1", "OAEP-SHA224"};
const std::vector<std::string> k_log_levels = {"all",  "garbage", "trace", "debug",    "profile",
                                               "info", "warning", "error", "critical", "quiet"};
constexpr std::int64_t k_max = INT32_MAX;
constexpr std::int64_t k_max64 = INT64_MAX;

// Fields common to both daemons are visited in each visit_* (kept in struct order).
template <class V>
void visit_zmq(zmq_settings& z, V& v) {
  v.boolean("zmq_filtering", z.zmq_filtering);
  v.boolean("zmq_monitor", z.zmq_monitor);
  v.integer("zmq_heartbeat_ivl", z.zmq_heartbeat_ivl, 0, k_max);
  v.integer("zmq_heartbeat_timeout", z.zmq_heartbeat_timeout, 0, k_max);
}

const std::vector<std::string> k_transports = {"zeromq", "tcp"};
const std::vector<std::string> k_zmq_engines = {"native", "libzmq"};

template <class V>
void visit_master(master_config& c, V& v) {
  v.enumeration("transport", c.transport, k_transports);
  visit_zmq(c.zmq, v);
  v.integer("pub_hwm", c.pub_hwm, 1, k_max);
  v.integer("zmq_backlog", c.zmq_backlog, 1, k_max);
  v.enumeration("zmq_engine", c.zmq_engine, k_zmq_engines);
  v.string("interface", c.interface);
  v.boolean_or_null("ipv6", c.ipv6);
  v.port("publish_port", c.publish_port);
  v.port("ret_port", c.ret_port);
  v.integer("worker_threads", c.worker_threads, 1, k_max);
  v.integer("publish_processes", c.publish_processes, 0, 64);
  v.string("user", c.user);
  v.path("root_dir", c.root_dir);
  v.path("pki_dir", c.pki_dir);
  v.path("cachedir", c.cachedir);
  v.path("sock_dir", c.sock_dir);
  v.path("log_file", c.log_file);
  v.enumeration("log_level", c.log_level, k_log_levels, true);
  v.enumeration("log_level_logfile", c.log_level_logfile, k_log_levels, true);
  v.roots("file_roots", c.file_roots);
  v.roots("pillar_roots", c.pillar_roots);
  v.boolean("auto_accept", c.auto_accept);
  v.boolean("open_mode", c.open_mode);
  v.string("autosign_file", c.autosign_file, true);
  v.string("autoreject_file", c.autoreject_file, true);
  v.integer("autosign_timeout", c.autosign_timeout, 0, k_max);
  v.integer("publish_session", c.publish_session, 1, k_max);
  v.integer("minimum_auth_version", c.minimum_auth_version, 2, 3);
  v.integer("keysize", c.keysize, 1024, 16384);
  v.boolean("sign_pub_messages", c.sign_pub_messages);
  v.enumeration("publish_signing_algorithm", c.publish_signing_algorithm, k_sig_algos);
  v.boolean("master_sign_pubkey", c.master_sign_pubkey);
  v.string("master_sign_key_name", c.master_sign_key_name);
  v.opt_string("master_pubkey_signature", c.master_pubkey_signature);
  v.boolean("master_use_pubkey_signature", c.master_use_pubkey_signature);
  v.integer("master_sign_keysize", c.master_sign_keysize, 0, 16384);
  v.boolean("rotate_aes_key", c.rotate_aes_key);
  v.boolean("ping_on_rotate", c.ping_on_rotate);
  v.integer("keep_jobs_seconds", c.keep_jobs_seconds, 0, k_max64);
  v.enumeration("hash_type", c.hash_type, k_hash_types, true);
  v.integer("file_buffer_size", c.file_buffer_size, 1, k_max64);
  v.integer("max_minions", c.max_minions, 0, k_max);
  v.boolean("job_cache", c.job_cache);
  v.integer("timeout", c.timeout, 0, k_max);
  v.integer("gather_job_timeout", c.gather_job_timeout, 0, k_max);
  v.integer("max_message_size", c.max_message_size, 1, k_max64);
  v.integer("pre_auth_max_message_size", c.pre_auth_max_message_size, 4096, k_max64);
  v.integer("pre_auth_max_objects", c.pre_auth_max_objects, 64, k_max);
  v.integer("pre_auth_large_frame_budget", c.pre_auth_large_frame_budget, 0, k_max64);
  v.integer("pre_auth_max_pending", c.pre_auth_max_pending, 1, k_max);
  v.integer("frame_timeout", c.frame_timeout, 0, k_max);
  v.integer("pre_auth_idle_timeout", c.pre_auth_idle_timeout, 0, k_max);
  v.integer("max_connections", c.max_connections, 0, k_max);
  v.integer("pre_auth_max_connections", c.pre_auth_max_connections, 0, k_max);
  v.integer("pre_auth_max_connections_per_source", c.pre_auth_max_connections_per_source, 0, k_max);
  v.integer("reserved_fds", c.reserved_fds, 0, 65536);
  v.integer("request_queue_size", c.request_queue_size, 1, k_max);
  v.integer("request_server_ttl", c.request_server_ttl, 0, k_max);
  v.integer("max_pending_keys", c.max_pending_keys, 0, k_max);
  v.integer("unaccepted_auth_rate", c.unaccepted_auth_rate, 0, k_max);
  v.integer("unaccepted_auth_burst", c.unaccepted_auth_burst, 1, k_max);
  v.boolean("minion_data_cache", c.minion_data_cache);
  v.boolean("tcp_keepalive", c.tcp_keepalive);
  v.integer("tcp_keepalive_idle", c.tcp_keepalive_idle, -1, k_max);
  v.integer("tcp_keepalive_cnt", c.tcp_keepalive_cnt, -1, k_max);
  v.integer("tcp_keepalive_intvl", c.tcp_keepalive_intvl, -1, k_max);
  v.string("renderer", c.renderer);
  v.string("state_top", c.state_top);
  v.enumeration("top_file_merging_strategy", c.top_file_merging_strategy, {"merge", "same", "merge_all"});
  v.enumeration("pillar_source_merging_strategy", c.pillar_source_merging_strategy,
                {"smart", "recurse", "aggregate", "overwrite", "none", "list"});
  v.nodegroup_map("nodegroups", c.nodegroups);
  v.string_list("renderer_blacklist", c.renderer_blacklist);
  v.string_list("renderer_whitelist", c.renderer_whitelist);
  v.any_map("jinja_env", c.jinja_env);
  v.any_map("jinja_sls_env", c.jinja_sls_env);
  v.boolean("jinja_trim_blocks", c.jinja_trim_blocks);
  v.boolean("jinja_lstrip_blocks", c.jinja_lstrip_blocks);
  v.opt_string("gpg_keydir", c.gpg_keydir);
  v.boolean("pillar_merge_lists", c.pillar_merge_lists);
  v.boolean("pillar_includes_override_sls", c.pillar_includes_override_sls);
  v.boolean("pillar_safe_render_error", c.pillar_safe_render_error);
  v.opt_string("pillarenv", c.pillarenv);
  v.boolean("pillarenv_from_saltenv", c.pillarenv_from_saltenv);
  v.map_list("ext_pillar", c.ext_pillar);
  v.boolean("ext_pillar_first", c.ext_pillar_first);
  v.boolean("pillar_cache", c.pillar_cache);
  v.integer("pillar_cache_ttl", c.pillar_cache_ttl, 0, k_max);
  v.enumeration("pillar_cache_backend", c.pillar_cache_backend, {"disk", "memory"});
  v.integer("pillar_render_timeout", c.pillar_render_timeout, 1, 86400);
  v.integer("pillar_render_workers", c.pillar_render_workers, 1, 256);
  v.integer("pillar_compile_timeout", c.pillar_compile_timeout, 1, 86400);
  v.boolean("job_cache_async", c.job_cache_async);
  v.boolean("job_cache_journal", c.job_cache_journal);
  v.opt_string("cluster_id", c.cluster_id);
  v.string_list("cluster_peers", c.cluster_peers);
  v.opt_path("cluster_pki_dir", c.cluster_pki_dir);
  v.port("cluster_pool_port", c.cluster_pool_port);
  v.integer("health_port", c.health_port, 0, 65535);
  v.opt_string("cluster_secret", c.cluster_secret);
  v.opt_string("cluster_pub_fingerprint", c.cluster_pub_fingerprint);
  v.boolean("cluster_allow_empty_secret", c.cluster_allow_empty_secret);
  v.opt_string("cluster_lb_admin", c.cluster_lb_admin);
  v.string_list("cluster_lb_backends", c.cluster_lb_backends, 2);  // [publish backend, request backend]
}

template <class V>
void visit_minion(minion_config& c, V& v) {
  v.enumeration("transport", c.transport, k_transports);
  visit_zmq(c.zmq, v);
  v.enumeration("zmq_engine", c.zmq_engine, k_zmq_engines);
  v.integer("recon_default", c.recon_default, 1, k_max);
  v.integer("recon_max", c.recon_max, 0, k_max);
  v.boolean("recon_randomize", c.recon_randomize);
  v.boolean_or_null("ipv6", c.ipv6);
  v.port("master_port", c.master_port);
  v.integer("master_alive_interval", c.master_alive_interval, 0, k_max);
  v.boolean("master_failback", c.master_failback);
  v.integer("master_failback_interval", c.master_failback_interval, 0, k_max);
  v.boolean("master_shuffle", c.master_shuffle);
  v.boolean("random_master", c.random_master);
  v.integer("random_reauth_delay", c.random_reauth_delay, 0, k_max);
  v.integer("master_alive_misses", c.master_alive_misses, 1, 100);
  v.integer("master_probe_timeout", c.master_probe_timeout, 1, k_max);
  v.integer("master_failback_probes", c.master_failback_probes, 1, 1000);
  v.integer("return_queue_max", c.return_queue_max, 0, k_max);
  v.integer("retry_dns", c.retry_dns, 0, k_max);
  v.opt_integer("retry_dns_count", c.retry_dns_count, 0, k_max);
  v.integer("master_tries", c.master_tries, -1, k_max);
  v.integer("acceptance_wait_time", c.acceptance_wait_time, 0, k_max);
  v.integer("acceptance_wait_time_max", c.acceptance_wait_time_max, 0, k_max);
  v.integer("auth_timeout", c.auth_timeout, 1, k_max);
  v.integer("auth_tries", c.auth_tries, 0, k_max);
  v.boolean("rejected_retry", c.rejected_retry);
  v.opt_integer("publish_port", c.publish_port, 1, 65535);
  v.path("root_dir", c.root_dir);
  v.path("pki_dir", c.pki_dir);
  v.path("cachedir", c.cachedir);
  v.path("sock_dir", c.sock_dir);
  v.path("log_file", c.log_file);
  v.enumeration("log_level", c.log_level, k_log_levels, true);
  v.enumeration("log_level_logfile", c.log_level_logfile, k_log_levels, true);
  v.string("master_finger", c.master_finger, true);
  v.boolean("verify_master_pubkey_sign", c.verify_master_pubkey_sign);
  v.string("master_sign_key_name", c.master_sign_key_name);
  v.enumeration("hash_type", c.hash_type, k_hash_types, true);
  v.integer("keysize", c.keysize, 1024, 16384);
  v.enumeration("encryption_algorithm", c.encryption_algorithm, k_enc_algos);
  v.enumeration("signing_algorithm", c.signing_algorithm, k_sig_algos);
  v.boolean("sign_pub_messages", c.sign_pub_messages);
  v.enumeration("file_client", c.file_client, {"remote", "local"});
  v.roots("file_roots", c.file_roots);
  v.roots("pillar_roots", c.pillar_roots);
  v.any_map("grains", c.grains);
  v.integer("return_retry_timer", c.return_retry_timer, 0, k_max);
  v.integer("return_retry_timer_max", c.return_retry_timer_max, 0, k_max);
  v.integer("return_retry_tries", c.return_retry_tries, 1, k_max);
  v.integer("minion_jid_queue_hwm", c.minion_jid_queue_hwm, 1, k_max);
  v.integer("publish_replay_window", c.publish_replay_window, 0, 86400 * 7);
  v.boolean("tcp_keepalive", c.tcp_keepalive);
  v.integer("tcp_keepalive_idle", c.tcp_keepalive_idle, -1, k_max);
  v.integer("tcp_keepalive_cnt", c.tcp_keepalive_cnt, -1, k_max);
  v.integer("tcp_keepalive_intvl", c.tcp_keepalive_intvl, -1, k_max);
  v.integer("ping_interval", c.ping_interval, 0, k_max);
  v.boolean("enable_legacy_startup_events", c.enable_legacy_startup_events);
  v.integer("max_message_size", c.max_message_size, 1, k_max64);
}

// salt.utils.path.join(root, path): normpath each part, strip the leading '/' of path.
std::string salt_join(const std::string& root, const std::string& path) {
  std::string p = path;
  std::string rel = fs::path(p.empty() ? "." : p).lexically_normal().string();
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  fs::path joined = fs::path(root) / rel;
  std::string out = joined.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// A URI such as udp://host or file:///x (Salt: urlparse(path).scheme != "").
bool has_uri_scheme(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (std::size_t i = 0; i < colon; ++i) {
    char c = s[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

}  // namespace

// Salt's prepend_root_dir() for one path (ROOT_DIR is "/" on Linux, so def_root_dir is "").
fs::path prepend_root_dir(const fs::path& root_dir, const fs::path& path) {
  std::string root = fs::absolute(root_dir).lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string p = path.string();
  // Salt: the default root ("" on POSIX) matches every absolute path; root_dir matches
  // paths under it. When both match, root_dir (the more specific) wins and its prefix is
  // stripped before joining again, so a path already under root_dir stays where it is.
  // Quirk kept: a path equal to root_dir strips to "" (falsy in Salt), so only the default
  // root matches and the result is root_dir/root_dir.
  if (root != "/" && p.starts_with(root + "/")) p = p.substr(root.size());
  return salt_join(root, p);
}

namespace {

void reroot(const fs::path& root, fs::path& p) { p = prepend_root_dir(root, p); }

void sock_dir_quirk(const fs::path& cachedir, fs::path& sock_dir) {
  if (sock_dir.string().size() > cachedir.string().size() + 10) sock_dir = cachedir / ".salt-unix";
}

std::string current_user() {
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name) return pw->pw_name;
  return "root";
}

// `id`: Salt str()s a non-string id; null/empty means "use the default".
std::optional<config_error> read_id(const reader& r, std::string& id, const std::function<std::string()>& dflt) {
  const wire::value* v = r.get("id");
  if (v && !v->is_null()) {
    if (v->is_object() || v->is_array()) {
      return make_error(r.file_of("id"), "id", "a string", show(*v));
    }
    id = v->is_string() || v->is_binary() ? std::string(*detail::bytes_of(*v)) : detail::python_str(*v);
  }
  if (id.empty()) id = dflt();
  return std::nullopt;
}

void finish_raw(wire::value& raw, const source& src) {
  for (auto& [k, v] : src.opts.items())
    if (!raw.contains(k)) raw[k] = v;
}

}  // namespace

// group (issue 19 point 3, part "group"): master_group: {id, secret | secret_file,
// masters: [REST API base URLs], self (optional), ca_file (optional), timeout (1..300)}.
// Every bad value refuses the start with the option named.
std::optional<config_error> read_master_group(const reader& r, master_config& c) {
  const wire::value* g = r.get("master_group");
  if (!g || g->is_null()) return std::nullopt;
  const std::string file = r.file_of("master_group");
  auto bad = [&](const std::string& key, const std::string& expected, const wire::value& got) {
    return make_error(file, "master_group" + (key.empty() ? std::string() : "." + key), expected, show(got));
  };
  if (!g->is_object()) return bad("", "a map {id, secret or secret_file, masters, ca_file, timeout}", *g);
  master_config::group_config gc;
  static const std::set<std::string> known = {"id", "secret", "secret_file", "masters", "self", "ca_file", "timeout"};
  for (auto it = g->begin(); it != g->end(); ++it)
    if (!known.contains(it.key())) return bad(it.key(), "no such key (id, secret, secret_file, masters, self, ca_file, timeout)", it.value());
  auto text = [&](const char* k) -> std::optional<std::string> {
    auto it = g->find(k);
    if (it == g->end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto id = text("id");
  if (!id || id->empty()) return bad("id", "a non-empty name", g->contains("id") ? (*g)["id"] : wire::value(nullptr));
  gc.id = *id;
  if (g->contains("secret") && g->contains("secret_file"))
    return bad("secret", "one of secret or secret_file, not both", (*g)["secret"]);
  if (auto s = text("secret")) {
    gc.secret = *s;
  } else if (auto sf = text("secret_file")) {
    fs::path p = *sf;
    auto content = util::read_file(p);
    if (!content) return bad("secret_file", "a readable file (" + content.error().message() + ")", (*g)["secret_file"]);
    gc.secret = *content;
    while (!gc.secret.empty() && (gc.secret.back() == '\n' || gc.secret.back() == '\r' || gc.secret.back() == ' '))
      gc.secret.pop_back();
  } else {
    return bad("secret", "a shared secret (secret, or secret_file)", wire::value(nullptr));
  }
  if (gc.secret.size() < 16) return bad("secret", "a secret of at least 16 characters", wire::value("<" + std::to_string(gc.secret.size()) + " characters>"));
  auto ms = g->find("masters");
  if (ms == g->end() || !ms->is_array() || ms->size() < 2)
    return bad("masters", "a list of at least two REST API base URLs (http[s]://host:port)", ms == g->end() ? wire::value(nullptr) : *ms);
  for (const auto& u : *ms) {
    if (!u.is_string()) return bad("masters", "a list of URLs", *ms);
    std::string url = u.get<std::string>();
    while (url.size() > 1 && url.back() == '/') url.pop_back();
    const bool ok_scheme = url.starts_with("http://") || url.starts_with("https://");
    const auto rest = ok_scheme ? url.substr(url.find("//") + 2) : std::string();
    if (!ok_scheme || rest.empty() || rest.find('/') != std::string::npos || rest.find(':') == std::string::npos)
      return bad("masters", "URLs of the form http[s]://host:port", u);
    if (std::find(gc.masters.begin(), gc.masters.end(), url) != gc.masters.end()) return bad("masters", "distinct URLs", u);
    gc.masters.push_back(url);
  }
  if (auto s = text("self")) {
    std::string self = *s;
    while (self.size() > 1 && self.back() == '/') self.pop_back();
    if (std::find(gc.masters.begin(), gc.masters.end(), self) == gc.masters.end()) return bad("self", "one of masters", (*g)["self"]);
    gc.self = self;
  } else if (g->contains("self")) {
    return bad("self", "one of masters", (*g)["self"]);
  }
  if (g->contains("ca_file")) {
    auto ca = text("ca_file");
    if (!ca || ca->empty()) return bad("ca_file", "a path", (*g)["ca_file"]);
    gc.ca_file = fs::path(*ca);
  }
  if (g->contains("timeout")) {
    const wire::value& tv = (*g)["timeout"];
    std::optional<std::int64_t> n;
    if (tv.is_number_integer()) n = tv.get<std::int64_t>();
    if (!n || *n < 1 || *n > 300) return bad("timeout", "an integer 1..300 (seconds)", (*g)["timeout"]);
    gc.timeout = static_cast<int>(*n);
  }
  if (!r.get("rest_cherrypy")) return bad("", "a master that serves the REST API (a rest_cherrypy block)", *g);
  c.master_group = std::move(gc);
  return std::nullopt;
}

config_result<master_config> load_master_config(const fs::path& config_dir) {
  master_config c;
  c.config_dir = config_dir;
  source src;
  if (auto e = load_sources(config_dir, "master", src)) return *e;

  reader r(src);
  visit_master(c, r);
  if (r.error) return *r.error;
  if (!r.get("log_level_logfile") || r.get("log_level_logfile")->is_null()) c.log_level_logfile = c.log_level;
  if (!r.get("user")) c.user = current_user();
  if (auto e = read_id(r, c.id, default_master_id)) return *e;

  sock_dir_quirk(c.cachedir, c.sock_dir);
  reroot(c.root_dir, c.pki_dir);
  reroot(c.root_dir, c.cachedir);
  reroot(c.root_dir, c.sock_dir);
  if (!has_uri_scheme(c.log_file.string())) reroot(c.root_dir, c.log_file);
  if (c.cluster_id) {
    if (c.cluster_pki_dir) reroot(c.root_dir, *c.cluster_pki_dir);
    else c.cluster_pki_dir = c.pki_dir;
  } else {
    c.cluster_peers.clear();  // Salt: "Cluster peers defined without a cluster_id, ignoring."
    c.cluster_pki_dir.reset();
  }

  if (auto e = read_master_group(r, c)) return *e;

  wire::value raw = wire::value::object();
  raw["id"] = c.id;
  raw["config_dir"] = c.config_dir.string();
  writer w(raw);
  visit_master(c, w);
  finish_raw(raw, src);
  if (raw.contains("master_group") && raw["master_group"].is_object() && raw["master_group"].contains("secret"))
    raw["master_group"]["secret"] = "<hidden>";  // group: config.get and the console never show it
  c.raw = std::move(raw);
  return c;
}

config_result<minion_config> load_minion_config(const fs::path& config_dir) {
  minion_config c;
  c.config_dir = config_dir;
  source src;
  if (auto e = load_sources(config_dir, "minion", src)) return *e;

  reader r(src);
  visit_minion(c, r);
  if (r.error) return *r.error;

  // master: a string or a list of strings.
  if (const wire::value* m = r.get("master")) {
    const std::string what = "a host name or a list of host names";
    if (m->is_string() && !m->get_ref<const std::string&>().empty()) {
      c.master = {m->get<std::string>()};
      c.master_is_list = false;
    } else if (m->is_array() && !m->empty()) {
      std::vector<std::string> list;
      for (const auto& x : *m) {
        if (!x.is_string() || x.get_ref<const std::string&>().empty())
          return make_error(r.file_of("master"), "master", what, show(*m));
        list.push_back(x.get<std::string>());
      }
      c.master = std::move(list);
      c.master_is_list = true;
    } else {
      return make_error(r.file_of("master"), "master", what, show(*m));
    }
  }
  // master_type: distributed and func are Salt features sylvite does not implement.
  if (const wire::value* t = r.get("master_type")) {
    const std::string what = "one of str, failover, disable";
    std::string s = t->is_string() ? t->get<std::string>() : std::string();
    if (s == "distributed" || s == "func") {
      return make_error(r.file_of("master_type"), "master_type",
                        what + " (sylvite does not support master_type '" + s + "')", show(*t));
    }
    if (s != "str" && s != "failover" && s != "disable") {
      return make_error(r.file_of("master_type"), "master_type", what, show(*t));
    }
    c.master_type = s;
  }
  if (!r.get("log_level_logfile") || r.get("log_level_logfile")->is_null()) c.log_level_logfile = c.log_level;
  if (auto e = read_id(r, c.id, default_minion_id)) return *e;

  if (c.master_type == "failover") {
    if (c.master_shuffle) c.random_master = true;
    if (c.master_failback && c.master_failback_interval == 0) c.master_failback_interval = c.master_alive_interval;
  }

  sock_dir_quirk(c.cachedir, c.sock_dir);
  reroot(c.root_dir, c.pki_dir);
  reroot(c.root_dir, c.cachedir);
  reroot(c.root_dir, c.sock_dir);
  if (!has_uri_scheme(c.log_file.string())) reroot(c.root_dir, c.log_file);

  wire::value raw = wire::value::object();
  raw["id"] = c.id;
  raw["config_dir"] = c.config_dir.string();
  raw["master"] = c.master_is_list ? wire::value(c.master) : wire::value(c.master.front());
  raw["master_type"] = c.master_type;
  writer w(raw);
  visit_minion(c, w);
  finish_raw(raw, src);
  c.raw = std::move(raw);
  return c;
}

std::optional<master_address> parse_master_address(const std::string& s, int default_port) {
  auto parse_port = [](std::string_view p) -> std::optional<int> {
    if (p.empty() || p.size() > 5) return std::nullopt;
    int v = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return std::nullopt;
    return v;
  };
  if (s.empty()) return std::nullopt;
  if (s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close == 1) return std::nullopt;
    master_address a{s.substr(1, close - 1), default_port};
    std::string rest = s.substr(close + 1);
    if (rest.empty()) return a;
    if (rest.front() != ':') return std::nullopt;
    auto p = parse_port(std::string_view(rest).substr(1));
    if (!p) return std::nullopt;
    a.port = *p;
    return a;
  }
  auto first = s.find(':');
  if (first == std::string::npos) return master_address{s, default_port};
  if (s.find(':', first + 1) != std::string::npos) return master_address{s, default_port};  // bare IPv6
  if (first == 0) return std::nullopt;
  auto p = parse_port(std::string_view(s).substr(first + 1));
  if (!p) return std::nullopt;
  return master_address{s.substr(0, first), *p};
}

namespace {
std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}
}  // namespace

std::string default_minion_id() {
  std::string host = hostname();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  std::string out = host;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res) {
    if (res->ai_canonname && res->ai_canonname[0]) out = res->ai_canonname;
    ::freeaddrinfo(res);
  }
  return out;
}

std::string default_master_id() { return hostname() + "_master"; }

}  // namespace sylvite::config
