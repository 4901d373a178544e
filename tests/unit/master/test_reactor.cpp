// master/reactor: tag matching, the map, Salt's compiler steps (pad_funcs, verify_high,
// compile_high_data, order), argument forms of local/runner/wheel, wheel.key on a key
// store, error reports, the loop guard, the queue bound, the render timeout, and the
// master core's wiring (a local event reacts, a peer's does not).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/util/files.hpp"
#include "master/reactor.hpp"
#include "test_util.hpp"
#include "tests/unit/support/fake_renderer.hpp"

namespace sylvite::test {
namespace {

using master::reactor;
using wire::value;
namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  ASSERT_TRUE(util::write_file_atomic(p, text, 0644));
}

struct recorded {
  std::mutex mu;
  std::vector<master::publish_request> pubs;
  std::vector<std::tuple<std::string, value, value>> runners, wheels;
  std::vector<std::pair<std::string, value>> events;
};

reactor::hooks hooks_for(recorded& r) {
  reactor::hooks h;
  h.publish = [&r](const master::publish_request& req) {
    std::lock_guard lk(r.mu);
    r.pubs.push_back(req);
    master::publish_result res;
    res.jid = "20260101000000000001";
    res.minions = {"m1"};
    return res;
  };
  h.runner = [&r](const std::string& fun, const value& arg, const value& kwarg) {
    std::lock_guard lk(r.mu);
    r.runners.emplace_back(fun, arg, kwarg);
    return true;
  };
  h.wheel = [&r](const std::string& fun, const value& arg, const value& kwarg) {
    std::lock_guard lk(r.mu);
    r.wheels.emplace_back(fun, arg, kwarg);
    return master::wheel_outcome{value::object(), ""};
  };
  h.fire = [&r](const std::string& tag, const value& data) {
    std::lock_guard lk(r.mu);
    r.events.emplace_back(tag, data);
  };
  return h;
}

struct ReactorTest : ::testing::Test {
  temp_dir tmp;
  config::master_config cfg = make_config(tmp.path);
  fake_renderer rend;
  recorded rec;
  fs::path sls(const std::string& name, const std::string& text) {
    fs::path p = tmp.path / "reactor" / name;
    write(p, text);
    return p;
  }
};

TEST(ReactorOptions, DefaultsAndValidation) {
  auto o = master::reactor_options::from(value::object());
  EXPECT_EQ(o.map, value::array());
  EXPECT_EQ(o.worker_threads, 10);
  EXPECT_EQ(o.worker_hwm, 10000);
  EXPECT_EQ(o.refresh_interval, 60);
  EXPECT_EQ(o.render_timeout, 30);
  o = master::reactor_options::from(value::parse(
      R"({"reactor": "/etc/salt/reactor.conf", "reactor_worker_threads": "4", "reactor_worker_hwm": 0,
          "reactor_render_timeout": true})"));
  EXPECT_EQ(o.map, "/etc/salt/reactor.conf");
  EXPECT_EQ(o.worker_threads, 4);
  EXPECT_EQ(o.worker_hwm, 10000);  // out of range: the default
  EXPECT_EQ(o.render_timeout, 30);
  o = master::reactor_options::from(value::parse(R"({"reactor": {"a": "b"}})"));
  EXPECT_EQ(o.map, value::array());
}

TEST(ReactorFnmatch, PythonSemantics) {
  EXPECT_TRUE(master::tag_fnmatch("salt/job/*/new", "salt/job/20260101/new"));
  EXPECT_TRUE(master::tag_fnmatch("my/*", "my/a/b"));  // '*' crosses '/'
  EXPECT_TRUE(master::tag_fnmatch("salt/minion/*/start", "salt/minion/m1/start"));
  EXPECT_FALSE(master::tag_fnmatch("salt/minion/*/start", "salt/minion/m1/stop"));
  EXPECT_TRUE(master::tag_fnmatch("a?c", "abc"));
  EXPECT_TRUE(master::tag_fnmatch("[!x]b", "ab"));
  EXPECT_TRUE(master::tag_fnmatch("a\\b", "a\\b"));  // no escapes
  EXPECT_FALSE(master::tag_fnmatch("My/tag", "my/tag"));
}

TEST(ReactorRepack, DictList) {
  auto r = master::repack_dictlist(value::parse(R"([{"a": 1}, "b", 3, {"c": [1]}])"));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, value::parse(R"({"a": 1, "b": null, "3": null, "c": [1]})"));
  EXPECT_FALSE(master::repack_dictlist(value::parse(R"([{"a": 1, "b": 2}])")));
  EXPECT_FALSE(master::repack_dictlist(value::parse(R"([[1]])")));
  EXPECT_FALSE(master::repack_dictlist(value("x")));
}

TEST(ReactorCompile, SaltOrderAndPadding) {
  // No `order`: sorted by state + name + fun, as Salt 3008's aggregate_and_order_chunks.
  value high = value::parse(R"({
    "zeta": {"local.test.ping": [{"tgt": "*"}], "__sls__": "/r/a.sls"},
    "alpha": {"runner.jobs.list_jobs": [], "__sls__": "/r/a.sls"},
    "beta": {"local": ["cmd.run", {"tgt": "m1"}], "__sls__": "/r/a.sls"},
    "last": {"local.test.ping": [{"tgt": "*"}, {"order": "last"}], "__sls__": "/r/a.sls"},
    "first": {"wheel.key.accept": [{"match": "x"}, {"order": 1}], "__sls__": "/r/a.sls"}
  })");
  auto c = master::compile_reactions(high);
  ASSERT_TRUE(c.errors.empty()) << c.errors[0];
  std::vector<std::string> ids;
  for (const auto& ch : c.chunks) ids.push_back(ch["__id__"].get<std::string>());
  EXPECT_EQ(ids, (std::vector<std::string>{"first", "beta", "zeta", "alpha", "last"}));
  EXPECT_EQ(c.chunks[1]["state"], "local");
  EXPECT_EQ(c.chunks[1]["fun"], "cmd.run");
  EXPECT_EQ(c.chunks[1]["tgt"], "m1");
  EXPECT_EQ(c.chunks[1]["__sls__"], "/r/a.sls");
  EXPECT_EQ(c.chunks[3]["fun"], "jobs.list_jobs");
}

TEST(ReactorCompile, Names) {
  value high = value::parse(R"({"pings": {"local.test.ping": [{"names": ["b", "a"]}, {"tgt": "*"}], "__sls__": "/x"}})");
  auto c = master::compile_reactions(high);
  ASSERT_EQ(c.chunks.size(), 2u);
  EXPECT_EQ(c.chunks[0]["name"], "b");  // name_order keeps the list's order
  EXPECT_EQ(c.chunks[1]["name"], "a");
  EXPECT_EQ(c.chunks[0]["__id__"], "pings");
}

TEST(ReactorCompile, VerifyHighErrors) {
  auto errs = [](const char* json) { return master::compile_reactions(value::parse(json)).errors; };
  auto e = errs(R"({"x": {"local": [{"tgt": "*"}], "__sls__": "/s"}})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "No function declared in state 'x' in SLS '/s'");
  e = errs(R"({"x": {"local.test.ping": null, "__sls__": "/s"}})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("contains a short declaration (local.test.ping) with a trailing colon"), std::string::npos);
  e = errs(R"({"x": {"local": ["test.ping", "cmd.run"], "__sls__": "/s"}})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("Too many functions declared in state 'x'"), std::string::npos);
  e = errs(R"({"x": {"local": "test.ping", "__sls__": "/s"}})");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "State 'x' in SLS '/s' is not formed as a list");
}

TEST_F(ReactorTest, ListReactorsFollowsTheMapOrder) {
  cfg.raw["reactor"] = value::parse(R"([
    {"salt/minion/*/start": ["/a.sls", "/b.sls"]},
    {"nomatch": "/c.sls"},
    "not a map",
    {"two": "/x", "keys": "/y"},
    {"salt/minion/m1/*": "/d.sls"}
  ])");
  reactor r(cfg, rend, hooks_for(rec));
  EXPECT_EQ(r.list_reactors("salt/minion/m1/start"), (std::vector<std::string>{"/a.sls", "/b.sls", "/d.sls"}));
  EXPECT_TRUE(r.list_reactors("other").empty());
}

TEST_F(ReactorTest, ReactorMapFromAFile) {
  fs::path map = tmp.path / "reactor.conf";
  write(map, "- 'my/*':\n  - /r/one.sls\n");
  cfg.raw["reactor"] = map.string();
  reactor r(cfg, rend, hooks_for(rec));
  EXPECT_TRUE(r.enabled());
  EXPECT_EQ(r.list_reactors("my/tag"), (std::vector<std::string>{"/r/one.sls"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write(map, "- 'my/*': /r/two.sls\n");
  fs::last_write_time(map, fs::file_time_type::clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(r.list_reactors("my/tag"), (std::vector<std::string>{"/r/two.sls"}));
}

TEST_F(ReactorTest, LocalNewStyleArgsAreKeywords) {
  auto f = sls("touch.sls",
               "touch_marker:\n"
               "  local.cmd.run:\n"
               "    - tgt: {{ data.id }}\n"
               "    - args:\n"
               "      - cmd: touch /tmp/{{ data.data.x }}\n");
  cfg.raw["reactor"] = value::array({value{{"my/*", f.string()}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("my/tag", value::parse(R"({"id": "m1", "data": {"x": "marker"}})"), r.list_reactors("my/tag"));
  ASSERT_EQ(rec.pubs.size(), 1u);
  const auto& p = rec.pubs[0];
  EXPECT_EQ(p.fun, "cmd.run");
  EXPECT_EQ(p.tgt, "m1");
  EXPECT_EQ(p.tgt_type, "glob");
  EXPECT_EQ(p.arg, value::array());
  EXPECT_EQ(p.kwarg, value::parse(R"({"cmd": "touch /tmp/marker"})"));
  EXPECT_TRUE(rec.events.empty());
  EXPECT_EQ(r.stats().actions, 1u);
  // The renderer saw Salt's context: tag and data.
  const auto* rq = rend.find("touch.sls");
  ASSERT_TRUE(rq);
  EXPECT_EQ(rq->context["tag"], "my/tag");
  EXPECT_EQ(rq->context["data"]["id"], "m1");
  EXPECT_EQ(rq->default_pipe, "jinja|yaml");
}

TEST_F(ReactorTest, LocalOldStyleArgKwargAndOptions) {
  auto f = sls("old.sls",
               "ping_list:\n"
               "  local.test.arg:\n"
               "    - tgt: [m1, m2]\n"
               "    - tgt_type: list\n"
               "    - arg: [a, 1]\n"
               "    - kwarg: {k: v}\n"
               "    - ret: syslog\n"
               "    - metadata: {from: reactor}\n");
  cfg.raw["reactor"] = value::array({value{{"t", f.string()}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  ASSERT_EQ(rec.pubs.size(), 1u);
  const auto& p = rec.pubs[0];
  EXPECT_EQ(p.tgt, value::parse(R"(["m1", "m2"])"));
  EXPECT_EQ(p.tgt_type, "list");
  EXPECT_EQ(p.arg, value::parse(R"(["a", 1])"));
  EXPECT_EQ(p.kwarg, value::parse(R"({"k": "v"})"));
  EXPECT_EQ(p.ret, "syslog");
  EXPECT_EQ(p.kwargs["metadata"], value::parse(R"({"from": "reactor"})"));
}

TEST_F(ReactorTest, CmdIsAnAliasOfLocal) {
  auto f = sls("cmd.sls", "old:\n  cmd.test.ping:\n    - tgt: '*'\n");
  cfg.raw["reactor"] = value::array({value{{"t", f.string()}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  ASSERT_EQ(rec.pubs.size(), 1u);
  EXPECT_EQ(rec.pubs[0].fun, "test.ping");
}

TEST_F(ReactorTest, RunnerAndWheelArguments) {
  auto f = sls("rw.sls",
               "lookup:\n"
               "  runner.jobs.lookup_jid:\n"
               "    - jid: '20260101000000000000'\n"
               "newstyle:\n"
               "  runner.manage.status:\n"
               "    - args:\n"
               "      - timeout: 3\n"
               "accept:\n"
               "  wheel.key.accept:\n"
               "    - match: web*\n");
  cfg.raw["reactor"] = value::array({value{{"t", f.string()}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  ASSERT_EQ(rec.runners.size(), 2u);
  EXPECT_EQ(std::get<0>(rec.runners[0]), "jobs.lookup_jid");
  EXPECT_EQ(std::get<2>(rec.runners[0]), value::parse(R"({"jid": "20260101000000000000"})"));
  EXPECT_EQ(std::get<0>(rec.runners[1]), "manage.status");
  EXPECT_EQ(std::get<2>(rec.runners[1]), value::parse(R"({"timeout": 3})"));
  ASSERT_EQ(rec.wheels.size(), 1u);
  EXPECT_EQ(std::get<0>(rec.wheels[0]), "key.accept");
  EXPECT_EQ(std::get<2>(rec.wheels[0]), value::parse(R"({"match": "web*"})"));
  EXPECT_TRUE(rec.events.empty());
}

TEST_F(ReactorTest, UnsupportedActionsAreRefusedAndReported) {
  auto f = sls("bad.sls",
               "c:\n  caller.test.ping: []\n"
               "w:\n  wheel.config.values: []\n"
               "l:\n  local.test.ping: []\n"  // no tgt
               "ok:\n  local.test.ping:\n    - tgt: '*'\n");
  cfg.raw["reactor"] = value::array({value{{"t", f.string()}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  ASSERT_EQ(rec.pubs.size(), 1u);  // the good one still runs
  ASSERT_EQ(rec.events.size(), 3u);
  for (const auto& [tag, d] : rec.events) {
    EXPECT_EQ(tag, "salt/reactor/error");
    EXPECT_EQ(d["tag"], "t");
    EXPECT_EQ(d["user"], "Reactor");
    EXPECT_EQ(d["sls"], value::array({f.string()}));
  }
  EXPECT_NE(rec.events[0].second["error"].get<std::string>().find("'caller'"), std::string::npos);
  EXPECT_NE(rec.events[1].second["error"].get<std::string>().find("local takes at least 3 arguments"),
            std::string::npos);
  EXPECT_NE(rec.events[2].second["error"].get<std::string>().find("config.values"), std::string::npos);
}

TEST_F(ReactorTest, RenderErrorsAreReportedAndOtherFilesStillReact) {
  auto bad = sls("bad.sls", "#!fake-error Jinja syntax error: unexpected '}'\n");
  auto good = sls("good.sls", "ping:\n  local.test.ping:\n    - tgt: '*'\n");
  cfg.raw["reactor"] = value::array({value{{"t", value::array({bad.string(), "/does/not/exist.sls", good.string()})}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  EXPECT_EQ(rec.pubs.size(), 1u);
  ASSERT_EQ(rec.events.size(), 2u);
  EXPECT_NE(rec.events[0].second["error"].get<std::string>().find("unexpected '}'"), std::string::npos);
  EXPECT_NE(rec.events[1].second["error"].get<std::string>().find("File missing or not found"), std::string::npos);
}

TEST_F(ReactorTest, BadStructureStopsTheEventsReactions) {
  auto f = sls("struct.sls", "a:\n  local.test.ping:\n    - tgt: '*'\nb:\n  local: [test.ping, cmd.run]\n");
  auto g = sls("list.sls", "- not\n- a map\n");
  cfg.raw["reactor"] = value::array({value{{"t", value::array({f.string(), g.string()})}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  EXPECT_TRUE(rec.pubs.empty());  // Salt: verify_high errors -> no reaction at all
  ASSERT_EQ(rec.events.size(), 2u);
  EXPECT_NE(rec.events[0].second["error"].get<std::string>().find("not a dictionary"), std::string::npos);
  EXPECT_NE(rec.events[1].second["error"].get<std::string>().find("Too many functions"), std::string::npos);
}

TEST_F(ReactorTest, SlowTemplateIsBoundedByTheRenderTimeout) {
  auto f = sls("slow.sls", "#!fake-sleep\n");
  cfg.raw["reactor"] = value::array({value{{"t", f.string()}}});
  cfg.raw["reactor_render_timeout"] = 1;
  reactor r(cfg, rend, hooks_for(rec));
  auto t0 = std::chrono::steady_clock::now();
  r.react("t", value::object(), r.list_reactors("t"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_TRUE(rec.pubs.empty());
}

TEST_F(ReactorTest, GlobsAndSaltUrls) {
  sls("g/a.sls", "a:\n  local.test.ping:\n    - tgt: a\n");
  sls("g/b.sls", "b:\n  local.test.ping:\n    - tgt: b\n");
  write(fs::path(cfg.file_roots["base"].at(0)) / "reactor/c.sls", "c:\n  local.test.ping:\n    - tgt: c\n");
  cfg.raw["reactor"] = value::array(
      {value{{"t", value::array({(tmp.path / "reactor/g/*.sls").string(), "salt://reactor/c.sls"})}}});
  reactor r(cfg, rend, hooks_for(rec));
  r.react("t", value::object(), r.list_reactors("t"));
  ASSERT_EQ(rec.pubs.size(), 3u) << (rec.events.empty() ? "" : rec.events[0].second.dump());
  EXPECT_EQ(rec.pubs[0].tgt, "a");
  EXPECT_EQ(rec.pubs[1].tgt, "b");
  EXPECT_EQ(rec.pubs[2].tgt, "c");
}

TEST_F(ReactorTest, QueueBoundShedsAndTheLoopGuardSkips) {
  auto f = sls("q.sls", "p:\n  local.test.ping:\n    - tgt: '*'\n");
  cfg.raw["reactor"] = value::array({value{{"t*", f.string()}}});
  cfg.raw["reactor_worker_hwm"] = 2;
  reactor r(cfg, rend, hooks_for(rec));  // not started: nothing drains the queue
  r.on_event("t1", value::object());
  r.on_event("t2", value::object());
  r.on_event("t3", value::object());
  r.on_event("other", value::object());
  r.on_event("t4", value{{"user", "Reactor"}});
  auto s = r.stats();
  EXPECT_EQ(s.events, 5u);
  EXPECT_EQ(s.matched, 3u);
  EXPECT_EQ(s.shed, 1u);
}

TEST_F(ReactorTest, StartedReactorReactsToLocalEventsOnly) {
  auto f = sls("p.sls", "p:\n  local.test.ping:\n    - tgt: '*'\n");
  cfg.raw["reactor"] = value::array({value{{"my/*", f.string()}}});
  cfg.raw["reactor_worker_threads"] = 2;
  master::event_hub hub;
  reactor r(cfg, rend, hooks_for(rec));
  r.start(hub);
  hub.fire("my/peer", value::object(), "", master::event_hub::origin::peer);
  hub.fire("my/local", value::object());
  for (int i = 0; i < 1000 && r.stats().actions < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  r.stop();
  EXPECT_EQ(r.stats().actions, 1u);
  EXPECT_EQ(r.stats().events, 1u);
}

// ---- wheel.key on a key store

struct WheelKeyTest : ::testing::Test {
  temp_dir tmp;
  pki::key_store ks{tmp.path / "pki"};
  std::vector<std::pair<std::string, std::vector<std::string>>> notes;
  void SetUp() override {
    ASSERT_TRUE(ks.ensure_dirs());
    const std::string pem = cached_key(1).public_pem();
    for (const char* id : {"web1", "web2", "db1"}) ASSERT_TRUE(ks.write(pki::key_state::pending, id, pem));
    ASSERT_TRUE(ks.write(pki::key_state::rejected, "web3", pem));
  }
  master::wheel_outcome run(const std::string& fun, const value& kwarg) {
    return master::run_wheel_key(ks, fun, value::array(), kwarg,
                                 [this](const std::string& act, const std::vector<std::string>& ids) {
                                   notes.emplace_back(act, ids);
                                 });
  }
};

TEST_F(WheelKeyTest, AcceptRejectDelete) {
  auto o = run("key.accept", value{{"match", "web*"}});
  ASSERT_TRUE(o.error.empty());
  EXPECT_EQ(ks.list(pki::key_state::accepted), (std::vector<std::string>{"web1", "web2"}));
  EXPECT_EQ(o.ret, value::parse(R"({"minions_rejected": ["web3"], "minions": ["web1", "web2"]})"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].first, "accept");
  o = run("key.accept", value{{"match", "web3"}, {"include_rejected", true}});
  EXPECT_TRUE(ks.exists(pki::key_state::accepted, "web3"));
  o = run("key.reject", value{{"match", "db1,web1"}});
  EXPECT_TRUE(ks.exists(pki::key_state::rejected, "db1"));
  EXPECT_TRUE(ks.exists(pki::key_state::accepted, "web1"));  // accepted: only with include_accepted
  o = run("key.delete", value{{"match", value::array({"web1", "db1"})}});
  EXPECT_FALSE(ks.exists(pki::key_state::accepted, "web1"));
  EXPECT_FALSE(ks.exists(pki::key_state::rejected, "db1"));
  EXPECT_EQ(notes.back(), (std::pair<std::string, std::vector<std::string>>{"delete", {"db1", "web1"}}));
  EXPECT_FALSE(run("key.finger", value{{"match", "*"}}).error.empty());
  EXPECT_FALSE(run("key.accept", value::object()).error.empty());
  // a match that changes nothing notifies nothing
  auto before = notes.size();
  run("key.accept", value{{"match", "nothing*"}});
  EXPECT_EQ(notes.size(), before);
}

// ---- the master core's wiring

struct ReactorCoreTest : ::testing::Test {
  temp_dir tmp;
  std::unique_ptr<master::master_core> core;
  fake_sink sink;
};

TEST_F(ReactorCoreTest, LocalEventPublishesAndErrorsAreEvents) {
  auto cfg = make_config(tmp.path);
  write(tmp.path / "r/ping.sls", "ping:\n  local.test.ping:\n    - tgt: m1\n");
  write(tmp.path / "r/bad.sls", "#!fake-error boom\n");
  cfg.raw["reactor"] = value::array({value{{"my/ping", (tmp.path / "r/ping.sls").string()}},
                              value{{"my/bad", (tmp.path / "r/bad.sls").string()}}});
  auto c = master::master_core::create(cfg);
  ASSERT_TRUE(c) << c.error().message();
  core = std::move(*c);
  core->set_renderer(std::make_unique<fake_renderer>());
  core->set_pub_sink(&sink);
  ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, "m1", cached_key(1).public_pem()));
  std::mutex mu;
  std::vector<std::string> tags;
  core->hub().subscribe_all([&](const std::string& tag, const value&) {
    std::lock_guard lk(mu);
    tags.push_back(tag);
  });
  core->hub().fire("my/ping", value::object(), "", master::event_hub::origin::peer);  // a peer's: not here
  core->hub().fire("my/ping", value{{"id", "m1"}});
  core->hub().fire("my/bad", value::object());
  auto seen = [&](const std::string& prefix, const std::string& suffix) {
    std::lock_guard lk(mu);
    return std::count_if(tags.begin(), tags.end(),
                         [&](const std::string& t) { return t.starts_with(prefix) && t.ends_with(suffix); });
  };
  // The job's new event is fired inside the publish, before the reactor counts the action:
  // wait for the count too.
  for (int i = 0; i < 1000 && (seen("salt/job/", "/new") < 1 || seen("salt/reactor/error", "") < 1 ||
                               core->reactions().stats().actions < 1);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(seen("salt/job/", "/new"), 1);
  EXPECT_EQ(seen("salt/reactor/error", ""), 1);
  EXPECT_EQ(core->reactions().stats().actions, 1u);
  core->shutdown();
}

TEST_F(ReactorCoreTest, RunnerAndWheelGoThroughTheMastersServices) {
  auto cfg = make_config(tmp.path);
  write(tmp.path / "r/ops.sls",
        "accept_new:\n  wheel.key.accept:\n    - match: {{ data.id }}\n"
        "list:\n  runner.jobs.list_jobs: []\n");
  cfg.raw["reactor"] = value::array({value{{"ops", (tmp.path / "r/ops.sls").string()}}});
  auto c = master::master_core::create(cfg);
  ASSERT_TRUE(c) << c.error().message();
  core = std::move(*c);
  core->set_renderer(std::make_unique<fake_renderer>());
  core->set_pub_sink(&sink);
  ASSERT_TRUE(core->key_store().write(pki::key_state::pending, "m2", cached_key(2).public_pem()));
  core->hub().fire("ops", value{{"id", "m2"}});
  for (int i = 0; i < 300 && core->reactions().stats().actions < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(core->reactions().stats().actions, 2u);
  EXPECT_EQ(core->reactions().stats().errors, 0u);
  EXPECT_TRUE(core->key_store().exists(pki::key_state::accepted, "m2"));
  EXPECT_FALSE(core->key_store().exists(pki::key_state::pending, "m2"));
  core->shutdown();
}

}  // namespace
}  // namespace sylvite::test
