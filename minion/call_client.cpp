// sylvite::minion call_client (see call_client.hpp): salt-call's sign-in, pillar and
// master_link over one master_channel on an io thread of its own. Asio.
#include "minion/call_client.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <cstdio>
#include <thread>

#include <spdlog/spdlog.h>

#include "minion/auth.hpp"
#include "minion/master_channel.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace sylvite::minion {

using asio::awaitable;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

class call_client_impl : public call_client {
 public:
  call_client_impl(const config::minion_config& cfg, auth_client auth, wire::value grains)
      : cfg_(cfg), guard_(asio::make_work_guard(io_)) {
    // The first configured master (call_client.hpp).
    auto addr = config::parse_master_address(cfg_.master.empty() ? std::string("salt") : cfg_.master.front(),
                                             cfg_.master_port);
    std::string host = addr ? addr->host : std::string("salt");
    int port = addr ? addr->port : cfg_.master_port;
    sess_ = std::make_shared<master_channel>(io_, cfg_, std::make_shared<const auth_client>(std::move(auth)),
                                      std::make_shared<const wire::value>(std::move(grains)), host, port,
                                      transport_options(cfg_));
    thread_ = std::thread([this] { io_.run(); });
  }
  ~call_client_impl() override { close(); }

  int connect() override {
    int code = run_on_io(io_, [s = sess_, &cfg = cfg_] { return sign_in(s, cfg); }, 1);
    if (code == 77) std::this_thread::sleep_for(seconds(rand_between(10, 20)));
    return code;
  }

  master_link& link() override { return *sess_; }
  std::shared_ptr<const wire::value> pillar() const override { return sess_->pillar(); }

  void close() override {
    if (!thread_.joinable()) return;
    asio::post(io_, [s = sess_] { s->close(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  // connect() on the io thread: sign in (auth_tries attempts on timeout), fetch pillar.
  // Gives connect()'s exit code.
  static awaitable<int> sign_in(std::shared_ptr<master_channel> s, const config::minion_config& cfg) {
    int code = 1;
    try {
      sign_in_attempt_result o;
      for (int i = 0; i < std::max(1, cfg.auth_tries); ++i) {
        o = co_await s->fsm_sign_in(milliseconds(std::max(1, cfg.auth_timeout) * 1000));
        if (o.kind != sign_in_outcome::timeout) break;
      }
      if (o.kind == sign_in_outcome::timeout) {
        spdlog::error("Attempt to authenticate with the salt master failed with timeout error");
        code = 1;
      } else if (o.kind == sign_in_outcome::io_error) {
        spdlog::error("Unable to connect to the salt master at {}", s->master_host());
        code = 1;
      } else {
        switch (o.res.status) {
          case auth_status::accepted: {
            auto p = co_await s->pillar_request();
            if (!p) {
              spdlog::error("Exception getting pillar: {}", p.error().message());
              code = 1;
            } else {
              s->set_pillar(std::move(*p));
              code = 0;
            }
            break;
          }
          case auth_status::pending:
          case auth_status::rejected_retry:
            std::fputs("Minion failed to authenticate with the master, has the minion key been accepted?\n", stdout);
            std::fflush(stdout);
            code = 2;
            break;
          case auth_status::rejected:
            code = 77;
            break;
          case auth_status::finger_mismatch:
            code = 42;
            break;
          default:
            spdlog::error("Attempt to authenticate with the salt master failed: {}", o.res.message);
            code = 1;
        }
      }
    } catch (const std::exception& e) {
      spdlog::error("salt-call: {}", e.what());
    }
    co_return code;
  }

  const config::minion_config& cfg_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::shared_ptr<master_channel> sess_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<call_client> call_client::create(const config::minion_config& cfg, wire::value grains) {
  auto as = auth_settings::from_config(cfg, grains);
  if (!as) {
    spdlog::critical("Unsupported encryption_algorithm/signing_algorithm: {} / {}", cfg.encryption_algorithm,
                     cfg.signing_algorithm);
    return nullptr;
  }
  auto auth = auth_client::create(std::move(*as));
  if (!auth) {
    spdlog::critical("Cannot load or create the minion keys in {}: {}", cfg.pki_dir.string(), auth.error().message());
    return nullptr;
  }
  return std::make_unique<call_client_impl>(cfg, std::move(*auth), std::move(grains));
}

}  // namespace sylvite::minion
