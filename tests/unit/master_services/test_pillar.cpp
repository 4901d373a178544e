// pillar_compiler: top matching (glob, grain, compound, list, pcre, nodegroup), include
// (absolute, relative, key), merge order, multiple roots, pillarenv, errors in _errors.
// Files are rendered by test::fake_renderer (YAML and `{{ var }}` only).
#include <gtest/gtest.h>

#include "tests/unit/support/fake_renderer.hpp"
#include "master/pillar.hpp"
#include "test_util.hpp"

using namespace sylvite;
using sylvite::test::temp_dir;
using sylvite::test::write;

namespace {

// One fake renderer (YAML + `{{ var }}` substitution) for every compiler here.
test::fake_renderer& fake() {
  static test::fake_renderer r;
  return r;
}

wire::value grains(const std::string& os) {
  wire::value g = wire::value::object();
  g["os"] = os;
  g["roles"] = wire::value::array({"web", "cache"});
  return g;
}

std::vector<std::string> errors_of(const wire::value& p) {
  std::vector<std::string> out;
  if (p.contains("_errors"))
    for (const auto& e : p["_errors"]) out.push_back(e.get<std::string>());
  return out;
}

bool has_error(const wire::value& p, const std::string& needle) {
  for (const auto& e : errors_of(p))
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

struct pillar_tree {
  temp_dir d;
  config::master_config cfg;
  pillar_tree() {
    write(d / "p1/top.sls",
          "base:\n"
          "  '*':\n"
          "    - common\n"
          "  'web*':\n"
          "    - web\n"
          "  'os:Debian':\n"
          "    - match: grain\n"
          "    - debian\n"
          "  'G@os:RedHat or db*':\n"
          "    - match: compound\n"
          "    - redhat_or_db\n"
          "  'roles:cache':\n"
          "    - match: grain\n"
          "    - cache\n"
          "  'L@lst1,lst2':\n"
          "    - listed\n"
          "  'pc[0-9]+':\n"
          "    - match: pcre\n"
          "    - pcre\n"
          "  'webgroup':\n"
          "    - match: nodegroup\n"
          "    - grouped\n");
    write(d / "p1/common.sls",
          "include:\n"
          "  - users\n"
          "common: true\n"
          "shared:\n"
          "  level: common\n"
          "  from_common: 1\n"
          "  list: [1, 2]\n");
    write(d / "p1/users/init.sls",
          "include:\n"
          "  - .admins\n"
          "users:\n"
          "  alice: 1000\n"
          "shared:\n"
          "  level: users\n"
          "  from_users: 1\n");
    write(d / "p1/users/admins.sls", "admins: [alice]\n");
    write(d / "p1/web.sls",
          "shared:\n"
          "  level: web\n"
          "  list: [3]\n"
          "web: {port: 80}\n");
    write(d / "p1/debian.sls", "os_family: debian\n");
    write(d / "p1/redhat_or_db.sls", "rod: true\n");
    write(d / "p1/cache.sls", "cache: yes\n");
    write(d / "p1/listed.sls", "listed: true\n");
    write(d / "p1/pcre.sls", "pcre: true\n");
    write(d / "p1/grouped.sls", "grouped: true\n");
    // second root: shadowed file and one only found there
    write(d / "p2/debian.sls", "os_family: shadowed\n");
    write(d / "p2/extra/deep.sls", "deep: true\n");
    cfg.pillar_roots = {{"base", {(d.path / "p1").string(), (d.path / "p2").string()}}};
    cfg.nodegroups = {{"webgroup", "web* or L@ng1"}};
  }
};

}  // namespace

TEST(Pillar, PillarMerge) {
  auto a = wire::value::parse(R"({"a": {"x": 1, "l": [1, 2]}, "b": 1})");
  auto b = wire::value::parse(R"({"a": {"y": 2, "l": [2, 3]}, "b": {"n": 1}})");
  EXPECT_EQ(master::pillar_merge(a, b), wire::value::parse(R"({"a": {"x": 1, "l": [2, 3], "y": 2}, "b": {"n": 1}})"));
  EXPECT_EQ(master::pillar_merge(a, b, true),
            wire::value::parse(R"({"a": {"x": 1, "l": [1, 2, 3], "y": 2}, "b": {"n": 1}})"));
}

TEST(Pillar, GlobIncludeAndMergeOrder) {
  pillar_tree t;
  master::pillar_compiler pc(t.cfg, fake());
  auto p = pc.compile("web01", grains("Ubuntu"));
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
  EXPECT_EQ(p["common"], true);
  EXPECT_EQ(p["users"]["alice"], 1000);
  EXPECT_EQ(p["admins"], wire::value::array({"alice"}));  // relative include from init.sls
  EXPECT_EQ(p["web"]["port"], 80);
  // Merge order: users < common (including SLS wins over its includes) < web (later in top).
  EXPECT_EQ(p["shared"]["level"], "web");
  EXPECT_EQ(p["shared"]["from_common"], 1);
  EXPECT_EQ(p["shared"]["from_users"], 1);
  EXPECT_EQ(p["shared"]["list"], wire::value::array({3}));  // lists replaced
  EXPECT_EQ(p["cache"], true);                              // grain list element match
  EXPECT_TRUE(p["grouped"] == true);                        // nodegroup web*
  EXPECT_FALSE(p.contains("os_family"));
  EXPECT_FALSE(p.contains("rod"));
  EXPECT_FALSE(p.contains("listed"));
}

TEST(Pillar, GrainCompoundListPcre) {
  pillar_tree t;
  master::pillar_compiler pc(t.cfg, fake());
  auto deb = pc.compile("host1", grains("Debian"));
  EXPECT_EQ(deb["os_family"], "debian");  // first root wins over p2's debian.sls
  EXPECT_FALSE(deb.contains("web"));
  auto rh = pc.compile("host1", grains("RedHat"));
  EXPECT_EQ(rh["rod"], true);
  auto db = pc.compile("db7", wire::value(nullptr));  // no grains at all
  EXPECT_EQ(db["rod"], true);
  EXPECT_FALSE(db.contains("os_family"));
  EXPECT_FALSE(db.contains("_errors")) << db.dump();
  EXPECT_EQ(pc.compile("lst2", nullptr)["listed"], true);
  EXPECT_EQ(pc.compile("pc42", nullptr)["pcre"], true);
  EXPECT_FALSE(pc.compile("xpc42", nullptr).contains("pcre"));  // re.match: anchored at start
  EXPECT_EQ(pc.compile("ng1", nullptr)["grouped"], true);
}

TEST(Pillar, NestedSlsNamesAndGlobbedSls) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - extra.deep\n    - 'svc.*'\n");
  write(d / "p/extra/deep.sls", "deep: true\n");
  write(d / "p/svc/a.sls", "svc_a: 1\n");
  write(d / "p/svc/b/init.sls", "svc_b: 2\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_EQ(p["deep"], true);
  EXPECT_EQ(p["svc_a"], 1);
  EXPECT_EQ(p["svc_b"], 2);
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
}

TEST(Pillar, IncludeWithKeyAndCycle) {
  temp_dir d;
  write(d / "p/top.sls", "base:\n  '*':\n    - a\n");
  write(d / "p/a.sls", "include:\n  - b:\n      key: nested:under\n  - c\na: 1\n");
  write(d / "p/b.sls", "b: 2\n");
  write(d / "p/c.sls", "include:\n  - a\nc: 3\n");  // cycle a -> c -> a
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_EQ(p["nested"]["under"]["b"], 2);
  EXPECT_EQ(p["a"], 1);
  EXPECT_EQ(p["c"], 3);
  EXPECT_FALSE(p.contains("b"));
  EXPECT_FALSE(p.contains("_errors")) << p.dump();
}

TEST(Pillar, ErrorsAreReported) {
  temp_dir d;
  write(d / "p/top.sls",
        "base:\n  '*':\n    - missing\n    - jinja\n    - badyaml\n    - notdict\n    - badinclude\n    - good\n"
        "  'nomatch':\n    - alsomissing\n");
  write(d / "p/jinja.sls", "x: {{ grains['id'] }}\n");
  write(d / "p/badyaml.sls", "a: [1, 2\n b: :\n");
  write(d / "p/notdict.sls", "- 1\n- 2\n");
  write(d / "p/badinclude.sls", "include: notalist\nbi: 1\n");
  write(d / "p/good.sls", "good: true\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_EQ(p["good"], true);
  EXPECT_EQ(p["bi"], 1);
  EXPECT_TRUE(has_error(p, "Specified SLS 'missing' in environment 'base' is not available on the salt master"))
      << p.dump();
  EXPECT_EQ(p["x"], "m");  // Jinja goes through the renderer now
  EXPECT_TRUE(has_error(p, "Rendering SLS 'badyaml' failed. Please see master log for details.")) << p.dump();
  EXPECT_TRUE(has_error(p, "SLS 'notdict' does not render to a dictionary")) << p.dump();
  EXPECT_TRUE(has_error(p, "Include Declaration in SLS 'badinclude' is not formed as a list")) << p.dump();
  EXPECT_EQ(p["include"], "notalist");  // Salt keeps a malformed include in the data
  EXPECT_FALSE(has_error(p, "alsomissing"));
  EXPECT_EQ(errors_of(p).size(), 4u) << p.dump();
}

TEST(Pillar, TopErrorsAndNoTop) {
  temp_dir d;
  write(d / "p/top.sls", "base: [what]\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_TRUE(has_error(p, "Error encountered while rendering pillar top file.")) << p.dump();

  write(d / "p/top.sls", "#!fake-error boom\nbase: {}\n");
  p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_EQ(errors_of(p), std::vector<std::string>{"Rendering Primary Top file failed, render error:\nboom"}) << p.dump();

  write(d / "p/top.sls", "base:\n  '*': [a\n");
  p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_TRUE(has_error(p, "Rendering Primary Top file failed, render error:")) << p.dump();

  // No top file, missing root: empty pillar, no errors.
  config::master_config none;
  none.pillar_roots = {{"base", {(d.path / "nothing").string()}}};
  EXPECT_EQ(master::pillar_compiler(none, fake()).compile("m", nullptr), wire::value::object());
  // Empty top file.
  write(d / "p/top.sls", "");
  EXPECT_EQ(master::pillar_compiler(cfg, fake()).compile("m", nullptr), wire::value::object());
}

TEST(Pillar, EnvironmentsAndPillarenv) {
  temp_dir d;
  write(d / "base/top.sls", "base:\n  '*':\n    - b\ndev:\n  '*':\n    - dv\n");
  write(d / "base/b.sls", "who: base\nb: 1\n");
  write(d / "dev/dv.sls", "who: dev\ndv: 1\n");
  write(d / "dev/top.sls", "dev:\n  'm*':\n    - dv\n    - ignore_missing: true\n    - gone\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "base").string()}}, {"dev", {(d.path / "dev").string()}}};
  master::pillar_compiler pc(cfg, fake());
  auto p = pc.compile("m1", nullptr);
  EXPECT_EQ(p["b"], 1);
  EXPECT_EQ(p["dv"], 1);
  EXPECT_EQ(p["who"], "dev");  // dev env rendered after base
  EXPECT_FALSE(p.contains("_errors")) << p.dump();  // 'gone' is ignore_missing
  auto only_dev = pc.compile("m1", nullptr, "dev");
  EXPECT_FALSE(only_dev.contains("b"));
  EXPECT_EQ(only_dev["dv"], 1);
  EXPECT_EQ(pc.compile("m1", nullptr, "nope"), wire::value::object());
}

TEST(Pillar, UnknownEnvInTop) {
  temp_dir d;
  write(d / "p/top.sls", "qa:\n  '*':\n    - x\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_TRUE(has_error(p, "No matching pillar environment for environment 'qa' found")) << p.dump();
}

TEST(Pillar, TraversalInSlsNamesRefused) {
  temp_dir d;
  write(d / "secret.sls", "secret: 1\n");
  write(d / "p/top.sls", "base:\n  '*':\n    - ../secret\n    - /etc/passwd\n");
  config::master_config cfg;
  cfg.pillar_roots = {{"base", {(d.path / "p").string()}}};
  auto p = master::pillar_compiler(cfg, fake()).compile("m", nullptr);
  EXPECT_FALSE(p.contains("secret"));
  EXPECT_EQ(errors_of(p).size(), 2u) << p.dump();
}
