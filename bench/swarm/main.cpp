// sylvite-swarm command line: simulated Salt minions for the benchmarks (bench/run).
// See bench/swarm/swarm.hpp for the model and README.md for the control protocol.
#include <CLI/CLI.hpp>

#include <string>

#include "bench/swarm/swarm.hpp"

int main(int argc, char** argv) {
  sylvite::bench::swarm_options o;
  CLI::App app{"sylvite-swarm: N simulated Salt minions (protocol v3, transport tcp or zeromq) in one process"};
  std::string keys_dir = o.keys_dir.string(), state_dir;
  std::string sources;
  bool no_cache = false;
  app.add_option("--master", o.master, "master address")->capture_default_str();
  app.add_option("--ret-port", o.ret_port, "master ret_port")->capture_default_str();
  app.add_option("--pub-port", o.pub_port, "master publish_port (0: as named in the auth reply)")->capture_default_str();
  app.add_option("--transport", o.transport, "master transport: tcp or zeromq")
      ->check(CLI::IsMember({"tcp", "zeromq"}))
      ->capture_default_str();
  app.add_flag("--zmq-auth-own-socket", o.zmq_auth_own_socket,
               "zeromq: each sign-in opens a REQ socket of its own without a monitor, as Salt's AsyncAuth "
               "(default: sign-ins share the request pool)");
  app.add_option("--zmq-engine", o.zmq_engine,
                 "zeromq: the swarm's sockets speak ZMTP natively (native: the same bytes as libzmq's REQ and "
                 "SUB, without libzmq's I/O thread and mailboxes) or are libzmq sockets (libzmq)")
      ->check(CLI::IsMember({"native", "libzmq"}))
      ->capture_default_str();
  app.add_flag("--zmq-connect-events", o.zmq_connect_events,
               "zeromq: watch each publish socket (one monitor socket per minion): a lost connection makes the "
               "minion sign in again at once, as with tcp; default off (Salt's minion: re-auth on the first "
               "publish it cannot decrypt)");
  app.add_option("--count,-n", o.count, "number of simulated minions")->capture_default_str();
  app.add_option("--first-index", o.first_index, "index of the first minion (keys and ids; several swarms)")
      ->capture_default_str();
  app.add_option("--id-prefix", o.id_prefix, "minion id prefix; ids are <prefix><zero-padded index>")
      ->capture_default_str();
  app.add_option("--id-width", o.id_width, "digits of the index in the id")->capture_default_str();
  app.add_option("--keys-dir", keys_dir, "RSA key cache (<index>.pem), generated once")->capture_default_str();
  app.add_option("--state-dir", state_dir, "per-minion pki dirs (minion_master.pub); default a temp dir");
  app.add_option("--pool", o.pool, "request connections shared by all minions")->capture_default_str();
  app.add_option("--threads", o.threads, "io threads")->capture_default_str();
  app.add_option("--keygen-threads", o.keygen_threads, "key generation threads (0: all cores)")->capture_default_str();
  app.add_option("--keysize", o.keysize, "RSA key size for new keys")->capture_default_str();
  app.add_option("--auth-timeout", o.auth_timeout, "seconds per sign-in attempt (Salt auth_timeout)")->capture_default_str();
  app.add_option("--auth-tries", o.auth_tries, "sign-in resends after a timeout before waiting accept-wait (Salt auth_tries)")
      ->capture_default_str();
  app.add_option("--accept-wait", o.accept_wait, "seconds between sign-ins while pending (acceptance_wait_time)")
      ->capture_default_str();
  app.add_option("--reconnect-delay", o.reconnect_delay, "seconds after a lost publish connection")->capture_default_str();
  app.add_option("--return-timeout", o.return_timeout, "seconds per _return attempt")->capture_default_str();
  app.add_option("--return-tries", o.return_tries, "attempts per _return")->capture_default_str();
  app.add_option("--source-addrs", sources,
                 "comma list of source addresses for publish sockets (127.0.0.x; IP_BIND_ADDRESS_NO_PORT)");
  app.add_option("--cmd-output-bytes", o.cmd_output_bytes, "size of the fixed cmd.run output")->capture_default_str();
  app.add_flag("--no-publish-cache", no_cache, "decrypt every publish per minion (no shared decode)");
  app.add_option("--start-rate", o.start_rate, "minions started per second at first (0: all at once)")
      ->capture_default_str();
  app.add_flag("--paused", o.start_paused, "load keys, then wait for the 'start' command");
  app.add_option("--report", o.report, "write the per-minion report (JSON) here at exit");
  app.add_option("--log-level", o.log_level, "stderr log level")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.keys_dir = keys_dir;
  if (!state_dir.empty()) o.state_dir = state_dir;
  o.publish_cache = !no_cache;
  std::string_view v = sources;
  while (!v.empty()) {
    auto c = v.find(',');
    if (c != 0) o.source_addrs.emplace_back(v.substr(0, c));
    if (c == std::string_view::npos) break;
    v.remove_prefix(c + 1);
  }
  return sylvite::bench::run_swarm(o);
}
