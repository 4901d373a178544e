// Issue #4 hot paths: util nosync writes + group_syncer, job_cache first-return-wins and
// batch durability, session_store and accepted_keys caches (invalidation on delete),
// worker_pool queue wait and stale sign-ins.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/auth.hpp"
#include "master/job_cache.hpp"
#include "master/keys.hpp"
#include "master/worker_pool.hpp"
#include "tests/unit/master/test_util.hpp"

namespace sylvite::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using wire::value;

std::size_t count_temp_files(const fs::path& root) {
  std::size_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
  return n;
}

// ------------------------------------------------------------------ util
TEST(NosyncFiles, CreateExclusiveRefusesSecondAndLeavesNoTemp) {
  temp_dir d;
  const fs::path p = d.path / "a" / "b" / "return.p";  // parents created
  ASSERT_TRUE(util::create_exclusive_nosync(p, "first"));
  auto r = util::create_exclusive_nosync(p, "second");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), util::errc::already_exists);
  EXPECT_EQ(*util::read_file(p), "first");
  EXPECT_EQ(count_temp_files(d.path), 0u);
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all, fs::perms(0644));
}

// A failed write names the system's reason (the log line an operator reads), not a
// generic "i/o error": here a parent that is a file.
TEST(NosyncFiles, ErrorsCarryTheSystemReason) {
  temp_dir d;
  { std::ofstream(d.path / "plain") << "x"; }
  const fs::path p = d.path / "plain" / "f";
  for (auto r : {util::create_exclusive_nosync(p, "x"), util::write_file_atomic_nosync(p, "x"),
                 util::write_file_atomic(p, "x"), util::create_exclusive(p, "x")}) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), boost::system::error_code(ENOTDIR, boost::system::system_category()))
        << r.error().message();
  }
  auto rd = util::read_file(d.path);  // a directory
  ASSERT_FALSE(rd);
  EXPECT_EQ(rd.error().value(), EISDIR) << rd.error().message();
  EXPECT_EQ(util::read_file(d.path / "missing").error(), util::errc::not_found);
  EXPECT_EQ(count_temp_files(d.path), 0u);
}

TEST(NosyncFiles, WriteAtomicReplaces) {
  temp_dir d;
  const fs::path p = d.path / "x" / "f";
  ASSERT_TRUE(util::write_file_atomic_nosync(p, "one", 0600));
  ASSERT_TRUE(util::write_file_atomic_nosync(p, "two", 0600));
  EXPECT_EQ(*util::read_file(p), "two");
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all, fs::perms(0600));
  EXPECT_EQ(count_temp_files(d.path), 0u);
}

TEST(GroupSyncer, FlushMakesEverythingDurableAndBatches) {
  temp_dir d;
  util::group_syncer s(d.path, 20ms);
  EXPECT_EQ(s.durable(), 0u);
  std::uint64_t last = 0;
  for (int i = 0; i < 500; ++i) last = s.note();
  s.wait(last);
  EXPECT_GE(s.durable(), last);
  // 500 writes noted within the gather window share a handful of syncs, not 500.
  EXPECT_LE(s.syncs(), 10u);
  EXPECT_GE(s.syncs(), 1u);
  const auto before = s.syncs();
  s.flush();
  EXPECT_EQ(s.syncs(), before + 1);
  EXPECT_EQ(s.durable(), s.noted());
}

// The writes of a burst cost one wake-up of the sync thread, not one each: notes made
// while it gathers (or syncs) find it awake.
TEST(GroupSyncer, BurstWakesTheThreadOnce) {
  temp_dir d;
  util::group_syncer s(d.path, 300ms);
  std::uint64_t last = s.note();  // wakes the thread if it already sleeps (else it finds the note itself)
  for (int i = 0; i < 999; ++i) last = s.note();  // well inside the 300 ms gather
  s.wait(last);
  EXPECT_EQ(s.durable(), last);
  EXPECT_EQ(s.syncs(), 1u);
  EXPECT_LE(s.wakes(), 1u);  // one per note would be 1,000
  // After the sync: the next note is made durable too (at most one more wake-up).
  s.flush();
  EXPECT_LE(s.wakes(), 2u);
  EXPECT_EQ(s.durable(), s.noted());
  EXPECT_EQ(s.syncs(), 2u);
}

TEST(GroupSyncer, ConcurrentWaitersAllReleased) {
  temp_dir d;
  util::group_syncer s(d.path, 2ms);
  std::vector<std::thread> ts;
  std::atomic<int> done{0};
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20; ++i) s.wait(s.note());
      done++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), 8);
  EXPECT_EQ(s.durable(), s.noted());
  EXPECT_LT(s.syncs(), 160u);  // waiters share syncs
}

TEST(GroupSyncer, SharedPerFilesystem) {
  temp_dir d;
  fs::create_directories(d.path / "a");
  auto a = util::group_syncer::shared_for(d.path / "a");
  auto b = util::group_syncer::shared_for(d.path / "not" / "yet" / "made");
  EXPECT_EQ(a.get(), b.get());
}

// ------------------------------------------------------------------ job cache
const std::string kJid = "20260101120000123456";

value ret_load(const std::string& id, value ret) {
  value r = value::object();
  r["cmd"] = "_return";
  r["id"] = id;
  r["success"] = true;
  r["return"] = std::move(ret);
  r["retcode"] = 0;
  r["jid"] = kJid;
  r["out"] = "nested";
  return r;
}

TEST(JobCacheGroupCommit, DuplicateReturnRefusedFirstKept) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}, {"jid", kJid}}, {"m1"}));
  auto a = jc.save_return(kJid, "m1", ret_load("m1", "first"));
  ASSERT_TRUE(a);
  EXPECT_TRUE(*a);
  auto b = jc.save_return(kJid, "m1", ret_load("m1", "second"));
  ASSERT_TRUE(b);
  EXPECT_FALSE(*b);
  auto rets = jc.get_returns(kJid);
  ASSERT_TRUE(rets.contains("m1"));
  EXPECT_EQ(rets["m1"]["return"], "first");
  EXPECT_EQ(rets["m1"]["out"], "nested");
  EXPECT_EQ(count_temp_files(d.path), 0u);
}

TEST(JobCacheGroupCommit, ConcurrentDuplicatesExactlyOneWins) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  for (int id = 0; id < 20; ++id) {
    std::atomic<int> wins{0};
    std::vector<std::thread> ts;
    const std::string mid = "m" + std::to_string(id);
    for (int t = 0; t < 6; ++t)
      ts.emplace_back([&, t] {
        auto r = jc.save_return(kJid, mid, ret_load(mid, t));
        if (r && *r) wins++;
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(wins.load(), 1) << mid;
  }
  EXPECT_EQ(jc.get_returns(kJid).size(), 20u);
  EXPECT_EQ(count_temp_files(d.path), 0u);
}

TEST(JobCacheGroupCommit, ReturnsAreNotedAndABatchIsDurableAfterFlush) {
  temp_dir d;
  master::job_cache jc(d.path);
  auto& s = jc.syncer();
  const auto noted0 = s.noted(), syncs0 = s.syncs();
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  for (int i = 0; i < 300; ++i) {
    auto r = jc.save_return(kJid, "m" + std::to_string(i), ret_load("m", i));
    ASSERT_TRUE(r && *r);
  }
  EXPECT_GE(s.noted() - noted0, 301u);  // every write is handed to the group commit
  jc.flush();
  EXPECT_GE(s.durable(), noted0 + 301);
  // Group commit: at most one sync per write, never the two fsyncs per return of before
  // (how many writes share a sync depends on the machine's speed; GroupSyncer tests it).
  EXPECT_LE(s.syncs() - syncs0, 301u);
  EXPECT_EQ(jc.get_returns(kJid).size(), 300u);
}

TEST(JobCacheGroupCommit, EmptyReturnFileFromACrashIsSkippedByReaders) {
  // What an OS crash inside the sync window can leave: an empty return.p.
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  ASSERT_TRUE(*jc.save_return(kJid, "good", ret_load("good", true)));
  fs::create_directories(jc.job_dir(kJid) / "lost");
  { std::ofstream(jc.job_dir(kJid) / "lost" / "return.p"); }
  auto rets = jc.get_returns(kJid);
  EXPECT_EQ(rets.size(), 1u);
  EXPECT_TRUE(rets.contains("good"));
}

TEST(JobCacheGroupCommit, PublishLoadReadableAtOnce) {
  temp_dir d;
  master::job_cache jc(d.path);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.echo"}, {"jid", kJid}}, {"b", "a"}));
  auto l = jc.get_load(kJid);
  ASSERT_TRUE(l);
  EXPECT_EQ((*l)["fun"], "test.echo");
  EXPECT_EQ(jc.get_minions(kJid), (std::vector<std::string>{"a", "b"}));
  auto jobs = jc.list_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].jid, kJid);
}

// ------------------------------------------------------------------ job cache, writer thread
// The async and journal modes share the in-memory first-wins index and the writer thread.
using mode = master::job_cache::write_mode;
class JobCacheQueued : public ::testing::TestWithParam<mode> {};
INSTANTIATE_TEST_SUITE_P(Modes, JobCacheQueued, ::testing::Values(mode::async, mode::journal),
                         [](const auto& i) { return i.param == mode::async ? "async" : "journal"; });

TEST_P(JobCacheQueued, FirstReturnWinsInMemoryAndReadersSeeIt) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", GetParam());
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {"m1"}));
  EXPECT_TRUE(*jc.save_return(kJid, "m1", ret_load("m1", "first")));
  EXPECT_FALSE(*jc.save_return(kJid, "m1", ret_load("m1", "second")));
  auto rets = jc.get_returns(kJid);  // waits for the writer
  ASSERT_EQ(rets.size(), 1u);
  EXPECT_EQ(rets["m1"]["return"], "first");
  EXPECT_EQ(rets["m1"]["out"], "nested");
  EXPECT_EQ(count_temp_files(d.path), 0u);
  EXPECT_EQ(jc.write_conflicts(), 0u);
}

TEST_P(JobCacheQueued, ConcurrentDuplicatesExactlyOneWins) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", GetParam());
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  for (int id = 0; id < 30; ++id) {
    std::atomic<int> wins{0};
    std::vector<std::thread> ts;
    const std::string mid = "m" + std::to_string(id);
    for (int t = 0; t < 6; ++t)
      ts.emplace_back([&, t] {
        auto r = jc.save_return(kJid, mid, ret_load(mid, t));
        if (r && *r) wins++;
      });
    for (auto& t : ts) t.join();
    EXPECT_EQ(wins.load(), 1) << mid;
  }
  EXPECT_EQ(jc.get_returns(kJid).size(), 30u);
}

TEST_P(JobCacheQueued, AfterARestartReturnsOnDiskStillWin) {
  temp_dir d;
  {
    master::job_cache jc(d.path, "sha256", GetParam());
    ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
    ASSERT_TRUE(*jc.save_return(kJid, "m1", ret_load("m1", "before")));
  }  // destructor writes the queue
  ASSERT_TRUE(fs::exists(master::job_cache(d.path).job_dir(kJid) / "m1" / "return.p"));
  master::job_cache again(d.path, "sha256", GetParam());
  EXPECT_FALSE(*again.save_return(kJid, "m1", ret_load("m1", "after")));  // seeded from disk
  EXPECT_TRUE(*again.save_return(kJid, "m2", ret_load("m2", "after")));
  auto rets = again.get_returns(kJid);
  EXPECT_EQ(rets["m1"]["return"], "before");
  EXPECT_EQ(rets["m2"]["return"], "after");
}

TEST_P(JobCacheQueued, UnknownJidAndNocacheRefused) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", GetParam());
  EXPECT_FALSE(*jc.save_return("20200101000000000000", "m1", ret_load("m1", true)));
  EXPECT_FALSE(jc.save_return(kJid, "../evil", ret_load("x", true)));
  // A job made by another process with the nocache marker.
  {
    master::job_cache other(d.path);
    ASSERT_TRUE(other.save_load(kJid, value{{"fun", "test.ping"}}, {}));
    std::ofstream(other.job_dir(kJid) / "nocache");
  }
  EXPECT_FALSE(*jc.save_return(kJid, "m1", ret_load("m1", true)));
  EXPECT_TRUE(jc.get_returns(kJid).empty());
}

TEST_P(JobCacheQueued, IndexIsBoundedAndEvictedJobsStillRefuseDuplicates) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", GetParam());
  std::vector<std::string> jids;
  for (int i = 0; i < 100; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "202601011200001%05d", i);
    jids.emplace_back(buf);
    ASSERT_TRUE(jc.save_load(jids.back(), value{{"fun", "test.ping"}}, {}));
    ASSERT_TRUE(*jc.save_return(jids.back(), "m1", ret_load("m1", i)));
  }
  EXPECT_LE(jc.indexed_jobs(), 64u);
  // jids[0] was evicted: its duplicate is refused from what is on disk.
  EXPECT_FALSE(*jc.save_return(jids[0], "m1", ret_load("m1", "late dup")));
  EXPECT_TRUE(*jc.save_return(jids[0], "m2", ret_load("m2", "late")));
  EXPECT_EQ(jc.get_returns(jids[0])["m1"]["return"], 0);
  EXPECT_EQ(jc.get_returns(jids[0]).size(), 2u);
}

TEST_P(JobCacheQueued, FlushMakesQueuedReturnsDurable) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", GetParam());
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  const auto syncs0 = jc.syncer().syncs();
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(*jc.save_return(kJid, "m" + std::to_string(i), ret_load("m", i)));
  jc.flush();
  EXPECT_EQ(jc.syncer().durable(), jc.syncer().noted());
  EXPECT_LT(jc.syncer().syncs() - syncs0, 250u);  // batches, not one per return
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(jc.job_dir(kJid)))
    if (fs::exists(e.path() / "return.p")) ++files;
  EXPECT_EQ(files, 500u);
}

// ------------------------------------------------------------------ job cache, journal mode
std::size_t journal_segments(const fs::path& cachedir) {
  std::size_t n = 0;
  for (auto& e : fs::directory_iterator(master::job_cache::journal_dir(cachedir)))
    if (e.path().extension() == ".spool") ++n;
  return n;
}

TEST(JobCacheJournal, ReturnIsInTheJournalWhenSaveReturnAnswers) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", mode::journal);
  ASSERT_EQ(jc.mode(), mode::journal);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {"m1"}));
  ASSERT_TRUE(*jc.save_return(kJid, "m1", ret_load("m1", "journaled")));
  std::uintmax_t bytes = 0;
  for (auto& e : fs::directory_iterator(master::job_cache::journal_dir(d.path)))
    if (e.path().extension() == ".spool") bytes += fs::file_size(e.path());
  // The record (header + jid + id + return.p + out.p) is on disk before the answer; the
  // newest segment is never removed, so the writer cannot have shrunk it to zero.
  EXPECT_GT(bytes, 24u + kJid.size() + 2);
  EXPECT_EQ(jc.get_returns(kJid)["m1"]["return"], "journaled");
}

TEST(JobCacheJournal, StartReplaysWhatACrashedMasterJournaled) {
  temp_dir d;
  const std::string cleaned = "20260101120000999999";
  {
    master::job_cache jc(d.path, "sha256", mode::sync);
    ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {"m1", "m2", "m3"}));
    ASSERT_TRUE(*jc.save_return(kJid, "m1", ret_load("m1", "on disk first")));
  }
  {
    // What a master killed after its acks left: records whose return.p was not written.
    auto sp = master::spool::open(master::job_cache::journal_dir(d.path), 1 << 20, 1 << 20, "test");
    ASSERT_TRUE(sp);
    for (auto [id, ret] : {std::pair{"m1", "journaled later"}, {"m2", "from the journal"}, {"m3", "also"}})
      ASSERT_TRUE((*sp)->append('R', master::job_cache::journal_payload(kJid, id, ret_load(id, ret))));
    ASSERT_TRUE((*sp)->append('R', master::job_cache::journal_payload(cleaned, "m1", ret_load("m1", 1))));
    ASSERT_TRUE((*sp)->append('R', "not a return"));
  }
  {
    master::job_cache jc(d.path, "sha256", mode::journal);
    EXPECT_EQ(jc.replayed(), 2u);  // m2, m3; m1 was on disk; the cleaned job is gone
    auto rets = jc.get_returns(kJid);
    ASSERT_EQ(rets.size(), 3u);
    EXPECT_EQ(rets["m1"]["return"], "on disk first");  // the first return.p wins
    EXPECT_EQ(rets["m2"]["return"], "from the journal");
    EXPECT_EQ(rets["m2"]["out"], "nested");
    EXPECT_EQ(rets["m3"]["retcode"], 0);
    EXPECT_FALSE(fs::exists(jc.job_dir(cleaned)));  // not re-created
    EXPECT_FALSE(*jc.save_return(kJid, "m2", ret_load("m2", "dup")));  // index seeded from disk
  }
  master::job_cache again(d.path, "sha256", mode::journal);
  EXPECT_EQ(again.replayed(), 0u);  // nothing left to write
  EXPECT_EQ(count_temp_files(d.path), 0u);
}

TEST(JobCacheJournal, WrittenSegmentsAreReleased) {
  temp_dir d;
  master::job_cache jc(d.path, "sha256", mode::journal);
  ASSERT_TRUE(jc.save_load(kJid, value{{"fun", "test.ping"}}, {}));
  const std::string big(64 * 1024, 'x');  // about 64 KB per record: 4 MB segments fill fast
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(*jc.save_return(kJid, "m" + std::to_string(i), ret_load("m", big)));
  EXPECT_GE(journal_segments(d.path), 3u);
  // The writer releases what it has written and synced; the newest segment stays. It runs
  // at SCHED_IDLE: on a loaded machine (ctest -j, ASan) it may take many seconds, so the
  // trickle goes on until the release or a generous deadline.
  bool released = false;
  std::size_t late = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (; std::chrono::steady_clock::now() < deadline && !released; ++late) {
    ASSERT_TRUE(*jc.save_return(kJid, "late" + std::to_string(late), ret_load("m", 1)));
    std::this_thread::sleep_for(20ms);
    released = journal_segments(d.path) == 1;
  }
  EXPECT_TRUE(released);
  EXPECT_EQ(jc.get_returns(kJid).size(), 200u + late);
}

// ------------------------------------------------------------------ session store
TEST(SessionStore, HitCostsNoFileAccessAndRemoveIsImmediate) {
  temp_dir d;
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400), 60s);
  auto k = ss.get_or_create("m1");
  ASSERT_TRUE(k);
  const auto reads = ss.file_reads();
  for (int i = 0; i < 100; ++i) {
    auto l = ss.lookup("m1");
    ASSERT_TRUE(l);
    EXPECT_EQ(l.get(), k->get());
  }
  EXPECT_EQ(ss.file_reads(), reads);
  EXPECT_EQ(*util::read_file(d.path / "sessions" / "m1"), (*k)->key_string());
  ss.remove("m1");
  EXPECT_FALSE(ss.lookup("m1"));
  EXPECT_FALSE(fs::exists(d.path / "sessions" / "m1"));
  EXPECT_FALSE(ss.lookup("never"));
  EXPECT_FALSE(fs::exists(d.path / "sessions" / "never"));  // lookups never create
}

// lookup_cached (the io thread): a re-check that is due is a stat; a file that changed
// or is not in memory is left for lookup (a worker thread) to read.
TEST(SessionStore, LookupCachedNeverReadsAFile) {
  temp_dir d;
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400), 0ms);  // re-check every time
  auto k = ss.get_or_create("m1");
  ASSERT_TRUE(k);
  auto hit = ss.lookup_cached("m1");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->get(), k->get());
  auto never = ss.lookup_cached("never");  // no file: the stat answers "no key"
  ASSERT_TRUE(never);
  EXPECT_FALSE(*never);
  // Another master rotates the key: the new file is not read here.
  std::this_thread::sleep_for(10ms);
  const std::string other = crypto::crypticle::generate_key_string();
  ASSERT_TRUE(util::write_file_atomic_nosync(d.path / "sessions" / "m1", other, 0600));
  EXPECT_FALSE(ss.lookup_cached("m1"));
  EXPECT_FALSE(ss.lookup_cached("m1"));
  auto fresh = ss.lookup("m1");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->key_string(), other);
  auto again = ss.lookup_cached("m1");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), fresh.get());
  // Removed: the stat says so, and the answer is "no key" (the minion signs in again).
  fs::remove(d.path / "sessions" / "m1");
  auto gone = ss.lookup_cached("m1");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
}

TEST(SessionStore, ConcurrentFirstSignInsAgreeOnOneKey) {
  temp_dir d;
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400));
  for (int id = 0; id < 10; ++id) {
    const std::string mid = "m" + std::to_string(id);
    std::vector<std::string> got(8);
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t)
      ts.emplace_back([&, t] {
        auto k = ss.get_or_create(mid);
        if (k) got[t] = (*k)->key_string();
      });
    for (auto& t : ts) t.join();
    std::set<std::string> distinct(got.begin(), got.end());
    EXPECT_EQ(distinct.size(), 1u) << mid;
    EXPECT_EQ(*util::read_file(d.path / "sessions" / mid), *distinct.begin());
  }
}

TEST(SessionStore, RevalidatesAgainstTheFileAfterTheInterval) {
  temp_dir d;
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400), 50ms);
  auto k = ss.get_or_create("m1");
  ASSERT_TRUE(k);
  // Another master (shared cachedir) rotates the key.
  std::this_thread::sleep_for(20ms);
  const std::string other = crypto::crypticle::generate_key_string();
  ASSERT_TRUE(util::write_file_atomic(d.path / "sessions" / "m1", other, 0600));
  std::this_thread::sleep_for(80ms);
  auto l = ss.lookup("m1");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->key_string(), other);
  // Removed on disk by another master: gone after the interval.
  fs::remove(d.path / "sessions" / "m1");
  std::this_thread::sleep_for(80ms);
  EXPECT_FALSE(ss.lookup("m1"));
}

TEST(SessionStore, CorruptFileIsReplacedOnSignIn) {
  temp_dir d;
  fs::create_directories(d.path / "sessions");
  { std::ofstream(d.path / "sessions" / "m1"); }  // empty: lost in an OS crash
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400));
  EXPECT_FALSE(ss.lookup("m1"));
  auto k = ss.get_or_create("m1");
  ASSERT_TRUE(k);
  EXPECT_EQ(*util::read_file(d.path / "sessions" / "m1"), (*k)->key_string());
}

// A session file that cannot be read (here: its name is in a non-directory; on GlusterFS
// EIO from a split brain) is not "missing": no new key is written over it.
TEST(SessionStore, UnreadableIsNotMissing) {
  temp_dir d;
  { std::ofstream(d.path / "sessions") << "not a directory"; }
  master::session_store ss(d.path / "sessions", std::chrono::seconds(86400));
  EXPECT_FALSE(ss.get_or_create("m1"));
  EXPECT_FALSE(ss.lookup("m1"));
  EXPECT_EQ(*util::read_file(d.path / "sessions"), "not a directory");
}

// ------------------------------------------------------------------ accepted keys
struct AcceptedFixture : ::testing::Test {
  temp_dir tmp;
  pki::key_store store{tmp.path / "pki"};
  void SetUp() override { ASSERT_TRUE(store.ensure_dirs()); }
  void put(const std::string& id, int key) {
    ASSERT_TRUE(store.write(pki::key_state::accepted, id, cached_key(key).public_pem()));
  }
  template <class F>
  bool eventually(F f, std::chrono::milliseconds limit = 2000ms) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (f()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return f();
  }
};

TEST_F(AcceptedFixture, HitCostsNoStatWhileWatching) {
  master::accepted_keys ak(store, 60s);
  ASSERT_TRUE(ak.watching());
  put("m1", 1);
  // The write's own inotify events may arrive after the first get (and drop the entry):
  // wait until two gets 50 ms apart need no file check.
  ASSERT_TRUE(eventually([&] {
    ak.get("m1");
    auto c = ak.file_checks();
    std::this_thread::sleep_for(50ms);
    ak.get("m1");
    return ak.file_checks() == c;
  }));
  ASSERT_TRUE(ak.get("m1"));
  const auto checks = ak.file_checks();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(ak.get("m1"));
  EXPECT_EQ(ak.file_checks(), checks);
  fake_minion fm{"m1", cached_key(1)};
  EXPECT_TRUE(ak.verify_token("m1", fm.tok()));
  EXPECT_TRUE(ak.verify_token("m1", fm.tok()));
  EXPECT_EQ(ak.file_checks(), checks);
}

TEST_F(AcceptedFixture, DeletedFileTakesEffectWithoutAKeyEvent) {
  // An operator's rm (no salt-key, no key event): inotify drops the entry.
  master::accepted_keys ak(store, 60s);
  put("m1", 1);
  ASSERT_TRUE(ak.get("m1"));
  fs::remove(store.path(pki::key_state::accepted, "m1"));
  EXPECT_TRUE(eventually([&] { return ak.get("m1") == nullptr; }));
  fake_minion fm{"m1", cached_key(1)};
  EXPECT_FALSE(ak.verify_token("m1", fm.tok()));
}

TEST_F(AcceptedFixture, RejectMovesTheKeyAndInvalidateIsImmediate) {
  master::accepted_keys ak(store, 60s);
  put("m1", 1);
  ASSERT_TRUE(ak.get("m1"));
  // salt-key -r: the file moves to minions_rejected, then the master gets key_event.
  ASSERT_TRUE(store.move("m1", pki::key_state::accepted, pki::key_state::rejected));
  ak.invalidate("m1");  // what key_event does
  EXPECT_EQ(ak.get("m1"), nullptr);
}

TEST_F(AcceptedFixture, ReplacedKeyIsPickedUp) {
  master::accepted_keys ak(store, 60s);
  put("m1", 1);
  auto a = ak.get("m1");
  ASSERT_TRUE(a);
  fake_minion old_key{"m1", cached_key(1)}, new_key{"m1", cached_key(2)};
  EXPECT_TRUE(ak.verify_token("m1", old_key.tok()));
  put("m1", 2);
  EXPECT_TRUE(eventually([&] { return ak.verify_token("m1", new_key.tok()); }));
  EXPECT_FALSE(ak.verify_token("m1", old_key.tok()));
}

TEST_F(AcceptedFixture, RevalidateZeroStatsEveryLookupLikeTheNoInotifyFallback) {
  // revalidate 0: every lookup stats the file, which is what get() does when inotify is
  // unavailable (the old behaviour).
  master::accepted_keys ak(store, 0ms);
  put("m1", 1);
  ASSERT_TRUE(ak.get("m1"));
  const auto checks = ak.file_checks();
  ASSERT_TRUE(ak.get("m1"));
  EXPECT_EQ(ak.file_checks(), checks + 1);
  fs::remove(store.path(pki::key_state::accepted, "m1"));
  EXPECT_EQ(ak.get("m1"), nullptr);
}

// verify_token_cached (the io thread): a stat at most; a key not in memory or replaced is
// left for verify_token (a worker thread) to read.
TEST_F(AcceptedFixture, VerifyTokenCachedNeverReadsAFile) {
  master::accepted_keys ak(store, 0ms);  // re-check (stat) every time
  put("m1", 1);
  fake_minion old_key{"m1", cached_key(1)}, new_key{"m1", cached_key(2)};
  EXPECT_FALSE(ak.verify_token_cached("m1", old_key.tok()));  // not in memory
  EXPECT_FALSE(ak.verify_token_cached("m1", old_key.tok()));  // and still not: nothing read
  ASSERT_TRUE(ak.verify_token("m1", old_key.tok()));
  auto ok = ak.verify_token_cached("m1", old_key.tok());
  ASSERT_TRUE(ok);
  EXPECT_TRUE(*ok);
  auto bad = ak.verify_token_cached("m1", new_key.tok());
  ASSERT_TRUE(bad);
  EXPECT_FALSE(*bad);
  std::this_thread::sleep_for(10ms);
  put("m1", 2);  // replaced: the stat sees it, the read is left to a worker
  EXPECT_FALSE(ak.verify_token_cached("m1", new_key.tok()));
  ASSERT_TRUE(ak.verify_token("m1", new_key.tok()));
  // The watcher thread's invalidation for the rewrite may land after that read, which then
  // (rightly) is not cached: a later read caches it.
  EXPECT_TRUE(eventually([&] {
    return ak.verify_token("m1", new_key.tok()) && ak.verify_token_cached("m1", new_key.tok()).value_or(false);
  }));
  fs::remove(store.path(pki::key_state::accepted, "m1"));  // gone: refused from the stat
  auto gone = ak.verify_token_cached("m1", new_key.tok());
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
}

// ------------------------------------------------------------------ worker pool + stale sign-ins
TEST(WorkerPool, TaskKnowsHowLongItWaited) {
  EXPECT_EQ(master::worker_pool::current_task_waited().count(), 0);
  master::worker_pool pool(1, 10);
  std::atomic<long long> waited_ms{-1};
  std::atomic<bool> done{false};
  ASSERT_TRUE(pool.submit([] { std::this_thread::sleep_for(200ms); }));
  ASSERT_TRUE(pool.submit([&] {
    waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(master::worker_pool::current_task_waited())
                    .count();
    done = true;
  }));
  pool.stop();
  ASSERT_TRUE(done.load());
  EXPECT_GE(waited_ms.load(), 150);
}

struct StaleFixture : ::testing::Test {
  temp_dir tmp;
  config::master_config cfg = make_config(tmp.path);
  pki::key_store keys{cfg.pki_dir};
  master::master_keys mk = master::master_keys::from_key(cached_key(0));
  master::aes_manager aes{cached_key(0)};
  void SetUp() override {
    ASSERT_TRUE(keys.ensure_dirs());
    ASSERT_TRUE(aes.rotate());
  }
  master::auth_context ctx() {
    master::auth_context c;
    c.cfg = &cfg;
    c.keys = &keys;
    c.mkeys = &mk;
    c.aes = aes.current();
    c.version = 3;
    c.session_key = [](const std::string&) -> result<std::string> {
      return crypto::crypticle::generate_key_string();
    };
    c.connected_ids = [] { return std::vector<std::string>{}; };
    return c;
  }
};

TEST_F(StaleFixture, SignInThatWaitedPastAuthTimeoutIsDroppedBeforeRsa) {
  fake_minion m{"m1", cached_key(1)};
  ASSERT_TRUE(keys.write(pki::key_state::accepted, "m1", m.key.public_pem()));
  auto c = ctx();
  c.waited = 6s;
  const auto before = master::stale_auth_dropped();
  auto out = master::authenticate(m.auth_load("0123456789abcdef0123456789abcdef", &mk.pub()), c);
  EXPECT_EQ(out.result, "stale");
  EXPECT_EQ(out.id, "m1");
  EXPECT_TRUE(out.reply.is_object() && out.reply.empty());  // nothing signed, nothing decrypted
  EXPECT_TRUE(out.actions.empty());
  EXPECT_EQ(master::stale_auth_dropped(), before + 1);
  // A new minion's stale first sign-in does not file a pending key either.
  fake_minion n{"new1", cached_key(2)};
  auto o2 = master::authenticate(n.auth_load("0123456789abcdef0123456789abcdef"), c);
  EXPECT_EQ(o2.result, "stale");
  EXPECT_TRUE(o2.actions.empty());
}

TEST_F(StaleFixture, FreshSignInIsServed) {
  fake_minion m{"m1", cached_key(1)};
  ASSERT_TRUE(keys.write(pki::key_state::accepted, "m1", m.key.public_pem()));
  auto c = ctx();
  c.waited = 4s;  // under the 5 s auth_timeout
  auto out = master::authenticate(m.auth_load("0123456789abcdef0123456789abcdef", &mk.pub()), c);
  EXPECT_EQ(out.result, "accept");
  EXPECT_TRUE(wire::find(out.reply, "sig"));
}

}  // namespace
}  // namespace sylvite::test
