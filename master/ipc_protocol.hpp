// sylvite::master local CLI protocol (salt, salt-run, salt-key -> salt-master).
// Transport: a Unix stream socket at  <sock_dir>/master_cli.ipc  created mode 0600 in a
// 0700 sock_dir, so only the user running the master (root in production) may use it:
// the same guarantee Salt gets from its IPC sockets and root key. Frames are ordinary
// Salt frames {head: {mid}, body} (core/wire/frame.hpp); every request body is a map with
// "cmd"; every final reply body is a map. Errors: {"error": "<message>"}.
//
//  cmd "ping"        {}                                  -> {"ok": true, "id": master id}
//  cmd "publish"     {tgt, tgt_type, fun, arg (list), kwarg (map, optional), ret ("" ),
//                     timeout (s), user, delimiter (optional), jid (optional), wait (bool)}
//      wait=false -> {"jid", "minions": [...], "missing": [...]}  (salt --async)
//      wait=true  -> pushes (non-final frames, head.more=true):
//                     {"jid", "minions", "missing"}                 first, once
//                     {"id", "jid", "return", "retcode", "success", "out"?}   per return
//                    final {"done": true, "jid", "no_return": [ids that never answered]}
//                    The master waits `timeout` s for the expected minions; for those still
//                    missing but connected it publishes saltutil.find_job (gather_job_timeout)
//                    and keeps waiting while any reports the job running (Salt's CLI logic).
//                    No matching minion -> {"error": "No minions matched the target. ..."}.
//  cmd "runner"      {fun, arg (list), kwarg (map)}      -> {"return": value, "retcode": int}
//  cmd "key_event"   {act: "accept"|"reject"|"delete", ids: [...]}
//                    -> {"ok": true, "rotated": bool}   (rotation on reject/delete when
//                       rotate_aes_key; connections of deleted/rejected ids are dropped)
//  cmd "local_return" {"id", "jid" ("req"), "fun", "fun_args", "return", "retcode", "success"}
//                    -> {"ok": true, "jid"} (store a return the CLI made itself)
#pragma once
#include <filesystem>

namespace sylvite::master {

inline std::filesystem::path cli_socket_path(const std::filesystem::path& sock_dir) {
  return sock_dir / "master_cli.ipc";
}

}  // namespace sylvite::master
