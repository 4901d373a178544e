// sylvite::minion cp module: cp.get_file, cp.hash_file, cp.list_master.
// Remote (salt/fileclient.py RemoteClient.get_file, 3008.5): `_file_hash` first ("" means
// missing -> cp.get_file returns ""), skip the download when the local copy already has
// that hash, then loop `_serve_file` with the growing byte offset `loc` until `data` is
// empty, writing straight into dest. Unlike Salt (which only checks an optional `hsum` in
// the last chunk) we always check the downloaded file against the `_file_hash` answer and
// retry up to 3 times. Local (file_client: local / salt-call --local): copy from file_roots.
// makedirs=False with a missing parent directory returns False, as Salt does.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "minion/modules.hpp"

namespace sylvite::minion {

namespace fs = std::filesystem;

namespace {

std::string val_str(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_null()) return "";
  return v.dump();
}

bool truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<long long>() != 0;
  if (auto t = wire::as_text(v)) return !t->empty();
  return !v.empty();
}

// salt://path?saltenv=env -> (path without salt://, env)
std::pair<std::string, std::string> split_salt_url(std::string url, std::string env) {
  if (url.rfind("salt://", 0) == 0) url = url.substr(7);
  auto q = url.find('?');
  if (q != std::string::npos) {
    std::string query = url.substr(q + 1);
    url = url.substr(0, q);
    std::size_t start = 0;
    for (;;) {
      auto amp = query.find('&', start);
      std::string kv = query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      if (kv.rfind("saltenv=", 0) == 0) env = kv.substr(8);
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  return {url, env};
}

std::optional<std::string> local_hash(const fs::path& p, const std::string& hash_type) {
  auto data = util::read_file(p);
  if (!data) return std::nullopt;
  auto h = crypto::hash_hex(*data, hash_type);
  if (!h) return std::nullopt;
  return *h;
}

// Resolves dest like Salt: a directory (or trailing '/') gets the source basename; empty
// dest means the minion cache (cachedir/files/<saltenv>/<path>).
std::string resolve_dest(const call_context& ctx, const std::string& path, const std::string& saltenv,
                         std::string dest) {
  std::error_code ec;
  if (dest.empty()) return (ctx.cfg->cachedir / "files" / saltenv / path).string();
  if (fs::is_directory(dest, ec) || dest.back() == '/') dest = (fs::path(dest) / fs::path(path).filename()).string();
  return dest;
}

// Parent directory exists or is created (makedirs). false -> Salt returns False.
bool prepare_parent(const std::string& dest, bool makedirs) {
  fs::path parent = fs::path(dest).parent_path();
  if (parent.empty()) return true;
  std::error_code ec;
  if (fs::is_directory(parent, ec)) return true;
  if (!makedirs) return false;
  fs::create_directories(parent, ec);
  return !ec || fs::is_directory(parent, ec);
}

fn_result get_file_local(call_context& ctx, const std::string& path, const std::string& saltenv, const std::string& dest0,
                         bool makedirs) {
  auto it = ctx.cfg->file_roots.find(saltenv);
  if (it == ctx.cfg->file_roots.end()) return wire::value("");
  for (const auto& root : it->second) {
    fs::path src = fs::path(root) / path;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    std::string dest = resolve_dest(ctx, path, saltenv, dest0);
    if (!prepare_parent(dest, makedirs || dest0.empty())) return wire::value(false);
    fs::copy_file(src, dest, fs::copy_options::overwrite_existing, ec);
    if (ec) return exec_error{exec_error::kind::execution, "Unable to copy " + src.string() + " to " + dest + ": " + ec.message()};
    return wire::value(dest);
  }
  return wire::value("");
}

result<wire::value> file_hash(call_context& ctx, const std::string& path, const std::string& saltenv) {
  wire::value load = wire::value::object();
  load["path"] = path;
  load["saltenv"] = saltenv;
  load["cmd"] = "_file_hash";
  return ctx.master->send(std::move(load), std::chrono::seconds(60), 3);
}

fn_result get_file_remote(call_context& ctx, const std::string& path, const std::string& saltenv,
                          const std::string& dest0, bool makedirs) {
  auto h = file_hash(ctx, path, saltenv);
  if (!h) return exec_error{exec_error::kind::client, "Unable to reach the master: " + h.error().message()};
  auto hsum = wire::get_text(*h, "hsum");
  if (!h->is_object() || !hsum || hsum->empty()) {
    spdlog::debug("Could not find file '{}' in saltenv '{}'", path, saltenv);
    return wire::value("");
  }
  const std::string want(*hsum);
  const std::string hash_type(wire::get_text(*h, "hash_type").value_or("sha256"));
  const std::string dest = resolve_dest(ctx, path, saltenv, dest0);
  if (auto have = local_hash(dest, hash_type); have && *have == want) return wire::value(dest);
  if (!prepare_parent(dest, makedirs || dest0.empty())) return wire::value(false);

  for (int attempt = 1; attempt <= 3; ++attempt) {
    int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      return exec_error{exec_error::kind::execution, "Unable to open " + dest + " for writing: " + std::strerror(errno)};
    std::uint64_t loc = 0;
    bool broken = false;
    for (;;) {
      wire::value load = wire::value::object();
      load["path"] = path;
      load["saltenv"] = saltenv;
      load["cmd"] = "_serve_file";
      load["loc"] = loc;
      auto chunk = ctx.master->send(std::move(load), std::chrono::seconds(60), 3);
      if (!chunk || !chunk->is_object()) {
        spdlog::warn("Data transport is broken while fetching {} (offset {})", path, loc);
        broken = true;
        break;
      }
      const wire::value* data = wire::find(*chunk, "data");
      auto bytes = data ? wire::as_bytes(*data) : std::nullopt;
      if (!bytes || bytes->empty()) break;
      if (wire::find(*chunk, "gzip")) {
        spdlog::error("The master sent a gzip chunk for {} although none was requested", path);
        broken = true;
        break;
      }
      std::size_t off = 0;
      while (off < bytes->size()) {
        ssize_t w = ::write(fd, bytes->data() + off, bytes->size() - off);
        if (w < 0) {
          if (errno == EINTR) continue;
          int e = errno;
          ::close(fd);
          return exec_error{exec_error::kind::execution, "Unable to write " + dest + ": " + std::strerror(e)};
        }
        off += static_cast<std::size_t>(w);
      }
      loc += bytes->size();
    }
    ::close(fd);
    if (broken) {
      if (attempt == 3) return wire::value(false);
      continue;
    }
    auto have = local_hash(dest, hash_type);
    if (have && *have == want) return wire::value(dest);
    spdlog::warn("Bad download of file {}, attempt {} of 3", path, attempt);
  }
  spdlog::error("Download of {} does not match the master's {} hash after 3 attempts", path, hash_type);
  return wire::value("");
}

}  // namespace

void register_cp_module(module_registry& r) {
  r.add({"cp.get_file",
         {{"path", {}}, {"dest", {}}, {"saltenv", wire::value()}, {"makedirs", wire::value(false)},
          {"template", wire::value()}, {"gzip", wire::value()}},
         false,
         true,
         "Used to get a single file from the salt master",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           std::string saltenv = truthy(a["saltenv"]) ? val_str(a["saltenv"]) : "base";
           auto [path, env] = split_salt_url(val_str(a["path"]), saltenv);
           if (!a["template"].is_null())
             return exec_error{exec_error::kind::invocation, "templates are not supported by the sylvite minion"};
           const std::string dest = val_str(a["dest"]);
           const bool makedirs = truthy(a["makedirs"]);
           if (ctx.local || !ctx.master) return get_file_local(ctx, path, env, dest, makedirs);
           return get_file_remote(ctx, path, env, dest, makedirs);
         }});
  r.add({"cp.hash_file", {{"path", {}}, {"saltenv", wire::value()}}, false, true,
         "Return the hash of a file, to get the hash of a file on the salt master file server prepend the path with "
         "salt://<file on server> otherwise, prepend the file with / for a local file.",
         {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           std::string saltenv = truthy(a["saltenv"]) ? val_str(a["saltenv"]) : "base";
           std::string raw = val_str(a["path"]);
           if (raw.rfind("salt://", 0) != 0) {
             auto h = local_hash(raw, ctx.cfg->hash_type);
             if (!h) return wire::value::object();
             wire::value out = wire::value::object();
             out["hsum"] = *h;
             out["hash_type"] = ctx.cfg->hash_type;
             return out;
           }
           auto [path, env] = split_salt_url(raw, saltenv);
           if (ctx.local || !ctx.master) {
             auto it = ctx.cfg->file_roots.find(env);
             if (it != ctx.cfg->file_roots.end())
               for (const auto& root : it->second)
                 if (auto h = local_hash(fs::path(root) / path, ctx.cfg->hash_type)) {
                   wire::value out = wire::value::object();
                   out["hsum"] = *h;
                   out["hash_type"] = ctx.cfg->hash_type;
                   return out;
                 }
             return wire::value::object();
           }
           auto h = file_hash(ctx, path, env);
           if (!h) return exec_error{exec_error::kind::client, "Unable to reach the master: " + h.error().message()};
           return *h;
         }});
  r.add({"cp.list_master", {{"saltenv", wire::value()}, {"prefix", wire::value("")}}, false, false,
         "List all of the files stored on the master", {},
         [](call_context& ctx, const bound_args& a) -> fn_result {
           if (ctx.local || !ctx.master) return wire::value::array();
           wire::value load = wire::value::object();
           load["saltenv"] = truthy(a["saltenv"]) ? val_str(a["saltenv"]) : "base";
           load["prefix"] = val_str(a["prefix"]);
           load["cmd"] = "_file_list";
           auto r = ctx.master->send(std::move(load), std::chrono::seconds(60), 3);
           if (!r) return exec_error{exec_error::kind::client, "Unable to reach the master: " + r.error().message()};
           return *r;
         }});
}

}  // namespace sylvite::minion
