// minion/mod_mine.cpp: mine_functions forms (Salt's parse_function_definition), the loads
// sent to the master, ACL wrapping, config.merge order, and the local (datastore) mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "core/config/config.hpp"
#include "minion/modules.hpp"
#include "module_fixture.hpp"

namespace mn = sylvite::minion;
namespace wire = sylvite::wire;
namespace fs = std::filesystem;

namespace {

using sylvite::test::kw;

struct fixture : sylvite::test::module_fixture {
  sylvite::test::recording_master master;
  fs::path dir;
  explicit fixture(wire::value mine_functions = nullptr, wire::value pillar = wire::value::object()) {
    dir = fs::temp_directory_path() / ("sylvite-modmine-" + std::to_string(::getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    cfg.cachedir = dir;
    cfg.raw = wire::value::object();
    if (!mine_functions.is_null()) cfg.raw["mine_functions"] = mine_functions;
    ctx.grains = std::make_shared<const wire::value>(wire::value{{"id", "m1"}, {"os", "Debian"}});
    ctx.pillar = std::make_shared<const wire::value>(std::move(pillar));
    ctx.master = &master;
    ctx.pub = {{"fun", "mine.update"}, {"jid", "1"}};
  }
  ~fixture() { fs::remove_all(dir); }
};

}  // namespace

TEST(ModMine, UpdateRunsEveryForm) {
  fixture f(wire::value{
      {"test.ping", wire::value::array()},
      {"echo_alias", wire::value::array({wire::value{{"mine_function", "test.echo"}}, "hello"})},
      {"kw_alias", wire::value{{"mine_function", "test.echo"}, {"text", "kw"}}},
      {"secret", wire::value::array({wire::value{{"mine_function", "test.echo"}}, "s",
                                     wire::value{{"allow_tgt", "web*"}}, wire::value{{"allow_tgt_type", "glob"}}})},
      {"no.such", wire::value::array()},
      {"broken", wire::value::array({wire::value{{"mine_function", "test.echo"}}})},  // missing arg: left out
  });
  auto o = f.call("mine.update");
  EXPECT_EQ(o.ret, true);
  ASSERT_EQ(f.master.sent.size(), 1u);
  const auto& load = f.master.sent[0];
  EXPECT_EQ(load["cmd"], "_mine");
  EXPECT_EQ(load["id"], "m1");
  EXPECT_EQ(load["clear"], false);
  EXPECT_EQ(load["data"], (wire::value{{"test.ping", true},
                                       {"echo_alias", "hello"},
                                       {"kw_alias", "kw"},
                                       {"secret",  // Salt's key order (wrap_acl_structure)
                                        {{"__data__", "s"},
                                         {"__saltmine_acl__", 1},
                                         {"allow_tgt", "web*"},
                                         {"allow_tgt_type", "glob"}}}}));
  // clear=True and explicit functions (a list)
  f.call("mine.update", {kw({{"clear", true}, {"mine_functions", wire::value::array({"test.ping"})}})});
  ASSERT_EQ(f.master.sent.size(), 2u);
  EXPECT_EQ(f.master.sent[1]["clear"], true);
  EXPECT_EQ(f.master.sent[1]["data"], (wire::value{{"test.ping", true}}));
}

TEST(ModMine, NothingConfiguredSendsNothing) {
  fixture f;
  auto o = f.call("mine.update");
  EXPECT_TRUE(o.ret.is_null());
  EXPECT_TRUE(f.master.sent.empty());
  EXPECT_TRUE(f.call("mine.valid").ret.is_null());
}

TEST(ModMine, ConfigMergeMinionConfigWinsOverPillar) {
  fixture f(wire::value{{"test.ping", wire::value::array()}},
            wire::value{{"mine_functions", {{"test.ping", wire::value::array({"x"})}, {"test.true", wire::value::array()}}},
                        {"master", {{"mine_functions", {{"test.false", wire::value::array()}}}}}});
  EXPECT_EQ(f.call("mine.valid").ret, (wire::value{{"test.ping", wire::value::array()},
                                                   {"test.true", wire::value::array()},
                                                   {"test.false", wire::value::array()}}));
}

TEST(ModMine, ValidShowsAliasesAsSalt) {
  fixture f(wire::value{{"ip", wire::value::array({wire::value{{"mine_function", "test.echo"}}, "a",
                                                   wire::value{{"k", 1}}})},
                        {"nope.x", wire::value::array()}});
  EXPECT_EQ(f.call("mine.valid").ret,
            (wire::value{{"ip", {{"test.echo", wire::value::array({"a", wire::value{{"k", 1}}})}}}}));
}

TEST(ModMine, SendGetDeleteFlushLoads) {
  fixture f;
  EXPECT_EQ(f.call("mine.send", {"test.echo", "hi"}).ret, true);
  EXPECT_EQ(f.master.sent.back()["data"], (wire::value{{"test.echo", "hi"}}));
  EXPECT_EQ(f.call("mine.send", {"alias", kw({{"mine_function", "test.echo"}, {"text", "t"}, {"allow_tgt", "m*"}})}).ret,
            true);
  EXPECT_EQ(f.master.sent.back()["data"]["alias"],
            (wire::value{{"__data__", "t"}, {"__saltmine_acl__", 1}, {"allow_tgt", "m*"}}));
  EXPECT_EQ(f.call("mine.send", {"no.such"}).ret, false);

  f.master.answer = wire::value{{"m1", 1}, {"m2", 2}};
  EXPECT_EQ(f.call("mine.get", {"*", "x"}).ret, f.master.answer);
  EXPECT_EQ(f.master.sent.back(),
            (wire::value{{"cmd", "_mine_get"}, {"id", "m1"}, {"tgt", "*"}, {"fun", "x"}, {"tgt_type", "glob"}}));
  EXPECT_EQ(f.call("mine.get", {"*", "x", kw({{"exclude_minion", true}})}).ret, (wire::value{{"m2", 2}}));

  f.master.answer = true;
  EXPECT_EQ(f.call("mine.delete", {"x"}).ret, true);
  EXPECT_EQ(f.master.sent.back(), (wire::value{{"cmd", "_mine_delete"}, {"fun", "x"}, {"id", "m1"}}));
  EXPECT_EQ(f.call("mine.flush").ret, true);
  EXPECT_EQ(f.master.sent.back(), (wire::value{{"cmd", "_mine_flush"}, {"id", "m1"}}));

  f.master.fail = true;  // no master took it
  EXPECT_EQ(f.call("mine.flush").ret, false);
}

TEST(ModMine, LocalModeUsesTheDatastore) {
  fixture f(wire::value{{"test.ping", wire::value::array()}});
  f.ctx.local = true;
  EXPECT_EQ(f.call("mine.update").ret, true);
  EXPECT_TRUE(fs::is_regular_file(f.dir / "datastore"));
  EXPECT_EQ(f.call("mine.send", {"test.echo", "x"}).ret, true);
  EXPECT_EQ(f.call("mine.get", {"*", "test.ping"}).ret, (wire::value{{"m1", true}}));
  EXPECT_EQ(f.call("mine.get", {"*", "test.ping,test.echo"}).ret,
            (wire::value{{"test.echo", {{"m1", "x"}}}, {"test.ping", {{"m1", true}}}}));
  EXPECT_EQ(f.call("mine.get", {"other", "test.ping"}).ret, wire::value::object());
  EXPECT_EQ(f.call("mine.get", {"os:Debian", "test.ping", kw({{"tgt_type", "grain"}})}).ret,
            (wire::value{{"m1", true}}));
  EXPECT_EQ(f.call("mine.delete", {"test.ping"}).ret, true);
  EXPECT_EQ(f.call("mine.get", {"*", "test.ping"}).ret, wire::value::object());
  EXPECT_EQ(f.call("mine.flush").ret, true);
  EXPECT_EQ(f.call("mine.get", {"*", "test.echo"}).ret, wire::value::object());
  EXPECT_TRUE(f.master.sent.empty());
}
