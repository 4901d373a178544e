// sylvite::render process pool (render.hpp) against the real sylvite-render worker:
// rendering, concurrency, timeouts, crashes, garbage, limits, unsupported renderers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/render/render.hpp"

namespace fs = std::filesystem;
using sylvite::render::make_process_pool;
using sylvite::render::outcome;
using sylvite::render::pool_options;
using sylvite::render::request;
using st = sylvite::render::outcome::status;

namespace {

fs::path worker_path() { return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "sylvite-render"; }

class RenderPool : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(worker_path())) << worker_path() << " missing: build target sylvite-render";
    root_ = fs::temp_directory_path() / ("sylvite-render-test-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    // --debug-hooks: templates may call sylvite_debug_exit(n) / sylvite_debug_garbage().
    hooked_ = root_ / "hooked-worker.sh";
    std::ofstream(hooked_) << "#!/bin/sh\nexec '" << worker_path().string() << "' --debug-hooks\n";
    fs::permissions(hooked_, fs::perms::owner_all);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = root_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  request req(const fs::path& p, const std::string& sls = "x") {
    request r;
    r.path = p;
    r.sls = sls;
    r.roots = {root_};
    r.context = sylvite::wire::value::object();
    r.context["grains"] = {{"os", "Debian"}, {"id", "m1"}};
    r.context["pillar"] = sylvite::wire::value::object();
    r.context["opts"] = sylvite::wire::value::object();
    r.timeout = std::chrono::milliseconds(20000);
    return r;
  }
  pool_options opts(bool hooks = false) {
    pool_options o;
    o.worker = hooks ? hooked_ : worker_path();
    o.workers = 2;
    return o;
  }
  fs::path root_, hooked_;
};

TEST_F(RenderPool, RendersJinjaYaml) {
  auto pool = make_process_pool(opts());
  auto p = write("a.sls", "{% set v = salt['grains.get']('os') %}\nos: {{ v }}\nn: {{ [3,1,3]|unique|length }}\n");
  outcome o = pool->render(req(p, "a"));
  ASSERT_EQ(o.st, st::ok) << o.error;
  EXPECT_EQ(o.data["os"], "Debian");
  EXPECT_EQ(o.data["n"], 2);
}

TEST_F(RenderPool, EmptyFileIsEmptyMap) {
  auto pool = make_process_pool(opts());
  outcome o = pool->render(req(write("e.sls", "  \n")));
  ASSERT_EQ(o.st, st::ok) << o.error;
  EXPECT_TRUE(o.data.is_object());
  EXPECT_TRUE(o.data.empty());
}

TEST_F(RenderPool, ConcurrentRendersFromSeveralThreads) {
  auto pool = make_process_pool(opts());
  auto p = write("c.sls", "who: {{ grains['id'] }}\n");
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        request r = req(p, "c");
        r.context["grains"]["id"] = "minion-" + std::to_string(t) + "-" + std::to_string(i);
        outcome o = pool->render(r);
        if (o.ok() && o.data["who"] == r.context["grains"]["id"]) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 24);
}

TEST_F(RenderPool, EndlessTemplateIsKilledAtTheTimeoutAndTheNextRenderWorks) {
  auto pool = make_process_pool(opts());
  // The sandbox caps one range at 100000; two nested ones never end in practice.
  auto slow = write("slow.sls",
                    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\nx: 1\n");
  request r = req(slow, "slow");
  r.timeout = std::chrono::milliseconds(1500);
  auto t0 = std::chrono::steady_clock::now();
  outcome o = pool->render(r);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(o.st, st::timeout);
  EXPECT_NE(o.error.find(slow.string()), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("1500 ms"), std::string::npos) << o.error;
  EXPECT_LT(took, std::chrono::seconds(5));
  outcome ok = pool->render(req(write("ok.sls", "y: 2\n")));
  ASSERT_EQ(ok.st, st::ok) << ok.error;
  EXPECT_EQ(ok.data["y"], 2);
}

TEST_F(RenderPool, WorkerCrashIsUnavailableAndReplaced) {
  auto pool = make_process_pool(opts(true));
  outcome o = pool->render(req(write("crash.sls", "{{ sylvite_debug_exit(3) }}\n")));
  EXPECT_EQ(o.st, st::unavailable);
  EXPECT_NE(o.error.find("exited with status 3"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("crash.sls"), std::string::npos) << o.error;
  outcome ok = pool->render(req(write("ok.sls", "y: 2\n")));
  ASSERT_EQ(ok.st, st::ok) << ok.error;
}

TEST_F(RenderPool, IdleWorkerKilledFromOutsideIsReplaced) {
  pool_options o1 = opts();
  o1.workers = 1;
  auto pool = make_process_pool(o1);
  auto p = write("pid.sls", "pid: {{ salt['cmd.shell']('echo $PPID') }}\n");
  outcome first = pool->render(req(p));
  ASSERT_EQ(first.st, st::ok) << first.error;
  const int pid = std::stoi(first.data["pid"].dump());
  ASSERT_GT(pid, 1);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 50 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  outcome again = pool->render(req(p));
  ASSERT_EQ(again.st, st::ok) << again.error;
  EXPECT_NE(again.data["pid"], first.data["pid"]);
}

TEST_F(RenderPool, GarbageReplyIsRefusedAndTheWorkerReplaced) {
  auto pool = make_process_pool(opts(true));
  outcome o = pool->render(req(write("junk.sls", "{{ sylvite_debug_garbage() }}\n")));
  EXPECT_EQ(o.st, st::unavailable);
  EXPECT_NE(o.error.find("invalid reply"), std::string::npos) << o.error;
  for (int i = 0; i < 3; ++i) {
    outcome ok = pool->render(req(write("ok.sls", "y: 2\n")));
    ASSERT_EQ(ok.st, st::ok) << ok.error;
  }
}

TEST_F(RenderPool, OversizedOutputIsRefused) {
  pool_options o2 = opts();
  o2.max_output_bytes = 1000;
  auto pool = make_process_pool(o2);
  outcome o = pool->render(req(write("big.sls", "big: {{ 'x' * 5000 }}\n")));
  EXPECT_EQ(o.st, st::render_error);
  EXPECT_NE(o.error.find("limit of 1000 bytes"), std::string::npos) << o.error;
  outcome ok = pool->render(req(write("ok.sls", "y: 2\n")));
  EXPECT_EQ(ok.st, st::ok) << ok.error;
}

TEST_F(RenderPool, UnsupportedRendererNamesFileAndRenderer) {
  auto pool = make_process_pool(opts());
  auto p = write("py.sls", "#!py\ndef run():\n    return {}\n");
  outcome o = pool->render(req(p, "py"));
  EXPECT_EQ(o.st, st::unsupported_renderer);
  EXPECT_NE(o.error.find(p.string()), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("'py'"), std::string::npos) << o.error;
}

TEST_F(RenderPool, RenderErrorCarriesSaltsMessage) {
  auto pool = make_process_pool(opts());
  outcome o = pool->render(req(write("bad.sls", "a: {{ nope }}\n")));
  EXPECT_EQ(o.st, st::render_error);
  EXPECT_NE(o.error.find("Jinja variable 'nope' is undefined"), std::string::npos) << o.error;
}

TEST_F(RenderPool, UnsupportedSaltFunctionAndMineAreClearErrors) {
  auto pool = make_process_pool(opts());
  outcome o = pool->render(req(write("fn.sls", "a: {{ salt['network.ip_addrs']() }}\n")));
  EXPECT_EQ(o.st, st::render_error);
  EXPECT_NE(o.error.find("'network.ip_addrs' is not available"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("grains.filter_by"), std::string::npos) << o.error;
  // No call handler (a caller that serves no calls): mine.get is a clear error.
  outcome m = pool->render(req(write("mine.sls", "a: {{ salt.mine.get('*', 'x') }}\n")));
  EXPECT_EQ(m.st, st::render_error);
  EXPECT_NE(m.error.find("mine.get is not available here"), std::string::npos) << m.error;
}

// salt['mine.get'] and saltutil.runner('mine.get') call back to the caller over the
// worker's socketpair; the worker stays usable afterwards.
TEST_F(RenderPool, MineGetCallsBackToTheCaller) {
  auto pool = make_process_pool(opts());
  std::vector<sylvite::wire::value> seen;
  request r = req(write("mine.sls",
                        "a: {{ salt['mine.get']('web*', 'network.ip_addrs') | json }}\n"
                        "b: {{ salt.mine.get('G@os:Debian', ['x', 'y'], tgt_type='compound') | json }}\n"
                        "c: {{ salt['saltutil.runner']('mine.get', tgt='*', fun='x') | json }}\n"
                        "d: {{ salt['mine.get']('*', 'x', exclude_minion=True) | json }}\n"));
  r.call = [&](std::string_view fun, const sylvite::wire::value& args) -> sylvite::render::call_result {
    seen.push_back(args);
    EXPECT_EQ(fun, "mine.get");
    sylvite::wire::value v = sylvite::wire::value::object();
    v["m1"] = sylvite::wire::value::array({"10.0.0.1"});
    v["m2"] = sylvite::wire::value::array({"10.0.0.2"});
    return {true, v, {}};
  };
  r.context["opts"]["id"] = "m1";
  outcome o = pool->render(r);
  ASSERT_EQ(o.st, st::ok) << o.error;
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0]["tgt"], "web*");
  EXPECT_EQ(seen[0]["fun"], "network.ip_addrs");
  EXPECT_EQ(seen[0]["tgt_type"], "glob");
  EXPECT_FALSE(seen[0].contains("runner"));
  EXPECT_EQ(seen[1]["fun"], sylvite::wire::value::array({"x", "y"}));
  EXPECT_EQ(seen[1]["tgt_type"], "compound");
  EXPECT_EQ(seen[2]["runner"], true);
  EXPECT_EQ(o.data["a"]["m2"][0], "10.0.0.2");
  EXPECT_FALSE(o.data["d"].contains("m1"));  // exclude_minion drops the pillar's own minion
  EXPECT_TRUE(o.data["d"].contains("m2"));

  // An error from the caller is raised in the template.
  request e = req(write("err.sls", "a: {{ salt['mine.get']('*', 'x') }}\n"));
  e.call = [](std::string_view, const sylvite::wire::value&) -> sylvite::render::call_result {
    return {false, {}, "no mine for you"};
  };
  outcome eo = pool->render(e);
  EXPECT_EQ(eo.st, st::render_error);
  EXPECT_NE(eo.error.find("no mine for you"), std::string::npos) << eo.error;

  // saltutil.runner reaches only mine.get.
  outcome ro = pool->render(req(write("run.sls", "a: {{ salt['saltutil.runner']('jobs.list_jobs') }}\n")));
  EXPECT_EQ(ro.st, st::render_error);
  EXPECT_NE(ro.error.find("runs only 'mine.get'"), std::string::npos) << ro.error;

  // The workers still serve plain renders.
  outcome ok = pool->render(req(write("ok.sls", "y: 2\n")));
  ASSERT_EQ(ok.st, st::ok) << ok.error;
}

// A template cannot make the caller serve more than max_calls calls per file.
TEST_F(RenderPool, CallsPerFileAreBounded) {
  pool_options o = opts();
  o.max_calls = 3;
  auto pool = make_process_pool(o);
  int calls = 0;
  request r = req(write("loop.sls", "{% for i in range(10) %}{% do salt['mine.get']('*', 'x') %}{% endfor %}a: 1\n"));
  r.call = [&](std::string_view, const sylvite::wire::value&) -> sylvite::render::call_result {
    ++calls;
    return {true, sylvite::wire::value::object(), {}};
  };
  outcome out = pool->render(r);
  EXPECT_EQ(out.st, st::render_error);
  EXPECT_NE(out.error.find("more than 3 calls"), std::string::npos) << out.error;
  EXPECT_EQ(calls, 3);
}

TEST_F(RenderPool, MissingWorkerIsUnavailable) {
  pool_options o2 = opts();
  o2.worker = root_ / "no-such-worker";
  auto pool = make_process_pool(o2);
  outcome o = pool->render(req(write("ok.sls", "y: 2\n")));
  EXPECT_EQ(o.st, st::unavailable);
  EXPECT_NE(o.error.find("no-such-worker"), std::string::npos) << o.error;
}

TEST_F(RenderPool, BytesRoundTrip) {
  auto pool = make_process_pool(opts());
  outcome o = pool->render(req(write("bin.sls", "b: !!binary aGVsbG8=\n")));
  ASSERT_EQ(o.st, st::ok) << o.error;
  ASSERT_TRUE(o.data["b"].is_binary());
  EXPECT_EQ(std::string(o.data["b"].get_binary().begin(), o.data["b"].get_binary().end()), "hello");
  // Bytes in the context reach the template as bytes and come back (all base64 paddings).
  for (const std::string& raw : std::vector<std::string>{"h", "hi", "hi!", std::string("\x00\xff\x10\x80", 4)}) {
    request r = req(write("ctx.sls", "b: {{ pillar.bin|yaml }}\n"));
    r.context["pillar"]["bin"] = sylvite::wire::value::binary(std::vector<std::uint8_t>(raw.begin(), raw.end()));
    outcome c = pool->render(r);
    ASSERT_EQ(c.st, st::ok) << c.error;
    ASSERT_TRUE(c.data["b"].is_binary()) << c.data.dump();
    EXPECT_EQ(std::string(c.data["b"].get_binary().begin(), c.data["b"].get_binary().end()), raw);
  }
}

}  // namespace
