// sylvite::master roots file server: the minion-facing file commands over file_roots.
// Paths are relative ("salt://" stripped by the minion); "..", absolute paths, NUL and
// symlinks leaving the root are refused (logged, answered as "not found").
// saltenv missing/null -> "base"; an unknown saltenv gives the empty answers (or the
// "__env__" root with __env__ replaced by the env name, as Salt). Semantics follow
// salt/fileserver/roots.py + salt/fileserver/__init__.py (3008); reply shapes:
//   _file_envs -> ["base", ...] (sorted)
//   _file_list / _file_list_emptydirs / _dir_list -> sorted list of rel paths with '/',
//       filtered by "prefix" (stripped of '/'); the roots of an env are merged
//   _symlink_list -> map rel -> link text (links resolving inside the root only)
//   _file_hash -> {"hash_type": "sha256", "hsum": hex} or "" if not found
//   _file_find -> {"path", "rel", "stat": [mode,ino,dev,nlink,uid,gid,size,atime,mtime,ctime],
//       "back": "roots"} or {"path": "", "rel": ""} if not found (Salt's fnd structure)
//   _serve_file -> {"data": chunk(bytes), "dest": rel}; data empty at EOF; {"data": "",
//       "dest": ""} if not found. Chunk = file_buffer_size bytes from "loc".
//       gzip requests are answered uncompressed (no "gzip" key: the minion then uses the
//       data as is).
// The first root (in file_roots order) that has the file wins.
// Thread-safety: const methods, safe from any thread (blocking disk I/O: worker pool).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

// A saltenv name that may be put into an `__env__` root path: 1..255 bytes, not "." or
// "..", no '/', '\\', NUL or other control characters (one path component; sylvite's
// rule: Salt 3008 substitutes any string). Others are refused (logged once per 10 s) and
// get the answers of an unknown saltenv.
bool valid_saltenv(std::string_view env);

struct fileserver_options {
  // Add {"hsum", "hash_type"} to the final empty _serve_file chunk. OFF by default:
  // Salt's own masters never send it, and a Salt 3008 minion fetching into its cache
  // hashes the final cache path while the data is still in atomic_open's temp file
  // (salt/fileclient.py RemoteClient.get_file), which fails on a first download.
  bool final_chunk_hsum = false;
};

class fileserver {
 public:
  explicit fileserver(const config::master_config& cfg, fileserver_options opts = {});
  // True if cmd is one of the file commands above.
  static bool handles(std::string_view cmd);
  // Reply value for cmd given the decrypted request load. Never throws.
  wire::value handle(std::string_view cmd, const wire::value& load) const;

  struct hash_cache;  // (size, mtime, inode) -> digest memo; shared by copies

 private:
  config::roots_map roots_;
  std::string hash_type_;
  std::int64_t buffer_size_;
  fileserver_options opts_;
  std::shared_ptr<hash_cache> hashes_;
};

// The _master_opts reply, as salt/master.py AESFuncs._master_opts: file_roots (env ->
// []), top_file_merging_strategy, env_order, default_top; unless load["env_only"] is
// true also renderer, failhard, state_top, state_top_saltenv, nodegroups,
// state_auto_order, state_events, state_aggregate, jinja_env, jinja_sls_env,
// jinja_lstrip_blocks, jinja_trim_blocks. Values from the config (raw options), else
// Salt's master defaults.
wire::value master_opts_reply(const config::master_config& cfg, const wire::value& load);

}  // namespace sylvite::master
