#include "core/crypto/rsa.hpp"
// Unit tests for sylvite_cli: argument typing against Salt's own yamlify_arg/parse_input
// (gen_golden.py -> golden_args.json), target/compound parsing, nodegroups, and salt-key
// runs over a copy of fixtures/pki compared with what Salt 3008's salt-key printed for
// the same key directories.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cluster/join.hpp"
#include "cluster/unsettled_keys.hpp"
#include "master/cli/args.hpp"
#include "master/cli/key_ops.hpp"

namespace {

using sylvite::wire::value;
namespace cli = sylvite::cli;
namespace keys = sylvite::cli::keys;
namespace fs = std::filesystem;

const fs::path src = fs::path(SYLVITE_SOURCE_DIR) / "tests/unit/cli";

value load_json(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return value::parse(ss.str());
}

// ---------------------------------------------------------------------------------
// argument typing

TEST(Args, YamlifyMatchesSalt) {
  value g = load_json(src / "golden_args.json");
  for (const auto& c : g["yamlify"]) {
    const std::string in = c["in"].get<std::string>();
    if (in == "99999999999999999999999") continue;  // Python big int: we keep the text
    EXPECT_EQ(cli::yamlify_arg(in), c["out"]) << "input: '" << in << "'";
  }
}

TEST(Args, BigIntStaysText) {
  EXPECT_EQ(cli::yamlify_arg("99999999999999999999999"), value("99999999999999999999999"));
}

TEST(Args, ParseInputMatchesSalt) {
  value g = load_json(src / "golden_args.json");
  for (const auto& c : g["parse_input"]) {
    std::vector<std::string> in = c["in"].get<std::vector<std::string>>();
    std::set<std::string> np;
    if (c.contains("no_parse"))
      for (const auto& n : c["no_parse"]) np.insert(n.get<std::string>());
    EXPECT_EQ(cli::parse_input(in, np), c["out"]) << c["in"].dump();
  }
}

TEST(Args, BriefExample) {
  // salt '*' test.arg 1 true "{a: 1}" x=2
  value expected = value::parse(R"([1, true, {"a": 1}, {"__kwarg__": true, "x": 2}])");
  EXPECT_EQ(cli::parse_input({"1", "true", "{a: 1}", "x=2"}), expected);
}

TEST(Args, SpecialFloats) {
  EXPECT_TRUE(std::isinf(cli::yamlify_arg(".inf").get<double>()));
  EXPECT_TRUE(std::isnan(cli::yamlify_arg(".nan").get<double>()));
  EXPECT_EQ(cli::yamlify_arg("-.inf").get<double>(), -INFINITY);
}

TEST(Args, Kwarg) {
  EXPECT_EQ(cli::parse_kwarg("a=b"), std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(cli::parse_kwarg("a=b=c")->second, "b=c");
  EXPECT_FALSE(cli::parse_kwarg("x==y"));
  EXPECT_FALSE(cli::parse_kwarg("1a=2"));
  EXPECT_FALSE(cli::parse_kwarg("=v"));
  EXPECT_FALSE(cli::parse_kwarg("a b=c"));
  EXPECT_FALSE(cli::parse_kwarg("k=multi\nline"));
  EXPECT_EQ(cli::parse_kwarg("k=end\n")->second, "end");
}

TEST(Args, ParseInputSplitForRunners) {
  auto p = cli::parse_input_split({"a", "1", "k=v", "n=2"});
  EXPECT_EQ(p.args, value::parse(R"(["a", 1])"));
  EXPECT_EQ(p.kwargs, value::parse(R"({"k": "v", "n": 2})"));
}

// ---------------------------------------------------------------------------------
// targets and compound functions

cli::salt_job job_of(std::vector<std::string> pos, bool list = false, std::string sep = ",") {
  auto r = cli::make_salt_job(pos, list, sep);
  EXPECT_TRUE(std::holds_alternative<cli::salt_job>(r));
  return std::get<cli::salt_job>(r);
}

TEST(Targets, Glob) {
  auto j = job_of({"web*", "cmd.run", "ls -l"});
  EXPECT_EQ(j.tgt, value("web*"));
  EXPECT_EQ(j.tgt_type, "glob");
  EXPECT_EQ(j.fun, value("cmd.run"));
  EXPECT_EQ(j.arg, value::parse(R"(["ls -l"])"));
}

TEST(Targets, ListCommaAndSpace) {
  EXPECT_EQ(job_of({"a, b,c", "test.ping"}, true).tgt, value::parse(R"(["a","b","c"])"));
  EXPECT_EQ(job_of({"a b  c", "test.ping"}, true).tgt, value::parse(R"(["a","b","c"])"));
  EXPECT_EQ(job_of({"a", "test.ping"}, true).tgt_type, "list");
}

TEST(Targets, CompoundFunctionsNewStyle) {
  auto j = job_of({"*", "test.arg,test.echo", "1", "k=v", ",", "hi"});
  EXPECT_EQ(j.fun, value::parse(R"(["test.arg","test.echo"])"));
  EXPECT_EQ(j.arg, value::parse(R"([[1, {"__kwarg__": true, "k": "v"}], ["hi"]])"));
}

TEST(Targets, CompoundFunctionsOldStyle) {
  auto j = job_of({"*", "test.arg,test.echo,test.ping", "1,hi", ","});
  EXPECT_EQ(j.arg, value::parse(R"([[1], ["hi"], []])"));
}

TEST(Targets, CompoundFunctionsTooFewArgs) {
  auto r = cli::make_salt_job({"*", "a.b,c.d,e.f", "1,2", "3"}, false);
  ASSERT_TRUE(std::holds_alternative<cli::salt_job_error>(r));
  EXPECT_EQ(std::get<cli::salt_job_error>(r).exit_code, 42);
  EXPECT_EQ(std::get<cli::salt_job_error>(r).message, "Cannot execute compound command without defining all arguments.\n");
}

TEST(Targets, MissingPieces) {
  auto r = cli::make_salt_job({}, false);
  EXPECT_EQ(std::get<cli::salt_job_error>(r).message, "\nCannot execute command without defining a target.\n\n");
  r = cli::make_salt_job({"*"}, false);
  EXPECT_EQ(std::get<cli::salt_job_error>(r).message, "\nIncomplete options passed.\n\n");
}

TEST(Targets, Nodegroups) {
  std::map<std::string, std::string> g = {{"web", "L@web1,web2"}, {"all", "N@web or G@os:Debian"}, {"loop", "N@loop"}};
  EXPECT_EQ(cli::expand_nodegroup("web", g), "L@web1,web2");
  EXPECT_EQ(cli::expand_nodegroup("all", g), "( ( L@web1,web2 ) or G@os:Debian )");
  EXPECT_FALSE(cli::expand_nodegroup("loop", g));
  EXPECT_FALSE(cli::expand_nodegroup("nope", g));
  EXPECT_EQ(cli::expand_compound_nodegroups("N@web and not db*", g), "L@web1,web2 and not db*");
  EXPECT_FALSE(cli::expand_compound_nodegroups("N@nope", g));
}

// ---------------------------------------------------------------------------------
// salt-key

TEST(Keys, Fnmatch) {
  EXPECT_TRUE(keys::fnmatch("web*", "web1"));
  EXPECT_TRUE(keys::fnmatch("*", "a/b"));
  EXPECT_TRUE(keys::fnmatch("*", ".hidden"));
  EXPECT_TRUE(keys::fnmatch("w[!x]b", "wab"));
  EXPECT_FALSE(keys::fnmatch("Web*", "web1"));
}

TEST(Keys, NoMatchMessage) {
  EXPECT_EQ(keys::no_match_message("zzz", false, false, false), "The key glob 'zzz' does not match any unaccepted keys.");
  EXPECT_EQ(keys::no_match_message("zzz", false, true, true),
            "The key glob 'zzz' does not match any unaccepted, rejected or denied keys.");
}

TEST(Keys, ListingLayout) {
  value d = value::parse(R"({"minions_pre": ["pend1"], "minions_rejected": [], "minions": ["b", "A"],
                             "minions_denied": [], "local": {"master.pem": "aa"}})");
  EXPECT_EQ(keys::render_key_listing(d, false),
            "Local Keys:\nmaster.pem:  aa\nAccepted Keys:\nA\nb\nDenied Keys:\nUnaccepted Keys:\npend1\nRejected Keys:");
}

struct temp_master {
  fs::path root;
  sylvite::config::master_config cfg;
  temp_master() {
    char tmpl[] = "/tmp/sylvite_cli_test_XXXXXX";
    root = ::mkdtemp(tmpl);
    fs::copy(src / "fixtures/pki", root / "pki", fs::copy_options::recursive);
    fs::create_directories(root / "pki/minions_autosign");
    fs::create_directories(root / "cache");
    cfg.pki_dir = root / "pki";
    cfg.cachedir = root / "cache";
    cfg.sock_dir = root / "sock";
    cfg.id = "testmaster";
  }
  ~temp_master() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

struct run_result {
  int rc;
  std::string out, err;
  std::vector<std::pair<std::string, std::vector<std::string>>> events;
};

run_result run_key(temp_master& m, keys::key_options o, const std::string& stdin_text = "", bool master_up = false) {
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  run_result r;
  keys::key_io io{in, out, err, {}};
  io.notify = [&](const std::string& act, const std::vector<std::string>& ids) {
    r.events.emplace_back(act, ids);
    return master_up;
  };
  r.rc = keys::run_salt_key(o, m.cfg, io);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Expected texts below are what Salt 3008.5's salt-key printed for fixtures/pki.
TEST(Keys, ListAll) {
  temp_master m;
  keys::key_options o;
  o.list_all = true;
  EXPECT_EQ(run_key(m, o).out,
            "Accepted Keys:\nacc1\nacc2\nDenied Keys:\nacc1\nUnaccepted Keys:\npend1\npend2\nweb1\nRejected Keys:\nrej1\n");
  o.out = "json";
  EXPECT_EQ(run_key(m, o).out,
            "{\n    \"minions_pre\": [\n        \"pend1\",\n        \"pend2\",\n        \"web1\"\n    ],\n"
            "    \"minions_rejected\": [\n        \"rej1\"\n    ],\n    \"minions\": [\n        \"acc1\",\n"
            "        \"acc2\"\n    ],\n    \"minions_denied\": [\n        \"acc1\"\n    ]\n}\n");
}

TEST(Keys, ListState) {
  temp_master m;
  keys::key_options o;
  o.list = "acc";
  EXPECT_EQ(run_key(m, o).out, "Accepted Keys:\nacc1\nacc2\n");
  o.list = "un";
  EXPECT_EQ(run_key(m, o).out, "Unaccepted Keys:\npend1\npend2\nweb1\n");
}

// Expected values: Salt's salt.utils.crypt.pem_finger(path=<key file>), the form a
// minion uses for master_finger and `salt-call key.finger` (see key_fingerprint).
TEST(Keys, FingerMatchesSalt) {
  temp_master m;
  keys::key_options o;
  o.finger = "acc*";
  EXPECT_EQ(run_key(m, o).out,
            "Accepted Keys:\n"
            "acc1:  83:da:1a:09:a7:1f:47:e4:b7:8b:3a:b6:f7:95:60:e7:ab:e9:7b:56:14:61:16:8a:49:d6:58:9d:da:1b:26:81\n"
            "acc2:  5e:d9:de:f1:57:86:67:6d:2d:55:75:43:db:86:a0:20:fd:4e:3f:28:81:c0:27:06:c4:7c:fa:5b:8a:b7:35:f0\n"
            "Denied Keys:\n"
            "acc1:  a0:08:8e:1a:1c:09:99:e8:d4:55:31:1c:44:3d:e6:72:b4:de:0a:90:10:8f:c1:0a:7c:ec:7b:43:06:f3:fc:31\n");
  o.finger = "zzz";
  auto r = run_key(m, o);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.rc, 0);
}

TEST(Keys, FingerAllListsLocalKeysFirst) {
  temp_master m;
  const std::string pub = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
  std::ofstream(m.cfg.pki_dir / "master.pub") << pub;
  keys::key_options o;
  o.finger_all = true;
  auto r = run_key(m, o);
  auto fp = keys::key_fingerprint(pub, "sha256");
  ASSERT_TRUE(fp.has_value());
  EXPECT_EQ(r.out.rfind("Local Keys:\nmaster.pub:  " + *fp + "\nAccepted Keys:\n", 0), 0u) << r.out;
  EXPECT_EQ(fp->size(), 95u);  // 32 bytes as hex pairs joined by ':'
  // The value an operator copies into a minion's master_finger must be what the minion
  // computes from minion_master.pub (pem body without BEGIN/END lines).
  EXPECT_EQ(*fp, *sylvite::crypto::pem_fingerprint(pub, "sha256"));
  EXPECT_NE(*fp, *sylvite::crypto::hash_hex(pub, "sha256"));
}

TEST(Keys, AcceptNoMatchIsExitZero) {
  temp_master m;
  keys::key_options o;
  o.accept = "zzz";
  auto r = run_key(m, o);
  EXPECT_EQ(r.out, "The key glob 'zzz' does not match any unaccepted keys.\n");
  EXPECT_EQ(r.rc, 0);
  o.accept = "acc1";  // accepted already: not pending
  EXPECT_EQ(run_key(m, o).out, "The key glob 'acc1' does not match any unaccepted keys.\n");
}

TEST(Keys, AcceptPromptDefaultsYes) {
  temp_master m;
  keys::key_options o;
  o.accept = "pend1";
  auto r = run_key(m, o, "\n");
  EXPECT_EQ(r.out,
            "The following keys are going to be accepted:\nUnaccepted Keys:\npend1\nProceed? [n/Y] Key for minion pend1 "
            "accepted.\n");
  EXPECT_TRUE(fs::exists(m.cfg.pki_dir / "minions/pend1"));
  EXPECT_FALSE(fs::exists(m.cfg.pki_dir / "minions_pre/pend1"));
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].first, "accept");
  EXPECT_FALSE(fs::exists(m.cfg.cachedir / ".dfn"));  // accept never asks for a rotation
}

TEST(Keys, AcceptPromptNoAndEof) {
  temp_master m;
  keys::key_options o;
  o.accept = "pend1";
  auto r = run_key(m, o, "n\n");
  EXPECT_EQ(r.out, "The following keys are going to be accepted:\nUnaccepted Keys:\npend1\nProceed? [n/Y] ");
  EXPECT_TRUE(fs::exists(m.cfg.pki_dir / "minions_pre/pend1"));
  EXPECT_TRUE(r.events.empty());
  r = run_key(m, o, "");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.err.find("EOF when reading a line"), std::string::npos);
  EXPECT_TRUE(fs::exists(m.cfg.pki_dir / "minions_pre/pend1"));
}

TEST(Keys, AcceptGlobListYes) {
  temp_master m;
  keys::key_options o;
  o.accept = "pend*,web1";
  o.yes = true;
  auto r = run_key(m, o);
  EXPECT_EQ(r.out,
            "The following keys are going to be accepted:\nUnaccepted Keys:\npend1\npend2\nweb1\n"
            "Key for minion pend1 accepted.\nKey for minion pend2 accepted.\nKey for minion web1 accepted.\n");
}

TEST(Keys, AcceptIncludeRejected) {
  temp_master m;
  keys::key_options o;
  o.accept = "rej1";
  o.include_rejected = true;
  o.yes = true;
  EXPECT_EQ(run_key(m, o).out,
            "The following keys are going to be accepted:\nRejected Keys:\nrej1\nKey for minion rej1 accepted.\n");
}

TEST(Keys, RejectWritesDropfileWhenMasterDown) {
  temp_master m;
  keys::key_options o;
  o.reject = "acc2";
  o.include_accepted = true;
  o.yes = true;
  auto r = run_key(m, o);
  EXPECT_EQ(r.out,
            "The following keys are going to be rejected:\nAccepted Keys:\nacc2\nKey for minion acc2 rejected.\n");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].first, "reject");
  const auto dfn = m.cfg.cachedir / ".dfn";
  ASSERT_TRUE(fs::exists(dfn));
  std::ifstream f(dfn);
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "testmaster");
  struct stat st {};
  ASSERT_EQ(::stat(dfn.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
}

// salt-key on a master whose cluster_pki_dir is a local copy (made by a join) and whose
// daemon is not running: the change is kept in .sylvite-unsettled-keys for that master,
// which tells the cluster's share when it is back. Not on the share, not when told.
TEST(Keys, LocalCopyKeepsChangesForTheMasterWhenItIsDown) {
  temp_master m;
  m.cfg.cluster_id = "c1";
  m.cfg.cluster_pki_dir = m.cfg.pki_dir;
  const auto file = m.cfg.pki_dir / sylvite::cluster::k_unsettled_keys_file;
  keys::key_options o;
  o.yes = true;
  o.accept = "pend1";
  run_key(m, o);
  EXPECT_FALSE(fs::exists(file));  // a member on the share: the share is the record
  std::ofstream(m.cfg.pki_dir / sylvite::cluster::k_local_copy_marker) << "test\n";
  o.accept = "pend2";
  run_key(m, o);
  o.accept.reset();
  o.reject = "acc2";
  o.include_accepted = true;
  o.rotate_aes_key = false;
  run_key(m, o);
  o.reject.reset();
  o.del = "acc1";
  o.rotate_aes_key = true;
  run_key(m, o);
  auto u = sylvite::cluster::read_unsettled_keys(m.cfg.pki_dir);
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->accepted, std::set<std::string>{"pend2"});
  using rv = sylvite::cluster::unsettled_keys::revoke;
  EXPECT_EQ(u->revoked, (std::map<std::string, rv>{{"acc1", rv{"delete", true}}, {"acc2", rv{"reject", false}}}));
  // Accepted again: the reject is replaced; a running master records it itself.
  o.del.reset();
  o.accept = "acc2";
  o.include_rejected = true;
  run_key(m, o);
  u = sylvite::cluster::read_unsettled_keys(m.cfg.pki_dir);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->accepted, (std::set<std::string>{"acc2", "pend2"}));
  EXPECT_FALSE(u->revoked.contains("acc2"));
  o.accept.reset();
  o.reject = "pend2";
  run_key(m, o, "", /*master_up=*/true);
  u = sylvite::cluster::read_unsettled_keys(m.cfg.pki_dir);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->accepted.contains("pend2"));
}

TEST(Keys, DeleteBothStatesMasterUp) {
  temp_master m;
  keys::key_options o;
  o.del = "acc1";
  o.yes = true;
  auto r = run_key(m, o, "", /*master_up=*/true);
  EXPECT_EQ(r.out,
            "The following keys are going to be deleted:\nAccepted Keys:\nacc1\nDenied Keys:\nacc1\n"
            "Key for minion acc1 deleted.\nKey for minion acc1 deleted.\n");
  EXPECT_FALSE(fs::exists(m.cfg.pki_dir / "minions/acc1"));
  EXPECT_FALSE(fs::exists(m.cfg.pki_dir / "minions_denied/acc1"));
  EXPECT_FALSE(fs::exists(m.cfg.cachedir / ".dfn"));  // the running master rotates itself
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].second, std::vector<std::string>{"acc1"});
}

TEST(Keys, DeletePromptDefaultsNo) {
  temp_master m;
  keys::key_options o;
  o.delete_all = true;
  auto r = run_key(m, o, "\n");
  EXPECT_NE(r.out.find("Proceed? [N/y] "), std::string::npos);
  EXPECT_TRUE(fs::exists(m.cfg.pki_dir / "minions/acc1"));
}

TEST(Keys, PrintKey) {
  temp_master m;
  keys::key_options o;
  o.print = "web1";
  auto r = run_key(m, o);
  std::ifstream f(m.cfg.pki_dir / "minions_pre/web1");
  std::string pem((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!pem.empty() && pem.back() == '\n') pem.pop_back();
  EXPECT_EQ(r.out, "Unaccepted Keys:\nweb1:  " + pem + "\n");
}

}  // namespace
