// cluster_pki: once-only creation under a race, peer key checks, locked AES rotation.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_test_util.hpp"
#include "cluster/cluster_pki.hpp"
#include "core/util/files.hpp"

namespace fs = std::filesystem;
using sylvite::test::tmpdir;
using namespace sylvite;

namespace {
// fcntl locks exclude processes (masters), not threads of one process: run `rotate` in
// four forked processes at once. How many rotated; -1 if one failed or did not exit.
template <class F>
int rotations_by_four_processes(F rotate) {
  std::vector<pid_t> kids;
  bool ok = true;
  for (int i = 0; i < 4 && ok; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto r = rotate();
      ::_exit(!r ? 2 : (r->rotated ? 1 : 0));
    }
    if (pid < 0) ok = false;
    else kids.push_back(pid);
  }
  int rotated = 0;
  for (pid_t pid : kids) {  // every child started is waited for, also after a failed fork
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 2) ok = false;
    else rotated += WEXITSTATUS(st);
  }
  return ok ? rotated : -1;
}
}  // namespace

TEST(ClusterPki, ConcurrentStartersEndWithOneKeyPair) {
  tmpdir t;
  constexpr int n = 6;
  std::vector<std::string> pubs(n);
  std::vector<int> created(n, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i) {
    th.emplace_back([&, i] {
      auto k = cluster::load_or_create_cluster_keys(t.p, 1024);
      ASSERT_TRUE(k) << k.error().message();
      pubs[i] = k->pub_pem;
      created[i] = k->created ? 1 : 0;
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(std::set<std::string>(pubs.begin(), pubs.end()).size(), 1u);
  EXPECT_EQ(created[0] + created[1] + created[2] + created[3] + created[4] + created[5], 1);
  EXPECT_EQ(util::read_file(t.p / "cluster.pub").value(), pubs[0]);
  // no temp files left behind
  for (const auto& e : fs::directory_iterator(t.p)) {
    auto name = e.path().filename().string();
    EXPECT_TRUE(name == "cluster.pem" || name == "cluster.pub") << name;
  }
}

TEST(ClusterPki, StalePubIsRewrittenFromThePem) {
  tmpdir t;
  auto k = cluster::load_or_create_cluster_keys(t.p, 1024).value();
  std::ofstream(t.p / "cluster.pub") << "garbage";
  auto again = cluster::load_or_create_cluster_keys(t.p, 1024).value();
  EXPECT_FALSE(again.created);
  EXPECT_EQ(util::read_file(t.p / "cluster.pub").value(), k.pub_pem);
}

TEST(ClusterPki, AesCreatedOnceAndRotationIsAdoptedByTheLoser) {
  tmpdir t;
  auto a = cluster::load_or_create_aes(t.p).value();
  auto b = cluster::load_or_create_aes(t.p).value();
  EXPECT_TRUE(a.created);
  EXPECT_FALSE(b.created);
  EXPECT_EQ(a.key, b.key);
  // master A rotates; master B, still holding the old key, asks to rotate too: it adopts A's.
  auto ra = cluster::rotate_aes(t.p, a.key).value();
  EXPECT_TRUE(ra.rotated);
  EXPECT_NE(ra.now.key, a.key);
  auto rb = cluster::rotate_aes(t.p, b.key).value();
  EXPECT_FALSE(rb.rotated);
  EXPECT_EQ(rb.now.key, ra.now.key);
  EXPECT_EQ(cluster::read_aes(t.p).value().key, ra.now.key);
}

// fcntl locks exclude processes (masters), not threads of one process (the master
// serialises its own rotations): race four processes.
TEST(ClusterPki, ConcurrentRotationsByProcessesRotateOnce) {
  tmpdir t;
  auto a = cluster::load_or_create_aes(t.p).value();
  EXPECT_EQ(rotations_by_four_processes([&] { return cluster::rotate_aes(t.p, a.key); }), 1);
  EXPECT_NE(cluster::read_aes(t.p).value().key, a.key);
}

TEST(ClusterPki, EveryWriteOfTheAesKeyMovesItsGeneration) {
  tmpdir t;
  const auto ms = [] {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  };
  const auto before = ms();
  auto a = cluster::load_or_create_aes(t.p).value();
  EXPECT_EQ(a.gen, 0u);  // read_aes does not read it: only the locked reads pair them
  const auto g0 = cluster::read_aes_gen(t.p);
  EXPECT_GE(g0, before);  // ms since the epoch at the creation
  EXPECT_EQ(cluster::read_aes_locked(t.p).value().gen, g0);
  // A generation ahead of the clock (a master whose clock runs fast) still grows by one.
  ASSERT_TRUE(cluster::write_aes_gen(t.p, g0 + 100000));
  auto r1 = cluster::rotate_aes(t.p, a.key).value();
  EXPECT_EQ(r1.now.gen, g0 + 100001);
  auto adopted = cluster::rotate_aes(t.p, a.key).value();  // stale expected: adopts, no move
  EXPECT_FALSE(adopted.rotated);
  EXPECT_EQ(adopted.now.gen, r1.now.gen);
  auto r2 = cluster::rotate_aes(t.p, r1.now.key).value();
  EXPECT_EQ(r2.now.gen, r1.now.gen + 1);
  auto l = cluster::read_aes_locked(t.p).value();
  EXPECT_EQ(l.key, r2.now.key);
  EXPECT_EQ(l.gen, r2.now.gen);
  // .aes.gen lost or damaged: the next write starts again from the clock, which is ahead
  // of every generation that came from it.
  std::ofstream(t.p / ".aes.gen") << "x1";
  EXPECT_EQ(cluster::read_aes_gen(t.p), 0u);
  const auto r3 = cluster::rotate_aes(t.p, r2.now.key).value();
  EXPECT_GE(r3.now.gen, g0);
  EXPECT_EQ(cluster::read_aes_gen(t.p), r3.now.gen);
}

// Masters sharing cachedir see one drop file: the first rotates and removes it under the
// lock, the others adopt that key even though their own key is already the new one (the
// race that rotated twice: a master picked up the first rotation, then rotated again).
TEST(ClusterPki, OneDropFileRotatesOnce) {
  tmpdir t;
  const fs::path dfn = t.p / ".dfn";
  auto a = cluster::load_or_create_aes(t.p).value();
  std::ofstream(dfn) << "m1";
  ::chmod(dfn.c_str(), 0400);
  auto first = cluster::rotate_aes(t.p, a.key, &dfn).value();
  EXPECT_TRUE(first.rotated);
  EXPECT_FALSE(fs::exists(dfn));
  auto second = cluster::rotate_aes(t.p, first.now.key, &dfn).value();  // already on the new key
  EXPECT_FALSE(second.rotated);
  EXPECT_EQ(second.now.key, first.now.key);
  EXPECT_EQ(second.now.gen, first.now.gen);
  // Without the drop file the same call rotates (its expected key is the current one).
  EXPECT_TRUE(cluster::rotate_aes(t.p, first.now.key).value().rotated);
  // A drop file rotates even when another master rotated since this one loaded its key.
  std::ofstream(dfn) << "m1";
  auto late = cluster::rotate_aes(t.p, a.key, &dfn).value();
  EXPECT_TRUE(late.rotated);
  EXPECT_FALSE(fs::exists(dfn));
}

TEST(ClusterPki, OneDropFileRotatesOnceAcrossProcesses) {
  tmpdir t;
  const fs::path dfn = t.p / ".dfn";
  auto a = cluster::load_or_create_aes(t.p).value();
  std::ofstream(dfn) << "m1";
  EXPECT_EQ(rotations_by_four_processes([&] { return cluster::rotate_aes(t.p, a.key, &dfn); }), 1);
  EXPECT_FALSE(fs::exists(dfn));
}

TEST(ClusterPki, UnreadableAesIsAnErrorNotACrash) {
  tmpdir t;
  std::ofstream(t.p / ".aes") << "not a key";
  auto r = cluster::read_aes(t.p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), cluster::errc::unreadable);
}

TEST(ClusterPki, PeerKeyWrittenOnceAndMismatchRefused) {
  tmpdir t;
  auto k1 = crypto::rsa_key::generate(1024).value();
  auto k2 = crypto::rsa_key::generate(1024).value();
  ASSERT_TRUE(cluster::ensure_peer_key(t.p, "m1", k1.public_pem()));
  ASSERT_TRUE(cluster::ensure_peer_key(t.p, "m1", k1.public_pem()));  // restart
  auto r = cluster::ensure_peer_key(t.p, "m1", k2.public_pem());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), cluster::errc::peer_key_mismatch);
  EXPECT_EQ(cluster::list_peer_keys(t.p).size(), 1u);
  EXPECT_TRUE(cluster::peer_key(t.p, "m1"));
}

TEST(ClusterPki, PeerIdsThatAreNotFileNamesAreRefused) {
  tmpdir t;
  auto k = crypto::rsa_key::generate(1024).value();
  for (std::string bad : {"../x", "a/b", "", ".", "..", ".hidden"}) {
    auto r = cluster::ensure_peer_key(t.p, bad, k.public_pem());
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error(), cluster::errc::bad_id) << bad;
    EXPECT_FALSE(cluster::peer_key(t.p, bad)) << bad;
  }
  EXPECT_FALSE(fs::exists(t.p / "x.pub"));
}

TEST(ClusterPki, RotateClusterKeysKeepsTheOldPairAndWritesANewOne) {
  tmpdir t;
  auto k0 = cluster::load_or_create_cluster_keys(t.p, 1024);
  ASSERT_TRUE(k0);
  auto r = cluster::rotate_cluster_keys(t.p, 1024);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->old_pub_pem, k0->pub_pem);
  EXPECT_NE(r->pub_pem, k0->pub_pem);
  EXPECT_EQ(*util::read_file(t.p / "cluster.pub"), r->pub_pem);
  EXPECT_EQ(*util::read_file(t.p / "cluster.pub.old"), k0->pub_pem);
  EXPECT_EQ(*util::read_file(t.p / "cluster.pem"), r->priv.private_pem());
  EXPECT_EQ(*util::read_file(t.p / "cluster.pem.old"), k0->priv.private_pem());
  EXPECT_EQ(fs::status(t.p / "cluster.pem").permissions() & fs::perms::all, fs::perms::owner_read);
  // A later start loads the new pair.
  auto k1 = cluster::load_or_create_cluster_keys(t.p, 1024);
  ASSERT_TRUE(k1);
  EXPECT_EQ(k1->pub_pem, r->pub_pem);
  // A local copy installs a given key; a bad one changes nothing.
  auto given = crypto::rsa_key::generate(1024);
  ASSERT_TRUE(given);
  auto r2 = cluster::rotate_cluster_keys(t.p, 1024, given->private_pem());
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->pub_pem, given->public_pem());
  EXPECT_EQ(r2->old_pub_pem, r->pub_pem);
  EXPECT_FALSE(cluster::rotate_cluster_keys(t.p, 1024, std::string("not a key")));
  EXPECT_EQ(*util::read_file(t.p / "cluster.pub"), given->public_pem());
}
