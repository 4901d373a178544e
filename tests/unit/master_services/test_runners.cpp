// runners: jobs.* over a real job cache in a temp dir, manage.* with fake callbacks.
#include <gtest/gtest.h>

#include "master/job_cache.hpp"
#include "master/runners.hpp"
#include "test_util.hpp"

using namespace sylvite;
using sylvite::test::temp_dir;

namespace {

template <class... T>
wire::value args(T&&... a) {
  wire::value v = wire::value::array();
  (v.push_back(wire::value(std::forward<T>(a))), ...);
  return v;
}
const wire::value no_kw = wire::value::object();

struct fixture {
  temp_dir d;
  master::job_cache jobs{d.path / "cache"};
  pki::key_store keys{d.path / "pki"};
  master::runner_context ctx;
  std::vector<std::string> responders = {"m1", "m3", "stranger"};
  std::vector<std::string> connected = {"m2", "m1"};
  int ping_timeout = -1;
  fixture() {
    (void)keys.ensure_dirs();
    for (auto id : {"m1", "m2", "m3", "m4"}) (void)keys.write(pki::key_state::accepted, id, "PEM");
    (void)keys.write(pki::key_state::pending, "p1", "PEM");
    ctx.jobs = &jobs;
    ctx.keys = &keys;
    ctx.connected_ids = [this] { return connected; };
    ctx.ping_all = [this](std::chrono::seconds t) {
      ping_timeout = static_cast<int>(t.count());
      return responders;
    };
    ctx.timeout = 7;
  }
  void add_job(const std::string& jid, const std::string& fun, wire::value arg, bool with_out = false) {
    wire::value load = wire::value::object();
    load["cmd"] = "publish";
    load["tgt"] = "m*";
    load["fun"] = fun;
    load["arg"] = std::move(arg);
    load["tgt_type"] = "glob";
    load["jid"] = jid;
    load["user"] = "sudo_alice";
    ASSERT_TRUE(jobs.save_load(jid, load, {"m1", "m2"}));
    wire::value r = wire::value::object();
    r["return"] = "pong-" + jid.substr(18);
    r["retcode"] = 0;
    r["success"] = true;
    if (with_out) r["out"] = "highstate";
    ASSERT_TRUE(jobs.save_return(jid, "m1", r));
  }
};

}  // namespace

TEST(Runners, Functions) {
  auto f = master::runner_functions();
  for (auto n : {"jobs.list_jobs", "jobs.lookup_jid", "jobs.print_job", "manage.up", "manage.down", "manage.status",
                 "manage.present", "manage.not_present"})
    EXPECT_NE(std::find(f.begin(), f.end(), n), f.end()) << n;
  EXPECT_TRUE(std::is_sorted(f.begin(), f.end()));
}

TEST(Runners, UnknownAndMissingArgs) {
  fixture fx;
  auto u = master::run_runner(fx.ctx, "nope.nothing", args(), no_kw);
  EXPECT_EQ(u.retcode, 1);
  EXPECT_EQ(u.ret, "'nope.nothing' is not available.");
  auto m = master::run_runner(fx.ctx, "jobs.lookup_jid", args(), no_kw);
  EXPECT_EQ(m.retcode, 1);
  EXPECT_EQ(m.ret, "Passed invalid arguments: lookup_jid() missing 1 required positional argument: 'jid'.");
  auto p = master::run_runner(fx.ctx, "jobs.print_job", wire::value::array(), no_kw);
  EXPECT_EQ(p.retcode, 1);
  EXPECT_EQ(p.ret, "Passed invalid arguments: print_job() missing 1 required positional argument: 'jid'.");
}

TEST(Runners, ListJobs) {
  fixture fx;
  fx.add_job("20261121120000123456", "test.ping", args());
  fx.add_job("20261121120001000001", "cmd.run", args("uptime"));
  auto o = master::run_runner(fx.ctx, "jobs.list_jobs", args(), no_kw);
  ASSERT_EQ(o.retcode, 0);
  ASSERT_EQ(o.ret.size(), 2u);
  auto j = o.ret["20261121120000123456"];
  EXPECT_EQ(j["Function"], "test.ping");
  EXPECT_EQ(j["Arguments"], args());
  EXPECT_EQ(j["Target"], "m*");
  EXPECT_EQ(j["Target-type"], "glob");
  EXPECT_EQ(j["User"], "sudo_alice");
  EXPECT_EQ(j["StartTime"], "2026, Nov 21 12:00:00.123456");
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"Function", "Arguments", "Target", "Target-type", "User", "StartTime"}));
  EXPECT_EQ(o.ret["20261121120001000001"]["Arguments"], args("uptime"));
  // search_function (glob) as kwarg or "k=v" positional.
  wire::value kw = wire::value::object();
  kw["search_function"] = "cmd.*";
  auto f = master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw);
  ASSERT_EQ(f.ret.size(), 1u);
  EXPECT_TRUE(f.ret.contains("20261121120001000001"));
  auto f2 = master::run_runner(fx.ctx, "jobs.list_jobs", args("search_function=test.ping"), no_kw);
  ASSERT_EQ(f2.ret.size(), 1u);
  EXPECT_TRUE(f2.ret.contains("20261121120000123456"));
  // Empty cache.
  fixture empty;
  EXPECT_EQ(master::run_runner(empty.ctx, "jobs.list_jobs", args(), no_kw).ret, wire::value::object());
}

TEST(Runners, LookupJidAndPrintJob) {
  fixture fx;
  fx.add_job("20261121120000123456", "test.ping", args());
  auto o = master::run_runner(fx.ctx, "jobs.lookup_jid", args("20261121120000123456"), no_kw);
  ASSERT_EQ(o.retcode, 0);
  wire::value want = wire::value::object();
  want["m1"] = "pong-56";
  EXPECT_EQ(o.ret, want);
  // missing=True adds the minions that did not return.
  wire::value kw = wire::value::object();
  kw["missing"] = true;
  auto m = master::run_runner(fx.ctx, "jobs.lookup_jid", args(), [&] {
    wire::value k = kw;
    k["jid"] = "20261121120000123456";
    return k;
  }());
  EXPECT_EQ(m.ret["m2"], "Minion did not return");
  // Unknown jid: empty map, not an error (as Salt).
  auto none = master::run_runner(fx.ctx, "jobs.lookup_jid", args("20000101000000000000"), no_kw);
  EXPECT_EQ(none.retcode, 0);
  EXPECT_EQ(none.ret, wire::value::object());
  // A stored "out" selects the outputter, Salt's shape.
  fx.add_job("20261121120002000002", "state.apply", args(), true);
  auto hs = master::run_runner(fx.ctx, "jobs.lookup_jid", args("20261121120002000002"), no_kw);
  EXPECT_EQ(hs.ret["outputter"], "highstate");
  EXPECT_EQ(hs.ret["data"]["m1"], "pong-02");

  auto p = master::run_runner(fx.ctx, "jobs.print_job", args("20261121120000123456"), no_kw);
  ASSERT_EQ(p.retcode, 0);
  auto job = p.ret["20261121120000123456"];
  EXPECT_EQ(job["Function"], "test.ping");
  EXPECT_EQ(job["StartTime"], "2026, Nov 21 12:00:00.123456");
  EXPECT_EQ(job["Result"]["m1"]["return"], "pong-56");
  EXPECT_EQ(job["Result"]["m1"]["retcode"], 0);
  EXPECT_EQ(job["Result"]["m1"]["success"], true);
}

TEST(Runners, ManageStatusUpDown) {
  fixture fx;
  auto s = master::run_runner(fx.ctx, "manage.status", args(), no_kw);
  ASSERT_EQ(s.retcode, 0);
  EXPECT_EQ(s.ret["up"], args("m1", "m3"));
  EXPECT_EQ(s.ret["down"], args("m2", "m4"));
  EXPECT_EQ(fx.ping_timeout, 7);
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.up", args(), no_kw).ret, args("m1", "m3"));
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.down", args(), no_kw).ret, args("m2", "m4"));
  wire::value kw = wire::value::object();
  kw["timeout"] = 2;
  (void)master::run_runner(fx.ctx, "manage.up", args(), kw);
  EXPECT_EQ(fx.ping_timeout, 2);
  // tgt narrows the expected set.
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.down", args(false, "m[12]"), no_kw).ret, args("m2"));
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.up", args("m3"), no_kw).ret, args("m3"));
}

TEST(Runners, ManagePresentNotPresent) {
  fixture fx;
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.present", args(), no_kw).ret, args("m1", "m2"));
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.not_present", args(), no_kw).ret, args("m3", "m4"));
  wire::value kw = wire::value::object();
  kw["subset"] = args("m4");
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.not_present", args(), kw).ret, args("m4"));
  // No callbacks: empty answers, no crash.
  master::runner_context bare;
  EXPECT_EQ(master::run_runner(bare, "manage.present", args(), no_kw).ret, args());
  auto st = master::run_runner(bare, "manage.status", args(), no_kw);
  EXPECT_EQ(st.ret["up"], args());
  EXPECT_EQ(master::run_runner(bare, "jobs.list_jobs", args(), no_kw).retcode, 1);
}
