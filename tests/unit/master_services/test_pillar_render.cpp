// pillar_compiler through render::renderer (issue 17), with test::fake_renderer: Jinja in
// top.sls, the template variables Salt passes, render errors / unsupported renderers /
// timeouts in _errors, pillar_compile_timeout, merge strategies against vectors made by
// Salt's own salt.utils.dictupdate (fixtures/gen_merge_vectors.py), ext_pillar cmd_yaml,
// cmd_json, file_tree, pillar_cache (memory and disk, TTL), pillarenv and
// pillarenv_from_saltenv, pillar_override.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/util/files.hpp"
#include "tests/unit/support/fake_renderer.hpp"
#include "master/pillar.hpp"
#include "master/pillar_ext.hpp"
#include "test_util.hpp"

using namespace sylvite;
using sylvite::test::temp_dir;
using sylvite::test::write;
using wire::value;

namespace {

std::vector<std::string> errors_of(const value& p) {
  std::vector<std::string> out;
  if (p.contains("_errors"))
    for (const auto& e : p["_errors"]) out.push_back(e.get<std::string>());
  return out;
}

bool has_error(const value& p, const std::string& needle) {
  for (const auto& e : errors_of(p))
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

config::master_config base_cfg(const temp_dir& d) {
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  cfg.cachedir = d.path / "cache";
  cfg.config_dir = d.path / "etc";
  return cfg;
}

}  // namespace

TEST(PillarRender, JinjaInTopFileAndTemplateVariables) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '{{ grains.id }}':\n    - a\n  'other':\n    - b\n");
  write(d / "p/a.sls", "os: {{ grains.os }}\nwho: {{ opts.id }}\nenv: {{ saltenv }}\nsls: {{ sls }}\n");
  write(d / "p/b.sls", "b: 1\n");
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  master::pillar_compiler pc(cfg, fr);
  auto p = pc.compile("m1", value{{"os", "Debian"}});
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
  EXPECT_EQ(p["os"], "Debian");
  EXPECT_EQ(p["who"], "m1");
  EXPECT_EQ(p["env"], "base");
  EXPECT_EQ(p["sls"], "a");
  EXPECT_FALSE(p.contains("b"));

  const auto* top = fr.find("p/top.sls");
  ASSERT_TRUE(top);
  EXPECT_EQ(top->sls, "");
  EXPECT_EQ(top->saltenv, "base");
  EXPECT_EQ(top->default_pipe, "jinja|yaml");
  EXPECT_EQ(top->context["pillar"], value::object());
  EXPECT_EQ(top->context["grains"]["id"], "m1");  // the request's id, as Salt's _pillar
  EXPECT_EQ(top->context["saltenv"], "base");

  const auto* a = fr.find("p/a.sls");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->sls, "a");
  ASSERT_EQ(a->roots.size(), 1u);
  EXPECT_EQ(a->roots[0], d.path / "p");
  const auto& opts = a->context["opts"];
  EXPECT_EQ(opts["id"], "m1");
  EXPECT_EQ(opts["pillarenv"], nullptr);
  EXPECT_EQ(opts["saltenv"], nullptr);
  EXPECT_EQ(opts["renderer"], "jinja|yaml");
  EXPECT_EQ(opts["jinja_env"], value::object());
  EXPECT_EQ(opts["jinja_trim_blocks"], false);
  EXPECT_EQ(opts["gpg_keydir"], (d.path / "etc/gpgkeys").string());  // Salt: <config dir>/gpgkeys
  EXPECT_EQ(opts["pillar_roots"]["base"][0], (d.path / "p").string());
  EXPECT_EQ(a->context["pillar"], value::object());  // Salt's pillar_data: {} without ext_pillar_first
  // Salt does not pass these as template variables.
  EXPECT_FALSE(a->context.contains("minion_id"));
  EXPECT_FALSE(a->context.contains("pillarenv"));
}

TEST(PillarRender, IncludeDefaultsBecomeTemplateVariables) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls",
        "include:\n  - b:\n      defaults:\n        colour: blue\n      key: sub\n  - c\na: 1\n");
  write(d / "p/b.sls", "b: {{ colour }}\n");
  write(d / "p/c.sls", "c: '{{ colour }}'\n");  // Salt reuses the last defaults for a plain entry
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
  EXPECT_EQ(p["sub"]["b"], "blue");
  EXPECT_EQ(p["c"], "blue");
  const auto* b = fr.find("p/b.sls");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->context["colour"], "blue");
}

TEST(PillarRender, RenderErrorsSafeAndDetailed) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - bad\n    - good\n");
  write(d / "p/bad.sls", "#!fake-error boom: line 3\n");
  write(d / "p/good.sls", "good: true\n");
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_EQ(p["good"], true);
  EXPECT_EQ(errors_of(p), std::vector<std::string>{"Rendering SLS 'bad' failed. Please see master log for details."});
  cfg.pillar_safe_render_error = false;
  p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_EQ(p["good"], true);
  EXPECT_EQ(errors_of(p), std::vector<std::string>{"Rendering SLS 'bad' failed, render error:\nboom: line 3"});
}

TEST(PillarRender, UnsupportedRendererNamesFileAndRenderer) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - pyfile\n    - listed\n    - good\n");
  write(d / "p/pyfile.sls", "#!py\ndef run(): return {}\n");
  write(d / "p/listed.sls", "#!json\n{\"j\": 1}\n");
  write(d / "p/good.sls", "good: true\n");
  auto cfg = base_cfg(d);
  cfg.renderer_blacklist = {"json"};
  {
    // pillar_safe_render_error (default on): to the minion it is Salt's entry for a file
    // that failed to render; the file and the renderer are named in the master's log.
    cfg.pillar_safe_render_error = true;
    test::fake_renderer fr;
    master::pillar_compiler pc(cfg, fr);
    auto p = pc.compile("m", nullptr);
    EXPECT_EQ(p["good"], true);
    auto errs = errors_of(p);
    ASSERT_EQ(errs.size(), 2u) << p.dump();
    EXPECT_EQ(errs[0], "Rendering SLS 'pyfile' failed. Please see master log for details.");
  }
  cfg.pillar_safe_render_error = false;
  test::fake_renderer fr;
  master::pillar_compiler pc(cfg, fr);
  for (int i = 0; i < 2; ++i) {  // logged once, reported every time
    auto p = pc.compile("m", nullptr);
    EXPECT_EQ(p["good"], true);
    EXPECT_FALSE(p.contains("j"));
    auto errs = errors_of(p);
    ASSERT_EQ(errs.size(), 2u) << p.dump();
    EXPECT_EQ(errs[0], "Rendering SLS 'pyfile' failed, render error:\n" + (d.path / "p/pyfile.sls").string() +
                           ": the renderer 'py' is not supported by sylvite");
    EXPECT_NE(errs[1].find("listed.sls: the renderer 'json'"), std::string::npos) << errs[1];
  }
  EXPECT_EQ(fr.find("p/listed.sls")->blacklist, std::vector<std::string>{"json"});
}

TEST(PillarRender, RenderTimeoutIsReportedAndBounded) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - slow\n    - good\n");
  write(d / "p/slow.sls", "#!fake-sleep\n");
  write(d / "p/good.sls", "good: true\n");
  auto cfg = base_cfg(d);
  cfg.pillar_render_timeout = 1;
  test::fake_renderer fr;
  auto t0 = std::chrono::steady_clock::now();
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(p["good"], true);
  EXPECT_EQ(errors_of(p), std::vector<std::string>{"Rendering SLS 'slow' failed, render error:\n" +
                                                   (d.path / "p/slow.sls").string() + ": render timed out after 1 s"});
  EXPECT_EQ(fr.find("p/slow.sls")->timeout, std::chrono::seconds(1));
}

TEST(PillarRender, CompileTimeoutStopsAndReports) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - first\n    - slow1\n    - slow2\n    - last\n");
  write(d / "p/first.sls", "first: 1\n");
  write(d / "p/slow1.sls", "#!fake-sleep\n");
  write(d / "p/slow2.sls", "#!fake-sleep\n");
  write(d / "p/last.sls", "last: 1\n");
  auto cfg = base_cfg(d);
  cfg.pillar_render_timeout = 30;
  cfg.pillar_compile_timeout = 1;
  test::fake_renderer fr;
  auto t0 = std::chrono::steady_clock::now();
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  EXPECT_EQ(p["first"], 1);
  EXPECT_FALSE(p.contains("last"));
  EXPECT_TRUE(has_error(p, "Pillar compilation for minion 'm' stopped: pillar_compile_timeout (1 s) passed")) << p.dump();
  EXPECT_LE(fr.find("p/slow1.sls")->timeout, std::chrono::seconds(1));  // bounded by what is left
  EXPECT_FALSE(fr.find("p/slow2.sls"));                                  // never started
  EXPECT_FALSE(fr.find("p/last.sls"));
  auto errs = errors_of(p);
  ASSERT_EQ(errs.size(), 2u) << p.dump();
  EXPECT_EQ(errs[0], "Rendering SLS 'slow1' failed, render error:\n" + (d.path / "p/slow1.sls").string() +
                         ": render timed out after 1 s");
}

TEST(PillarRender, ManyMinionsInParallelOneBrokenFile) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  'bad*':\n    - broken\n  '*':\n    - common\n");
  write(d / "p/broken.sls", "#!fake-error nope\n");
  write(d / "p/common.sls", "id: {{ grains.id }}\n");
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  master::pillar_compiler pc(cfg, fr);
  std::vector<std::thread> ts;
  std::vector<value> out(8);
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] { out[i] = pc.compile((i % 2 ? "bad" : "good") + std::to_string(i), nullptr); });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i]["id"], (i % 2 ? "bad" : "good") + std::to_string(i));
    EXPECT_EQ(out[i].contains("_errors"), i % 2 == 1) << out[i].dump();
  }
}

TEST(PillarRender, MergeStrategiesMatchSaltDictupdate) {
  auto text = util::read_file(std::string(SYLVITE_SOURCE_DIR) + "/tests/unit/master_services/fixtures/merge_vectors.json");
  ASSERT_TRUE(text);
  auto doc = value::parse(*text);
  ASSERT_GT(doc["cases"].size(), 100u);
  for (const auto& c : doc["cases"]) {
    auto got = master::pillar_merge(c["a"], c["b"], c["strategy"].get<std::string>(), c["renderer"].get<std::string>(),
                                    c["merge_lists"].get<bool>());
    EXPECT_EQ(got, c["expected"]) << "strategy " << c["strategy"] << " renderer " << c["renderer"] << " merge_lists "
                                  << c["merge_lists"] << "\na " << c["a"].dump() << "\nb " << c["b"].dump();
  }
}

TEST(PillarRender, SourceMergingStrategyAppliesToSlsAndIncludes) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - one\n    - two\n");
  write(d / "p/one.sls", "m: {x: 1, l: [1]}\n");
  write(d / "p/two.sls", "m: {y: 2, l: [2]}\n");
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  cfg.pillar_source_merging_strategy = "overwrite";
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_EQ(p["m"], value::parse(R"({"y": 2, "l": [2]})"));
  cfg.pillar_source_merging_strategy = "recurse";
  cfg.pillar_merge_lists = true;
  p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_EQ(p["m"], value::parse(R"({"x": 1, "l": [1, 2], "y": 2})"));
}

TEST(PillarRender, StrategyNoneReadsOnlyTheSaltenvTop) {
  temp_dir d;
  write(d / "base/top.sls", "base:\n  '*':\n    - b\n");
  write(d / "base/b.sls", "b: 1\n");
  write(d / "dev/top.sls", "dev:\n  '*':\n    - dv\n");
  write(d / "dev/dv.sls", "dv: 1\n");
  auto cfg = base_cfg(d);
  cfg.pillar_roots = {{"base", {(d.path / "base").string()}}, {"dev", {(d.path / "dev").string()}}};
  cfg.pillar_source_merging_strategy = "none";
  test::fake_renderer fr;
  master::pillar_compiler pc(cfg, fr);
  auto p = pc.compile("m", nullptr);
  EXPECT_EQ(p, value::parse(R"({"b": 1})"));
  master::pillar_request rq;
  rq.minion_id = "m";
  rq.saltenv = "dev";
  EXPECT_EQ(pc.compile(rq), value::parse(R"({"dv": 1})"));
}

TEST(PillarRender, PillarenvAndPillarenvFromSaltenv) {
  temp_dir d;
  write(d / "base/top.sls", "base:\n  '*':\n    - b\n");
  write(d / "base/b.sls", "b: 1\n");
  write(d / "dev/top.sls", "dev:\n  '*':\n    - dv\n");
  write(d / "dev/dv.sls", "dv: '{{ opts.pillarenv }}'\n");
  auto cfg = base_cfg(d);
  cfg.pillar_roots = {{"base", {(d.path / "base").string()}}, {"dev", {(d.path / "dev").string()}}};
  test::fake_renderer fr;
  {
    master::pillar_compiler pc(cfg, fr);
    auto all = pc.compile("m", nullptr);
    EXPECT_EQ(all["b"], 1);
    EXPECT_TRUE(all.contains("dv"));
    master::pillar_request rq;
    rq.minion_id = "m";
    rq.saltenv = "dev";  // without pillarenv_from_saltenv the saltenv does not restrict
    EXPECT_EQ(pc.compile(rq)["b"], 1);
  }
  cfg.pillarenv = "dev";
  {
    master::pillar_compiler pc(cfg, fr);
    EXPECT_EQ(pc.compile("m", nullptr), value::parse(R"({"dv": "dev"})"));
    EXPECT_EQ(pc.compile("m", nullptr, "base"), value::parse(R"({"b": 1})"));  // the request wins
  }
  cfg.pillarenv.reset();
  cfg.pillarenv_from_saltenv = true;
  {
    master::pillar_compiler pc(cfg, fr);
    master::pillar_request rq;
    rq.minion_id = "m";
    rq.saltenv = "dev";
    EXPECT_EQ(pc.compile(rq), value::parse(R"({"dv": "dev"})"));
    rq.pillarenv = "base";  // an explicit pillarenv wins over the saltenv
    EXPECT_EQ(pc.compile(rq), value::parse(R"({"b": 1})"));
    rq = {};
    rq.minion_id = "m";  // no saltenv: every env
    EXPECT_EQ(pc.compile(rq)["b"], 1);
  }
}

TEST(PillarRender, PillarOverrideIsMergedLast) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls", "a: {x: 1, y: 1}\nseen: '{{ pillar.a.x }}'\n");
  auto cfg = base_cfg(d);
  test::fake_renderer fr;
  master::pillar_request rq;
  rq.minion_id = "m";
  rq.pillar_override = value::parse(R"({"a": {"y": 2}, "o": true})");
  // minion_data_cache (Salt's master default): PillarCache merges the override after
  // compiling, templates never see it.
  auto p = master::pillar_compiler(cfg, fr).compile(rq);
  EXPECT_EQ(p, value::parse(R"({"a": {"x": 1, "y": 2}, "seen": "", "o": true})"));
  // Without any cache: Pillar starts render_pillar from the override (still merged last).
  cfg.minion_data_cache = false;
  p = master::pillar_compiler(cfg, fr).compile(rq);
  EXPECT_EQ(p["a"], value::parse(R"({"y": 2, "x": 1})"));
  EXPECT_EQ(p["o"], true);
  // A non-map override is ignored.
  rq.pillar_override = "junk";
  p = master::pillar_compiler(cfg, fr).compile(rq);
  EXPECT_FALSE(p.contains("o"));
}

TEST(PillarRender, ExtPillarCmdYamlCmdJsonAndOrder) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls", "a: 1\nshared: sls\nfrom_ext: '{{ pillar.y.id }}'\n");
  auto cfg = base_cfg(d);
  cfg.ext_pillar = value::parse(R"([{"cmd_yaml": "printf 'y: {id: %s}\\nshared: yaml\\n'"},
                                    {"cmd_json": "echo '{\"j\": \"%s\", \"shared\": \"json\"}'"},
                                    {"git": "master https://example.invalid/repo"}])");
  test::fake_renderer fr;
  auto p = master::pillar_compiler(cfg, fr).compile("m1", nullptr);
  EXPECT_EQ(p["a"], 1);
  EXPECT_EQ(p["y"]["id"], "m1");
  EXPECT_EQ(p["j"], "m1");
  EXPECT_EQ(p["shared"], "json");   // ext_pillar after the SLS: the last one wins
  EXPECT_EQ(p["from_ext"], "");     // SLS templates do not see ext data...
  EXPECT_EQ(errors_of(p), std::vector<std::string>{
                              "ext_pillar interface named git is unavailable (sylvite runs cmd_yaml, cmd_json and "
                              "file_tree)"});
  cfg.ext_pillar_first = true;
  p = master::pillar_compiler(cfg, fr).compile("m1", nullptr);
  EXPECT_EQ(p["shared"], "sls");  // ...unless ext_pillar_first: SLS then win
  EXPECT_EQ(p["from_ext"], "m1");
  EXPECT_EQ(fr.find("p/a.sls")->context["pillar"]["j"], "m1");
}

TEST(PillarRender, ExtPillarBadOutputAndArguments) {
  temp_dir d;
  auto cfg = base_cfg(d);
  cfg.ext_pillar = value::parse(R"([{"cmd_yaml": "echo '[1, 2'"}, {"cmd_json": "echo not json"},
                                    {"cmd_yaml": {"command": "echo a: 1", "bogus": 1}},
                                    {"cmd_json": ["echo", "x"]}])");
  test::fake_renderer fr;
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  auto errs = errors_of(p);
  ASSERT_EQ(errs.size(), 2u) << p.dump();
  EXPECT_EQ(errs[0], "Failed to load ext_pillar cmd_yaml: ext_pillar() got an unexpected keyword argument 'bogus'");
  EXPECT_EQ(errs[1], "Failed to load ext_pillar cmd_json: ext_pillar() takes 3 positional arguments but 4 were given");
  EXPECT_EQ(p.size(), 1u) << p.dump();
}

TEST(PillarRender, ExtPillarCommandKilledAtCompileDeadline) {
  temp_dir d;
  auto cfg = base_cfg(d);
  cfg.pillar_compile_timeout = 1;
  cfg.ext_pillar = value::parse(R"([{"cmd_yaml": "sleep 30; echo a: 1"}])");
  test::fake_renderer fr;
  auto t0 = std::chrono::steady_clock::now();
  auto p = master::pillar_compiler(cfg, fr).compile("m", nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_FALSE(p.contains("a"));
  EXPECT_TRUE(has_error(p, "pillar_compile_timeout (1 s) passed")) << p.dump();
}

TEST(PillarRender, ExtPillarFileTree) {
  temp_dir d;
  write(d / "tree/hosts/m1/simple", "value\n");
  write(d / "tree/hosts/m1/keep.txt", "kept\n");
  write(d / "tree/hosts/m1/dir/sub/leaf", "leaf");
  write(d / "tree/hosts/m1/tmpl", "#!yaml\nk: v\n");
  std::filesystem::create_directories(d / "tree/hosts/m1/emptydir");
  write(d / "tree/hosts/m2/other", "no\n");
  write(d / "tree/nodegroups/webs/role", "web\n");
  write(d / "tree/nodegroups/webs/simple", "from group\n");
  write(d / "tree/nodegroups/dbs/role", "db\n");
  auto cfg = base_cfg(d);
  cfg.nodegroups = {{"webs", "m*"}, {"dbs", "db*"}};
  value arg = value::object();
  arg["root_dir"] = (d.path / "tree").string();
  arg["keep_newline"] = value::array({"./keep*"});
  cfg.ext_pillar = value::array({value{{"file_tree", arg}}});
  test::fake_renderer fr;
  auto p = master::pillar_compiler(cfg, fr).compile("m1", nullptr);
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
  EXPECT_EQ(p["simple"], "value");  // host data over the nodegroup's
  EXPECT_EQ(p["keep.txt"], "kept\n");
  EXPECT_EQ(p["role"], "web");
  EXPECT_EQ(p["dir"]["sub"]["leaf"], "leaf");
  EXPECT_EQ(p["emptydir"], value::object());
  EXPECT_EQ(p["tmpl"], "#!yaml\nk: v");  // template: False
  EXPECT_FALSE(p.contains("other"));

  arg["template"] = true;
  arg["keep_newline"] = true;
  cfg.ext_pillar = value::array({value{{"file_tree", arg}}});
  p = master::pillar_compiler(cfg, fr).compile("m1", nullptr);
  EXPECT_EQ(p["tmpl"], value::parse(R"({"k": "v"})"));
  EXPECT_EQ(p["simple"], value::object());  // no shebang, no render_default: {}
  arg["render_default"] = "yaml";
  cfg.ext_pillar = value::array({value{{"file_tree", arg}}});
  p = master::pillar_compiler(cfg, fr).compile("m1", nullptr);
  EXPECT_EQ(p["simple"], "value");

  // Relative root_dir: under each pillar_roots dir of pillarenv; without pillarenv: nothing.
  write(d / "p/rel/hosts/m1/r", "rel\n");
  cfg.ext_pillar = value::parse(R"([{"file_tree": {"root_dir": "rel"}}])");
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m1", nullptr), value::object());
  cfg.pillarenv = "base";
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m1", nullptr), value::parse(R"({"r": "rel"})"));
}

TEST(PillarRender, ShlexSplitAsPython) {
  using master::pillar_ext::shlex_split;
  EXPECT_EQ(*shlex_split("echo 'a b' \"c \\\"d\\\"\" e\\ f ''"),
            (std::vector<std::string>{"echo", "a b", "c \"d\"", "e f", ""}));
  EXPECT_EQ(*shlex_split("a\\\\b \"x\\ny\""), (std::vector<std::string>{"a\\b", "x\\ny"}));
  EXPECT_FALSE(shlex_split("echo 'open"));
  EXPECT_FALSE(shlex_split("trailing\\"));
}

TEST(PillarRender, PillarCacheMemoryTtlAndOverride) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls", "v: 1\n");
  auto cfg = base_cfg(d);
  cfg.pillar_cache = true;
  cfg.pillar_cache_backend = "memory";
  cfg.pillar_cache_ttl = 3600;
  test::fake_renderer fr;
  master::pillar_compiler pc(cfg, fr);
  master::pillar_request rq;
  rq.minion_id = "m";
  rq.pillar_override = value{{"o", 1}};
  EXPECT_EQ(pc.compile(rq), value::parse(R"({"v": 1, "o": 1})"));
  write(d / "p/a.sls", "v: 2\n");
  rq.pillar_override = nullptr;
  EXPECT_EQ(pc.compile(rq), value::parse(R"({"v": 1})"));  // cached, without the override
  EXPECT_EQ(pc.compile("other", nullptr), value::parse(R"({"v": 2})"));  // keyed by minion id
  EXPECT_EQ(pc.compile("m", nullptr, "base"), value::parse(R"({"v": 2})"));  // ... and pillarenv
  rq.clean_cache = true;
  EXPECT_EQ(pc.compile(rq), value::parse(R"({"v": 2})"));
  // TTL 0: every entry is already stale.
  cfg.pillar_cache_ttl = 0;
  master::pillar_compiler pc0(cfg, fr);
  EXPECT_EQ(pc0.compile("m", nullptr), value::parse(R"({"v": 2})"));
  write(d / "p/a.sls", "v: 3\n");
  EXPECT_EQ(pc0.compile("m", nullptr), value::parse(R"({"v": 3})"));
}

TEST(PillarRender, PillarCacheDiskSurvivesAndExpires) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls", "v: 1\n");
  auto cfg = base_cfg(d);
  cfg.pillar_cache = true;
  cfg.pillar_cache_ttl = 2;
  test::fake_renderer fr;
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m", nullptr), value::parse(R"({"v": 1})"));
  EXPECT_TRUE(std::filesystem::exists(d / "cache/pillar_cache/m.p"));
  write(d / "p/a.sls", "v: 2\n");
  // A new compiler (a restarted master) reads the disk cache.
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m", nullptr), value::parse(R"({"v": 1})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m", nullptr), value::parse(R"({"v": 2})"));
  // An untrusted pillarenv never becomes a path.
  EXPECT_EQ(master::pillar_compiler(cfg, fr).compile("m", nullptr, "../../x"), value::object());
  EXPECT_FALSE(std::filesystem::exists(d / "x.p"));
}
