// sylvite::master::api group (issue 19 point 3, part "group"): a configured group of
// INDEPENDENT masters (hot multi-master, failover; each with its own cachedir and pki, no
// cluster) seen as one through any member's REST API. Option `master_group` (core/config,
// docs/operations.md "Master group").
//   - Members talk over their REST API on internal endpoints, POST /group/v1/view and
//     POST /group/v1/run, signed with HMAC-SHA256 (the shared secret) over method, path,
//     time, nonce, group id and body; unsigned, stale (outside +-kReplayWindow), replayed
//     or wrongly signed calls are refused with 401 (api_routes logs each refusal).
//   - A lowstate chunk that reaches a member after its eauth/ACL check goes through
//     master_group::run: local/local_async/local_batch resolve the target on every member,
//     assign each matched minion to ONE member it is connected to (assign_minions), mint
//     one jid and have each member publish a `list` target of its share; runners that read
//     the minion list or the job cache (manage.present/up, sylvite.minions, jobs.*) merge
//     every member's answer; other runners run once, here; wheel key.* is applied on every
//     member and key listings are the union. Members that do not answer within the
//     timeout are left out and named in chunk_result::unreachable.
// Thread-safety: run() and handle_internal() from any API worker thread at once; the
// calls to other members run on threads of their own, each bounded by its deadline; the
// nonce cache locks.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"
#include "master/api/api_lowstate.hpp"
#include "master/api/api_routes.hpp"

namespace sylvite::master::api {

// ---- signing (pure) -------------------------------------------------------------------
inline constexpr const char* kGroupTimeHeader = "x-sylvite-group-time";
inline constexpr const char* kGroupNonceHeader = "x-sylvite-group-nonce";
inline constexpr const char* kGroupSignatureHeader = "x-sylvite-group-signature";
inline constexpr std::int64_t kReplayWindow = 60;  // seconds either side of our clock

// Hex HMAC-SHA256(secret, method \n path \n time \n nonce \n group_id \n body).
std::string group_signature(std::string_view secret, std::string_view group_id, std::string_view method,
                            std::string_view path, std::int64_t time, std::string_view nonce, std::string_view body);

enum class group_auth { ok, missing, malformed, stale, bad_signature, replayed };
const char* group_auth_text(group_auth a);

// Verifies signed calls; remembers nonces for the replay window (bounded: beyond
// kMaxNonces live nonces new calls are refused as replayed until old ones expire).
class group_verifier {
 public:
  static constexpr std::size_t kMaxNonces = 200000;
  group_verifier(std::string secret, std::string group_id);
  group_auth verify(std::string_view method, std::string_view path, const std::string* time, const std::string* nonce,
                    const std::string* signature, std::string_view body, std::int64_t now);

 private:
  std::string secret_, group_id_;
  std::mutex mu_;
  std::unordered_map<std::string, std::int64_t> seen_;  // nonce -> time it carried
  std::int64_t last_prune_ = 0;
};

// ---- assignment (pure) ----------------------------------------------------------------
struct member_view {
  bool reachable = false;
  std::set<std::string> matched;    // the target resolved on that member (its keys, its data)
  std::set<std::string> connected;  // minions connected to it now
};
// Each minion matched on a reachable member goes to exactly one member: the first in
// `order` (the receiving member first, then the list order) where it is matched and
// connected; a minion connected nowhere goes to the first member that matched it (it is
// then expected there and reported without a return, as Salt reports a down minion).
// Returns one sorted id list per view.
std::vector<std::vector<std::string>> assign_minions(const std::vector<member_view>& views, std::size_t self);

// ---- URLs -----------------------------------------------------------------------------
struct group_url {
  bool tls = false;
  std::string host;
  std::string port;
};
std::optional<group_url> parse_group_url(const std::string& url);

// ---- the group -----------------------------------------------------------------------
struct group_services {
  const config::master_config* cfg = nullptr;  // has master_group
  std::shared_ptr<lowstate_runner> local;      // this master's own dispatch
  std::function<std::vector<std::string>(const wire::value& tgt, const std::string& tgt_type)> check_minions;
  std::function<std::vector<std::string>()> connected_ids;
  std::function<std::vector<std::string>()> accepted_ids;
  std::uint16_t api_port = 0;  // rest_cherrypy port (finds this member in masters)
};

class master_group {
 public:
  // Refuses ("" = ok) a group where this master is not (or ambiguously) one of masters,
  // or an https member without a usable TLS client context.
  static std::unique_ptr<master_group> create(group_services s, std::string& error);

  // POST /group/v1/view | /group/v1/run (signed). Any other /group path: 404.
  api_response handle_internal(const api_request& req);
  // A checked lowstate chunk, group-wide (see the file header).
  chunk_result run(const wire::value& chunk, const std::string& user);

  struct member {
    std::string url;
    group_url where;
    bool self = false;
  };
  const std::vector<member>& members() const noexcept { return members_; }

 private:
  explicit master_group(group_services s);
  struct answer {
    bool ok = false;
    std::string error;
    wire::value body;
  };
  // One call per member at once (self answered in-process by `local_fn`); each remote
  // call bounded by connect timeout `timeout` and total `total`.
  std::vector<answer> fan_out(const std::string& path, const std::vector<std::optional<wire::value>>& bodies,
                              std::chrono::seconds total,
                              const std::function<wire::value(const wire::value&)>& local_fn);
  answer post(const member& m, const std::string& path, const wire::value& body, std::chrono::seconds total);
  wire::value local_view(const wire::value& req) const;
  wire::value local_run(const wire::value& req) const;

  chunk_result run_local_clients(const wire::value& chunk, const std::string& user);
  chunk_result run_batch(const wire::value& chunk, const std::string& user);
  chunk_result run_everywhere(const wire::value& chunk, const std::string& user);
  chunk_result group_minions(const wire::value& chunk, const std::string& user);

  group_services s_;
  const config::master_config::group_config& g_;
  std::vector<member> members_;
  std::size_t self_ = 0;
  group_verifier verifier_;
  std::shared_ptr<void> tls_;  // boost::asio::ssl::context (client), when any member is https
};

}  // namespace sylvite::master::api
