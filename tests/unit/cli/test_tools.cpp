// Unit tests for the three tools' logic in sylvite_cli (salt_main, salt_run_main,
// salt_key_main) with a fake master: the request bodies they send (pinned), how they print
// the replies and their exit codes (Salt's), and the flags they refuse.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "master/cli/common.hpp"
#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "master/ipc_protocol.hpp"

namespace {

using sylvite::wire::value;
namespace cli = sylvite::cli;
namespace ipc = sylvite::master::ipc;
namespace fs = std::filesystem;

const std::string J = "20240101010101010101";

// A config dir with a master file, pki/cache/sock dirs under one temp root.
struct temp_conf {
  fs::path root;
  temp_conf(const std::string& extra = "") {
    char tmpl[] = "/tmp/sylvite_cli_tools_XXXXXX";
    root = ::mkdtemp(tmpl);
    fs::create_directories(root / "pki/minions");
    fs::create_directories(root / "pki/minions_pre");
    fs::create_directories(root / "pki/minions_rejected");
    fs::create_directories(root / "pki/minions_denied");
    fs::create_directories(root / "pki/minions_autosign");
    fs::create_directories(root / "cache");
    std::ofstream(root / "master") << "id: testmaster\npki_dir: " << (root / "pki").string()
                                   << "\ncachedir: " << (root / "cache").string() << "\nsock_dir: "
                                   << (root / "sock").string() << "\n"
                                   << extra;
  }
  ~temp_conf() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// The fake master: records request bodies, answers from a script.
struct fake_master {
  std::vector<value> requests;
  std::vector<value> pushes;                  // sent to request_stream's on_item
  std::optional<value> final_reply;           // nullopt: master down
  std::function<std::optional<value>(const value&)> answer = [](const value& b) -> std::optional<value> {
    if (ipc::command_of(b) == "ping") return ipc::encode(ipc::ping_reply{"testmaster"});
    return std::nullopt;
  };
};

struct run_out {
  int rc = -1;
  std::string out, err;
};

run_out run(int (*tool)(int, char**, cli::cli_env&), std::vector<std::string> args, fake_master& m,
            const std::string& in_text = "") {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::istringstream in(in_text);
  std::ostringstream out, err;
  cli::cli_env env;
  env.in = &in;
  env.out = &out;
  env.err = &err;
  env.user = [] { return std::string("tester"); };
  env.request = [&m](const sylvite::config::master_config&, const value& body, std::chrono::milliseconds) {
    m.requests.push_back(body);
    cli::master_reply r;
    if (auto a = m.answer(body)) r.body = *a;
    else if (m.final_reply) r.body = *m.final_reply;
    else r.error = cli::msg_master_down, r.down = true;
    return r;
  };
  env.request_stream = [&m](const sylvite::config::master_config&, const value& body,
                            const std::function<void(const value&)>& on_item, std::chrono::milliseconds) {
    m.requests.push_back(body);
    cli::master_reply r;
    for (const auto& p : m.pushes) on_item(p);
    if (m.final_reply) r.body = *m.final_reply;
    else r.error = cli::msg_master_down, r.down = true;
    return r;
  };
  run_out o;
  o.rc = tool(static_cast<int>(argv.size()), argv.data(), env);
  o.out = out.str();
  o.err = err.str();
  return o;
}

// ---- salt --------------------------------------------------------------------------------

TEST(SaltTool, WaitPrintsReturnsAndNoReturn) {
  temp_conf c;
  fake_master m;
  m.pushes = {ipc::encode(ipc::publish_head{J, {"a", "b"}, {}}),
              ipc::encode(ipc::return_item_of("a", J, value{{"return", true}, {"retcode", 0}}))};
  m.final_reply = ipc::encode(ipc::publish_done{J, {"b"}});
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "*", "test.ping"}, m);
  ASSERT_EQ(m.requests.size(), 2u);
  EXPECT_EQ(m.requests[0].dump(), R"({"cmd":"ping"})");
  // the bytes salt sends for `salt '*' test.ping` (master timeout 5)
  EXPECT_EQ(m.requests[1].dump(),
            R"({"cmd":"publish","tgt":"*","tgt_type":"glob","fun":"test.ping","arg":[],"ret":"","timeout":5,)"
            R"("user":"tester","delimiter":":","wait":true})");
  EXPECT_EQ(r.out,
            "a:\n    True\nb:\n    Minion did not return. [No response]\n    The minions may not have all finished "
            "running and any remaining minions will return upon completion. To look up the return data for this "
            "job later, run the following command:\n    \n    salt-run jobs.lookup_jid " +
                J + "\n");
  EXPECT_EQ(r.err, "ERROR: Minions returned with non-zero exit code\n");
  EXPECT_EQ(r.rc, 1);
}

// A state run: the return's out (highstate) picks the outputter, the master's state_*
// options apply, --state-verbose overrides; a failed state (retcode 2) makes salt exit 1.
TEST(SaltTool, StateReturnPrintsHighstate) {
  temp_conf c("state_output: terse\nstate_output_profile: False\n");
  const value states = value::parse(R"({
    "test_|-ok_|-ok_|-succeed_without_changes": {"result": true, "changes": {}, "comment": "Success!",
                                                 "__run_num__": 0, "name": "ok"},
    "test_|-bad_|-bad_|-fail_without_changes": {"result": false, "changes": {}, "comment": "Failure!",
                                                "__run_num__": 1, "name": "bad"}})");
  auto push = [&] {
    fake_master m;
    m.pushes = {ipc::encode(ipc::publish_head{J, {"a"}, {}}),
                ipc::encode(ipc::return_item_of("a", J, value{{"return", states}, {"retcode", 2}, {"out", "highstate"}}))};
    m.final_reply = ipc::encode(ipc::publish_done{J, {}});
    return m;
  };
  const std::string summary =
      "\nSummary for a\n------------\nSucceeded: 1\nFailed:    1\n------------\nTotal states run:     2\n";
  {
    auto m = push();
    auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--state-verbose", "False", "a", "state.apply"}, m);
    EXPECT_EQ(r.out, "a:\n  Name: bad - Function: test.fail_without_changes - Result: Failed\n" + summary);
    EXPECT_EQ(r.err, "ERROR: Minions returned with non-zero exit code\n");
    EXPECT_EQ(r.rc, 1);
  }
  {
    auto m = push();
    auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--out", "highstate", "a", "state.apply"}, m);
    EXPECT_EQ(r.out,
              "a:\n  Name: ok - Function: test.succeed_without_changes - Result: Clean\n"
              "  Name: bad - Function: test.fail_without_changes - Result: Failed\n" + summary);
  }
  {
    auto m = push();
    auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--out", "json", "a", "state.apply"}, m);
    EXPECT_EQ(r.out.substr(0, 7), "{\n    \"");
  }
}

TEST(SaltTool, AllReturnedExitZero) {
  temp_conf c;
  fake_master m;
  m.pushes = {ipc::encode(ipc::publish_head{J, {"a"}, {}}),
              ipc::encode(ipc::return_item_of("a", J, value{{"return", "hi"}, {"retcode", 0}}))};
  m.final_reply = ipc::encode(ipc::publish_done{J, {}});
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "-t", "9", "--show-jid", "a", "cmd.run", "echo hi"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "jid: " + J + "\na:\n    hi\n");
  auto d = ipc::decode_request(m.requests[1]);
  ASSERT_TRUE(d);
  const auto& p = std::get<ipc::publish>(*d);
  EXPECT_EQ(p.timeout, 9);
  EXPECT_EQ(p.arg, value::array({"echo hi"}));
}

TEST(SaltTool, NonZeroRetcodeExitOne) {
  temp_conf c;
  fake_master m;
  m.pushes = {ipc::encode(ipc::publish_head{J, {"a"}, {}}),
              ipc::encode(ipc::return_item_of("a", J, value{{"return", "boom"}, {"retcode", 3}}))};
  m.final_reply = ipc::encode(ipc::publish_done{J, {}});
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "a", "cmd.run", "false"}, m);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "ERROR: Minions returned with non-zero exit code\n");
}

TEST(SaltTool, NoMinionMatched) {
  temp_conf c;
  fake_master m;
  m.final_reply = ipc::encode(ipc::error_reply{"No minions matched the target. No command was sent, no jid was assigned."});
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "nobody", "test.ping"}, m);
  EXPECT_EQ(r.out, "No minions matched the target. No command was sent, no jid was assigned.\n");
  EXPECT_EQ(r.err, "ERROR: No return received\n");
  EXPECT_EQ(r.rc, 2);
}

TEST(SaltTool, AsyncPrintsJid) {
  temp_conf c;
  fake_master m;
  m.final_reply = ipc::encode(ipc::publish_head{J, {"a"}, {}});
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--async", "*", "test.ping"}, m);
  EXPECT_EQ(r.out, "Executed command with job ID: " + J + "\n");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(m.requests[1]["wait"], value(false));
}

TEST(SaltTool, MasterDown) {
  temp_conf c;
  fake_master m;
  m.answer = [](const value&) { return std::optional<value>(); };
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "*", "test.ping"}, m);
  EXPECT_EQ(r.out, std::string(cli::msg_master_down) + "\n");
  EXPECT_EQ(r.rc, 2);
}

TEST(SaltTool, PublishOptionsSent) {
  temp_conf c;
  fake_master m;
  m.final_reply = ipc::encode(ipc::publish_head{J, {"a"}, {}});
  run(cli::salt_main,
      {"salt", "-c", c.root.string(), "--async", "--metadata", "{a: 1}", "--return_config", "alt", "--start-event",
       "-L", "a,b", "test.ping"},
      m);
  EXPECT_EQ(m.requests[1].dump(),
            R"({"cmd":"publish","tgt":["a","b"],"tgt_type":"list","fun":"test.ping","arg":[],"ret":"","timeout":5,)"
            R"("user":"tester","delimiter":":","wait":false,"ret_config":"alt","metadata":{"a":1},"start_event":true})");
}

TEST(SaltTool, UsageErrors) {
  temp_conf c;
  fake_master m;
  auto r = run(cli::salt_main, {"salt", "-c", c.root.string(), "*"}, m);
  EXPECT_EQ(r.rc, 42);
  EXPECT_NE(r.err.find("Incomplete options passed."), std::string::npos);
  r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--saltfile", "/x", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 64);
  EXPECT_NE(r.err.find("salt: error: --saltfile is not supported by sylvite"), std::string::npos);
  r = run(cli::salt_main, {"salt", "-c", c.root.string(), "--async", "-b", "10", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 64);
  r = run(cli::salt_main, {"salt", "--no-such-flag"}, m);
  EXPECT_EQ(r.rc, 64);
  EXPECT_NE(r.err.find("salt: error: no such option: --no-such-flag"), std::string::npos);
  EXPECT_TRUE(m.requests.empty());
}

// ---- salt-run ----------------------------------------------------------------------------

TEST(SaltRunTool, RunnerBodyAndRetcode) {
  temp_conf c;
  fake_master m;
  m.final_reply = ipc::encode(ipc::runner_reply{value{{"up", value::array({"a"})}}, 3});
  auto r = run(cli::salt_run_main, {"salt-run", "-c", c.root.string(), "-t", "7", "manage.up", "1", "x=2"}, m);
  ASSERT_EQ(m.requests.size(), 1u);
  EXPECT_EQ(m.requests[0].dump(),
            R"({"cmd":"runner","fun":"manage.up","arg":[1],"kwarg":{"x":2},"timeout":7,"user":"tester"})");
  EXPECT_EQ(r.out, "up:\n    - a\n");
  EXPECT_EQ(r.rc, 3);
}

TEST(SaltRunTool, ErrorReply) {
  temp_conf c;
  fake_master m;
  m.final_reply = ipc::encode(ipc::error_reply{"runner: fun missing"});
  auto r = run(cli::salt_run_main, {"salt-run", "-c", c.root.string(), "x.y"}, m);
  EXPECT_EQ(r.out, "runner: fun missing\n");
  EXPECT_EQ(r.rc, 1);
}

TEST(SaltRunTool, Refusals) {
  temp_conf c;
  fake_master m;
  EXPECT_EQ(run(cli::salt_run_main, {"salt-run", "--saltfile", "x", "a.b"}, m).rc, 64);
  EXPECT_EQ(run(cli::salt_run_main, {"salt-run", "--async", "a.b"}, m).rc, 64);
  auto r = run(cli::salt_run_main, {"salt-run", "--jid", "20260101000000000000", "a.b"}, m);
  EXPECT_EQ(r.rc, 64);
  EXPECT_NE(r.err.find("--jid is not supported by sylvite"), std::string::npos);
  EXPECT_TRUE(m.requests.empty());
}

// ---- salt-key ----------------------------------------------------------------------------

TEST(SaltKeyTool, DeleteNotifiesMaster) {
  temp_conf c;
  std::ofstream(c.root / "pki/minions/m1") << "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
  fake_master m;
  m.final_reply = ipc::encode(ipc::key_event_reply{true});
  auto r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-y", "-d", "m1", "--rotate-aes-key", "False"}, m);
  EXPECT_EQ(r.rc, 0);
  ASSERT_EQ(m.requests.size(), 1u);
  EXPECT_EQ(m.requests[0].dump(), R"({"cmd":"key_event","act":"delete","ids":["m1"],"rotate":false})");
  EXPECT_FALSE(fs::exists(c.root / "pki/minions/m1"));
}

TEST(SaltKeyTool, ListNeedsNoMaster) {
  temp_conf c;
  fake_master m;
  auto r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-L"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "Accepted Keys:\nDenied Keys:\nUnaccepted Keys:\nRejected Keys:\n");
  EXPECT_TRUE(m.requests.empty());
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "--saltfile", "x"}, m).rc, 64);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-l", "bogus"}, m).rc, 64);
}

// Flags Salt accepts that sylvite does not implement are refused, not ignored.
TEST(SaltKeyTool, UnsupportedFlagsRefused) {
  temp_conf c;
  fake_master m;
  auto r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-u", "someone", "-L"}, m);
  EXPECT_EQ(r.rc, 64);
  EXPECT_NE(r.err.find("-u/--user is not supported"), std::string::npos);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-u", "tester", "-L"}, m).rc, 0);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "-q", "-L"}, m).rc, 64);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--preserve-minions", "True", "-L"}, m).rc, 64);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--preserve-minions", "False", "-L"}, m).rc, 0);
  EXPECT_TRUE(m.requests.empty());
}

TEST(SaltKeyTool, GenSignatureAutoCreate) {
  temp_conf c;
  auto mk = sylvite::crypto::rsa_key::generate(2048);
  ASSERT_TRUE(mk);
  std::ofstream(c.root / "pki/master.pub") << mk->public_pem();
  fake_master m;
  // no signing key and no --auto-create: Salt's text, exit 0
  auto r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--gen-signature"}, m);
  EXPECT_EQ(r.out, "return:\n    No usable private-key found\n");
  EXPECT_EQ(r.rc, 0);
  r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--gen-signature", "--auto-create"}, m);
  EXPECT_EQ(r.out, "return:\n    True\n");
  EXPECT_EQ(r.rc, 0);
  auto sign_pem = sylvite::util::read_file(c.root / "pki/master_sign.pem");
  ASSERT_TRUE(sign_pem);
  auto sk = sylvite::crypto::rsa_key::from_private_pem(*sign_pem);
  ASSERT_TRUE(sk);
  auto sig_text = sylvite::util::read_file(c.root / "pki/testmaster_pubkey_signature");
  ASSERT_TRUE(sig_text);
  ASSERT_EQ(sig_text->back(), '\n');
  EXPECT_EQ(fs::status(c.root / "pki/testmaster_pubkey_signature").permissions() & fs::perms::all, fs::perms::owner_read);
  auto sig = sylvite::crypto::base64_decode(sylvite::crypto::clean_key(*sig_text));
  ASSERT_TRUE(sig);
  EXPECT_TRUE(sylvite::crypto::verify(*sk, sylvite::crypto::clean_key(mk->public_pem()), *sig));
  // a second run does not overwrite it
  r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--gen-signature"}, m);
  EXPECT_EQ(r.out, "return:\n    False\n");
  EXPECT_EQ(r.err, "[ERROR   ] testmaster_pubkey_signature already exists at expected location\n");
  // explicit files and path
  r = run(cli::salt_key_main,
          {"salt-key", "-c", c.root.string(), "--gen-signature", "--pub", (c.root / "pki/master.pub").string(), "--priv",
           (c.root / "pki/master_sign.pem").string(), "--signature-path", (c.root / "out").string()},
          m);
  EXPECT_EQ(r.out, "return:\n    True\n");
  EXPECT_TRUE(fs::exists(c.root / "out/testmaster_pubkey_signature"));
  r = run(cli::salt_key_main, {"salt-key", "-c", c.root.string(), "--gen-signature", "--pub", "/nonexistent.pub"}, m);
  EXPECT_EQ(r.out, "return:\n    Public-key /nonexistent.pub does not exist\n");
  EXPECT_TRUE(m.requests.empty());
}

TEST(SaltKeyTool, GenKeys) {
  temp_conf c;
  fake_master m;
  const fs::path dir = c.root / "gen";
  auto r = run(cli::salt_key_main, {"salt-key", "--gen-keys", "web1", "--gen-keys-dir", dir.string()}, m);
  EXPECT_EQ(r.rc, 0);
  ASSERT_TRUE(fs::exists(dir / "web1.pem"));
  ASSERT_TRUE(fs::exists(dir / "web1.pub"));
  auto pub = sylvite::util::read_file(dir / "web1.pub");
  ASSERT_TRUE(pub);
  auto fp = sylvite::crypto::pem_fingerprint(*pub, "sha256");
  ASSERT_TRUE(fp);
  EXPECT_EQ(r.out, "return:\n    " + *fp + "\n");
  EXPECT_EQ(fs::status(dir / "web1.pem").permissions() & fs::perms::all, fs::perms::owner_read);
  // an existing key is kept
  auto again = run(cli::salt_key_main, {"salt-key", "--gen-keys", "web1", "--gen-keys-dir", dir.string()}, m);
  EXPECT_EQ(again.out, r.out);
  EXPECT_EQ(run(cli::salt_key_main, {"salt-key", "--gen-keys", "x", "--keysize", "1024"}, m).rc, 64);
}

}  // namespace
