// sylvite::minion master_channel (see master_channel.hpp). Asio.
#include "minion/master_channel.hpp"

#include <ctime>
#include <random>

#include <spdlog/spdlog.h>

// GCC 12 reports a false -Wmismatched-new-delete on Asio coroutine frames when a
// coroutine is inlined into its caller (seen with -O2 and with the sanitizer flags): Asio's
// awaitable_frame_base pairs its own operator new/delete. clang is silent.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace sylvite::minion {

using asio::awaitable;
using asio::use_awaitable;
using std::chrono::milliseconds;
using std::chrono::seconds;

transport::options transport_options(const config::minion_config& cfg) {
  transport::options o;
  o.max_frame_size = static_cast<std::size_t>(cfg.max_message_size);
  o.tcp_keepalive = cfg.tcp_keepalive;
  o.keepalive_idle = cfg.tcp_keepalive_idle;
  o.keepalive_intvl = cfg.tcp_keepalive_intvl;
  o.keepalive_cnt = cfg.tcp_keepalive_cnt;
  o.connect_timeout = milliseconds(std::max(1, cfg.auth_timeout) * 1000);
  return o;
}

transport::kind transport_kind(const config::minion_config& cfg) {
  return transport::parse_kind(cfg.transport).value_or(transport::kind::zeromq);
}

transport::zmq_options zmq_options_of(const config::minion_config& cfg) {
  transport::zmq_options z;
  z.filtering = cfg.zmq.zmq_filtering;
  z.client_engine = transport::parse_engine(cfg.zmq_engine).value_or(transport::zmq_engine::libzmq);
  z.monitor = cfg.zmq.zmq_monitor;
  z.heartbeat_ivl_ms = cfg.zmq.zmq_heartbeat_ivl;
  z.heartbeat_timeout_ms = cfg.zmq.zmq_heartbeat_timeout;
  z.recon_default_ms = cfg.recon_default;
  z.recon_max_ms = cfg.recon_max;
  z.recon_randomize = cfg.recon_randomize;
  z.ipv6 = cfg.ipv6;
  return z;
}

wire::value clear_ping_body(const std::string& id) {
  wire::value load = wire::value::object();
  load["cmd"] = "ping";
  load["id"] = id;
  wire::value body = wire::value::object();
  body["enc"] = "clear";
  body["load"] = std::move(load);
  body["version"] = 3;
  return body;
}

int rand_between(int lo, int hi) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  if (hi <= lo) return lo;
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

master_channel::master_channel(asio::io_context& io, const config::minion_config& cfg,
                               std::shared_ptr<const auth_client> auth, std::shared_ptr<const wire::value> grains,
                               std::string host, int port, transport::options topt, std::string label)
    : io_(io), cfg_(cfg), auth_(std::move(auth)), grains_(std::move(grains)),
      pillar_(std::make_shared<const wire::value>(wire::value::object())) {
  master_host_ = std::move(host);
  master_port_ = port;
  label_ = label.empty() ? master_host_ : std::move(label);
  who_.id = cfg_.id;
  who_.tok = auth_->tok();
  who_.enc_name = cfg_.encryption_algorithm;
  who_.sig_name = cfg_.signing_algorithm;
  req_ = transport::make_req_client(transport_kind(cfg_), io_.get_executor(),
                                    transport::endpoint{master_host_, static_cast<std::uint16_t>(master_port_), {}},
                                    std::move(topt), zmq_options_of(cfg_));
}

std::shared_ptr<const wire::value> master_channel::pillar() const {
  std::lock_guard lk(mu_);
  return pillar_;
}

void master_channel::set_pillar(wire::value p) {
  std::lock_guard lk(mu_);
  pillar_ = std::make_shared<const wire::value>(std::move(p));
}

void master_channel::forget_creds() {
  aes_.reset();
  session_.reset();
}
void master_channel::close() {
  closed_ = true;
  if (req_) req_->close();
  for (auto& w : auth_waiters_) w->fire();
  auth_waiters_.clear();
}

// One sign-in request (io thread). Installs credentials when accepted.
awaitable<sign_in_attempt_result> master_channel::sign_in_attempt(milliseconds timeout) {
  sign_in_attempt_result out;
  sign_in_request req = auth_->make_request();
  auto r = co_await req_->request(req.body, timeout);
  if (!r) {
    out.kind = r.error() == transport::errc::timeout ? sign_in_outcome::timeout : sign_in_outcome::io_error;
    spdlog::debug("Sign-in request to {}:{} failed: {}", master_host_, master_port_, r.error().message());
    co_return out;
  }
  out.kind = sign_in_outcome::result;
  last_ok_ = std::chrono::steady_clock::now();
  out.res = auth_->handle_reply(req, *r);
  if (out.res.status == auth_status::accepted) install(out.res.creds);
  co_return out;
}

// De-duplicated re-authentication for the request and publish paths: waits for a
// sign-in in flight, or runs one (auth_tries attempts on timeout). true if we have creds.
awaitable<bool> master_channel::reauth() {
  if (closed_) co_return false;
  if (auth_running_) {
    auto ev = std::make_shared<io_event>(io_.get_executor());
    auth_waiters_.push_back(ev);
    co_await ev->wait();
    co_return has_creds();
  }
  auth_running_ = true;
  forget_creds();
  bool ok = false;
  for (int i = 0; i < std::max(1, cfg_.auth_tries) && !closed_; ++i) {
    auto o = co_await sign_in_attempt(milliseconds(cfg_.auth_timeout * 1000));
    if (o.kind == sign_in_outcome::timeout) continue;
    if (o.kind == sign_in_outcome::result) {
      ok = o.res.status == auth_status::accepted;
      if (o.res.status == auth_status::rejected) fatal(77);
      if (o.res.status == auth_status::finger_mismatch) fatal(42);
    }
    break;
  }
  end_auth();
  co_return ok;
}

// FSM path: mark the sign-in as in flight so concurrent reauth() calls wait for it.
awaitable<sign_in_attempt_result> master_channel::fsm_sign_in(milliseconds timeout) {
  while (auth_running_) {
    auto ev = std::make_shared<io_event>(io_.get_executor());
    auth_waiters_.push_back(ev);
    co_await ev->wait();
    if (has_creds()) {
      sign_in_attempt_result o;
      o.kind = sign_in_outcome::result;
      o.res.status = auth_status::accepted;
      o.res.creds = creds_;
      co_return o;
    }
  }
  auth_running_ = true;
  auto o = co_await sign_in_attempt(timeout);
  end_auth();
  co_return o;
}

// AES request (io thread): v3 envelope, session key, nonce; decrypt failure or a text
// reply -> re-auth and retry once; transport timeouts retried up to `tries`.
awaitable<result<wire::value>> master_channel::request(wire::value load, milliseconds timeout, int tries) {
  if (!has_creds() && !(co_await reauth())) co_return make_error_code(errc::not_connected);
  bool reauthed = false;
  error_code last = make_error_code(errc::timeout);
  for (int attempt = 1; attempt <= std::max(1, tries);) {
    if (closed_) co_return make_error_code(errc::stopped);
    auto sess = session_;
    if (!sess) {
      if (!(co_await reauth())) co_return make_error_code(errc::not_connected);
      continue;
    }
    const std::string nonce = crypto::uuid4_hex();
    wire::value body = package_aes(load, who_, *sess, nonce, static_cast<std::int64_t>(std::time(nullptr)));
    const auto sent = std::chrono::steady_clock::now();
    auto r = co_await req_->request(std::move(body), timeout);
    if (!r) {
      last = r.error();
      ++attempt;
      continue;
    }
    last_ok_ = std::chrono::steady_clock::now();
    if (const auto cmd = wire::get_text(load, "cmd"); cmd && (*cmd == "_return" || *cmd == "_minion_event") &&
                                                     rtt_samples_.size() < 64)
      rtt_samples_.push_back(std::chrono::duration_cast<std::chrono::microseconds>(last_ok_ - sent));
    auto d = decode_aes_reply(*r, *sess, nonce);
    if (d) co_return std::move(*d);
    if (reauthed) co_return d.error();
    reauthed = true;
    spdlog::debug("Reply to {} could not be decrypted; re-authenticating", wire::get_text(load, "cmd").value_or("?"));
    if (!(co_await reauth())) co_return make_error_code(errc::auth_failed);
  }
  co_return last;
}

// `_pillar` (send_private): re-auth and ask again once when the reply has no `key`.
awaitable<result<wire::value>> master_channel::pillar_request() {
  if (!has_creds() && !(co_await reauth())) co_return make_error_code(errc::not_connected);
  const wire::value load = pillar_load(cfg_.id, *grains_);
  const std::string nonce = crypto::uuid4_hex();
  result<wire::value> r = make_error_code(errc::timeout);
  for (int round = 0; round < 2; ++round) {
    auto sess = session_;
    if (!sess) {
      if (!(co_await reauth())) co_return make_error_code(errc::not_connected);
      sess = session_;
      if (!sess) co_return make_error_code(errc::not_connected);
    }
    r = make_error_code(errc::timeout);
    for (int t = 0; t < 3 && !r; ++t) {
      wire::value body = package_aes(load, who_, *sess, nonce, static_cast<std::int64_t>(std::time(nullptr)));
      r = co_await req_->request(std::move(body), seconds(60));
      if (!r && r.error() != transport::errc::timeout) break;
    }
    if (!r) co_return r.error();
    if (r->is_object() && wire::find(*r, "key")) break;
    if (round == 0) {
      spdlog::debug("Pillar reply has no key; re-authenticating");
      if (!(co_await reauth())) co_return make_error_code(errc::auth_failed);
    }
  }
  if (!r->is_object() || !wire::find(*r, "key")) {
    spdlog::error("Master did not return a session key for pillar request");
    co_return make_error_code(errc::bad_pillar);
  }
  if (!master_key_) co_return make_error_code(errc::bad_pillar);
  auto enc = crypto::parse_enc_algo(cfg_.encryption_algorithm).value_or(crypto::enc_algo::oaep_sha1);
  auto sig = crypto::parse_sig_algo(cfg_.signing_algorithm).value_or(crypto::sig_algo::pkcs1v15_sha1);
  auto p = decode_private_reply(*r, auth_->key(), enc, *master_key_, sig, nonce);
  if (!p && p.error() == errc::bad_pillar) {
    // Salt re-authenticates once when the signature does not verify (master key reload).
    if (co_await reauth()) p = decode_private_reply(*r, auth_->key(), enc, *master_key_, sig, nonce);
  }
  if (!p) co_return p.error();
  co_return std::move(*p);
}

awaitable<bool> master_channel::fire_event(std::string tag, wire::value data) {
  wire::value load = wire::value::object();
  load["id"] = cfg_.id;
  load["cmd"] = "_minion_event";
  load["pretag"] = wire::value();
  load["tok"] = wire::make_bin(auth_->tok());
  load["data"] = std::move(data);
  load["tag"] = tag;
  auto r = co_await request(std::move(load), seconds(60), 1);
  if (!r) {
    spdlog::info("fire_master failed: {}", r.error().message());
    co_return false;
  }
  co_return true;
}

// The clear ping on this channel's connection: the application-level heartbeat and probe.
awaitable<bool> master_channel::ping(milliseconds timeout) {
  if (closed_) co_return false;
  auto r = co_await req_->request(clear_ping_body(cfg_.id), timeout);
  if (!r) co_return false;
  last_ok_ = std::chrono::steady_clock::now();
  co_return true;
}

result<wire::value> master_channel::send(wire::value load, milliseconds timeout, int tries) {
  if (closed_) return make_error_code(errc::stopped);
  return run_on_io(
      io_,
      [self = shared_from_this(), load = std::move(load), timeout, tries]() mutable {
        return self->request(std::move(load), timeout, tries);
      },
      make_error_code(errc::stopped));
}

result<wire::value> master_channel::fetch_pillar() {
  if (closed_) return make_error_code(errc::stopped);
  auto r = run_on_io(
      io_, [self = shared_from_this()] { return self->pillar_request(); }, make_error_code(errc::stopped));
  if (r) set_pillar(*r);
  return r;
}


void master_channel::install(const auth_creds& c) {
  if (!aes_ || creds_.aes != c.aes) {
    auto a = crypto::crypticle::from_key_string(c.aes);
    if (a) aes_ = std::make_shared<crypto::crypticle>(std::move(*a));
    else spdlog::error("The master sent an unusable AES key");
  }
  if (!session_ || creds_.session != c.session) {
    auto s = crypto::crypticle::from_key_string(c.session);
    if (s) session_ = std::make_shared<crypto::crypticle>(std::move(*s));
    else spdlog::error("The master sent an unusable session key");
  }
  creds_ = c;
  if (auto mk = auth_->master_key()) master_key_ = std::move(*mk);
}

void master_channel::end_auth() {
  auth_running_ = false;
  auto waiters = std::move(auth_waiters_);
  auth_waiters_.clear();
  for (auto& w : waiters) w->fire();
}

void master_channel::fatal(int code) {
  if (on_fatal) on_fatal(code);
}

}  // namespace sylvite::minion
