// sylvite::master roots file server (see fileserver.hpp for the reply shapes).
// Salt quirks kept: prefix filtering strips '/' and is a plain startswith; the roots of
// one env are merged into one sorted set; a missing file's hash is "" and a missing
// file's find is {"path": "", "rel": ""}; _file_envs is sorted(file_roots).
// Stricter than Salt (fileserver_followsymlinks defaults to True there): a symlink whose
// target resolves outside its root is neither listed nor served, whatever it points to.
// Thread-safety: handle() is const; the hash memo is guarded by its own mutex.
#include "master/fileserver.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "core/crypto/rsa.hpp"
#include "master/detail.hpp"

namespace sylvite::master {
namespace fs = std::filesystem;

struct fileserver::hash_cache {
  struct entry {
    dev_t dev;
    ino_t ino;
    off_t size;
    std::int64_t mtime_ns;
    std::int64_t ctime_ns;
    std::string hsum;
  };
  std::mutex m;
  std::unordered_map<std::string, entry> map;
};

namespace {

constexpr std::size_t max_hash_cache = 20000;
constexpr int max_walk_depth = 256;

std::string peer_of(const wire::value& load) {
  auto id = wire::get_text(load, "id");
  return id ? detail::printable(*id) : std::string("?");
}

// saltenv from the load: missing/null -> "base"; numbers as Salt's str().
std::string saltenv_of(const wire::value& load) {
  const wire::value* v = wire::find(load, "saltenv");
  if (!v || v->is_null()) return "base";
  if (auto t = wire::as_text(*v)) return std::string(*t);
  if (v->is_number() || v->is_boolean()) return v->dump();
  return "base";
}

std::string prefix_of(const wire::value& load) {
  auto p = wire::get_text(load, "prefix");
  if (!p) return {};
  std::string_view s = *p;
  while (!s.empty() && s.front() == '/') s.remove_prefix(1);
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

using detail::is_under;
using detail::real_path;

// Normalise a request path as os.path.normpath would for a relative path, refusing what
// must never reach the disk. Returns the reason on refusal.
struct clean_result {
  std::string rel;
  std::string refused;  // non-empty: why
};

clean_result clean_rel(std::string_view path) {
  clean_result r;
  if (path.empty()) return {{}, "empty path"};
  if (path.find('\0') != std::string_view::npos) return {{}, "NUL byte in path"};
  if (path.front() == '/') return {{}, "absolute path"};
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view comp = path.substr(pos, slash - pos);
    if (comp == "..") return {{}, "'..' in path"};
    if (!comp.empty() && comp != ".") {
      if (!r.rel.empty()) r.rel += '/';
      r.rel += comp;
    }
    pos = slash + 1;
  }
  if (r.rel.empty()) return {{}, "empty path"};
  return r;
}

struct lists {
  std::set<std::string> files, dirs, empty_dirs;
  std::map<std::string, std::string> links;
};

void walk(const fs::path& dir, const std::string& rel_prefix, const std::string& root_real,
          std::set<std::pair<dev_t, ino_t>>& visited, lists& out, int depth) {
  // visited = the (dev, ino) of the current directory and its ancestors.
  if (depth > max_walk_depth) {
    spdlog::warn("fileserver: directory tree deeper than {} under {}, not descending", max_walk_depth, dir.string());
    return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    names.push_back(std::move(n));
  }
  ::closedir(d);
  for (const auto& name : names) {
    fs::path abs = dir / name;
    std::string rel = rel_prefix.empty() ? name : rel_prefix + "/" + name;
    struct stat lst {};
    if (::lstat(abs.c_str(), &lst) != 0) continue;
    if (S_ISLNK(lst.st_mode)) {
      auto target_real = real_path(abs);
      if (!target_real) continue;  // dangling link: nothing to serve
      if (!is_under(root_real, *target_real)) {
        spdlog::debug("fileserver: not listing {}: symlink leaves its root {}", abs.string(), root_real);
        continue;
      }
      char buf[PATH_MAX];
      ssize_t n = ::readlink(abs.c_str(), buf, sizeof buf);
      if (n >= 0) out.links[rel] = std::string(buf, static_cast<std::size_t>(n));
    }
    struct stat st {};
    if (::stat(abs.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      out.dirs.insert(rel);
      DIR* sub = ::opendir(abs.c_str());
      if (sub) {
        bool empty = true;
        while (dirent* e = ::readdir(sub)) {
          std::string_view n = e->d_name;
          if (n != "." && n != "..") {
            empty = false;
            break;
          }
        }
        ::closedir(sub);
        if (empty) out.empty_dirs.insert(rel);
      }
      // Follow symlinked dirs (Salt's fileserver_followsymlinks default), listing their
      // content under the link's path too; only a dir that is its own ancestor (a loop)
      // is not entered again.
      if (visited.insert({st.st_dev, st.st_ino}).second) {
        walk(abs, rel, root_real, visited, out, depth + 1);
        visited.erase({st.st_dev, st.st_ino});
      }
    } else if (S_ISREG(st.st_mode)) {
      out.files.insert(rel);
    }
  }
}

wire::value filtered_list(const std::set<std::string>& s, const std::string& prefix) {
  wire::value out = wire::value::array();
  for (const auto& x : s)
    if (prefix.empty() || x.starts_with(prefix)) out.push_back(x);
  return out;
}

struct found {
  std::string full;  // path under the root as configured (Salt's fnd["path"])
  std::string real;  // resolved path actually opened
  std::string rel;
  struct stat st;
};

wire::value stat_list(const struct stat& st) {
  auto sec = [](const timespec& t) { return static_cast<std::int64_t>(t.tv_sec); };
  return wire::value::array({static_cast<std::int64_t>(st.st_mode), static_cast<std::uint64_t>(st.st_ino),
                             static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_nlink),
                             static_cast<std::int64_t>(st.st_uid), static_cast<std::int64_t>(st.st_gid),
                             static_cast<std::int64_t>(st.st_size), sec(st.st_atim), sec(st.st_mtim),
                             sec(st.st_ctim)});
}

}  // namespace

fileserver::fileserver(const config::master_config& cfg, fileserver_options opts)
    : roots_(cfg.file_roots),
      hash_type_(cfg.hash_type),
      buffer_size_(cfg.file_buffer_size),
      opts_(opts),
      hashes_(std::make_shared<hash_cache>()) {
  if (!crypto::hash_hex("", hash_type_)) {
    spdlog::error("fileserver: unknown hash_type '{}', using sha256", hash_type_);
    hash_type_ = "sha256";
  }
  if (buffer_size_ <= 0 || buffer_size_ > (64 << 20)) {
    spdlog::error("fileserver: file_buffer_size {} out of range, using 1048576", buffer_size_);
    buffer_size_ = 1048576;
  }
}

bool valid_saltenv(std::string_view env) {
  if (env.empty() || env.size() > 255 || env == "." || env == "..") return false;
  for (char c : env) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

bool fileserver::handles(std::string_view cmd) {
  return cmd == "_file_envs" || cmd == "_file_list" || cmd == "_file_list_emptydirs" || cmd == "_dir_list" ||
         cmd == "_symlink_list" || cmd == "_file_hash" || cmd == "_file_hash_and_stat" || cmd == "_file_find" ||
         cmd == "_serve_file";
}

namespace {

// The roots of an env (with Salt's __env__ fallback); nullopt if the env is unknown.
std::optional<std::vector<std::string>> env_roots(const config::roots_map& roots, const std::string& env) {
  if (auto it = roots.find(env); it != roots.end()) return it->second;
  if (auto it = roots.find("__env__"); it != roots.end()) {
    if (!valid_saltenv(env)) {
      // saltenv=../../pki would make the __env__ root the pki directory (master.pem).
      static std::mutex m;
      static std::chrono::steady_clock::time_point last{};
      static std::uint64_t n = 0;
      std::lock_guard lk(m);
      ++n;
      const auto now = std::chrono::steady_clock::now();
      if (last.time_since_epoch().count() == 0 || now - last >= std::chrono::seconds(10)) {
        spdlog::warn("fileserver: refusing saltenv '{}' for the __env__ file roots: not a single path component "
                     "({} such request(s) in the last 10 s)",
                     detail::printable(env), n);
        last = now;
        n = 0;
      }
      return std::nullopt;
    }
    std::vector<std::string> out;
    for (auto r : it->second) {
      for (std::size_t p = r.find("__env__"); p != std::string::npos; p = r.find("__env__", p + env.size()))
        r.replace(p, 7, env);
      out.push_back(std::move(r));
    }
    return out;
  }
  return std::nullopt;
}

lists collect(const config::roots_map& roots, const std::string& env) {
  lists out;
  auto dirs = env_roots(roots, env);
  if (!dirs) return out;
  for (const auto& root : *dirs) {
    auto root_real = real_path(root);
    if (!root_real) continue;
    std::set<std::pair<dev_t, ino_t>> visited;
    struct stat st {};
    if (::stat(root_real->c_str(), &st) == 0) visited.insert({st.st_dev, st.st_ino});
    walk(root, "", *root_real, visited, out, 0);
  }
  return out;
}

// Salt's find_file: path (with an optional "?saltenv=x" query) in env's roots.
std::optional<found> find_file(const config::roots_map& roots, std::string_view path, std::string env,
                               const std::string& peer) {
  std::string p(path);
  if (auto q = p.find('?'); q != std::string::npos) {
    std::string query = p.substr(q + 1);
    p.resize(q);
    std::size_t pos = 0;
    while (pos <= query.size()) {
      std::size_t amp = query.find('&', pos);
      if (amp == std::string::npos) amp = query.size();
      std::string comp = query.substr(pos, amp - pos);
      if (comp.starts_with("saltenv=")) env = comp.substr(8);
      pos = amp + 1;
    }
  }
  auto c = clean_rel(p);
  if (!c.refused.empty()) {
    spdlog::warn("fileserver: refusing path '{}' from {} (saltenv '{}'): {}", detail::printable(p), peer,
                 detail::printable(env), c.refused);
    return std::nullopt;
  }
  auto dirs = env_roots(roots, env);
  if (!dirs) return std::nullopt;
  for (const auto& root : *dirs) {
    fs::path full = fs::path(root) / c.rel;
    struct stat st {};
    if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    auto root_real = real_path(root);
    auto full_real = real_path(full);
    if (!root_real || !full_real) continue;
    if (!is_under(*root_real, *full_real)) {
      spdlog::warn("fileserver: refusing path '{}' from {} (saltenv '{}'): {} resolves to {}, outside the root {}",
                   c.rel, peer, env, full.string(), *full_real, root);
      continue;
    }
    return found{full.string(), *full_real, c.rel, st};
  }
  return std::nullopt;
}

}  // namespace

wire::value fileserver::handle(std::string_view cmd, const wire::value& load) const {
  const std::string peer = peer_of(load);
  try {
    const std::string env = saltenv_of(load);
    if (cmd == "_file_envs") {
      wire::value out = wire::value::array();
      for (const auto& [name, _] : roots_) out.push_back(name);
      return out;
    }
    if (cmd == "_file_list" || cmd == "_file_list_emptydirs" || cmd == "_dir_list") {
      lists l = collect(roots_, env);
      const auto prefix = prefix_of(load);
      if (cmd == "_file_list") return filtered_list(l.files, prefix);
      if (cmd == "_dir_list") return filtered_list(l.dirs, prefix);
      return filtered_list(l.empty_dirs, prefix);
    }
    if (cmd == "_symlink_list") {
      lists l = collect(roots_, env);
      const auto prefix = prefix_of(load);
      wire::value out = wire::value::object();
      for (const auto& [k, v] : l.links)
        if (prefix.empty() || k.starts_with(prefix)) out[k] = v;
      return out;
    }
    if (cmd == "_file_hash" || cmd == "_file_hash_and_stat") {
      const bool with_stat = cmd == "_file_hash_and_stat";
      auto not_found = [&]() -> wire::value {
        return with_stat ? wire::value::array({"", nullptr}) : wire::value("");
      };
      auto path = wire::get_text(load, "path");
      if (!path) return not_found();
      auto f = find_file(roots_, *path, env, peer);
      if (!f) return not_found();
      std::optional<std::string> hsum;
      {
        std::lock_guard<std::mutex> g(hashes_->m);
        auto it = hashes_->map.find(f->real);
        const auto mt = static_cast<std::int64_t>(f->st.st_mtim.tv_sec) * 1000000000 + f->st.st_mtim.tv_nsec;
        const auto ct = static_cast<std::int64_t>(f->st.st_ctim.tv_sec) * 1000000000 + f->st.st_ctim.tv_nsec;
        if (it != hashes_->map.end() && it->second.dev == f->st.st_dev && it->second.ino == f->st.st_ino &&
            it->second.size == f->st.st_size && it->second.mtime_ns == mt && it->second.ctime_ns == ct)
          hsum = it->second.hsum;
      }
      if (!hsum) {
        if (auto h = crypto::file_hash_hex(f->real, hash_type_)) hsum = std::move(*h);
        if (!hsum) {
          spdlog::error("fileserver: cannot read {} to hash it", f->real);
          return not_found();
        }
        // Re-stat after hashing: only memoise when the file did not change meanwhile.
        struct stat st2 {};
        if (::stat(f->real.c_str(), &st2) == 0 && st2.st_size == f->st.st_size &&
            st2.st_mtim.tv_sec == f->st.st_mtim.tv_sec && st2.st_mtim.tv_nsec == f->st.st_mtim.tv_nsec) {
          std::lock_guard<std::mutex> g(hashes_->m);
          if (hashes_->map.size() >= max_hash_cache) hashes_->map.clear();
          hashes_->map[f->real] = {st2.st_dev,
                                   st2.st_ino,
                                   st2.st_size,
                                   static_cast<std::int64_t>(st2.st_mtim.tv_sec) * 1000000000 + st2.st_mtim.tv_nsec,
                                   static_cast<std::int64_t>(st2.st_ctim.tv_sec) * 1000000000 + st2.st_ctim.tv_nsec,
                                   *hsum};
        }
      }
      wire::value ret = wire::value::object();
      ret["hash_type"] = hash_type_;
      ret["hsum"] = *hsum;
      if (with_stat) return wire::value::array({ret, stat_list(f->st)});
      return ret;
    }
    if (cmd == "_file_find") {
      wire::value nf = wire::value::object();
      nf["path"] = "";
      nf["rel"] = "";
      auto path = wire::get_text(load, "path");
      if (!path || path->empty()) return nf;
      auto f = find_file(roots_, *path, env, peer);
      if (!f) return nf;
      wire::value ret = wire::value::object();
      ret["path"] = f->full;
      ret["rel"] = f->rel;
      ret["stat"] = stat_list(f->st);
      ret["back"] = "roots";
      return ret;
    }
    if (cmd == "_serve_file") {
      wire::value ret = wire::value::object();
      ret["data"] = "";
      ret["dest"] = "";
      auto path = wire::get_text(load, "path");
      const wire::value* locv = wire::find(load, "loc");
      if (!path || !locv) return ret;
      auto loc = wire::get_int(load, "loc");
      if (!loc || *loc < 0) {
        spdlog::warn("fileserver: refusing _serve_file from {}: bad loc {}", peer, locv->dump());
        return ret;
      }
      auto f = find_file(roots_, *path, env, peer);
      if (!f) return ret;
      ret["dest"] = f->rel;
      int fd = ::open(f->real.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        spdlog::error("fileserver: cannot open {}: {}", f->real, std::strerror(errno));
        ret["dest"] = "";
        return ret;
      }
      std::string chunk(static_cast<std::size_t>(buffer_size_), '\0');
      std::size_t got = 0;
      while (got < chunk.size()) {
        ssize_t n = ::pread(fd, chunk.data() + got, chunk.size() - got, static_cast<off_t>(*loc) + static_cast<off_t>(got));
        if (n < 0) {
          if (errno == EINTR) continue;
          spdlog::error("fileserver: read error on {}: {}", f->real, std::strerror(errno));
          break;
        }
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
      }
      ::close(fd);
      chunk.resize(got);
      ret["data"] = wire::make_bin(chunk);
      if (got == 0 && opts_.final_chunk_hsum) {
        if (auto h = crypto::file_hash_hex(f->real, hash_type_)) {
          ret["hsum"] = *h;
          ret["hash_type"] = hash_type_;
        }
      }
      return ret;
    }
    spdlog::warn("fileserver: unknown command '{}' from {}", detail::printable(cmd), peer);
    return false;
  } catch (const std::exception& e) {
    spdlog::error("fileserver: {} from {} failed: {}", cmd, peer, e.what());
    if (cmd == "_file_hash") return "";
    return nullptr;
  }
}

wire::value master_opts_reply(const config::master_config& cfg, const wire::value& load) {
  auto raw = [&](const char* key, wire::value def) -> wire::value {
    if (cfg.raw.is_object()) {
      auto it = cfg.raw.find(key);
      if (it != cfg.raw.end() && !it->is_null()) return *it;
    }
    return def;
  };
  wire::value m = wire::value::object();
  wire::value roots = wire::value::object();
  for (const auto& [env, _] : cfg.file_roots) roots[env] = wire::value::array();
  m["file_roots"] = roots;
  m["top_file_merging_strategy"] = cfg.top_file_merging_strategy;
  m["env_order"] = raw("env_order", wire::value::array());
  m["default_top"] = raw("default_top", "base");
  bool env_only = false;
  if (const wire::value* e = wire::find(load, "env_only")) {
    if (e->is_boolean()) env_only = e->get<bool>();
    else if (e->is_number_integer()) env_only = e->get<std::int64_t>() != 0;
  }
  if (env_only) return m;
  m["renderer"] = cfg.renderer;
  m["failhard"] = raw("failhard", false);
  m["state_top"] = cfg.state_top;
  // state_top_saltenv: null is a meaningful default, so read it even when null.
  m["state_top_saltenv"] = cfg.raw.is_object() && cfg.raw.contains("state_top_saltenv")
                               ? cfg.raw["state_top_saltenv"]
                               : wire::value(nullptr);
  wire::value ng = wire::value::object();
  for (const auto& [k, v] : cfg.nodegroups) ng[k] = v;
  if (cfg.raw.is_object() && cfg.raw.contains("nodegroups") && cfg.raw["nodegroups"].is_object())
    ng = cfg.raw["nodegroups"];  // keeps list-valued nodegroups as written
  m["nodegroups"] = ng;
  m["state_auto_order"] = raw("state_auto_order", true);
  m["state_events"] = raw("state_events", false);
  m["state_aggregate"] = raw("state_aggregate", false);
  m["jinja_env"] = raw("jinja_env", wire::value::object());
  m["jinja_sls_env"] = raw("jinja_sls_env", wire::value::object());
  m["jinja_lstrip_blocks"] = raw("jinja_lstrip_blocks", false);
  m["jinja_trim_blocks"] = raw("jinja_trim_blocks", false);
  return m;
}

}  // namespace sylvite::master
