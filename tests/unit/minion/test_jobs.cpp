// Target decisions, jid de-dup, return loads, job pool.
#include <gtest/gtest.h>

#include <atomic>

#include "minion/jobs.hpp"

namespace mn = sylvite::minion;
namespace wire = sylvite::wire;

TEST(Jobs, JidQueueDedupAndHwm) {
  mn::jid_queue q(3);
  EXPECT_TRUE(q.add("1"));
  EXPECT_FALSE(q.add("1"));
  EXPECT_TRUE(q.add("2"));
  EXPECT_TRUE(q.add("3"));
  EXPECT_TRUE(q.add("4"));  // "1" falls out
  EXPECT_EQ(q.size(), 3u);
  EXPECT_TRUE(q.add("1"));
  EXPECT_FALSE(q.add("4"));
}

TEST(Jobs, TargetDecisions) {
  wire::value grains = {{"os", "Debian"}, {"roles", {"web", "db"}}, {"a", {{"b", "c"}}}};
  wire::value pillar = {{"color", "blue"}};
  mn::target_facts me{"web1", &grains, &pillar};
  auto job = [](wire::value tgt, const char* type) {
    wire::value l = {{"fun", "test.ping"}, {"arg", wire::value::array()}, {"tgt", std::move(tgt)}, {"jid", "1"}};
    if (type) l["tgt_type"] = type;
    return l;
  };
  EXPECT_TRUE(mn::is_job_for_me(job("web*", "glob"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("web*", nullptr), me));  // no tgt_type: glob
  EXPECT_FALSE(mn::is_job_for_me(job("db*", "glob"), me));
  EXPECT_TRUE(mn::is_job_for_me(job(wire::value::array({"x", "web1"}), "list"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("x,web1", "list"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("os:Debian", "grain"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("roles:db", "grain"), me));
  EXPECT_FALSE(mn::is_job_for_me(job("os:RedHat", "grain"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("color:blue", "pillar"), me));
  EXPECT_TRUE(mn::is_job_for_me(job("G@os:Debian and web*", "compound"), me));
  EXPECT_FALSE(mn::is_job_for_me(job("web1", "no_such_matcher"), me));
  auto d = job("a|b|c", "grain");
  d["delimiter"] = "|";
  EXPECT_TRUE(mn::is_job_for_me(d, me));
  auto missing = job("web1", "glob");
  missing.erase("arg");
  EXPECT_FALSE(mn::is_job_for_me(missing, me));
}

TEST(Jobs, ReturnLoadShape) {
  wire::value pub = {{"fun", "cmd.run"}, {"arg", {"echo hi"}}, {"tgt", "*"}, {"jid", "20250101000000000000"},
                     {"ret", ""},        {"user", "root"},     {"tgt_type", "glob"}};
  mn::exec_outcome o;
  o.ret = "hi";
  o.retcode = 0;
  o.success = true;
  auto l = mn::make_return_load("m1", pub, o);
  std::vector<std::string> keys;
  for (const auto& [k, v] : l.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"cmd", "id", "success", "return", "retcode", "jid", "fun", "fun_args", "user"}));
  EXPECT_EQ(l["fun_args"], wire::value({"echo hi"}));
  o.out = "nested";
  l = mn::make_return_load("m1", pub, o);
  EXPECT_EQ(l["out"], "nested");
  auto c = mn::make_call_return_load("m1", "test.ping", wire::value::array(), o);
  EXPECT_EQ(c["jid"], "req");
  EXPECT_FALSE(c.contains("success"));
  EXPECT_EQ(mn::unsupported_job_reason(pub), "");
  pub["fun"] = {"test.ping", "test.echo"};
  EXPECT_NE(mn::unsupported_job_reason(pub), "");
}

TEST(Jobs, JidFormat) {
  auto j = mn::gen_jid();
  ASSERT_EQ(j.size(), 20u);
  for (char c : j) EXPECT_TRUE(c >= '0' && c <= '9');
}

TEST(Jobs, PoolRunsAndBounds) {
  std::atomic<int> n{0};
  {
    mn::job_pool p(2, 100);
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(p.submit([&] { ++n; }));
    p.stop();
    EXPECT_FALSE(p.submit([&] { ++n; }));
  }
  EXPECT_EQ(n.load(), 50);
}
