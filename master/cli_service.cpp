// sylvite::master CLI service: the commands of master/ipc_protocol.hpp. Each command
// except "ping" runs on its own short-lived thread (at most kMaxCliThreads at once):
// waits for returns can last minutes and must not hold a worker-pool thread that minion
// requests need. Return waiting follows Salt's LocalClient: wait `timeout`; then ask the
// missing-but-connected minions with saltutil.find_job (gather_job_timeout) and keep
// waiting another `timeout` while any reports the job still running.
// Thread-safety: handle_cli from any thread; shutdown() joins the CLI threads.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <set>
#include <thread>

#include "master/master.hpp"
#include "master/runners.hpp"
#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "master/master_sign.hpp"
#include "core/util/files.hpp"

namespace sylvite::master {

using wire::value;
using steady = std::chrono::steady_clock;

namespace {
constexpr std::size_t kMaxCliThreads = 64;
}

struct master_core::cli_state {
  std::mutex mu;
  struct worker {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<worker> threads;
  std::atomic<bool> stopping{false};
};

master_core::~master_core() { shutdown(); }

void master_core::shutdown() {
  if (!cli_) return;
  cli_->stopping = true;
  std::list<cli_state::worker> ts;
  {
    std::lock_guard lk(cli_->mu);
    ts.swap(cli_->threads);
  }
  for (auto& w : ts) {
    if (w.t.joinable()) w.t.join();
  }
}

void master_core::init_cli() { cli_ = std::make_shared<cli_state>(); }

bool master_core::spawn_cli(std::function<void()> fn) {
  if (!cli_) return false;
  std::lock_guard lk(cli_->mu);
  if (cli_->stopping) return false;
  for (auto it = cli_->threads.begin(); it != cli_->threads.end();) {
    if (it->done->load()) {
      if (it->t.joinable()) it->t.join();
      it = cli_->threads.erase(it);
    } else {
      ++it;
    }
  }
  if (cli_->threads.size() >= kMaxCliThreads) return false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  cli_->threads.push_back({std::thread([fn = std::move(fn), done] {
                             try {
                               fn();
                             } catch (const std::exception& e) {
                               spdlog::error("CLI command failed: {}", e.what());
                             }
                             done->store(true);
                           }),
                           done});
  return true;
}

namespace {

// Events for one wait, filled by hub handlers (any thread), drained by the CLI thread.
struct event_queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::string, value>> q;
  void push(const std::string& tag, const value& data) {
    {
      std::lock_guard lk(mu);
      if (q.size() > 100000) return;
      q.emplace_back(tag, data);
    }
    cv.notify_one();
  }
  // Wait until an event or deadline (max 250 ms so liveness is rechecked).
  std::deque<std::pair<std::string, value>> take(steady::time_point deadline) {
    std::unique_lock lk(mu);
    auto until = std::min(deadline, steady::now() + std::chrono::milliseconds(250));
    cv.wait_until(lk, until, [this] { return !q.empty(); });
    std::deque<std::pair<std::string, value>> out;
    out.swap(q);
    return out;
  }
};

std::string ret_id_of(const std::string& tag) {
  auto p = tag.rfind("/ret/");
  if (p == std::string::npos) return {};
  return tag.substr(p + 5);
}

value return_item(const std::string& id, const std::string& jid, const value& load) {
  value item = value::object();
  item["id"] = id;
  item["jid"] = jid;
  const value* r = wire::find(load, "return");
  item["return"] = r ? *r : value(nullptr);
  auto rc = wire::get_int(load, "retcode");
  item["retcode"] = rc.value_or(0);
  const value* s = wire::find(load, "success");
  item["success"] = s ? *s : value(true);
  if (auto o = wire::get_text(load, "out")) item["out"] = std::string(*o);
  return item;
}

publish_request parse_publish(const value& body) {
  publish_request req;
  if (const value* t = wire::find(body, "tgt")) {
    if (auto s = wire::as_text(*t)) req.tgt = std::string(*s);
    else if (t->is_array()) req.tgt = *t;
  }
  if (auto s = wire::get_text(body, "tgt_type")) req.tgt_type = std::string(*s);
  if (auto s = wire::get_text(body, "fun")) req.fun = std::string(*s);
  if (const value* a = wire::find(body, "arg"); a && a->is_array()) req.arg = *a;
  if (const value* k = wire::find(body, "kwarg"); k && k->is_object()) req.kwarg = *k;
  if (auto s = wire::get_text(body, "ret")) req.ret = std::string(*s);
  if (auto s = wire::get_text(body, "user")) req.user = std::string(*s);
  if (auto s = wire::get_text(body, "delimiter"); s && !s->empty()) req.delimiter = std::string(*s);
  if (auto s = wire::get_text(body, "jid")) req.jid = std::string(*s);
  if (const value* k = wire::find(body, "kwargs"); k && k->is_object()) req.kwargs = *k;
  if (const value* m = wire::find(body, "metadata")) req.kwargs["metadata"] = *m;
  return req;
}

}  // namespace

void master_core::handle_cli(const value& body, std::shared_ptr<cli_reply> out) {
  try {
    auto cmd_v = wire::get_text(body, "cmd");
    const std::string cmd = cmd_v ? std::string(*cmd_v) : std::string();
    if (cmd == "ping") {
      out->reply(value{{"ok", true}, {"id", cfg_.id}});
      return;
    }
    std::function<void()> fn;
    if (cmd == "publish") {
      fn = [this, body, out] { cli_publish(body, out); };
    } else if (cmd == "runner") {
      fn = [this, body, out] { cli_runner(body, out); };
    } else if (cmd == "key_event") {
      fn = [this, body, out] {
        auto act = wire::get_text(body, "act");
        std::vector<std::string> ids;
        if (const value* v = wire::find(body, "ids"); v && v->is_array()) {
          for (const auto& i : *v) {
            if (auto t = wire::as_text(i)) ids.emplace_back(*t);
          }
        }
        if (!act || (*act != "accept" && *act != "reject" && *act != "delete")) {
          out->reply(value{{"error", "key_event: act must be accept, reject or delete"}});
          return;
        }
        bool rotated = key_event(std::string(*act), ids);
        out->reply(value{{"ok", true}, {"rotated", rotated}});
      };
    } else if (cmd == "local_return") {
      fn = [this, body, out] {
        value load = body.is_object() ? body : value::object();
        load.erase("cmd");
        if (!wire::find(load, "jid")) load["jid"] = "req";
        auto id = wire::get_text(load, "id");
        if (!id || !pki::valid_id(*id) || !wire::find(load, "return")) {
          out->reply(value{{"error", "local_return needs a valid id and a return"}});
          return;
        }
        handle_return(load);
        auto jid = wire::get_text(load, "jid");
        out->reply(value{{"ok", true}, {"jid", jid ? std::string(*jid) : std::string()}});
      };
    } else {
      out->reply(value{{"error", "unknown command '" + cmd + "'"}});
      return;
    }
    if (!spawn_cli(std::move(fn))) out->reply(value{{"error", "master busy or stopping, try again"}});
  } catch (const std::exception& e) {
    out->reply(value{{"error", std::string("bad request: ") + e.what()}});
  }
}

void master_core::cli_publish(const value& body, std::shared_ptr<cli_reply> out) {
  publish_request req = parse_publish(body);
  const bool wait = wire::get_bool(body, "wait").value_or(false);
  int timeout = cfg_.timeout;
  if (auto t = wire::get_int(body, "timeout"); t && *t > 0) timeout = static_cast<int>(std::min<std::int64_t>(*t, 86400));
  if (req.jid.empty()) req.jid = new_jid();

  auto q = std::make_shared<event_queue>();
  std::uint64_t sub = 0;
  if (wait) sub = hub_.subscribe_jid(req.jid, [q](const std::string& tag, const value& d) { q->push(tag, d); });
  publish_result res = publish(req);
  if (!res.error.empty()) {
    if (sub) hub_.unsubscribe(sub);
    out->reply(value{{"error", res.error}});
    return;
  }
  value head = value::object();
  head["jid"] = res.jid;
  head["minions"] = res.minions;
  head["missing"] = res.missing;
  if (!wait) {
    out->reply(head);
    return;
  }
  out->push(head);

  std::set<std::string> expected(res.minions.begin(), res.minions.end());
  std::set<std::string> returned;
  enum class phase { wait, find } ph = phase::wait;
  auto deadline = steady::now() + std::chrono::seconds(timeout);
  std::string find_jid;
  std::uint64_t find_sub = 0;
  std::set<std::string> find_pending, running;

  auto all_returned = [&] {
    return std::all_of(expected.begin(), expected.end(), [&](const std::string& id) { return returned.count(id); });
  };
  while (!(cli_ && cli_->stopping) && out->alive()) {
    for (auto& [tag, data] : q->take(deadline)) {
      const std::string id = ret_id_of(tag);
      if (id.empty()) continue;
      auto jid = wire::get_text(data, "jid");
      if (jid && *jid == res.jid) {
        if (returned.insert(id).second) out->push(return_item(id, res.jid, data));
      } else if (jid && *jid == find_jid) {
        find_pending.erase(id);
        const value* r = wire::find(data, "return");
        if (r && r->is_object() && !r->empty()) running.insert(id);
      }
    }
    if (all_returned()) break;
    const auto now = steady::now();
    if (ph == phase::find) {
      for (auto it = running.begin(); it != running.end();) {
        if (returned.count(*it)) it = running.erase(it);
        else ++it;
      }
      if (find_pending.empty() || now >= deadline) {
        hub_.unsubscribe(find_sub);
        find_sub = 0;
        if (running.empty()) break;
        ph = phase::wait;
        deadline = now + std::chrono::seconds(timeout);
      }
      continue;
    }
    if (now < deadline) continue;
    // timeout: who is missing but still connected?
    std::vector<std::string> ask;
    for (const auto& id : expected) {
      if (!returned.count(id) && sink_ && sink_->is_connected(id)) ask.push_back(id);
    }
    if (ask.empty()) break;
    publish_request fj;
    fj.tgt = value(ask);
    fj.tgt_type = "list";
    fj.fun = "saltutil.find_job";
    fj.arg = value::array({res.jid});
    fj.user = req.user;
    fj.jid = new_jid();
    find_jid = fj.jid;
    find_sub = hub_.subscribe_jid(find_jid, [q](const std::string& tag, const value& d) { q->push(tag, d); });
    auto fr = publish(fj);
    if (!fr.error.empty()) {
      hub_.unsubscribe(find_sub);
      find_sub = 0;
      break;
    }
    find_pending = std::set<std::string>(fr.minions.begin(), fr.minions.end());
    running.clear();
    ph = phase::find;
    deadline = now + std::chrono::seconds(std::max(1, cfg_.gather_job_timeout));
  }
  if (find_sub) hub_.unsubscribe(find_sub);
  hub_.unsubscribe(sub);
  value no_return = value::array();
  for (const auto& id : expected) {
    if (!returned.count(id)) no_return.push_back(id);
  }
  out->reply(value{{"done", true}, {"jid", res.jid}, {"no_return", no_return}});
}

std::vector<std::string> master_core::ping_all(std::chrono::seconds timeout) {
  publish_request req;
  req.tgt = "*";
  req.fun = "test.ping";
  req.jid = new_jid();
  auto q = std::make_shared<event_queue>();
  auto sub = hub_.subscribe_jid(req.jid, [q](const std::string& tag, const value& d) { q->push(tag, d); });
  auto res = publish(req);
  std::set<std::string> got;
  if (res.error.empty()) {
    std::set<std::string> expected(res.minions.begin(), res.minions.end());
    const auto deadline = steady::now() + timeout;
    while (steady::now() < deadline && !(cli_ && cli_->stopping)) {
      for (auto& [tag, data] : q->take(deadline)) {
        auto id = ret_id_of(tag);
        if (!id.empty()) got.insert(id);
      }
      if (std::includes(got.begin(), got.end(), expected.begin(), expected.end())) break;
    }
  }
  hub_.unsubscribe(sub);
  return {got.begin(), got.end()};
}

std::pair<value, int> master_core::rotate_cluster_key() {
  // docs/security.md section 6: new cluster key pair on the share, every member told over
  // the bus (a local copy gets the key sealed to its peers/<id>.pub), the minions' pub_sig
  // re-made for the new key, then the cluster AES key rotated so every minion signs in
  // again and meets the new key.
  if (!clustered()) return {"This master is not in a cluster (cluster_id is not set)", 1};
  if (local_copy_)
    return {"cluster_pki_dir of this master is a local copy (made by a join): run salt-run cluster.rotate_key on a "
            "master whose cluster_pki_dir is the shared directory",
            1};
  const std::filesystem::path cdir = *cfg_.cluster_pki_dir;
  auto fp = [](const std::string& pem) {
    auto f = crypto::pem_fingerprint(pem, "sha256");
    return f ? *f : std::string("?");
  };
  // Sealed copies for every other member, made before anything changes (a peer key that
  // cannot be read is reported, not fatal: a member on the share reads the file).
  auto peers = cluster::list_peer_keys(cdir);
  std::unique_lock flk(aes_file_mu_);
  auto rot = cluster::rotate_cluster_keys(cdir, cfg_.keysize);
  if (!rot) {
    spdlog::error("salt-run cluster.rotate_key failed: {}", rot.error().message());
    return {"cannot rotate the cluster key pair in " + cdir.string() + ": " + rot.error().message() +
                " (the old key pair is still in use)",
            1};
  }
  flk.unlock();
  cluster::msg::cluster_key note;  // the new pub, the private key sealed to each member
  value told = value::array();
  for (const auto& [id, pub] : peers) {
    if (id == cfg_.id) continue;
    note.sealed.emplace_back(id, cluster::seal_to(pub, rot->priv.private_pem()));
    told.push_back(id);
  }
  const std::string new_pub = rot->pub_pem;
  use_cluster_key(rot->priv, " (salt-run cluster.rotate_key)");
  note.pub = new_pub;
  if (peers_) peers_->broadcast(note);
  value ret = value::object();
  ret["old_fingerprint"] = rot->old_pub_pem.empty() ? std::string("") : fp(rot->old_pub_pem);
  ret["new_fingerprint"] = fp(new_pub);
  ret["old_key_kept"] = (cdir / "cluster.pem.old").string();
  ret["members_told"] = told;
  int rc = 0;
  std::string why;
  if (signer_) {
    if (cfg_.master_use_pubkey_signature) {
      ret["master_pubkey_signature"] =
          "NOT re-made: master_use_pubkey_signature sends the pre-computed file " +
          (cfg_.pki_dir / pubkey_signature_name(cfg_)).string() +
          ", which signs the old key; re-create it for the new cluster.pub and restart the masters";
      rc = 1;
      why = "pre-computed master pubkey signature";
    } else {
      auto ps = signer_->pub_sig(mkeys()->pub_clean(), crypto::sig_algo::pkcs1v15_sha1);
      ret["master_pubkey_signature"] = ps ? std::string("re-made with ") + cfg_.master_sign_key_name + ".pem"
                                          : std::string("signing failed");
      if (!ps) rc = 1;
    }
  } else {
    ret["master_pubkey_signature"] =
        "off (master_sign_pubkey is not set): minions refuse the new key until their minion_master.pub is removed";
  }
  const bool aes = static_cast<bool>(rotate_aes("cluster.rotate_key"));
  ret["aes_rotated"] = aes;
  if (!aes) rc = 1;
  spdlog::warn("cluster key pair rotated by salt-run cluster.rotate_key: {} -> {}; {} member(s) told",
               ret["old_fingerprint"].get<std::string>(), ret["new_fingerprint"].get<std::string>(), told.size());
  return {ret, rc};
}

void master_core::cli_runner(const value& body, std::shared_ptr<cli_reply> out) {
  auto fun = wire::get_text(body, "fun");
  if (!fun) {
    out->reply(value{{"error", "runner: fun missing"}});
    return;
  }
  if (*fun == "cluster.peers") {
    // Peer links of this master (state, queue, last error): the operator's view of the bus.
    if (!clustered()) {
      out->reply(value{{"return", "This master is not in a cluster (cluster_id is not set)"}, {"retcode", 1}});
      return;
    }
    out->reply(value{{"return", cluster_status()}, {"retcode", 0}});
    return;
  }
  if (*fun == "cluster.rotate_key") {
    auto [ret, rc] = rotate_cluster_key();
    out->reply(value{{"return", ret}, {"retcode", rc}});
    return;
  }
  if (*fun == "cluster.remove") {
    // Remove a master from the cluster: tell the peers, delete peers/<id>.pub (the buses
    // close its links), rotate the cluster AES key so it cannot read new publishes.
    if (!clustered()) {
      out->reply(value{{"return", "This master is not in a cluster (cluster_id is not set)"}, {"retcode", 1}});
      return;
    }
    std::string id;
    if (const value* a = wire::find(body, "arg"); a && a->is_array() && !a->empty()) {
      if (auto t = wire::as_text((*a)[0])) id = std::string(*t);
    }
    if (const value* k = wire::find(body, "kwarg"); id.empty() && k && k->is_object()) {
      id = std::string(wire::get_text(*k, "id").value_or(""));
    }
    if (!cluster::valid_peer_id(id)) {
      out->reply(value{{"return", "usage: salt-run cluster.remove <master id> (a valid id)"}, {"retcode", 1}});
      return;
    }
    if (id == cfg_.id) {
      out->reply(value{{"return", "cannot remove this master itself; run it on another master"}, {"retcode", 1}});
      return;
    }
    namespace fs = std::filesystem;
    const fs::path p = *cfg_.cluster_pki_dir / "peers" / (id + ".pub");
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      out->reply(value{{"return", "no cluster peer '" + id + "' (" + p.string() + " does not exist)"}, {"retcode", 1}});
      return;
    }
    // In order: out of the load balancer (no new minion connections), tell the peers,
    // delete its key (the buses close its links), rotate the AES key.
    const std::string lb = lb_remove(id);
    if (peers_) peers_->broadcast(cluster::msg::leave{id});
    if (auto r = util::remove_file(p); !r) {
      out->reply(value{{"return", "cannot remove " + p.string() + ": " + r.error().message()}, {"retcode", 1}});
      return;
    }
    if (peers_) peers_->drop_peer(id);  // before the rotation: the new key must not reach it
    spdlog::warn("cluster peer {} removed by salt-run cluster.remove", id);
    const bool rotated = static_cast<bool>(rotate_aes("cluster.remove " + id));
    value ret = value::object();
    ret["removed"] = id;
    ret["aes_rotated"] = rotated;
    ret["load_balancer"] = lb.empty() ? std::string("removed") : "not changed: " + lb;
    out->reply(value{{"return", ret}, {"retcode", rotated ? 0 : 1}});
    return;
  }
  const value* a = wire::find(body, "arg");
  const value* k = wire::find(body, "kwarg");
  runner_context ctx;
  ctx.jobs = jobs_.get();
  ctx.keys = &keys_;
  ctx.connected_ids = [this] { return connected_ids(); };
  ctx.ping_all = [this](std::chrono::seconds t) { return ping_all(t); };
  ctx.timeout = cfg_.timeout;
  auto outcome = run_runner(ctx, std::string(*fun), a && a->is_array() ? *a : value::array(),
                            k && k->is_object() ? *k : value::object());
  out->reply(value{{"return", outcome.ret}, {"retcode", outcome.retcode}});
}

}  // namespace sylvite::master
