// sylvite::master ext_pillar modules (see pillar_ext.hpp), after salt/pillar/cmd_yaml.py,
// cmd_json.py and file_tree.py of Salt 3008.5. Log texts are Salt's.
// Thread-safety: no shared state.
#include "master/pillar_ext.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/config/config.hpp"
#include "core/match/match.hpp"
#include "core/util/files.hpp"

extern char** environ;

namespace sylvite::master::pillar_ext {
namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t max_output = 64u << 20;
constexpr int max_tree_depth = 64;

// Python's truthiness of a parsed value (Salt: `if ext:`).
std::string python_type(const wire::value& v) {
  if (v.is_object()) return "dict";
  if (v.is_array()) return "list";
  if (v.is_string() || v.is_binary()) return "str";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number_float()) return "float";
  return "NoneType";
}

void rstrip(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// The single `command` argument of cmd_yaml/cmd_json (Python call rules).
std::optional<std::string> command_arg(const std::string& name, const wire::value& arg, result& r) {
  const wire::value* cmd = &arg;
  if (arg.is_object()) {
    for (auto it = arg.begin(); it != arg.end(); ++it)
      if (it.key() != "command") {
        r.error = "Failed to load ext_pillar " + name + ": ext_pillar() got an unexpected keyword argument '" +
                  it.key() + "'";
        return std::nullopt;
      }
    cmd = wire::find(arg, "command");
    if (!cmd) {
      r.error = "Failed to load ext_pillar " + name + ": ext_pillar() missing 1 required positional argument: 'command'";
      return std::nullopt;
    }
  } else if (arg.is_array()) {
    if (arg.size() != 1) {
      r.error = "Failed to load ext_pillar " + name + ": ext_pillar() takes 3 positional arguments but " +
                std::to_string(arg.size() + 2) + " were given";
      return std::nullopt;
    }
    cmd = &arg[0];
  }
  auto t = wire::as_text(*cmd);
  if (!t) {
    r.error = "Failed to load ext_pillar " + name + ": '" + python_type(*cmd) + "' object has no attribute 'replace'";
    return std::nullopt;
  }
  return std::string(*t);
}

result cmd_yaml(const wire::value& arg, const context& c) {
  result r;
  auto command = command_arg("cmd_yaml", arg, r);
  if (!command) return r;
  std::string cmd = replace_all(*command, "%s", c.minion_id);
  auto out = run_command({"/bin/sh", "-c", cmd}, false, c.deadline);
  r.timed_out = out.timed_out;
  rstrip(out.out);
  auto v = config::parse_yaml(out.out);
  if (!v) {
    spdlog::critical("YAML data from '{}' failed to parse. Command output:\n{}", cmd, out.out);
    r.data = wire::value::object();
    return r;
  }
  r.data = std::move(*v);
  return r;
}

result cmd_json(const wire::value& arg, const context& c) {
  result r;
  auto command = command_arg("cmd_json", arg, r);
  if (!command) return r;
  std::string cmd = replace_all(*command, "%s", c.minion_id);
  auto argv = shlex_split(cmd);
  if (!argv || argv->empty()) {
    spdlog::critical("JSON data from {} failed to parse", cmd);
    return r;
  }
  auto out = run_command(*argv, true, c.deadline);
  r.timed_out = out.timed_out;
  rstrip(out.out);
  auto v = wire::value::parse(out.out, nullptr, false);
  if (v.is_discarded()) {
    spdlog::critical("JSON data from {} failed to parse", cmd);
    return r;
  }
  r.data = std::move(v);
  return r;
}

// ---- file_tree -----------------------------------------------------------------------

struct tree_opts {
  std::string root_dir;
  bool follow_dir_links = false;
  bool debug = false;
  wire::value keep_newline = false;
  wire::value render_default = nullptr;
  std::vector<std::string> renderer_blacklist;
  std::vector<std::string> renderer_whitelist;
  bool template_ = false;
};

bool python_truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_binary() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::vector<std::string> string_list(const wire::value& v) {
  std::vector<std::string> out;
  if (v.is_array())
    for (const auto& x : v)
      if (auto t = wire::as_text(x)) out.emplace_back(*t);
  return out;
}

// _check_newline: true if the trailing newline is to be removed.
bool strip_newline(const std::string& prefix, const std::string& file, const wire::value& keep) {
  if (keep.is_boolean()) return !keep.get<bool>();
  std::string full = prefix + "/" + file;
  if (keep.is_array())
    for (const auto& pat : keep) {
      std::string p;
      if (auto t = wire::as_text(pat)) p = std::string(*t);
      else p = pat.dump();
      if (match::glob_match(p, full)) return false;
    }
  return true;
}

wire::value file_value(const std::string& bytes) {
  if (wire::is_utf8(bytes)) return wire::value(bytes);
  return wire::make_bin(bytes);
}

bool has_shebang(const std::string& text) { return text.starts_with("#!"); }

void construct(const fs::path& top, const fs::path& dir, const std::string& prefix, wire::value& node,
               const tree_opts& o, const context& c, int depth, result& r) {
  if (depth > max_tree_depth) return;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) {
    spdlog::error("{}: {}", dir.string(), ec.message());
    return;
  }
  std::vector<std::string> dirs, files;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    std::string name = it->path().filename().string();
    if (fs::is_directory(it->path(), e2))
      dirs.push_back(name);
    else
      files.push_back(name);
  }
  std::sort(dirs.begin(), dirs.end());
  std::sort(files.begin(), files.end());
  for (const auto& d : dirs) node[d] = wire::value::object();
  for (const auto& f : files) {
    fs::path p = dir / f;
    std::error_code e2;
    if (!fs::is_regular_file(p, e2)) {
      spdlog::error("file_tree: {}: not a regular file", p.string());
      continue;
    }
    auto text = util::read_file(p);
    if (!text) {
      spdlog::error("file_tree: Error reading {}: {}", p.string(), text.error().message());
      continue;
    }
    std::string contents = std::move(*text);
    if (contents.ends_with('\n') && strip_newline(prefix, f, o.keep_newline)) contents.pop_back();
    if (!o.template_) {
      node[f] = file_value(contents);
      continue;
    }
    // compile_template_str: the render_default pipe, or the file's shebang; neither: {}.
    auto rd = wire::as_text(o.render_default);
    if (!has_shebang(contents) && (!rd || rd->empty())) {
      node[f] = wire::value::object();
      continue;
    }
    if (!c.renderer || clock::now() >= c.deadline) {
      r.timed_out = r.timed_out || clock::now() >= c.deadline;
      continue;
    }
    render::request rq;
    rq.path = p;
    rq.saltenv = "base";
    rq.default_pipe = rd ? std::string(*rd) : std::string();
    rq.blacklist = o.renderer_blacklist;
    rq.whitelist = o.renderer_whitelist;
    rq.context = wire::value::object();
    rq.context["grains"] = c.grains;
    rq.context["pillar"] = wire::value::object();
    rq.context["opts"] = c.opts;
    rq.context["saltenv"] = "base";
    rq.context["sls"] = "";
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - clock::now());
    rq.timeout = std::min(c.render_timeout, std::max(left, std::chrono::milliseconds(1)));
    auto out = c.renderer->render(rq);
    if (out.ok()) {
      node[f] = std::move(out.data);
    } else {
      if (out.st == render::outcome::status::timeout && clock::now() >= c.deadline) r.timed_out = true;
      std::string msg = "Failed to load ext_pillar file_tree: " + p.string() + ": " + out.error;
      spdlog::error("{}", msg);
      if (!r.error) r.error = msg;
    }
  }
  for (const auto& d : dirs) {
    fs::path p = dir / d;
    std::error_code e2;
    if (fs::is_symlink(p, e2) && !o.follow_dir_links) continue;
    construct(top, p, prefix == "." ? d : prefix + "/" + d, node[d], o, c, depth + 1, r);
  }
}

wire::value merge_recurse(const wire::value& a, const wire::value& b) {
  if (!a.is_object() || !b.is_object()) return b;
  wire::value out = a;
  for (auto it = b.begin(); it != b.end(); ++it) {
    auto dst = out.find(it.key());
    if (dst != out.end() && dst->is_object() && it->is_object())
      *dst = merge_recurse(*dst, *it);
    else
      out[it.key()] = *it;
  }
  return out;
}

wire::value tree_root(const fs::path& root_dir, const tree_opts& o, const context& c, result& r) {
  spdlog::debug("file_tree: reading {}", root_dir.string());
  std::error_code ec;
  if (!fs::is_directory(root_dir, ec)) {
    spdlog::error("file_tree: root_dir {} does not exist or is not a directory", root_dir.string());
    return wire::value::object();
  }
  if (!o.keep_newline.is_boolean() && !o.keep_newline.is_array()) {
    spdlog::error(
        "file_tree: keep_newline must be either True/False or a list of file globs. Skipping this ext_pillar "
        "for root_dir {}",
        root_dir.string());
    return wire::value::object();
  }
  wire::value ngroup = wire::value::object();
  fs::path ngdir = root_dir / "nodegroups";
  if (fs::exists(ngdir, ec) && !c.nodegroups.empty()) {
    std::vector<std::string> groups;
    for (fs::directory_iterator it(ngdir, ec), end; !ec && it != end; it.increment(ec))
      groups.push_back(it->path().filename().string());
    std::sort(groups.begin(), groups.end());
    match::minion_facts facts;
    facts.id = c.minion_id;
    facts.grains = c.grains.is_object() ? &c.grains : nullptr;
    for (const auto& g : groups) {
      auto ng = c.nodegroups.find(g);
      if (ng == c.nodegroups.end()) continue;
      if (!match::matches(wire::value(ng->second), "compound", facts, ':', &c.nodegroups)) continue;
      wire::value part = wire::value::object();
      fs::path gdir = ngdir / g;
      if (fs::is_directory(gdir, ec)) construct(gdir, gdir, ".", part, o, c, 0, r);
      ngroup = merge_recurse(ngroup, part);
    }
  } else if (o.debug) {
    spdlog::debug("file_tree: no nodegroups found in master configuration");
  }
  fs::path host = root_dir / "hosts" / c.minion_id;
  if (!fs::exists(host, ec)) {
    if (o.debug)
      spdlog::debug("file_tree: no pillar data for minion {} found in file tree directory {}", c.minion_id,
                    host.string());
    return ngroup;
  }
  if (!fs::is_directory(host, ec)) {
    spdlog::error("file_tree: {} exists, but is not a directory", host.string());
    return ngroup;
  }
  wire::value hp = wire::value::object();
  construct(host, host, ".", hp, o, c, 0, r);
  return merge_recurse(ngroup, hp);
}

result file_tree(const wire::value& arg, const context& c) {
  result r;
  static const std::vector<std::string> names = {"root_dir",      "follow_dir_links",   "debug",
                                                 "keep_newline",  "render_default",     "renderer_blacklist",
                                                 "renderer_whitelist", "template"};
  wire::value kw = wire::value::object();
  if (arg.is_object()) {
    for (auto it = arg.begin(); it != arg.end(); ++it) {
      if (std::find(names.begin(), names.end(), it.key()) == names.end()) {
        r.error = "Failed to load ext_pillar file_tree: ext_pillar() got an unexpected keyword argument '" +
                  it.key() + "'";
        return r;
      }
      kw[it.key()] = *it;
    }
  } else if (arg.is_array()) {
    if (arg.size() > names.size()) {
      r.error = "Failed to load ext_pillar file_tree: ext_pillar() takes from 2 to 10 positional arguments but " +
                std::to_string(arg.size() + 2) + " were given";
      return r;
    }
    for (std::size_t i = 0; i < arg.size(); ++i) kw[names[i]] = arg[i];
  } else {
    kw["root_dir"] = arg;
  }
  tree_opts o;
  if (const auto* v = wire::find(kw, "root_dir"); v && python_truthy(*v)) {
    auto t = wire::as_text(*v);
    if (!t) {
      r.error = "Failed to load ext_pillar file_tree: expected str, bytes or os.PathLike object, not " + python_type(*v);
      return r;
    }
    o.root_dir = std::string(*t);
  }
  if (const auto* v = wire::find(kw, "follow_dir_links")) o.follow_dir_links = python_truthy(*v);
  if (const auto* v = wire::find(kw, "debug")) o.debug = v->is_boolean() && v->get<bool>();
  if (const auto* v = wire::find(kw, "keep_newline")) o.keep_newline = *v;
  if (const auto* v = wire::find(kw, "render_default")) o.render_default = *v;
  if (const auto* v = wire::find(kw, "renderer_blacklist")) o.renderer_blacklist = string_list(*v);
  if (const auto* v = wire::find(kw, "renderer_whitelist")) o.renderer_whitelist = string_list(*v);
  if (const auto* v = wire::find(kw, "template")) o.template_ = v->is_boolean() && v->get<bool>();

  if (o.root_dir.empty()) {
    spdlog::error("file_tree: no root_dir specified");
    return r;
  }
  std::vector<fs::path> dirs;
  if (!fs::path(o.root_dir).is_absolute()) {
    if (!c.pillarenv) {
      spdlog::error("file_tree: root_dir is relative but pillarenv is not set");
      return r;
    }
    auto er = c.pillar_roots.find(*c.pillarenv);
    if (er == c.pillar_roots.end()) {
      spdlog::error("file_tree: root_dir is relative but no pillar_roots are specified  for pillarenv {}",
                    *c.pillarenv);
      return r;
    }
    for (const auto& root : er->second) {
      fs::path d = (fs::path(root) / o.root_dir).lexically_normal();
      if (dirs.empty() || dirs.back() != d) dirs.push_back(d);
    }
  } else {
    dirs.push_back(o.root_dir);
  }
  wire::value out = wire::value::object();
  for (const auto& d : dirs) out = merge_recurse(out, tree_root(d, o, c, r));
  r.data = std::move(out);
  return r;
}

}  // namespace

bool supported(std::string_view name) { return name == "cmd_yaml" || name == "cmd_json" || name == "file_tree"; }

result run(const std::string& name, const wire::value& arg, const context& c) {
  if (name == "cmd_yaml") return cmd_yaml(arg, c);
  if (name == "cmd_json") return cmd_json(arg, c);
  if (name == "file_tree") return file_tree(arg, c);
  result r;
  r.error = "ext_pillar interface named " + name + " is unavailable";
  return r;
}

std::optional<std::vector<std::string>> shlex_split(std::string_view s) {
  std::vector<std::string> out;
  std::string tok;
  bool in_tok = false;
  std::size_t i = 0;
  auto is_ws = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; };
  while (i < s.size()) {
    char ch = s[i];
    if (is_ws(ch)) {
      if (in_tok) {
        out.push_back(std::move(tok));
        tok.clear();
        in_tok = false;
      }
      ++i;
    } else if (ch == '\\') {
      if (i + 1 >= s.size()) return std::nullopt;  // No escaped character
      tok += s[i + 1];
      in_tok = true;
      i += 2;
    } else if (ch == '\'') {
      auto end = s.find('\'', i + 1);
      if (end == std::string_view::npos) return std::nullopt;  // No closing quotation
      tok.append(s.substr(i + 1, end - i - 1));
      in_tok = true;
      i = end + 1;
    } else if (ch == '"') {
      ++i;
      bool closed = false;
      while (i < s.size()) {
        char d = s[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < s.size() && (s[i + 1] == '"' || s[i + 1] == '\\')) {
          tok += s[i + 1];
          i += 2;
          continue;
        }
        tok += d;
        ++i;
      }
      if (!closed) return std::nullopt;
      in_tok = true;
    } else {
      tok += ch;
      in_tok = true;
      ++i;
    }
  }
  if (in_tok) out.push_back(std::move(tok));
  return out;
}

command_output run_command(const std::vector<std::string>& argv, bool merge_stderr, clock::time_point deadline) {
  command_output res;
  if (argv.empty()) return res;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return res;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  if (merge_stderr)
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  else
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t dfl;
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  sigaddset(&dfl, SIGCHLD);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    spdlog::error("pillar: cannot run {}: {}", argv[0], std::strerror(rc));
    return res;
  }
  res.started = true;
  char buf[65536];
  for (;;) {
    auto now = clock::now();
    if (now >= deadline) {
      res.timed_out = true;
      break;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(ms, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (n == 0) continue;
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;
    if (res.out.size() < max_output) res.out.append(buf, static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  int st = 0;
  // Output closed: wait for the exit, still bounded by the deadline.
  while (!res.timed_out) {
    pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) {
      res.status = st;
      return res;
    }
    if (clock::now() >= deadline) {
      res.timed_out = true;
      break;
    }
    ::usleep(2000);
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  spdlog::error("pillar: command {} killed: the pillar compile deadline passed", argv[0]);
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res.status = st;
  return res;
}

}  // namespace sylvite::master::pillar_ext
