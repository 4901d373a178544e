// sylvite::master auth: see auth.hpp. The decision follows Salt 3008.5 salt/master.py
// AuthFuncs._auth_impl_sync (the LTS default path) as one table (auth_table::rows, below):
//  - invalid id -> ret False; max_minions -> "full" when MORE than max_minions are
//    connected (Salt's `not len(minions) <= max_minions`);
//  - open_mode skips every check; rejected -> False; accepted + different key -> denied;
//    unknown key -> autoreject / pending (ret True) / autosign; pending -> autoreject
//    (moved to rejected) / still pending / autosign;
//  - accept: reply map in Salt's key order enc, pub_key, publish_port, token?, aes,
//    session, sig, nonce. `session` is sent for every version (Salt does too).
//  - version > 1: clear-signed {"enc": "clear", "load": <payload bytes>, "sig": <sig>};
//    an unsupported sig_algo turns any signed answer into {"ret": "bad sig algo"}.
//  - a token that fails to decrypt is left out (the minion then reports an invalid
//    master key), except an unsupported enc_algo -> {"ret": "bad enc algo"}.
// Where sylvite differs from Salt 3008.5 (kept as they are; line numbers in salt/master.py):
//  - Salt asks check_autoreject/check_autosign for every well-formed sign-in before the key
//    lookup (4707-4708), so a minions_autosign stub is consumed (and expired stubs swept)
//    even for an accepted or rejected key and in open_mode; here they are asked only by the
//    new-key and pending-key rows.
//  - Salt's key lookup prefers rejected, then pending, then accepted (salt/cache/
//    localfs_key.py fetch); pki::key_store::state_of prefers accepted, pending, rejected.
//    Only differs when one id has key files in several directories.
//  - denied: Salt's store("denied_keys", id, [old..., new]) writes element 0 (localfs_key
//    store), so the first denied key is kept; here the newest presented key overwrites it.
//  - open_mode: Salt rewrites the key only if its text differs (4977), so a pending or
//    rejected key with the same text stays where it is; here it moves to accepted.
//  - auth_events: False and auth_events_autosign_grains are not read (events always fired,
//    without grains); the salt/key "accept" event Salt fires with cluster_id (4989) is not.
//  - a load without `id`, or an unsupported enc_algo without a token, or an unsupported
//    sig_algo with master_sign_pubkey: Salt raises (the exception reply); here ret False,
//    "bad enc algo", and a SHA-1 pub_sig (then "bad sig algo" when signed) respectively.
//  - auth_mode >= 2 (AES key joined with the token) is not implemented (default 1).
#include "master/auth.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <span>
#include <utility>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/master_sign.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;
using wire::value;

bool signing_line_matches(const std::string& id, const std::string& line) {
  if (line.empty()) return false;
  if (match::glob_match(line, id)) return true;
  // re.match(rf"\A{expr}\Z", id): a full match. pcre_match is anchored at the start.
  return match::pcre_match("(?:" + line + ")$", id);
}

namespace {

bool safe_permissions(const std::string& path, bool permissive) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (st.st_mode & S_IWOTH) return false;
  if ((st.st_mode & S_IWGRP) && !permissive) return false;
  return true;
}

bool raw_bool(const config::master_config& cfg, const char* key) {
  auto b = wire::get_bool(cfg.raw, key);
  return b.value_or(false);
}

}  // namespace

// True if pred holds for an entry of an autosign/autoreject file or an autosign grains
// file: a line without its surrounding blanks, not empty, not a # comment.
static bool any_entry(const std::string& text, const std::function<bool(const std::string&)>& pred) {
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    auto b = line.find_first_not_of(" \t\r");
    auto e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    if (line[0] == '#') continue;
    if (pred(line)) return true;
  }
  return false;
}

bool check_signing_file(const std::string& id, const std::string& path) {
  if (path.empty()) return false;
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  if (!safe_permissions(path, false)) {
    spdlog::warn("Wrong permissions for {}, ignoring content", path);
    return false;
  }
  auto text = util::read_file(path);
  return text && any_entry(*text, [&](const std::string& line) { return signing_line_matches(id, line); });
}

namespace {

bool check_autosign_dir(const auth_context& ctx, const std::string& id) {
  const fs::path dir = ctx.keys->dir() / "minions_autosign";
  std::error_code ec;
  const int timeout_min = ctx.cfg->autosign_timeout;  // minutes, as Salt
  if (timeout_min > 0 && fs::is_directory(dir, ec)) {
    const auto min_time = fs::file_time_type::clock::now() - std::chrono::minutes(timeout_min);
    for (auto& name : util::list_dir(dir)) {
      auto p = dir / name;
      auto mt = fs::last_write_time(p, ec);
      if (!ec && mt < min_time) {
        spdlog::warn("Autosign keyid expired {}", p.string());
        fs::remove(p, ec);
      }
    }
  }
  const fs::path stub = dir / id;
  if (!fs::exists(stub, ec)) return false;
  fs::remove(stub, ec);
  return true;
}

bool check_autosign_grains(const auth_context& ctx, const value* grains) {
  if (!grains || !grains->is_object() || grains->empty()) return false;
  auto dir_v = wire::get_text(ctx.cfg->raw, "autosign_grains_dir");
  if (!dir_v) return false;
  const fs::path dir{std::string(*dir_v)};
  for (auto& name : util::list_dir(dir)) {
    auto it = grains->find(name);
    if (it == grains->end()) continue;
    const auto path = (dir / name).string();
    if (!safe_permissions(path, raw_bool(*ctx.cfg, "permissive_pki_access"))) continue;
    std::string want;
    if (auto t = wire::as_text(*it)) want = std::string(*t);
    else want = it->dump();  // str(value) approximation for numbers/bools
    if (it->is_boolean()) want = it->get<bool>() ? "True" : "False";
    auto text = util::read_file(path);
    if (text && any_entry(*text, [&](const std::string& line) { return line == want; })) return true;
  }
  return false;
}

bool check_autosign(const auth_context& ctx, const std::string& id, const value* grains) {
  if (ctx.cfg->auto_accept) return true;
  if (check_signing_file(id, ctx.cfg->autosign_file)) return true;
  if (check_autosign_dir(ctx, id)) return true;
  if (check_autosign_grains(ctx, grains)) return true;
  return false;
}

}  // namespace

namespace {

std::atomic<std::uint64_t> stale_auth_count{0};

// Overload signal: one warning at most every 5 s with the drops since the last one.
void note_stale_drops(std::uint64_t total) {
  static std::mutex m;
  static std::chrono::steady_clock::time_point last{};
  static std::uint64_t reported = 0;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(m);
  if (now - last < std::chrono::seconds(5)) return;
  spdlog::warn("overloaded: dropped {} sign-in(s) that waited longer than the minions' auth_timeout in the "
               "worker queue ({} since start)",
               total - reported, total);
  last = now;
  reported = total;
}

// "Once per interval" for lines a remote sender can repeat at will.
class every {
 public:
  explicit every(std::chrono::seconds interval) : interval_(interval) {}
  // Events since the last logged line (this one included) when a line is due, else 0.
  std::uint64_t hit() {
    std::lock_guard lk(mu_);
    ++n_;
    const auto now = std::chrono::steady_clock::now();
    if (last_.time_since_epoch().count() != 0 && now - last_ < interval_) return 0;
    last_ = now;
    return std::exchange(n_, 0);
  }

 private:
  std::chrono::seconds interval_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
  std::uint64_t n_ = 0;
};

every bad_load_log{std::chrono::seconds(10)};
every limited_log{std::chrono::seconds(10)};
every pending_full_log{std::chrono::seconds(10)};

std::string printable(std::string_view s, std::size_t max = 80) {
  std::string out;
  for (char c : s.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (s.size() > max) out += "...";
  return out;
}

// A sign-in field out of bounds: refused before any key file is read, written or signed.
void log_bad_load(const auth_context& ctx, const std::string& id, const std::string& why) {
  if (auto n = bad_load_log.hit())
    spdlog::warn("refused sign-in of '{}' from {}: {} ({} such refusal(s) in the last 10 s)", printable(id),
                 ctx.peer.empty() ? std::string("?") : ctx.peer, why, n);
}

std::string strip(std::string s, const char* ws) {
  auto b = s.find_first_not_of(ws);
  auto e = s.find_last_not_of(ws);
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

std::uint64_t stale_auth_dropped() { return stale_auth_count.load(); }

namespace auth_table {

// ---- Step 1: classification ------------------------------------------------------------

facts classify(const value& load, const auth_context& ctx) {
  facts f;
  f.signed_reply = ctx.version > 1;
  f.open_mode = ctx.cfg->open_mode;
  if (!load.is_object()) {
    f.is_map = false;
    return f;
  }
  // Bounds: a real minion's nonce is 32 hex digits, its token one RSA block (<= 2048 bytes
  // at 16384 bits), its grains a few KiB.
  auto nonce_v = wire::get_text(load, "nonce");
  const value* tok = wire::find(load, "token");
  auto tok_b = tok ? wire::as_bytes(*tok) : std::nullopt;
  const value* grains = wire::find(load, "autosign_grains");
  if (nonce_v && nonce_v->size() > 128) {
    f.oversize = "nonce longer than 128 bytes";
  } else if (tok_b && tok_b->size() > 2048) {
    f.oversize = "token longer than 2048 bytes";
  } else if (grains && !grains->is_null() && wire::pack_payload(*grains).size() > 65536) {
    f.oversize = "autosign_grains larger than 64 KiB";
  }
  f.has_nonce = nonce_v.has_value();
  if (nonce_v) f.nonce = std::string(*nonce_v);
  if (auto id_v = wire::get_text(load, "id")) {
    f.has_id = true;
    f.id = std::string(*id_v);
    f.valid_id = pki::valid_id(*id_v);
  }
  f.stale = ctx.stale_after.count() > 0 && ctx.waited > ctx.stale_after;
  if (auto pub_v = wire::get_text(load, "pub")) {
    f.has_pub = true;
    f.pub = strip(std::string(*pub_v), " \t\r\n\f\v");  // Salt: load["pub"].strip()
  }
  auto sa_name = wire::get_text(load, "sig_algo");
  f.sig_algo = sa_name ? crypto::parse_sig_algo(*sa_name) : std::optional{crypto::sig_algo::pkcs1v15_sha1};
  auto ea_name = wire::get_text(load, "enc_algo");
  f.enc_algo = ea_name ? crypto::parse_enc_algo(*ea_name) : std::optional{crypto::enc_algo::oaep_sha1};
  if (ea_name) f.enc_algo_name = std::string(*ea_name);

  // The lazy facts. They refer to `load` and `ctx`, which outlive the facts.
  const std::string id = f.id;
  const auto pub = std::make_shared<const std::string>(f.pub);  // may be large: shared, not copied
  f.bad_pub = lazy<std::string>([pub] { return pki::check_minion_pub(*pub); });
  f.full = lazy<bool>([&ctx, id] {
    const auto& cfg = *ctx.cfg;
    if (cfg.max_minions <= 0 || !ctx.connected_ids) return false;
    const auto ids = ctx.connected_ids();
    return !(static_cast<int>(ids.size()) <= cfg.max_minions) && std::find(ids.begin(), ids.end(), id) == ids.end();
  });
  f.key = lazy<stored_key>([&ctx, id, pub] {
    stored_key k;
    const auto state = ctx.keys->state_of(id);
    if (!state) return k;
    auto pem = ctx.keys->read(*state, id);
    if (!pem) return k;  // vanished between the two reads
    switch (*state) {
      case pki::key_state::accepted: k.state = key_is::accepted; break;
      case pki::key_state::pending: k.state = key_is::pending; break;
      case pki::key_state::rejected: k.state = key_is::rejected; break;
      case pki::key_state::denied: return k;  // state_of never answers denied
    }
    k.pem = strip(std::move(*pem), " \t\r\n");
    k.same = crypto::clean_key(k.pem) == crypto::clean_key(*pub);
    return k;
  });
  f.autoreject = lazy<bool>([&ctx, id] { return check_signing_file(id, ctx.cfg->autoreject_file); });
  f.autosign = lazy<bool>([&ctx, &load, id] { return check_autosign(ctx, id, wire::find(load, "autosign_grains")); });
  f.pending_full = lazy<std::optional<std::size_t>>([&ctx]() -> std::optional<std::size_t> {
    if (!ctx.pending_full) return std::nullopt;
    return ctx.pending_full();
  });
  return f;
}

// ---- Step 2: the table -----------------------------------------------------------------
// Salt 3008.5 salt/master.py AuthFuncs._auth_impl_sync, top to bottom. Rows before
// `well_formed` are sylvite's refusals of malformed or late requests (Salt raises or has
// no such check); the rows after it are Salt's flow.

namespace {

using R = reply_is;
using E = key_effect;
bool is(const facts& f, key_is s) { return f.key().state == s; }

void no_note(const facts&, const auth_context&) {}

const row table[] = {
    // clang-format off
    {verdict::not_a_map, "not_a_map", [](const facts& f) { return !f.is_map; },
     "error", R::text_bad_load, E::none, nullptr, false, false, no_note},
    {verdict::oversize, "oversize", [](const facts& f) { return !f.oversize.empty(); },
     "bad_load", R::clear_false, E::none, nullptr, false, false,
     [](const facts& f, const auth_context& ctx) { log_bad_load(ctx, "?", f.oversize); }},
    // Salt: KeyError('nonce')
    {verdict::no_nonce, "no_nonce", [](const facts& f) { return f.signed_reply && !f.has_nonce; },
     "error", R::text_exception, E::none, nullptr, false, false, no_note},
    {verdict::invalid_id, "invalid_id", [](const facts& f) { return !f.valid_id; },
     "invalid", R::ret_false, E::none, nullptr, false, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("Authentication request from invalid id {}", f.has_id ? f.id : std::string("<none>"));
     }},
    {verdict::stale, "stale", [](const facts& f) { return f.stale; },
     "stale", R::drop, E::none, nullptr, true, false,
     [](const facts& f, const auth_context& ctx) {
       const auto total = ++stale_auth_count;
       note_stale_drops(total);
       spdlog::debug("sign-in of {} dropped: it waited {} ms in the queue (its minion gave up after {} s)", f.id,
                     std::chrono::duration_cast<std::chrono::milliseconds>(ctx.waited).count(),
                     std::chrono::duration_cast<std::chrono::seconds>(ctx.stale_after).count());
     }},
    // Salt: KeyError('pub')
    {verdict::no_pub, "no_pub", [](const facts& f) { return !f.has_pub; },
     "error", R::text_exception, E::none, nullptr, true, false, no_note},
    // The key is parsed before it can be stored or compared: a sign-in writes nothing but a key.
    {verdict::bad_pub, "bad_pub", [](const facts& f) { return !f.bad_pub().empty(); },
     "bad_load", R::clear_false, E::none, nullptr, true, false,
     [](const facts& f, const auth_context& ctx) { log_bad_load(ctx, f.id, f.bad_pub()); }},
    {verdict::well_formed, "well_formed", [](const facts&) { return true; },
     "", R::pass, E::none, nullptr, true, false,
     [](const facts& f, const auth_context&) { spdlog::info("Authentication request from {}", f.id); }},
    // Salt: `not len(minions) <= max_minions` and the id is not connected
    {verdict::full, "full", [](const facts& f) { return f.full(); },
     "full", R::ret_full, E::none, "full", true, false,
     [](const facts& f, const auth_context& ctx) {
       spdlog::info("Too many minions connected (max_minions={}). Rejecting connection from id {}",
                    ctx.cfg->max_minions, f.id);
     }},
    // Salt checks an empty pub after "accepted"; unreachable behind bad_pub, kept as Salt's.
    {verdict::open_empty_pub, "open_empty_pub", [](const facts& f) { return f.open_mode && f.pub.empty(); },
     "error", R::ret_false, E::none, nullptr, true, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("Authentication accepted from {}", f.id);
       spdlog::error("Public key is empty: {}", f.id);
     }},
    {verdict::open_accept, "open_accept", [](const facts& f) { return f.open_mode; },
     "accept", R::accept, E::accept_open, "accept", true, false,
     [](const facts& f, const auth_context&) { spdlog::info("Authentication accepted from {}", f.id); }},
    {verdict::rejected, "rejected", [](const facts& f) { return is(f, key_is::rejected); },
     "reject", R::ret_false, E::none, "reject", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("Public key rejected for {}. Key is present in rejection key dir.", f.id);
     }},
    {verdict::accepted_other_key, "accepted_other_key",
     [](const facts& f) { return is(f, key_is::accepted) && !f.key().same; },
     "denied", R::ret_false, E::write_denied, "denied", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::error("Authentication attempt from {} failed, the public keys did not match. This may be an "
                     "attempt to compromise the Salt cluster.", f.id);
     }},
    {verdict::accepted, "accepted", [](const facts& f) { return is(f, key_is::accepted); },
     "accept", R::accept, E::none, "accept", true, false,
     [](const facts& f, const auth_context&) { spdlog::info("Authentication accepted from {}", f.id); }},
    {verdict::new_autoreject, "new_autoreject", [](const facts& f) { return is(f, key_is::none) && f.autoreject(); },
     "reject", R::ret_false, E::write_rejected, "reject", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("New public key for {} rejected via autoreject_file", f.id);
     }},
    // sylvite's max_pending_keys: nothing stored, the "pending" answer so a real minion retries
    {verdict::new_pending_full, "new_pending_full",
     [](const facts& f) { return is(f, key_is::none) && !f.autosign() && f.pending_full().has_value(); },
     "pending_full", R::ret_true, E::none, nullptr, true, true,
     [](const facts& f, const auth_context& ctx) {
       if (auto k = pending_full_log.hit())
         spdlog::error("pending key directory full ({} keys, max_pending_keys); accept or delete keys: new key of "
                       "'{}' from {} not stored ({} such sign-in(s) in the last 10 s)",
                       *f.pending_full(), printable(f.id), ctx.peer, k);
     }},
    {verdict::new_pending, "new_pending", [](const facts& f) { return is(f, key_is::none) && !f.autosign(); },
     "pend", R::ret_true, E::write_pending, "pend", true, false,
     [](const facts& f, const auth_context&) { spdlog::info("New public key for {} placed in pending", f.id); }},
    {verdict::new_autosign, "new_autosign", [](const facts& f) { return is(f, key_is::none); },
     "accept", R::accept, E::accept_new, "accept", true, false,
     [](const facts& f, const auth_context&) { spdlog::info("Authentication accepted from {}", f.id); }},
    // Salt keeps the pending key and flips its state to rejected.
    {verdict::pending_autoreject, "pending_autoreject",
     [](const facts& f) { return is(f, key_is::pending) && f.autoreject(); },
     "reject", R::ret_false, E::pending_to_rejected, "reject", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("Pending public key for {} rejected via autoreject_file", f.id);
     }},
    {verdict::pending_other_key, "pending_other_key",
     [](const facts& f) { return is(f, key_is::pending) && !f.autosign() && !f.key().same; },
     "denied", R::ret_false, E::write_denied, "denied", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::error("Authentication attempt from {} failed, the public key in pending did not match. This may be "
                     "an attempt to compromise the Salt cluster.", f.id);
     }},
    {verdict::pending_still, "pending_still", [](const facts& f) { return is(f, key_is::pending) && !f.autosign(); },
     "pend", R::ret_true, E::none, "pend", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::info("Authentication failed from host {}, the key is in pending and needs to be accepted "
                    "with salt-key -a {}", f.id, f.id);
     }},
    {verdict::pending_autosign_other_key, "pending_autosign_other_key",
     [](const facts& f) { return is(f, key_is::pending) && !f.key().same; },
     "denied", R::ret_false, E::write_denied, "denied", true, false,
     [](const facts& f, const auth_context&) {
       spdlog::error("Authentication attempt from {} failed, the public keys in pending did not match. This may be "
                     "an attempt to compromise the Salt cluster.", f.id);
     }},
    {verdict::pending_autosign, "pending_autosign", [](const facts& f) { return is(f, key_is::pending); },
     "accept", R::accept, E::accept_pending, "accept", true, false,
     [](const facts& f, const auth_context&) { spdlog::info("Authentication accepted from {}", f.id); }},
    // Salt's "Unaccounted for authentication failure": unreachable (key_is has no other state).
    {verdict::unaccounted, "unaccounted", [](const facts&) { return true; },
     "error", R::ret_false, E::none, "error", true, false,
     [](const facts&, const auth_context&) { spdlog::warn("Unaccounted for authentication failure"); }},
    // clang-format on
};

}  // namespace

std::span<const row> rows() { return table; }

const row& decide(const facts& f, const auth_context& ctx) {
  for (const row& r : table) {
    if (!r.when(f)) continue;
    if (r.reply != reply_is::pass) return r;
    r.note(f, ctx);
  }
  return std::span(table).back();  // not reached: the last row always holds
}

}  // namespace auth_table

// ---- Step 3: the executor --------------------------------------------------------------

namespace {

using auth_table::facts;
using auth_table::key_effect;
using auth_table::key_is;
using auth_table::reply_is;
using auth_table::row;

const char* const kException = "Some exception handling minion payload";

struct executor {
  const auth_context& ctx;
  const value& load;
  const facts& f;
  auth_outcome out;
  bool limited = false;  // admission said no: the caller drops the writes and events

  void event(bool result, const char* act) {
    value d = value::object();
    d["result"] = result;
    d["act"] = act;
    d["id"] = out.id;
    d["pub"] = f.pub;
    out.events.push_back({"salt/auth", std::move(d)});
  }

  void key(key_action::kind what, pki::key_state state, std::string pem = {}) {
    out.actions.push_back({what, state, out.id, std::move(pem)});
  }

  void effect(key_effect e) {
    using K = key_action::kind;
    using S = pki::key_state;
    switch (e) {
      case key_effect::none: break;
      case key_effect::write_pending: key(K::write, S::pending, f.pub); break;
      case key_effect::write_rejected: key(K::write, S::rejected, f.pub); break;
      case key_effect::pending_to_rejected:
        key(K::write, S::rejected, f.key().pem);
        key(K::remove, S::pending);
        break;
      case key_effect::write_denied: key(K::write, S::denied, f.pub); break;
      case key_effect::accept_open: {
        const auto& k = f.key();
        if (!(k.state == key_is::accepted && k.pem == f.pub)) key(K::write, S::accepted, f.pub);
        if (k.state == key_is::pending) key(K::remove, S::pending);
        if (k.state == key_is::rejected) key(K::remove, S::rejected);
        break;
      }
      case key_effect::accept_new: key(K::write, S::accepted, f.pub); break;
      case key_effect::accept_pending:
        key(K::write, S::accepted, f.pub);
        key(K::remove, S::pending);
        break;
    }
  }

  // Signed (version > 1) or plain answer around `body`.
  value signed_reply(value body) {
    if (!f.signed_reply) return value{{"enc", "clear"}, {"load", std::move(body)}};
    if (!f.sig_algo) {
      spdlog::info("Minion tried to authenticate with unsupported signing algorithm");
      out.result = "bad_sig_algo";
      return value{{"enc", "clear"}, {"load", value{{"ret", "bad sig algo"}}}};
    }
    std::string tosign = wire::pack_payload(body);
    auto sig = crypto::sign(ctx.mkeys->priv(), tosign, *f.sig_algo);
    if (!sig) {
      spdlog::error("cannot sign auth reply: {}", sig.error().message());
      out.result = "error";
      return value(kException);
    }
    value r = value::object();
    r["enc"] = "clear";
    r["load"] = wire::make_bin(tosign);
    r["sig"] = wire::make_bin(*sig);
    return r;
  }

  // Every answer that is not an acceptance: the admission check comes before the
  // signature (and, via `limited`, before any key write or event).
  value ret_reply(value ret) {
    if (ctx.admit_unaccepted && !ctx.admit_unaccepted()) {
      limited = true;
      return value::object();
    }
    if (!f.signed_reply) return value{{"enc", "clear"}, {"load", value{{"ret", std::move(ret)}}}};
    value l = value::object();
    l["ret"] = std::move(ret);
    l["nonce"] = f.nonce;
    return signed_reply(std::move(l));
  }

  value fail(const char* result, value reply) {
    out.result = result;
    return reply;
  }

  // The accepting reply in Salt's key order: enc, pub_key, publish_port, pub_sig?, token?,
  // aes, session, sig, nonce (signed only). `session` is sent for every version (Salt too).
  value accept_reply(const std::string& key_pem, bool stored) {
    // A key accepted before: the cache's parsed copy (one PEM parse per key, and the hello
    // after this reply is checked without reading the file again).
    std::optional<crypto::rsa_key> cached;
    if (stored && ctx.accepted_key) cached = ctx.accepted_key(out.id, key_pem);
    auto minion_pub = cached ? result<crypto::rsa_key>(std::move(*cached)) : crypto::rsa_key::from_public_pem(key_pem);
    if (!minion_pub) {
      spdlog::error("Corrupt or missing public key \"{}\": {}", out.id, minion_pub.error().message());
      out.result = "error";  // before the reply: an unsupported sig_algo still says bad_sig_algo
      return ret_reply(false);
    }
    if (!f.enc_algo) {
      spdlog::info("Minion {} tried to authenticate with unsupported encryption algorithm: {}", out.id,
                   f.enc_algo_name);
      return fail("bad_enc_algo", value{{"enc", "clear"}, {"load", value{{"ret", "bad enc algo"}}}});
    }
    const auto ealgo = *f.enc_algo;
    value ret = value::object();
    ret["enc"] = "pub";
    ret["pub_key"] = ctx.mkeys->pub_clean();
    ret["publish_port"] = ctx.cfg->publish_port;
    if (ctx.signer) {
      // Salt signs pub_key with the minion's sig_algo; an unsupported one cannot get here
      // signed (bad sig algo below), an unsigned v1 reply falls back to Salt's default.
      auto ps = ctx.signer->pub_sig(ctx.mkeys->pub_clean(), f.sig_algo.value_or(crypto::sig_algo::pkcs1v15_sha1));
      if (!ps) {
        spdlog::error("cannot sign master.pub for {}: {}", out.id, ps.error().message());
        return fail("error", value(kException));
      }
      ret["pub_sig"] = std::move(*ps);
    }
    if (const value* tok = wire::find(load, "token")) {
      auto tb = wire::as_bytes(*tok);
      auto mtoken = tb ? crypto::oaep_decrypt(ctx.mkeys->priv(), *tb, ealgo)
                       : result<std::string>(crypto::make_error_code(crypto::errc::decrypt_failed));
      if (mtoken) {
        auto enc = crypto::oaep_encrypt(*minion_pub, *mtoken, ealgo);
        if (enc) ret["token"] = wire::make_bin(*enc);
      } else {
        spdlog::warn("Token failed to decrypt from {}: {}", out.id, mtoken.error().message());
      }
    }
    auto aes_enc = crypto::oaep_encrypt(*minion_pub, ctx.aes->crypt.key_string(), ealgo);
    std::string session;
    if (ctx.session_key) {
      auto s = ctx.session_key(out.id);
      if (!s) {
        spdlog::error("cannot create a session key for {}: {}", out.id, s.error().message());
        return fail("error", value(kException));
      }
      session = std::move(*s);
    }
    auto sess_enc = crypto::oaep_encrypt(*minion_pub, session, ealgo);
    if (!aes_enc || !sess_enc) {
      spdlog::error("cannot encrypt the auth reply for {}", out.id);
      return fail("error", value(kException));
    }
    ret["aes"] = wire::make_bin(*aes_enc);
    ret["session"] = wire::make_bin(*sess_enc);
    if (ctx.version < 3) spdlog::warn("Minion using legacy request server protocol, please upgrade {}", out.id);
    ret["sig"] = wire::make_bin(ctx.aes->sig);
    event(true, "accept");
    if (!f.signed_reply) return ret;
    ret["nonce"] = f.nonce;
    return signed_reply(std::move(ret));
  }

  value reply(const row& r) {
    switch (r.reply) {
      case reply_is::pass: break;  // never decided
      case reply_is::text_bad_load: return value("bad load");
      case reply_is::text_exception: return value(kException);
      case reply_is::clear_false: return value{{"enc", "clear"}, {"load", value{{"ret", false}}}};
      case reply_is::drop: return value::object();
      case reply_is::ret_false: return ret_reply(false);
      case reply_is::ret_true: return ret_reply(true);
      case reply_is::ret_full: return ret_reply("full");
      case reply_is::accept:
        // The stored key when it was accepted already, else the one just written.
        return r.effect == key_effect::none ? accept_reply(f.key().pem, true) : accept_reply(f.pub, false);
    }
    return fail("error", value(kException));
  }

  // The row's log line, key effects, event, then the reply (in the order Salt does them).
  void run(const row& r) {
    if (r.names_minion) out.id = f.id;
    if (!r.after_reply) {
      out.result = r.result;
      r.note(f, ctx);
    }
    effect(r.effect);
    if (r.act && r.reply != reply_is::accept) event(r.reply == reply_is::ret_true, r.act);
    out.reply = reply(r);
    if (r.after_reply && !limited) {
      out.result = r.result;
      r.note(f, ctx);
    }
  }
};

}  // namespace

auth_outcome authenticate(const value& load, const auth_context& ctx) {
  const facts f = auth_table::classify(load, ctx);
  const row& r = auth_table::decide(f, ctx);
  executor x{ctx, load, f, {}, false};
  x.run(r);
  auth_outcome out = std::move(x.out);
  if (x.limited) {
    // Over unaccepted_auth_rate: no signature was made; drop the writes and events too.
    if (auto n = limited_log.hit())
      spdlog::warn("sign-ins not accepted from {} over the per-source limit (unaccepted_auth_rate): {} answered "
                   "without RSA work or key writes in the last 10 s (last id '{}')",
                   source_limiter::source_of(ctx.peer), n, printable(out.id));
    out.actions.clear();
    out.events.clear();
    out.result = "rate_limited";
    out.reply = value::object();
  }
  return out;
}


std::string source_limiter::source_of(const std::string& peer) {
  // "1.2.3.4:5678" -> "1.2.3.4"; "[::1]:5678" -> "::1"; anything else as is.
  if (!peer.empty() && peer.front() == '[') {
    auto e = peer.find(']');
    if (e != std::string::npos) return peer.substr(1, e - 1);
  }
  auto c = peer.rfind(':');
  if (c != std::string::npos && peer.find(':') == c) return peer.substr(0, c);
  return peer;
}

bool source_limiter::take(const std::string& peer, std::chrono::steady_clock::time_point now) {
  const std::string src = source_of(peer);
  std::lock_guard lk(mu_);
  auto it = b_.find(src);
  if (it == b_.end()) {
    if (b_.size() >= max_) {
      std::erase_if(b_, [&](const auto& kv) {
        return kv.second.tokens + rate_ * std::chrono::duration<double>(now - kv.second.at).count() >= burst_;
      });
      if (b_.size() >= max_) b_.clear();
    }
    it = b_.emplace(src, bucket{burst_, now}).first;
  }
  auto& bk = it->second;
  const double dt = std::chrono::duration<double>(now - bk.at).count();
  if (dt > 0) bk.tokens = std::min(burst_, bk.tokens + rate_ * dt);
  bk.at = now;
  if (bk.tokens < 1.0) return false;
  bk.tokens -= 1.0;
  return true;
}

std::size_t pending_counter::count(std::chrono::steady_clock::time_point now) {
  std::lock_guard lk(mu_);
  if (!scanned_ || now - at_ >= rescan_) {
    std::size_t n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) ++n;
    n_ = n;
    at_ = now;
    scanned_ = true;
  }
  return n_;
}

void pending_counter::added() {
  std::lock_guard lk(mu_);
  ++n_;
}

bool apply_key_actions(const pki::key_store& keys, const std::vector<key_action>& actions) {
  bool ok = true;
  for (const auto& a : actions) {
    if (a.what == key_action::kind::write) {
      auto r = keys.write(a.state, a.id, a.pem);
      if (!r) {
        spdlog::error("cannot write {} key of {}: {}", pki::state_name(a.state), a.id, r.error().message());
        ok = false;
      }
    } else {
      auto r = keys.remove(a.state, a.id);
      if (!r) {
        spdlog::error("cannot remove {} key of {}: {}", pki::state_name(a.state), a.id, r.error().message());
        ok = false;
      }
    }
  }
  return ok;
}

}  // namespace sylvite::master
