// sylvite::master request router (request_router.hpp): envelope processing and AES command dispatch, as Salt
// 3008.5 salt/channel/server.py ReqServerChannel.handle_message + salt/master.py
// AESFuncs. Order of checks (each refusal is logged once with the peer and counted):
//   1. body is a map with enc and load            else "bad load"
//   2. version >= minimum_auth_version             else "bad load" (also for _auth)
//   3. aes: v3 -> session key of envelope id; v<=2 -> publish AES key; failure "bad load"
//   4. load is a map                               else "payload and load must be a dict"
//      load.id a string without NUL                else "bad load: id ..."
//   5. aes: pop nonce (v>1); v3: ttl, envelope id == load id, valid_id, tok required and
//      verified with the accepted key; v<=2: tok verified if present; tok removed.
//   6. clear _auth -> auth; other clear commands -> {} (our CLIs use the Unix socket)
//   7. aes commands -> (value, mode); mode send = Crypticle(session|aes).dumps(v, nonce),
//      send_private = the pillar layout of _encrypt_private.
// Salt quirks kept: an unknown AES command answers {} (not false); _return and
// _minion_event answer None; a pillar request without grains answers {} (False -> {}).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <variant>
#include <filesystem>

#include "core/crypto/rsa.hpp"
#include "core/match/match.hpp"
#include "core/wire/msgpack.hpp"
#include "master/auth.hpp"
#include "master/job_cache.hpp"
#include "master/request_router.hpp"
#include "master/master_sign.hpp"

namespace sylvite::master {

using wire::value;

namespace {

int envelope_version(const value& body) {
  const value* v = wire::find(body, "version");
  if (!v) return 0;
  if (v->is_number_integer()) {
    auto i = v->get<std::int64_t>();
    if (i < 0) return 0;
    return i > 1000 ? 1000 : static_cast<int>(i);
  }
  if (v->is_number_unsigned()) {
    auto u = v->get<std::uint64_t>();
    return u > 1000 ? 1000 : static_cast<int>(u);
  }
  if (auto t = wire::as_text(*v)) {  // Salt: int(payload.get("version", 0))
    int n = 0;
    if (t->empty() || t->size() > 6) return 0;
    for (char c : *t) {
      if (c < '0' || c > '9') return 0;
      n = n * 10 + (c - '0');
    }
    return n;
  }
  return 0;
}

std::string short_id(const value& load) {
  if (auto id = wire::get_text(load, "id")) {
    std::string s(*id);
    if (s.size() > 80) s.resize(80);
    for (auto& c : s) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    return s;
  }
  return "unknown minion";
}

}  // namespace

value request_router::refuse(const std::string& peer, const std::string& reason, value reply) {
  counters_.refused++;
  spdlog::warn("refused request from {}: {}", peer, reason);
  return reply;
}

value request_router::handle(const value& body, const std::string& peer, bool* authenticated, std::string* minion_id) {
  auto o = open(body, peer);
  if (auto* reply = std::get_if<value>(&o)) return std::move(*reply);
  return run(std::get<opened_request>(o), peer, authenticated, minion_id);
}

bool request_router::small_request(const value& body) {
  const value* l = wire::find(body, "load");
  if (!l) return true;
  if (auto b = wire::as_bytes(*l)) return b->size() <= kSmallRequestBytes;
  return !l->is_object() || l->size() <= 64;  // clear: a sign-in or a ping is a small map
}

bool request_router::runs_inline(const opened_request& r) const {
  if (!r.aes) return false;  // a sign-in costs RSA private operations
  if (r.cmd == "_return") return jobs_.records_without_io(r.load);
  return r.cmd == "_minion_event";  // the event bus queues for its subscribers
}

std::variant<value, request_router::opened_request> request_router::open(const value& body, const std::string& peer) {
  counters_.requests++;
  bool needs_io = false;
  return open_impl(body, peer, false, needs_io);
}

std::optional<std::variant<value, request_router::opened_request>> request_router::open_in_memory(
    const value& body, const std::string& peer) {
  bool needs_io = false;
  auto r = open_impl(body, peer, true, needs_io);
  if (needs_io) return std::nullopt;
  counters_.requests++;
  return r;
}

std::variant<value, request_router::opened_request> request_router::open_impl(const value& body,
                                                                               const std::string& peer,
                                                                               bool memory_only, bool& needs_io) {
  // The session key and the token check, from memory only when memory_only.
  auto session_key = [&](const std::string& id) -> std::optional<std::shared_ptr<const crypto::crypticle>> {
    if (memory_only) return keys_.sessions().lookup_cached(id);
    return keys_.sessions().lookup(id);
  };
  // The token check: true when it verified; a refusal otherwise, or needs_io set.
  auto token_verified = [&](const std::string& id, std::string_view tok, value& refusal) {
    auto ok = memory_only ? keys_.accepted().verify_token_cached(id, tok)
                          : std::optional<bool>(keys_.accepted().verify_token(id, tok));
    if (!ok) needs_io = true;
    else if (!*ok) refusal = refuse(peer, "token of '" + id + "' did not verify");
    return ok && *ok;
  };
  try {
    if (!body.is_object() || !wire::find(body, "enc") || !wire::find(body, "load")) {
      return refuse(peer, "bad load received on socket (not a map with enc and load)");
    }
    const int version = envelope_version(body);
    const int min_version = cfg_.minimum_auth_version;
    if (min_version > 0 && version < min_version) {
      const value* l = wire::find(body, "load");
      return refuse(peer, "minion '" + (l && l->is_object() ? short_id(*l) : std::string("unknown minion")) +
                              "' uses protocol version " + std::to_string(version) + " (minimum required: " +
                              std::to_string(min_version) + ")");
    }
    auto enc_v = wire::get_text(body, "enc");
    const std::string enc = enc_v ? std::string(*enc_v) : std::string();
    if (enc != "aes" && enc != "clear") return refuse(peer, "unknown enc");

    opened_request r;
    r.version = version;
    r.aes = enc == "aes";
    value& load = r.load;
    if (r.aes) {
      auto cipher = wire::as_bytes(*wire::find(body, "load"));
      if (!cipher) return refuse(peer, "aes load is not bytes");
      if (version > 2) {
        auto env_id = wire::get_text(body, "id");
        if (!env_id || !pki::valid_id(*env_id)) return refuse(peer, "invalid envelope id");
        auto found = session_key(std::string(*env_id));
        if (!found) {
          needs_io = true;
          return value();
        }
        auto crypt = std::move(*found);
        if (!crypt) return refuse(peer, "no session key for '" + std::string(*env_id) + "' (re-auth needed)");
        r.session = crypt;
        auto l = crypt->loads(*cipher, {}, false);
        if (!l) {
          if (l.error() == crypto::make_error_code(crypto::errc::bad_format)) {
            load = value::object();  // Salt: no "pickle::" prefix -> {}
          } else {
            return refuse(peer, "cannot decrypt request of '" + std::string(*env_id) + "' with its session key: " +
                                    l.error().message());
          }
        } else {
          load = std::move(*l);
        }
      } else {
        auto aes = keys_.aes().current();
        auto l = aes->crypt.loads(*cipher, {}, false);
        if (!l) {
          if (l.error() == crypto::make_error_code(crypto::errc::bad_format)) {
            load = value::object();
          } else {
            return refuse(peer, "cannot decrypt v" + std::to_string(version) + " request with the AES key: " +
                                    l.error().message());
          }
        } else {
          load = std::move(*l);
        }
      }
      if (auto t = wire::get_text(body, "enc_algo")) r.enc_algo = std::string(*t);
      if (auto t = wire::get_text(body, "sig_algo")) r.sig_algo = std::string(*t);
    } else {
      load = *wire::find(body, "load");
    }

    if (!load.is_object()) return refuse(peer, "payload and load must be a dict", "payload and load must be a dict");
    std::string& id = r.id;
    if (const value* idv = wire::find(load, "id")) {
      auto t = wire::as_text(*idv);
      if (!t) return refuse(peer, "id is not a string", "bad load: id " + idv->dump() + " is not a string");
      if (t->find('\0') != std::string_view::npos)
        return refuse(peer, "id contains a null byte", "bad load: id contains a null byte");
      id = std::string(*t);
    }

    if (!r.aes) {
      if (auto c = wire::get_text(load, "cmd")) r.cmd = std::string(*c);
      return r;
    }
    if (version > 1) {
      if (auto it = load.find("nonce"); it != load.end()) {
        if (auto t = wire::as_text(*it)) r.nonce = std::string(*t);
        load.erase(it);
      }
    }
    std::optional<std::string> tok;
    if (auto it = load.find("tok"); it != load.end()) {
      if (auto t = wire::as_bytes(*it)) tok = std::string(*t);
      else tok = std::string();
      load.erase(it);
    }
    if (version > 2) {
      if (cfg_.request_server_ttl > 0) {
        auto ts = wire::get_int(load, "ts");
        if (!ts) return refuse(peer, "request of '" + id + "' has no ts");
        auto now = std::chrono::duration_cast<std::chrono::seconds>(sys_clock::now().time_since_epoch()).count();
        // Salt refuses only the old side; a ts from the future would extend the replay
        // window by the skew, so both sides are refused, with the skew in the log line.
        const std::int64_t age = now - *ts;
        if (age > cfg_.request_server_ttl || -age > cfg_.request_server_ttl)
          return refuse(peer, "request of '" + id + "' is outside request_server_ttl (" +
                                  std::to_string(cfg_.request_server_ttl) + " s): its ts is " +
                                  std::to_string(age >= 0 ? age : -age) + " s " + (age >= 0 ? "old" : "in the future") +
                                  " (replayed, or the minion's clock is off: check NTP on both hosts)");
      }
      auto env_id = wire::get_text(body, "id");
      if (!wire::find(load, "id") || !env_id || *env_id != id)
        return refuse(peer, "request id mismatch: load id '" + id + "'");
      if (!pki::valid_id(id)) return refuse(peer, "invalid minion id '" + id + "'");
      if (!tok) return refuse(peer, "request of '" + id + "' has no tok");
      if (value refusal; !token_verified(id, *tok, refusal)) return refusal;
    } else if (tok && wire::find(load, "id")) {
      if (!pki::valid_id(id)) return refuse(peer, "token of '" + id + "' did not verify");
      if (value refusal; !token_verified(id, *tok, refusal)) return refusal;
    }

    auto cmd_v = wire::get_text(load, "cmd");
    if (!cmd_v) {
      return refuse(peer, "aes request without cmd", "Some exception handling minion payload");
    }
    r.cmd = std::string(*cmd_v);
    return r;
  } catch (const std::exception& e) {
    return refuse(peer, std::string("exception handling payload: ") + e.what(),
                  "Some exception handling minion payload");
  }
}

value request_router::run(opened_request& r, const std::string& peer, bool* authenticated, std::string* minion_id) {
  try {
    value& load = r.load;
    const std::string& id = r.id;
    if (r.aes) {
      const std::string& cmd = r.cmd;
      spdlog::trace("AES payload received with command {} from {}", cmd, id);
      // Decrypted with a key only accepted minions hold (v3: and the token verified).
      if (authenticated && !load.empty()) *authenticated = true;
      if (minion_id && !load.empty()) *minion_id = id;
      value ret = dispatch_aes(cmd, load, peer);
      if (cmd == "_pillar" && wire::find(load, "id")) {
        return encrypt_private(ret, id, r.nonce, r.version > 1, r.enc_algo, r.sig_algo);
      }
      // mode "send"
      if (r.version > 2) {
        // The key that opened the request (the minion decrypts the reply with it).
        auto crypt = r.session ? r.session : keys_.sessions().lookup(id);
        if (!crypt) return refuse(peer, "session key of '" + id + "' vanished");
        return wire::make_bin(crypt->dumps(ret, r.nonce));
      }
      return wire::make_bin(keys_.aes().current()->crypt.dumps(ret, r.nonce));
    }

    // clear
    if (r.cmd == "_auth") {
      value reply = handle_auth(load, r.version, peer);
      if (reply.is_object() && wire::find(reply, "aes")) {  // accepted
        if (authenticated) *authenticated = true;
        if (minion_id)
          if (auto i = wire::get_text(load, "id")) *minion_id = std::string(*i);
      }
      return reply;
    }
    if (r.cmd == "ping") {
      // ClearFuncs.ping: the load comes back as is (send_clear). Minions use it as an
      // application-level heartbeat and Salt's status.ping_master as the failback probe:
      // trace level, never a line per ping at info.
      counters_.clear_pings++;
      spdlog::trace("clear ping from {}", peer);
      return load;
    }
    spdlog::info("clear command {} from {} is not served on the request port", r.cmd.empty() ? "?" : r.cmd, peer);
    return value::object();
  } catch (const std::exception& e) {
    return refuse(peer, std::string("exception handling payload: ") + e.what(),
                  "Some exception handling minion payload");
  }
}

value request_router::handle_auth(value& load, int version, const std::string& peer) {
  // Cluster: hand out the key every master uses right now (a peer may have rotated it a
  // moment ago; its notice can still be on the way). One stat of the shared file.
  if (cfg_.cluster_id) keys_.reload_cluster_aes(false);
  counters_.auth_requests++;
  auth_context ctx;
  ctx.cfg = &cfg_;
  ctx.keys = &keys_.store();
  auto mk = keys_.mkeys();  // one key pair for the whole reply (a rotation swaps it whole)
  ctx.mkeys = mk.get();
  ctx.signer = keys_.signer();
  ctx.aes = keys_.aes().current();
  ctx.version = version;
  ctx.session_key = [this](const std::string& id) -> result<std::string> {
    auto c = keys_.sessions().get_or_create(id);
    if (!c) return c.error();
    return (*c)->key_string();
  };
  ctx.accepted_key = [this](const std::string& id, std::string_view pem) -> std::optional<crypto::rsa_key> {
    auto e = keys_.accepted().get(id);
    if (!e || e->pem_clean != crypto::clean_key(pem)) return std::nullopt;
    return e->key;
  };
  ctx.connected_ids = [this] {
    auto* sink = links_.pub.load();
    return sink ? sink->connected_ids() : std::vector<std::string>{};
  };
  ctx.peer = peer;
  std::call_once(auth_limits_once_, [this] {
    if (cfg_.unaccepted_auth_rate > 0)
      unaccepted_limit_ = std::make_shared<source_limiter>(cfg_.unaccepted_auth_rate, cfg_.unaccepted_auth_burst);
    if (cfg_.max_pending_keys > 0)
      pending_count_ = std::make_shared<pending_counter>(keys_.store().dir() / std::string(pki::dir_name(pki::key_state::pending)));
  });
  if (unaccepted_limit_) ctx.admit_unaccepted = [this, &peer] { return unaccepted_limit_->take(peer); };
  if (pending_count_) {
    ctx.pending_full = [this]() -> std::optional<std::size_t> {
      const auto n = pending_count_->count();
      if (n >= static_cast<std::size_t>(cfg_.max_pending_keys)) return n;
      return std::nullopt;
    };
  }
  auto out = authenticate(load, ctx);
  if (!out.actions.empty()) {
    const bool applied = apply_key_actions(keys_.store(), out.actions);
    if (!out.id.empty()) keys_.accepted().invalidate(out.id);
    if (applied && keys_.local_copy()) {  // an auto-accept or a new pending key on a local copy: the share learns of it
      auto w = std::find_if(out.actions.begin(), out.actions.end(), [](const key_action& a) {
        return a.what == key_action::kind::write &&
               (a.state == pki::key_state::accepted || a.state == pki::key_state::pending);
      });
      if (w != out.actions.end()) keys_.key_written_here(w->state, w->id, w->pem);
    }
    if (pending_count_ && out.result == "pend" && !out.actions.empty() &&
        out.actions.front().state == pki::key_state::pending)
      pending_count_->added();
  }
  for (auto& ev : out.events) events_.fire(ev.tag, ev.data);
  if (out.result == "accept") {
    counters_.auth_accepted++;
  } else if (out.result != "pend" && out.result != "stale") {  // stale: counted, logged at debug
    counters_.refused++;
    // bad_load, rate_limited, pending_full: logged once per interval by authenticate() (a
    // sender can repeat them at will); the others are under unaccepted_auth_rate.
    if (out.result != "bad_load" && out.result != "rate_limited" && out.result != "pending_full")
      spdlog::warn("auth of '{}' from {}: {}", out.id, peer, out.result);
  }
  // private ops: the reply signature (+ token decrypt when present)
  if (version > 1 && out.reply.is_object() && wire::find(out.reply, "sig")) counters_.rsa_private_ops++;
  if (wire::find(load, "token") && out.result == "accept") counters_.rsa_private_ops++;
  return out.reply;
}

value request_router::encrypt_private(const value& ret_in, const std::string& id, const std::string& nonce,
                                      bool sign_messages, const std::optional<std::string>& ea_name,
                                      const std::optional<std::string>& sa_name) {
  auto key = crypto::crypticle::generate_key_string();
  auto pcrypt = crypto::crypticle::from_key_string(key);
  auto pub = keys_.accepted().get(id);
  if (!pub || !pcrypt) {
    spdlog::error("No pub key found for target {}, its pub key was likely deleted mid-request.", id);
    return wire::make_bin(keys_.aes().current()->crypt.dumps(value::object()));
  }
  auto ealgo = ea_name ? crypto::parse_enc_algo(*ea_name) : std::optional{crypto::enc_algo::oaep_sha1};
  auto salgo = sa_name ? crypto::parse_sig_algo(*sa_name) : std::optional{crypto::sig_algo::pkcs1v15_sha1};
  if (!ealgo || !salgo) return refuse("minion " + id, "unsupported enc/sig algo in pillar request",
                                      "Some exception handling minion payload");
  auto ekey = crypto::oaep_encrypt(pub->key, key, *ealgo);
  if (!ekey) return "Some exception handling minion payload";
  value ret = ret_in.is_boolean() && !ret_in.get<bool>() ? value::object() : ret_in;
  value pret = value::object();
  pret["key"] = wire::make_bin(*ekey);
  if (sign_messages) {
    if (nonce.empty()) return value{{"error", "Nonce not included in request"}};
    value tosign_v = value::object();
    tosign_v["key"] = wire::make_bin(*ekey);
    tosign_v["pillar"] = std::move(ret);
    tosign_v["nonce"] = nonce;
    std::string tosign = wire::pack_payload(tosign_v);
    auto sig = crypto::sign(keys_.mkeys()->priv(), tosign, *salgo);
    counters_.rsa_private_ops++;
    if (!sig) return "Some exception handling minion payload";
    value signed_msg = value::object();
    signed_msg["data"] = wire::make_bin(tosign);
    signed_msg["sig"] = wire::make_bin(*sig);
    pret["pillar"] = wire::make_bin(pcrypt->dumps(signed_msg));
  } else {
    pret["pillar"] = wire::make_bin(pcrypt->dumps(ret));
  }
  return pret;
}

value request_router::handle_pillar(const value& load) {
  auto id_v = wire::get_text(load, "id");
  const value* grains_v = wire::find(load, "grains");
  if (!id_v || !grains_v) return false;
  const std::string id(*id_v);
  if (!pki::valid_id(id)) return false;
  value grains = grains_v->is_object() ? *grains_v : value::object();
  grains["id"] = id;
  // Salt's AESFuncs._pillar: saltenv (or env), pillarenv, pillar_override,
  // extra_minion_data, clean_cache.
  pillar_request req;
  req.minion_id = id;
  req.grains = grains;
  if (const value* s = wire::find(load, "saltenv")) req.saltenv = *s;
  else if (const value* e = wire::find(load, "env")) req.saltenv = *e;
  if (const value* p = wire::find(load, "pillarenv")) req.pillarenv = *p;
  if (const value* o = wire::find(load, "pillar_override")) req.pillar_override = *o;
  if (const value* x = wire::find(load, "extra_minion_data")) req.extra_minion_data = *x;
  if (const value* c = wire::find(load, "clean_cache"); c && c->is_boolean()) req.clean_cache = c->get<bool>();
  value pillar = pillar_.compile(req);
  if (cfg_.minion_data_cache) {
    mdata_.store(id, grains, pillar);
    // Salt's AESFuncs._pillar: minion/refresh/<id> with minion_data_cache_events: True.
    if (const value* e = wire::find(cfg_.raw, "minion_data_cache_events"); e && e->is_boolean() && e->get<bool>())
      events_.fire("minion/refresh/" + id, value{{"Minion data cache refresh", id}});
  }
  return pillar;
}

// salt.daemons.masterapi.MINION_EVENT_BLACKLIST (3008.5), fnmatch semantics.
bool valid_minion_tag(std::string_view tag) {
  static constexpr std::string_view blacklist[] = {
      "salt/job/*/publish", "salt/job/*/new", "salt/job/*/return", "salt/key",       "salt/cloud/*",
      "salt/run/*",         "salt/cluster/*", "salt/wheel/*/new",  "salt/wheel/*/return"};
  for (auto b : blacklist) {
    if (match::glob_match(b, tag)) return false;
  }
  return true;
}

request_router::request_router(const config::master_config& cfg, master_links& links, master_counters& counters,
                               event_hub& events, key_service& keys, job_service& jobs, minion_data_cache& mdata,
                               fileserver& files, pillar_compiler& pillar, mine_store& mine)
    : cfg_(cfg),
      links_(links),
      counters_(counters),
      events_(events),
      keys_(keys),
      jobs_(jobs),
      mdata_(mdata),
      files_(files),
      pillar_(pillar),
      mine_(mine) {
  commands_ = {
      {"_return", [this](value& load, const std::string&) -> value {
         jobs_.record_return(load);
         return nullptr;  // Salt's None
       }},
      {"_pillar", [this](value& load, const std::string&) { return handle_pillar(load); }},
      {"_minion_event", [this](value& load, const std::string&) { return handle_minion_event(load); }},
      // Mine (master/mine.hpp): kept in cachedir/mine/<id>.p, shared by a cluster.
      {"_mine", [this](value& load, const std::string&) { return mine_.handle_mine(load); }},
      {"_mine_get", [this](value& load, const std::string&) { return mine_.handle_get(load); }},
      {"_mine_delete", [this](value& load, const std::string&) { return mine_.handle_delete(load); }},
      {"_mine_flush", [this](value& load, const std::string&) { return mine_.handle_flush(load); }},
      // 3008.5 minions register their "resources" at start; we keep no resource index.
      {"_register_resources", [](value& load, const std::string&) -> value {
         return wire::find(load, "id") && wire::find(load, "resources") ? value(true) : value::object();
       }},
      {"_master_opts", [this](value& load, const std::string&) { return master_opts_reply(cfg_, load); }},
      {"_master_tops", [](value&, const std::string&) -> value { return value::object(); }},
      {"_ext_nodes", [](value&, const std::string&) -> value { return value::object(); }},
  };
  // Commands Salt serves that sylvite does not: answered False (logged).
  for (const char* c : {"_file_recv", "revoke_auth", "minion_pub", "minion_publish", "minion_runner", "pub_ret",
                        "_syndic_return", "verify_minion"}) {
    commands_.emplace(c, [c](value&, const std::string& peer) -> value {
      spdlog::info("AES command {} from {} is not supported", c, peer);
      return false;
    });
  }
}

value request_router::handle_minion_event(const value& load) {
  // Salt's AESFuncs._minion_event -> masterapi._minion_event (3008.5):
  //   {"tag", "data"} form: the whole load (id, tag, data, cmd, ts...: tok and nonce are
  //     already gone) is the event's data, under that tag;
  //   {"events": [{tag, data}, ...]} form: each event's "data" (the event itself when it
  //     has none) under its tag.
  // Neither form: nothing fired; AESFuncs answers None all the same (no id: {}).
  auto id_v = wire::get_text(load, "id");
  if (!id_v) return value::object();
  const value* evs = wire::find(load, "events");
  if (!evs && (!wire::find(load, "tag") || !wire::find(load, "data"))) return nullptr;
  // A minion may not fire the master's own tags (job publishes, keys, runners, the
  // cluster): Salt's MINION_EVENT_BLACKLIST (CVE-2025-22239 class). Salt filters only
  // the "events" form; both forms are filtered here.
  auto fire = [&](std::string_view tag, const value& data) {
    if (!valid_minion_tag(tag)) {
      if (auto n = minion_tag_log_.hit()) {
        spdlog::warn("filtering blacklisted event tag '{}' from minion '{}' ({} such event(s) in the last 10 s)", tag,
                     *id_v, n);
      }
      return;
    }
    events_.fire(std::string(tag), data);
  };
  if (evs) {
    if (!evs->is_array()) return nullptr;
    for (const auto& ev : *evs) {
      auto tag = wire::get_text(ev, "tag");
      if (!tag) continue;
      const value* d = wire::find(ev, "data");
      fire(*tag, d ? *d : ev);
    }
  } else if (auto tag = wire::get_text(load, "tag")) {
    value whole = load;  // the whole load, as Salt (tok, if any, never reaches the bus)
    whole.erase("tok");
    fire(*tag, whole);
  }
  return nullptr;
}

value request_router::dispatch_aes(const std::string& cmd, value& load, const std::string& peer) {
  if (cmd.rfind("__", 0) == 0) return value::object();
  if (auto it = commands_.find(cmd); it != commands_.end()) return it->second(load, peer);
  if (fileserver::handles(cmd)) return files_.handle(cmd, load);
  spdlog::warn("Requested method not exposed: {} (from {})", cmd, peer);
  return value::object();
}

}  // namespace sylvite::master
