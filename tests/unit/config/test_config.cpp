// Tests for load_master_config()/load_minion_config(): defaults, .d override order,
// type checks with exact messages, root_dir re-rooting (Salt's prepend_root_dir), ids.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/config/config.hpp"

namespace fs = std::filesystem;
using namespace sylvite::config;
using sylvite::wire::value;

namespace {

class ConfigDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("sylvite-config-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "master", fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text;
  }
  std::string file(const fs::path& rel) const { return (dir_ / rel).string(); }
  fs::path dir_;
};

}  // namespace

TEST_F(ConfigDir, MissingMainFileMeansDefaults) {
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->config_dir, dir_);
  EXPECT_EQ(m->publish_port, 4505);
  EXPECT_EQ(m->ret_port, 4506);
  EXPECT_EQ(m->worker_threads, 5);
  EXPECT_EQ(m->publish_processes, 0);
  EXPECT_EQ(m->pki_dir, "/etc/salt/pki/master");
  EXPECT_EQ(m->cachedir, "/var/cache/salt/master");
  EXPECT_EQ(m->sock_dir, "/var/run/salt/master");
  EXPECT_EQ(m->log_file, "/var/log/salt/master");
  EXPECT_EQ(m->log_level_logfile, "warning");
  EXPECT_EQ(m->id, default_master_id());
  EXPECT_TRUE(m->id.ends_with("_master"));
  EXPECT_FALSE(m->user.empty());
  EXPECT_FALSE(m->cluster_id);
  EXPECT_FALSE(m->cluster_pki_dir);
  EXPECT_EQ(m->file_roots.at("base").front(), "/srv/salt");
  // raw carries the defaults with their Salt names.
  EXPECT_EQ(m->raw["publish_port"], value(4505));
  EXPECT_EQ(m->raw["pki_dir"], value("/etc/salt/pki/master"));
  EXPECT_EQ(m->raw["cluster_id"], value(nullptr));
  EXPECT_EQ(m->raw["id"], value(m->id));

  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->master, std::vector<std::string>{"salt"});
  EXPECT_FALSE(n->master_is_list);
  EXPECT_EQ(n->master_port, 4506);
  EXPECT_EQ(n->master_type, "str");
  EXPECT_EQ(n->master_tries, -1);
  EXPECT_EQ(n->acceptance_wait_time, 10);
  EXPECT_EQ(n->auth_tries, 7);
  EXPECT_EQ(n->encryption_algorithm, "OAEP-SHA1");
  EXPECT_EQ(n->pki_dir, "/etc/salt/pki/minion");
  EXPECT_EQ(n->id, default_minion_id());
  EXPECT_FALSE(n->id.empty());
  EXPECT_EQ(n->raw["master"], value("salt"));
}

TEST_F(ConfigDir, MainFileThenDropInsSortedKeyByKey) {
  write("master", "publish_port: 5000\nret_port: 5001\nworker_threads: 2\nkeysize: 4096\n");
  write("master.d/20-b.conf", "ret_port: 6001\nworker_threads: 9\n");
  write("master.d/10-a.conf", "ret_port: 7001\nworker_threads: 8\ntimeout: 30\n");
  write("master.d/99-ignored.txt", "publish_port: 1\n");
  write("master.d/30-empty.conf", "");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->publish_port, 5000);  // only in main file
  EXPECT_EQ(m->ret_port, 6001);      // 20-b.conf is last
  EXPECT_EQ(m->worker_threads, 9);
  EXPECT_EQ(m->timeout, 30);         // only in 10-a.conf
  EXPECT_EQ(m->keysize, 4096);
}

TEST_F(ConfigDir, DropInErrorNamesTheDropInFile) {
  write("minion", "master_port: 4506\n");
  write("minion.d/a.conf", "master_port: nope\n");
  auto n = load_minion_config(dir_);
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().file, file("minion.d/a.conf"));
  EXPECT_EQ(n.error().option, "master_port");
  EXPECT_EQ(n.error().message,
            file("minion.d/a.conf") + ": option 'master_port': expected an integer between 1 and 65535, got \"nope\"");
}

TEST_F(ConfigDir, UnknownOptionsAreKeptInRaw) {
  write("master", "some_future_option: {a: 1}\nfileserver_backend: [roots]\npublish_port: 4505\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->raw["some_future_option"]["a"], value(1));
  EXPECT_EQ(m->raw["fileserver_backend"], value::array({"roots"}));
}

struct type_case {
  const char* role;
  const char* yaml;
  const char* option;
  const char* expected_tail;  // after "<file>: "
};

TEST_F(ConfigDir, TypeErrorsHaveExactMessages) {
  const type_case cases[] = {
      {"master", "publish_port: 0", "publish_port", "option 'publish_port': expected an integer between 1 and 65535, got 0"},
      {"master", "publish_port: 70000", "publish_port", "option 'publish_port': expected an integer between 1 and 65535, got 70000"},
      {"master", "ret_port: '45x6'", "ret_port", "option 'ret_port': expected an integer between 1 and 65535, got \"45x6\""},
      {"master", "ret_port: 4506.5", "ret_port", "option 'ret_port': expected an integer between 1 and 65535, got 4506.5"},
      {"master", "ret_port: true", "ret_port", "option 'ret_port': expected an integer between 1 and 65535, got true"},
      {"master", "worker_threads: 0", "worker_threads", "option 'worker_threads': expected an integer >= 1, got 0"},
      {"master", "worker_threads: [1]", "worker_threads", "option 'worker_threads': expected an integer >= 1, got [1]"},
      {"master", "publish_processes: 65", "publish_processes", "option 'publish_processes': expected an integer between 0 and 64, got 65"},
      {"master", "publish_processes: -1", "publish_processes", "option 'publish_processes': expected an integer between 0 and 64, got -1"},
      {"master", "minimum_auth_version: 1", "minimum_auth_version", "option 'minimum_auth_version': expected an integer between 2 and 3, got 1"},
      {"master", "keep_jobs_seconds: -5", "keep_jobs_seconds", "option 'keep_jobs_seconds': expected an integer >= 0, got -5"},
      {"master", "auto_accept: 'yes'", "auto_accept", "option 'auto_accept': expected a boolean (true/false, yes/no, on/off), got \"yes\""},
      {"master", "open_mode: 1", "open_mode", "option 'open_mode': expected a boolean (true/false, yes/no, on/off), got 1"},
      {"master", "hash_type: sha3", "hash_type", "option 'hash_type': expected one of sha256, sha1, sha224, sha384, sha512, md5, got \"sha3\""},
      {"master", "publish_signing_algorithm: RSA", "publish_signing_algorithm", "option 'publish_signing_algorithm': expected one of PKCS1v15-SHA1, PKCS1v15-SHA224, got \"RSA\""},
      {"master", "interface: [a]", "interface", "option 'interface': expected a string, got [\"a\"]"},
      {"master", "pki_dir: 5", "pki_dir", "option 'pki_dir': expected a path, got 5"},
      {"master", "file_roots: [/srv/salt]", "file_roots", "option 'file_roots': expected a map of environment names to lists of directories, got [\"/srv/salt\"]"},
      {"master", "file_roots: {base: /srv/salt}", "file_roots", "option 'file_roots': expected a map of environment names to lists of directories, got {\"base\":\"/srv/salt\"}"},
      {"master", "pillar_roots: {base: [1]}", "pillar_roots", "option 'pillar_roots': expected a map of environment names to lists of directories, got {\"base\":[1]}"},
      {"master", "nodegroups: [a]", "nodegroups", "option 'nodegroups': expected a map of nodegroup names to compound targets (strings or lists of strings), got [\"a\"]"},
      {"master", "cluster_peers: a", "cluster_peers", "option 'cluster_peers': expected a list of strings, got \"a\""},
      {"master", "cluster_pool_port: -1", "cluster_pool_port", "option 'cluster_pool_port': expected an integer between 1 and 65535, got -1"},
      {"master", "cluster_id: [x]", "cluster_id", "option 'cluster_id': expected a string or null, got [\"x\"]"},
      {"master", "log_level: loud", "log_level", "option 'log_level': expected one of all, garbage, trace, debug, profile, info, warning, error, critical, quiet, got \"loud\""},
      {"master", "id: {a: 1}", "id", "option 'id': expected a string, got {\"a\":1}"},
      {"minion", "master: 5", "master", "option 'master': expected a host name or a list of host names, got 5"},
      {"minion", "master: []", "master", "option 'master': expected a host name or a list of host names, got []"},
      {"minion", "master: [a, 2]", "master", "option 'master': expected a host name or a list of host names, got [\"a\",2]"},
      {"minion", "master_type: distributed", "master_type", "option 'master_type': expected one of str, failover, disable (sylvite does not support master_type 'distributed'), got \"distributed\""},
      {"minion", "master_type: func", "master_type", "option 'master_type': expected one of str, failover, disable (sylvite does not support master_type 'func'), got \"func\""},
      {"minion", "master_type: hot", "master_type", "option 'master_type': expected one of str, failover, disable, got \"hot\""},
      {"minion", "acceptance_wait_time: -1", "acceptance_wait_time", "option 'acceptance_wait_time': expected an integer >= 0, got -1"},
      {"minion", "auth_timeout: 0", "auth_timeout", "option 'auth_timeout': expected an integer >= 1, got 0"},
      {"minion", "master_tries: -2", "master_tries", "option 'master_tries': expected an integer >= -1, got -2"},
      {"minion", "retry_dns_count: x", "retry_dns_count", "option 'retry_dns_count': expected an integer >= 0 or null, got \"x\""},
      {"minion", "publish_port: 0", "publish_port", "option 'publish_port': expected an integer between 1 and 65535 or null, got 0"},
      {"minion", "encryption_algorithm: OAEP-SHA256", "encryption_algorithm", "option 'encryption_algorithm': expected one of OAEP-SHA1, OAEP-SHA224, got \"OAEP-SHA256\""},
      {"minion", "signing_algorithm: OAEP-SHA1", "signing_algorithm", "option 'signing_algorithm': expected one of PKCS1v15-SHA1, PKCS1v15-SHA224, got \"OAEP-SHA1\""},
      {"minion", "grains: [a]", "grains", "option 'grains': expected a map, got [\"a\"]"},
      {"minion", "master_failback: maybe", "master_failback", "option 'master_failback': expected a boolean (true/false, yes/no, on/off), got \"maybe\""},
      {"minion", "keysize: 512", "keysize", "option 'keysize': expected an integer between 1024 and 16384, got 512"},
      {"minion", "file_client: remote2", "file_client", "option 'file_client': expected one of remote, local, got \"remote2\""},
  };
  for (const auto& c : cases) {
    write(c.role, std::string(c.yaml) + "\n");
    std::string msg, option, f;
    if (std::string(c.role) == "master") {
      auto r = load_master_config(dir_);
      ASSERT_FALSE(r) << c.yaml;
      msg = r.error().message;
      option = r.error().option;
      f = r.error().file;
    } else {
      auto r = load_minion_config(dir_);
      ASSERT_FALSE(r) << c.yaml;
      msg = r.error().message;
      option = r.error().option;
      f = r.error().file;
    }
    EXPECT_EQ(msg, file(c.role) + ": " + c.expected_tail) << c.yaml;
    EXPECT_EQ(option, c.option);
    EXPECT_EQ(f, file(c.role));
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    fs::remove(dir_ / c.role);
  }
}

TEST_F(ConfigDir, AcceptedSpellings) {
  write("master",
        "ret_port: '4510'\n"        // Salt int(): a string holding an int is fine
        "publish_port: 4_505\n"
        "auto_accept: yes\n"
        "open_mode: off\n"
        "hash_type: SHA512\n"        // Salt lower()s hash_type
        "log_level: INFO\n"
        "id: 12345\n"                // Salt str()s a numeric id
        "ipv6: ~\n"
        "nodegroups:\n"
        "  web: 'web* or G@role:web'\n"
        "  pair: [a, b]\n"
        "file_roots:\n"
        "  base: [/a, /b]\n"
        "  dev:\n"
        "  1: [/c]\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->ret_port, 4510);
  EXPECT_EQ(m->publish_port, 4505);
  EXPECT_TRUE(m->auto_accept);
  EXPECT_FALSE(m->open_mode);
  EXPECT_EQ(m->hash_type, "sha512");
  EXPECT_EQ(m->log_level, "info");
  EXPECT_EQ(m->log_level_logfile, "info");  // follows log_level when unset
  EXPECT_EQ(m->id, "12345");
  EXPECT_FALSE(m->ipv6);
  EXPECT_EQ(m->nodegroups.at("web"), "web* or G@role:web");
  EXPECT_EQ(m->nodegroups.at("pair"), "a b");
  EXPECT_EQ(m->file_roots.at("base"), (std::vector<std::string>{"/a", "/b"}));
  EXPECT_TRUE(m->file_roots.at("dev").empty());
  EXPECT_EQ(m->file_roots.at("1"), std::vector<std::string>{"/c"});
  EXPECT_EQ(m->raw["ret_port"], value(4510));  // raw holds the checked value
  EXPECT_EQ(m->raw["hash_type"], value("sha512"));
}

TEST_F(ConfigDir, UnparsableFileNamesFileAndLine) {
  write("master", "publish_port: 4505\nret_port: [4506\n");
  auto m = load_master_config(dir_);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().file, file("master"));
  EXPECT_TRUE(m.error().message.starts_with(file("master") + ": line ")) << m.error().message;

  write("master", "just a string\n");
  m = load_master_config(dir_);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, file("master") + ": line 1, column 1: the file must be a map of options, not string");

  write("master", "a: 1\na: 2\n");
  m = load_master_config(dir_);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, file("master") + ": line 2, column 1: found conflicting ID 'a'");
}

TEST_F(ConfigDir, UnreadableFileIsAnError) {
  write("master", "publish_port: 4505\n");
  fs::permissions(dir_ / "master", fs::perms::none);
  auto check = [&] {
    auto m = load_master_config(dir_);
    if (m) return std::string("loaded an unreadable file");
    if (m.error().file != file("master")) return "error names " + m.error().file;
    if (!m.error().message.starts_with(file("master") + ": cannot read file")) return m.error().message;
    return std::string();
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(check(), "");
    return;
  }
  // Root reads everything: run the load in a child that dropped to nobody (CI runs as root).
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    ::_exit(check().empty() ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "1: the unreadable file was not reported as such; 3: could not drop to nobody";
}

TEST(PrependRootDir, SaltSemantics) {
  struct c {
    const char* root;
    const char* path;
    const char* out;
  } cases[] = {
      {"/", "/etc/salt/pki/master", "/etc/salt/pki/master"},
      {"/tmp/r", "/etc/salt/pki/master", "/tmp/r/etc/salt/pki/master"},
      {"/tmp/r", "/tmp/r/etc/pki", "/tmp/r/etc/pki"},       // already under root_dir
      {"/tmp/r/", "/tmp/r/etc/pki", "/tmp/r/etc/pki"},
      {"/tmp/r", "/tmp/rx/etc", "/tmp/r/tmp/rx/etc"},      // prefix but not under it
      {"/tmp/r", "var/cache", "/tmp/r/var/cache"},         // relative: joined
      {"/tmp/r", "/a//b/../c/", "/tmp/r/a/c"},              // normalised
      {"/tmp/r", "/tmp/r", "/tmp/r/tmp/r"},                 // Salt quirk: equal path is re-rooted
      {"/tmp/./r", "/x", "/tmp/r/x"},
  };
  for (const auto& t : cases) {
    EXPECT_EQ(prepend_root_dir(t.root, t.path).string(), t.out) << t.root << " + " << t.path;
  }
}

TEST_F(ConfigDir, RootDirReRootsPathOptions) {
  write("master",
        "root_dir: /tmp/sylroot\n"
        "pki_dir: /etc/salt/pki/master\n"
        "cachedir: /tmp/sylroot/var/cache/salt/master\n"
        "log_file: udp://loghost:514\n"
        "file_roots: {base: [/srv/salt]}\n"
        "cluster_id: c1\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->root_dir, "/tmp/sylroot");
  EXPECT_EQ(m->pki_dir, "/tmp/sylroot/etc/salt/pki/master");
  EXPECT_EQ(m->cachedir, "/tmp/sylroot/var/cache/salt/master");
  EXPECT_EQ(m->sock_dir, "/tmp/sylroot/var/run/salt/master");
  EXPECT_EQ(m->log_file, "udp://loghost:514");                     // URIs stay
  EXPECT_EQ(m->file_roots.at("base"), std::vector<std::string>{"/srv/salt"});  // never re-rooted
  ASSERT_TRUE(m->cluster_pki_dir);
  EXPECT_EQ(*m->cluster_pki_dir, m->pki_dir);  // defaults to the (re-rooted) pki_dir
  EXPECT_EQ(m->raw["pki_dir"], value("/tmp/sylroot/etc/salt/pki/master"));
  EXPECT_EQ(m->raw["cluster_pki_dir"], value("/tmp/sylroot/etc/salt/pki/master"));

  write("minion", "root_dir: /tmp/m\nlog_file: /var/log/m\nsock_dir: relative/sock\n");
  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->pki_dir, "/tmp/m/etc/salt/pki/minion");
  EXPECT_EQ(n->log_file, "/tmp/m/var/log/m");
  EXPECT_EQ(n->sock_dir, "/tmp/m/relative/sock");
  EXPECT_EQ(n->raw["log_file"], value("/tmp/m/var/log/m"));
}

TEST_F(ConfigDir, LongSockDirFallsBackUnderCachedir) {
  // Salt: len(sock_dir) > len(cachedir) + 10 -> cachedir/.salt-unix
  write("master", "cachedir: /c\nsock_dir: /a/very/long/socket/dir\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->sock_dir, "/c/.salt-unix");
}

TEST_F(ConfigDir, ClusterOptions) {
  write("master", "cluster_peers: [m2, m3]\ncluster_pki_dir: /shared/pki\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_TRUE(m->cluster_peers.empty());  // ignored without cluster_id, as Salt
  EXPECT_FALSE(m->cluster_pki_dir);

  write("master",
        "cluster_id: prod\ncluster_peers: [m2, m3]\ncluster_pki_dir: /shared/pki\ncluster_pool_port: 4530\n"
        "cluster_secret: s3cret\ncluster_pub_fingerprint: abcd\n");
  m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(*m->cluster_id, "prod");
  EXPECT_EQ(m->cluster_peers, (std::vector<std::string>{"m2", "m3"}));
  EXPECT_EQ(*m->cluster_pki_dir, "/shared/pki");
  EXPECT_EQ(m->cluster_pool_port, 4530);
  EXPECT_EQ(*m->cluster_secret, "s3cret");
  EXPECT_EQ(*m->cluster_pub_fingerprint, "abcd");
}

TEST_F(ConfigDir, MinionMasterAndFailover) {
  write("minion", "master: salt.example.com:4510\nid: web1\n");
  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->master, std::vector<std::string>{"salt.example.com:4510"});
  EXPECT_FALSE(n->master_is_list);
  EXPECT_EQ(n->id, "web1");

  write("minion",
        "master: [m1, m2]\nmaster_type: failover\nmaster_shuffle: true\nmaster_failback: true\n"
        "master_alive_interval: 30\n");
  n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->master, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_TRUE(n->master_is_list);
  EXPECT_TRUE(n->random_master);                 // master_shuffle copied in failover mode
  EXPECT_EQ(n->master_failback_interval, 30);    // 0 + failback -> master_alive_interval
  EXPECT_EQ(n->raw["master"], value::array({"m1", "m2"}));
  EXPECT_EQ(n->raw["random_master"], value(true));

  write("minion", "master: [m1, m2]\nmaster_shuffle: true\nmaster_failback: true\nmaster_alive_interval: 30\n");
  n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_FALSE(n->random_master);  // only in failover mode
  EXPECT_EQ(n->master_failback_interval, 0);

  write("minion", "master_type: failover\nmaster_failback: true\nmaster_failback_interval: 7\nmaster_alive_interval: 30\n");
  n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->master_failback_interval, 7);
}

TEST_F(ConfigDir, MinionMiscOptions) {
  write("minion",
        "grains:\n  roles: [web, db]\n  dc: ams\n"
        "publish_port: 4515\nretry_dns_count: 3\nid: ''\nmaster_finger: 'ab:cd'\n"
        "signing_algorithm: PKCS1v15-SHA224\nencryption_algorithm: OAEP-SHA224\n");
  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->grains["roles"], value::array({"web", "db"}));
  EXPECT_EQ(n->grains["dc"], value("ams"));
  EXPECT_EQ(*n->publish_port, 4515);
  EXPECT_EQ(*n->retry_dns_count, 3);
  EXPECT_EQ(n->id, default_minion_id());  // empty id -> default
  EXPECT_EQ(n->master_finger, "ab:cd");
  EXPECT_EQ(n->signing_algorithm, "PKCS1v15-SHA224");
  EXPECT_EQ(n->encryption_algorithm, "OAEP-SHA224");
}

TEST(MasterAddress, Parse) {
  struct c {
    const char* in;
    std::optional<std::pair<std::string, int>> out;
  } cases[] = {
      {"salt", std::pair<std::string, int>{"salt", 4506}},
      {"salt:4510", std::pair<std::string, int>{"salt", 4510}},
      {"10.0.0.1:1", std::pair<std::string, int>{"10.0.0.1", 1}},
      {"[::1]:4510", std::pair<std::string, int>{"::1", 4510}},
      {"[fe80::1]", std::pair<std::string, int>{"fe80::1", 4506}},
      {"fe80::1", std::pair<std::string, int>{"fe80::1", 4506}},
      {"salt:0", std::nullopt},
      {"salt:65536", std::nullopt},
      {"salt:abc", std::nullopt},
      {"salt:", std::nullopt},
      {":4506", std::nullopt},
      {"", std::nullopt},
      {"[::1", std::nullopt},
      {"[::1]x", std::nullopt},
      {"[]:1", std::nullopt},
  };
  for (const auto& t : cases) {
    auto r = parse_master_address(t.in, 4506);
    ASSERT_EQ(r.has_value(), t.out.has_value()) << t.in;
    if (r) {
      EXPECT_EQ(r->host, t.out->first) << t.in;
      EXPECT_EQ(r->port, t.out->second) << t.in;
    }
  }
}

TEST_F(ConfigDir, ClusterLbBackendsNeedsTwoNames) {
  write("master", "cluster_lb_admin: /run/haproxy/admin.sock\ncluster_lb_backends: [pub]\n");
  auto m = load_master_config(dir_);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().option, "cluster_lb_backends");
  EXPECT_EQ(m.error().message,
            file("master") + ": option 'cluster_lb_backends': expected a list of 2 strings, got [\"pub\"]");
  write("master", "cluster_lb_admin: 10.0.0.5:9999\ncluster_lb_backends: [p, r]\n");
  auto ok = load_master_config(dir_);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->cluster_lb_admin, "10.0.0.5:9999");
  EXPECT_EQ(ok->cluster_lb_backends, (std::vector<std::string>{"p", "r"}));
}

TEST_F(ConfigDir, TransportDefaultsToZeromq) {
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->transport, "zeromq");
  EXPECT_EQ(m->raw["transport"], value("zeromq"));
  EXPECT_FALSE(m->zmq.zmq_filtering);
  EXPECT_FALSE(m->zmq.zmq_monitor);
  EXPECT_EQ(m->zmq.zmq_heartbeat_ivl, 10000);
  EXPECT_EQ(m->zmq.zmq_heartbeat_timeout, 30000);
  EXPECT_EQ(m->pub_hwm, 1000);
  EXPECT_EQ(m->zmq_backlog, 1000);
  EXPECT_EQ(m->raw["zmq_filtering"], value(false));
  EXPECT_EQ(m->raw["pub_hwm"], value(1000));
  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->transport, "zeromq");
  EXPECT_EQ(n->raw["transport"], value("zeromq"));
  EXPECT_FALSE(n->zmq.zmq_filtering);
  EXPECT_EQ(n->recon_default, 1000);
  EXPECT_EQ(n->recon_max, 10000);
  EXPECT_TRUE(n->recon_randomize);
  EXPECT_FALSE(n->ipv6);
  EXPECT_EQ(n->raw["recon_max"], value(10000));
}

TEST_F(ConfigDir, TransportTcpAndZeromqAccepted) {
  for (const char* t : {"tcp", "zeromq"}) {
    write("master", std::string("transport: ") + t + "\n");
    write("minion", std::string("transport: ") + t + "\n");
    auto m = load_master_config(dir_);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(m->transport, t);
    EXPECT_EQ(m->raw["transport"], value(t));
    auto n = load_minion_config(dir_);
    ASSERT_TRUE(n) << n.error().message;
    EXPECT_EQ(n->transport, t);
  }
}

TEST_F(ConfigDir, TransportWsAndRaetRefused) {
  for (const char* role : {"master", "minion"}) {
    for (const char* t : {"ws", "raet", "ZeroMQ", "''", "[zeromq]", "5"}) {
      write(role, std::string("transport: ") + t + "\n");
      config_error e;
      if (std::string(role) == "master") {
        auto r = load_master_config(dir_);
        ASSERT_FALSE(r) << role << " " << t;
        e = r.error();
      } else {
        auto r = load_minion_config(dir_);
        ASSERT_FALSE(r) << role << " " << t;
        e = r.error();
      }
      EXPECT_EQ(e.option, "transport") << t;
      EXPECT_EQ(e.file, file(role)) << t;
      EXPECT_EQ(e.expected, "one of zeromq, tcp") << t;
      EXPECT_NE(e.message.find("option 'transport': expected one of zeromq, tcp, got "), std::string::npos)
          << e.message;
      fs::remove(dir_ / role);
    }
  }
  write("master", "transport: ws\n");
  auto r = load_master_config(dir_);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, file("master") + ": option 'transport': expected one of zeromq, tcp, got \"ws\"");
}

TEST_F(ConfigDir, ZeromqOptionsParsed) {
  write("master",
        "zmq_filtering: true\nzmq_monitor: yes\nzmq_heartbeat_ivl: 0\nzmq_heartbeat_timeout: 5000\n"
        "pub_hwm: 5\nzmq_backlog: '200'\nipv6: true\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_TRUE(m->zmq.zmq_filtering);
  EXPECT_TRUE(m->zmq.zmq_monitor);
  EXPECT_EQ(m->zmq.zmq_heartbeat_ivl, 0);
  EXPECT_EQ(m->zmq.zmq_heartbeat_timeout, 5000);
  EXPECT_EQ(m->pub_hwm, 5);
  EXPECT_EQ(m->zmq_backlog, 200);
  EXPECT_TRUE(m->ipv6);
  EXPECT_EQ(m->raw["zmq_filtering"], value(true));
  EXPECT_EQ(m->raw["pub_hwm"], value(5));
  write("minion",
        "transport: tcp\nzmq_filtering: on\nrecon_default: 250\nrecon_max: 0\nrecon_randomize: false\n"
        "ipv6: yes\n");
  auto n = load_minion_config(dir_);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->transport, "tcp");
  EXPECT_TRUE(n->zmq.zmq_filtering);
  EXPECT_EQ(n->recon_default, 250);
  EXPECT_EQ(n->recon_max, 0);
  EXPECT_FALSE(n->recon_randomize);
  EXPECT_TRUE(n->ipv6);
  EXPECT_EQ(n->raw["recon_default"], value(250));
  EXPECT_EQ(n->raw["recon_randomize"], value(false));
}

TEST_F(ConfigDir, ZeromqOptionsRangeChecked) {
  const type_case cases[] = {
      {"master", "zmq_filtering: 1", "zmq_filtering", "option 'zmq_filtering': expected a boolean (true/false, yes/no, on/off), got 1"},
      {"master", "zmq_monitor: maybe", "zmq_monitor", "option 'zmq_monitor': expected a boolean (true/false, yes/no, on/off), got \"maybe\""},
      {"master", "zmq_heartbeat_ivl: -1", "zmq_heartbeat_ivl", "option 'zmq_heartbeat_ivl': expected an integer >= 0, got -1"},
      {"master", "zmq_heartbeat_timeout: x", "zmq_heartbeat_timeout", "option 'zmq_heartbeat_timeout': expected an integer >= 0, got \"x\""},
      {"master", "pub_hwm: 0", "pub_hwm", "option 'pub_hwm': expected an integer >= 1, got 0"},
      {"master", "pub_hwm: 3000000000", "pub_hwm", "option 'pub_hwm': expected an integer >= 1, got 3000000000"},
      {"master", "zmq_backlog: 0", "zmq_backlog", "option 'zmq_backlog': expected an integer >= 1, got 0"},
      {"minion", "zmq_filtering: 'on'", "zmq_filtering", "option 'zmq_filtering': expected a boolean (true/false, yes/no, on/off), got \"on\""},
      {"minion", "recon_default: 0", "recon_default", "option 'recon_default': expected an integer >= 1, got 0"},
      {"minion", "recon_default: 1.5", "recon_default", "option 'recon_default': expected an integer >= 1, got 1.5"},
      {"minion", "recon_max: -1", "recon_max", "option 'recon_max': expected an integer >= 0, got -1"},
      {"minion", "recon_randomize: 2", "recon_randomize", "option 'recon_randomize': expected a boolean (true/false, yes/no, on/off), got 2"},
      {"minion", "ipv6: 'v6'", "ipv6", "option 'ipv6': expected a boolean (true/false, yes/no, on/off), got \"v6\""},
  };
  for (const auto& c : cases) {
    write(c.role, std::string(c.yaml) + "\n");
    config_error e;
    if (std::string(c.role) == "master") {
      auto r = load_master_config(dir_);
      ASSERT_FALSE(r) << c.yaml;
      e = r.error();
    } else {
      auto r = load_minion_config(dir_);
      ASSERT_FALSE(r) << c.yaml;
      e = r.error();
    }
    EXPECT_EQ(e.message, file(c.role) + ": " + c.expected_tail) << c.yaml;
    EXPECT_EQ(e.option, c.option) << c.yaml;
    fs::remove(dir_ / c.role);
  }
}

TEST_F(ConfigDir, PillarAndRendererOptions) {
  auto d = load_master_config(dir_);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->renderer, "jinja|yaml");
  EXPECT_TRUE(d->renderer_blacklist.empty());
  EXPECT_EQ(d->jinja_env, value::object());
  EXPECT_FALSE(d->gpg_keydir);
  EXPECT_EQ(d->pillar_source_merging_strategy, "smart");
  EXPECT_FALSE(d->pillar_merge_lists);
  EXPECT_TRUE(d->pillar_safe_render_error);
  EXPECT_FALSE(d->pillarenv);
  EXPECT_EQ(d->ext_pillar, value::array());
  EXPECT_FALSE(d->pillar_cache);
  EXPECT_EQ(d->pillar_cache_ttl, 3600);
  EXPECT_EQ(d->pillar_cache_backend, "disk");
  EXPECT_EQ(d->pillar_render_timeout, 30);
  EXPECT_EQ(d->pillar_render_workers, 2);
  EXPECT_EQ(d->pillar_compile_timeout, 120);
  EXPECT_EQ(d->raw["pillar_cache_ttl"], 3600);

  write("master",
        "renderer: jinja|json\nrenderer_blacklist: [py]\njinja_env: {trim_blocks: true}\njinja_lstrip_blocks: true\n"
        "gpg_keydir: /k\npillar_source_merging_strategy: overwrite\npillar_merge_lists: true\npillarenv: dev\n"
        "pillarenv_from_saltenv: true\next_pillar:\n  - cmd_yaml: echo a\n  - file_tree: {root_dir: /t}\n"
        "ext_pillar_first: true\npillar_cache: true\npillar_cache_ttl: 5\npillar_cache_backend: memory\n"
        "pillar_render_timeout: 7\npillar_render_workers: 4\npillar_compile_timeout: 60\n");
  auto m = load_master_config(dir_);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->renderer, "jinja|json");
  EXPECT_EQ(m->renderer_blacklist, std::vector<std::string>{"py"});
  EXPECT_EQ(m->jinja_env["trim_blocks"], true);
  EXPECT_TRUE(m->jinja_lstrip_blocks);
  EXPECT_EQ(*m->gpg_keydir, "/k");
  EXPECT_EQ(m->pillar_source_merging_strategy, "overwrite");
  EXPECT_TRUE(m->pillar_merge_lists);
  EXPECT_EQ(*m->pillarenv, "dev");
  EXPECT_TRUE(m->pillarenv_from_saltenv);
  EXPECT_EQ(m->ext_pillar.size(), 2u);
  EXPECT_TRUE(m->ext_pillar_first);
  EXPECT_TRUE(m->pillar_cache);
  EXPECT_EQ(m->pillar_cache_ttl, 5);
  EXPECT_EQ(m->pillar_cache_backend, "memory");
  EXPECT_EQ(m->pillar_render_timeout, 7);
  EXPECT_EQ(m->pillar_render_workers, 4);
  EXPECT_EQ(m->pillar_compile_timeout, 60);

  const std::pair<const char*, const char*> bad[] = {
      {"ext_pillar: {cmd_yaml: x}\n",
       "option 'ext_pillar': expected a list of one-key maps ({module: argument}), got {\"cmd_yaml\":\"x\"}"},
      {"ext_pillar: [cmd_yaml]\n",
       "option 'ext_pillar': expected a list of one-key maps ({module: argument}), got [\"cmd_yaml\"]"},
      {"pillar_cache_backend: redis\n", "option 'pillar_cache_backend': expected one of disk, memory, got \"redis\""},
      {"pillar_source_merging_strategy: deep\n",
       "option 'pillar_source_merging_strategy': expected one of smart, recurse, aggregate, overwrite, none, list, got "
       "\"deep\""},
      {"pillar_render_timeout: 0\n", "option 'pillar_render_timeout': expected an integer between 1 and 86400, got 0"},
      {"renderer_whitelist: yaml\n", "option 'renderer_whitelist': expected a list of strings, got \"yaml\""},
  };
  for (const auto& [text, msg] : bad) {
    write("master", text);
    auto r = load_master_config(dir_);
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.error().message.find(msg), std::string::npos) << r.error().message;
  }
}
