// sylvite::master health/readiness endpoint (sylvite extension, option `health_port`).
// Owns:
//   - readiness:        a value (ready + reason) the HTTP handler turns into 200/503.
//   - readiness_probe:  a background thread that probes directories on the (possibly shared)
//                       file system every `interval` and records the outcome; snapshot()
//                       never touches the file system, so it is safe on an io thread even
//                       while a Gluster mount blocks I/O for `network.ping-timeout`.
//                       Operators' blockers ("keys not loaded", "shutting down", ...) are
//                       set and cleared by name.
//   - health_server:    an HTTP/1.1 server (Boost.Beast, in the .cpp only) on the daemon's
//                       io_context: GET|HEAD /health -> 200 while the process serves,
//                       GET|HEAD /ready -> 200 when snapshot() says ready, else 503 with a
//                       JSON body naming the reason. HAProxy checks /ready
//                       (deploy/haproxy, docs/deploy.md).
// Limits: request head <= 8 KiB and no body, a read deadline per request, a cap on
// concurrent connections (further connections are closed at once), at most
// `max_requests_per_connection` requests per keep-alive connection.
// Thread-safety: readiness_probe is fully thread-safe. health_server: start() and stop()
// may be called from any thread (stop() only posts work; the io_context must run to
// finish it); the snapshot function is called on io threads and must not block.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/util/result.hpp"

namespace boost::asio {
class io_context;
}

namespace sylvite::master {

struct readiness {
  bool ready = false;
  std::string reason;  // empty when ready; else e.g. "shared cluster_pki_dir unreachable: ..."
};

// One directory the probe checks. `name` is the option it came from ("cachedir",
// "cluster_pki_dir"), used in reasons. With `write`, each round also creates, fsyncs and
// unlinks `<dir>/.sylvite-ready-probe.<host>.<pid>`: a read-only or quorum-lost Gluster volume
// (reads fine, writes fail with EROFS) then makes the master not ready too.
struct probe_target {
  std::string name;
  std::filesystem::path dir;
  bool write = false;
};

class readiness_probe {
 public:
  struct options {
    std::chrono::milliseconds interval{1000};  // pause between rounds
    std::chrono::milliseconds deadline{2000};  // a probe still running after this -> not ready
    // The check run per target; empty = check_target(). A seam for tests (a probe that
    // hangs like a stalled mount) and for callers with extra checks.
    std::function<std::string(const probe_target&)> check;
  };

  readiness_probe(std::vector<probe_target> targets, options opts);
  explicit readiness_probe(std::vector<probe_target> targets) : readiness_probe(std::move(targets), options{}) {}
  ~readiness_probe();  // stop()
  readiness_probe(const readiness_probe&) = delete;
  readiness_probe& operator=(const readiness_probe&) = delete;

  // Starts the probe thread (idempotent). Until the first round finishes the probe says
  // not ready ("starting: first file-system probe pending").
  void start();
  // Stops and joins the probe thread. If a probe is stuck in the kernel (a stalled mount)
  // the thread is detached instead of joined, so shutdown never hangs on the file system.
  void stop();

  // Never blocks on I/O: reads the last recorded results (a short mutex section) and the
  // start time of the probe in flight. Order of reasons: blockers (in name order; the
  // shutdown blocker first), a probe that has run past the deadline, then the last
  // failed probe.
  readiness snapshot() const;

  // Named conditions that keep the master not ready until cleared (e.g.
  // set_blocker("keys", "keys not loaded")). Thread-safe, no I/O.
  void set_blocker(const std::string& name, const std::string& reason);
  void clear_blocker(const std::string& name);
  // The blocker "shutting down" (reported first); HAProxy stops sending new minions.
  void set_shutting_down();

  // Runs one round synchronously on the calling thread (tests; also what the thread does).
  void probe_once();

  // Checks one target now (may block on I/O). Returns "" when fine, else the reason.
  static std::string check_target(const probe_target& t);

 // Shared with the probe thread, which may outlive this object when it is stuck in
  // the kernel on a stalled mount and has to be detached.
  struct state;

 private:
  std::shared_ptr<state> s_;
  std::thread thread_;
};

struct health_endpoint {
  std::string host;        // address to bind (the master's `interface`)
  std::uint16_t port = 0;  // 0 = pick a free port (tests); see bound_port()
};

class health_server {
 public:
  struct limits {
    std::size_t max_connections = 64;
    std::chrono::milliseconds read_timeout{5000};  // whole request head, per request
    std::size_t max_header_bytes = 8192;
    int max_requests_per_connection = 100;
  };

  health_server(boost::asio::io_context& io, health_endpoint ep, std::function<readiness()> snapshot,
                std::string id);
  health_server(boost::asio::io_context& io, health_endpoint ep, std::function<readiness()> snapshot,
                std::string id, limits lim);
  ~health_server();  // stop()
  health_server(const health_server&) = delete;
  health_server& operator=(const health_server&) = delete;

  // Resolves, binds and listens (synchronously), then accepts on the io_context.
  // Errors: the bind/listen/resolve error_code.
  result<void> start();
  // Closes the acceptor and every open connection (posted to their executors).
  void stop();
  std::uint16_t bound_port() const;
  // Connections open now (tests, logs).
  std::size_t connection_count() const;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace sylvite::master
