// sylvite::cluster peer bus (see peer_bus.hpp).
#include "cluster/peer_bus.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "cluster/peer_link.hpp"
#include "core/util/rate_limit.hpp"
#include "core/util/files.hpp"
#include "core/config/config.hpp"

// GCC 12 reports a false -Wmismatched-new-delete on Asio coroutine frames when a
// coroutine is inlined into its caller (seen with -O2 and with the sanitizer flags): Asio's
// awaitable_frame_base pairs its own operator new/delete. clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace sylvite::cluster {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using std::chrono::milliseconds;
using wire::value;

namespace {
std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }
std::int64_t mono_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Join-path limits (docs/security.md section 5). Per source address: 16 requests at once,
// then one a second (a joiner needs two: discover and join; the burst lets a few masters
// behind one address, or a test suite on 127.0.0.1, join back to back). All sources together: 20
// discover replies at once, then 10 a second (each costs two private-key signatures).
// At most k_join_queue requests wait for the join thread; more are refused "busy".
constexpr double k_join_per_source_rate = 1;
constexpr double k_join_per_source_burst = 16;
constexpr double k_discover_reply_rate = 10;
constexpr double k_discover_reply_burst = 20;
constexpr int k_join_queue = 16;
constexpr std::int64_t k_shed_log_interval_ms = 10000;

// "1.2.3.4:5678" / "[::1]:5678" -> the address without the port.
std::string host_part(const std::string& peer) {
  if (!peer.empty() && peer.front() == '[') {
    auto e = peer.find(']');
    return e == std::string::npos ? peer : peer.substr(1, e - 1);
  }
  auto c = peer.rfind(':');
  return c == std::string::npos ? peer : peer.substr(0, c);
}

// A warning for refusals that can come in floods: the first at once, then at most one
// per interval with the count since the last line.
struct shed_log {
  std::mutex mu;
  std::int64_t last_ms = 0;
  std::uint64_t since = 0;
  bool any = false;
  void note(const std::string& what, const std::string& src) {
    std::lock_guard lk(mu);
    ++since;
    const std::int64_t now = mono_ms();
    if (any && now - last_ms < k_shed_log_interval_ms) return;
    spdlog::warn("cluster pool port: {} join request(s) refused in the last {} s ({}; last from {})", since,
                 any ? (now - last_ms) / 1000 : 0, what, src);
    any = true;
    last_ms = now;
    since = 0;
  }
};

// One outbound link: its state machine (peer_link.hpp) and the I/O the driver needs.
struct link {
  link(std::string a, std::string h, std::uint16_t p, link_settings ls, asio::any_io_executor st)
      : addr(std::move(a)), host(std::move(h)), port(p), fsm(std::move(ls)), strand(std::move(st)) {}
  std::string addr;
  std::string host;
  std::uint16_t port = 0;
  peer_link fsm;                                   // impl::mu_
  asio::any_io_executor strand;                    // runs the driver
  std::shared_ptr<asio::steady_timer> wake;        // strand only
  std::shared_ptr<transport::req_client> client;   // impl::mu_ (closed from any thread)
};

void log_link(const link_action& a) {
  switch (a.level) {
    case link_log_level::debug: spdlog::debug("{}", a.text); break;
    case link_log_level::info: spdlog::info("{}", a.text); break;
    case link_log_level::warning: spdlog::warn("{}", a.text); break;
    case link_log_level::error: spdlog::error("{}", a.text); break;
  }
}

bool live(const peer_link& f) {
  const auto st = f.status();
  return st != link_status::removed && st != link_status::self && st != link_status::duplicate;
}

struct in_link {
  std::string from;
  std::shared_ptr<crypto::crypticle> key;
  std::uint64_t next_seq = 1;
};
}  // namespace

struct peer_bus::impl : std::enable_shared_from_this<impl> {
  impl(asio::io_context& io, bus_settings s, handler h, peer_event ev)
      : io_(io), s_(std::move(s)), handler_(std::move(h)), ev_(std::move(ev)), work_(1), join_work_(1) {}

  asio::io_context& io_;
  bus_settings s_;
  handler handler_;
  peer_event ev_;
  asio::thread_pool work_;  // inbound requests (RSA, handler) in arrival order
  // cluster/discover and cluster/join: unauthenticated senders, never on work_ (the relay).
  asio::thread_pool join_work_;
  std::atomic<int> join_queued_{0};
  std::mutex limit_mu_;
  rate_limiter per_source_{k_join_per_source_rate, k_join_per_source_burst};
  rate_limiter reply_budget_{k_discover_reply_rate, k_discover_reply_burst, 1};
  shed_log shed_;
  // Peers whose peers/<id>.pub disappeared while this master ran; a file that reappears
  // for one of them is ignored until the id joins again (mu_).
  std::set<std::string> removed_;
  std::set<std::string> warned_revived_;
  std::unique_ptr<transport::req_server> server_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<link>> links_;  // by address
  std::map<std::string, in_link> inbound_;               // by link id
  std::map<std::string, std::string> learned_;           // peer id -> address from its hello
  std::map<std::string, crypto::rsa_key> keys_;          // peers/<id>.pub, refreshed by the watcher
  std::set<std::string> up_ids_;
  std::map<std::string, std::string> refusals_;          // peer -> last refusal (log once)
  nonce_cache nonces_;
  pending_joins pending_;  // work_ thread only
  std::atomic<bool> stopping_{false};
  util::log_limiter refused_log_;  // messages refused at decode
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::uint16_t bound_ = 0;

  // io: true only off the io threads (the work_ thread): a miss reads peers/<id>.pub.
  // On an io thread a miss wakes the watcher, which re-reads peers/ at once.
  std::optional<crypto::rsa_key> key_of(const std::string& id, bool io = false) {
    {
      std::lock_guard lk(mu_);
      auto it = keys_.find(id);
      if (it != keys_.end()) return it->second;
    }
    if (!io) {
      watch_cv_.notify_all();
      return std::nullopt;
    }
    {
      std::lock_guard lk(mu_);
      if (removed_.count(id)) return std::nullopt;  // removed: its file back is not membership
    }
    auto k = peer_key(s_.pki_dir, id);
    if (k) {
      std::lock_guard lk(mu_);
      keys_.insert_or_assign(id, *k);
    }
    return k;
  }

  void refresh_keys() {
    auto keys = list_peer_keys(s_.pki_dir);  // file I/O: watcher thread only
    std::set<std::string> gone;
    std::vector<std::string> vanished;  // known peers whose file disappeared in this pass
    std::vector<std::shared_ptr<link>> revived;
    // Known peers missing from the listing whose file is really gone (ENOENT; a file
    // that failed to read or parse on a flaky share is not a removal).
    std::vector<std::string> missing;
    {
      std::lock_guard lk(mu_);
      for (const auto& [id, k] : keys_)
        if (id != s_.id && !keys.count(id) && !removed_.count(id)) missing.push_back(id);
    }
    std::erase_if(missing, [&](const std::string& id) {
      std::error_code ec;
      const bool there = std::filesystem::exists(s_.pki_dir / "peers" / (id + ".pub"), ec);
      return there || ec;
    });
    {
      std::lock_guard lk(mu_);
      for (const auto& id : missing)
        if (removed_.insert(id).second) vanished.push_back(id);
      // A removed peer's file back on the share (the removed master restarted and wrote
      // it, or anyone with write access did) is not membership: ignored until it joins.
      for (auto it = keys.begin(); it != keys.end();) {
        if (it->first != s_.id && removed_.count(it->first)) {
          if (warned_revived_.insert(it->first).second)
            spdlog::warn("cluster_pki_dir/peers/{}.pub is back after {} was removed: ignored until it joins again "
                         "(through cluster/join with the current cluster_secret)",
                         it->first, it->first);
          it = keys.erase(it);
        } else {
          ++it;
        }
      }
      for (auto& [addr, l] : links_) {
        const std::string& id = l->fsm.peer_id();
        if (id.empty()) continue;
        const bool has = keys.count(id) > 0;
        if (!has && live(l->fsm)) {
          gone.insert(id);
        } else if (has && l->fsm.status() == link_status::removed) {
          if (apply_external(*l, l->fsm.resume(link_event::make(link_event::kind::revived)))) revived.push_back(l);
        }
      }
      for (auto it = inbound_.begin(); it != inbound_.end();) {
        if (!keys.count(it->second.from)) it = inbound_.erase(it);
        else ++it;
      }
      keys_ = std::move(keys);
    }
    for (const auto& id : gone) drop_peer(id, "cluster_pki_dir/peers/" + id + ".pub is gone");
    for (const auto& id : vanished) drop_peer(id, "cluster_pki_dir/peers/" + id + ".pub is gone");
    if (!vanished.empty()) save_removed();
    if (!vanished.empty() && s_.on_removed) {
      try {
        s_.on_removed(vanished);
      } catch (const std::exception& e) {
        spdlog::error("cluster peer removal handler failed: {}", e.what());
      }
    }
    for (auto& l : revived) poke(l);
    // Peers that linked to us but that we have no link to yet.
    std::vector<std::string> to_add;
    {
      std::lock_guard lk(mu_);
      for (const auto& [id, addr] : learned_) {
        bool have = false;
        bool unknown = false;
        auto la = config::parse_master_address(addr, s_.port == 0 ? 4520 : s_.port);
        for (const auto& [a, l] : links_) {
          if (l->fsm.peer_id() == id && l->fsm.status() != link_status::removed) have = true;
          // A link to the same host that has not said who it is yet may be this peer
          // (cluster_peers spelled without the port): wait for it. Another host's
          // unidentified link (a peer that is down) must not hold this one back.
          if (l->fsm.peer_id().empty() && l->fsm.status() != link_status::self && la && l->host == la->host)
            unknown = true;
          if (a == addr) have = true;
        }
        if (!have && !unknown && keys_.count(id)) to_add.push_back(addr);
      }
    }
    for (const auto& a : to_add) add_link(a);
  }

  // Drop one peer: its links closed, what was queued for it discarded, nothing sent to it
  // from here on (cluster.remove calls it before rotating the AES key; the watcher when
  // peers/<id>.pub is gone).
  void drop_peer(const std::string& id, const std::string& why) {
    bool had = false;
    bool fresh = false;
    std::vector<std::shared_ptr<link>> wake;
    {
      std::lock_guard lk(mu_);
      for (auto& [addr, l] : links_)
        if (l->fsm.peer_id() == id && live(l->fsm)) {
          if (apply_external(*l, l->fsm.resume(link_event::make(link_event::kind::removed)))) wake.push_back(l);
          had = true;
        }
      for (auto it = inbound_.begin(); it != inbound_.end();) {
        if (it->second.from == id) it = inbound_.erase(it);
        else ++it;
      }
      keys_.erase(id);
      learned_.erase(id);
      up_ids_.erase(id);
      fresh = removed_.insert(id).second;
    }
    for (auto& l : wake) poke(l);
    if (fresh) save_removed();
    if (had) spdlog::warn("cluster peer {} removed ({}): its links are closed", id, why);
    if (had && ev_) ev_(id, false);
  }

  // removed_ to/from s_.removed_file (watcher and join threads; small, rare writes).
  void load_removed() {
    if (s_.removed_file.empty()) return;
    auto text = util::read_file(s_.removed_file);
    if (!text) return;
    std::lock_guard lk(mu_);
    std::size_t a = 0;
    while (a < text->size()) {
      auto b = text->find('\n', a);
      if (b == std::string::npos) b = text->size();
      std::string id = text->substr(a, b - a);
      if (valid_peer_id(id) && id != s_.id) removed_.insert(id);
      a = b + 1;
    }
  }
  void save_removed() {
    if (s_.removed_file.empty()) return;
    std::string out;
    {
      std::lock_guard lk(mu_);
      for (const auto& id : removed_) out += id + "\n";
    }
    if (auto r = util::write_file_atomic(s_.removed_file, out, 0600); !r)
      spdlog::error("cannot write {}: {}", s_.removed_file.string(), r.error().message());
  }

  void watcher_loop() {
    while (!stopping_) {
      refresh_keys();
      std::unique_lock lk(watch_mu_);
      watch_cv_.wait_for(lk, std::chrono::seconds(2), [&] { return stopping_.load(); });
    }
  }

  // Ends the link's current wait (on its strand, where the driver arms its timer).
  void poke(const std::shared_ptr<link>& l) {
    asio::post(l->strand, [l] {
      if (l->wake) l->wake->cancel();
    });
  }

  // mu_ held. A link's connection, closed and forgotten (the driver keeps its own
  // reference for a request in flight, which then fails).
  static void close_client(link& l) {
    if (l.client) l.client->close();
    l.client.reset();
  }

  // mu_ held. Actions of an event fed from outside the driver (offer, removed, revived,
  // stop): close now, log; true when the link needs a poke (after the lock).
  static bool apply_external(link& l, const std::vector<link_action>& acts) {
    bool wake = false;
    for (const auto& a : acts) {
      if (a.type == link_action::kind::close) close_client(l);
      else if (a.type == link_action::kind::wake) wake = true;
      else if (a.type == link_action::kind::log) log_link(a);
    }
    return wake;
  }

  std::shared_ptr<link> add_link(const std::string& addr) {
    auto a = config::parse_master_address(addr, s_.port == 0 ? 4520 : s_.port);
    if (!a) {
      spdlog::error("cluster peer address '{}' cannot be parsed; ignored", addr);
      return nullptr;
    }
    link_settings ls;
    ls.addr = addr;
    ls.self_id = s_.id;
    ls.max_queue = s_.max_queue;
    ls.batch = s_.batch;
    ls.seed = std::random_device{}();
    auto l = std::make_shared<link>(addr, a->host, static_cast<std::uint16_t>(a->port), std::move(ls),
                                    asio::make_strand(io_));
    {
      std::lock_guard lk(mu_);
      if (links_.count(addr)) return links_[addr];
      links_[addr] = l;
    }
    auto self = shared_from_this();
    asio::co_spawn(l->strand, run_link(self, l), asio::detached);
    return l;
  }

  // mu_ held. true if queued; wake: the link needs a poke (after the lock).
  static bool enqueue(link& l, const std::string& type, const value& body, bool& wake) {
    auto r = l.fsm.offer(peer_message{type, body});
    wake = apply_external(l, r.actions) || wake;
    return r.queued;
  }

  // ---- outbound link: the driver of peer_link (peer_link.hpp) -------------------------------
  static awaitable<void> sleep_on(std::shared_ptr<link> l, milliseconds d, asio::any_io_executor ex) {
    l->wake = std::make_shared<asio::steady_timer>(ex);
    l->wake->expires_after(d);
    auto t = l->wake;
    co_await t->async_wait(asio::as_tuple(use_awaitable));
  }

  // send_hello: the handshake's outcome as an event; key gets the link key.
  static awaitable<link_event> send_hello(std::shared_ptr<impl> self, std::shared_ptr<link> l,
                                          std::shared_ptr<crypto::crypticle>& key) {
    using k = link_event::kind;
    std::shared_ptr<transport::req_client> client;
    {
      std::lock_guard lk(self->mu_);
      client = l->client;
    }
    if (!client) co_return link_event::make(k::connect_failed, "connection closed");
    const std::string nonce = crypto::uuid4_hex();
    value hello = make_hello(self->s_.cluster_id, self->s_.id, self->s_.advertise, self->s_.priv, nonce, unix_now());
    auto r = co_await client->request(std::move(hello), self->s_.request_timeout);
    if (!r) co_return link_event::make(k::connect_failed, r.error().message());
    std::string why;
    auto w = verify_welcome(*r, self->s_.id, self->s_.priv, nonce,
                            [&](const std::string& id) { return self->key_of(id); }, why);
    if (!w) co_return link_event::make(k::welcome_refused, why);
    auto c = crypto::crypticle::from_key_string(w->key);
    if (!c) co_return link_event::make(k::welcome_refused, "link key does not decrypt");
    key = std::make_shared<crypto::crypticle>(std::move(*c));
    co_return link_event::welcome(w->from, w->link);
  }

  // send_batch: sealed with the link key; the ack (or its failure) as an event.
  static awaitable<link_event> send_batch(std::shared_ptr<impl> self, std::shared_ptr<link> l,
                                          std::shared_ptr<crypto::crypticle> key, const link_action& a) {
    using k = link_event::kind;
    std::shared_ptr<transport::req_client> client;
    {
      std::lock_guard lk(self->mu_);
      client = l->client;
    }
    if (!client || !key) co_return link_event::make(k::ack_failed, "connection closed");
    auto r = co_await client->request(seal_batch(*key, a.link_id, a.seq, a.batch), self->s_.request_timeout);
    std::string why;
    if (r && open_ack(*key, *r, a.seq, why)) co_return link_event::ack(a.seq);
    if (!r) why = r.error().message();
    co_return link_event::make(k::ack_failed, why);
  }

  static awaitable<void> run_link(std::shared_ptr<impl> self, std::shared_ptr<link> l) {
    using ak = link_action::kind;
    auto ex = co_await asio::this_coro::executor;
    std::shared_ptr<crypto::crypticle> key;  // the link key of the last welcome
    link_event ev = link_event::make(link_event::kind::start);
    for (;;) {
      std::vector<link_action> acts;
      std::shared_ptr<link> other;  // welcome: the link already up to that peer
      bool wake_other = false;
      {
        std::lock_guard lk(self->mu_);
        if (self->stopping_) (void)apply_external(*l, l->fsm.resume(link_event::make(link_event::kind::stop)));
        if (ev.type == link_event::kind::welcome) {
          for (auto& [a, o] : self->links_)
            if (o != l && o->fsm.peer_id() == ev.peer_id && o->fsm.sendable()) {
              other = o;
              ev.duplicate = true;
              break;
            }
        }
        acts = l->fsm.resume(ev);
        // What touches shared state runs under the lock, at once.
        for (const auto& a : acts) {
          if (a.type == ak::connect && !l->client)
            l->client = transport::req_client::create(ex, transport::endpoint{l->host, l->port, {}}, self->s_.topt);
          else if (a.type == ak::close || a.type == ak::finish)
            close_client(*l);
          else if (a.type == ak::hand_over && other)  // another address of that peer is linked: our queue to it
            wake_other = !other->fsm.adopt(l->fsm.take_queue()).empty();
        }
      }
      if (wake_other) self->poke(other);
      std::optional<link_event> next;
      for (const auto& a : acts) {
        switch (a.type) {
          case ak::connect:
          case ak::close:
          case ak::hand_over:
          case ak::wake:
            break;
          case ak::log:
            log_link(a);
            break;
          case ak::report_up: {
            bool first;
            {
              std::lock_guard lk(self->mu_);
              first = self->up_ids_.insert(a.peer_id).second;
            }
            if (first && self->ev_) self->ev_(a.peer_id, true);
            break;
          }
          case ak::send_hello:
            next = co_await send_hello(self, l, key);
            break;
          case ak::send_batch:
            next = co_await send_batch(self, l, key, a);
            break;
          case ak::arm_timer:
            co_await sleep_on(l, a.delay, ex);
            next = link_event::make(link_event::kind::timer_fired);
            break;
          case ak::finish:
            co_return;
        }
      }
      if (!next) co_return;  // every driver event yields one waiting action (peer_link.hpp)
      ev = std::move(*next);
    }
  }

  // ---- inbound (work_ thread) ---------------------------------------------------------------
  value on_request(const value& body, const std::string& peer) {
    auto cmd = wire::get_text(body, "cmd").value_or("");
    if (cmd == "cluster/hello") return on_hello(body, peer);
    if (cmd == "cluster/msg") return on_msg(body, peer);
    if (cmd == "cluster/discover") return on_discover(body, peer);
    if (cmd == "cluster/join") return on_join(body, peer);
    refuse_once(peer, "unknown command");
    return value{{"error", "unknown command"}};
  }

  void refuse_once(const std::string& who, const std::string& why) {
    std::lock_guard lk(mu_);
    auto& last = refusals_[who];
    if (last != why) spdlog::warn("cluster peer bus: refused {}: {}", who, why);
    last = why;
    if (refusals_.size() > 10000) refusals_.clear();
  }

  value on_hello(const value& body, const std::string& peer) {
    std::string why;
    auto h = verify_hello(body, s_.cluster_id, s_.id, [&](const std::string& id) { return key_of(id, true); },
                          unix_now(), why);
    if (!h) {
      refuse_once(peer, why);
      return value{{"error", why}};
    }
    {
      std::lock_guard lk(mu_);
      if (!nonces_.insert(h->nonce, unix_now())) {
        why = "replayed hello";
      }
    }
    if (!why.empty()) {
      refuse_once(peer, why);
      return value{{"error", why}};
    }
    auto pub = key_of(h->from, true);
    if (!pub) return value{{"error", "unknown peer"}};
    const std::string link_id = crypto::uuid4_hex();
    const std::string key_string = crypto::crypticle::generate_key_string();
    auto c = crypto::crypticle::from_key_string(key_string);
    if (!c) return value{{"error", "internal"}};
    value reply = make_welcome(s_.id, s_.priv, *h, *pub, link_id, key_string);
    {
      std::lock_guard lk(mu_);
      // one inbound link per peer: a new handshake replaces the old one
      for (auto it = inbound_.begin(); it != inbound_.end();) {
        if (it->second.from == h->from) it = inbound_.erase(it);
        else ++it;
      }
      inbound_[link_id] = in_link{h->from, std::make_shared<crypto::crypticle>(std::move(*c)), 1};
      learned_[h->from] = h->addr;
      refusals_.erase(peer);
    }
    spdlog::info("cluster peer {} linked from {} (listens on {})", h->from, peer, h->addr);
    return reply;
  }

  // ---- joins (join_work_ thread) --------------------------------------------------------------
  // On the io thread: the per-source rate limit and the queue bound, before any RSA or
  // file work; then the join thread, never work_ (which relays publishes and returns).
  void admit_join(value body, std::shared_ptr<transport::responder> r) {
    const std::string peer = r->peer().address;
    const std::string src = host_part(peer);
    bool ok;
    {
      std::lock_guard lk(limit_mu_);
      ok = per_source_.allow(src, mono_ms());
    }
    if (!ok) {
      shed_.note("rate limit per source address", peer);
      r->reply(value{{"error", "too many join requests from this address; retry later"}});
      return;
    }
    if (join_queued_.fetch_add(1) >= k_join_queue) {
      join_queued_.fetch_sub(1);
      shed_.note("join queue full", peer);
      r->reply(value{{"error", "busy: too many join requests; retry later"}});
      return;
    }
    asio::post(join_work_, [self = shared_from_this(), body = std::move(body), r, peer] {
      self->join_queued_.fetch_sub(1);
      if (self->stopping_) return;
      const auto cmd = wire::get_text(body, "cmd").value_or("");
      r->reply(cmd == "cluster/discover" ? self->on_discover(body, peer) : self->on_join(body, peer));
    });
  }

  value join_refused(const std::string& who, const std::string& why) {
    spdlog::warn("cluster join from {} refused: {}", who, why);
    return value{{"error", why}};
  }

  // This master's cluster key, if it is a member (cluster.pem readable, own peers/<id>.pub
  // present and ours).
  std::optional<crypto::rsa_key> member_key(std::string& why) {
    auto pem = util::read_file(s_.pki_dir / "cluster.pem");
    auto k = pem ? crypto::rsa_key::from_private_pem(*pem) : result<crypto::rsa_key>(pem.error());
    auto own = peer_key(s_.pki_dir, s_.id);
    if (!k || !own || own->public_pem() != s_.priv.public_pem()) {
      why = "not a member (this master has not joined the cluster)";
      return std::nullopt;
    }
    return std::move(*k);
  }

  // Cheap checks first (shape, cluster_id, id, window, the sender's own signature: a
  // public-key operation), then capacity and the reply budget; the cluster key is read
  // and the two private-key signatures made only for a discover that gets a token.
  value on_discover(const value& body, const std::string& peer) {
    std::string why;
    auto d = verify_discover(body, s_.cluster_id, s_.id, unix_now(), why);
    const std::string who = d ? d->from + " (" + peer + ")" : peer;
    if (!d) return join_refused(who, why);
    const std::string src = host_part(peer);
    if (pending_.full_for(*d, src, unix_now(), why)) {  // join thread only: no lock
      shed_.note(why, peer);
      return value{{"error", why}};
    }
    {
      std::lock_guard lk(limit_mu_);
      if (!reply_budget_.allow("", mono_ms())) why = "busy: too many discovers; retry later";
    }
    if (!why.empty()) {
      shed_.note("discover reply budget", peer);
      return value{{"error", why}};
    }
    if (auto cur = peer_key(s_.pki_dir, d->from); cur && cur->public_pem() != crypto::rsa_key::from_public_pem(d->pub_pem)->public_pem())
      return join_refused(who, "id '" + d->from + "' is used by another master key (cluster_pki_dir/peers/" + d->from + ".pub)");
    if (!pending_.fresh_nonce(d->nonce, unix_now())) return join_refused(who, "replayed discover (nonce seen before)");
    auto ck = member_key(why);
    if (!ck) return join_refused(who, why);
    auto token = pending_.add(*d, src, unix_now(), why);
    if (!token) return join_refused(who, why);
    spdlog::info("cluster discover from {}: join token issued (expires in {} s)", who, k_join_token_ttl_s);
    return make_discover_reply(s_.id, s_.priv, *ck, *d, *token);
  }

  value on_join(const value& body, const std::string& peer) {
    std::string why;
    const std::string from = std::string(wire::get_text(body, "from").value_or(""));
    const std::string who = (valid_peer_id(from) ? from : std::string("?")) + " (" + peer + ")";
    auto j = verify_join(body, s_.priv, s_.secret, s_.allow_empty_secret, pending_, unix_now(), why);
    if (!j) return join_refused(who, why);
    if (!s_.secret || s_.secret->empty())
      spdlog::critical("cluster join of {} accepted with an EMPTY cluster_secret (cluster_allow_empty_secret): anyone "
                       "who reaches cluster_pool_port can join this cluster",
                       who);
    auto ck = member_key(why);
    if (!ck) return join_refused(who, why);
    cluster_identity ident;
    auto pem = util::read_file(s_.pki_dir / "cluster.pem");
    auto aes = read_aes(s_.pki_dir);
    if (!pem || !aes) return join_refused(who, "cannot read cluster.pem/.aes");
    ident.cluster_pem = *pem;
    ident.cluster_pub_pem = ck->public_pem();
    ident.aes = aes->key;
    bool readmitted;
    {
      std::lock_guard lk(mu_);  // a completed join readmits an id removed before
      readmitted = removed_.erase(j->from) > 0;
      warned_revived_.erase(j->from);
    }
    if (readmitted) save_removed();
    if (auto r = ensure_peer_key(s_.pki_dir, j->from, j->pub_pem); !r)
      return join_refused(who, "cannot record peers/" + j->from + ".pub: " + r.error().message());
    for (const auto& [id, k] : list_peer_keys(s_.pki_dir)) ident.peers[id] = k.public_pem();
    ident.peers[j->from] = j->pub_pem;
    {
      std::lock_guard lk(mu_);
      for (const auto& [a, l] : links_)
        if (!l->fsm.peer_id().empty() && live(l->fsm)) ident.addrs.emplace(l->fsm.peer_id(), l->addr);
      for (const auto& [id, a] : learned_) ident.addrs.emplace(id, a);
    }
    ident.addrs[s_.id] = s_.advertise.empty() ? s_.bind_host + ":" + std::to_string(s_.port) : s_.advertise;
    ident.addrs.erase(j->from);
    std::erase_if(ident.addrs, [&](const auto& kv) { return !ident.peers.count(kv.first); });
    value reply = make_join_reply(s_.id, s_.priv, *j, ident);
    {
      std::lock_guard lk(mu_);
      if (auto k = crypto::rsa_key::from_public_pem(j->pub_pem)) keys_.insert_or_assign(j->from, std::move(*k));
      learned_[j->from] = j->addr;
    }
    // Other peers record the new member (a shared dir already has the file). local: then
    // the share has no peers/<J>.pub yet.
    broadcast_all(msg::join{j->from, j->pub_pem, j->addr, s_.local_copy});
    watch_cv_.notify_all();
    spdlog::info("master {} joined the cluster through this master ({} members)", who, ident.peers.size());
    if (s_.on_joined) s_.on_joined(j->from, j->addr);
    return reply;
  }

  void broadcast_all(const std::string& type, const value& body) {
    std::vector<std::shared_ptr<link>> wake;
    {
      std::lock_guard lk(mu_);
      for (auto& [a, l] : links_) {
        bool w = false;
        enqueue(*l, type, body, w);
        if (w) wake.push_back(l);
      }
    }
    for (auto& l : wake) poke(l);
  }
  void broadcast_all(const peer_msg& m) {
    auto e = encode(m);
    broadcast_all(e.type, e.body);
  }

  // A message refused at decode (peer_messages.hpp): logged, rate-limited.
  void refuse_message(const std::string& from, const std::string& type, const std::string& why) {
    if (auto n = refused_log_.hit())
      spdlog::warn("cluster message '{}' from {} refused: {}{}", type, from, why,
                   n > 1 ? " (" + std::to_string(n) + " refused since the last such line)" : std::string());
  }

  // Membership messages (lane membership, peer_messages.hpp) the bus handles itself; false
  // for the others (the handler's).
  bool on_membership(const std::string& from, const peer_message& m) {
    auto k = kind_of(m.type);
    if (!k || lane_of(*k) != peer_lane::membership) return false;
    std::string why;
    auto d = decode(m, why);
    if (!d) {
      refuse_message(from, m.type, why);
      return true;
    }
    if (auto* j = std::get_if<msg::join>(&*d)) on_join_note(from, *j);
    else if (auto* l = std::get_if<msg::leave>(&*d)) on_leave(from, *l);
    return true;
  }

  void on_join_note(const std::string& from, const msg::join& j) {
    const std::string& id = j.id;
    if (id == s_.id) return;  // this master's own join (it joined through `from`)
    bool readmitted = false;
    if (!valid_peer_id(id) || !crypto::rsa_key::from_public_pem(j.pub)) {
      spdlog::warn("cluster join note from {} malformed; ignored", from);
      return;
    }
    // A shared directory has the file already (the accepting peer wrote it); writing it
    // again from a late note could bring back a peer removed meanwhile. Only a local
    // copy records it.
    if (s_.local_copy || j.local) {
      if (auto r = ensure_peer_key(s_.pki_dir, id, j.pub); !r) {
        spdlog::error("cluster join note from {}: cannot record peers/{}.pub: {}", from, id, r.error().message());
        return;
      }
    }
    {
      std::lock_guard lk(mu_);
      if (!j.addr.empty() && j.addr.size() <= 300) learned_[id] = j.addr;
      readmitted = removed_.erase(id) > 0;  // joined again through a member: readmitted
      warned_revived_.erase(id);
    }
    if (readmitted) save_removed();
    watch_cv_.notify_all();
    spdlog::info("master {} joined the cluster (through {})", id, from);
  }

  void on_leave(const std::string& from, const msg::leave& m) {
    const std::string& id = m.id;
    if (!valid_peer_id(id) || id == from) return;
    if (id == s_.id) {
      spdlog::warn("cluster peer {} removed this master from the cluster", from);
      return;
    }
    (void)util::remove_file(s_.pki_dir / "peers" / (id + ".pub"));
    watch_cv_.notify_all();
    spdlog::info("master {} was removed from the cluster (by {})", id, from);
  }

  value on_msg(const value& body, const std::string& peer) {
    auto lid = std::string(wire::get_text(body, "link").value_or(""));
    std::shared_ptr<crypto::crypticle> key;
    std::uint64_t seq = 0;
    std::string from;
    {
      std::lock_guard lk(mu_);
      auto it = inbound_.find(lid);
      if (it == inbound_.end()) return value{{"error", "unknown link"}};
      key = it->second.key;
      seq = it->second.next_seq;
      from = it->second.from;
    }
    std::string why;
    auto msgs = open_batch(*key, body, seq, why);
    if (!msgs) {
      refuse_once(peer, from + ": " + why);
      return value{{"error", why}};
    }
    {
      std::lock_guard lk(mu_);
      auto it = inbound_.find(lid);
      if (it == inbound_.end()) return value{{"error", "unknown link"}};
      it->second.next_seq = seq + 1;
    }
    for (const auto& m : *msgs) {
      try {
        if (on_membership(from, m)) continue;
        handler_(from, m.type, m.body);
      } catch (const std::exception& e) {
        spdlog::error("cluster message {} from {} failed: {}", m.type, from, e.what());
      }
    }
    return seal_ack(*key, seq);
  }
};

peer_bus::peer_bus(asio::io_context& io, bus_settings s, handler h, peer_event ev)
    : impl_(std::make_shared<impl>(io, std::move(s), std::move(h), std::move(ev))) {}

peer_bus::~peer_bus() { join(); }

result<void> peer_bus::start() {
  auto self = impl_;
  self->server_ = std::make_unique<transport::req_server>(
      self->io_, transport::endpoint{self->s_.bind_host, self->s_.port, {}}, self->s_.topt,
      [w = std::weak_ptr<impl>(self)](value body, std::shared_ptr<transport::responder> r) {
        auto s = w.lock();
        if (!s || s->stopping_) return;
        const auto cmd = wire::get_text(body, "cmd").value_or("");
        if (cmd == "cluster/discover" || cmd == "cluster/join") return s->admit_join(std::move(body), std::move(r));
        asio::post(s->work_, [s, body = std::move(body), r] {
          value reply = s->on_request(body, r->peer().address);
          // A verified hello (or a message on a known link) lifts the transport's
          // pre-authentication limits for this connection.
          const auto c = wire::get_text(body, "cmd").value_or("");
          if ((c == "cluster/hello" || c == "cluster/msg") && !(reply.is_object() && wire::find(reply, "error")))
            r->mark_authenticated();
          r->reply(std::move(reply));
        });
      });
  if (auto r = self->server_->start(); !r) return r;
  self->bound_ = self->server_->bound_port();
  if (self->s_.advertise.empty()) self->s_.advertise = self->s_.bind_host + ":" + std::to_string(self->bound_);
  self->load_removed();
  self->refresh_keys();
  self->watcher_ = std::thread([self] { self->watcher_loop(); });
  for (const auto& p : self->s_.peers) self->add_link(p);
  return {};
}

void peer_bus::stop() {
  auto self = impl_;
  if (!self || self->stopping_.exchange(true)) return;
  self->watch_cv_.notify_all();
  if (self->server_) self->server_->stop();
  std::vector<std::shared_ptr<link>> all;
  {
    std::lock_guard lk(self->mu_);
    for (auto& [a, l] : self->links_)
      if (self->apply_external(*l, l->fsm.resume(link_event::make(link_event::kind::stop)))) all.push_back(l);
  }
  for (auto& l : all) self->poke(l);
}

void peer_bus::join() {
  stop();
  auto self = impl_;
  if (self->watcher_.joinable()) self->watcher_.join();
  self->work_.join();
  self->join_work_.join();
}

std::uint16_t peer_bus::bound_port() const { return impl_->bound_; }

void peer_bus::broadcast(const std::string& type, const value& body) {
  std::vector<std::shared_ptr<link>> wake;
  {
    std::lock_guard lk(impl_->mu_);
    for (auto& [a, l] : impl_->links_) {
      bool w = false;
      impl_->enqueue(*l, type, body, w);
      if (w) wake.push_back(l);
    }
  }
  for (auto& l : wake) impl_->poke(l);
}

void peer_bus::broadcast(const peer_msg& m) {
  auto e = encode(m);
  broadcast(e.type, e.body);
}

bool peer_bus::send(const std::string& peer_id, const std::string& type, const value& body) {
  std::shared_ptr<link> target;
  bool wake = false;
  {
    std::lock_guard lk(impl_->mu_);
    for (auto& [a, l] : impl_->links_)
      if (l->fsm.peer_id() == peer_id && l->fsm.sendable()) {
        target = l;
        break;
      }
    if (!target || !impl_->enqueue(*target, type, body, wake)) return false;
  }
  if (wake) impl_->poke(target);
  return true;
}

bool peer_bus::send(const std::string& peer_id, const peer_msg& m) {
  auto e = encode(m);
  return send(peer_id, e.type, e.body);
}

value peer_bus::status() const {
  value out = value::array();
  std::lock_guard lk(impl_->mu_);
  for (const auto& [a, l] : impl_->links_) {
    const auto& f = l->fsm;
    if (f.status() == link_status::self || f.status() == link_status::duplicate) continue;
    value e = value::object();
    e["id"] = f.peer_id();
    e["address"] = l->addr;
    e["state"] = std::string(to_string(f.status()));
    e["queued"] = f.queued();
    e["sent"] = f.sent();
    e["dropped"] = f.dropped();
    e["last_error"] = f.last_error();
    out.push_back(std::move(e));
  }
  return out;
}

void peer_bus::drop_peer(const std::string& id) { impl_->drop_peer(id, "removed on this master"); }

std::vector<std::string> peer_bus::linked_peers() const {
  std::lock_guard lk(impl_->mu_);
  return {impl_->up_ids_.begin(), impl_->up_ids_.end()};
}

// ---- joiner side --------------------------------------------------------------------------------
namespace {
struct join_run {
  const join_settings* s;
  std::string* why;
  result<bool> out = false;
};

awaitable<void> join_co(join_run* run) {
  const join_settings& s = *run->s;
  std::string& why = *run->why;
  auto ex = co_await asio::this_coro::executor;
  cluster_pin pin;
  pin.fingerprint = s.fingerprint;
  std::vector<std::string> skipped;
  for (const auto& addr : s.peers) {
    // A shared cluster_pki_dir may get its cluster.pub while we try the peers (a cluster
    // bootstrapping): read it for every attempt.
    if (auto shared = util::read_file(s.pki_dir / "cluster.pub")) pin.shared_pub_pem = *shared;
    auto a = config::parse_master_address(addr, s.default_port);
    if (!a) {
      skipped.push_back(addr + ": cannot parse the address");
      continue;
    }
    auto client = transport::req_client::create(
        ex, transport::endpoint{a->host, static_cast<std::uint16_t>(a->port), {}}, s.topt);
    const std::string nonce = crypto::uuid4_hex();
    auto r = co_await client->request(
        make_discover(s.cluster_id, s.id, s.priv.public_pem(), s.advertise, s.priv, nonce, unix_now()), s.timeout);
    if (!r) {
      skipped.push_back(addr + ": " + r.error().message());
      client->close();
      continue;
    }
    if (auto e = wire::get_text(*r, "error"); e && (e->starts_with("not a member") || *e == "a discover from myself")) {
      skipped.push_back(addr + ": " + std::string(*e));
      client->close();
      continue;
    }
    auto dr = verify_discover_reply(*r, s.id, nonce, pin, why);
    if (!dr) {
      why = "discover via " + addr + ": " + why;
      client->close();
      run->out = result<bool>(boost::system::in_place_error, boost::system::errc::make_error_code(boost::system::errc::permission_denied));
      co_return;
    }
    // A readable shared cluster_pki_dir lists the current members: a master that still
    // holds cluster.pem but whose peers/<id>.pub is gone (removed) is not asked to join
    // us, and learns nothing (docs/security.md section 6).
    if (!pin.shared_pub_pem.empty()) {
      auto listed = peer_key(s.pki_dir, dr->from);
      auto answered = crypto::rsa_key::from_public_pem(dr->peer_pub_pem);
      if (!listed || !answered || listed->public_pem() != answered->public_pem()) {
        spdlog::warn("cluster join: {} answered via {} but is not a current member (cluster_pki_dir/peers/{}.pub {}); "
                     "not joining through it",
                     dr->from, addr, dr->from, listed ? "holds another key" : "is missing");
        skipped.push_back(addr + ": " + dr->from + " is not a current member (not in cluster_pki_dir/peers)");
        client->close();
        continue;
      }
    }
    auto jr = co_await client->request(make_join(s.id, s.priv, *dr, s.secret.value_or("")), s.timeout);
    client->close();
    if (!jr) {
      why = "join via " + addr + ": " + jr.error().message();
      run->out = result<bool>(boost::system::in_place_error, jr.error());
      co_return;
    }
    auto ident = verify_join_reply(*jr, s.id, s.priv, *dr, why);
    if (!ident) {
      why = "join via " + addr + " (" + dr->from + "): " + why;
      run->out = result<bool>(boost::system::in_place_error, boost::system::errc::make_error_code(boost::system::errc::permission_denied));
      co_return;
    }
    if (auto ir = install_identity(s.pki_dir, *ident, why); !ir) {
      why = "installing the cluster identity into " + s.pki_dir.string() + ": " + why;
      run->out = result<bool>(boost::system::in_place_error, ir.error());
      co_return;
    }
    if (s.member_addrs) {
      for (const auto& [id, a] : ident->addrs)
        if (id != s.id) s.member_addrs->push_back(a);
    }
    if (s.joined_via) *s.joined_via = dr->from;
    spdlog::info("joined cluster {} through {} ({}): {} members", s.cluster_id, dr->from, addr, ident->peers.size());
    run->out = true;
    co_return;
  }
  why.clear();
  for (const auto& x : skipped) why += (why.empty() ? "" : "; ") + x;
  run->out = false;
}
}  // namespace

result<bool> join_cluster(const join_settings& s, std::string& why) {
  asio::io_context io;
  join_run run{&s, &why};
  asio::co_spawn(io, join_co(&run), asio::detached);
  io.run();
  if (!run.out) spdlog::critical("cluster join refused: {}", why);
  else if (!*run.out) spdlog::warn("cluster join: no configured peer is a reachable member ({})", why);
  return run.out;
}

}  // namespace sylvite::cluster
