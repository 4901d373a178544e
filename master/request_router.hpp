// sylvite::master request router: the request port's rules. It decodes a request body,
// checks and opens the envelope (version, AES or session key, ttl, id, token), and routes
// the command through one table (commands()) to the service that owns it:
//   clear _auth          -> the sign-in (master/auth.hpp authenticate, key service)
//   clear ping           -> the load back (heartbeats, failback probes)
//   aes _return          -> job service
//   aes _pillar          -> pillar compiler (reply encrypted to the minion's key)
//   aes _minion_event    -> event bus (Salt's tag blacklist applied)
//   aes _file_*, _serve_file, ... -> file server
//   aes _mine*           -> the mine (master/mine.hpp)
//   aes _master_opts, _master_tops, _ext_nodes, _register_resources
// Salt references: salt/channel/server.py ReqServerChannel.handle_message and
// salt/master.py AESFuncs/ClearFuncs (3008.5); the order of checks is in
// request_router.cpp.
// Thread-safety: every call may run on many threads at once. open_in_memory() and, for a
// request runs_inline() accepts, run() do no blocking I/O on a single master with a local
// cachedir (no file read, a stat at most; an append to the job cache journal): the daemon calls
// them on the io thread that read the request, and hands the rest to the worker pool
// (open() there when open_in_memory() found a key missing from memory).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>
#include <optional>

#include "core/config/config.hpp"
#include "core/util/rate_limit.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/fileserver.hpp"
#include "master/job_service.hpp"
#include "master/key_service.hpp"
#include "master/minion_data.hpp"
#include "master/mine.hpp"
#include "master/pillar.hpp"
#include "master/services.hpp"

namespace sylvite::master {

class source_limiter;   // master/auth.hpp
class pending_counter;  // master/auth.hpp

class request_router {
 public:
  request_router(const config::master_config& cfg, master_links& links, master_counters& counters, event_hub& events,
                 key_service& keys, job_service& jobs, minion_data_cache& mdata, fileserver& files,
                 pillar_compiler& pillar, mine_store& mine);

  // Frame body in, reply body out. Never throws. *authenticated (if given) is set when
  // the request proved an accepted minion: an AES request that decrypted (v3: and its
  // token verified) or an accepted _auth; the transport then lifts the connection's
  // pre-authentication limits.
  wire::value handle(const wire::value& body, const std::string& peer, bool* authenticated = nullptr,
                     std::string* minion_id = nullptr);

  // handle() in two steps. open(): the envelope checked and opened (AES or session key,
  // ttl, id, token): a refusal (the reply) or the request. run(): its command, and the
  // reply (encrypted for an AES request). Same arguments as handle().
  struct opened_request {
    wire::value load;  // decrypted, without nonce and tok
    std::string id;
    std::string cmd;
    std::string nonce;
    int version = 0;
    bool aes = false;
    std::optional<std::string> enc_algo;  // the envelope's, for a _pillar reply
    std::optional<std::string> sig_algo;
    std::shared_ptr<const crypto::crypticle> session;  // v3: the key that opened it (the reply's)
  };
  std::variant<wire::value, opened_request> open(const wire::value& body, const std::string& peer);
  // open() for the io thread, which reads no file: nullopt, having done nothing but a stat,
  // when opening would read one (the minion's session key or accepted key is not in
  // memory, or its file changed); the caller then calls open() on a worker thread.
  std::optional<std::variant<wire::value, opened_request>> open_in_memory(const wire::value& body,
                                                                          const std::string& peer);
  wire::value run(opened_request& r, const std::string& peer, bool* authenticated = nullptr,
                  std::string* minion_id = nullptr);
  // A request cheap enough to answer on the io thread: an AES _return whose store does not
  // wait on the disk (job_service::records_without_io), an AES _minion_event.
  bool runs_inline(const opened_request& r) const;
  // A body small enough to open on the io thread (an AES load up to kSmallRequestBytes).
  static constexpr std::size_t kSmallRequestBytes = 64 * 1024;
  static bool small_request(const wire::value& body);

  // An AES command's handler: the decrypted load (without nonce/tok) and the peer.
  using aes_handler = std::function<wire::value(wire::value& load, const std::string& peer)>;
  // The AES command table (exact names; the file server's commands are looked up in it
  // after these).
  const std::map<std::string, aes_handler, std::less<>>& commands() const noexcept { return commands_; }

 private:
  wire::value refuse(const std::string& peer, const std::string& reason, wire::value reply = "bad load");
  // open() and open_in_memory(): with memory_only, sets needs_io instead of reading a key file.
  std::variant<wire::value, opened_request> open_impl(const wire::value& body, const std::string& peer,
                                                      bool memory_only, bool& needs_io);
  wire::value dispatch_aes(const std::string& cmd, wire::value& load, const std::string& peer);
  wire::value handle_auth(wire::value& load, int version, const std::string& peer);
  wire::value encrypt_private(const wire::value& ret, const std::string& id, const std::string& nonce,
                              bool sign_messages, const std::optional<std::string>& enc_algo,
                              const std::optional<std::string>& sig_algo);
  wire::value handle_pillar(const wire::value& load);
  wire::value handle_minion_event(const wire::value& load);

  const config::master_config& cfg_;
  master_links& links_;
  master_counters& counters_;
  event_hub& events_;
  key_service& keys_;
  job_service& jobs_;
  minion_data_cache& mdata_;
  fileserver& files_;
  pillar_compiler& pillar_;
  mine_store& mine_;
  std::map<std::string, aes_handler, std::less<>> commands_;
  // Sign-in limits (made on first use): unaccepted_auth_rate per source and
  // max_pending_keys.
  std::once_flag auth_limits_once_;
  std::shared_ptr<source_limiter> unaccepted_limit_;
  std::shared_ptr<pending_counter> pending_count_;
  util::log_limiter minion_tag_log_;  // blacklisted _minion_event tags
};

// False for tags a minion may not fire (Salt's MINION_EVENT_BLACKLIST: job publishes and
// returns, keys, runners, wheel, cloud, the cluster).
bool valid_minion_tag(std::string_view tag);

}  // namespace sylvite::master
