// sylvite::master roots file server: the minion-facing file commands over file_roots.
// Paths are relative ("salt://" stripped by the minion); "..", absolute paths and
// symlinks leaving the root are refused. saltenv missing/null -> "base".
// Reply shapes are exactly Salt's (docs/wire-format.md):
//   _file_envs -> ["base", ...]
//   _file_list / _file_list_emptydirs / _dir_list -> sorted list of rel paths with '/',
//       filtered by "prefix"
//   _symlink_list -> map rel -> target
//   _file_hash -> {"hsum": hex, "hash_type": "sha256"} or "" if not found
//   _file_find -> {"path", "rel", "stat": [mode,ino,dev,nlink,uid,gid,size,atime,mtime,ctime]} or {}
//   _serve_file -> {"data": chunk(bytes), "dest": rel} (+"hsum"/"hash_type" on the last,
//       empty chunk); {"data": "", "dest": ""} if not found. Chunk = file_buffer_size.
// Thread-safety: const methods, safe from any thread (blocking disk I/O: worker pool).
#pragma once
#include <optional>
#include <string_view>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master {

class fileserver {
 public:
  explicit fileserver(const config::master_config& cfg);
  // True if cmd is one of the file commands above.
  static bool handles(std::string_view cmd);
  // Reply value for cmd given the decrypted request load. Never throws.
  wire::value handle(std::string_view cmd, const wire::value& load) const;

 private:
  config::roots_map roots_;
  std::string hash_type_;
  std::int64_t buffer_size_;
};

// The _master_opts reply (mandatory keys file_roots, renderer, state_top, ...).
wire::value master_opts_reply(const config::master_config& cfg, const wire::value& load);

}  // namespace sylvite::master
