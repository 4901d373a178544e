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
#include <functional>
#include <memory>
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
};

struct auth_outcome {
  wire::value reply;              // frame body to send
  std::vector<key_action> actions;
  std::vector<master_event> events;
  // accept | pend | reject | denied | full | invalid | bad_enc_algo | bad_sig_algo | error
  // | stale (dropped unanswered-in-time, reply {}; see auth_context::waited)
  std::string result;
  std::string id;
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
