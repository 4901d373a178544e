// runners: jobs.* over a real job cache in a temp dir, manage.* with fake callbacks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "master/job_cache.hpp"
#include "master/runners.hpp"
#include "sylvite/version.hpp"
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
  EXPECT_EQ(u.retcode, 0);  // salt-run 3008.5 exits 0 for an unknown runner
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

// ---- issue 18 runners: jobs.active/exit_success/list_job, list_jobs time filters,
// manage.versions and presence aliases, fileserver.*, saltutil.sync_*.

TEST(Runners, NewFunctionsListed) {
  auto f = master::runner_functions();
  for (auto n : {"jobs.active", "jobs.exit_success", "jobs.list_job", "manage.versions", "manage.alived",
                 "manage.not_alived", "manage.allowed", "manage.not_allowed", "manage.joined", "manage.not_joined",
                 "fileserver.envs", "fileserver.file_list", "fileserver.dir_list", "fileserver.update",
                 "saltutil.sync_all", "saltutil.sync_modules", "saltutil.sync_eauth_tokens"})
    EXPECT_NE(std::find(f.begin(), f.end(), n), f.end()) << n;
  EXPECT_TRUE(std::is_sorted(f.begin(), f.end()));
  EXPECT_EQ(master::run_runner(master::runner_context{}, "saltutil.sync_nothing", args(), no_kw).ret,
            "'saltutil.sync_nothing' is not available.");
  EXPECT_EQ(master::run_runner(master::runner_context{}, "jobs.last_run", args(), no_kw).retcode, 0);
}

TEST(Runners, ListJobsTimeFiltersAndOutputter) {
  fixture fx;
  fx.add_job("20261121120000123456", "test.ping", args());
  fx.add_job("20261121120001000001", "cmd.run", args("uptime"));
  fx.add_job("20261122080000000000", "test.echo", args("x"));
  auto keys_of = [](const wire::value& v) {
    std::vector<std::string> k;
    for (auto it = v.begin(); it != v.end(); ++it) k.push_back(it.key());
    return k;
  };
  wire::value kw = wire::value::object();
  kw["start_time"] = "2026, Nov 21 12:00:01";
  EXPECT_EQ(keys_of(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw).ret),
            (std::vector<std::string>{"20261121120001000001", "20261122080000000000"}));
  kw["end_time"] = "2026-11-21 23:59";
  EXPECT_EQ(keys_of(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw).ret),
            (std::vector<std::string>{"20261121120001000001"}));
  wire::value kw2 = wire::value::object();
  kw2["end_time"] = "Nov 21 2026 12:00:00.5";
  EXPECT_EQ(keys_of(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw2).ret),
            (std::vector<std::string>{"20261121120000123456"}));
  kw2["end_time"] = "11/22/2026";
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw2).ret.size(), 2u);
  kw2["end_time"] = "2026-11-22T09:00:00";
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw2).ret.size(), 3u);
  kw2["end_time"] = "not a date";
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args(), kw2).retcode, 1);
  // search_target globs, search_metadata needs a dict match.
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args("search_target=m*"), no_kw).ret.size(), 3u);
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args("search_target=x*,db"), no_kw).ret.size(), 0u);
  wire::value md = wire::value::object();
  md["search_metadata"] = {{"a", 1}};
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.list_jobs", args(), md).ret.size(), 0u);
  // outputter= wraps, Salt's shape.
  auto w = master::run_runner(fx.ctx, "jobs.list_jobs", args("outputter=yaml"), no_kw);
  EXPECT_EQ(w.ret["outputter"], "yaml");
  EXPECT_EQ(w.ret["data"].size(), 3u);
}

TEST(Runners, ListJobExitSuccessPrintJob) {
  fixture fx;
  fx.add_job("20261121120000123456", "test.ping", args());
  auto lj = master::run_runner(fx.ctx, "jobs.list_job", args("20261121120000123456"), no_kw);
  ASSERT_EQ(lj.retcode, 0);
  EXPECT_EQ(lj.ret["jid"], "20261121120000123456");
  EXPECT_EQ(lj.ret["Function"], "test.ping");
  EXPECT_EQ(lj.ret["Minions"], args("m1", "m2"));
  EXPECT_EQ(lj.ret["Result"]["m1"]["return"], "pong-56");
  auto es = master::run_runner(fx.ctx, "jobs.exit_success", args("20261121120000123456"), no_kw);
  wire::value want = wire::value::object();
  want["m1"] = true;
  want["m2"] = false;
  EXPECT_EQ(es.ret, want);
  // A falsy return (False, "", {}) is not a success.
  wire::value r = {{"return", false}, {"retcode", 0}, {"success", true}};
  ASSERT_TRUE(fx.jobs.save_return("20261121120000123456", "m2", r));
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.exit_success", args("20261121120000123456"), no_kw).ret["m2"], false);
  EXPECT_EQ(master::run_runner(fx.ctx, "jobs.exit_success", args(), no_kw).ret,
            "Passed invalid arguments: exit_success() missing 1 required positional argument: 'jid'.");
  // print_job carries the load's Minions; an unknown jid is Salt's Error entry.
  auto p = master::run_runner(fx.ctx, "jobs.print_job", args("20261121120000123456"), no_kw);
  EXPECT_EQ(p.ret["20261121120000123456"]["Minions"], args("m1", "m2"));
  auto u = master::run_runner(fx.ctx, "jobs.print_job", args("20000101000000000000"), no_kw);
  EXPECT_EQ(u.ret["20000101000000000000"]["Error"], "Cannot contact returner or no job with this jid");
  EXPECT_EQ(u.ret["20000101000000000000"]["Result"], wire::value::object());
  auto ul = master::run_runner(fx.ctx, "jobs.list_job", args("20000101000000000000"), no_kw);
  EXPECT_EQ(ul.ret["Error"], "Cannot contact returner or no job with this jid");
  EXPECT_EQ(ul.ret["StartTime"], "2000, Jan 01 00:00:00.000000");
}

TEST(Runners, JobsActive) {
  fixture fx;
  fx.add_job("20261121120000123456", "test.sleep", args(30));
  std::string asked;
  fx.ctx.collect = [&](const std::string& fun, std::chrono::seconds t) {
    asked = fun + "/" + std::to_string(t.count());
    wire::value job = {{"jid", "20261121120000123456"}, {"fun", "test.sleep"}, {"arg", args(30)},
                       {"tgt", "m*"},  {"tgt_type", "glob"}, {"user", "root"}, {"pid", 4242}};
    wire::value out = wire::value::object();
    out["m1"] = {{"return", wire::value::array({job})}, {"retcode", 0}};
    job["pid"] = 77;
    out["m2"] = {{"return", wire::value::array({job})}, {"retcode", 0}};
    out["m3"] = {{"return", wire::value::array()}, {"retcode", 0}};
    out["m4"] = {{"return", "'saltutil.running' is not available."}, {"retcode", 1}};
    return out;
  };
  auto a = master::run_runner(fx.ctx, "jobs.active", args(), no_kw);
  ASSERT_EQ(a.retcode, 0);
  EXPECT_EQ(asked, "saltutil.running/7");
  ASSERT_EQ(a.ret.size(), 1u);
  auto j = a.ret["20261121120000123456"];
  EXPECT_EQ(j["Function"], "test.sleep");
  EXPECT_EQ(j["Arguments"], args(30));
  EXPECT_EQ(j["StartTime"], "2026, Nov 21 12:00:00.123456");
  EXPECT_EQ(j["Running"], wire::value::array({{{"m1", 4242}}, {{"m2", 77}}}));
  EXPECT_EQ(j["Returned"], args("m1"));  // m1's stored return
  EXPECT_EQ(master::run_runner(master::runner_context{}, "jobs.active", args(), no_kw).ret, wire::value::object());
}

TEST(Runners, ManageVersions) {
  fixture fx;
  fx.ctx.collect = [&](const std::string& fun, std::chrono::seconds) {
    EXPECT_EQ(fun, "test.version");
    wire::value out = wire::value::object();
    out["m1"] = {{"return", sylvite::salt_compat_version}, {"retcode", 0}};
    out["m2"] = {{"return", "3007.1"}, {"retcode", 0}};
    out["m3"] = {{"return", "9999.1"}, {"retcode", 0}};
    out["m4"] = {{"return", "'test.version' is not available."}, {"retcode", 1}};
    out["m5"] = {{"return", "3007.0rc1"}, {"retcode", 0}};
    out["m6"] = {{"failed", true}};  // expected, did not answer
    return out;
  };
  auto v = master::run_runner(fx.ctx, "manage.versions", args(), no_kw);
  ASSERT_EQ(v.retcode, 0);
  EXPECT_EQ(v.ret["Master"], sylvite::salt_compat_version);
  EXPECT_EQ(v.ret["Up to date"]["m1"], sylvite::salt_compat_version);
  EXPECT_EQ(v.ret["Minion requires update"]["m2"], "3007.1");
  EXPECT_EQ(v.ret["Minion requires update"]["m5"], "3007.0rc1");
  EXPECT_EQ(v.ret["Minion newer than master"]["m3"], "9999.1");
  EXPECT_EQ(v.ret["Minion offline"]["m4"], false);
  EXPECT_EQ(v.ret["Minion offline"]["m6"], false);
  fx.ctx.collect = nullptr;
  wire::value only = wire::value::object();
  only["Master"] = sylvite::salt_compat_version;
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.versions", args(), no_kw).ret, only);
}

TEST(Runners, ManagePresenceAliasesAndShowIp) {
  fixture fx;
  for (auto f : {"manage.alived", "manage.allowed", "manage.joined", "manage.reaped", "manage.list_state"})
    EXPECT_EQ(master::run_runner(fx.ctx, f, args(), no_kw).ret, args("m1", "m2")) << f;
  for (auto f : {"manage.not_alived", "manage.not_allowed", "manage.not_joined", "manage.not_reaped"})
    EXPECT_EQ(master::run_runner(fx.ctx, f, args(), no_kw).ret, args("m3", "m4")) << f;
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.alived", args("subset=m2,m3"), no_kw).ret, args("m2"));
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.not_alived", args("subset=m2,m3"), no_kw).ret, args("m3"));
  fx.ctx.publish_peers = [] { return std::set<std::string>{"192.0.2.7", "fe80::1"}; };
  fx.ctx.grains = [](const std::string& id) -> wire::value {
    if (id == "m1") return {{"ipv4", args("127.0.0.1", "192.0.2.7")}, {"ipv6", args("::1")}};
    return nullptr;
  };
  wire::value kw = wire::value::object();
  kw["show_ip"] = true;
  auto s = master::run_runner(fx.ctx, "manage.alived", args(), kw);
  EXPECT_EQ(s.ret["m1"], "192.0.2.7");
  EXPECT_TRUE(s.ret["m2"].is_null());  // connected, but no grain address matches
  EXPECT_EQ(master::run_runner(fx.ctx, "manage.not_alived", args(), kw).ret, args("m3", "m4"));
}

TEST(Runners, Fileserver) {
  fixture fx;
  config::master_config cfg;
  const auto base = fx.d.path / "srv" / "base";
  const auto prod = fx.d.path / "srv" / "prod";
  std::filesystem::create_directories(base / "web" / "conf");
  std::filesystem::create_directories(prod);
  std::ofstream(base / "top.sls") << "base: {}\n";
  std::ofstream(base / "web" / "conf" / "a.conf") << "a\n";
  std::ofstream(prod / "p.sls") << "x: 1\n";
  cfg.file_roots = {{"base", {base.string()}}, {"prod", {prod.string()}}};
  fx.ctx.cfg = &cfg;
  auto run = [&](const char* f, wire::value a) { return master::run_runner(fx.ctx, f, a, no_kw); };
  EXPECT_EQ(run("fileserver.envs", args()).ret, args("base", "prod"));
  EXPECT_EQ(run("fileserver.file_list", args()).ret, args("top.sls", "web/conf/a.conf"));
  EXPECT_EQ(run("fileserver.file_list", args("saltenv=prod")).ret, args("p.sls"));
  EXPECT_EQ(run("fileserver.file_list", args("nope")).ret, args());
  EXPECT_EQ(run("fileserver.dir_list", args()).ret, args("web", "web/conf"));
  EXPECT_EQ(run("fileserver.file_list", args("base", "roots")).ret, args("top.sls", "web/conf/a.conf"));
  // gitfs is not served by sylvite: skipped as Salt skips a backend it has not loaded.
  EXPECT_EQ(run("fileserver.file_list", args("base", "gitfs")).ret, args());
  EXPECT_EQ(run("fileserver.envs", args("backend=gitfs")).ret, args());
  EXPECT_EQ(run("fileserver.envs", args("backend=-roots")).ret, args());
  EXPECT_EQ(run("fileserver.envs", args("backend=roots,gitfs")).ret, args("base", "prod"));
  EXPECT_EQ(run("fileserver.update", args()).ret, true);
  EXPECT_EQ(run("fileserver.update", args("backend=gitfs")).ret, true);
  cfg.raw["fileserver_backend"] = args("gitfs");
  EXPECT_EQ(run("fileserver.envs", args()).ret, args());
  EXPECT_EQ(run("fileserver.file_list", args()).ret, args());
}

TEST(Runners, SaltutilSync) {
  fixture fx;
  auto all = master::run_runner(fx.ctx, "saltutil.sync_all", args(), no_kw);
  ASSERT_EQ(all.retcode, 0);
  ASSERT_EQ(all.ret.size(), 24u);
  for (auto k : {"clouds", "modules", "states", "grains", "renderers", "returners", "output", "proxymodules",
                 "runners", "wheel", "engines", "thorium", "queues", "pillar", "utils", "sdb", "cache",
                 "fileserver", "tops", "tokens", "serializers", "executors", "wrapper", "roster"})
    EXPECT_EQ(all.ret[k], wire::value::array()) << k;
  EXPECT_EQ(master::run_runner(fx.ctx, "saltutil.sync_modules", args("saltenv=base"), no_kw).ret,
            wire::value::array());
  EXPECT_EQ(master::run_runner(fx.ctx, "saltutil.sync_runners", args(), no_kw).ret, wire::value::array());
}

// sylvite.minions: every accepted key plus connected ids, connected master and last seen.
TEST(Runners, SylviteMinions) {
  fixture f;
  f.ctx.self_id = "a";
  // Without a presence view: the connected ids, held by this master, no times.
  auto o = master::run_runner(f.ctx, "sylvite.minions", wire::value::array(), no_kw);
  ASSERT_EQ(o.retcode, 0);
  ASSERT_EQ(o.ret.size(), 4u);
  EXPECT_EQ(o.ret["m1"]["key"], "accepted");
  EXPECT_EQ(o.ret["m1"]["connected"], true);
  EXPECT_EQ(o.ret["m1"]["master"], "a");
  EXPECT_TRUE(o.ret["m1"]["last_seen"].is_null());
  EXPECT_EQ(o.ret["m3"]["connected"], false);
  EXPECT_TRUE(o.ret["m3"]["master"].is_null());
  EXPECT_EQ(o.ret["m3"]["masters"], wire::value::array());

  std::map<std::string, master::minion_presence> view;
  view["m1"] = {{"a", "b"}, 1795811242123};
  view["m2"] = {{"c"}, 5};
  view["m4"] = {{}, 1795811242000};
  view["p1"] = {{"b"}, 0};          // a pending key holding a connection
  view["ghost"] = {{}, 7};          // neither accepted nor connected: not listed
  f.ctx.presence = [&view] { return view; };
  o = master::run_runner(f.ctx, "sylvite.minions", wire::value::array(), no_kw);
  ASSERT_EQ(o.retcode, 0);
  EXPECT_EQ(o.ret.size(), 5u);
  EXPECT_FALSE(o.ret.contains("ghost"));
  EXPECT_EQ(o.ret["m1"]["master"], "a");  // this master first when it holds one
  EXPECT_EQ(o.ret["m1"]["masters"], wire::value::array({"a", "b"}));
  EXPECT_EQ(o.ret["m1"]["last_seen"], "2026-11-27T20:27:22.123Z");
  EXPECT_EQ(o.ret["m2"]["master"], "c");
  EXPECT_EQ(o.ret["m4"]["connected"], false);
  EXPECT_EQ(o.ret["m4"]["last_seen"], "2026-11-27T20:27:22.000Z");
  EXPECT_EQ(o.ret["p1"]["key"], "pending");
  EXPECT_EQ(o.ret["p1"]["connected"], true);

  o = master::run_runner(f.ctx, "sylvite.minions", args("m1,m3"), no_kw);
  EXPECT_EQ(o.ret.size(), 2u);
  o = master::run_runner(f.ctx, "sylvite.minions", wire::value::array(), wire::value{{"subset", wire::value::array({"m2"})}});
  EXPECT_EQ(o.ret.size(), 1u);
  EXPECT_TRUE(o.ret.contains("m2"));
}
