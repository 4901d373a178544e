// sylvite::config: Salt's master and minion configuration files.
// Reads CONFIG_DIR/master (or minion) plus CONFIG_DIR/master.d/*.conf (minion.d/*.conf)
// in name order, later files overriding earlier ones key by key; env var overrides are
// not supported. Option names and defaults are Salt's (salt/config/__init__.py, 3008).
// Path options are re-rooted under root_dir exactly like Salt's prepend_root_dir().
// Unknown options are kept in `raw` and otherwise ignored (Salt does the same).
// A wrong type or bad value yields config_error naming the file, option and expectation.
// yaml-cpp is used only inside this library. Thread-safety: plain values.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::config {

struct config_error {
  std::string file;      // file that held the bad option ("" if a default/derived value)
  std::string option;    // option name
  std::string expected;  // e.g. "an integer between 1 and 65535"
  std::string message;   // full human-readable line: "<file>: option '<opt>': expected <expected>, got <what>"
};

template <class T>
using config_result = boost::system::result<T, config_error>;

using roots_map = std::map<std::string, std::vector<std::string>>;  // saltenv -> dirs

// Salt's transport options (both daemons). transport: "zeromq" (Salt's default) or "tcp".
struct zmq_settings {
  bool zmq_filtering = false;       // topics: only targeted minions receive a publish
  bool zmq_monitor = false;         // log every ZeroMQ socket event
  int zmq_heartbeat_ivl = 10000;    // ms between ZMTP PINGs (0 = off)
  int zmq_heartbeat_timeout = 30000;// ms without traffic before a peer is dropped
};

struct master_config {
  std::filesystem::path config_dir;  // the -c directory
  std::string transport = "zeromq";
  zmq_settings zmq;
  int pub_hwm = 1000;                // ZeroMQ: publishes queued per subscriber
  int zmq_backlog = 1000;            // ZeroMQ: listen() backlog
  std::string zmq_engine = "native"; // sylvite: ZeroMQ ports served by native ZMTP or by libzmq
  std::string id;                    // default: hostname + "_master" (as Salt)
  std::string interface = "0.0.0.0";
  bool ipv6 = false;
  int publish_port = 4505;
  int ret_port = 4506;
  int worker_threads = 5;
  // sylvite: the publish port served by this many `sylvite-publisher` processes (TCP
  // transport); 0 = by the master process itself, as Salt. Spreads the minions' publish
  // connections over processes (one open-files limit each).
  int publish_processes = 0;
  std::string user;                  // run as: the daemon drops root to it after binding (master)
  std::filesystem::path root_dir = "/";
  std::filesystem::path pki_dir = "/etc/salt/pki/master";
  std::filesystem::path cachedir = "/var/cache/salt/master";
  std::filesystem::path sock_dir = "/var/run/salt/master";
  std::filesystem::path log_file = "/var/log/salt/master";
  std::string log_level = "warning";
  std::string log_level_logfile = "warning";
  roots_map file_roots = {{"base", {"/srv/salt", "/srv/spm/salt"}}};        // Salt's defaults
  roots_map pillar_roots = {{"base", {"/srv/pillar", "/srv/spm/pillar"}}};
  bool auto_accept = false;
  bool open_mode = false;
  std::string autosign_file;
  std::string autoreject_file;
  int autosign_timeout = 120;
  int publish_session = 86400;
  int minimum_auth_version = 3;
  int keysize = 2048;
  bool sign_pub_messages = true;
  std::string publish_signing_algorithm = "PKCS1v15-SHA1";
  // Failover with per-master keys (Salt's master_sign): sign master.pub in the auth reply.
  bool master_sign_pubkey = false;
  std::string master_sign_key_name = "master_sign";          // <pki_dir>/<name>.pem/.pub
  std::optional<std::string> master_pubkey_signature;        // Salt 3008.5: None -> "<id>_pubkey_signature"
  bool master_use_pubkey_signature = false;                  // send the pre-computed signature file
  int master_sign_keysize = 0;                               // sylvite extension: 0 = keysize
  bool rotate_aes_key = true;
  bool ping_on_rotate = false;
  std::int64_t keep_jobs_seconds = 86400;
  std::string hash_type = "sha256";
  std::int64_t file_buffer_size = 1048576;
  int max_minions = 0;
  bool job_cache = true;
  int timeout = 5;                   // salt CLI default wait
  int gather_job_timeout = 10;
  std::int64_t max_message_size = 100 * 1024 * 1024;  // largest frame accepted (bytes)
  // Transport hardening (sylvite extensions, docs/security.md sections 1 and 2). "Pre-auth":
  // a connection that has not yet shown an accepted minion's key (or a peer handshake).
  std::int64_t pre_auth_max_message_size = 65536;      // frame bytes before authentication
  int pre_auth_max_objects = 1024;                     // msgpack objects per frame before it
  std::int64_t pre_auth_large_frame_budget = 16 << 20; // bytes shared by bigger pre-auth frames (0 = none)
  int pre_auth_max_pending = 8;                        // unanswered requests per pre-auth connection
  int frame_timeout = 30;                              // s; a started frame must complete (0 = off)
  int pre_auth_idle_timeout = 30;                      // s; ret_port: silent new connection closed (0 = off)
  int max_connections = 100000;                        // per port (0 = no cap)
  int pre_auth_max_connections = 20000;                // per port (0 = no cap)
  int pre_auth_max_connections_per_source = 1000;      // per port and address (0 = no cap)
  int reserved_fds = 128;                              // descriptors kept for the master's own files
  int request_queue_size = 10000;                      // requests waiting for a worker (then shed)
  int request_server_ttl = 300;      // Salt: 0 (off); v3 requests older/newer than this are refused
  // Sign-in hardening (sylvite extensions, docs/security.md section 3 and 5):
  int max_pending_keys = 10000;      // minions_pre entries; a new key beyond it is refused (0 = no cap)
  int unaccepted_auth_rate = 100;    // sign-ins/s per source address that are not accepted (0 = no limit)
  int unaccepted_auth_burst = 2000;  // ... and the burst allowed above that rate
  bool minion_data_cache = true;
  bool tcp_keepalive = true;
  int tcp_keepalive_idle = 300;
  int tcp_keepalive_cnt = -1;
  int tcp_keepalive_intvl = -1;
  std::string renderer = "jinja|yaml";
  std::string state_top = "top.sls";
  std::string top_file_merging_strategy = "merge";
  std::string pillar_source_merging_strategy = "smart";
  std::map<std::string, std::string> nodegroups;
  // Pillar and the renderer pipeline (issue 17; Salt's names and defaults,
  // docs/operations.md "Pillar").
  std::vector<std::string> renderer_blacklist;
  std::vector<std::string> renderer_whitelist;
  wire::value jinja_env = wire::value::object();      // Jinja Environment options, all templates
  wire::value jinja_sls_env = wire::value::object();  // ... for SLS (overrides jinja_env)
  bool jinja_trim_blocks = false;
  bool jinja_lstrip_blocks = false;
  std::optional<std::string> gpg_keydir;  // unset: <config_dir>/gpgkeys, as Salt's gpg renderer
  bool pillar_merge_lists = false;
  bool pillar_includes_override_sls = false;
  bool pillar_safe_render_error = true;
  std::optional<std::string> pillarenv;
  bool pillarenv_from_saltenv = false;
  wire::value ext_pillar = wire::value::array();  // [{name: arg}, ...]
  bool ext_pillar_first = false;
  bool pillar_cache = false;
  int pillar_cache_ttl = 3600;                    // seconds
  std::string pillar_cache_backend = "disk";      // disk (cachedir/pillar_cache) | memory
  // sylvite extensions: bounds of the render pipeline.
  int pillar_render_timeout = 30;    // seconds per rendered file
  int pillar_render_workers = 2;     // sylvite-render worker processes
  int pillar_compile_timeout = 120;  // seconds per minion's whole compile
  // cluster (issue 6/7; parsed and validated now)
  std::optional<std::string> cluster_id;
  std::vector<std::string> cluster_peers;
  std::optional<std::filesystem::path> cluster_pki_dir;  // defaults to pki_dir when cluster_id set
  int cluster_pool_port = 4520;
  // sylvite extension: HTTP health/readiness endpoint on `interface` (0 = off;
  // docs/deploy.md recommends 4507). HAProxy checks GET /ready there.
  int health_port = 0;
  bool job_cache_async = false;         // sylvite: ack returns before they are written (loses them on a crash)
  bool job_cache_journal = true;        // sylvite: journal returns before the ack, write return.p after it
  std::optional<std::string> cluster_secret;
  std::optional<std::string> cluster_pub_fingerprint;
  // sylvite: accept joins with an empty/unset cluster_secret (loud warning). Default refuses.
  bool cluster_allow_empty_secret = false;
  // sylvite: HAProxy admin socket (a path, or host:port for `stats socket ipv4@...`) the
  // accepting master adds a joined master to (runtime API), and cluster.remove takes it
  // out of. Unset: the exact haproxy.cfg lines are logged instead.
  std::optional<std::string> cluster_lb_admin;
  // sylvite: [publish backend, request backend] names (default sylvite-haproxy-cfg's).
  std::vector<std::string> cluster_lb_backends;
  // group (issue 19 point 3, part "group"): a group of INDEPENDENT masters (hot
  // multi-master / failover, no cluster) seen as one through any member's REST API
  // (master/api/api_group.hpp, docs/operations.md "Master group"). Unset: no group.
  struct group_config {
    std::string id;                        // the group's name (signed into every call)
    std::string secret;                    // shared HMAC secret (secret, or secret_file's content)
    std::vector<std::string> masters;      // REST API base URLs of every member, this one included
    std::string self;                      // which of masters is this one ("": found by port)
    std::optional<std::filesystem::path> ca_file;  // https: CA bundle (unset: system roots)
    int timeout = 5;                       // seconds per call to a member (connect, quick calls)
  };
  std::optional<group_config> master_group;
  wire::value raw = wire::value::object();  // every option after merge (defaults included)
};

struct master_address {
  std::string host;
  int port = 4506;
};

struct minion_config {
  std::filesystem::path config_dir;
  std::string transport = "zeromq";
  zmq_settings zmq;
  // sylvite: the minion's ZeroMQ sockets from libzmq (default) or spoken natively (the
  // same ZMTP bytes, no libzmq I/O thread; core/transport/zmtp_client.cpp).
  std::string zmq_engine = "libzmq";
  int recon_default = 1000;                 // ms; ZeroMQ reconnect interval
  int recon_max = 10000;                    // ms; ... its maximum
  bool recon_randomize = true;              // random interval in [recon_default, recon_default + recon_max]
  bool ipv6 = false;
  std::string id;                          // default: the fqdn (as Salt)
  std::vector<std::string> master = {"salt"};  // string in file -> one element
  bool master_is_list = false;              // true if the file gave a list
  int master_port = 4506;
  std::string master_type = "str";          // str | failover | disable (distributed/func: refused)
  int master_alive_interval = 0;
  bool master_failback = false;
  int master_failback_interval = 0;
  bool master_shuffle = false;
  bool random_master = false;
  int random_reauth_delay = 10;
  // sylvite extensions (docs/multi-master.md): liveness and failback tuning.
  int master_alive_misses = 3;              // heartbeats missed within master_alive_interval -> probe
  int master_probe_timeout = 5;             // seconds a liveness/failback probe may take
  int master_failback_probes = 3;           // consecutive good probes before failing back
  int return_queue_max = 1000;              // undelivered job returns kept on disk
  int retry_dns = 30;
  std::optional<int> retry_dns_count;
  int master_tries = -1;                    // Salt 3008 on Linux: -1 (forever)
  int acceptance_wait_time = 10;
  int acceptance_wait_time_max = 0;
  int auth_timeout = 5;
  int auth_tries = 7;
  bool rejected_retry = false;
  std::optional<int> publish_port;          // override of the port from the auth reply
  std::filesystem::path root_dir = "/";
  std::filesystem::path pki_dir = "/etc/salt/pki/minion";
  std::filesystem::path cachedir = "/var/cache/salt/minion";
  std::filesystem::path sock_dir = "/var/run/salt/minion";
  std::filesystem::path log_file = "/var/log/salt/minion";
  std::string log_level = "warning";
  std::string log_level_logfile = "warning";
  std::string master_finger;
  bool verify_master_pubkey_sign = false;
  std::string master_sign_key_name = "master_sign";
  std::string hash_type = "sha256";
  int keysize = 2048;
  std::string encryption_algorithm = "OAEP-SHA1";
  std::string signing_algorithm = "PKCS1v15-SHA1";
  bool sign_pub_messages = true;            // require signed publishes (Salt's minion: false)
  int publish_replay_window = 600;          // s; publishes dated outside it are refused, jids kept as long
  std::string file_client = "remote";
  roots_map file_roots = {{"base", {"/srv/salt", "/srv/spm/salt"}}};        // Salt's defaults
  roots_map pillar_roots = {{"base", {"/srv/pillar", "/srv/spm/pillar"}}};
  wire::value grains = wire::value::object();  // static grains from the config
  int return_retry_timer = 5;
  int return_retry_timer_max = 10;
  int return_retry_tries = 3;
  int minion_jid_queue_hwm = 100;
  bool tcp_keepalive = true;
  int tcp_keepalive_idle = 300;
  int tcp_keepalive_cnt = -1;
  int tcp_keepalive_intvl = -1;
  int ping_interval = 0;                    // minutes
  bool enable_legacy_startup_events = true;
  std::int64_t max_message_size = 100 * 1024 * 1024;
  wire::value raw = wire::value::object();
};

// Load CONFIG_DIR/master + master.d/*.conf. A missing main file is fine (defaults).
config_result<master_config> load_master_config(const std::filesystem::path& config_dir);
config_result<minion_config> load_minion_config(const std::filesystem::path& config_dir);

// "host", "host:port", "[v6addr]:port", "v6addr" -> address (port defaults to default_port).
std::optional<master_address> parse_master_address(const std::string& s, int default_port);

// Salt's prepend_root_dir() for one path option: an absolute path gets root_dir prepended
// unless it already lies under root_dir; a relative one is joined to root_dir; the result
// is normalised. ("/r", "/etc/x") -> "/r/etc/x"; ("/r", "/r/etc/x") -> "/r/etc/x".
std::filesystem::path prepend_root_dir(const std::filesystem::path& root_dir, const std::filesystem::path& path);

// Default id helpers (hostname / fqdn from the OS).
std::string default_minion_id();
std::string default_master_id();

// YAML text -> value (maps, lists, scalars typed as YAML 1.1 core would: ints, floats,
// true/false/yes/no/on/off, null/~). Errors carry the line and column in message.
boost::system::result<wire::value, std::string> parse_yaml(const std::string& text);
// value -> YAML text (block style), used by `--out yaml`.
std::string to_yaml(const wire::value& v);

}  // namespace sylvite::config
