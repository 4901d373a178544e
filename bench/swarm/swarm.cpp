// sylvite-swarm engine (see swarm.hpp). What one simulated minion does, as a Salt 3008
// minion with `transport: tcp` (or `zeromq`) would:
//   1. sign in (clear `_auth`, protocol v3) through the shared request pool (zeromq with
//      --zmq-auth-own-socket: a REQ socket of its own for the sign-in, without a monitor,
//      as Salt's AsyncAuth; at most as many at once as this process has descriptors for;
//      a sign-in queued in the pool counts its auth_timeout from the queue); a pending
//      answer waits accept_wait and asks again; a timeout (auth_timeout) is counted and
//      resent at once, auth_tries times, then accept_wait (Salt's sign_in + "retry");
//      connection refused (master down) waits reconnect_delay;
//   2. connect the publish port, send the hello (AES {id, tok}); zeromq: a SUB socket
//      (core/transport/zmq.hpp), no hello;
//   3. for every publish: decrypt, check the target (glob/list), de-dup the jid, answer
//      test.ping / test.echo / cmd.run (fixed text, no process) / saltutil.find_job with a
//      v3 `_return` (session key, nonce, ts, tok) on its pool connection; `bench.hold` is
//      received but not answered (return-ingest jobs); saltutil.refresh_pillar first
//      fetches the minion's pillar with a real `_pillar` request (send_private: the
//      reply's one-shot key OAEP-decrypted, the master's signature and the nonce checked,
//      as minion/master_channel.cpp pillar_request), then returns True; test.sleep
//      returns True after its `length` seconds (a timer, no thread);
//      a request (return or `_pillar`) refused or dropped because the master is down is
//      sent again every reconnect_delay within return_timeout (Salt's REQ socket keeps it
//      queued until the master is back); a reply the minion cannot decrypt (a master that
//      no longer knows its session key answers "bad load") makes it sign in again and send
//      once more, as Salt's AsyncReqChannel._crypted_transfer does;
//   4. publish connection lost -> wait reconnect_delay, sign in again, reconnect (the auth
//      storm after a master restart). zeromq: libzmq reconnects the SUB socket by itself
//      and the minion does not notice the restart; the first publish it cannot decrypt
//      (new AES key) makes it sign in again and then handle that publish, as Salt's
//      AsyncPubChannel._decode_payload does (with --zmq-connect-events a lost connection
//      is noticed and handled as with tcp).
// Timings are wall-clock ns (CLOCK_REALTIME) so the harness can compare them with the
// publish time encoded in the jid. The simulation shortcut: identical publish bytes are
// decrypted once per io thread (every minion shares the master AES key, so the result is
// the same); disable with --no-publish-cache.
#include "bench/swarm/swarm.hpp"

#include <fnmatch.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <unordered_map>

#include "bench/swarm/keys.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/transport/context_pool.hpp"
#include "core/transport/transport.hpp"
#include "core/transport/zmq.hpp"
#include "core/wire/frame.hpp"
#include "minion/auth.hpp"
#include "minion/channel.hpp"

namespace sylvite::bench {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using std::chrono::milliseconds;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
milliseconds ms_of(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000.0)); }

enum class mstate : int { idle = 0, authenticating, pending, connecting, ready, stopped };

struct creds_t {
  std::shared_ptr<const crypto::crypticle> aes;
  std::shared_ptr<const crypto::crypticle> session;
  std::shared_ptr<const crypto::rsa_key> master_pub;  // verifies `_pillar` replies (send_private)
  int publish_port = 0;
};

struct sim_minion {
  std::size_t index = 0;  // position in this process
  std::string id;
  std::unique_ptr<minion::auth_client> auth;
  minion::request_identity who;
  std::shared_ptr<transport::req_client> req;  // one of the pool
  std::optional<asio::strand<asio::io_context::executor_type>> strand;

  std::mutex creds_mu;
  creds_t creds;
  std::atomic<int> state{0};
  std::atomic<std::uint32_t> cycle{0};      // sign-in cycles completed (1 after the first)
  std::atomic<std::int64_t> auth_start_ns{0};
  std::atomic<std::int64_t> ready_ns{0};
  std::atomic<std::int64_t> last_attempt_ns{0};  // start of the latest sign-in attempt
  std::atomic<std::int64_t> auth_ok_ns{0};       // accepted reply verified (before the publish connect)
  std::atomic<std::uint32_t> auth_attempts{0};
  std::atomic<std::uint32_t> auth_timeouts{0};
  std::atomic<std::uint32_t> pendings{0};
  std::deque<std::string> recent_jids;  // strand only
  std::shared_ptr<tcp::socket> pub;     // strand only (tcp)
  // zeromq, strand only: the SUB client, its generation (handlers of an older client are
  // ignored), the lifecycle's wake-up timer, why it woke, and the publishes received with
  // a stale AES key (handled again after the new sign-in; Salt decodes the same payload
  // after authenticate()).
  std::shared_ptr<transport::pub_client> zpub;
  std::uint32_t zgen = 0;
  std::optional<asio::steady_timer> wake;
  bool zclosed = false;
  bool reauth_wanted = false;
  std::vector<std::pair<wire::value, std::int64_t>> stale;
  wire::value grains;  // sent with `_pillar` (the master renders the pillar for them)

  creds_t get_creds() {
    std::lock_guard lk(creds_mu);
    return creds;
  }
};

struct job_rec {
  std::string fun;
  // per minion: index, receive time, ack time (0 = none), ok
  struct entry {
    std::uint32_t idx;
    std::int64_t recv_ns;
    std::int64_t ack_ns;
    std::int64_t send_ns;
    bool ok;
    bool done;
  };
  std::vector<entry> entries;
  std::unordered_map<std::uint32_t, std::size_t> pos;
  std::size_t acked = 0, failed = 0;
};

struct counters_t {
  std::atomic<std::uint64_t> auth_attempts{0}, auth_timeouts{0}, auth_conn_errors{0}, auth_failed{0},
      auth_rejected{0}, auth_pending{0}, auth_accepted{0};
  std::atomic<std::uint64_t> pub_connect_failed{0}, pub_lost{0};
  std::atomic<std::uint64_t> publishes{0}, publish_dropped{0}, publish_not_targeted{0}, publish_dups{0},
      publish_reauth{0}, publish_cache_hits{0};
  std::atomic<std::uint64_t> returns_sent{0}, returns_ok{0}, returns_failed{0}, returns_retried{0},
      returns_bad_reply{0}, returns_reauth{0}, returns_reauth_failed{0}, returns_conn_waits{0}, held{0};
  // saltutil.refresh_pillar: `_pillar` fetches that decoded (ok) or not (failed), re-auths
  // asked by a reply without `key`, and the top-level keys of the pillars received.
  std::atomic<std::uint64_t> pillar_ok{0}, pillar_failed{0}, pillar_reauth{0}, pillar_keys{0};
};

struct ingest_job {
  std::vector<std::string> jids;
  std::vector<std::size_t> minions;  // indices of the minions signed in when the ingest started
  std::size_t total = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0}, ok{0}, failed{0};
  std::mutex mu;
  std::vector<std::int64_t> lat_ns;
  std::int64_t t0 = 0;
  std::atomic<std::int64_t> t1{0};
  std::promise<void> finished;
  std::atomic<std::size_t> workers_left{0};
};

class swarm {
 public:
  explicit swarm(swarm_options o) : opt_(std::move(o)), ios_(std::max(1u, opt_.threads)) {}

  int run();

 private:
  // setup
  bool prepare();
  // lifecycle
  awaitable<void> lifecycle(sim_minion* m);
  awaitable<bool> sign_in(sim_minion* m);
  std::shared_ptr<transport::req_client> auth_channel(sim_minion* m);  // zeromq: a sign-in's own REQ client
  // zeromq: sign-ins holding a REQ socket at once are capped by the descriptors this process
  // may hold (the lab's 20,000): a minion beyond the cap starts its sign-in when one ends.
  awaitable<void> acquire_auth_slot();
  void release_auth_slot();
  std::mutex auth_slots_mu_;
  std::size_t auth_slots_free_ = 0;
  std::size_t auth_slots_max_ = 0;
  std::deque<std::function<void()>> auth_slot_waiters_;
  awaitable<bool> connect_pub(sim_minion* m);
  awaitable<void> read_pub(sim_minion* m, std::shared_ptr<tcp::socket> sock);
  awaitable<void> lifecycle_zmq(sim_minion* m);
  awaitable<bool> connect_pub_zmq(sim_minion* m);
  void wake(sim_minion* m);
  awaitable<void> sleep_for(milliseconds d);
  // replay: a publish received earlier with a stale key, after the new sign-in (not
  // counted again; a stale key now is a drop, not another sign-in).
  void on_publish(sim_minion* m, const wire::value& body, std::int64_t recv_ns, bool replay = false);
  awaitable<void> send_return(sim_minion* m, wire::value load, std::string jid);
  // saltutil.refresh_pillar: `_pillar` (send_private), counted, then the return (True).
  awaitable<void> refresh_pillar(sim_minion* m, wire::value ret, std::string jid);
  awaitable<bool> fetch_pillar(sim_minion* m);
  // test.sleep: the return (True) after the delay.
  awaitable<void> delayed_return(sim_minion* m, wire::value ret, std::string jid, milliseconds d);
  // One try of an AES request on the minion's pool connection, as Salt's request channel:
  // refused / dropped (master down) -> sent again after reconnect_delay until return_timeout
  // has passed; then errc::timeout.
  awaitable<result<wire::value>> request_try(sim_minion* m, const wire::value& body);
  // A reply that did not decrypt with `old` (the master lost the session key): have the minion sign in
  // again (zeromq: wake its lifecycle; tcp: drop its publish connection, whose loss makes it
  // sign in) and wait until it holds a new session key (bounded by return_timeout).
  awaitable<bool> reauth(sim_minion* m, std::shared_ptr<const crypto::crypticle> old);
  std::shared_ptr<const crypto::rsa_key> master_key_of(const std::string& pem);
  std::mutex master_keys_mu_;
  std::unordered_map<std::string, std::shared_ptr<const crypto::rsa_key>> master_keys_;  // PEM -> key
  awaitable<void> ingest_worker(std::shared_ptr<ingest_job> job);
  // control
  void control_loop();
  json status_json(std::int64_t since_ns);
  json job_json(const std::string& jid, bool with_entries);
  json auth_json();
  void write_report();
  void emit(const json& j);
  bool targeted(const sim_minion& m, const wire::value& load) const;

  swarm_options opt_;
  transport::kind kind_ = transport::kind::tcp;
  transport::zmq_options zopt_;
  transport::zmq_options req_zopt_;  // request sockets: with connect events
  // One io_context per io thread, each run by that thread alone: a minion's strand, its
  // publish socket and its pool connection share one (pool_[k] on ios_[k % n], minion i on
  // the context of pool_[i % pool]), so a request and its reply stay on one thread.
  transport::context_pool ios_;
  asio::io_context& ctx(std::size_t k) { return ios_.at(k); }
  std::vector<std::unique_ptr<sim_minion>> minions_;
  std::vector<std::shared_ptr<transport::req_client>> pool_;
  std::vector<asio::ip::address> sources_;
  std::unordered_map<std::string, std::size_t> by_id_;
  std::mutex jobs_mu_;
  std::unordered_map<std::string, job_rec> jobs_;
  std::vector<std::string> job_order_;
  counters_t c_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  std::string cmd_output_;
  std::mutex out_mu_;
  std::int64_t started_ns_ = 0;
};

bool swarm::prepare() {
  if (auto k = transport::parse_kind(opt_.transport)) {
    kind_ = *k;
  } else {
    spdlog::critical("unknown --transport {} (tcp or zeromq)", opt_.transport);
    return false;
  }
  if (kind_ == transport::kind::zeromq && !opt_.source_addrs.empty()) {
    spdlog::critical("--source-addrs is tcp only");
    return false;
  }
  // zeromq, as a minion would set it, except: a fixed reconnect interval (the swarm's
  // reconnect_delay, like the tcp swarm's) and no monitor socket per client unless asked.
  zopt_.connect_events = opt_.zmq_connect_events;
  zopt_.client_engine = transport::parse_engine(opt_.zmq_engine).value_or(transport::zmq_engine::native);
  zopt_.recon_default_ms = static_cast<int>(opt_.reconnect_delay * 1000.0);
  zopt_.recon_max_ms = zopt_.recon_default_ms;
  zopt_.recon_randomize = false;
  // File descriptors: one per publish connection plus the pool and a margin. zeromq: 4 per
  // minion: the TCP connection and the SUB socket's mailbox (eventfd); the swarm's SUB
  // sockets run without a socket monitor (connect_events off); a request client opens up to 8 REQ sockets
  // (TCP connection + mailbox + monitor's two each).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  const std::size_t per_minion = kind_ == transport::kind::tcp ? 1 : (opt_.zmq_connect_events ? 4 : 2);
  const std::size_t need = opt_.count * per_minion + (kind_ == transport::kind::tcp ? opt_.pool : opt_.pool * 32) + 64;
  if (need > rl.rlim_cur || opt_.count * per_minion > 19000) {
    spdlog::critical("{} minions ({}) need about {} descriptors; this process may hold {} (lab limit 20000 per "
                     "process, keep one swarm under 19,000 sockets): run several swarms with --first-index",
                     opt_.count, opt_.transport, need, static_cast<unsigned long long>(rl.rlim_cur));
    return false;
  }
  if (kind_ == transport::kind::zeromq && opt_.zmq_auth_own_socket) {
    // Each sign-in socket: its TCP descriptor and its mailbox (no monitor).
    const std::size_t used = opt_.count * per_minion + opt_.pool * 32 + 64;
    const std::size_t room = std::min<std::size_t>(rl.rlim_cur, 19000);
    auth_slots_max_ = std::max<std::size_t>(64, room > used ? (room - used) / 2 : 0);
    auth_slots_free_ = auth_slots_max_;
  }
  for (const auto& s : opt_.source_addrs) {
    boost::system::error_code ec;
    auto a = asio::ip::make_address(s, ec);
    if (ec) {
      spdlog::critical("bad --source-addr {}", s);
      return false;
    }
    sources_.push_back(a);
  }
  if (opt_.state_dir.empty()) {
    opt_.state_dir = std::filesystem::temp_directory_path() / ("sylvite-swarm-" + std::to_string(::getpid()));
  }
  cmd_output_.assign(opt_.cmd_output_bytes, 'x');
  for (std::size_t i = 0; i < cmd_output_.size(); i += 64) cmd_output_[i] = '\n';

  // Pool of request connections (lazy connect on first request). zeromq: with connect
  // events (a monitor per REQ socket; few sockets) so that a sign-in while the master is
  // down fails at once (refused -> wait reconnect_delay) as with tcp, instead of waiting
  // auth_timeout in libzmq's queue: the auth storm then measures the master alike.
  req_zopt_ = zopt_;
  req_zopt_.connect_events = true;
  for (std::size_t k = 0; k < std::max<std::size_t>(1, opt_.pool); ++k) {
    transport::endpoint ep{opt_.master, opt_.ret_port, {}};
    transport::options to;
    to.connect_timeout = milliseconds(3000);
    pool_.push_back(transport::make_req_client(kind_, ctx(k).get_executor(), ep, to, req_zopt_));
  }

  minions_.resize(opt_.count);
  for (std::size_t i = 0; i < opt_.count; ++i) {
    auto m = std::make_unique<sim_minion>();
    m->index = i;
    std::string num = std::to_string(opt_.first_index + i);
    if (num.size() < opt_.id_width) num.insert(0, opt_.id_width - num.size(), '0');
    m->id = opt_.id_prefix + num;
    m->req = pool_[i % pool_.size()];
    m->strand.emplace(asio::make_strand(ctx(i % pool_.size())));
    // A few grains a pillar top file or sls can match on: the id, the usual OS grains, the
    // index in the swarm and a role cycling over four values.
    m->grains = wire::value::object();
    m->grains["id"] = m->id;
    m->grains["os"] = "Debian";
    m->grains["os_family"] = "Debian";
    m->grains["osfinger"] = "Debian-12";
    m->grains["kernel"] = "Linux";
    m->grains["swarm_index"] = static_cast<std::int64_t>(opt_.first_index + i);
    static const char* const roles[] = {"web", "db", "cache", "worker"};
    m->grains["roles"] = wire::value::array({wire::value(roles[(opt_.first_index + i) % 4])});
    by_id_[m->id] = i;
    minions_[i] = std::move(m);
  }

  // Keys (cached on disk) and auth clients (X9.31 token = one private op each), in parallel.
  std::atomic<std::size_t> dir_errors{0};
  auto per_key = [&](std::size_t i, const crypto::rsa_key& key) {
    sim_minion& m = *minions_[i];
    minion::auth_settings s;
    s.id = m.id;
    s.pki_dir = opt_.state_dir / m.id;
    s.keysize = opt_.keysize;
    s.acceptance_wait_time = static_cast<int>(opt_.accept_wait);
    std::error_code ec;
    std::filesystem::create_directories(s.pki_dir, ec);
    if (ec) dir_errors++;
    m.auth = std::make_unique<minion::auth_client>(std::move(s), key);
    m.who = minion::request_identity{m.id, m.auth->tok(), "OAEP-SHA1", "PKCS1v15-SHA1"};
  };
  key_load_stats ks;
  unsigned kt = opt_.keygen_threads ? opt_.keygen_threads : std::max(1u, std::thread::hardware_concurrency());
  auto keys = load_keys(opt_.keys_dir, opt_.first_index, opt_.count, opt_.keysize, kt, &ks, per_key);
  if (!keys) {
    spdlog::critical("cannot load or generate keys in {}: {}", opt_.keys_dir.string(), keys.error().message());
    return false;
  }
  if (dir_errors) {
    spdlog::critical("cannot create per-minion directories under {}", opt_.state_dir.string());
    return false;
  }
  json j = {{"event", "keys"},      {"loaded", ks.loaded}, {"generated", ks.generated},
            {"seconds", ks.seconds}, {"count", opt_.count}, {"state_dir", opt_.state_dir.string()},
           {"auth_slots", auth_slots_max_}};
  emit(j);
  return true;
}

awaitable<void> swarm::sleep_for(milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(asio::as_tuple(use_awaitable));
}

std::shared_ptr<transport::req_client> swarm::auth_channel(sim_minion* m) {
  if (kind_ != transport::kind::zeromq || !opt_.zmq_auth_own_socket) return nullptr;
  transport::endpoint ep{opt_.master, opt_.ret_port, {}};
  transport::options to;
  to.connect_timeout = milliseconds(3000);
  // No connect monitor, as Salt's RequestClient: while the master is down libzmq re-dials
  // and the request waits in its queue until auth_timeout.
  return transport::make_req_client(kind_, m->strand->get_inner_executor(), ep, to, zopt_);
}

awaitable<void> swarm::acquire_auth_slot() {
  struct waiter {
    explicit waiter(asio::any_io_executor ex) : timer(ex, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool handed = false;  // on the minion's strand
  };
  auto ex = co_await asio::this_coro::executor;  // the minion's strand
  auto w = std::make_shared<waiter>(ex);
  {
    std::lock_guard lk(auth_slots_mu_);
    if (auth_slots_free_ > 0) {
      --auth_slots_free_;
      co_return;
    }
    auth_slot_waiters_.push_back([w, ex] {
      asio::post(ex, [w] {
        w->handed = true;
        w->timer.cancel();
      });
    });
  }
  while (!w->handed && !stopping_) co_await w->timer.async_wait(asio::as_tuple(use_awaitable));
}

void swarm::release_auth_slot() {
  std::function<void()> next;
  {
    std::lock_guard lk(auth_slots_mu_);
    if (auth_slot_waiters_.empty()) {
      ++auth_slots_free_;
      return;
    }
    next = std::move(auth_slot_waiters_.front());
    auth_slot_waiters_.pop_front();
  }
  next();  // the slot passes to the oldest waiter
}

awaitable<bool> swarm::sign_in(sim_minion* m) {
  m->state = static_cast<int>(mstate::authenticating);
  m->auth_start_ns = now_ns();
  int tries = 0;
  int timeouts_in_row = 0;
  // zeromq: Salt's AsyncAuth.sign_in opens a clear request channel of its own (one REQ
  // socket, replaced after a timeout) and closes it when done. Through the shared pool's
  // few REQ sockets a sign-in would instead spend its auth_timeout queued in this process
  // during a storm, and the master's work on it would be wasted: no real minion does that.
  const bool own_socket = kind_ == transport::kind::zeromq && opt_.zmq_auth_own_socket;
  if (own_socket) co_await acquire_auth_slot();
  std::shared_ptr<transport::req_client> own = auth_channel(m);
  transport::req_client* channel = own ? own.get() : m->req.get();
  while (!stopping_) {
    m->last_attempt_ns = now_ns();
    auto req = m->auth->make_request();
    m->auth_attempts++;
    c_.auth_attempts++;
    ++tries;
    const milliseconds timeout = ms_of(opt_.auth_timeout);
    auto r = co_await channel->request(req.body, timeout);
    if (!r) {
      if (r.error() == transport::errc::timeout) {
        m->auth_timeouts++;
        c_.auth_timeouts++;
        // Salt's AsyncAuth.sign_in: the request is sent auth_tries times (auth_timeout
        // each); then "retry": sleep acceptance_wait_time before the next round.
        if (++timeouts_in_row >= std::max(1, opt_.auth_tries)) {
          timeouts_in_row = 0;
          const milliseconds d = ms_of(opt_.accept_wait);
          co_await sleep_for(d);
        }
      } else {
        c_.auth_conn_errors++;
        const milliseconds d = ms_of(opt_.reconnect_delay);
        co_await sleep_for(d);
      }
      continue;
    }
    timeouts_in_row = 0;
    auto res = m->auth->handle_reply(req, *r);
    switch (res.status) {
      case minion::auth_status::accepted: {
        auto aes = crypto::crypticle::from_key_string(res.creds.aes);
        auto sess = crypto::crypticle::from_key_string(res.creds.session);
        if (!aes || !sess) {
          c_.auth_failed++;
          break;
        }
        {
          std::lock_guard lk(m->creds_mu);
          m->creds.aes = std::make_shared<const crypto::crypticle>(std::move(*aes));
          m->creds.session = std::make_shared<const crypto::crypticle>(std::move(*sess));
          m->creds.publish_port = res.creds.publish_port;
          m->creds.master_pub = master_key_of(res.creds.master_pub);
        }
        c_.auth_accepted++;
        m->auth_ok_ns = now_ns();
        if (own) {
          own->close();
          release_auth_slot();
        }
        co_return true;
      }
      case minion::auth_status::pending: {
        m->pendings++;
        c_.auth_pending++;
        m->state = static_cast<int>(mstate::pending);
        const milliseconds d = ms_of(opt_.accept_wait);
        co_await sleep_for(d);
        m->state = static_cast<int>(mstate::authenticating);
        continue;
      }
      case minion::auth_status::rejected:
      case minion::auth_status::rejected_retry:
        c_.auth_rejected++;
        break;
      default:
        c_.auth_failed++;
        spdlog::warn("{}: sign-in failed: {}", m->id, res.message);
        break;
    }
    const milliseconds d = ms_of(std::max(opt_.accept_wait, 1.0));
    co_await sleep_for(d);
  }
  if (own) {
    own->close();
    release_auth_slot();
  }
  co_return false;
}

awaitable<bool> swarm::connect_pub(sim_minion* m) {
  m->state = static_cast<int>(mstate::connecting);
  auto ex = co_await asio::this_coro::executor;
  auto sock = std::make_shared<tcp::socket>(ex);
  auto creds = m->get_creds();
  const std::uint16_t port = opt_.pub_port ? opt_.pub_port : static_cast<std::uint16_t>(creds.publish_port);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(opt_.master, ec);
  if (ec) {
    // Named locals only inside co_await (GCC 12 double-destroys temporaries there).
    tcp::resolver res(ex);
    const std::string host = opt_.master, service = std::to_string(port);
    auto [rec, it] = co_await res.async_resolve(host, service, asio::as_tuple(use_awaitable));
    if (rec || it.empty()) co_return false;
    addr = it.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, port);
  sock->open(ep.protocol(), ec);
  if (ec) co_return false;
  if (!sources_.empty()) {
    // Many sockets to one destination: spread over source addresses. IP_BIND_ADDRESS_NO_PORT
    // defers the port choice to connect(), so the 4-tuple (not the source port alone) must
    // be unique; without it bind() reserves ports and setup collapses (lab notes).
    int one = 1;
    ::setsockopt(sock->native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sock->bind(tcp::endpoint(sources_[m->index % sources_.size()], 0), ec);
    if (ec) co_return false;
  }
  auto [cec] = co_await sock->async_connect(ep, asio::as_tuple(use_awaitable));
  if (cec) co_return false;
  sock->set_option(tcp::no_delay(true), ec);
  wire::value hello = minion::make_hello(m->id, m->auth->tok(), *creds.aes);
  wire::value head = wire::value::object();
  auto frame = std::make_shared<std::string>(wire::pack_frame(head, hello));
  auto [wec, n] = co_await asio::async_write(*sock, asio::buffer(*frame), asio::as_tuple(use_awaitable));
  if (wec) co_return false;
  m->pub = sock;
  co_return true;
}

bool swarm::targeted(const sim_minion& m, const wire::value& load) const {
  const std::string tt(wire::get_text(load, "tgt_type").value_or("glob"));
  const wire::value* tgt = wire::find(load, "tgt");
  if (!tgt) return false;
  if (tt == "glob") {
    auto t = wire::as_text(*tgt);
    if (!t) return false;
    std::string pat(*t);
    return ::fnmatch(pat.c_str(), m.id.c_str(), 0) == 0;
  }
  if (tt == "list") {
    if (tgt->is_array()) {
      for (const auto& e : *tgt)
        if (auto s = wire::as_text(e); s && *s == m.id) return true;
      return false;
    }
    if (auto s = wire::as_text(*tgt)) {
      std::string_view v = *s;
      while (!v.empty()) {
        auto c = v.find(',');
        if (v.substr(0, c) == m.id) return true;
        if (c == std::string_view::npos) break;
        v.remove_prefix(c + 1);
      }
    }
    return false;
  }
  return true;  // other target types: the bench only uses globs and lists
}

namespace {
struct publish_cache_entry {
  std::string aes_key;
  std::string body;
  wire::value load;
};
thread_local publish_cache_entry t_cache;
}  // namespace

void swarm::on_publish(sim_minion* m, const wire::value& body, std::int64_t recv_ns, bool replay) {
  if (!replay) c_.publishes++;
  auto creds = m->get_creds();
  if (!creds.aes) return;
  wire::value load;
  auto bytes = wire::as_bytes(body);
  if (opt_.publish_cache && bytes && t_cache.body == *bytes && t_cache.aes_key == creds.aes->key_string()) {
    load = t_cache.load;
    c_.publish_cache_hits++;
  } else {
    auto d = minion::decode_publish(body, *creds.aes, false, nullptr);
    if (d.verdict == minion::publish_verdict::reauth) {
      // Stale AES key: Salt re-authenticates. tcp: the lost publish connection after a
      // restart already drives that, so count and drop. zeromq: sign in again, then handle
      // this publish (once; a stale key after the new sign-in is a drop, as in Salt).
      if (kind_ == transport::kind::zeromq && !replay) {
        c_.publish_reauth++;
        if (m->stale.size() < 16) m->stale.emplace_back(body, recv_ns);
        m->reauth_wanted = true;
        wake(m);
      } else if (replay) {
        c_.publish_dropped++;
      } else {
        c_.publish_reauth++;
      }
      return;
    }
    if (d.verdict != minion::publish_verdict::ok) {
      c_.publish_dropped++;
      return;
    }
    load = std::move(d.load);
    if (opt_.publish_cache && bytes) {
      t_cache.aes_key = creds.aes->key_string();
      t_cache.body.assign(bytes->data(), bytes->size());
      t_cache.load = load;
    }
  }
  if (!wire::find(load, "jid") || !wire::find(load, "fun") || !wire::find(load, "arg")) {
    c_.publish_dropped++;
    return;
  }
  if (!targeted(*m, load)) {
    c_.publish_not_targeted++;
    return;
  }
  std::string jid(wire::get_text(load, "jid").value_or(""));
  if (std::find(m->recent_jids.begin(), m->recent_jids.end(), jid) != m->recent_jids.end()) {
    c_.publish_dups++;
    return;
  }
  m->recent_jids.push_back(jid);
  if (m->recent_jids.size() > 100) m->recent_jids.pop_front();  // minion_jid_queue_hwm
  std::string fun(wire::get_text(load, "fun").value_or(""));
  {
    std::lock_guard lk(jobs_mu_);
    auto [it, fresh] = jobs_.try_emplace(jid);
    if (fresh) {
      it->second.fun = fun;
      job_order_.push_back(jid);
    }
    job_rec& jr = it->second;
    jr.pos[static_cast<std::uint32_t>(m->index)] = jr.entries.size();
    jr.entries.push_back({static_cast<std::uint32_t>(m->index), recv_ns, 0, 0, false, false});
  }
  if (fun == "bench.hold") {
    c_.held++;
    return;
  }
  const wire::value& arg = load["arg"];
  wire::value ret;
  bool success = true;
  int retcode = 0;
  if (fun == "test.ping") {
    ret = true;
  } else if (fun == "test.echo") {
    ret = (arg.is_array() && !arg.empty()) ? arg[0] : wire::value("");
  } else if (fun == "cmd.run") {
    ret = cmd_output_;
  } else if (fun == "saltutil.find_job") {
    ret = wire::value::object();
  } else if (fun == "saltutil.refresh_pillar") {
    ret = true;
  } else if (fun == "test.sleep") {
    ret = true;  // after `length` seconds (a job still running on the minion, e.g. across a master restart)
  } else {
    ret = "'" + fun + "' is not available.";
    success = false;
    retcode = 254;
  }
  wire::value r = wire::value::object();
  r["cmd"] = "_return";
  r["id"] = m->id;
  r["success"] = success;
  r["return"] = std::move(ret);
  r["retcode"] = retcode;
  r["jid"] = jid;
  r["fun"] = fun;
  r["fun_args"] = arg.is_array() ? arg : wire::value::array();
  if (fun == "saltutil.refresh_pillar") {
    asio::co_spawn(*m->strand, refresh_pillar(m, std::move(r), std::move(jid)), asio::detached);
    return;
  }
  if (fun == "test.sleep") {
    double secs = 0;
    if (arg.is_array() && !arg.empty()) {
      if (arg[0].is_number()) {
        secs = arg[0].get<double>();
      } else if (auto t = wire::as_text(arg[0])) {
        secs = std::strtod(std::string(*t).c_str(), nullptr);
      }
    }
    secs = std::clamp(secs, 0.0, 3600.0);
    asio::co_spawn(*m->strand, delayed_return(m, std::move(r), std::move(jid), ms_of(secs)), asio::detached);
    return;
  }
  asio::co_spawn(*m->strand, send_return(m, std::move(r), std::move(jid)), asio::detached);
}

std::shared_ptr<const crypto::rsa_key> swarm::master_key_of(const std::string& pem) {
  if (pem.empty()) return nullptr;
  std::lock_guard lk(master_keys_mu_);
  auto it = master_keys_.find(pem);
  if (it != master_keys_.end()) return it->second;
  auto k = crypto::rsa_key::from_public_pem(pem);
  if (!k) {
    spdlog::warn("cannot parse the master's public key: {}", k.error().message());
    return nullptr;
  }
  auto p = std::make_shared<const crypto::rsa_key>(std::move(*k));
  master_keys_.emplace(pem, p);
  return p;
}

awaitable<result<wire::value>> swarm::request_try(sim_minion* m, const wire::value& body) {
  const auto deadline = std::chrono::steady_clock::now() + ms_of(opt_.return_timeout);
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) co_return make_error_code(transport::errc::timeout);
    wire::value b = body;
    auto r = co_await m->req->request(std::move(b), left);
    if (r || stopping_ || r.error() == transport::errc::timeout || r.error() == transport::errc::closed) co_return r;
    // Refused or dropped: the master is down (restarting). Salt's REQ socket keeps the
    // message and delivers it when the master is back, within the same timeout.
    c_.returns_conn_waits++;
    const milliseconds d = std::min(ms_of(opt_.reconnect_delay), left);
    co_await sleep_for(d);
  }
}

awaitable<bool> swarm::reauth(sim_minion* m, std::shared_ptr<const crypto::crypticle> old) {
  // On the minion's strand (send_return and refresh_pillar are spawned there).
  auto renewed = [m, &old] {
    auto c = m->get_creds();
    return c.session && c.session != old;
  };
  if (renewed()) co_return true;  // the lifecycle signed in again meanwhile
  if (kind_ == transport::kind::zeromq) {
    m->reauth_wanted = true;
    wake(m);
  } else if (m->pub && m->state.load() == static_cast<int>(mstate::ready)) {
    boost::system::error_code ec;
    m->pub->close(ec);  // read_pub ends: wait reconnect_delay, sign in, reconnect
  }
  const auto deadline = std::chrono::steady_clock::now() + ms_of(opt_.return_timeout);
  while (!stopping_ && !renewed() && std::chrono::steady_clock::now() < deadline) co_await sleep_for(milliseconds(50));
  co_return renewed();
}

awaitable<bool> swarm::fetch_pillar(sim_minion* m) {
  const wire::value load = minion::pillar_load(m->id, m->grains);
  bool ok = false, reauthed = false;
  for (int attempt = 0; attempt < std::max(1, opt_.return_tries) && !stopping_;) {
    auto creds = m->get_creds();
    if (!creds.session || !creds.master_pub) break;
    const std::string nonce = crypto::uuid4_hex();
    wire::value body = minion::package_aes(load, m->who, *creds.session, nonce, std::time(nullptr));
    auto r = co_await request_try(m, body);
    if (!r) {
      ++attempt;  // timed out: the next try (request_channel_tries)
      continue;
    }
    if (!r->is_object() || !wire::find(*r, "key")) {
      // "bad load": the master does not know this session key (it restarted). Salt signs in
      // again and asks once more.
      if (reauthed) break;
      reauthed = true;
      c_.pillar_reauth++;
      if (!co_await reauth(m, creds.session)) break;
      continue;
    }
    auto p = minion::decode_private_reply(*r, m->auth->key(), m->auth->settings().enc, *creds.master_pub,
                                          m->auth->settings().sig, nonce);
    if (p) {
      ok = true;
      if (p->is_object()) c_.pillar_keys += p->size();
    } else {
      spdlog::warn("{}: pillar reply does not decode: {}", m->id, p.error().message());
    }
    break;
  }
  (ok ? c_.pillar_ok : c_.pillar_failed)++;
  co_return ok;
}

awaitable<void> swarm::delayed_return(sim_minion* m, wire::value ret, std::string jid, milliseconds d) {
  co_await sleep_for(d);
  co_await send_return(m, std::move(ret), std::move(jid));
}

awaitable<void> swarm::refresh_pillar(sim_minion* m, wire::value ret, std::string jid) {
  co_await fetch_pillar(m);
  co_await send_return(m, std::move(ret), std::move(jid));
}

awaitable<void> swarm::send_return(sim_minion* m, wire::value load, std::string jid) {
  const std::int64_t sent = now_ns();
  bool ok = false, reauthed = false;
  for (int attempt = 0; attempt < std::max(1, opt_.return_tries) && !stopping_;) {
    auto creds = m->get_creds();
    if (!creds.session) break;
    const std::string nonce = crypto::uuid4_hex();
    const auto ts = static_cast<std::int64_t>(std::time(nullptr));
    wire::value body = minion::package_aes(load, m->who, *creds.session, nonce, ts);
    c_.returns_sent++;
    auto r = co_await request_try(m, body);
    if (!r) {
      // timed out: the next try, as return_retry_tries does
      if (++attempt < std::max(1, opt_.return_tries)) c_.returns_retried++;
      continue;
    }
    auto d = minion::decode_aes_reply(*r, *creds.session, nonce);
    if (!d) {
      c_.returns_bad_reply++;
      // Salt's _crypted_transfer: AuthenticationError -> authenticate(), then send once more.
      if (reauthed) break;
      reauthed = true;
      c_.returns_reauth++;
      if (!co_await reauth(m, creds.session)) {
        c_.returns_reauth_failed++;
        break;
      }
      continue;
    }
    ok = true;
    break;
  }
  const std::int64_t t = now_ns();
  (ok ? c_.returns_ok : c_.returns_failed)++;
  std::lock_guard lk(jobs_mu_);
  auto it = jobs_.find(jid);
  if (it == jobs_.end()) co_return;
  auto p = it->second.pos.find(static_cast<std::uint32_t>(m->index));
  if (p == it->second.pos.end()) co_return;
  auto& e = it->second.entries[p->second];
  e.send_ns = sent;
  e.ack_ns = ok ? t : 0;
  e.ok = ok;
  e.done = true;
  (ok ? it->second.acked : it->second.failed)++;
}

awaitable<void> swarm::read_pub(sim_minion* m, std::shared_ptr<tcp::socket> sock) {
  wire::frame_parser parser;
  std::array<char, 4096> buf;
  for (;;) {
    auto [ec, n] = co_await sock->async_read_some(asio::buffer(buf), asio::as_tuple(use_awaitable));
    if (ec) break;
    const std::int64_t t = now_ns();
    parser.feed(std::string_view(buf.data(), n));
    bool bad = false;
    for (;;) {
      auto f = parser.next();
      if (!f) {
        bad = true;
        break;
      }
      if (!*f) break;
      on_publish(m, (*f)->body, t);
    }
    if (bad) break;
  }
  boost::system::error_code ec;
  sock->close(ec);
}

void swarm::wake(sim_minion* m) {
  if (m->wake) m->wake->cancel();
}

awaitable<bool> swarm::connect_pub_zmq(sim_minion* m) {
  m->state = static_cast<int>(mstate::connecting);
  auto ex = co_await asio::this_coro::executor;  // the minion's strand
  auto creds = m->get_creds();
  const std::uint16_t port = opt_.pub_port ? opt_.pub_port : static_cast<std::uint16_t>(creds.publish_port);
  transport::options to;
  to.connect_timeout = milliseconds(3000);
  auto client = transport::make_pub_client(kind_, ex, to, zopt_, m->id);
  const std::uint32_t gen = ++m->zgen;
  m->zpub = client;
  m->zclosed = false;
  // Handlers run on the client's strand: hop to the minion's (its records are strand-only).
  auto on_msg = [this, m, gen](wire::value body) {
    const std::int64_t t = now_ns();
    asio::dispatch(*m->strand, [this, m, gen, t, b = std::move(body)] {
      if (gen == m->zgen) on_publish(m, b, t);
    });
  };
  auto on_closed = [this, m, gen](const boost::system::error_code&) {
    asio::dispatch(*m->strand, [this, m, gen] {
      if (gen != m->zgen) return;
      m->zclosed = true;
      wake(m);
    });
  };
  // Named locals only inside co_await (GCC 12 double-destroys temporaries there).
  transport::endpoint ep{opt_.master, port, {}};
  wire::value no_hello;
  auto r = co_await client->connect(ep, std::move(no_hello), std::move(on_msg), std::move(on_closed));
  if (!r) {
    client->close();
    if (m->zpub == client) m->zpub.reset();
    ++m->zgen;
    co_return false;
  }
  co_return true;
}

awaitable<void> swarm::lifecycle_zmq(sim_minion* m) {
  if (!m->wake) m->wake.emplace(*m->strand);
  while (!stopping_) {
    if (!co_await sign_in(m)) break;
    m->reauth_wanted = false;  // the new key decodes what arrived while signing in
    if (!m->zpub) {
      if (!co_await connect_pub_zmq(m)) {
        c_.pub_connect_failed++;
        const milliseconds d = ms_of(opt_.reconnect_delay);
        co_await sleep_for(d);
        continue;
      }
    }
    m->ready_ns = now_ns();
    m->cycle++;
    m->state = static_cast<int>(mstate::ready);
    auto stale = std::move(m->stale);
    m->stale.clear();
    for (auto& [body, t] : stale) on_publish(m, body, t, true);
    while (!stopping_ && !m->zclosed && !m->reauth_wanted) {
      m->wake->expires_at(asio::steady_timer::time_point::max());
      co_await m->wake->async_wait(asio::as_tuple(use_awaitable));
    }
    if (stopping_) break;
    m->state = static_cast<int>(mstate::idle);
    if (m->zclosed) {
      // Only with connect_events: as with tcp, wait, sign in again, new socket.
      if (m->zpub) m->zpub->close();
      m->zpub.reset();
      ++m->zgen;
      m->zclosed = false;
      c_.pub_lost++;
      const milliseconds d = ms_of(opt_.reconnect_delay);
      co_await sleep_for(d);
    }
    // reauth_wanted: sign in again on the same (still subscribed) socket.
  }
  m->state = static_cast<int>(mstate::stopped);
}

awaitable<void> swarm::lifecycle(sim_minion* m) {
  if (kind_ == transport::kind::zeromq) {
    co_await lifecycle_zmq(m);
    co_return;
  }
  while (!stopping_) {
    if (!co_await sign_in(m)) break;
    if (!co_await connect_pub(m)) {
      c_.pub_connect_failed++;
      const milliseconds d = ms_of(opt_.reconnect_delay);
      co_await sleep_for(d);
      continue;
    }
    m->ready_ns = now_ns();
    m->cycle++;
    m->state = static_cast<int>(mstate::ready);
    auto sock = m->pub;
    co_await read_pub(m, sock);
    m->pub.reset();
    if (stopping_) break;
    c_.pub_lost++;
    m->state = static_cast<int>(mstate::idle);
    const milliseconds d = ms_of(opt_.reconnect_delay);
    co_await sleep_for(d);
  }
  m->state = static_cast<int>(mstate::stopped);
}

awaitable<void> swarm::ingest_worker(std::shared_ptr<ingest_job> job) {
  const std::size_t nj = job->jids.size();
  for (;;) {
    const std::size_t k = job->next.fetch_add(1);
    if (k >= job->total || stopping_) break;
    sim_minion* m = minions_[job->minions[k / nj]].get();
    const std::string& jid = job->jids[k % nj];
    auto creds = m->get_creds();
    bool ok = false;
    const std::int64_t t0 = now_ns();
    if (creds.session) {
      wire::value r = wire::value::object();
      r["cmd"] = "_return";
      r["id"] = m->id;
      r["success"] = true;
      r["return"] = cmd_output_;
      r["retcode"] = 0;
      r["jid"] = jid;
      r["fun"] = "bench.hold";
      r["fun_args"] = wire::value::array();
      const std::string nonce = crypto::uuid4_hex();
      wire::value body = minion::package_aes(std::move(r), m->who, *creds.session, nonce, std::time(nullptr));
      const milliseconds timeout = ms_of(opt_.return_timeout);
      auto rep = co_await m->req->request(body, timeout);
      if (rep) ok = static_cast<bool>(minion::decode_aes_reply(*rep, *creds.session, nonce));
    }
    const std::int64_t t1 = now_ns();
    {
      std::lock_guard lk(job->mu);
      if (ok) job->lat_ns.push_back(t1 - t0);
    }
    (ok ? job->ok : job->failed)++;
    job->done++;
    std::int64_t prev = job->t1.load();
    while (t1 > prev && !job->t1.compare_exchange_weak(prev, t1)) {
    }
  }
  if (job->workers_left.fetch_sub(1) == 1) job->finished.set_value();
}

json swarm::status_json(std::int64_t since_ns) {
  std::size_t ready = 0, pending = 0, authing = 0, ready_since = 0, pending_seen = 0;
  std::int64_t last_ready = 0, first_auth = 0;
  for (auto& m : minions_) {
    const auto st = static_cast<mstate>(m->state.load());
    if (st == mstate::ready) {
      ready++;
      if (m->ready_ns >= since_ns) ready_since++;
    }
    if (st == mstate::pending) pending++;
    if (st == mstate::authenticating || st == mstate::connecting) authing++;
    if (m->pendings) pending_seen++;
    last_ready = std::max<std::int64_t>(last_ready, m->ready_ns);
    const auto a = m->auth_start_ns.load();
    if (a && (!first_auth || a < first_auth)) first_auth = a;
  }
  return json{{"event", "status"},
              {"count", minions_.size()},
              {"ready", ready},
              {"ready_since", ready_since},
              {"pending", pending},
              {"pending_seen", pending_seen},
              {"authenticating", authing},
              {"first_auth_start_ns", first_auth},
              {"last_ready_ns", last_ready},
              {"auth_attempts", c_.auth_attempts.load()},
              {"auth_timeouts", c_.auth_timeouts.load()},
              {"auth_conn_errors", c_.auth_conn_errors.load()},
              {"auth_failed", c_.auth_failed.load()},
              {"auth_rejected", c_.auth_rejected.load()},
              {"auth_pending", c_.auth_pending.load()},
              {"auth_accepted", c_.auth_accepted.load()},
              {"pub_connect_failed", c_.pub_connect_failed.load()},
              {"pub_lost", c_.pub_lost.load()},
              {"publishes", c_.publishes.load()},
              {"publish_dropped", c_.publish_dropped.load()},
              {"publish_reauth", c_.publish_reauth.load()},
              {"publish_not_targeted", c_.publish_not_targeted.load()},
              {"publish_dups", c_.publish_dups.load()},
              {"publish_cache_hits", c_.publish_cache_hits.load()},
              {"returns_sent", c_.returns_sent.load()},
              {"returns_ok", c_.returns_ok.load()},
              {"returns_failed", c_.returns_failed.load()},
              {"returns_retried", c_.returns_retried.load()},
              {"returns_bad_reply", c_.returns_bad_reply.load()},
              {"returns_reauth", c_.returns_reauth.load()},
              {"returns_reauth_failed", c_.returns_reauth_failed.load()},
              {"returns_conn_waits", c_.returns_conn_waits.load()},
              {"pillar_ok", c_.pillar_ok.load()},
              {"pillar_failed", c_.pillar_failed.load()},
              {"pillar_reauth", c_.pillar_reauth.load()},
              {"pillar_keys", c_.pillar_keys.load()},
              {"held", c_.held.load()},
              {"now_ns", now_ns()}};
}

json swarm::job_json(const std::string& jid, bool with_entries) {
  std::lock_guard lk(jobs_mu_);
  json j{{"event", "job"}, {"jid", jid}};
  auto it = jobs_.find(jid);
  if (it == jobs_.end()) {
    j["received"] = 0;
    j["acked"] = 0;
    j["failed"] = 0;
    j["entries"] = json::array();
    return j;
  }
  const job_rec& jr = it->second;
  j["fun"] = jr.fun;
  j["received"] = jr.entries.size();
  j["acked"] = jr.acked;
  j["failed"] = jr.failed;
  if (with_entries) {
    json e = json::array();
    for (const auto& x : jr.entries) e.push_back(json::array({x.idx, x.recv_ns, x.ack_ns, x.send_ns}));
    j["entries"] = std::move(e);  // [index, publish received ns, return acked ns (0: none), return sent ns]
  }
  return j;
}

json swarm::auth_json() {
  json a = json::array();
  for (auto& m : minions_)
    a.push_back(json::array({m->auth_start_ns.load(), m->ready_ns.load(), m->auth_attempts.load(),
                             m->auth_timeouts.load(), m->cycle.load(), m->last_attempt_ns.load(), m->auth_ok_ns.load()}));
  // [sign-in start ns, ready ns, attempts, timeouts, cycles, last attempt start ns, accepted ns]
  return json{{"event", "auth"}, {"minions", std::move(a)}};
}

void swarm::emit(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::lock_guard lk(out_mu_);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void swarm::write_report() {
  if (opt_.report.empty()) return;
  json r;
  r["options"] = {{"master", opt_.master},       {"ret_port", opt_.ret_port},   {"pub_port", opt_.pub_port},
                  {"transport", opt_.transport},
                  {"count", opt_.count},          {"first_index", opt_.first_index}, {"id_prefix", opt_.id_prefix},
                  {"pool", opt_.pool},            {"threads", opt_.threads},     {"publish_cache", opt_.publish_cache}};
  r["status"] = status_json(0);
  json ms = json::array();
  for (auto& m : minions_)
    ms.push_back({{"id", m->id},
                  {"auth_start_ns", m->auth_start_ns.load()},
                  {"ready_ns", m->ready_ns.load()},
                  {"auth_attempts", m->auth_attempts.load()},
                  {"auth_timeouts", m->auth_timeouts.load()},
                  {"pendings", m->pendings.load()},
                  {"cycles", m->cycle.load()}});
  r["minions"] = std::move(ms);
  json jobs = json::object();
  std::vector<std::string> order;
  {
    std::lock_guard lk(jobs_mu_);
    order = job_order_;
  }
  for (const auto& jid : order) jobs[jid] = job_json(jid, true);
  r["jobs"] = std::move(jobs);
  std::ofstream f(opt_.report);
  f << r.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
}

void swarm::control_loop() {
  std::string line;
  auto start_all = [this] {
    if (started_.exchange(true)) return;
    started_ns_ = now_ns();
    if (opt_.start_rate <= 0) {
      for (auto& m : minions_) asio::co_spawn(*m->strand, lifecycle(m.get()), asio::detached);
      return;
    }
    // Ramp: minion i starts i / start_rate seconds after the first.
    for (auto& m : minions_) {
      auto t = std::make_shared<asio::steady_timer>(*m->strand);
      t->expires_after(ms_of(static_cast<double>(m->index) / opt_.start_rate));
      t->async_wait([this, t, mm = m.get()](const boost::system::error_code&) {
        asio::co_spawn(*mm->strand, lifecycle(mm), asio::detached);
      });
    }
  };
  if (!opt_.start_paused) start_all();
  emit(json{{"event", "started"}, {"paused", opt_.start_paused}, {"count", minions_.size()},
            {"transport", transport::kind_name(kind_)}});
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd.empty()) continue;
    if (cmd == "quit" || cmd == "exit") break;
    if (cmd == "start") {
      start_all();
      emit(json{{"event", "start"}, {"ok", true}});
    } else if (cmd == "status") {
      std::int64_t since = 0;
      in >> since;
      emit(status_json(since));
    } else if (cmd == "job") {  // job JID [full]
      std::string jid, full;
      in >> jid >> full;
      emit(job_json(jid, full == "full"));
    } else if (cmd == "jobs") {
      json a = json::array();
      {
        std::lock_guard lk(jobs_mu_);
        for (const auto& jid : job_order_) a.push_back(jid);
      }
      emit(json{{"event", "jobs"}, {"jids", a}});
    } else if (cmd == "wait") {  // wait JID COUNT TIMEOUT_S : until COUNT returns finished (acked or failed)
      std::string jid;
      std::size_t want = 0;
      double timeout = 60;
      in >> jid >> want >> timeout;
      const auto deadline = std::chrono::steady_clock::now() + ms_of(timeout);
      for (;;) {
        std::size_t done = 0;
        {
          std::lock_guard lk(jobs_mu_);
          auto it = jobs_.find(jid);
          if (it != jobs_.end()) done = it->second.acked + it->second.failed;
        }
        if (done >= want || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(milliseconds(2));
      }
      emit(job_json(jid, true));
    } else if (cmd == "auth") {
      emit(auth_json());
    } else if (cmd == "ingest") {  // ingest WINDOW JID[,JID...] : every minion returns for every jid
      std::size_t window = 64;
      std::string jids;
      in >> window >> jids;
      auto job = std::make_shared<ingest_job>();
      std::string_view v = jids;
      while (!v.empty()) {
        auto c = v.find(',');
        job->jids.emplace_back(v.substr(0, c));
        if (c == std::string_view::npos) break;
        v.remove_prefix(c + 1);
      }
      for (auto& m : minions_)
        if (m->get_creds().session) job->minions.push_back(m->index);
      job->total = job->jids.size() * job->minions.size();
      window = std::max<std::size_t>(1, std::min(window, std::max<std::size_t>(1, job->total)));
      job->workers_left = window;
      job->lat_ns.reserve(job->total);
      job->t0 = now_ns();
      auto fut = job->finished.get_future();
      for (std::size_t w = 0; w < window; ++w)
        asio::co_spawn(asio::make_strand(ctx(w)), ingest_worker(job), asio::detached);
      fut.wait();
      std::vector<std::int64_t> lat;
      {
        std::lock_guard lk(job->mu);
        lat = job->lat_ns;
      }
      std::sort(lat.begin(), lat.end());
      auto pct = [&](double p) -> double {
        if (lat.empty()) return 0;
        std::size_t i = static_cast<std::size_t>(p * static_cast<double>(lat.size() - 1) + 0.5);
        return static_cast<double>(lat[std::min(i, lat.size() - 1)]) / 1e6;
      };
      const double secs = static_cast<double>(job->t1.load() - job->t0) / 1e9;
      emit(json{{"event", "ingest"},
                {"total", job->total},
                {"ok", job->ok.load()},
                {"failed", job->failed.load()},
                {"seconds", secs},
                {"returns_per_s", secs > 0 ? static_cast<double>(job->ok.load()) / secs : 0.0},
                {"ack_p50_ms", pct(0.50)},
                {"ack_p99_ms", pct(0.99)},
                {"ack_max_ms", lat.empty() ? 0.0 : static_cast<double>(lat.back()) / 1e6},
                {"window", window}});
    } else if (cmd == "report") {
      std::string path;
      in >> path;
      if (!path.empty()) opt_.report = path;
      write_report();
      emit(json{{"event", "report"}, {"path", opt_.report}});
    } else {
      emit(json{{"event", "error"}, {"error", "unknown command: " + cmd}});
    }
  }
}

int swarm::run() {
  if (!prepare()) return 2;
  ios_.start();
  control_loop();
  write_report();
  stopping_ = true;
  asio::post(ctx(0), [this] {
    for (auto& m : minions_) {
      asio::post(*m->strand, [mm = m.get()] {
        if (mm->pub) {
          boost::system::error_code ec;
          mm->pub->close(ec);
        }
        if (mm->zpub) mm->zpub->close();
        if (mm->wake) mm->wake->cancel();
      });
    }
    for (auto& p : pool_) p->close();
  });
  ios_.release();
  // Timers of sleeping minions keep run() busy up to reconnect/accept waits: stop hard.
  std::this_thread::sleep_for(milliseconds(200));
  ios_.stop();
  ios_.join();
  emit(json{{"event", "bye"}});
  return 0;
}

}  // namespace

int run_swarm(const swarm_options& opt) {
  auto logger = spdlog::stderr_color_mt("swarm");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(opt.log_level == "warning" ? "warn" : opt.log_level));
  // The process ends here: no teardown of thousands of suspended coroutines.
  auto* s = new swarm(opt);
  const int rc = s->run();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(rc);
}

}  // namespace sylvite::bench
