// job_cache: Salt local_cache layout (exact paths and bytes), first-return-wins under
// concurrency (threads and processes), tolerant readers, ordering and cleaning.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <set>
#include <thread>

#include "core/crypto/rsa.hpp"
#include "core/wire/msgpack.hpp"
#include "master/job_cache.hpp"
#include "test_util.hpp"

using namespace sylvite;
using sylvite::test::hex;
using sylvite::test::read;
using sylvite::test::temp_dir;
using sylvite::test::write;

namespace {
// sha256("20260101120000123456") = 4c8d8e86... (Python hashlib), split as Salt's jid_dir.
const std::string kJid = "20260101120000123456";
const std::string kDir = "jobs/4c/8d8e8685059b5db50325a627509a7e8c70240a7d68590f508eb5fc3f4e624e";

wire::value ping_load(const std::string& jid) {
  wire::value l = wire::value::object();
  l["cmd"] = "publish";
  l["tgt"] = "*";
  l["fun"] = "test.ping";
  l["arg"] = wire::value::array();
  l["tgt_type"] = "glob";
  l["jid"] = jid;
  l["user"] = "root";
  return l;
}

wire::value ret_load(const std::string& jid, const std::string& id, wire::value ret) {
  wire::value r = wire::value::object();
  r["cmd"] = "_return";
  r["id"] = id;
  r["success"] = true;
  r["return"] = std::move(ret);
  r["retcode"] = 0;
  r["jid"] = jid;
  r["fun"] = "test.ping";
  r["fun_args"] = wire::value::array();
  return r;
}
}  // namespace

TEST(JobCache, NewJidFormatAndStrictlyIncreasing) {
  std::string prev;
  for (int i = 0; i < 20000; ++i) {
    std::string j = master::new_jid();
    ASSERT_EQ(j.size(), 20u);
    for (char c : j) ASSERT_TRUE(c >= '0' && c <= '9');
    ASSERT_GT(j, prev);
    prev = j;
  }
  // Unique across threads too.
  std::vector<std::vector<std::string>> per(4);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&per, t] {
      for (int i = 0; i < 5000; ++i) per[t].push_back(master::new_jid());
    });
  for (auto& t : ts) t.join();
  std::set<std::string> all;
  for (auto& v : per) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 20000u);
}

TEST(JobCache, JidIsUtcNow) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  EXPECT_EQ(master::new_jid().substr(0, 8), buf);
}

TEST(JobCache, ExactLayoutAndBytes) {
  temp_dir d;
  master::job_cache jc(d.path);
  EXPECT_EQ(jc.job_dir(kJid), d.path / kDir);

  wire::value load = wire::value::object();
  load["fun"] = "test.ping";
  ASSERT_TRUE(jc.save_load(kJid, load, {"m2", "m1"}));
  EXPECT_EQ(read(d / (kDir + "/jid")), kJid);
  // {"fun": "test.ping"}: fixmap(1), fixstr(3) "fun", fixstr(9) "test.ping"
  EXPECT_EQ(hex(read(d / (kDir + "/.load.p"))), "81a366756ea9746573742e70696e67");
  // ["m1", "m2"]: sorted like Salt's save_minions; fixarray(2), fixstr(2) x2
  EXPECT_EQ(hex(read(d / (kDir + "/.minions.p"))), "92a26d31a26d32");

  auto r = ret_load(kJid, "m1", true);
  r["out"] = "nested";
  auto saved = jc.save_return(kJid, "m1", r);
  ASSERT_TRUE(saved);
  EXPECT_TRUE(*saved);
  // {"return": true, "retcode": 0, "success": true} in Salt's key order (Python msgpack
  // gives 83a672657475726ec3a7726574636f646500a773756363657373c3 for the same dict).
  EXPECT_EQ(hex(read(d / (kDir + "/m1/return.p"))), "83a672657475726ec3a7726574636f646500a773756363657373c3");
  EXPECT_EQ(hex(read(d / (kDir + "/m1/out.p"))), "a66e6573746564");  // "nested"
  EXPECT_FALSE(std::filesystem::exists(d / (kDir + "/m2")));

  // Binary data goes out as msgpack bin (use_bin_type=True).
  auto r2 = ret_load(kJid, "m2", wire::make_bin(std::string("\xff\x00", 2)));
  r2.erase("success");
  ASSERT_TRUE(jc.save_return(kJid, "m2", r2));
  EXPECT_EQ(hex(read(d / (kDir + "/m2/return.p"))), "82a672657475726ec402ff00a7726574636f646500");

  auto back = jc.get_load(kJid);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, load);
  auto rets = jc.get_returns(kJid);
  ASSERT_TRUE(rets.contains("m1"));
  EXPECT_EQ(rets["m1"]["return"], true);
  EXPECT_EQ(rets["m1"]["out"], "nested");
  EXPECT_FALSE(rets["m2"].contains("out"));
  EXPECT_EQ(jc.get_minions(kJid), (std::vector<std::string>{"m1", "m2"}));
}

// job_dir keeps the last directory per thread: caches of other directories or hash
// types, and other jids, still get their own.
TEST(JobCache, JobDirOfEachCacheAndJid) {
  temp_dir d1, d2;
  master::job_cache a(d1.path), b(d2.path), c(d1.path, "md5");
  const std::string other = "20240101000000000001";
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(a.job_dir(kJid), d1.path / kDir);
    EXPECT_EQ(b.job_dir(kJid), d2.path / kDir);
    const std::string md5 = *crypto::hash_hex(kJid, "md5");
    EXPECT_EQ(c.job_dir(kJid), d1.path / "jobs" / md5.substr(0, 2) / md5.substr(2));
    const std::string h = *crypto::hash_hex(other, "sha256");
    EXPECT_EQ(a.job_dir(other), d1.path / "jobs" / h.substr(0, 2) / h.substr(2));
    EXPECT_EQ(a.job_dir(kJid), a.job_dir(kJid));
  }
}

TEST(JobCache, PythonSaltReadsIt) {
  const char* py = std::getenv("SYLVITE_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "SYLVITE_PYTHON not set (path to the venv python with salt/msgpack)";
  temp_dir d;
  master::job_cache jc(d.path);
  auto load = ping_load(kJid);
  load["arg"] = wire::value::array({"a", 1});
  ASSERT_TRUE(jc.save_load(kJid, load, {"m1", "m2", "m3"}));
  auto r1 = ret_load(kJid, "m1", true);
  r1["out"] = "nested";
  ASSERT_TRUE(jc.save_return(kJid, "m1", r1));
  wire::value complex = wire::value::object();
  complex["list"] = wire::value::array({1, -2, 3.5, nullptr, "x"});
  complex["bytes"] = wire::make_bin("\x01\x02");
  auto r2 = ret_load(kJid, "m2", complex);
  r2["retcode"] = 2;
  r2["success"] = false;
  ASSERT_TRUE(jc.save_return(kJid, "m2", r2));
  int status = -1;
  std::string cmd = std::string(py) + " " + SYLVITE_SOURCE_DIR + "/tests/vectors/jobcache_check.py " +
                    d.path.string() + " " + kJid + " 2>&1";
  std::string out = sylvite::test::run(cmd, &status);
  EXPECT_EQ(status, 0) << out;
  std::cout << out;  // says whether Salt's own local_cache did the reading
}

TEST(JobCache, SecondReturnRefused) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, ping_load(kJid), {"m1"}));
  auto a = jc.save_return(kJid, "m1", ret_load(kJid, "m1", "first"));
  auto b = jc.save_return(kJid, "m1", ret_load(kJid, "m1", "second"));
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(*a);
  EXPECT_FALSE(*b);
  EXPECT_EQ(jc.get_returns(kJid)["m1"]["return"], "first");
}

TEST(JobCache, ConcurrentReturnsExactlyOneWinsThreads) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, ping_load(kJid), {}));
  for (int round = 0; round < 50; ++round) {
    std::string id = "m" + std::to_string(round);
    std::atomic<int> wins{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; ++t)
      ts.emplace_back([&, t] {
        while (!go.load()) {
        }
        auto r = jc.save_return(kJid, id, ret_load(kJid, id, "thread" + std::to_string(t)));
        if (r && *r) ++wins;
      });
    go = true;
    for (auto& t : ts) t.join();
    EXPECT_EQ(wins.load(), 1) << id;
    auto rets = jc.get_returns(kJid);
    ASSERT_TRUE(rets.contains(id));
    auto v = rets[id]["return"].get<std::string>();
    EXPECT_TRUE(v == "thread0" || v == "thread1");
  }
}

TEST(JobCache, ConcurrentReturnsExactlyOneWinsProcesses) {
  temp_dir d;
  {
    // Gone before the forks: a child must not inherit its group-commit thread's mutex
    // (held by that thread at the moment of fork, it would never be released there).
    master::job_cache jc(d.path);
    ASSERT_TRUE(jc.save_load(kJid, ping_load(kJid), {}));
  }
  for (int round = 0; round < 10; ++round) {
    std::string id = "p" + std::to_string(round);
    std::vector<pid_t> kids;
    for (int k = 0; k < 3; ++k) {
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        master::job_cache mine(d.path);
        auto r = mine.save_return(kJid, id, ret_load(kJid, id, k));
        ::_exit(r && *r ? 0 : 1);
      }
      kids.push_back(pid);
    }
    int wins = 0;
    for (pid_t p : kids) {
      int st = 0;
      ::waitpid(p, &st, 0);
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ++wins;
    }
    EXPECT_EQ(wins, 1) << id;
  }
}

TEST(JobCache, CorruptAndHalfWrittenFilesAreSkipped) {
  temp_dir d;
  master::job_cache jc(d.path);
  std::string j1 = "20260101000000000001", j2 = "20260101000000000002";
  ASSERT_TRUE(jc.save_load(j1, ping_load(j1), {"a"}));
  ASSERT_TRUE(jc.save_load(j2, ping_load(j2), {"a", "b"}));
  ASSERT_TRUE(jc.save_return(j2, "a", ret_load(j2, "a", true)));
  // j1: truncated load (half-written by a foreign writer).
  auto l1 = read(jc.job_dir(j1) / ".load.p");
  write(jc.job_dir(j1) / ".load.p", l1.substr(0, l1.size() / 2));
  // j2/b: garbage return; j2/c: directory without return.p (writer died).
  write(jc.job_dir(j2) / "b" / "return.p", "\xc1\xc1\xc1");
  std::filesystem::create_directories(jc.job_dir(j2) / "c");
  // A stray directory with nothing in it.
  std::filesystem::create_directories(d.path / "jobs" / "zz" / "nothing");

  EXPECT_FALSE(jc.get_load(j1));
  auto jobs = jc.list_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].jid, j2);
  auto rets = jc.get_returns(j2);
  EXPECT_EQ(rets.size(), 1u);
  EXPECT_TRUE(rets.contains("a"));
  // Corrupt .minions.p is replaced on the next add.
  write(jc.job_dir(j1) / ".minions.p", "\x92\xa1");
  EXPECT_TRUE(jc.get_minions(j1).empty());
  ASSERT_TRUE(jc.add_minions(j1, {"z"}));
  EXPECT_EQ(jc.get_minions(j1), std::vector<std::string>{"z"});
}

TEST(JobCache, ListJobsNewestFirstAndMax) {
  temp_dir d;
  master::job_cache jc(d.path);
  std::vector<std::string> jids = {"20250101000000000000", "20260101000000000000", "20251231235959999999"};
  for (auto& j : jids) ASSERT_TRUE(jc.save_load(j, ping_load(j), {"m"}));
  auto all = jc.list_jobs();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].jid, "20260101000000000000");
  EXPECT_EQ(all[1].jid, "20251231235959999999");
  EXPECT_EQ(all[2].jid, "20250101000000000000");
  EXPECT_EQ(all[0].minions, std::vector<std::string>{"m"});
  EXPECT_EQ(all[0].load["fun"], "test.ping");
  auto two = jc.list_jobs(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].jid, "20251231235959999999");
}

TEST(JobCache, AddMinionsMergesSortedIncludingSyndicLists) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, ping_load(kJid), {"c", "a"}));
  ASSERT_TRUE(jc.add_minions(kJid, {"b", "a"}));
  EXPECT_EQ(hex(read(d / (kDir + "/.minions.p"))), "93a161a162a163");
  write(d / (kDir + "/.minions.syn1.p"), wire::pack(wire::value::array({"s1"}), wire::packing::frame));
  EXPECT_EQ(jc.get_minions(kJid), (std::vector<std::string>{"a", "b", "c", "s1"}));
  // Concurrent adders lose nothing.
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) (void)jc.add_minions(kJid, {"t" + std::to_string(t) + "_" + std::to_string(i)});
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(jc.get_minions(kJid).size(), 84u);
}

TEST(JobCache, RefusalsNeverThrow) {
  temp_dir d;
  master::job_cache jc(d.path);
  // Unknown jid: refused like Salt ("not present in the local cache").
  auto r = jc.save_return("20200101000000000000", "m1", ret_load("x", "m1", true));
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  ASSERT_TRUE(jc.save_load(kJid, ping_load(kJid), {}));
  EXPECT_FALSE(jc.save_return(kJid, "../evil", ret_load(kJid, "x", true)));
  EXPECT_FALSE(jc.save_return(kJid, "a/b", ret_load(kJid, "x", true)));
  EXPECT_FALSE(jc.save_return(kJid, "", ret_load(kJid, "x", true)));
  // nocache marker: returns are not stored.
  write(d / (kDir + "/nocache"), "");
  auto n = jc.save_return(kJid, "m1", ret_load(kJid, "m1", true));
  ASSERT_TRUE(n);
  EXPECT_FALSE(*n);
  EXPECT_TRUE(jc.get_returns("nonexistent").empty());
  EXPECT_TRUE(jc.get_minions("nonexistent").empty());
  EXPECT_FALSE(jc.get_load("nonexistent"));
  // A non-map return load stores an empty map, no crash.
  std::string j = "20260101000000000009";
  ASSERT_TRUE(jc.save_load(j, ping_load(j), {}));
  EXPECT_TRUE(*jc.save_return(j, "m1", wire::value::array({1, 2})));
}

TEST(JobCache, CleanOldByJidTime) {
  temp_dir d;
  master::job_cache jc(d.path);
  std::string old1 = "20000101000000000000", old2 = "20100615120000000000";
  std::string fresh = master::new_jid();
  for (auto& j : {old1, old2, fresh}) ASSERT_TRUE(jc.save_load(j, ping_load(j), {"m"}));
  ASSERT_TRUE(jc.save_return(old1, "m", ret_load(old1, "m", true)));
  EXPECT_EQ(jc.clean_old(std::chrono::seconds(0)), 0u);  // 0 disables, as Salt
  EXPECT_EQ(jc.clean_old(std::chrono::hours(24)), 2u);
  EXPECT_FALSE(std::filesystem::exists(jc.job_dir(old1)));
  EXPECT_FALSE(std::filesystem::exists(jc.job_dir(old2)));
  EXPECT_TRUE(std::filesystem::exists(jc.job_dir(fresh)));
  // Their hash buckets stay, empty (on a shared cache another master may use them now).
  EXPECT_TRUE(std::filesystem::is_directory(jc.job_dir(old1).parent_path()));
  EXPECT_TRUE(std::filesystem::is_directory(jc.job_dir(old2).parent_path()));
  auto jobs = jc.list_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].jid, fresh);
  // A fresh half-created dir (no jid file yet) is left alone.
  std::filesystem::create_directories(d.path / "jobs" / "ab" / "cdef");
  EXPECT_EQ(jc.clean_old(std::chrono::hours(24)), 0u);
  EXPECT_TRUE(std::filesystem::exists(d.path / "jobs" / "ab" / "cdef"));
}

TEST(JobCache, OtherHashType) {
  temp_dir d;
  master::job_cache jc(d.path, "md5");
  // md5("20260101120000123456") = cd8ed715... (Python hashlib)
  EXPECT_EQ(jc.job_dir(kJid), d.path / "jobs/cd/8ed715122dcd1de5da249210897781");
}
