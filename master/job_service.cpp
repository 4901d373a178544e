// sylvite::master job service (job_service.hpp): jobs from the CLI to the publish port, as Salt 3008.5
// ClearFuncs.publish/_prep_pub + PubServerChannel.wrap_payload:
//   load (key order fun, arg, tgt, jid, ret, delimiter?, tgt_type, kwargs options, user)
//   + serial -> Crypticle(AES).dumps -> {"enc": "aes", "load", "sig_algo"?, "sig"?}
//   -> salt_payload bytes = the frame body (bin).
// Topic filtering: glob/pcre/list go only to the identified connections of the matched
// ids; every other target type is broadcast (minions filter themselves).
// The serial is assigned, the payload encrypted and handed to the publish server under
// one mutex, so the order minions receive publishes is the serial order (a minion drops
// a publish whose serial is not greater than the last one it saw).
// Serials are the master's clock in microseconds (core/util/pub_serial.hpp), in cluster
// mode too (Salt 3008 sends none there, so a captured publish replays): a sylvite minion
// refuses a publish dated outside its publish_replay_window, and a relayed publish is
// re-wrapped when its serial would go backwards on this master's connections
// (relay_frame), so real Salt minions, which only compare serials, drop nothing.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <set>

#include "core/match/match.hpp"
#include "core/util/pub_serial.hpp"
#include "core/wire/frame.hpp"
#include "core/wire/msgpack.hpp"
#include "master/job_service.hpp"
#include "master/job_cache.hpp"

namespace sylvite::master {

using wire::value;

std::string wrap_publish_payload(const value& load, const crypto::crypticle& aes, const crypto::rsa_key* sign_key,
                                 std::string_view sig_algo_name) {
  value payload = value::object();
  payload["enc"] = "aes";
  std::string cipher = aes.dumps(load);
  if (sign_key) {
    auto algo = crypto::parse_sig_algo(sig_algo_name);
    if (!algo) algo = crypto::sig_algo::pkcs1v15_sha1;
    auto sig = crypto::sign(*sign_key, cipher, *algo);
    payload["load"] = wire::make_bin(cipher);
    if (sig) {
      payload["sig_algo"] = std::string(crypto::to_string(*algo));
      payload["sig"] = wire::make_bin(*sig);
    } else {
      spdlog::error("cannot sign a publish: {}", sig.error().message());
    }
  } else {
    payload["load"] = wire::make_bin(cipher);
  }
  return wire::pack_payload(payload);
}

value make_publish_load(const publish_request& req, const std::string& jid) {
  value arg = req.arg.is_array() ? req.arg : value::array();
  if (req.kwarg.is_object() && !req.kwarg.empty()) {
    value kw = value::object();
    kw["__kwarg__"] = true;
    for (auto it = req.kwarg.begin(); it != req.kwarg.end(); ++it) kw[it.key()] = it.value();
    arg.push_back(std::move(kw));
  }
  value load = value::object();
  load["fun"] = req.fun;
  load["arg"] = std::move(arg);
  load["tgt"] = req.tgt;
  load["jid"] = jid;
  load["ret"] = req.ret;
  if (!req.delimiter.empty() && req.delimiter != ":") load["delimiter"] = req.delimiter;
  load["tgt_type"] = req.tgt_type;
  if (req.kwargs.is_object()) {
    for (const char* k : {"ret_config", "metadata", "module_executors", "executor_opts", "ret_kwargs"}) {
      if (auto it = req.kwargs.find(k); it != req.kwargs.end()) load[k] = *it;
    }
    if (auto b = wire::get_bool(req.kwargs, "start_event"); b && *b) load["start_event"] = true;
  }
  load["user"] = req.user;
  return load;
}

job_service::job_service(const config::master_config& cfg, master_links& links, master_counters& counters,
                         event_hub& events, key_service& keys, minion_data_cache& mdata,
                         std::unique_ptr<job_store> store)
    : cfg_(cfg),
      links_(links),
      counters_(counters),
      events_(events),
      keys_(keys),
      mdata_(mdata),
      store_(std::move(store)),
      last_clean_(sys_clock::now()) {}

std::vector<std::string> job_service::check_minions(const value& tgt, const std::string& tgt_type,
                                                    const std::string& delimiter) {
  const auto accepted = keys_.store().list(pki::key_state::accepted);
  std::vector<std::shared_ptr<const minion_data_cache::entry>> keep;  // facts point into these
  auto facts_of = [&](const std::string& id) {
    match::minion_facts f;
    f.id = id;
    if (auto d = mdata_.get(id)) {
      keep.push_back(d);
      f.grains = &d->grains;
      f.pillar = &d->pillar;
    }
    return f;
  };
  const char delim = delimiter.empty() ? ':' : delimiter[0];
  auto r = match::check_minions(tgt, tgt_type, accepted, facts_of, true, delim, &cfg_.nodegroups);
  return r.minions;
}

std::string job_service::wrap_publish(value load) {
  auto aes = keys_.aes().current();
  pub_serial_ = util::next_time_serial(pub_serial_, util::now_micros());
  load["serial"] = pub_serial_;
  auto mk = cfg_.sign_pub_messages ? keys_.mkeys() : nullptr;
  return wrap_publish_payload(load, aes->crypt, mk ? &mk->priv() : nullptr,
                              cfg_.publish_signing_algorithm);
}

std::shared_ptr<const std::string> job_service::relay_frame(const std::string& frame) {
  auto as_is = [&](const char* why) {
    // Not expected between sylvite masters of one cluster (same AES key, same packing).
    spdlog::warn("relayed cluster publish passed on unchanged: {}", why);
    return std::make_shared<const std::string>(frame);
  };
  auto f = wire::unpack(frame);
  const value* b = f && f->is_object() ? wire::find(*f, "body") : nullptr;
  auto body = b ? wire::as_bytes(*b) : std::nullopt;
  if (!body) return as_is("not a publish frame");
  auto payload = wire::unpack(*body);
  if (!payload || !payload->is_object()) return as_is("body is not a payload map");
  auto cipher = wire::get_text(*payload, "load");
  if (!cipher) return as_is("payload has no load");
  auto aes = keys_.aes().current();
  std::int64_t serial = INT64_MIN;
  auto load = aes->crypt.loads(*cipher, {}, /*check_serial=*/false, &serial);
  const bool current_key = static_cast<bool>(load);
  if (!load) {
    // Rotated a moment ago: the peer may still have used the key before.
    if (auto prev = keys_.aes().previous(std::chrono::seconds(60))) {
      serial = INT64_MIN;
      load = prev->crypt.loads(*cipher, {}, false, &serial);
    }
  }
  if (!load || !load->is_object()) return as_is("cannot decrypt its load with the cluster AES key");
  const bool signed_ok = payload->contains("sig") == cfg_.sign_pub_messages;
  if (serial > pub_serial_ && signed_ok && current_key) {
    pub_serial_ = serial;
    return std::make_shared<const std::string>(frame);
  }
  std::string rewrapped = wrap_publish(std::move(*load));
  if (cfg_.sign_pub_messages) counters_.rsa_private_ops++;
  return std::make_shared<const std::string>(wire::pack_frame(value::object(), wire::make_bin(rewrapped)));
}

// A minion that reconnects after a master restart sends its hello encrypted with the
// old AES key (3008.5 re-uses its AsyncAuth and re-auths only later), so its publish
// connection stays unidentified: Salt's master then never sends it glob/list jobs.
// We broadcast instead when a target has no identified connection while unidentified
// connections exist; the minion filters itself (as for grain targets), and the first
// publish it cannot decrypt makes it re-authenticate.
bool job_service::topic_fallback(pub_sink& sink, const std::vector<std::string>& targets) const {
  if (!sink.identifies_connections()) return false;  // ZeroMQ: topics (or a broadcast) anyway
  bool missing = false;
  for (const auto& id : targets) {
    if (!sink.is_connected(id)) {
      missing = true;
      break;
    }
  }
  if (!missing) return false;
  return sink.connection_count() > sink.connected_ids().size();
}

publish_result job_service::publish(const publish_request& req) {
  publish_result res;
  if (req.fun.empty()) {
    res.error = "no function given";
    return res;
  }
  res.minions = check_minions(req.tgt, req.tgt_type, req.delimiter);
  if (req.tgt_type == "list") {
    std::set<std::string> have(res.minions.begin(), res.minions.end());
    std::vector<std::string> listed;
    if (req.tgt.is_array()) {
      for (const auto& v : req.tgt) {
        if (auto t = wire::as_text(v)) listed.emplace_back(*t);
      }
    } else if (auto t = wire::as_text(req.tgt)) {
      std::string s(*t);
      std::size_t pos = 0;
      while (pos <= s.size()) {
        auto c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        if (c > pos) listed.push_back(s.substr(pos, c - pos));
        pos = c + 1;
      }
    }
    for (auto& l : listed) {
      if (!have.count(l)) res.missing.push_back(l);
    }
  }
  if (res.minions.empty()) {
    std::string t = req.tgt.is_string() ? req.tgt.get<std::string>() : req.tgt.dump();
    res.error = "No minions matched the target. No command was sent, no jid was assigned.";
    spdlog::info("publish of {} to {} ({}): no minion matched", req.fun, t, req.tgt_type);
    return res;
  }
  res.jid = req.jid.empty() ? new_jid() : req.jid;

  // Job cache: the clear load as Salt saves it.
  value saved = value::object();
  saved["cmd"] = "publish";
  saved["tgt"] = req.tgt;
  saved["fun"] = req.fun;
  value load = make_publish_load(req, res.jid);
  saved["arg"] = load["arg"];
  saved["tgt_type"] = req.tgt_type;
  saved["ret"] = req.ret;
  saved["jid"] = res.jid;
  saved["user"] = req.user;
  value kw = req.kwargs.is_object() ? req.kwargs : value::object();
  kw["delimiter"] = req.delimiter.empty() ? std::string(":") : req.delimiter;
  saved["kwargs"] = kw;
  if (cfg_.job_cache) {
    auto r = store_->save_load(res.jid, saved, res.minions);
    if (!r) spdlog::error("cannot save the load of job {}: {}", res.jid, r.error().message());
  }
  value ev = value::object();
  ev["jid"] = res.jid;
  ev["tgt_type"] = req.tgt_type;
  ev["tgt"] = req.tgt;
  ev["user"] = req.user;
  ev["fun"] = req.fun;
  ev["arg"] = load["arg"];
  ev["minions"] = res.minions;
  ev["missing"] = res.missing;
  events_.fire("salt/job/" + res.jid + "/new", ev, res.jid);
  // Salt's ClearFuncs.publish fires the publish load (its _prep_pub's) as
  // salt/job/<jid>/publish before sending it. Not keyed by jid (no CLI wait needs it); in a
  // cluster the peers get it as a peer event (stored and reacted to only here) and send
  // the job through the cluster's own publish message, never through this event.
  events_.fire("salt/job/" + res.jid + "/publish", load);

  const bool topic = req.tgt_type == "glob" || req.tgt_type == "pcre" || req.tgt_type == "list";
  {
    auto lk = keys_.publish_lock();
    std::string body = wrap_publish(load);
    auto frame = std::make_shared<const std::string>(wire::pack_frame(value::object(), wire::make_bin(body)));
    if (auto* sink = links_.pub.load()) {
      if (topic && !topic_fallback(*sink, res.minions)) sink->publish_to(frame, res.minions);
      else sink->publish_all(frame);
    }
    if (clustered()) {
      // Every peer sends the same frame (cluster AES key, cluster key signature) to the
      // minions connected to it; the publisher owns the job's returns.
      note_owner(res.jid, cfg_.id);
      if (auto* peers = links_.peers.load()) {
        peers->broadcast(cluster::msg::publish{
            res.jid, *frame, topic ? std::optional<std::vector<std::string>>(res.minions) : std::nullopt});
      }
    }
  }
  counters_.publishes++;
  if (cfg_.sign_pub_messages) counters_.rsa_private_ops++;
  spdlog::info("User {} Published command {} with jid {}", req.user, req.fun, res.jid);
  return res;
}

bool job_service::records_without_io(const value& load) const {
  if (clustered()) return false;
  auto jid = wire::get_text(load, "jid");
  if (!jid || *jid == "req") return false;
  return !cfg_.job_cache || store_->records_without_io(std::string(*jid));
}

void job_service::record_return(value& load) {
  counters_.returns++;
  if (!wire::find(load, "return") || !wire::find(load, "jid") || !wire::find(load, "id")) return;
  auto id_v = wire::get_text(load, "id");
  auto jid_v = wire::get_text(load, "jid");
  if (!id_v || !jid_v || !pki::valid_id(*id_v)) return;
  const std::string id(*id_v);
  std::string jid(*jid_v);
  if (jid.empty() || jid.size() > 128) return;
  if (jid == "req") {
    // salt-call / scheduler: allocate a jid and save a synthetic load (salt/utils/job.py).
    if (!wire::find(load, "arg")) {
      const value* fa = wire::find(load, "fun_args");
      load["arg"] = fa ? *fa : value::array();
    }
    load["tgt_type"] = "glob";
    load["tgt"] = id;
    jid = new_jid();
    load["jid"] = jid;
    if (cfg_.job_cache) {
      auto r = store_->save_load(jid, load, {id});
      if (!r) spdlog::error("cannot save the load of job {}: {}", jid, r.error().message());
    }
  }
  spdlog::info("Got return from {} for job {}", id, jid);
  if (cfg_.job_cache) {
    auto r = store_->record_return(jid, id, load);
    if (!r) {
      spdlog::error("cannot store the return of {} for job {}: {}", id, jid, r.error().message());
    } else if (*r == return_record::duplicate) {
      spdlog::info("duplicate return from {} for job {} ignored", id, jid);
      return;
    }
  }
  events_.fire("salt/job/" + jid + "/ret/" + id, load, jid);
  auto* peers = links_.peers.load();
  if (clustered() && peers) {
    // Route the return to the master that published the job (its CLI waits on its own
    // event hub); the shared job cache already holds it for lookup_jid everywhere.
    auto owner = owner_of(jid);
    if (!owner || *owner != cfg_.id) {
      const cluster::msg::ret m{jid, id, load};
      if (!owner || !peers->send(*owner, m)) peers->broadcast(m);
    }
  }
}

void job_service::peer_publish(const std::string& from, const std::string& jid, const std::string& frame,
                               const std::optional<std::vector<std::string>>& targets) {
  note_owner(jid, from);
  auto* sink = links_.pub.load();
  if (!sink) return;
  // Serial order == send order on this master's connections (relay_frame).
  auto lk = keys_.publish_lock();
  auto bytes = relay_frame(frame);
  if (targets) {
    if (topic_fallback(*sink, *targets)) sink->publish_all(bytes);
    else sink->publish_to(bytes, *targets);
  } else {
    sink->publish_all(bytes);
  }
}

void job_service::peer_return(const std::string& jid, const std::string& id, const value& load) {
  // The job's waits only: the event itself reaches this bus once, as the peer's "event".
  events_.fire_jid_only("salt/job/" + jid + "/ret/" + id, load, jid);
}

void job_service::note_owner(const std::string& jid, const std::string& master) {
  std::lock_guard lk(owners_mu_);
  if (jid_owner_.emplace(jid, master).second) jid_order_.push_back(jid);
  while (jid_order_.size() > 100000) {
    jid_owner_.erase(jid_order_.front());
    jid_order_.pop_front();
  }
}

std::optional<std::string> job_service::owner_of(const std::string& jid) {
  std::lock_guard lk(owners_mu_);
  auto it = jid_owner_.find(jid);
  if (it == jid_owner_.end()) return std::nullopt;
  return it->second;
}

void job_service::maintenance(sys_clock::time_point now) {
  if (cfg_.keep_jobs_seconds <= 0) return;
  {
    std::lock_guard lk(clean_mu_);
    if (now - last_clean_ < std::chrono::hours(1)) return;
    last_clean_ = now;
  }
  auto n = store_->clean_old(std::chrono::seconds(cfg_.keep_jobs_seconds));
  if (n) spdlog::info("removed {} old job(s) from the job cache", n);
}

}  // namespace sylvite::master
