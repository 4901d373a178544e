// key_store tests: Salt's valid_id table, state moves and listing, modes, and
// load_or_generate_keypair (generate, reload, corrupt .pem refused, .pub rewritten).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"

namespace fs = std::filesystem;
using namespace sylvite;
using namespace sylvite::pki;

namespace {
class PkiDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("sylvite-pki-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static unsigned mode_of(const fs::path& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return st.st_mode & 07777;
  }
  fs::path dir_;
};
}  // namespace

TEST(ValidId, SaltTable) {
  struct c {
    std::string id;
    bool ok;
  } cases[] = {
      {"minion1", true},
      {"web-01.example.com", true},
      {"UPPER_case", true},
      {"é-unicode", true},
      {".hidden", false},  // sylvite: no leading dot (hidden files, atomic-write temps)
      {"...", false},
      {"a.b.", true},
      {"tab\there", false},  // control characters (log/terminal injection)
      {"nl\n", false},
      {"del\x7f", false},
      {"a b", true},
      {"", false},
      {".", false},
      {"..", false},
      {"../x", false},
      {"a/b", false},
      {"/abs", false},
      {"a\\b", false},
      {std::string("a\0b", 3), false},
      {std::string(255, 'a'), true},
      {std::string(256, 'a'), false},
  };
  for (const auto& t : cases) EXPECT_EQ(valid_id(t.id), t.ok) << "'" << t.id << "'";
}

TEST_F(PkiDir, ValidIdRefusesSymlinkEscapes) {
  fs::create_directories(dir_ / "outside");
  fs::create_directories(dir_ / "pki");
  fs::create_symlink(dir_ / "outside" / "target", dir_ / "pki" / "evil");
  fs::create_symlink("inside2", dir_ / "pki" / "ok_link");
  EXPECT_FALSE(valid_id(dir_ / "pki", "evil"));
  EXPECT_TRUE(valid_id(dir_ / "pki", "ok_link"));
  EXPECT_TRUE(valid_id(dir_ / "pki", "plain"));
  EXPECT_FALSE(valid_id(dir_ / "pki", ".."));
  EXPECT_FALSE(valid_id(dir_ / "pki", "a/b"));
}

TEST(KeyState, Names) {
  EXPECT_EQ(dir_name(key_state::accepted), "minions");
  EXPECT_EQ(dir_name(key_state::pending), "minions_pre");
  EXPECT_EQ(dir_name(key_state::rejected), "minions_rejected");
  EXPECT_EQ(dir_name(key_state::denied), "minions_denied");
  EXPECT_EQ(state_name(key_state::pending), "pending");
  for (auto [s, st] : std::initializer_list<std::pair<const char*, key_state>>{
           {"accepted", key_state::accepted}, {"acc", key_state::accepted}, {"pending", key_state::pending},
           {"pre", key_state::pending}, {"un", key_state::pending}, {"unaccepted", key_state::pending},
           {"rejected", key_state::rejected}, {"rej", key_state::rejected}, {"denied", key_state::denied},
           {"den", key_state::denied}}) {
    ASSERT_TRUE(parse_state(s)) << s;
    EXPECT_EQ(*parse_state(s), st) << s;
  }
  EXPECT_FALSE(parse_state("all"));
  EXPECT_FALSE(parse_state(""));
}

TEST_F(PkiDir, EnsureDirsCreatesStateDirs0700) {
  key_store ks(dir_ / "pki");
  ASSERT_TRUE(ks.ensure_dirs());
  for (const char* d : {"minions", "minions_pre", "minions_rejected", "minions_denied", "minions_autosign"}) {
    EXPECT_TRUE(fs::is_directory(dir_ / "pki" / d)) << d;
    EXPECT_EQ(mode_of(dir_ / "pki" / d), 0700u) << d;
  }
  EXPECT_TRUE(ks.ensure_dirs());  // idempotent
}

TEST_F(PkiDir, StateMovesAndListing) {
  key_store ks(dir_);
  ASSERT_TRUE(ks.ensure_dirs());
  EXPECT_FALSE(ks.state_of("m1"));
  ASSERT_TRUE(ks.write(key_state::pending, "m1", "PEM1"));
  ASSERT_TRUE(ks.write(key_state::pending, "m2", "PEM2"));
  ASSERT_TRUE(ks.write(key_state::pending, "a0", "PEM0"));
  EXPECT_EQ(mode_of(ks.path(key_state::pending, "m1")), 0644u);
  EXPECT_EQ(ks.list(key_state::pending), (std::vector<std::string>{"a0", "m1", "m2"}));
  EXPECT_EQ(*ks.state_of("m1"), key_state::pending);
  EXPECT_EQ(*ks.read(key_state::pending, "m1"), "PEM1");

  ASSERT_TRUE(ks.move("m1", key_state::pending, key_state::accepted));
  EXPECT_FALSE(ks.exists(key_state::pending, "m1"));
  EXPECT_TRUE(ks.exists(key_state::accepted, "m1"));
  EXPECT_EQ(*ks.read(key_state::accepted, "m1"), "PEM1");
  EXPECT_EQ(*ks.state_of("m1"), key_state::accepted);

  ASSERT_TRUE(ks.move("m2", key_state::pending, key_state::rejected));
  EXPECT_EQ(*ks.state_of("m2"), key_state::rejected);
  // accepted wins over pending wins over rejected; denied is separate
  ASSERT_TRUE(ks.write(key_state::pending, "m2", "PEM2b"));
  EXPECT_EQ(*ks.state_of("m2"), key_state::pending);
  ASSERT_TRUE(ks.write(key_state::denied, "m1", "OTHER"));
  EXPECT_EQ(*ks.state_of("m1"), key_state::accepted);
  EXPECT_EQ(ks.list(key_state::denied), std::vector<std::string>{"m1"});

  // Moving a missing key fails and changes nothing.
  auto r = ks.move("ghost", key_state::pending, key_state::accepted);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), util::errc::not_found);
  EXPECT_FALSE(ks.exists(key_state::accepted, "ghost"));

  ASSERT_TRUE(ks.remove(key_state::accepted, "m1"));
  ASSERT_TRUE(ks.remove(key_state::accepted, "m1"));  // missing is fine
  EXPECT_FALSE(ks.exists(key_state::accepted, "m1"));
  EXPECT_FALSE(ks.read(key_state::accepted, "m1"));

  // Overwrite keeps one file, new content.
  ASSERT_TRUE(ks.write(key_state::accepted, "a0", "X"));
  ASSERT_TRUE(ks.write(key_state::accepted, "a0", "Y"));
  EXPECT_EQ(*ks.read(key_state::accepted, "a0"), "Y");
  EXPECT_EQ(ks.list(key_state::accepted), std::vector<std::string>{"a0"});
}

TEST_F(PkiDir, InvalidIdsNeverTouchTheFilesystem) {
  key_store ks(dir_ / "pki");
  ASSERT_TRUE(ks.ensure_dirs());
  std::ofstream(dir_ / "secret") << "s";
  for (const std::string& id : std::vector<std::string>{"../../secret", "..", ".", "", "a/b", std::string("x\0y", 3)}) {
    auto w = ks.write(key_state::accepted, id, "PEM");
    ASSERT_FALSE(w) << id;
    EXPECT_EQ(w.error(), util::errc::invalid_argument);
    EXPECT_FALSE(ks.read(key_state::accepted, id));
    EXPECT_FALSE(ks.exists(key_state::accepted, id));
    EXPECT_FALSE(ks.remove(key_state::accepted, id));
    EXPECT_FALSE(ks.move(id, key_state::accepted, key_state::rejected));
  }
  EXPECT_TRUE(fs::exists(dir_ / "secret"));
  EXPECT_FALSE(fs::exists(dir_ / "pki" / "minions" / "a"));
}

TEST_F(PkiDir, ListingSkipsTempFilesDirsAndMissingDirs) {
  key_store ks(dir_);
  EXPECT_TRUE(ks.list(key_state::accepted).empty());  // no dir yet
  ASSERT_TRUE(ks.ensure_dirs());
  std::ofstream(dir_ / "minions" / ".m1.tmp.host.1.0") << "partial";
  fs::create_directories(dir_ / "minions" / "subdir");
  ASSERT_TRUE(ks.write(key_state::accepted, "m1", "PEM"));
  EXPECT_EQ(ks.list(key_state::accepted), std::vector<std::string>{"m1"});
}

TEST_F(PkiDir, KeypairGeneratedThenReloaded) {
  fs::path d = dir_ / "pki" / "master";
  auto k1 = load_or_generate_keypair(d, "master", 2048);
  ASSERT_TRUE(k1) << k1.error().message();
  EXPECT_TRUE(k1->has_private());
  EXPECT_EQ(mode_of(d / "master.pem"), 0400u);
  EXPECT_EQ(mode_of(d / "master.pub"), 0644u);
  EXPECT_EQ(mode_of(d), 0700u);
  auto pub = util::read_file(d / "master.pub");
  ASSERT_TRUE(pub);
  EXPECT_EQ(*pub, k1->public_pem());
  auto pem = util::read_file(d / "master.pem");
  ASSERT_TRUE(pem);
  EXPECT_NE(pem->find("BEGIN RSA PRIVATE KEY"), std::string::npos);

  auto k2 = load_or_generate_keypair(d, "master", 2048);
  ASSERT_TRUE(k2);
  EXPECT_EQ(k2->public_pem(), k1->public_pem());  // same key, not regenerated

  // Missing .pub is rewritten from the private key.
  fs::remove(d / "master.pub");
  auto k3 = load_or_generate_keypair(d, "master");
  ASSERT_TRUE(k3);
  EXPECT_EQ(*util::read_file(d / "master.pub"), k1->public_pem());
}

TEST_F(PkiDir, CorruptPemIsRefusedAndKept) {
  fs::path d = dir_ / "pki";
  fs::create_directories(d);
  std::ofstream(d / "minion.pem") << "-----BEGIN RSA PRIVATE KEY-----\ngarbage\n-----END RSA PRIVATE KEY-----\n";
  auto k = load_or_generate_keypair(d, "minion");
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error(), crypto::errc::bad_key);
  EXPECT_FALSE(fs::exists(d / "minion.pub"));
  EXPECT_NE(util::read_file(d / "minion.pem")->find("garbage"), std::string::npos);  // untouched

  // A public key where the private one should be is refused too.
  fs::path d2 = dir_ / "pki2";
  auto good = load_or_generate_keypair(d2, "x");
  ASSERT_TRUE(good);
  fs::create_directories(dir_ / "pki3");
  std::ofstream(dir_ / "pki3" / "y.pem") << good->public_pem();
  auto bad = load_or_generate_keypair(dir_ / "pki3", "y");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), crypto::errc::bad_key);
}

// Issue 14 item 8: a symlink planted in a key directory (shared filesystem) is not
// followed: it reads as absent, so it can neither leak the file it points at nor make an
// attacker's key file count as an accepted key.
TEST_F(PkiDir, PlantedSymlinkToASecretIsRefused) {
  key_store ks(dir_ / "pki");
  ASSERT_TRUE(ks.ensure_dirs());
  fs::create_directories(dir_ / "elsewhere");
  {
    std::ofstream(dir_ / "elsewhere" / "secret.pem") << "-----BEGIN RSA PRIVATE KEY-----\nsecret\n";
  }
  fs::create_symlink(dir_ / "elsewhere" / "secret.pem", ks.path(key_state::accepted, "evil"));
  EXPECT_FALSE(ks.read(key_state::accepted, "evil").has_value());
  EXPECT_FALSE(ks.exists(key_state::accepted, "evil"));
  EXPECT_FALSE(ks.state_of("evil").has_value());
  EXPECT_FALSE(ks.move("evil", key_state::accepted, key_state::rejected));
  // A relative link inside the directory is refused the same way.
  ASSERT_TRUE(ks.write(key_state::accepted, "real", "PEM"));
  fs::create_symlink("real", ks.path(key_state::accepted, "alias"));
  EXPECT_FALSE(ks.read(key_state::accepted, "alias").has_value());
  EXPECT_EQ(ks.read(key_state::accepted, "real").value_or(""), "PEM");
  // The util primitive: symlink -> ELOOP, FIFO -> refused without blocking, size bound.
  auto r = util::read_file_nofollow(ks.path(key_state::accepted, "evil"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().value(), ELOOP);
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_FALSE(util::read_file_nofollow(dir_ / "fifo"));
  EXPECT_FALSE(util::read_file_nofollow(ks.path(key_state::accepted, "real"), 2));
  EXPECT_TRUE(util::read_file_nofollow(ks.path(key_state::accepted, "real"), 3));
}

// Issue 14 item 3: a sign-in pub is parsed as an RSA public key of a sane size.
TEST(CheckMinionPub, RefusesNonKeysAndOddSizes) {
  EXPECT_NE(check_minion_pub(std::string(2 << 20, 'A')), "");            // 2 MiB non-key
  EXPECT_NE(check_minion_pub("not a key"), "");
  EXPECT_NE(check_minion_pub("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"), "");
  auto k2048 = crypto::rsa_key::generate(2048).value();
  EXPECT_EQ(check_minion_pub(k2048.public_pem()), "");
  auto k1024 = crypto::rsa_key::generate(1024).value();
  EXPECT_EQ(check_minion_pub(k1024.public_pem()), "");  // = the smallest keysize accepted
  auto k512 = crypto::rsa_key::generate(512);
  if (k512) {
    EXPECT_NE(check_minion_pub(k512->public_pem()), "");
  }
  // A private key is not a public key.
  EXPECT_NE(check_minion_pub(k2048.private_pem()), "");
  // Size bound comes before parsing.
  EXPECT_NE(check_minion_pub(k2048.public_pem() + std::string(9000, '\n')), "");
}
