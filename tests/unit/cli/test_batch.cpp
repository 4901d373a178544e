// Unit tests for salt -b (master/cli/batch.hpp): Salt 3008.5's batch sizing (get_bnum /
// get_batch_size), the state machine (progress_batch: rolling windows, --batch-wait,
// --failhard, the timeout sweep) and the driver against a fake master whose window
// streams run on the driver's threads (thread-safe fake).
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "master/cli/batch.hpp"
#include "master/cli/common.hpp"
#include "master/ipc_protocol.hpp"

namespace {

using sylvite::wire::value;
namespace cli = sylvite::cli;
namespace ipc = sylvite::master::ipc;
namespace fs = std::filesystem;
using clk = cli::batch_machine::clock;
using ms = std::chrono::milliseconds;

// ---- sizing --------------------------------------------------------------------------------

TEST(BatchSize, NumbersAndPercentages) {
  EXPECT_EQ(cli::batch_size_of("10", 3), 10u);
  EXPECT_EQ(cli::batch_size_of("0", 3), 1u);   // get_batch_size: at least 1
  EXPECT_EQ(cli::batch_bnum("0", 3), 0);       // the legacy get_bnum keeps 0
  EXPECT_EQ(cli::batch_size_of("10%", 20), 2u);
  EXPECT_EQ(cli::batch_size_of("10%", 25), 2u);  // int(2.5)
  EXPECT_EQ(cli::batch_size_of("10%", 5), 1u);   // ceil(0.5)
  EXPECT_EQ(cli::batch_size_of("50%", 3), 1u);   // int(1.5)
  EXPECT_EQ(cli::batch_size_of("%50", 4), 2u);   // strip('%') both ends, as Salt
  EXPECT_EQ(cli::batch_size_of("2.5%", 100), 2u);
  EXPECT_EQ(cli::batch_size_of("100%", 7), 7u);
  EXPECT_EQ(cli::batch_size_of("0%", 7), 1u);
  EXPECT_EQ(cli::batch_size_of(" 3 ", 7), 3u);   // int(" 3 ")
  EXPECT_EQ(cli::batch_size_of("1_0", 7), 10u);  // int("1_0")
  EXPECT_FALSE(cli::batch_size_of("x", 3));
  EXPECT_FALSE(cli::batch_size_of("1.5", 3));    // int("1.5") raises
  EXPECT_FALSE(cli::batch_size_of("", 3));
  EXPECT_FALSE(cli::batch_size_of("x%", 3));
  EXPECT_FALSE(cli::batch_size_of("1__0", 3));
  EXPECT_EQ(cli::py_float_text("1.5"), 1.5);
  EXPECT_FALSE(cli::py_float_text("0x10"));
  EXPECT_EQ(cli::py_int_text("-2"), -2);
}

// salt-api's `local` with `batch` (api_lowstate, and api_group on a cluster): the minions
// that answered, in windows of the batch size the CLI computes.
TEST(BatchSize, WindowsOfTheLocalClient) {
  const std::vector<std::string> up{"a", "b", "c", "d", "e"};
  using windows = std::vector<std::vector<std::string>>;
  EXPECT_EQ(cli::batch_windows("2", up), (windows{{"a", "b"}, {"c", "d"}, {"e"}}));
  EXPECT_EQ(cli::batch_windows("40%", up), (windows{{"a", "b"}, {"c", "d"}, {"e"}}));
  EXPECT_EQ(cli::batch_windows("10%", up), (windows{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}}));  // ceil below 1
  EXPECT_EQ(cli::batch_windows("0", up), (windows{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}}));    // at least 1
  EXPECT_EQ(cli::batch_windows("9", up), (windows{up}));
  EXPECT_EQ(cli::batch_windows("3", {}), windows{});
  EXPECT_FALSE(cli::batch_windows("1.5", up));  // Python's int("1.5") raises
  EXPECT_FALSE(cli::batch_windows("abc", up));
  EXPECT_FALSE(cli::batch_windows("x%", up));
}

TEST(BatchSize, ListRepr) {
  EXPECT_EQ(cli::py_list_repr({"a", "b"}), "['a', 'b']");
  EXPECT_EQ(cli::py_list_repr({}), "[]");
}

// ---- the state machine ---------------------------------------------------------------------

cli::batch_machine::settings sized(std::size_t n) {
  cli::batch_machine::settings s;
  s.batch_size = n;
  s.timeout = ms(5000);
  s.gather_job_timeout = ms(10000);
  return s;
}

TEST(BatchMachine, RollingWindows) {
  cli::batch_machine m({"a", "b", "c", "d", "e"}, sized(2));
  auto t0 = clk::now();
  auto a = m.progress({}, {}, t0);
  EXPECT_EQ(a.publish, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(m.progress({}, {}, t0).publish.empty());  // no free slot
  // one finishes: one new minion starts at once (rolling, not window by window)
  a = m.progress({{"b", {0, false}}}, {}, t0 + ms(10));
  EXPECT_EQ(a.publish, (std::vector<std::string>{"c"}));
  EXPECT_EQ(a.finished, (std::vector<std::string>{"b"}));
  a = m.progress({{"a", {0, false}}, {"c", {2, false}}}, {}, t0 + ms(20));
  EXPECT_EQ(a.publish, (std::vector<std::string>{"d", "e"}));
  EXPECT_FALSE(m.done());
  a = m.progress({{"d", {0, false}}}, {"e"}, t0 + ms(30));
  EXPECT_EQ(a.timed_out, (std::vector<std::string>{"e"}));
  EXPECT_TRUE(m.done());
  EXPECT_FALSE(m.halted());
  EXPECT_EQ(m.failed().at("e"), "timeout");
  // a duplicate return is ignored
  a = m.progress({{"d", {0, false}}}, {}, t0 + ms(40));
  EXPECT_TRUE(a.finished.empty());
}

TEST(BatchMachine, FailhardStopsPublishing) {
  auto s = sized(1);
  s.failhard = true;
  cli::batch_machine m({"a", "b", "c"}, s);
  auto t0 = clk::now();
  EXPECT_EQ(m.progress({}, {}, t0).publish, (std::vector<std::string>{"a"}));
  auto a = m.progress({{"a", {3, false}}}, {}, t0);
  EXPECT_TRUE(a.halted);
  EXPECT_TRUE(a.publish.empty());
  EXPECT_TRUE(m.done());
  // a "failed" (missing) minion trips it too; a timeout does not
  cli::batch_machine m2({"a", "b"}, s);
  m2.progress({}, {}, t0);
  a = m2.progress({}, {"a"}, t0);
  EXPECT_FALSE(a.halted);
  EXPECT_EQ(a.publish, (std::vector<std::string>{"b"}));
  a = m2.progress({{"b", {0, true}}}, {}, t0);
  EXPECT_TRUE(a.halted);
  // without --failhard a bad retcode goes on
  cli::batch_machine m3({"a", "b"}, sized(1));
  m3.progress({}, {}, t0);
  EXPECT_EQ(m3.progress({{"a", {3, false}}}, {}, t0).publish, (std::vector<std::string>{"b"}));
}

TEST(BatchMachine, BatchWaitHoldsTheSlot) {
  auto s = sized(1);
  s.batch_wait = ms(1500);
  cli::batch_machine m({"a", "b"}, s);
  auto t0 = clk::now();
  m.progress({}, {}, t0);
  auto a = m.progress({{"a", {0, false}}}, {}, t0 + ms(100));
  EXPECT_TRUE(a.publish.empty());  // the slot cools down for batch_wait
  ASSERT_TRUE(m.next_due());
  EXPECT_EQ(*m.next_due(), t0 + ms(1600));
  EXPECT_TRUE(m.progress({}, {}, t0 + ms(1500)).publish.empty());
  EXPECT_EQ(m.progress({}, {}, t0 + ms(1600)).publish, (std::vector<std::string>{"b"}));
}

TEST(BatchMachine, TimeoutSweepFreesTheSlot) {
  cli::batch_machine m({"a", "b"}, sized(1));
  auto t0 = clk::now();
  m.progress({}, {}, t0);
  EXPECT_EQ(*m.next_due(), t0 + ms(15000));  // timeout + gather_job_timeout
  EXPECT_TRUE(m.progress({}, {}, t0 + ms(14999)).publish.empty());
  auto a = m.progress({}, {}, t0 + ms(15000));
  EXPECT_EQ(a.timed_out, (std::vector<std::string>{"a"}));
  EXPECT_EQ(a.publish, (std::vector<std::string>{"b"}));
  // the late return of a swept minion is a duplicate for the machine
  EXPECT_TRUE(m.progress({{"a", {0, false}}}, {}, t0 + ms(15100)).finished.empty());
}

// ---- the driver against a fake master -------------------------------------------------------

const std::string J = "20261127010101010101";

struct temp_conf {
  fs::path root;
  temp_conf() {
    char tmpl[] = "/tmp/sylvite_cli_batch_XXXXXX";
    root = ::mkdtemp(tmpl);
    fs::create_directories(root / "pki/minions");
    fs::create_directories(root / "cache");
    std::ofstream(root / "master") << "id: testmaster\npki_dir: " << (root / "pki").string()
                                   << "\ncachedir: " << (root / "cache").string() << "\nsock_dir: "
                                   << (root / "sock").string() << "\n";
  }
  ~temp_conf() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// Minions: id -> {answers the ping, retcode, return}. Window streams are answered at once.
struct minion_script {
  bool up = true;
  int retcode = 0;
  value ret = true;
  bool answers_job = true;
};

struct fake_master {
  std::mutex mu;
  std::map<std::string, minion_script> minions;
  std::vector<value> publishes;                  // every publish body, in order
  std::vector<std::vector<std::string>> windows;  // list targets published
  bool match_none = false;

  void stream(const value& body, const std::function<void(const value&)>& on_item, cli::master_reply& r) {
    auto d = ipc::decode_request(body);
    const auto& p = std::get<ipc::publish>(*d);
    std::vector<std::string> targets;
    bool gather = false;
    {
      std::lock_guard lk(mu);
      publishes.push_back(body);
      if (p.tgt.is_array()) {
        for (auto& t : p.tgt) targets.push_back(t.get<std::string>());
        windows.push_back(targets);
      } else {
        gather = true;
        for (auto& [id, s] : minions) targets.push_back(id);
      }
    }
    if (match_none) {
      r.body = ipc::encode(ipc::error_reply{"No minions matched the target. No command was sent, no jid was assigned."});
      return;
    }
    const std::string jid = gather ? "20261127000000000000" : p.jid.value_or(J);
    on_item(ipc::encode(ipc::publish_head{jid, targets, {}}));
    std::vector<std::string> missing;
    for (auto& id : targets) {
      const auto& s = minions.at(id);
      bool answers = gather ? s.up : s.answers_job;
      if (!answers) {
        missing.push_back(id);
        continue;
      }
      value load = value::object();
      load["return"] = gather ? value(true) : s.ret;
      load["retcode"] = gather ? 0 : s.retcode;
      load["jid"] = jid;
      on_item(ipc::encode(ipc::return_item_of(id, jid, load)));
    }
    r.body = ipc::encode(ipc::publish_done{jid, missing});
  }
};

struct run_out {
  int rc = -1;
  std::string out, err;
};

run_out run(std::vector<std::string> args, fake_master& m) {
  temp_conf c;
  args.insert(args.begin() + 1, {"-c", c.root.string()});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  cli::cli_env env;
  env.out = &out;
  env.err = &err;
  env.user = [] { return std::string("tester"); };
  env.request = [](const sylvite::config::master_config&, const value&, std::chrono::milliseconds) {
    cli::master_reply r;
    r.body = ipc::encode(ipc::ping_reply{"testmaster"});
    return r;
  };
  env.request_stream = [&m](const sylvite::config::master_config&, const value& body,
                            const std::function<void(const value&)>& on_item, std::chrono::milliseconds) {
    cli::master_reply r;
    m.stream(body, on_item, r);
    return r;
  };
  run_out o;
  o.rc = cli::salt_main(static_cast<int>(argv.size()), argv.data(), env);
  o.out = out.str();
  o.err = err.str();
  return o;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

TEST(BatchDriver, PingInWindowsOfTwo) {
  fake_master m;
  for (auto id : {"a", "b", "c", "d"}) m.minions[id] = {};
  auto r = run({"salt", "-b", "2", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err, "");
  // every window is a list target of at most 2, all under the first window's jid
  std::set<std::string> covered;
  for (auto& w : m.windows) {
    EXPECT_LE(w.size(), 2u);
    covered.insert(w.begin(), w.end());
  }
  EXPECT_EQ(covered, (std::set<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(m.windows[0], (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(m.publishes[1].contains("jid"));  // the master gives the batch its jid
  for (std::size_t i = 2; i < m.publishes.size(); ++i) EXPECT_EQ(m.publishes[i]["jid"], value(J));
  // the gather: test.ping to the target, waiting
  EXPECT_EQ(m.publishes[0]["fun"], value("test.ping"));
  EXPECT_EQ(m.publishes[0]["tgt"], value("*"));
  EXPECT_EQ(r.out.rfind("\nExecuting run on ['a', 'b']\n\n", 0), 0u) << r.out;
  for (auto id : {"a", "b", "c", "d"})
    EXPECT_NE(r.out.find(std::string(id) + ":\n    True\njid:\n    " + J + "\nretcode:\n    0\n"), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "Executing run on"), m.windows.size());
}

TEST(BatchDriver, RetcodeIsTheHighest) {
  fake_master m;
  m.minions["a"] = {true, 3, "", true};
  m.minions["b"] = {true, 0, "ok", true};
  m.minions["c"] = {true, 7, "x", true};
  auto r = run({"salt", "--batch-size", "50%", "--out", "json", "*", "cmd.run", "exit 3"}, m);
  EXPECT_EQ(r.rc, 7);
  EXPECT_EQ(r.err, "");  // no "Minions returned with non-zero exit code" in batch mode
  EXPECT_NE(r.out.find("{\n    \"retcode\": 3,\n    \"jid\": \"" + J + "\",\n    \"a\": \"\"\n}\n"), std::string::npos)
      << r.out;
  for (auto& w : m.windows) EXPECT_EQ(w.size(), 1u);  // int(1.5)
}

TEST(BatchDriver, FailhardStops) {
  fake_master m;
  m.minions["a"] = {true, 3, "", true};
  m.minions["b"] = {true, 0, "", true};
  m.minions["c"] = {true, 0, "", true};
  auto r = run({"salt", "-b", "1", "--failhard", "*", "cmd.run", "exit 3"}, m);
  EXPECT_EQ(r.rc, 3);
  EXPECT_EQ(r.err, "[ERROR   ] Batch run stopped due to failhard\n");
  EXPECT_EQ(m.windows.size(), 1u);
  EXPECT_EQ(r.out, "\nExecuting run on ['a']\n\na:\njid:\n    " + J + "\nretcode:\n    3\n");
}

TEST(BatchDriver, DownMinionsAndNoReturn) {
  fake_master m;
  m.minions["a"] = {};
  m.minions["z"] = {false, 0, true, true};
  m.minions["b"] = {true, 0, true, false};  // answers the ping, never the job
  auto r = run({"salt", "-b", "5", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("Minion z did not respond. No job will be sent.\n\nExecuting run on ['a', 'b']\n\n", 0), 0u)
      << r.out;
  EXPECT_EQ(count(r.out, "b:"), 0u);  // Salt prints nothing for a window's timeout
  // --static shows it as {}
  r = run({"salt", "-b", "5", "--static", "--out", "json", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "{\n    \"a\": true,\n    \"b\": {}\n}\n");
}

TEST(BatchDriver, NothingMatchedOrAnswered) {
  fake_master m;
  m.match_none = true;
  auto r = run({"salt", "-b", "2", "nobody", "test.ping"}, m);
  EXPECT_EQ(r.out, "No minions matched the target. No command was sent, no jid was assigned.\nNo minions matched the target.\n");
  EXPECT_EQ(r.err, "ERROR: No return received\n");
  EXPECT_EQ(r.rc, 2);
  fake_master m2;
  m2.minions["z"] = {false, 0, true, true};
  r = run({"salt", "-b", "2", "z", "test.ping"}, m2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ERROR: No return received\n");
  EXPECT_EQ(r.rc, 2);
}

TEST(BatchDriver, SafeLimit) {
  fake_master m;
  for (auto id : {"a", "b", "c"}) m.minions[id] = {};
  auto r = run({"salt", "--batch-safe-limit", "3", "--batch-safe-size", "1", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("\nNOTICE: Too many minions targeted, switching to batch execution.\n\nExecuting run on ['a']\n", 0),
            0u)
      << r.out;
  EXPECT_EQ(m.windows.size(), 3u);
  // below the limit: the ordinary publish
  fake_master m2;
  for (auto id : {"a", "b"}) m2.minions[id] = {};
  r = run({"salt", "--batch-safe-limit", "3", "*", "test.ping"}, m2);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.find("NOTICE"), std::string::npos);
  EXPECT_TRUE(m2.windows.empty());
  EXPECT_EQ(m2.publishes.size(), 2u);  // the count (a ping) and the job itself
  EXPECT_EQ(m2.publishes[1]["fun"], value("test.ping"));
}

TEST(BatchDriver, OptionErrors) {
  fake_master m;
  m.minions["a"] = {};
  auto r = run({"salt", "-b", "x", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("Invalid batch specification 'x'"), std::string::npos);
  r = run({"salt", "--batch-wait", "soon", "-b", "1", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 64);
  EXPECT_NE(r.err.find("option --batch-wait: invalid floating-point value: 'soon'"), std::string::npos);
  r = run({"salt", "--batch-safe-limit", "1.5", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 64);
  r = run({"salt", "--async", "-b", "1", "*", "test.ping"}, m);
  EXPECT_EQ(r.rc, 64);
}

}  // namespace
