// sylvite::master auth: the minion `_auth` handshake as a function (sans-I/O except for
// reading key files through pki::key_store and the autosign/autoreject files).
// authenticate() decides per Salt 3008 AuthFuncs._auth (salt/master.py) and returns the
// reply body plus the side effects to apply (key writes/removals, events); the caller
// applies them with apply_key_actions() *before* sending the reply.
// RSA cost per call: at most one OAEP decrypt of `token` (private) and one signature of
// the reply (private); `aes`/`session`/`token` encryptions are public-key operations;
// the AES-key X9.31 signature is precomputed per AES key (aes_key::sig).
// Thread-safety: pure function over its inputs; safe from any thread.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/pki/key_store.hpp"
#include "core/wire/value.hpp"
#include "master/keys.hpp"
#include "master/worker_pool.hpp"

namespace sylvite::master {

class master_signer;  // master/master_sign.hpp

struct key_action {
  enum class kind { write, remove };
  kind what = kind::write;
  pki::key_state state = pki::key_state::pending;
  std::string id;
  std::string pem;
};

struct master_event {
  std::string tag;
  wire::value data;
};

struct auth_context {
  const config::master_config* cfg = nullptr;
  const pki::key_store* keys = nullptr;
  const master_keys* mkeys = nullptr;
  std::shared_ptr<const aes_key> aes;  // current publish key
  // Session key string for an accepted minion (created/regenerated as needed).
  std::function<result<std::string>(const std::string& id)> session_key;
  // Ids with an identified publish connection (for max_minions); may be empty.
  std::function<std::vector<std::string>()> connected_ids;
  // master_sign_pubkey: pub_sig for the accepting reply (Salt's master_sign); null = off.
  const master_signer* signer = nullptr;
  int version = 0;  // envelope version
  sys_clock::time_point now = sys_clock::now();
  // How long the request waited in the worker queue (set from the pool thread that
  // builds the context). A sign-in that waited longer than stale_after is dropped before
  // any RSA work (result "stale"): its minion (auth_timeout, default 5 s) gave up and
  // resent, so the work would only delay the sign-ins that can still succeed.
  std::chrono::steady_clock::duration waited = worker_pool::current_task_waited();
  std::chrono::steady_clock::duration stale_after = std::chrono::seconds(5);
  std::string peer;  // "addr:port" of the sender, for log lines
  // Admission of a sign-in that will not be accepted (new or still pending key, rejected,
  // denied, invalid id, full): asked once, before the reply is signed and before any key
  // file is written. false -> result "rate_limited": reply {} (no RSA work, no write, no
  // event; a real minion treats it as a failed attempt and retries). Null = no limit.
  std::function<bool()> admit_unaccepted;
  // Pending-key cap: the number of pending keys when a NEW pending key would exceed the
  // cap (result "pending_full": nothing written, the reply is the signed "pending" answer
  // so a real minion keeps retrying), nullopt when there is room. Null = no cap.
  std::function<std::optional<std::size_t>()> pending_full;
};

// Per-source token bucket for sign-ins that are not accepted (unaccepted_auth_rate /
// unaccepted_auth_burst). Keyed by the address without the port. Bounded memory: at most
// max_sources buckets; when full, idle buckets (back at the burst) are dropped, and if
// none is idle the table is cleared (fail open rather than grow).
// Thread-safety: take() is thread-safe (one mutex).
class source_limiter {
 public:
  source_limiter(double rate, double burst, std::size_t max_sources = 65536)
      : rate_(rate), burst_(burst), max_(max_sources) {}
  // One token for source (an "addr:port" peer string is cut to its address).
  bool take(const std::string& peer, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  static std::string source_of(const std::string& peer);

 private:
  struct bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  double rate_, burst_;
  std::size_t max_;
  std::mutex mu_;
  std::map<std::string, bucket> b_;
};

struct auth_outcome {
  wire::value reply;              // frame body to send
  std::vector<key_action> actions;
  std::vector<master_event> events;
  // accept | pend | reject | denied | full | invalid | bad_enc_algo | bad_sig_algo | error
  // | stale (dropped unanswered-in-time, reply {}; see auth_context::waited)
  // | bad_load (a field out of bounds or a `pub` that is not an acceptable RSA public key:
  //   unsigned {"enc": "clear", "load": {"ret": false}}, nothing written)
  // | rate_limited (admit_unaccepted said no) | pending_full (pending_full said full)
  std::string result;
  std::string id;
};

// The number of entries of the pending-key directory for max_pending_keys: counted with
// one directory scan at most every `rescan` (the directory may be shared with other
// masters and edited by salt-key), plus the keys this process added since.
// Thread-safety: thread-safe (one mutex; a scan runs under it).
class pending_counter {
 public:
  explicit pending_counter(std::filesystem::path dir, std::chrono::milliseconds rescan = std::chrono::seconds(2))
      : dir_(std::move(dir)), rescan_(rescan) {}
  std::size_t count(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  void added();

 private:
  std::filesystem::path dir_;
  std::chrono::milliseconds rescan_;
  std::mutex mu_;
  bool scanned_ = false;
  std::chrono::steady_clock::time_point at_{};
  std::size_t n_ = 0;
};

// load = the clear `_auth` load (cmd, id, nonce, pub, enc_algo, sig_algo, token?, ...).
auth_outcome authenticate(const wire::value& load, const auth_context& ctx);

// Sign-ins dropped as stale since the process started.
std::uint64_t stale_auth_dropped();

// Apply the key writes/removals; returns false (and logs) if one failed.
bool apply_key_actions(const pki::key_store& keys, const std::vector<key_action>& actions);

// Salt's AutoKey.check_signing_file semantics for one line: fnmatch glob, or a full
// regex match (\A expr \Z).
bool signing_line_matches(const std::string& id, const std::string& line);
// True if id matches a line of the file (missing file/unsafe permissions -> false).
bool check_signing_file(const std::string& id, const std::string& path);

}  // namespace sylvite::master
