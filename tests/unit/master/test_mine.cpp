// sylvite::master mine (master/mine.hpp): Salt 3008.5 masterapi _mine/_mine_get/
// _mine_delete/_mine_flush rules, the file layout (cachedir/mine/<id>.p, msgpack with
// use_bin_type=True) and the ACLs (mine_get option, allow_tgt).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "core/match/match.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/mine.hpp"

namespace fs = std::filesystem;
using sylvite::master::mine_store;
using sylvite::wire::value;

namespace {

class Mine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sylvite-mine-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    grains_["web1"] = {{"os", "Debian"}, {"role", "web"}};
    grains_["web2"] = {{"os", "Debian"}, {"role", "web"}};
    grains_["db1"] = {{"os", "Rocky"}, {"role", "db"}};
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<mine_store> make(value acl = nullptr, bool enabled = true) {
    mine_store::options o;
    o.cachedir = dir_;
    o.enabled = enabled;
    o.mine_get_acl = std::move(acl);
    return std::make_unique<mine_store>(o, [this](const value& tgt, const std::string& tt, bool greedy) {
      std::vector<std::string> ids = {"db1", "web1", "web2"};
      auto facts = [this](const std::string& id) {
        sylvite::match::minion_facts f;
        f.id = id;
        if (auto it = grains_.find(id); it != grains_.end()) f.grains = &it->second;
        return f;
      };
      targeted_.push_back(tt);
      return sylvite::match::check_minions(tgt, tt, ids, facts, greedy).minions;
    });
  }
  static value send(const std::string& id, value data, bool clear = false) {
    return value{{"cmd", "_mine"}, {"id", id}, {"data", std::move(data)}, {"clear", clear}};
  }
  static value get(const std::string& id, value tgt, value fun, std::string tt = "glob") {
    return value{{"cmd", "_mine_get"}, {"id", id}, {"tgt", std::move(tgt)}, {"fun", std::move(fun)}, {"tgt_type", tt}};
  }

  fs::path dir_;
  std::map<std::string, value> grains_;
  std::vector<std::string> targeted_;
};

TEST_F(Mine, StoresSaltsLocalfsLayout) {
  auto m = make();
  EXPECT_EQ(m->handle_mine(send("web1", {{"network.ip_addrs", value::array({"10.0.0.1"})}})), value(true));
  const fs::path f = dir_ / "mine" / "web1.p";
  ASSERT_TRUE(fs::is_regular_file(f));
  EXPECT_EQ(fs::status(f).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // salt.payload.dump({"network.ip_addrs": ["10.0.0.1"]}) (msgpack, use_bin_type=True):
  // 0x81 map(1), 0xb0 str(16) "network.ip_addrs", 0x91 array(1), 0xa8 str(8) "10.0.0.1".
  auto bytes = sylvite::util::read_file(f);
  ASSERT_TRUE(bytes);
  std::string want = "\x81\xb0network.ip_addrs\x91\xa8" "10.0.0.1";
  EXPECT_EQ(*bytes, want);
}

TEST_F(Mine, UpdateMergesAndClearReplaces) {
  auto m = make();
  m->handle_mine(send("web1", {{"a", 1}, {"b", 2}}));
  m->handle_mine(send("web1", {{"b", 3}, {"c", 4}}));
  EXPECT_EQ(m->fetch("web1"), (value{{"a", 1}, {"b", 3}, {"c", 4}}));
  m->handle_mine(send("web1", {{"z", 0}}, true));
  EXPECT_EQ(m->fetch("web1"), (value{{"z", 0}}));
}

TEST_F(Mine, GetShapesAsSalt) {
  auto m = make();
  m->handle_mine(send("web1", {{"ip", "1"}, {"os", "d"}}));
  m->handle_mine(send("web2", {{"ip", "2"}}));
  m->handle_mine(send("db1", {{"ip", "3"}}));
  // one function: {minion: data}
  EXPECT_EQ(m->handle_get(get("db1", "web*", "ip")), (value{{"web1", "1"}, {"web2", "2"}}));
  // "a,b" or a list: {function: {minion: data}}
  EXPECT_EQ(m->handle_get(get("db1", "web*", "ip,os")),
            (value{{"ip", {{"web1", "1"}, {"web2", "2"}}}, {"os", {{"web1", "d"}}}}));
  EXPECT_EQ(m->handle_get(get("db1", "web1", value::array({"ip"}))), (value{{"ip", {{"web1", "1"}}}}));
  // "ip,ip" is one function
  EXPECT_EQ(m->handle_get(get("db1", "web1", "ip,ip")), (value{{"web1", "1"}}));
  // list, grain, compound targets
  EXPECT_EQ(m->handle_get(get("web1", "db1,web2", "ip", "list")), (value{{"db1", "3"}, {"web2", "2"}}));
  EXPECT_EQ(m->handle_get(get("web1", "os:Rocky", "ip", "grain")), (value{{"db1", "3"}}));
  EXPECT_EQ(m->handle_get(get("web1", "G@role:web and not web2", "ip", "compound")), (value{{"web1", "1"}}));
  // pillar and compound lookups are exact (Salt maps them to pillar_exact/compound_pillar_exact)
  m->handle_get(get("web1", "role:web", "ip", "pillar"));
  EXPECT_EQ(targeted_.back(), "pillar_exact");
  // unknown function, nobody targeted
  EXPECT_EQ(m->handle_get(get("web1", "*", "nope")), value::object());
  EXPECT_EQ(m->handle_get(get("web1", "zzz*", "ip")), value::object());
  // bad input: Salt's {}
  EXPECT_EQ(m->handle_get(value{{"id", "web1"}, {"fun", "ip"}}), value::object());
  EXPECT_EQ(m->handle_get(get("web1", "*", 5)), value::object());
  EXPECT_EQ(m->handle_get(get("../x", "*", "ip")), value::object());
  // expr_form (old minions) when tgt_type is absent
  EXPECT_EQ(m->handle_get(value{{"id", "web1"}, {"tgt", "db1"}, {"fun", "ip"}, {"expr_form", "list"}}),
            (value{{"db1", "3"}}));
}

TEST_F(Mine, MinionSideAcl) {
  auto m = make();
  value entry{{"__saltmine_acl__", 1}, {"__data__", "secret"}, {"allow_tgt", "web*"}, {"allow_tgt_type", "glob"}};
  value nobody{{"__saltmine_acl__", 1}, {"__data__", "x"}, {"allow_tgt", "nomatch*"}};
  value open{{"__saltmine_acl__", 1}, {"__data__", "open"}};
  m->handle_mine(send("db1", {{"pw", entry}, {"hidden", nobody}, {"o", open}}));
  EXPECT_EQ(m->handle_get(get("web1", "db1", "pw")), (value{{"db1", "secret"}}));
  EXPECT_EQ(m->handle_get(get("db1", "db1", "pw")), value::object());  // db1 is not in web*
  EXPECT_EQ(m->handle_get(get("web1", "db1", "hidden")), value::object());
  EXPECT_EQ(m->handle_get(get("db1", "db1", "o")), (value{{"db1", "open"}}));
  // the pillar's and the runner's lookups go through the same rules
  EXPECT_EQ(m->get("web2", "db1", "pw"), (value{{"db1", "secret"}}));
  EXPECT_EQ(m->get("master_master", "db1", "pw"), value::object());
}

TEST_F(Mine, MasterMineGetAcl) {
  // mine_get: {requester regex: [function regexes]}
  auto m = make(value{{"web.*", value::array({"ip", "net\\..*"})}});
  m->handle_mine(send("db1", {{"ip", 1}, {"net.x", 2}, {"disk", 3}}));
  EXPECT_EQ(m->handle_get(get("web1", "db1", "ip")), (value{{"db1", 1}}));
  EXPECT_EQ(m->handle_get(get("web1", "db1", "ip,disk,net.x")),
            (value{{"ip", {{"db1", 1}}}, {"net.x", {{"db1", 2}}}}));
  EXPECT_EQ(m->handle_get(get("web1", "db1", "disk")), value::object());
  EXPECT_EQ(m->handle_get(get("db1", "db1", "ip")), value::object());
  // an option that is not a map refuses everything
  auto bad = make(value::array({"x"}));
  EXPECT_EQ(bad->handle_get(get("web1", "db1", "ip")), value::object());
}

TEST_F(Mine, DeleteAndFlush) {
  auto m = make();
  m->handle_mine(send("web1", {{"a", 1}, {"b", 2}}));
  EXPECT_EQ(m->handle_delete(value{{"id", "web1"}, {"fun", "a"}}), value(true));
  EXPECT_EQ(m->fetch("web1"), (value{{"b", 2}}));
  EXPECT_EQ(m->handle_delete(value{{"id", "web1"}, {"fun", "zz"}}), value(true));
  EXPECT_EQ(m->handle_delete(value{{"id", "web1"}}), value::object());
  EXPECT_EQ(m->handle_flush(value{{"id", "web1"}}), value(true));
  EXPECT_FALSE(fs::exists(dir_ / "mine" / "web1.p"));
  EXPECT_EQ(m->handle_flush(value{{"id", "web1"}}), value(false));  // Salt's cache.flush of nothing
  EXPECT_EQ(m->handle_flush(value::object()), value::object());
}

TEST_F(Mine, BadInputRefused) {
  auto m = make();
  EXPECT_EQ(m->handle_mine(value{{"id", "web1"}}), value::object());
  EXPECT_EQ(m->handle_mine(value{{"data", value::object()}}), value::object());
  EXPECT_EQ(m->handle_mine(send("web1", value::array({1}))), value(false));
  EXPECT_EQ(m->handle_mine(send("../../etc", {{"a", 1}})), value(false));
  EXPECT_EQ(m->handle_mine(value{{"id", 5}, {"data", value::object()}}), value(false));
  EXPECT_EQ(m->handle_mine(value("x")), value::object());
  EXPECT_FALSE(fs::exists(dir_ / "etc.p"));
  // a damaged file reads as an empty mine and is replaced by the next update
  sylvite::util::write_file_atomic(dir_ / "mine" / "web2.p", "\xc1garbage");
  EXPECT_EQ(m->fetch("web2"), value::object());
  EXPECT_EQ(m->handle_get(get("web1", "web2", "a")), value::object());
  EXPECT_EQ(m->handle_mine(send("web2", {{"a", 1}})), value(true));
  EXPECT_EQ(m->fetch("web2"), (value{{"a", 1}}));
}

TEST_F(Mine, DisabledStoresNothing) {
  auto m = make(nullptr, false);  // minion_data_cache and enforce_mine_cache off
  EXPECT_EQ(m->handle_mine(send("web1", {{"a", 1}})), value(true));
  EXPECT_FALSE(fs::exists(dir_ / "mine" / "web1.p"));
  EXPECT_EQ(m->handle_flush(value{{"id", "web1"}}), value(true));
}

// Two stores on one cachedir (two masters of a cluster): concurrent updates of one
// minion's mine from both are all kept (the fcntl lock), and each sees the other's data.
TEST_F(Mine, TwoMastersShareTheCachedir) {
  auto a = make();
  auto b = make();
  std::thread t1([&] {
    for (int i = 0; i < 50; ++i) a->handle_mine(send("web1", {{"a" + std::to_string(i), i}}));
  });
  std::thread t2([&] {
    for (int i = 0; i < 50; ++i) b->handle_mine(send("web1", {{"b" + std::to_string(i), i}}));
  });
  t1.join();
  t2.join();
  EXPECT_EQ(a->fetch("web1").size(), 100u);
  EXPECT_EQ(b->handle_get(get("db1", "web1", "a49")), (value{{"web1", 49}}));
}

}  // namespace
