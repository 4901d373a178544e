// sylvite-swarm: N simulated Salt minions in one process, built on the sylvite minion's
// own protocol code (minion::auth_client for v3 sign-in, minion/channel codecs for the
// hello, publishes and AES requests) and core/transport's req_client for a small pool of
// request connections shared by all minion ids. Each simulated minion owns one publish
// connection (hello included) and its own key, session key and jid de-dup queue.
// Transport tcp (Salt's `transport: tcp`) or zeromq (Salt's default: a SUB socket per
// minion, no hello, a pool of REQ-socket clients; a publish the minion cannot decrypt
// (the master restarted with a new AES key) makes it sign in again, as Salt's does).
//
// Control: commands on stdin, one JSON line per answer on stdout (protocol in
// docs/benchmarks.md, "The swarm"). Logs go to stderr.
//
// Threading: `threads` io_contexts, one thread each; each simulated minion's publish
// socket and lifecycle run on its own strand, on the io_context of its pool connection;
// the control thread reads stdin and only touches atomics and mutex-protected records.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace sylvite::bench {

struct swarm_options {
  std::string master = "127.0.0.1";
  std::uint16_t ret_port = 4506;
  std::uint16_t pub_port = 0;          // 0: the publish_port the master names in the auth reply
  std::string transport = "tcp";       // "tcp" or "zeromq"
  bool zmq_connect_events = false;     // zeromq: a socket monitor per publish socket (lost -> sign in again)
  bool zmq_auth_own_socket = false;    // zeromq: each sign-in on a REQ socket of its own (Salt's AsyncAuth)
  std::string zmq_engine = "native";   // zeromq: ZMTP spoken natively (same bytes) or libzmq sockets
  std::size_t count = 100;
  std::size_t first_index = 0;         // key/id index of the first minion (several processes)
  std::string id_prefix = "bench-";
  std::size_t id_width = 5;            // zero-padded index: bench-00000
  std::filesystem::path keys_dir = "build/bench-keys";
  std::filesystem::path state_dir;     // per-minion pki dirs (minion_master.pub); temp if empty
  std::size_t pool = 8;                // request connections shared by all minions
  unsigned threads = 2;                // io threads
  unsigned keygen_threads = 0;         // 0: hardware_concurrency
  int keysize = 2048;
  double auth_timeout = 5.0;           // Salt auth_timeout
  int auth_tries = 7;                  // Salt auth_tries: resends after a timeout, then accept_wait
  double accept_wait = 2.0;            // acceptance_wait_time (Salt default 10 s)
  double reconnect_delay = 1.0;        // after a lost publish connection (tcp_reconnect_backoff)
  double return_timeout = 60.0;        // request_channel_timeout
  int return_tries = 3;                // return_retry_tries
  std::vector<std::string> source_addrs;  // bind publish sockets to these (IP_BIND_ADDRESS_NO_PORT)
  std::size_t cmd_output_bytes = 64;   // size of the fixed cmd.run output
  bool publish_cache = true;           // decode each distinct publish once per thread
  double start_rate = 0;               // minions started per second at first (0: all at once)
  bool start_paused = false;           // wait for the "start" command before signing in
  std::string report;                  // write the full per-minion report here at exit
  std::string log_level = "warning";
};

// Runs until "quit" on stdin (or EOF). Returns the process exit code.
int run_swarm(const swarm_options& opt);

}  // namespace sylvite::bench
