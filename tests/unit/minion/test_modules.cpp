// Execution modules: Salt's argument handling, return shapes, errors; cmd.*; grains.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "minion/grains.hpp"
#include "minion/modules.hpp"
#include "minion/process.hpp"
#include "module_fixture.hpp"

namespace mn = sylvite::minion;
namespace wire = sylvite::wire;

namespace {

using sylvite::test::kw;

struct fixture : sylvite::test::module_fixture {
  mn::running_jobs running;
  fixture() {
    ctx.grains = std::make_shared<const wire::value>(wire::value{
        {"id", "m1"}, {"os", "Debian"}, {"ipv4", {"127.0.0.1", "10.0.0.1"}}, {"a", {{"b", {{"c", 3}}}}},
        {"lst", wire::value::array({wire::value{{"k", "v"}}})}});
    ctx.pillar = std::make_shared<const wire::value>(wire::value{{"color", "blue"}, {"nested", {{"key", "value"}}}});
    ctx.running = &running;
    ctx.jid = "20250101000000000001";
    ctx.local = true;
    ctx.pub = {{"fun", "x"}, {"jid", ctx.jid}, {"tgt", "*"}, {"arg", wire::value::array()}};
  }
};

}  // namespace

TEST(Modules, TestModule) {
  fixture f;
  auto o = f.call("test.ping");
  EXPECT_EQ(o.ret, true);
  EXPECT_EQ(o.retcode, 0);
  EXPECT_TRUE(o.success);
  EXPECT_FALSE(o.out);
  EXPECT_EQ(f.call("test.echo", {"x"}).ret, "x");
  EXPECT_EQ(f.call("test.echo", {42}).ret, 42);
  EXPECT_EQ(f.call("test.version").ret, "3008.5");
  EXPECT_EQ(f.call("test.sleep", {0}).ret, true);
  auto rc = f.call("test.retcode", {kw({{"code", 5}})});
  EXPECT_EQ(rc.retcode, 5);
  EXPECT_FALSE(rc.success);
}

TEST(Modules, ArgKwargsAndPub) {
  fixture f;
  auto o = f.call("test.arg", {"a", 1, "b=c", kw({{"d", true}})});
  ASSERT_TRUE(o.ret.is_object());
  EXPECT_EQ(o.ret["args"], wire::value({"a", 1}));
  EXPECT_EQ(o.ret["kwargs"]["b"], "c");
  EXPECT_EQ(o.ret["kwargs"]["d"], true);
  EXPECT_EQ(o.ret["kwargs"]["__pub_jid"], f.ctx.jid);
  EXPECT_EQ(o.ret["kwargs"]["__pub_fun"], "x");
  // yamlified string kwargs.
  EXPECT_EQ(f.call("test.arg", {"n=5"}).ret["kwargs"]["n"], 5);
}

TEST(Modules, ErrorsLikeSalt) {
  fixture f;
  auto m = f.call("foo.bar");
  EXPECT_EQ(m.ret, "'foo.bar' is not available.");
  EXPECT_EQ(m.retcode, 1);
  EXPECT_FALSE(m.success);
  EXPECT_EQ(m.out, "nested");
  auto t = f.call("test.echo");
  EXPECT_EQ(t.retcode, 1);
  EXPECT_EQ(t.out, "nested");
  EXPECT_EQ(t.ret.get<std::string>().rfind(
                "Passed invalid arguments to test.echo: echo() missing 1 required positional argument: 'text'\n", 0),
            0u)
      << t.ret;
  auto many = f.call("test.ping", {1});
  EXPECT_NE(many.ret.get<std::string>().find("ping() takes 0 positional arguments but 1 was given"), std::string::npos);
  auto range = f.call("grains.get", {"a", "b", "c", "d", "e"});
  EXPECT_NE(range.ret.get<std::string>().find("get() takes from 1 to 4 positional arguments but 5 were given"),
            std::string::npos);
  auto inv = f.call("test.ping", {kw({{"x", 1}})});
  EXPECT_EQ(inv.ret, "ERROR executing 'test.ping': The following keyword arguments are not valid: x=1");
  auto dup = f.call("test.echo", {"a", kw({{"text", "b"}})});
  EXPECT_NE(dup.ret.get<std::string>().find("echo() got multiple values for argument 'text'"), std::string::npos);
}

TEST(Modules, GrainsAndPillar) {
  fixture f;
  EXPECT_EQ(f.call("grains.get", {"os"}).ret, "Debian");
  EXPECT_EQ(f.call("grains.get", {"a:b:c"}).ret, 3);
  EXPECT_EQ(f.call("grains.get", {"nope"}).ret, "");
  EXPECT_EQ(f.call("grains.get", {"nope", "dflt"}).ret, "dflt");
  EXPECT_EQ(f.call("grains.get", {"ipv4:1"}).ret, "10.0.0.1");
  EXPECT_EQ(f.call("grains.get", {"lst:k"}).ret, "v");
  EXPECT_EQ(f.call("grains.get", {"a.b.c", kw({{"delimiter", "."}})}).ret, 3);
  auto items = f.call("grains.items");
  EXPECT_EQ(items.ret["os"], "Debian");
  EXPECT_EQ(items.out, "nested");
  auto item = f.call("grains.item", {"os", "a:b"});
  EXPECT_EQ(item.ret, wire::value({{"os", "Debian"}, {"a:b", {{"c", 3}}}}));
  EXPECT_EQ(item.out, "nested");
  // Salt 3008.5 masks pillar values unless unmask=True (pillar.raw: unmasked by default).
  EXPECT_EQ(f.call("pillar.items").ret, wire::value({{"color", "**********"}, {"nested", {{"key", "**********"}}}}));
  EXPECT_EQ(f.call("pillar.items", {kw({{"unmask", true}})}).ret, *f.ctx.pillar);
  EXPECT_EQ(f.call("pillar.raw").ret, *f.ctx.pillar);
  EXPECT_EQ(f.call("pillar.get", {"nested:key"}).ret, "**********");
  EXPECT_EQ(f.call("pillar.get", {"nested:key", kw({{"unmask", true}})}).ret, "value");
  EXPECT_EQ(f.call("pillar.get", {"missing", "d", kw({{"unmask", true}})}).ret, "d");
  EXPECT_EQ(f.call("pillar.get", {"missing"}).ret, "");
  EXPECT_EQ(f.call("pillar.item", {"color", kw({{"unmask", true}})}).ret, wire::value({{"color", "blue"}}));
  auto merged = f.call("pillar.get", {"nested", wire::value{{"other", 1}}, kw({{"merge", true}, {"unmask", true}})});
  EXPECT_EQ(merged.ret, wire::value({{"other", 1}, {"key", "value"}}));
  EXPECT_EQ(f.call("pillar.get", {"nested", wire::value{{"n", 0}}, kw({{"merge", true}})}).ret,
            wire::value({{"n", 0}, {"key", "**********"}}));
}

TEST(Modules, SaltutilAndSys) {
  fixture f;
  f.running.add("111", {{"pid", 1}, {"jid", "111"}, {"fun", "test.sleep"}});
  f.running.add(f.ctx.jid, {{"pid", 1}, {"jid", f.ctx.jid}, {"fun", "saltutil.running"}});
  auto r = f.call("saltutil.running");
  ASSERT_EQ(r.ret.size(), 1u);  // own job excluded
  EXPECT_EQ(r.ret[0]["jid"], "111");
  EXPECT_EQ(f.call("saltutil.find_job", {"111"}).ret["fun"], "test.sleep");
  EXPECT_EQ(f.call("saltutil.find_job", {"999"}).ret, wire::value::object());
  auto lf = f.call("sys.list_functions", {"test"});
  ASSERT_TRUE(lf.ret.is_array());
  EXPECT_NE(std::find(lf.ret.begin(), lf.ret.end(), wire::value("test.ping")), lf.ret.end());
  for (const auto& n : lf.ret) EXPECT_EQ(n.get<std::string>().rfind("test.", 0), 0u);
}

TEST(Modules, CmdRun) {
  fixture f;
  auto o = f.call("cmd.run", {"echo hi; echo err >&2"});
  EXPECT_EQ(o.ret, "hi\nerr");  // stderr merged (redirect_stderr=True)
  EXPECT_EQ(o.retcode, 0);
  auto fail = f.call("cmd.run", {"echo out; exit 3"});
  EXPECT_EQ(fail.ret, "out");
  EXPECT_EQ(fail.retcode, 3);
  EXPECT_FALSE(fail.success);
  auto ign = f.call("cmd.run", {"exit 3", kw({{"ignore_retcode", true}})});
  EXPECT_EQ(ign.retcode, 0);
  auto all = f.call("cmd.run_all", {"echo a; echo b >&2; exit 2"});
  std::vector<std::string> keys;
  for (const auto& [k, v] : all.ret.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"pid", "retcode", "stdout", "stderr"}));
  EXPECT_EQ(all.ret["stdout"], "a");
  EXPECT_EQ(all.ret["stderr"], "b");
  EXPECT_EQ(all.ret["retcode"], 2);
  EXPECT_EQ(all.retcode, 2);
  EXPECT_EQ(f.call("cmd.retcode", {"exit 4"}).ret, 4);
  EXPECT_EQ(f.call("cmd.run", {"pwd", kw({{"cwd", "/tmp"}})}).ret, "/tmp");
  EXPECT_EQ(f.call("cmd.run", {"echo $FOO", kw({{"env", {{"FOO", "bar"}}}})}).ret, "bar");
  EXPECT_EQ(f.call("cmd.run", {"cat", kw({{"stdin", "from stdin"}})}).ret, "from stdin");
  auto bad = f.call("cmd.run", {"true", kw({{"cwd", "relative"}})});
  EXPECT_EQ(bad.ret, "ERROR: Specified cwd 'relative' either not absolute or does not exist");
  EXPECT_EQ(bad.retcode, 1);
  EXPECT_EQ(f.call("cmd.run", {"echo a b", kw({{"python_shell", false}})}).ret, "a b");
}

TEST(Modules, CmdRunTimeoutKillsGroup) {
  fixture f;
  const auto start = std::chrono::steady_clock::now();
  // The background sleep keeps stdout open: only killing the whole group ends the read.
  auto o = f.call("cmd.run", {"sleep 30 & sleep 30", kw({{"timeout", 1}})});
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 10);
  EXPECT_EQ(o.ret, "sleep 30 & sleep 30 : Timed out after 1 seconds");
  EXPECT_EQ(o.retcode, 1);
}

TEST(Modules, ArgParsingHelpers) {
  EXPECT_EQ(mn::yamlify_arg("5"), 5);
  EXPECT_EQ(mn::yamlify_arg("true"), true);
  EXPECT_EQ(mn::yamlify_arg("None"), wire::value());
  EXPECT_EQ(mn::yamlify_arg("hello"), "hello");
  EXPECT_EQ(mn::yamlify_arg("1_000"), "1_000");
  EXPECT_EQ(mn::yamlify_arg("[1, 2]"), wire::value({1, 2}));
  EXPECT_EQ(mn::yamlify_arg("a: b"), "a: b");  // dict-looking but not "{...}": kept
  EXPECT_EQ(mn::yamlify_arg("{a: b}"), wire::value({{"a", "b"}}));
  EXPECT_EQ(mn::yamlify_arg("#x"), "#x");
  EXPECT_EQ(mn::yamlify_arg("!"), "!");
  auto kv = mn::parse_kwarg("key=val=ue");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "key");
  EXPECT_EQ(kv->second, "val=ue");
  EXPECT_FALSE(mn::parse_kwarg("a==b"));
  EXPECT_FALSE(mn::parse_kwarg("1a=b"));
  EXPECT_FALSE(mn::parse_kwarg("echo hi"));
  EXPECT_FALSE(mn::parse_kwarg("a=b\nc"));
  auto sp = mn::shlex_split("a 'b c' \"d e\" f\\ g");
  ASSERT_TRUE(sp);
  EXPECT_EQ(*sp, (std::vector<std::string>{"a", "b c", "d e", "f g"}));
  EXPECT_FALSE(mn::shlex_split("'open"));
}

TEST(Grains, Sanity) {
  sylvite::config::minion_config cfg;
  cfg.id = "gm";
  cfg.grains = {{"roles", {"web"}}, {"os", "Custom"}};
  auto g = mn::collect_grains(cfg);
  EXPECT_EQ(g["id"], "gm");
  EXPECT_EQ(g["kernel"], "Linux");
  EXPECT_EQ(g["os"], "Custom");  // config grains override core grains
  EXPECT_EQ(g["roles"], wire::value({"web"}));
  EXPECT_GE(g["num_cpus"].get<long long>(), 1);
  EXPECT_GT(g["mem_total"].get<long long>(), 0);
  ASSERT_TRUE(g["ipv4"].is_array());
  EXPECT_NE(std::find(g["ipv4"].begin(), g["ipv4"].end(), wire::value("127.0.0.1")), g["ipv4"].end());
  EXPECT_EQ(g["saltversion"], "3008.5");
  EXPECT_EQ(g["saltversioninfo"], wire::value({3008, 5}));
  EXPECT_TRUE(g["ip4_interfaces"].contains("lo"));
  for (const char* k : {"os_family", "kernelrelease", "host", "fqdn", "osrelease", "cpuarch"}) EXPECT_TRUE(g.contains(k)) << k;
  auto rel = mn::parse_os_release("NAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n");
  EXPECT_EQ(rel.id, "debian");
  EXPECT_EQ(rel.version_id, "12");
  EXPECT_EQ(mn::os_and_family(rel), (std::pair<std::string, std::string>{"Debian", "Debian"}));
  rel.id = "ubuntu";
  EXPECT_EQ(mn::os_and_family(rel).second, "Debian");
  rel.id = "rocky";
  EXPECT_EQ(mn::os_and_family(rel), (std::pair<std::string, std::string>{"Rocky", "RedHat"}));
  EXPECT_EQ(mn::mem_total_mib("MemTotal:       24684084 kB\nMemFree: 1 kB\n"), 24105);
}
