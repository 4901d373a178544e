// sylvite::master local CLI protocol (salt, salt-run, salt-key -> salt-master): the one
// place where the CLI's IPC messages are defined. Every request and every reply is a
// struct with one encode/decode pair below; the CLIs (master/cli) and the master's CLI
// service (master/cli_service.cpp) both link this (library sylvite_master_ipc: wire only,
// no Asio, no master daemon). Decoders refuse unknown or malformed messages with a
// reason (the receiving side logs it); encoders are total.
//
// Transport: a Unix stream socket at  <sock_dir>/master_cli.ipc  created mode 0600 in a
// 0700 sock_dir, so only the user running the master (root in production) may use it:
// the same guarantee Salt gets from its IPC sockets and root key. Frames are ordinary
// Salt frames {head: {mid}, body} (core/wire/frame.hpp); every request body is a map with
// "cmd"; every final reply body is a map. Errors: {"error": "<message>"}.
// The byte encoding (key names and order) is pinned by tests/unit/master_ipc.
//
//  cmd "ping"        {}                                  -> {"ok": true, "id": master id}
//  cmd "publish"     {tgt, tgt_type, fun, arg (list), kwarg (map, optional), ret ("" ),
//                     timeout (s), user, delimiter, jid (optional), wait (bool),
//                     ret_config, ret_kwargs, metadata, module_executors, executor_opts,
//                     start_event (each optional: publish options), kwargs (optional map)}
//      wait=false -> {"jid", "minions": [...], "missing": [...]}  (salt --async)
//      wait=true  -> pushes (non-final frames, head.more=true):
//                     {"jid", "minions", "missing"}                 first, once
//                     {"id", "jid", "return", "retcode", "success", "out"?}   per return
//                    final {"done": true, "jid", "no_return": [ids that never answered]}
//                    The master waits `timeout` s for the expected minions; for those still
//                    missing but connected it publishes saltutil.find_job (gather_job_timeout)
//                    and keeps waiting while any reports the job running (Salt's CLI logic,
//                    master/cli_wait.hpp).
//                    No matching minion -> {"error": "No minions matched the target. ..."}.
//  cmd "runner"      {fun, arg (list), kwarg (map), timeout (optional), jid (optional)}
//                    -> {"return": value, "retcode": int}
//                    fun "state.event" (events part) streams: one push (non-final frame)
//                    {"tag", "data"} per matching event of the master's bus, until `count`
//                    events matched (final {"return": null, "retcode": 0}) or the CLI goes
//                    away; arguments as Salt's runner: tagmatch="*", count=-1, quiet,
//                    sock_dir (ignored), pretty (the CLI formats), node="master".
//  cmd "key_event"   {act: "accept"|"reject"|"delete", ids: [...], rotate (optional bool)}
//                    -> {"ok": true, "rotated": bool}   (rotation on reject/delete when
//                       rotate_aes_key; connections of deleted/rejected ids are dropped)
//  cmd "local_return" {"id", "jid" ("req"), "fun", "fun_args", "return", "retcode", "success"}
//                    -> {"ok": true, "jid"} (store a return the CLI made itself)
// Thread-safety: plain values and pure functions.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master {

inline std::filesystem::path cli_socket_path(const std::filesystem::path& sock_dir) {
  return sock_dir / "master_cli.ipc";
}

namespace ipc {

// A decoded message, or why it was refused (for the log and the {"error"} reply).
template <class T>
struct decoded {
  std::optional<T> msg;
  std::string error;
  explicit operator bool() const noexcept { return msg.has_value(); }
  const T& operator*() const { return *msg; }
  T& operator*() { return *msg; }
  const T* operator->() const { return &*msg; }
  T* operator->() { return &*msg; }
  static decoded ok(T v) { return {std::move(v), {}}; }
  static decoded refuse(std::string why) { return {std::nullopt, std::move(why)}; }
};

// ---- requests (CLI -> master) ----------------------------------------------------------

struct ping {};

struct publish {
  wire::value tgt = "*";                       // text, or a list of ids (-L)
  std::string tgt_type = "glob";
  wire::value fun = "";                        // text, or a list (compound "f1,f2")
  wire::value arg = wire::value::array();      // list (list of lists for compound)
  std::optional<wire::value> kwarg;            // map
  std::string ret;                             // returner ("" none)
  std::optional<std::int64_t> timeout;         // s; absent or <= 0: the master's timeout
  std::string user = "root";
  std::string delimiter = ":";
  std::optional<std::string> jid;
  bool wait = false;
  // Publish options (Salt's LocalClient kwargs), sent only when the CLI got them.
  std::optional<wire::value> ret_config, ret_kwargs, metadata, module_executors, executor_opts;
  bool start_event = false;
  std::optional<wire::value> kwargs;           // map of further publish options
};

struct runner {
  std::string fun;
  wire::value arg = wire::value::array();
  wire::value kwarg = wire::value::object();
  std::optional<std::int64_t> timeout;
  std::optional<std::string> jid;
  std::optional<std::string> user;  // who runs salt-run (the runner job's User in the job cache)
};

struct key_event {
  std::string act;                             // accept | reject | delete
  std::vector<std::string> ids;
  std::optional<bool> rotate;                  // sent only as false (--rotate-aes-key False)
};

struct local_return {
  std::string id;
  std::string jid = "req";
  wire::value load = wire::value::object();    // the return load without "cmd" (has id, jid)
};

using request = std::variant<ping, publish, runner, key_event, local_return>;

wire::value encode(const ping&);
wire::value encode(const publish&);
wire::value encode(const runner&);
wire::value encode(const key_event&);
wire::value encode(const local_return&);
wire::value encode(const request&);

// Refuses: a body that is not a map, a missing/unknown "cmd" ("unknown command 'x'"),
// and per command a missing or mistyped field (the reason names it).
decoded<request> decode_request(const wire::value& body);
// The "cmd" of a body ("" when absent), for logs.
std::string command_of(const wire::value& body);

// ---- replies (master -> CLI) -----------------------------------------------------------

struct error_reply {
  std::string error;
};

struct ping_reply {
  std::string id;  // master id
};

// First push of a waiting publish; also the whole reply of salt --async.
struct publish_head {
  std::string jid;
  std::vector<std::string> minions;
  std::vector<std::string> missing;
};

// One minion's return, pushed while waiting.
struct return_item {
  std::string id;
  std::string jid;
  wire::value ret = nullptr;       // "return"
  wire::value retcode = 0;         // int (a map/list of ints from a multi-function job)
  wire::value success = true;
  std::optional<std::string> out;  // outputter the minion asked for
};
// Salt's _get_retcode: an int, or the largest int of a map/list; anything else 0.
int retcode_of(const return_item& r);
// The item for a minion's return load (Salt's event data): "return" (null if absent),
// "retcode" (int, 0 if absent or not an int), "success" (true if absent), "out" if text.
return_item return_item_of(const std::string& id, const std::string& jid, const wire::value& load);

struct publish_done {
  std::string jid;
  std::vector<std::string> no_return;
};

struct runner_reply {
  wire::value ret = nullptr;  // "return"
  std::int64_t retcode = 0;
};

struct key_event_reply {
  bool rotated = false;
};

// One event streamed by state.event.
struct event_item {
  std::string tag;
  wire::value data = wire::value::object();
};

struct local_return_reply {
  std::string jid;
};

wire::value encode(const error_reply&);
wire::value encode(const ping_reply&);
wire::value encode(const publish_head&);
wire::value encode(const return_item&);
wire::value encode(const publish_done&);
wire::value encode(const runner_reply&);
wire::value encode(const key_event_reply&);
wire::value encode(const local_return_reply&);
wire::value encode(const event_item&);
// A push of state.event: {"tag": text, "data": any}.
decoded<event_item> decode_event_item(const wire::value& body);

// Final replies: a map with "error" decodes as error_reply, anything else must be the
// expected reply or is refused.
using ping_result = std::variant<ping_reply, error_reply>;
using async_publish_result = std::variant<publish_head, error_reply>;
using publish_push = std::variant<publish_head, return_item>;
using publish_final = std::variant<publish_done, error_reply>;
using runner_result = std::variant<runner_reply, error_reply>;
using key_event_result = std::variant<key_event_reply, error_reply>;
using local_return_result = std::variant<local_return_reply, error_reply>;

decoded<ping_result> decode_ping_reply(const wire::value& body);
decoded<async_publish_result> decode_async_publish_reply(const wire::value& body);
// A push of a waiting publish: with "id" a return_item, else the head.
decoded<publish_push> decode_publish_push(const wire::value& body);
decoded<publish_final> decode_publish_final(const wire::value& body);
decoded<runner_result> decode_runner_reply(const wire::value& body);
decoded<key_event_result> decode_key_event_reply(const wire::value& body);
decoded<local_return_result> decode_local_return_reply(const wire::value& body);

}  // namespace ipc
}  // namespace sylvite::master
