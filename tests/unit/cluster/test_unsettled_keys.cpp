// A local copy's unconfirmed key changes on disk (cluster/unsettled_keys.hpp): the file's
// shape, refusals, the merge salt-key does, and the removal once nothing is left.
#include "cluster/unsettled_keys.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster_test_util.hpp"
#include "core/util/files.hpp"

namespace fs = std::filesystem;
using sylvite::test::tmpdir;
using namespace sylvite;
using cluster::unsettled_keys;
using rv = unsettled_keys::revoke;


TEST(UnsettledKeys, RoundTripAndRemovalWhenEmpty) {
  tmpdir d;
  auto none = cluster::read_unsettled_keys(d.p);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  unsettled_keys u;
  u.note("accept", "m1", true);
  u.note("delete", "m2", true);
  u.note("reject", "m3", false);
  u.note("pend", "m4", true);
  ASSERT_TRUE(cluster::write_unsettled_keys(d.p, u));
  const auto file = d.p / cluster::k_unsettled_keys_file;
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  auto back = cluster::read_unsettled_keys(d.p);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, u);
  EXPECT_EQ(back->revoked.at("m3"), (rv{"reject", false}));
  EXPECT_EQ(back->pending, std::set<std::string>{"m4"});
  ASSERT_TRUE(cluster::write_unsettled_keys(d.p, unsettled_keys{}));
  EXPECT_FALSE(fs::exists(file));
}

TEST(UnsettledKeys, LaterChangeToAnIdReplacesTheEarlier) {
  unsettled_keys u;
  u.note("accept", "m1", true);
  u.note("reject", "m1", true);
  EXPECT_TRUE(u.accepted.empty());
  EXPECT_EQ(u.revoked.at("m1").act, "reject");
  u.note("accept", "m1", true);
  EXPECT_TRUE(u.revoked.empty());
  EXPECT_TRUE(u.accepted.contains("m1"));
  u.note("list", "m2", true);  // not a change
  EXPECT_FALSE(u.accepted.contains("m2") || u.revoked.contains("m2"));
  u.note("pend", "m3", true);  // pending here until decided
  EXPECT_TRUE(u.pending.contains("m3"));
  u.note("accept", "m3", true);
  EXPECT_FALSE(u.pending.contains("m3"));
  u.note("pend", "m3", true);  // an accepted key does not go back to pending
  EXPECT_FALSE(u.pending.contains("m3"));
  u.note("delete", "m3", true);
  EXPECT_FALSE(u.pending.contains("m3"));
}

// A file on the (local) pki directory is input like any other: a wrong shape is refused
// whole, a bad entry is skipped and counted, never thrown.
TEST(UnsettledKeys, BadInputIsRefusedOrSkipped) {
  for (const char* text :
       {"", "not json", "[]", "{\"accepted\": \"m1\"}", "{\"revoked\": []}", "{\"pending\": {}}", "null"})
    EXPECT_FALSE(cluster::parse_unsettled_keys(text)) << text;
  std::size_t skipped = 0;
  auto u = cluster::parse_unsettled_keys(
      R"({"accepted": ["ok", "../x", 7, "", "both"],
          "revoked": {"r1": {"act": "delete"}, "r2": {"act": "accept"}, "r3": {}, "..": {"act": "reject"},
                      "both": {"act": "reject"}, "r4": "delete"},
          "pending": ["p1", "ok", "r1", "/p", 3]})",
      &skipped);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->accepted, (std::set<std::string>{"both", "ok"}));
  EXPECT_EQ(u->revoked, (std::map<std::string, rv>{{"r1", rv{"delete", true}}}));
  EXPECT_EQ(u->pending, std::set<std::string>{"p1"});
  EXPECT_EQ(skipped, 12u);
  auto empty = cluster::parse_unsettled_keys("{}");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(UnsettledKeys, UnreadableFilesAreErrors) {
  tmpdir d;
  const auto file = d.p / cluster::k_unsettled_keys_file;
  fs::create_symlink("/etc/hostname", file);  // never followed
  EXPECT_FALSE(cluster::read_unsettled_keys(d.p));
  fs::remove(file);
  {
    std::ofstream f(file);
    f << "{\"accepted\": [\"" << std::string(cluster::k_unsettled_keys_max_bytes, 'a') << "\"]}";
  }
  EXPECT_FALSE(cluster::read_unsettled_keys(d.p));  // too large
}

TEST(UnsettledKeys, MergeAddsToTheFileAndReplacesAnUnparsableOne) {
  tmpdir d;
  ASSERT_TRUE(cluster::merge_unsettled(d.p, "accept", {"a1", "a2", "../bad"}, true));
  ASSERT_TRUE(cluster::merge_unsettled(d.p, "delete", {"a2", "d1"}, false));
  auto u = cluster::read_unsettled_keys(d.p);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->accepted, std::set<std::string>{"a1"});
  EXPECT_EQ(u->revoked, (std::map<std::string, rv>{{"a2", rv{"delete", false}}, {"d1", rv{"delete", false}}}));
  ASSERT_TRUE(util::write_file_atomic(d.p / cluster::k_unsettled_keys_file, "{broken", 0600));
  ASSERT_TRUE(cluster::merge_unsettled(d.p, "reject", {"r1"}, true));
  u = cluster::read_unsettled_keys(d.p);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->revoked, (std::map<std::string, rv>{{"r1", rv{"reject", true}}}));
  EXPECT_TRUE(u->accepted.empty());
}

// salt-key runs in its own process: concurrent merges (the lock is an fcntl lock on the
// directory's .lock file) lose no change.
TEST(UnsettledKeys, ConcurrentMergesFromProcessesAllLand) {
  tmpdir d;
  std::vector<pid_t> kids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      bool ok = true;
      for (int j = 0; j < 10; ++j)
        ok = ok && static_cast<bool>(cluster::merge_unsettled(
                       d.p, "accept", {"p" + std::to_string(i) + "-" + std::to_string(j)}, true));
      ::_exit(ok ? 0 : 1);
    }
    ASSERT_GT(pid, 0);
    kids.push_back(pid);
  }
  for (auto pid : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  auto u = cluster::read_unsettled_keys(d.p);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->accepted.size(), 40u);
}
