// sylvite::master CLI service (cli_service.hpp): the commands of master/ipc_protocol.hpp, decoded there
// (a refused request is logged and answered {"error"}). "ping" is answered at once; the
// other commands run on a short-lived thread (at most kMaxCliThreads at once): a runner
// can last minutes and must not hold a worker-pool thread that minion requests need.
// A waiting publish does not keep its thread: after the publish its wait (Salt's
// LocalClient logic, the state machine of master/cli_wait.hpp) is handed to the one
// wait driver thread, which drives every waiting CLI call: return events from the hub,
// its timers, saltutil.find_job rounds, the CLI connection's liveness.
// Thread-safety: handle_cli from any thread; shutdown() finishes the waits (each CLI gets
// its {"done"} reply) and joins the threads.
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <set>
#include <thread>

#include "master/cli_service.hpp"
#include "core/match/match.hpp"
#include "master/job_cache.hpp"
#include "master/runners.hpp"
#include "master/cli_wait.hpp"
#include "master/ipc_protocol.hpp"
#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "master/master_sign.hpp"
#include "core/util/files.hpp"

namespace sylvite::master {

using wire::value;
using steady = std::chrono::steady_clock;

namespace {
constexpr std::size_t kMaxCliThreads = 64;
constexpr std::size_t kMaxWaitInbox = 100000;  // events queued for one wait (then dropped)
constexpr std::size_t kMaxWaits = 4096;        // waiting salt calls at once (then "busy")
constexpr auto kLivenessPoll = std::chrono::milliseconds(250);

wait_time wait_now() { return std::chrono::time_point_cast<wait_ms>(steady::now()); }

std::string ret_id_of(const std::string& tag) {
  auto p = tag.rfind("/ret/");
  if (p == std::string::npos) return {};
  return tag.substr(p + 5);
}

// One waiting `salt` call: its machine (touched only by the driver thread), its CLI
// connection and hub subscriptions. inbox is filled by hub handlers under the driver lock.
struct wait_entry {
  explicit wait_entry(wait_settings s) : fsm(std::move(s)) {}
  job_wait fsm;
  std::shared_ptr<cli_reply> out;
  std::string user;
  std::vector<std::string> minions;
  std::uint64_t sub = 0;
  std::uint64_t find_sub = 0;
  std::optional<wait_time> timer;
  std::deque<std::pair<std::string, value>> inbox;  // (tag, data) of job and find_job returns
  bool started = false;                             // driver thread: start event fed
};

// The thread driving every job_wait. The master's part (publishing find_job, hub
// subscriptions, connected ids) comes in as hooks so this stays free of master_core.
class wait_driver {
 public:
  struct hooks {
    // Publish saltutil.find_job [jid] to the connected ones of ids, subscribed for `w`:
    // returns {find jid, minions reached} ({"", {}} when nothing was published).
    std::function<std::pair<std::string, std::vector<std::string>>(const std::shared_ptr<wait_entry>& w,
                                                                   const std::vector<std::string>& ids)>
        find_job;
    std::function<void(std::uint64_t)> unsubscribe;
  };

  explicit wait_driver(hooks h) : h_(std::move(h)) {}
  ~wait_driver() { stop(); }

  void run() {
    t_ = std::thread([this] { loop(); });
  }

  // Queue a hub event for a wait (any thread).
  void post(const std::weak_ptr<wait_entry>& wp, const std::string& tag, const value& data) {
    auto w = wp.lock();
    if (!w) return;
    {
      std::lock_guard lk(mu_);
      if (w->inbox.size() >= kMaxWaitInbox) return;
      w->inbox.emplace_back(tag, data);
      dirty_ = true;
    }
    cv_.notify_one();
  }

  // Hand a published job's wait to the driver (false when stopping: the caller replies).
  bool start(const std::shared_ptr<wait_entry>& w) {
    {
      std::lock_guard lk(mu_);
      if (stopping_) return false;
      waits_.push_back(w);
      dirty_ = true;
    }
    cv_.notify_one();
    return true;
  }

  // Finish every wait (each CLI gets its final reply) and join the thread.
  void stop() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
      dirty_ = true;
    }
    cv_.notify_one();
    if (t_.joinable()) t_.join();
  }

  std::size_t size() const {
    std::lock_guard lk(mu_);
    return waits_.size();
  }

 private:
  void loop() {
    auto next_poll = steady::now() + kLivenessPoll;
    for (;;) {
      std::vector<std::shared_ptr<wait_entry>> ws;
      std::vector<std::deque<std::pair<std::string, value>>> inboxes;
      bool stopping = false;
      {
        std::unique_lock lk(mu_);
        auto wake = next_poll;
        for (const auto& w : waits_)
          if (w->timer) wake = std::min(wake, steady::time_point(w->timer->time_since_epoch()));
        cv_.wait_until(lk, wake, [this] { return dirty_; });
        dirty_ = false;
        stopping = stopping_;
        ws = waits_;
        inboxes.reserve(ws.size());
        for (auto& w : ws) {
          inboxes.emplace_back();
          inboxes.back().swap(w->inbox);
        }
      }
      const bool poll = steady::now() >= next_poll;
      if (poll) next_poll = steady::now() + kLivenessPoll;
      for (std::size_t i = 0; i < ws.size(); ++i) {
        auto& w = ws[i];
        try {
          if (!w->started) {
            w->started = true;
            wait_event ev = wait_event::make(wait_event::kind::start, wait_now());
            ev.minions = w->minions;
            feed(w, ev);
          }
          for (auto& [tag, data] : inboxes[i]) {
            if (w->fsm.finished()) break;
            feed(w, event_of(*w, tag, data));
          }
          if (!w->fsm.finished() && w->timer && wait_now() >= *w->timer) {
            w->timer.reset();
            feed(w, wait_event::make(wait_event::kind::timer_fired, wait_now()));
          }
          if (!w->fsm.finished() && poll && !w->out->alive())
            feed(w, wait_event::make(wait_event::kind::client_gone, wait_now()));
          if (!w->fsm.finished() && stopping) feed(w, wait_event::make(wait_event::kind::stopping, wait_now()));
        } catch (const std::exception& e) {
          spdlog::error("CLI wait for job {} failed: {}", w->fsm.jid(), e.what());
          try {
            if (!w->fsm.finished()) feed(w, wait_event::make(wait_event::kind::stopping, wait_now()));
          } catch (const std::exception&) {
          }
        }
      }
      {
        std::lock_guard lk(mu_);
        waits_.erase(std::remove_if(waits_.begin(), waits_.end(),
                                    [](const std::shared_ptr<wait_entry>& w) { return w->fsm.finished(); }),
                     waits_.end());
        if (stopping_ && waits_.empty()) return;
      }
    }
  }

  static wait_event event_of(const wait_entry& w, const std::string& tag, const value& data) {
    wait_event ev;
    ev.now = wait_now();
    ev.id = ret_id_of(tag);
    auto jid = wire::get_text(data, "jid");
    if (jid && *jid == w.fsm.jid()) {
      ev.type = wait_event::kind::return_arrived;
      ev.load = data;
    } else {
      ev.type = wait_event::kind::find_job_reply;
      ev.jid = jid ? std::string(*jid) : std::string();
      ev.running = find_job_running(data);
    }
    return ev;
  }

  // Feed one event and perform the actions (publish_find_job answers with another event).
  void feed(const std::shared_ptr<wait_entry>& w, const wait_event& first) {
    std::deque<wait_action> todo;
    for (auto& a : w->fsm.resume(first)) todo.push_back(std::move(a));
    while (!todo.empty()) {
      wait_action a = std::move(todo.front());
      todo.pop_front();
      switch (a.type) {
        case wait_action::kind::push_return:
          w->out->push(ipc::encode(ipc::return_item_of(a.id, w->fsm.jid(), a.load)));
          break;
        case wait_action::kind::arm_timer:
          w->timer = a.at;
          break;
        case wait_action::kind::publish_find_job: {
          if (w->find_sub) h_.unsubscribe(w->find_sub);
          w->find_sub = 0;
          auto [jid, reached] = h_.find_job(w, a.ids);
          wait_event ev = wait_event::make(wait_event::kind::find_job_published, wait_now());
          ev.jid = jid;
          ev.minions = std::move(reached);
          for (auto& b : w->fsm.resume(ev)) todo.push_back(std::move(b));
          break;
        }
        case wait_action::kind::finish: {
          if (w->find_sub) h_.unsubscribe(w->find_sub);
          if (w->sub) h_.unsubscribe(w->sub);
          w->find_sub = w->sub = 0;
          w->timer.reset();
          w->out->reply(ipc::encode(ipc::publish_done{w->fsm.jid(), a.ids}));
          break;
        }
      }
    }
  }

  hooks h_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<wait_entry>> waits_;
  bool dirty_ = false;
  bool stopping_ = false;
  std::thread t_;
};

}  // namespace

struct cli_service::cli_state {
  std::mutex mu;
  struct worker {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<worker> threads;
  std::atomic<bool> stopping{false};
  std::unique_ptr<wait_driver> waits;
};

cli_service::cli_service(const config::master_config& cfg, master_links& links, event_hub& hub, key_service& keys,
                         job_service& jobs, cluster_node& cluster, presence_table& presence)
    : cfg_(cfg), links_(links), hub_(hub), keys_(&keys), jobs_(&jobs), cluster_(&cluster), presence_(&presence) {
  eauth_ = std::make_unique<api::eauth_service>(
      cfg, [this](const value& tgt, const std::string& tgt_type) { return jobs_->check_minions(tgt, tgt_type); });
  init_cli();
}

cli_service::~cli_service() { shutdown(); }

std::vector<std::string> cli_service::connected_ids() const {
  auto* sink = links_.pub.load();
  return sink ? sink->connected_ids() : std::vector<std::string>{};
}

void cli_service::shutdown() {
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
  // After the CLI threads: none of them hands a new wait over any more.
  if (cli_->waits) cli_->waits->stop();
}

void cli_service::init_cli() {
  cli_ = std::make_unique<cli_state>();
  wait_driver::hooks h;
  h.unsubscribe = [this](std::uint64_t id) { hub_.unsubscribe(id); };
  h.find_job = [this](const std::shared_ptr<wait_entry>& w, const std::vector<std::string>& ids)
      -> std::pair<std::string, std::vector<std::string>> {
    // Who is missing but still connected? Only those are asked (Salt's LocalClient
    // asks the minions its presence events know).
    std::vector<std::string> ask;
    for (const auto& id : ids)
      if (auto* sink = links_.pub.load(); sink && sink->is_connected(id)) ask.push_back(id);
    if (ask.empty()) return {};
    publish_request fj;
    fj.tgt = value(ask);
    fj.tgt_type = "list";
    fj.fun = "saltutil.find_job";
    fj.arg = value::array({w->fsm.jid()});
    fj.user = w->user;
    fj.jid = new_jid();
    wait_driver* drv = cli_->waits.get();
    std::weak_ptr<wait_entry> wp = w;
    w->find_sub = hub_.subscribe_jid(fj.jid, [drv, wp](const std::string& tag, const value& d) { drv->post(wp, tag, d); });
    auto fr = publish(fj);
    if (!fr.error.empty()) {
      hub_.unsubscribe(w->find_sub);
      w->find_sub = 0;
      return {};
    }
    return {fj.jid, fr.minions};
  };
  cli_->waits = std::make_unique<wait_driver>(std::move(h));
  cli_->waits->run();
}

bool cli_service::spawn_cli(std::function<void()> fn) {
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

// ping_all's events: filled by hub handlers (any thread), drained by the runner's thread.
struct event_queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::string, value>> q;
  void push(const std::string& tag, const value& data) {
    {
      std::lock_guard lk(mu);
      if (q.size() > kMaxWaitInbox) return;
      q.emplace_back(tag, data);
    }
    cv.notify_one();
  }
  // Wait until an event or deadline (max 250 ms so liveness is rechecked).
  std::deque<std::pair<std::string, value>> take(steady::time_point deadline) {
    std::unique_lock lk(mu);
    auto until = std::min(deadline, steady::now() + kLivenessPoll);
    cv.wait_until(lk, until, [this] { return !q.empty(); });
    std::deque<std::pair<std::string, value>> out;
    out.swap(q);
    return out;
  }
};

publish_request to_publish_request(const ipc::publish& p) {
  publish_request req;
  req.tgt = p.tgt;
  req.tgt_type = p.tgt_type;
  // A compound function list is not published (the publisher answers "no function given").
  if (auto f = wire::as_text(p.fun)) req.fun = std::string(*f);
  req.arg = p.arg;
  if (p.kwarg) req.kwarg = *p.kwarg;
  req.ret = p.ret;
  req.user = p.user;
  req.delimiter = p.delimiter;
  if (p.jid) req.jid = *p.jid;
  if (p.kwargs) req.kwargs = *p.kwargs;
  // Salt's publish options (LocalClient kwargs): make_publish_load puts them in the load.
  if (p.metadata) req.kwargs["metadata"] = *p.metadata;
  if (p.ret_config) req.kwargs["ret_config"] = *p.ret_config;
  if (p.ret_kwargs) req.kwargs["ret_kwargs"] = *p.ret_kwargs;
  if (p.module_executors) req.kwargs["module_executors"] = *p.module_executors;
  if (p.executor_opts) req.kwargs["executor_opts"] = *p.executor_opts;
  if (p.start_event) req.kwargs["start_event"] = true;
  return req;
}

// Who calls over the CLI socket, for publisher_acl (Salt: ClearFuncs.publish with the
// "user" auth type; LoadAuth.authenticate_key). The kernel's peer credentials decide, not
// the "user" the client writes: root (uid 0) and the master's own user are trusted (their
// claimed user name is kept: "root", or sudo's "sudo_<user>"); anyone else is the user
// name of their uid. An in-process caller (no socket) is trusted with its claimed name.
struct cli_caller {
  std::string name;
  bool trusted = true;
};

cli_caller caller_of(const cli_reply& out, const std::string& claimed) {
  auto uid = out.peer_uid();
  if (!uid) return {claimed, true};
  if (*uid == 0 || *uid == static_cast<std::uint32_t>(::geteuid())) return {claimed.empty() ? "root" : claimed, true};
  std::vector<char> buf(16384);
  struct passwd pw {};
  struct passwd* res = nullptr;
  if (::getpwuid_r(static_cast<uid_t>(*uid), &pw, buf.data(), buf.size(), &res) == 0 && res && res->pw_name)
    return {res->pw_name, false};
  return {"uid " + std::to_string(*uid), false};
}

void refuse_cli(const std::shared_ptr<cli_reply>& out, const std::string& cmd, const std::string& why) {
  spdlog::warn("CLI request '{}' refused: {}", cmd, why);
  out->reply(ipc::encode(ipc::error_reply{why}));
}

}  // namespace

void cli_service::handle(const value& body, std::shared_ptr<cli_reply> out) {
  try {
    auto req = ipc::decode_request(body);
    if (!req) {
      refuse_cli(out, ipc::command_of(body), req.error);
      return;
    }
    std::function<void()> fn;
    if (std::holds_alternative<ipc::ping>(*req)) {
      out->reply(ipc::encode(ipc::ping_reply{cfg_.id}));
      return;
    } else if (std::holds_alternative<ipc::publish>(*req)) {
      fn = [this, body, out] { cli_publish(body, out); };
    } else if (std::holds_alternative<ipc::runner>(*req)) {
      fn = [this, body, out] { cli_runner(body, out); };
    } else if (!std::holds_alternative<ipc::runner>(*req) && !caller_of(*out, "root").trusted) {
      // salt-key's key events and salt-call's local returns: the key and job files they
      // stand for are root's (or the master user's) to write.
      refuse_cli(out, ipc::command_of(body), "Authentication failure of type \"user\" occurred");
      return;
    } else if (auto* k = std::get_if<ipc::key_event>(&*req)) {
      fn = [this, k = *k, out] {
        bool rotated = keys_->key_event(k.act, k.ids, k.rotate.value_or(true));
        out->reply(ipc::encode(ipc::key_event_reply{rotated}));
      };
    } else if (auto* l = std::get_if<ipc::local_return>(&*req)) {
      if (!pki::valid_id(l->id)) {
        refuse_cli(out, "local_return", "local_return needs a valid id and a return");
        return;
      }
      fn = [this, l = *l, out]() mutable {
        jobs_->record_return(l.load);
        out->reply(ipc::encode(ipc::local_return_reply{l.jid}));
      };
    }
    if (!spawn_cli(std::move(fn))) out->reply(ipc::encode(ipc::error_reply{"master busy or stopping, try again"}));
  } catch (const std::exception& e) {
    out->reply(ipc::encode(ipc::error_reply{std::string("bad request: ") + e.what()}));
  }
}

void cli_service::cli_publish(const value& body, std::shared_ptr<cli_reply> out) {
  auto dec = ipc::decode_request(body);
  const auto* p = dec ? std::get_if<ipc::publish>(&*dec) : nullptr;
  if (!p) {
    refuse_cli(out, "publish", dec ? "not a publish" : dec.error);
    return;
  }
  publish_request req = to_publish_request(*p);
  {
    // publisher_acl_blacklist for everyone, publisher_acl for callers other than root and
    // the master's user (ClearFuncs.publish). The load's arg as Salt's auth_check sees it:
    // the kwargs ride in a trailing {"__kwarg__": true, ...} map.
    cli_caller caller = caller_of(*out, p->user);
    value arg = p->arg.is_array() ? p->arg : value::array();
    if (p->kwarg && p->kwarg->is_object() && !p->kwarg->empty()) {
      value kw = value::object();
      kw["__kwarg__"] = true;
      for (auto it = p->kwarg->begin(); it != p->kwarg->end(); ++it) kw[it.key()] = it.value();
      arg.push_back(std::move(kw));
    }
    // A trusted caller (root, the master's user, the in-process REST API whose eauth
    // check already ran) meets only the blacklist.
    auto d = eauth_->check_publisher(caller.name, p->fun, arg, p->tgt, p->tgt_type, caller.trusted);
    if (!d.allowed) {
      // Salt's salt CLI prints the error's message as it is.
      spdlog::warn("CLI publish of {} by {} refused: {}",
                   p->fun.dump(-1, ' ', false, value::error_handler_t::replace), caller.name, d.reason);
      out->reply(ipc::encode(ipc::error_reply{d.reason}));
      return;
    }
    if (!caller.trusted) req.user = caller.name;  // job records name the real caller
  }
  int timeout = cfg_.timeout;
  if (p->timeout && *p->timeout > 0) timeout = static_cast<int>(std::min<std::int64_t>(*p->timeout, 86400));
  if (req.jid.empty()) req.jid = new_jid();

  std::shared_ptr<wait_entry> w;
  if (p->wait && cli_->waits->size() >= kMaxWaits) {
    out->reply(ipc::encode(ipc::error_reply{"master busy or stopping, try again"}));
    return;
  }
  if (p->wait) {
    wait_settings ws;
    ws.jid = req.jid;
    ws.timeout = std::chrono::seconds(timeout);
    ws.gather_job_timeout = std::chrono::seconds(std::max(1, cfg_.gather_job_timeout));
    w = std::make_shared<wait_entry>(ws);
    w->out = out;
    w->user = req.user;
    // Subscribed before the publish: no return can slip between the two.
    wait_driver* drv = cli_->waits.get();
    std::weak_ptr<wait_entry> wp = w;
    w->sub = hub_.subscribe_jid(req.jid, [drv, wp](const std::string& tag, const value& d) { drv->post(wp, tag, d); });
  }
  publish_result res = publish(req);
  if (!res.error.empty()) {
    if (w) hub_.unsubscribe(w->sub);
    out->reply(ipc::encode(ipc::error_reply{res.error}));
    return;
  }
  ipc::publish_head head{res.jid, res.minions, res.missing};
  if (!w) {
    out->reply(ipc::encode(head));
    return;
  }
  out->push(ipc::encode(head));
  w->minions = res.minions;
  // The machine's start event is fed by the driver thread, before any queued return.
  if (!cli_->waits->start(w)) {
    hub_.unsubscribe(w->sub);
    out->reply(ipc::encode(ipc::publish_done{res.jid, res.minions}));
  }
}

std::vector<std::string> cli_service::ping_all(std::chrono::seconds timeout) {
  value got = collect("test.ping", timeout);
  std::vector<std::string> out;
  for (auto it = got.begin(); it != got.end(); ++it)
    if (!it->contains("failed")) out.push_back(it.key());
  return out;
}

value cli_service::collect(const std::string& fun, std::chrono::seconds timeout) {
  publish_request req;
  req.tgt = "*";
  req.fun = fun;
  req.jid = new_jid();
  auto q = std::make_shared<event_queue>();
  auto sub = hub_.subscribe_jid(req.jid, [q](const std::string& tag, const value& d) { q->push(tag, d); });
  auto res = publish(req);
  std::set<std::string> got;
  value out = value::object();
  if (res.error.empty()) {
    std::set<std::string> expected(res.minions.begin(), res.minions.end());
    const auto deadline = steady::now() + timeout;
    while (steady::now() < deadline && !(cli_ && cli_->stopping)) {
      for (auto& [tag, data] : q->take(deadline)) {
        auto id = ret_id_of(tag);
        if (id.empty() || got.contains(id)) continue;  // the first return wins
        got.insert(id);
        out[id] = data;
      }
      if (std::includes(got.begin(), got.end(), expected.begin(), expected.end())) break;
    }
    // Expected minions that did not answer: {"failed": true}, as Salt's LocalClient.cmd
    // reports them (manage.versions lists them as "Minion offline").
    for (const auto& id : expected)
      if (!got.contains(id)) out[id] = value{{"failed", true}};
  }
  hub_.unsubscribe(sub);
  return out;
}

void cli_service::cli_runner(const value& body, std::shared_ptr<cli_reply> out) {
  auto dec = ipc::decode_request(body);
  const auto* rq = dec ? std::get_if<ipc::runner>(&*dec) : nullptr;
  if (!rq) {
    refuse_cli(out, "runner", dec ? "not a runner" : dec.error);
    return;
  }
  auto reply = [&out](value ret, std::int64_t rc) { out->reply(ipc::encode(ipc::runner_reply{std::move(ret), rc})); };
  if (cli_caller caller = caller_of(*out, rq->user.value_or("root")); !caller.trusted) {
    // Salt (ClearFuncs.runner, "user" auth): a caller other than root and the master's
    // user needs publisher_acl entries; with any, every runner is open to them.
    if (eauth_->publisher_auth_list(caller.name).empty()) {
      spdlog::warn("CLI runner {} by {} refused: not in publisher_acl", rq->fun, caller.name);
      out->reply(ipc::encode(ipc::error_reply{"Authentication failure of type \"user\" occurred"}));
      return;
    }
  }
  const std::string* fun = &rq->fun;
  if (*fun == "cluster.peers") {
    // Peer links of this master (state, queue, last error): the operator's view of the bus.
    if (!clustered()) {
      reply("This master is not in a cluster (cluster_id is not set)", 1);
      return;
    }
    reply(cluster_->status(), 0);
    return;
  }
  if (*fun == "cluster.rotate_key") {
    auto [ret, rc] = keys_->rotate_cluster_key();
    reply(ret, rc);
    return;
  }
  if (*fun == "cluster.remove") {
    // Remove a master from the cluster (cluster_node::remove_peer).
    if (!clustered()) {
      reply("This master is not in a cluster (cluster_id is not set)", 1);
      return;
    }
    std::string id;
    if (!rq->arg.empty()) {
      if (auto t = wire::as_text(rq->arg[0])) id = std::string(*t);
    }
    if (id.empty()) id = std::string(wire::get_text(rq->kwarg, "id").value_or(""));
    auto [ret, rc] = cluster_->remove_peer(id);
    reply(ret, rc);
    return;
  }
  if (*fun == "state.event") {
    cli_state_event(rq->arg, rq->kwarg, out);
    return;
  }
  runner_context ctx;
  ctx.jobs = &jobs_->store();
  ctx.keys = &keys_->store();
  ctx.connected_ids = [this] { return connected_ids(); };
  // sylvite.minions: this master's connections and last-seen times, and the peers'.
  ctx.self_id = cfg_.id;
  ctx.presence = [this] { return presence_->view(cfg_.id, connected_ids(), wall_ms()); };
  ctx.ping_all = [this](std::chrono::seconds t) { return ping_all(t); };
  ctx.collect = [this](const std::string& f, std::chrono::seconds t) { return collect(f, t); };
  ctx.cfg = &cfg_;
  // The minion data cache on disk (grains for manage.* show_ip), read on demand.
  auto mdata = std::make_shared<minion_data_cache>(cfg_.cachedir, cfg_.minion_data_cache);
  ctx.grains = [mdata](const std::string& id) -> value {
    auto e = mdata->get(id);
    return e ? e->grains : value(nullptr);
  };
  // salt-run -t: the runner's timeout (manage.up and friends), as Salt's opts["timeout"].
  ctx.timeout = rq->timeout && *rq->timeout > 0 ? static_cast<int>(std::min<std::int64_t>(*rq->timeout, 86400))
                                                : cfg_.timeout;
  // A jid given by the caller (the REST API's runner_async answers it at once) is kept.
  const std::string jid = rq->jid && !rq->jid->empty() ? *rq->jid : new_jid();
  auto outcome = run_runner(ctx, *fun, rq->arg, rq->kwarg);
  store_runner_job(jid, *rq, outcome.ret, outcome.retcode);
  reply(outcome.ret, outcome.retcode);
}

namespace {

// Salt's salt.utils.stringutils.expr_match: equal, fnmatch glob, or a regex matching
// the whole tag.
bool expr_match(const std::string& tag, const std::string& expr) {
  if (tag == expr) return true;
  if (match::glob_match(expr, tag)) return true;
  // re.match(r"\A{}\Z"): anchored at the start (pcre_match) and at the end ($).
  return match::pcre_match("(?:" + expr + ")$", tag);
}

// state.event's queue: filled by the hub (any thread), drained by the CLI's thread;
// bounded: a CLI that does not read loses events (counted), never the master.
struct stream_queue {
  static constexpr std::size_t kMax = 10000;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::string, value>> q;
  std::uint64_t shed = 0;
  void push(const std::string& tag, const value& data) {
    {
      std::lock_guard lk(mu);
      if (q.size() >= kMax) {
        ++shed;
        return;
      }
      q.emplace_back(tag, data);
    }
    cv.notify_one();
  }
  std::deque<std::pair<std::string, value>> take(steady::time_point until) {
    std::unique_lock lk(mu);
    cv.wait_until(lk, until, [this] { return !q.empty(); });
    std::deque<std::pair<std::string, value>> out;
    out.swap(q);
    return out;
  }
};

std::optional<std::int64_t> int_arg(const value& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>();
  if (auto t = wire::as_text(v)) {
    try {
      std::size_t used = 0;
      auto n = std::stoll(std::string(*t), &used);
      if (used == t->size()) return n;
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

}  // namespace

void cli_service::cli_state_event(const value& args, const value& kwargs, std::shared_ptr<cli_reply> out) {
  auto reply = [&out](value ret, std::int64_t rc) { out->reply(ipc::encode(ipc::runner_reply{std::move(ret), rc})); };
  // Salt's signature: event(tagmatch="*", count=-1, quiet=False, sock_dir=None, pretty=False, node="master")
  static const char* const names[] = {"tagmatch", "count", "quiet", "sock_dir", "pretty", "node"};
  value a = value::object();
  if (args.is_array()) {
    if (args.size() > 6) {
      reply("Passed invalid arguments: event() takes from 0 to 6 positional arguments but " +
                std::to_string(args.size()) + " were given.",
            1);
      return;
    }
    for (std::size_t i = 0; i < args.size(); ++i) a[names[i]] = args[i];
  }
  if (kwargs.is_object()) {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (std::find_if(std::begin(names), std::end(names), [&](const char* n) { return it.key() == n; }) ==
          std::end(names)) {
        reply("Passed invalid arguments: event() got an unexpected keyword argument '" + it.key() + "'.", 1);
        return;
      }
      a[it.key()] = it.value();
    }
  }
  std::string tagmatch = "*";
  if (const value* t = wire::find(a, "tagmatch")) {
    if (auto s = wire::as_text(*t)) tagmatch = std::string(*s);
    else tagmatch = t->dump();
  }
  std::int64_t count = -1;
  if (const value* c = wire::find(a, "count")) {
    auto n = int_arg(*c);
    if (!n) {
      reply("Passed invalid arguments: count must be an integer.", 1);
      return;
    }
    count = *n;
  }
  if (const value* n = wire::find(a, "node")) {
    auto s = wire::as_text(*n);
    if (!s || *s != "master") {
      reply("sylvite's salt-run state.event watches the master's bus only (node=master)", 1);
      return;
    }
  }
  auto q = std::make_shared<stream_queue>();
  auto sub = hub_.subscribe_all([q](const std::string& tag, const value& d) { q->push(tag, d); });
  bool done = count == 0;
  std::uint64_t shed_logged = 0;
  while (!done && !(cli_ && cli_->stopping) && out->alive()) {
    for (auto& [tag, data] : q->take(steady::now() + kLivenessPoll)) {
      if (!expr_match(tag, tagmatch)) {
        spdlog::debug("state.event: skipping event tag {}", tag);
        continue;
      }
      if (!out->push(ipc::encode(ipc::event_item{tag, data}))) break;
      if (count > 0 && --count == 0) {
        done = true;
        break;
      }
    }
    std::uint64_t shed;
    {
      std::lock_guard lk(q->mu);
      shed = q->shed;
    }
    if (shed != shed_logged) {
      if (shed_logged == 0)
        spdlog::warn("salt-run state.event: the CLI does not keep up: events shed for it (queue of {} full)",
                     stream_queue::kMax);
      shed_logged = shed;
    }
  }
  hub_.unsubscribe(sub);
  if (shed_logged) spdlog::warn("salt-run state.event ended: {} event(s) were shed for it", shed_logged);
  if (out->alive()) reply(nullptr, 0);
}

// Salt stores every salt-run call as a job of the master (salt/client/mixins.py low() ->
// salt.utils.job.store_job): load {"id", "tgt": master id, "jid", "return": data,
// "fun": "runner.<fun>", "user"} and the return under the master's id. jobs.list_jobs
// then lists them (Function runner.<fun>, Target <id>, Target-type list), as on Salt.
void cli_service::store_runner_job(const std::string& jid, const ipc::runner& rq, const value& ret,
                                   std::int64_t retcode) {
  if (!cfg_.job_cache) return;
  const std::string user = rq.user && !rq.user->empty() ? *rq.user : "root";
  value fun_args = rq.arg.is_array() ? rq.arg : value::array();
  if (rq.kwarg.is_object() && !rq.kwarg.empty()) fun_args.push_back(rq.kwarg);
  value data = {{"fun", "runner." + rq.fun}, {"jid", jid}, {"user", user}, {"fun_args", fun_args}, {"return", ret},
                {"success", retcode == 0}};
  if (retcode != 0) data["retcode"] = retcode;
  value load = {{"id", cfg_.id}, {"tgt", cfg_.id}, {"jid", jid}, {"return", data}, {"fun", "runner." + rq.fun},
                {"user", user}};
  auto& store = jobs_->store();
  if (auto r = store.save_load(jid, load, {}); !r) {
    spdlog::warn("runner {}: the job {} was not stored: {}", rq.fun, jid, r.error().message());
    return;
  }
  value ret_load = {{"id", cfg_.id}, {"jid", jid}, {"fun", "runner." + rq.fun}, {"return", data},
                    {"success", retcode == 0}};
  if (auto r = store.record_return(jid, cfg_.id, ret_load); !r)
    spdlog::warn("runner {}: the return of job {} was not stored: {}", rq.fun, jid, r.error().message());
}

}  // namespace sylvite::master
