// return_queue: bounded, on disk, ordered, survives a restart, refuses when full,
// moves unreadable entries aside.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/util/files.hpp"
#include "minion/return_queue.hpp"

namespace fs = std::filesystem;
using sylvite::minion::return_queue;
using sylvite::wire::value;

namespace {
struct tmpdir {
  fs::path p;
  tmpdir() {
    char tpl[] = "/tmp/sylvite-rq-XXXXXX";
    p = ::mkdtemp(tpl);
  }
  ~tmpdir() { fs::remove_all(p); }
};

value ret(const std::string& jid) {
  value v = value::object();
  v["cmd"] = "_return";
  v["id"] = "m1";
  v["jid"] = jid;
  v["return"] = true;
  return v;
}
}  // namespace

TEST(ReturnQueue, OrderedAndFilteredByMaster) {
  tmpdir t;
  return_queue q(t.p / "rq", 10);
  ASSERT_TRUE(q.push("a", ret("1")));
  ASSERT_TRUE(q.push("", ret("2")));
  ASSERT_TRUE(q.push("b", ret("3")));
  ASSERT_TRUE(q.push("a", ret("4")));
  EXPECT_EQ(q.size(), 4u);
  auto a = q.pending("a", false);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].load["jid"], "1");
  EXPECT_EQ(a[1].load["jid"], "4");
  auto any = q.pending("a", true);
  ASSERT_EQ(any.size(), 3u);
  EXPECT_EQ(any[1].load["jid"], "2");
  EXPECT_EQ(any[1].master, "");
  q.remove(a[0].name);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.pending("a", false).size(), 1u);
}

TEST(ReturnQueue, SurvivesRestartAndNumbersAfterExistingEntries) {
  tmpdir t;
  std::string first;
  {
    return_queue q(t.p / "rq", 10);
    first = q.push("", ret("1")).value();
    ASSERT_TRUE(q.push("", ret("2")));
  }
  return_queue q2(t.p / "rq", 10);
  EXPECT_EQ(q2.size(), 2u);
  auto name = q2.push("", ret("3")).value();
  EXPECT_GT(name, first);
  auto all = q2.pending("x", true);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].load["jid"], "1");
  EXPECT_EQ(all[2].load["jid"], "3");
}

TEST(ReturnQueue, RefusesWhenFull) {
  tmpdir t;
  return_queue q(t.p / "rq", 2);
  ASSERT_TRUE(q.push("", ret("1")));
  ASSERT_TRUE(q.push("", ret("2")));
  auto r = q.push("", ret("3"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::value_too_large);
  EXPECT_EQ(q.size(), 2u);
  q.remove(q.pending("", true)[0].name);
  EXPECT_TRUE(q.push("", ret("3")));
}

TEST(ReturnQueue, UnreadableEntryIsMovedAsideNotDelivered) {
  tmpdir t;
  return_queue q(t.p / "rq", 10);
  ASSERT_TRUE(q.push("", ret("1")));
  {
    std::ofstream f(t.p / "rq" / "00000000000000000099.ret", std::ios::binary);
    f << "\xc1garbage";
  }
  return_queue q2(t.p / "rq", 10);
  auto all = q2.pending("", true);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].load["jid"], "1");
  EXPECT_TRUE(fs::exists(t.p / "rq" / "00000000000000000099.ret.bad"));
  EXPECT_EQ(q2.size(), 1u);
}

TEST(ReturnQueue, TempFilesAndOtherNamesAreIgnored) {
  tmpdir t;
  fs::create_directories(t.p / "rq");
  std::ofstream(t.p / "rq" / ".tmp.123") << "x";
  std::ofstream(t.p / "rq" / "notes.txt") << "x";
  return_queue q(t.p / "rq", 10);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(q.pending("", true).empty());
}
