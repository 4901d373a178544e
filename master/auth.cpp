// sylvite::master auth: see auth.hpp. Decision order and reply layout follow Salt 3008.5
// salt/master.py AuthFuncs._auth_impl_sync (the LTS default path):
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
#include "master/auth.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <filesystem>
#include <fstream>
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

bool check_signing_file(const std::string& id, const std::string& path) {
  if (path.empty()) return false;
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  if (!safe_permissions(path, false)) {
    spdlog::warn("Wrong permissions for {}, ignoring content", path);
    return false;
  }
  auto text = util::read_file(path);
  if (!text) return false;
  std::size_t pos = 0;
  while (pos <= text->size()) {
    auto nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    auto b = line.find_first_not_of(" \t\r");
    auto e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    if (line[0] == '#') continue;
    if (signing_line_matches(id, line)) return true;
  }
  return false;
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
    if (!text) continue;
    std::size_t pos = 0;
    while (pos <= text->size()) {
      auto nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      std::string line = text->substr(pos, nl - pos);
      pos = nl + 1;
      auto b = line.find_first_not_of(" \t\r");
      auto e = line.find_last_not_of(" \t\r");
      if (b == std::string::npos) continue;
      line = line.substr(b, e - b + 1);
      if (line[0] == '#') continue;
      if (line == want) return true;
    }
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

struct builder {
  const auth_context& ctx;
  auth_outcome& out;
  bool sign_messages;
  std::optional<crypto::sig_algo> salgo;
  std::string nonce;
  bool has_nonce;

  value event_data(bool result, const char* act, const std::string& pub) const {
    value d = value::object();
    d["result"] = result;
    d["act"] = act;
    d["id"] = out.id;
    d["pub"] = pub;
    return d;
  }
  void event(bool result, const char* act, const std::string& pub) {
    out.events.push_back({"salt/auth", event_data(result, act, pub)});
  }

  // Signed (or plain) answer around `load`.
  value signed_reply(value load) {
    if (!sign_messages) {
      return value{{"enc", "clear"}, {"load", std::move(load)}};
    }
    if (!salgo) {
      spdlog::info("Minion tried to authenticate with unsupported signing algorithm");
      out.result = "bad_sig_algo";
      return value{{"enc", "clear"}, {"load", value{{"ret", "bad sig algo"}}}};
    }
    std::string tosign = wire::pack_payload(load);
    auto sig = crypto::sign(ctx.mkeys->priv(), tosign, *salgo);
    if (!sig) {
      spdlog::error("cannot sign auth reply: {}", sig.error().message());
      out.result = "error";
      return value("Some exception handling minion payload");
    }
    value r = value::object();
    r["enc"] = "clear";
    r["load"] = wire::make_bin(tosign);
    r["sig"] = wire::make_bin(*sig);
    return r;
  }

  bool limited = false;

  // Every answer that is not an acceptance goes through here: the admission check comes
  // before the signature (and, via `limited`, before any key write or event).
  value ret_reply(value ret) {
    if (ctx.admit_unaccepted && !ctx.admit_unaccepted()) {
      limited = true;
      return value::object();
    }
    if (!sign_messages) return value{{"enc", "clear"}, {"load", value{{"ret", std::move(ret)}}}};
    value l = value::object();
    l["ret"] = std::move(ret);
    l["nonce"] = nonce;
    return signed_reply(std::move(l));
  }
};

}  // namespace

namespace {
std::atomic<std::uint64_t> stale_auth_count{0};
}

std::uint64_t stale_auth_dropped() { return stale_auth_count.load(); }

namespace {
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
}  // namespace

namespace {

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
auth_outcome refuse_bad_load(auth_outcome out, const auth_context& ctx, const std::string& id,
                             const std::string& why) {
  if (auto n = bad_load_log.hit())
    spdlog::warn("refused sign-in of '{}' from {}: {} ({} such refusal(s) in the last 10 s)", printable(id),
                 ctx.peer.empty() ? std::string("?") : ctx.peer, why, n);
  out.result = "bad_load";
  out.reply = value{{"enc", "clear"}, {"load", value{{"ret", false}}}};
  return out;
}

auth_outcome authenticate_impl(const value& load, const auth_context& ctx, bool& limited);

}  // namespace

auth_outcome authenticate(const value& load, const auth_context& ctx) {
  bool limited = false;
  auth_outcome out = authenticate_impl(load, ctx, limited);
  if (limited) {
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

namespace {

auth_outcome authenticate_impl(const value& load, const auth_context& ctx, bool& limited_out) {
  auth_outcome out;
  struct set_limited {
    bool& dst;
    const bool& src;
    ~set_limited() { dst = src; }
  };
  const bool sign_messages = ctx.version > 1;
  if (!load.is_object()) {
    out.result = "error";
    out.reply = "bad load";
    return out;
  }
  auto id_v = wire::get_text(load, "id");
  auto nonce_v = wire::get_text(load, "nonce");
  auto ea_name = wire::get_text(load, "enc_algo");
  auto sa_name = wire::get_text(load, "sig_algo");
  builder b{ctx, out, sign_messages,
            sa_name ? crypto::parse_sig_algo(*sa_name) : std::optional{crypto::sig_algo::pkcs1v15_sha1},
            nonce_v ? std::string(*nonce_v) : std::string(), nonce_v.has_value()};
  set_limited sl{limited_out, b.limited};
  // Bounds before anything else: a real minion's nonce is 32 hex digits, its token one
  // RSA block (<= 2048 bytes at 16384 bits), its grains a few KiB.
  if (nonce_v && nonce_v->size() > 128) return refuse_bad_load(std::move(out), ctx, "?", "nonce longer than 128 bytes");
  if (const value* tok = wire::find(load, "token")) {
    auto tb = wire::as_bytes(*tok);
    if (tb && tb->size() > 2048) return refuse_bad_load(std::move(out), ctx, "?", "token longer than 2048 bytes");
  }
  if (const value* g = wire::find(load, "autosign_grains"); g && !g->is_null()) {
    if (wire::pack_payload(*g).size() > 65536)
      return refuse_bad_load(std::move(out), ctx, "?", "autosign_grains larger than 64 KiB");
  }
  if (sign_messages && !nonce_v) {
    // Salt raises KeyError('nonce') here.
    out.result = "error";
    out.reply = "Some exception handling minion payload";
    return out;
  }
  if (!id_v || !pki::valid_id(*id_v)) {
    spdlog::info("Authentication request from invalid id {}", id_v ? std::string(*id_v) : std::string("<none>"));
    out.result = "invalid";
    out.reply = b.ret_reply(false);
    return out;
  }
  out.id = std::string(*id_v);
  if (ctx.stale_after.count() > 0 && ctx.waited > ctx.stale_after) {
    const auto total = ++stale_auth_count;
    note_stale_drops(total);
    spdlog::debug("sign-in of {} dropped: it waited {} ms in the queue (its minion gave up after {} s)", out.id,
                  std::chrono::duration_cast<std::chrono::milliseconds>(ctx.waited).count(),
                  std::chrono::duration_cast<std::chrono::seconds>(ctx.stale_after).count());
    out.result = "stale";
    out.reply = value::object();
    return out;
  }
  auto pub_v = wire::get_text(load, "pub");
  if (!pub_v) {
    out.result = "error";
    out.reply = "Some exception handling minion payload";
    return out;
  }
  // Salt: load["pub"].strip()
  std::string pub(*pub_v);
  {
    auto s = pub.find_first_not_of(" \t\r\n\f\v");
    auto e = pub.find_last_not_of(" \t\r\n\f\v");
    pub = s == std::string::npos ? std::string() : pub.substr(s, e - s + 1);
  }
  // The key is parsed before it can be stored or compared: a `pub` that is not a sane RSA
  // public key is refused here, so no sign-in writes anything but a key.
  if (auto why = pki::check_minion_pub(pub); !why.empty()) {
    const std::string id = out.id;
    return refuse_bad_load(std::move(out), ctx, id, why);
  }
  const std::string pub_clean = crypto::clean_key(pub);
  spdlog::info("Authentication request from {}", out.id);

  const auto& cfg = *ctx.cfg;
  if (cfg.max_minions > 0 && ctx.connected_ids) {
    auto ids = ctx.connected_ids();
    if (!(static_cast<int>(ids.size()) <= cfg.max_minions) &&
        std::find(ids.begin(), ids.end(), out.id) == ids.end()) {
      spdlog::info("Too many minions connected (max_minions={}). Rejecting connection from id {}",
                   cfg.max_minions, out.id);
      b.event(false, "full", pub);
      out.result = "full";
      out.reply = b.ret_reply("full");
      return out;
    }
  }

  const value* grains = wire::find(load, "autosign_grains");
  std::optional<pki::key_state> state = ctx.keys->state_of(out.id);
  std::optional<std::string> stored;
  if (state.has_value()) {
    stored = ctx.keys->read(*state, out.id);
    if (stored) {
      auto s = stored->find_first_not_of(" \t\r\n");
      auto e = stored->find_last_not_of(" \t\r\n");
      *stored = s == std::string::npos ? std::string() : stored->substr(s, e - s + 1);
    } else {
      state.reset();  // vanished between the two reads
    }
  }
  // Plain copies (GCC 12 warns about optional<enum> comparisons at -O2).
  const bool has_state = state.has_value();
  const pki::key_state st = has_state ? *state : pki::key_state::denied;
  auto is = [&](pki::key_state s) { return has_state && st == s; };
  auto deny = [&](const char* why) {
    spdlog::error("Authentication attempt from {} failed, the public {} did not match. This may be an "
                  "attempt to compromise the Salt cluster.", out.id, why);
    out.actions.push_back({key_action::kind::write, pki::key_state::denied, out.id, pub});
    b.event(false, "denied", pub);
    out.result = "denied";
    out.reply = b.ret_reply(false);
  };

  if (cfg.open_mode) {
    // accept anything
  } else if (is(pki::key_state::rejected)) {
    spdlog::info("Public key rejected for {}. Key is present in rejection key dir.", out.id);
    b.event(false, "reject", pub);
    out.result = "reject";
    out.reply = b.ret_reply(false);
    return out;
  } else if (is(pki::key_state::accepted)) {
    if (crypto::clean_key(*stored) != pub_clean) {
      deny("keys");
      return out;
    }
  } else if (!has_state) {
    if (check_signing_file(out.id, cfg.autoreject_file)) {
      spdlog::info("New public key for {} rejected via autoreject_file", out.id);
      out.actions.push_back({key_action::kind::write, pki::key_state::rejected, out.id, pub});
      b.event(false, "reject", pub);
      out.result = "reject";
      out.reply = b.ret_reply(false);
      return out;
    }
    if (!check_autosign(ctx, out.id, grains)) {
      if (ctx.pending_full) {
        if (auto n = ctx.pending_full()) {
          out.reply = b.ret_reply(true);  // "pending": a real minion keeps retrying
          if (b.limited) return out;
          if (auto k = pending_full_log.hit())
            spdlog::error("pending key directory full ({} keys, max_pending_keys); accept or delete keys: new key of "
                          "'{}' from {} not stored ({} such sign-in(s) in the last 10 s)",
                          *n, printable(out.id), ctx.peer, k);
          out.result = "pending_full";
          return out;
        }
      }
      spdlog::info("New public key for {} placed in pending", out.id);
      out.actions.push_back({key_action::kind::write, pki::key_state::pending, out.id, pub});
      b.event(true, "pend", pub);
      out.result = "pend";
      out.reply = b.ret_reply(true);
      return out;
    }
  } else if (is(pki::key_state::pending)) {
    if (check_signing_file(out.id, cfg.autoreject_file)) {
      // Salt keeps the pending key and flips its state to rejected.
      out.actions.push_back({key_action::kind::write, pki::key_state::rejected, out.id, *stored});
      out.actions.push_back({key_action::kind::remove, pki::key_state::pending, out.id, {}});
      spdlog::info("Pending public key for {} rejected via autoreject_file", out.id);
      b.event(false, "reject", pub);
      out.result = "reject";
      out.reply = b.ret_reply(false);
      return out;
    }
    if (!check_autosign(ctx, out.id, grains)) {
      if (crypto::clean_key(*stored) != pub_clean) {
        deny("key in pending");
        return out;
      }
      spdlog::info("Authentication failed from host {}, the key is in pending and needs to be accepted "
                   "with salt-key -a {}", out.id, out.id);
      b.event(true, "pend", pub);
      out.result = "pend";
      out.reply = b.ret_reply(true);
      return out;
    }
    if (crypto::clean_key(*stored) != pub_clean) {
      deny("keys in pending");
      return out;
    }
  }

  spdlog::info("Authentication accepted from {}", out.id);
  std::string key_pem = (is(pki::key_state::accepted) && stored) ? *stored : pub;
  if (cfg.open_mode) {
    if (pub.empty()) {
      spdlog::error("Public key is empty: {}", out.id);
      out.result = "error";
      out.reply = b.ret_reply(false);
      return out;
    }
    if (!is(pki::key_state::accepted) || !stored || *stored != pub) {
      key_pem = pub;
      out.actions.push_back({key_action::kind::write, pki::key_state::accepted, out.id, pub});
    }
  } else if (!is(pki::key_state::accepted)) {
    key_pem = pub;
    out.actions.push_back({key_action::kind::write, pki::key_state::accepted, out.id, pub});
  }
  if (is(pki::key_state::pending) || (cfg.open_mode && has_state && st != pki::key_state::accepted)) {
    out.actions.push_back({key_action::kind::remove, st, out.id, {}});
  }

  auto minion_pub = crypto::rsa_key::from_public_pem(key_pem);
  if (!minion_pub) {
    spdlog::error("Corrupt or missing public key \"{}\": {}", out.id, minion_pub.error().message());
    out.result = "error";
    out.reply = b.ret_reply(false);
    return out;
  }

  auto ealgo = ea_name ? crypto::parse_enc_algo(*ea_name) : std::optional{crypto::enc_algo::oaep_sha1};
  if (!ealgo) {
    spdlog::info("Minion {} tried to authenticate with unsupported encryption algorithm: {}", out.id,
                 std::string(*ea_name));
    out.result = "bad_enc_algo";
    out.reply = value{{"enc", "clear"}, {"load", value{{"ret", "bad enc algo"}}}};
    return out;
  }

  value ret = value::object();
  ret["enc"] = "pub";
  ret["pub_key"] = ctx.mkeys->pub_clean();
  ret["publish_port"] = cfg.publish_port;
  if (ctx.signer) {
    // Salt signs pub_key with the minion's sig_algo; an unsupported one cannot get here
    // signed (bad sig algo above), an unsigned v1 reply falls back to Salt's default.
    auto ps = ctx.signer->pub_sig(ctx.mkeys->pub_clean(), b.salgo.value_or(crypto::sig_algo::pkcs1v15_sha1));
    if (!ps) {
      spdlog::error("cannot sign master.pub for {}: {}", out.id, ps.error().message());
      out.result = "error";
      out.reply = "Some exception handling minion payload";
      return out;
    }
    ret["pub_sig"] = std::move(*ps);
  }
  if (const value* tok = wire::find(load, "token")) {
    auto tb = wire::as_bytes(*tok);
    auto mtoken = tb ? crypto::oaep_decrypt(ctx.mkeys->priv(), *tb, *ealgo)
                     : result<std::string>(crypto::make_error_code(crypto::errc::decrypt_failed));
    if (mtoken) {
      auto enc = crypto::oaep_encrypt(*minion_pub, *mtoken, *ealgo);
      if (enc) ret["token"] = wire::make_bin(*enc);
    } else {
      spdlog::warn("Token failed to decrypt from {}: {}", out.id, mtoken.error().message());
    }
  }
  const std::string& aes_str = ctx.aes->crypt.key_string();
  auto aes_enc = crypto::oaep_encrypt(*minion_pub, aes_str, *ealgo);
  std::string session;
  if (ctx.session_key) {
    auto s = ctx.session_key(out.id);
    if (!s) {
      spdlog::error("cannot create a session key for {}: {}", out.id, s.error().message());
      out.result = "error";
      out.reply = "Some exception handling minion payload";
      return out;
    }
    session = std::move(*s);
  }
  auto sess_enc = crypto::oaep_encrypt(*minion_pub, session, *ealgo);
  if (!aes_enc || !sess_enc) {
    spdlog::error("cannot encrypt the auth reply for {}", out.id);
    out.result = "error";
    out.reply = "Some exception handling minion payload";
    return out;
  }
  ret["aes"] = wire::make_bin(*aes_enc);
  ret["session"] = wire::make_bin(*sess_enc);
  if (ctx.version < 3) {
    spdlog::warn("Minion using legacy request server protocol, please upgrade {}", out.id);
  }
  ret["sig"] = wire::make_bin(ctx.aes->sig);
  b.event(true, "accept", pub);
  out.result = "accept";
  if (sign_messages) {
    ret["nonce"] = b.nonce;
    out.reply = b.signed_reply(std::move(ret));
  } else {
    out.reply = std::move(ret);
  }
  return out;
}

}  // namespace

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
