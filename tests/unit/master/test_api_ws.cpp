// master/api/api_ws.hpp: the /ws event frame and format_events (SaltInfo) state.
#include <gtest/gtest.h>

#include "master/api/api_ws.hpp"

namespace sylvite::master::api {
namespace {

using wire::value;

TEST(ApiWs, EventFrame) {
  EXPECT_EQ(ws_event_frame("a/b", value{{"x", 1}}), "data: {\"data\":{\"x\":1},\"tag\":\"a/b\"}\n\n");
}

TEST(ApiWs, FormatEventsJobs) {
  salt_info s;
  auto o = s.process("salt/job/1/new", value{{"jid", "1"}, {"_stamp", "t"}, {"minions", {"m1", "m2"}},
                                             {"fun", "test.ping"}, {"tgt", "*"}, {"tgt_type", "glob"}});
  ASSERT_EQ(o.frames.size(), 1u);
  auto j = value::parse(o.frames[0]);
  EXPECT_EQ(j["jobs"]["1"]["state"], "running");
  EXPECT_EQ(j["jobs"]["1"]["minions"]["m1"], (value{{"success", false}}));
  value ret{{"return", true}, {"retcode", 0}, {"success", true}, {"fun", "test.ping"}};
  o = s.process("salt/job/1/ret/m1", ret);
  EXPECT_EQ(value::parse(o.frames[0])["jobs"]["1"]["state"], "running");
  o = s.process("salt/job/1/ret/m2", ret);
  j = value::parse(o.frames[0]);
  EXPECT_EQ(j["jobs"]["1"]["state"], "complete");
  EXPECT_EQ(j["jobs"]["1"]["minions"]["m2"]["return"], true);
  // what SaltInfo raises on is skipped
  EXPECT_TRUE(s.process("salt/job/2/new", value{{"jid", "2"}}).frames.empty());
  EXPECT_TRUE(s.process("salt/job", value::object()).frames.empty());
  EXPECT_TRUE(s.process("other", value::object()).frames.empty());
}

TEST(ApiWs, FormatEventsMinions) {
  salt_info s;
  auto o = s.process("salt/key", value{{"act", "accept"}, {"id", "m1"}, {"result", true}});
  EXPECT_EQ(value::parse(o.frames[0]), value::parse(R"({"minions": [{"id": "m1"}]})"));
  o = s.process("salt/job/5/ret/m1", value{{"return", {{"os", "Debian"}}}, {"retcode", 0}, {"success", true},
                                           {"fun", "grains.items"}});
  ASSERT_EQ(o.frames.size(), 2u);
  EXPECT_EQ(value::parse(o.frames[1]), value::parse(R"({"minions": [{"grains": {"os": "Debian"}, "id": "m1"}]})"));
  o = s.process("salt/presence/present", value{{"present", {"m2"}}});
  EXPECT_EQ(o.grains_tgt, "m2");
  EXPECT_EQ(value::parse(o.frames[0]), value::parse(R"({"minions": []})"));
  o = s.process("salt/key", value{{"act", "delete"}, {"id", "m9"}});
  EXPECT_EQ(o.frames.size(), 1u);
}

}  // namespace
}  // namespace sylvite::master::api
