// sylvite::master::api external authentication (issue 19): Salt's `external_auth`, eauth
// tokens and ACL checks, as salt/auth/__init__.py, salt/tokens/localfs.py and
// salt/utils/minions.py (CkMinions.auth_check) define them. Used by the REST API
// (master/api/api_server) and the console; `publisher_acl` by the salt CLI path.
//
// Owns:
//   - the `external_auth` table (backends `pam` and `file`; user, `user%` group and `*`
//     entries; function lists, `{target: [functions]}` dicts, `@runner`, `@wheel`, `@jobs`,
//     argument specs), read from the master config (cfg.raw) once;
//   - authentication against a backend (PAM through libpam; the `file` backend with Salt's
//     `filename`/`filetype`/`hashtype` options);
//   - tokens in Salt's localfs format under `token_dir` (default <cachedir>/tokens, so every
//     master of a cluster sharing cachedir accepts every token), with `token_expire`;
//   - the ACL decision for one lowstate chunk (client, fun, tgt, tgt_type, arg, kwarg).
// Every refusal is logged once (user, client, fun; never the password).
// Thread-safety: every member is safe to call from any thread (token files are written
// atomically; the table is immutable after construction).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master::api {

// Who a request runs as, once authenticated.
struct identity {
  std::string name;                 // the user name as given at login
  std::string eauth;                // backend: "pam", "file", ...
  std::vector<std::string> groups;  // the user's groups (PAM: the system groups)
  wire::value perms = wire::value::array();  // Salt's auth_list for this user
};

// A token as Salt's localfs token store keeps it (msgpack map): token, name, eauth, start,
// expire (floats, seconds since the epoch), perms, groups.
struct token_data {
  std::string token;
  double start = 0;
  double expire = 0;
  identity who;
};

// Why a request was refused; the API maps these to salt-api's status codes.
enum class refusal {
  bad_request,    // 400: malformed lowstate (missing client/fun, wrong types)
  unauthorized,   // 401: no/unknown/expired token, bad credentials, unknown eauth backend
  forbidden,      // 403: authenticated, but the ACL does not allow it
};

struct decision {
  bool allowed = false;
  refusal why = refusal::forbidden;
  std::string reason;  // for the log and the reply body
};

// Expands a target to the accepted minion ids it matches (the ACL checks that every
// targeted minion is allowed). Supplied by the master (key service + matcher).
using target_expander = std::function<std::vector<std::string>(const wire::value& tgt, const std::string& tgt_type)>;

class eauth_service {
 public:
  eauth_service(const config::master_config& cfg, target_expander expand);
  ~eauth_service();
  eauth_service(const eauth_service&) = delete;
  eauth_service& operator=(const eauth_service&) = delete;

  // True when external_auth has at least one backend configured.
  bool enabled() const;

  // Checks the credentials against the backend and the external_auth table; nullopt (and
  // one log line) when refused: unknown backend, bad password, user not in the table.
  std::optional<identity> authenticate(const std::string& eauth, const std::string& username,
                                       const std::string& password) const;
  // A new token for who, stored under token_dir, valid token_expire seconds.
  std::optional<token_data> mint_token(const identity& who) const;
  // The token if it exists, parses, and has not expired (an expired one is removed).
  std::optional<token_data> get_token(const std::string& token) const;
  void delete_token(const std::string& token) const;

  // May who run this lowstate chunk? chunk: {client, fun, tgt?, tgt_type?, arg?, kwarg?};
  // client is one of local, local_async, local_batch, runner, runner_async, wheel,
  // wheel_async; "jobs" asks for @jobs (the API's /jobs).
  decision check(const identity& who, const wire::value& chunk) const;

  // publisher_acl / publisher_acl_blacklist for a non-root user of the salt CLI.
  decision check_publisher(const std::string& user, const std::string& fun, const wire::value& tgt,
                           const std::string& tgt_type) const;

  // ---- Added by the eauth part (members only; the ones above are unchanged) -----------
  // check_publisher with the publish load's fun (text or compound list) and arg (the
  // conditioned list: a trailing {"__kwarg__": true, ...} map carries the kwargs), so
  // argument specs in publisher_acl apply. user: the caller's name from the socket's
  // peer credentials. Order as ClearFuncs.publish: publisher_acl_blacklist (users,
  // modules) for everyone, then root and the master's user pass, then publisher_acl.
  // Refusals: forbidden "Authorization error occurred." (blacklist, ACL), unauthorized
  // "Authentication error occurred." (user not in publisher_acl).
  // trusted: a caller already authorized another way (an in-process caller such as the
  // REST API after its eauth check, as ClearFuncs.publish for an eauth load): only the
  // blacklist applies to it.
  decision check_publisher(const std::string& user, const wire::value& fun, const wire::value& arg,
                           const wire::value& tgt, const std::string& tgt_type, bool trusted = false) const;
  // salt.utils.master.get_values_of_matching_keys(publisher_acl, user): the user's
  // publisher_acl entries (empty: not in publisher_acl).
  wire::value publisher_auth_list(const std::string& user) const;
  // True when publisher_acl or publisher_acl_blacklist is configured.
  bool publisher_acl_configured() const;
  // The perms salt-api's /login returns for who (netapi sum_permissions, then
  // sorted_permissions: the user's own key, '*', the user's groups; strings sorted first).
  wire::value login_perms(const identity& who) const;
  // LoadAuth.time_auth: a failed authenticate() takes about as long as the slowest
  // failure seen (initially 1 s, +-25% random). Tests set it to 0.
  void set_failure_delay(double seconds) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sylvite::master::api
