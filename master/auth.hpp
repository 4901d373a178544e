// sylvite::master auth: the minion `_auth` handshake as a function (sans-I/O except for
// reading key files through pki::key_store and the autosign/autoreject files).
// authenticate() decides per Salt 3008 AuthFuncs._auth (salt/master.py) and returns the
// reply body plus the side effects to apply (key writes/removals, events); the caller
// applies them with apply_key_actions() *before* sending the reply.
// It runs in three steps, each readable on its own (see auth_table below):
//   1. classify(): the facts about the request and the stored key (a small struct);
//   2. decide(): ONE table of rows {condition over the facts -> outcome}, read top to
//      bottom in the order of Salt's own flow; the first row that holds wins;
//   3. the executor: the row's log line, key writes, salt/auth event and reply.
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
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
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
  // The parsed accepted key of id from the master's accepted-key cache (filled on a miss,
  // so the publish hello that follows a sign-in finds it in memory), if its text is `pem`;
  // nullopt otherwise (the reply then parses `pem` itself). Null = no cache.
  std::function<std::optional<crypto::rsa_key>(const std::string& id, std::string_view pem)> accepted_key;
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

// The pieces of authenticate(), exposed for their unit tests.
namespace auth_table {

// A fact that costs I/O or work (a key file read, a directory scan, parsing a key) or has a
// side effect (autosign consumes a minions_autosign stub): asked at most once, and only
// when a row of the table reaches it, so the table decides what is asked, in Salt's order.
template <class T>
class lazy {
 public:
  lazy() = default;
  explicit lazy(std::function<T()> ask) : ask_(std::move(ask)) {}
  static lazy known(T v) {
    lazy l;
    l.v_ = std::move(v);
    return l;
  }
  const T& operator()() const {
    if (!v_) v_ = ask_ ? ask_() : T{};
    return *v_;
  }
  bool asked() const { return v_.has_value(); }

 private:
  std::function<T()> ask_;
  mutable std::optional<T> v_;
};

enum class key_is { none, accepted, pending, rejected };  // denied keys are kept apart (Salt too)

struct stored_key {
  key_is state = key_is::none;
  std::string pem;    // as stored, whitespace-stripped ("" for none)
  bool same = false;  // clean_key(pem) == clean_key(the presented pub)
};

// Step 1: the facts. Request facts are plain values (no I/O); the rest is lazy.
struct facts {
  // the request
  bool is_map = true;        // the load is a map
  std::string oversize;      // why a field is out of bounds ("" = all within bounds)
  bool signed_reply = false; // envelope version > 1: answers carry the nonce and are signed
  bool has_nonce = false;
  std::string nonce;
  bool has_id = false;       // `id` is text
  bool valid_id = false;     // ... and a valid minion id
  std::string id;
  bool stale = false;        // waited in the worker queue longer than auth_context::stale_after
  bool has_pub = false;
  std::string pub;           // load["pub"].strip()
  std::optional<crypto::sig_algo> sig_algo;  // nullopt: unsupported (absent = PKCS1v15-SHA1)
  std::optional<crypto::enc_algo> enc_algo;  // nullopt: unsupported (absent = OAEP-SHA1)
  std::string enc_algo_name;
  // master policy
  bool open_mode = false;
  // asked lazily
  lazy<std::string> bad_pub;  // why `pub` is not an acceptable RSA public key ("" = it is)
  lazy<bool> full;            // max_minions: more than allowed are connected, this id not among them
  lazy<stored_key> key;       // the key stored for this id and its state
  lazy<bool> autoreject;      // autoreject_file matches the id
  lazy<bool> autosign;        // auto_accept, autosign_file, a minions_autosign stub (consumed), grains
  lazy<std::optional<std::size_t>> pending_full;  // max_pending_keys reached: the pending count
};

// Step 2: the table.
enum class verdict {
  not_a_map, oversize, no_nonce, invalid_id, stale, no_pub, bad_pub, well_formed, full, open_empty_pub,
  open_accept, rejected, accepted_other_key, accepted, new_autoreject, new_pending_full, new_pending,
  new_autosign, pending_autoreject, pending_other_key, pending_still, pending_autosign_other_key,
  pending_autosign, unaccounted
};

enum class reply_is {
  pass,            // no answer: log the row's line and read on (Salt logs there and goes on)
  text_bad_load,   // the string "bad load"
  text_exception,  // the string "Some exception handling minion payload" (Salt raised)
  clear_false,     // unsigned {"enc": "clear", "load": {"ret": false}} (bad_load)
  drop,            // {} (stale)
  ret_false,       // {"ret": false}     } admission (admit_unaccepted) first, then signed
  ret_true,        // {"ret": true}      } with the nonce when signed_reply; refused
  ret_full,        // {"ret": "full"}    } admission -> {} (result rate_limited)
  accept           // the full accepting reply (enc pub, aes, session, ...)
};

enum class key_effect {
  none,
  write_pending,        // new key -> pending
  write_rejected,       // new key -> rejected
  pending_to_rejected,  // the stored pending key moves to rejected
  write_denied,         // the presented key -> denied (the stored one is kept)
  accept_open,          // open_mode: accepted := pub unless already so; other state removed
  accept_new,           // new key -> accepted
  accept_pending        // accepted := pub, pending removed
};

struct row {
  verdict what;
  const char* name;
  bool (*when)(const facts&);
  const char* result;      // auth_outcome::result
  reply_is reply;
  key_effect effect;
  const char* act;         // salt/auth event "act" (nullptr: no event); its "result" is true
                           // for ret_true/accept rows; accept's is fired once the reply is built
  bool names_minion;       // auth_outcome::id is set (false for rows that refuse before the id)
  bool after_reply;        // result and log line after the reply, and only if admitted (else before)
  void (*note)(const facts&, const auth_context&);  // the row's log line(s) and counters
};

std::span<const row> rows();

// Step 1: the facts of one sign-in (the lazy ones read ctx.keys / ctx.cfg when asked).
facts classify(const wire::value& load, const auth_context& ctx);

// Step 2: the first row whose condition holds (the last row always does); the notes of
// the `pass` rows on the way are logged.
const row& decide(const facts& f, const auth_context& ctx);

}  // namespace auth_table

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
