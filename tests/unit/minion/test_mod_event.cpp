// event.send / event.fire_master / event.fire (minion/mod_event.cpp): the _minion_event
// load each sends (salt-call's and the minion daemon's key order), with_grains/
// with_pillar subsets, kwargs, local mode.
#include <gtest/gtest.h>

#include "minion/modules.hpp"
#include "module_fixture.hpp"

namespace mn = sylvite::minion;
namespace wire = sylvite::wire;
using wire::value;

namespace {

using sylvite::test::kw;

struct fixture : sylvite::test::module_fixture {
  mn::running_jobs running;
  sylvite::test::recording_master link;
  fixture(bool salt_call) {
    link.answer = nullptr;
    ctx.grains = std::make_shared<const value>(value{{"id", "m1"}, {"os", "Debian"}});
    ctx.pillar = std::make_shared<const value>(value{{"color", "blue"}, {"secret", "s"}});
    ctx.running = &running;
    ctx.jid = "20250101000000000001";
    ctx.master = &link;
    if (salt_call) ctx.pub = {{"fun", "event.send"}, {"pid", 1}, {"jid", ctx.jid}, {"tgt", "salt-call"}};
    else ctx.pub = {{"fun", "event.send"}, {"jid", ctx.jid}, {"tgt", "*"}, {"arg", value::array()}};
  }
};

std::vector<std::string> keys(const value& m) {
  std::vector<std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) out.push_back(it.key());
  return out;
}

}  // namespace

TEST(ModEvent, salt_call_send_builds_salt_calls_load) {
  fixture f(true);
  auto o = f.call("event.send", value::array({"my/tag", value{{"a", 1}}, kw({{"with_grains", value::array({"os"})},
                                                                              {"with_pillar", value::array({"color"})}})}));
  EXPECT_EQ(o.ret, true) << o.ret.dump();
  ASSERT_EQ(f.link.sent.size(), 1u);
  const value& l = f.link.sent[0];
  EXPECT_EQ(keys(l), (std::vector<std::string>{"id", "tag", "data", "cmd"}));
  EXPECT_EQ(l["tag"], "my/tag");
  EXPECT_EQ(l["cmd"], "_minion_event");
  EXPECT_EQ(l["data"]["a"], 1);
  EXPECT_EQ(l["data"]["grains"], (value{{"os", "Debian"}}));
  EXPECT_EQ(l["data"]["pillar"], (value{{"color", "blue"}}));
}

TEST(ModEvent, daemon_send_builds_fire_master_prepare_load) {
  fixture f(false);
  auto o = f.call("event.send", value::array({"t", kw({{"foo", "bar"}})}));
  EXPECT_EQ(o.ret, true);
  ASSERT_EQ(f.link.sent.size(), 1u);
  const value& l = f.link.sent[0];
  EXPECT_EQ(keys(l), (std::vector<std::string>{"id", "cmd", "pretag", "data", "tag"}));
  EXPECT_EQ(l["data"]["foo"], "bar");
}

TEST(ModEvent, fire_master_sends_data_as_given) {
  fixture f(true);
  auto o = f.call("event.fire_master", value::array({value{{"x", 1}}, "t/x"}));
  EXPECT_EQ(o.ret, true);
  ASSERT_EQ(f.link.sent.size(), 1u);
  EXPECT_EQ(f.link.sent[0]["data"], (value{{"x", 1}}));
  EXPECT_EQ(f.link.sent[0]["tag"], "t/x");
}

TEST(ModEvent, local_mode_sends_nothing) {
  fixture f(true);
  f.ctx.local = true;
  f.ctx.master = nullptr;
  EXPECT_EQ(f.call("event.fire_master", value::array({value::object(), "t"})).ret, false);
  EXPECT_EQ(f.call("event.send", value::array({"t"})).ret, false);
  EXPECT_EQ(f.call("event.fire", value::array({value::object(), "t"})).ret, false);
  EXPECT_TRUE(f.link.sent.empty());
}
