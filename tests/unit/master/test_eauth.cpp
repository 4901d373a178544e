// eauth_service (master/api/eauth.hpp): the file backend's variants, tokens (round trip,
// Salt 3008.5's on-disk format, expiry, hostile token files on a shared folder) and the
// ACL decision for lowstate chunks of every client.
#include <crypt.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/api/eauth.hpp"
#include "master/api/eauth_acl.hpp"
#include "master/api/eauth_backends.hpp"

namespace sylvite::master::api {
namespace {

namespace fs = std::filesystem;
using wire::value;

value J(const char* s) { return value::parse(s); }

struct tmp {
  fs::path path;
  tmp() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() / ("sylvite-eauth-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~tmp() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::vector<std::string> expand_fixed(const value& tgt, const std::string& tt) {
  static const std::vector<std::string> all = {"web1", "web2", "db1"};
  std::vector<std::string> out;
  if (tt == "list") {
    if (tgt.is_array())
      for (const auto& t : tgt) out.push_back(t.get<std::string>());
    return out;
  }
  auto s = wire::as_text(tgt);
  if (!s) return out;
  for (const auto& m : all)
    if (acl::expr_match(m, *s)) out.push_back(m);
  return out;
}

struct fixture : ::testing::Test {
  tmp dir;
  config::master_config cfg;
  void SetUp() override {
    cfg.cachedir = dir.path / "cache";
    write(dir.path / "users.txt", "dean:goneFishing\ngene:OceanMan\n");
  }
  std::unique_ptr<eauth_service> make(const char* external_auth_json) {
    cfg.raw = value::object();
    cfg.raw["external_auth"] = J(external_auth_json);
    auto s = std::make_unique<eauth_service>(cfg, expand_fixed);
    s->set_failure_delay(0);
    return s;
  }
  std::string users() const { return (dir.path / "users.txt").string(); }
};

using EauthService = fixture;

TEST_F(EauthService, FilePlaintextDocsExample) {
  // salt/auth/file.py's docstring example.
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "gene": [".*"], "dean": ["test.*"]}})";
  auto s = make(t.c_str());
  EXPECT_TRUE(s->enabled());
  auto who = s->authenticate("file", "dean", "goneFishing");
  ASSERT_TRUE(who);
  EXPECT_EQ(who->name, "dean");
  EXPECT_EQ(who->eauth, "file");
  EXPECT_EQ(who->perms, J(R"(["test.*"])"));
  EXPECT_FALSE(s->authenticate("file", "dean", "OceanMan"));
  EXPECT_FALSE(s->authenticate("file", "nobody", "x"));
  EXPECT_FALSE(s->authenticate("pam", "dean", "goneFishing"));  // backend not enabled
  EXPECT_FALSE(s->authenticate("", "dean", "goneFishing"));
}

TEST_F(EauthService, FileUserNotInTableRefused) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "gene": [".*"]}})";
  auto s = make(t.c_str());
  EXPECT_FALSE(s->authenticate("file", "dean", "goneFishing"));
  EXPECT_TRUE(s->authenticate("file", "gene", "OceanMan"));
}

TEST_F(EauthService, FileLegacyHashedFormat) {
  // salt/auth/file.py: ^hashtype md5, fields 2 and 3, '|' separator.
  auto md5 = [](const std::string& p) { return *crypto::hash_hex(p, "md5"); };
  write(dir.path / "legacy.txt", "46|trey|" + md5("phish") + "\n555|mike|" + md5("gordon") + "\n");
  std::string t = R"({"file": {"^filename": ")" + (dir.path / "legacy.txt").string() +
                  R"(", "^filetype": "text", "^hashtype": "md5", "^username_field": 2, "^password_field": "3",
                       "^field_separator": "|", "trey": [".*"], "mike": [".*"]}})";
  auto s = make(t.c_str());
  EXPECT_TRUE(s->authenticate("file", "trey", "phish"));
  EXPECT_TRUE(s->authenticate("file", "mike", "gordon"));
  EXPECT_FALSE(s->authenticate("file", "trey", "gordon"));
  EXPECT_FALSE(s->authenticate("file", "trey", md5("phish")));  // the hash is not the password
}

TEST_F(EauthService, FileSha256AndSha512AndUnknownHash) {
  for (const char* h : {"sha256", "sha512"}) {
    write(dir.path / "h.txt", "ann:" + *crypto::hash_hex("pw1", h) + "\n");
    std::string t = R"({"file": {"^filename": ")" + (dir.path / "h.txt").string() + R"(", "^hashtype": ")" + h +
                    R"(", "ann": [".*"]}})";
    auto s = make(t.c_str());
    EXPECT_TRUE(s->authenticate("file", "ann", "pw1")) << h;
    EXPECT_FALSE(s->authenticate("file", "ann", "pw2")) << h;
  }
  write(dir.path / "h.txt", "ann:" + *crypto::hash_hex("pw1", "sha1") + "\n");
  std::string t = R"({"file": {"^filename": ")" + (dir.path / "h.txt").string() +
                  R"(", "^hashtype": "sha1", "ann": [".*"]}})";
  EXPECT_FALSE(make(t.c_str())->authenticate("file", "ann", "pw1"));  // hashutil.digest: md5/sha256/sha512 only
}

TEST_F(EauthService, FileQuirks) {
  // A line without the password field ends the search (Salt returns False there).
  write(dir.path / "q.txt", "\ndean:goneFishing\n");
  std::string t = R"({"file": {"^filename": ")" + (dir.path / "q.txt").string() + R"(", "dean": [".*"]}})";
  EXPECT_FALSE(make(t.c_str())->authenticate("file", "dean", "goneFishing"));
  // Missing file, missing ^filename, unknown filetype: refused.
  std::string t2 = R"({"file": {"^filename": ")" + (dir.path / "none.txt").string() + R"(", "dean": [".*"]}})";
  EXPECT_FALSE(make(t2.c_str())->authenticate("file", "dean", "goneFishing"));
  EXPECT_FALSE(make(R"({"file": {"dean": [".*"]}})")->authenticate("file", "dean", "goneFishing"));
  std::string t3 = R"({"file": {"^filename": ")" + users() + R"(", "^filetype": "csv", "dean": [".*"]}})";
  EXPECT_FALSE(make(t3.c_str())->authenticate("file", "dean", "goneFishing"));
  // CRLF files work (Python's universal newlines).
  write(dir.path / "crlf.txt", "dean:goneFishing\r\n");
  std::string t4 = R"({"file": {"^filename": ")" + (dir.path / "crlf.txt").string() + R"(", "dean": [".*"]}})";
  EXPECT_TRUE(make(t4.c_str())->authenticate("file", "dean", "goneFishing"));
}

std::string crypt_with(const std::string& pw, const char* prefix) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  const char* st = ::crypt_gensalt_rn(prefix, 0, nullptr, 0, setting, sizeof setting);
  if (!st) return {};
  crypt_data d{};
  const char* out = ::crypt_r(pw.c_str(), st, &d);
  return out ? out : "";
}

TEST(EauthBackends, HtpasswdHashes) {
  using backends::htpasswd_verify;
  // Apache's documented apr1 vector: htpasswd -nbm myName myPassword style; value from
  // `openssl passwd -apr1 -salt r31..... password`.
  EXPECT_TRUE(htpasswd_verify("$apr1$r31.....$ARC3pREO82RIm0aQ2zszC0", "password"));
  EXPECT_FALSE(htpasswd_verify("$apr1$r31.....$ARC3pREO82RIm0aQ2zszC0", "Password"));
  // md5-crypt ours vs libcrypt's.
  for (const char* pfx : {"$1$", "$5$", "$6$", "$2b$"}) {
    std::string h = crypt_with("s3cret", pfx);
    ASSERT_FALSE(h.empty()) << pfx;
    EXPECT_TRUE(htpasswd_verify(h, "s3cret")) << h;
    EXPECT_FALSE(htpasswd_verify(h, "s3cret!")) << h;
  }
  // {SHA}: base64(sha1("password")).
  EXPECT_TRUE(htpasswd_verify("{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "password"));
  EXPECT_FALSE(htpasswd_verify("{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "passwor"));
  // Plaintext is passlib's last resort.
  EXPECT_TRUE(htpasswd_verify("plainpw", "plainpw"));
}

TEST_F(EauthService, HtpasswdAndHtdigestFiles) {
  write(dir.path / "ht", "# comment\ncory:" + crypt_with("pw", "$6$") + "\nann:$apr1$r31.....$ARC3pREO82RIm0aQ2zszC0\n");
  std::string t = R"({"file": {"^filename": ")" + (dir.path / "ht").string() +
                  R"(", "^filetype": "htpasswd", "cory": [".*"], "ann": [".*"]}})";
  auto s = make(t.c_str());
  EXPECT_TRUE(s->authenticate("file", "cory", "pw"));
  EXPECT_TRUE(s->authenticate("file", "ann", "password"));
  EXPECT_FALSE(s->authenticate("file", "ann", "pw"));
  write(dir.path / "hd", "cory:MySecureRealm:" + *crypto::hash_hex("cory:MySecureRealm:pw", "md5") + "\n");
  std::string d = R"({"file": {"^filename": ")" + (dir.path / "hd").string() +
                  R"(", "^filetype": "htdigest", "^realm": "MySecureRealm", "cory": [".*"]}})";
  EXPECT_TRUE(make(d.c_str())->authenticate("file", "cory", "pw"));
  EXPECT_FALSE(make(d.c_str())->authenticate("file", "cory", "px"));
  std::string nr = R"({"file": {"^filename": ")" + (dir.path / "hd").string() +
                   R"(", "^filetype": "htdigest", "cory": [".*"]}})";
  EXPECT_FALSE(make(nr.c_str())->authenticate("file", "cory", "pw"));  // ^realm required
}

TEST_F(EauthService, TokenRoundTripInSaltFormat) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "dean": ["test.*", "@runner"]}})";
  cfg.hash_type = "sha256";
  auto s = make(t.c_str());
  auto who = s->authenticate("file", "dean", "goneFishing");
  ASSERT_TRUE(who);
  auto tok = s->mint_token(*who);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->token.size(), 64u);  // sha256 hexdigest
  EXPECT_NEAR(tok->expire - tok->start, 43200, 1);
  // On disk: <cachedir>/tokens/<tok>.p, mode 0600, {"data": tdata, "_expires": int}.
  fs::path p = cfg.cachedir / "tokens" / (tok->token + ".p");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto raw = util::read_file(p);
  ASSERT_TRUE(raw);
  auto v = wire::unpack(*raw);
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->contains("data") && v->contains("_expires"));
  EXPECT_TRUE((*v)["_expires"].is_number_integer());
  EXPECT_EQ((*v)["data"]["name"], "dean");
  EXPECT_EQ((*v)["data"]["eauth"], "file");
  EXPECT_EQ((*v)["data"]["token"], tok->token);
  // Read back: same user, perms from the table.
  auto back = s->get_token(tok->token);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->who.name, "dean");
  EXPECT_EQ(back->who.perms, J(R"(["test.*", "@runner"])"));
  EXPECT_DOUBLE_EQ(back->expire, tok->expire);
  // Another service on the same folder (another master) accepts it.
  eauth_service other(cfg, expand_fixed);
  EXPECT_TRUE(other.get_token(tok->token));
  s->delete_token(tok->token);
  EXPECT_FALSE(s->get_token(tok->token));
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(EauthService, TokenExpiry) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "dean": [".*"]}})";
  cfg.raw = value::object();
  auto s = make(t.c_str());
  // A Salt-written token whose expire has passed is refused and removed.
  auto tdir = cfg.cachedir / "tokens";
  fs::create_directories(tdir);
  double now = static_cast<double>(::time(nullptr));
  auto put = [&](const std::string& name, const value& v) { write(tdir / (name + ".p"), wire::pack_payload(v)); };
  put("aa01", value{{"data", {{"start", now - 100}, {"expire", now - 1}, {"name", "dean"}, {"eauth", "file"}}},
                    {"_expires", static_cast<std::int64_t>(now + 100)}});
  EXPECT_FALSE(s->get_token("aa01"));
  EXPECT_FALSE(fs::exists(tdir / "aa01.p"));
  // Envelope expired (Cache.fetch returns {}): refused.
  put("aa02", value{{"data", {{"start", now}, {"expire", now + 100}, {"name", "dean"}, {"eauth", "file"}}},
                    {"_expires", static_cast<std::int64_t>(now - 1)}});
  EXPECT_FALSE(s->get_token("aa02"));
  // Bare tdata (no envelope) and the pre-3008 localfs file (no .p) are accepted.
  put("aa03", value{{"start", now}, {"expire", now + 100}, {"name", "dean"}, {"eauth", "file"}});
  EXPECT_TRUE(s->get_token("aa03"));
  write(tdir / "aa04", wire::pack_payload(value{{"start", now}, {"expire", now + 100}, {"name", "dean"}, {"eauth", "file"}}));
  EXPECT_TRUE(s->get_token("aa04"));
  // No expire: invalid, removed.
  put("aa05", value{{"name", "dean"}, {"eauth", "file"}});
  EXPECT_FALSE(s->get_token("aa05"));
  // A token of a backend this master does not enable: refused.
  put("aa06", value{{"start", now}, {"expire", now + 100}, {"name", "dean"}, {"eauth", "ldap"}});
  EXPECT_FALSE(s->get_token("aa06"));
  // token_expire from the config.
  cfg.raw["token_expire"] = 5;
  eauth_service s2(cfg, expand_fixed);
  auto who = s2.authenticate("file", "dean", "goneFishing");
  ASSERT_TRUE(who);
  auto tok = s2.mint_token(*who);
  ASSERT_TRUE(tok);
  EXPECT_NEAR(tok->expire - tok->start, 5, 0.01);
}

TEST_F(EauthService, HostileTokenFilesRefusedNeverCrash) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "dean": [".*"]}})";
  auto s = make(t.c_str());
  auto tdir = cfg.cachedir / "tokens";
  fs::create_directories(tdir);
  double now = static_cast<double>(::time(nullptr));
  std::string good = wire::pack_payload(value{{"start", now}, {"expire", now + 100}, {"name", "dean"}, {"eauth", "file"}});
  // Truncated msgpack.
  write(tdir / "b1.p", good.substr(0, good.size() / 2));
  EXPECT_FALSE(s->get_token("b1"));
  // Not msgpack at all / not a map / empty.
  write(tdir / "b2.p", "this is not msgpack, it's text\n");
  EXPECT_FALSE(s->get_token("b2"));
  write(tdir / "b3.p", wire::pack_payload(value::array({1, 2, 3})));
  EXPECT_FALSE(s->get_token("b3"));
  write(tdir / "b4.p", "");
  EXPECT_FALSE(s->get_token("b4"));
  // A directory, a symlink to a good token, a FIFO: refused and left alone.
  fs::create_directories(tdir / "b5.p");
  EXPECT_FALSE(s->get_token("b5"));
  EXPECT_TRUE(fs::is_directory(tdir / "b5.p"));
  write(dir.path / "elsewhere", good);
  fs::create_symlink(dir.path / "elsewhere", tdir / "b6.p");
  EXPECT_FALSE(s->get_token("b6"));
  EXPECT_TRUE(fs::exists(dir.path / "elsewhere"));
  ASSERT_EQ(::mkfifo((tdir / "b7.p").c_str(), 0600), 0);
  EXPECT_FALSE(s->get_token("b7"));
  // Huge: more than 64 KiB.
  write(tdir / "b8.p", std::string(1 << 20, '\x91'));
  EXPECT_FALSE(s->get_token("b8"));
  // Wrong field types.
  write(tdir / "b9.p", wire::pack_payload(value{{"expire", "tomorrow"}, {"name", "dean"}, {"eauth", "file"}}));
  EXPECT_FALSE(s->get_token("b9"));
  write(tdir / "ba.p", wire::pack_payload(value{{"expire", now + 100}, {"name", 5}, {"eauth", "file"}}));
  EXPECT_FALSE(s->get_token("ba"));
  // Deeply nested.
  std::string deep(100000, '\x91');
  deep += '\xc0';
  write(tdir / "bb.p", deep);
  EXPECT_FALSE(s->get_token("bb"));
  // Names: hex only, bounded, checked before touching the file system.
  write(dir.path / "cache" / "x.p", good);
  for (const char* bad : {"", "../x", "..", "/etc/passwd", "b1.p", "zz", "b1\n", "ab cd", "ABCDEFG"})
    EXPECT_FALSE(s->get_token(bad)) << bad;
  EXPECT_FALSE(s->get_token(std::string(129, 'a')));
  s->delete_token("../x");
  EXPECT_TRUE(fs::exists(dir.path / "cache" / "x.p"));
  // Still serving.
  auto who = s->authenticate("file", "dean", "goneFishing");
  ASSERT_TRUE(who);
  auto tok = s->mint_token(*who);
  ASSERT_TRUE(tok);
  EXPECT_TRUE(s->get_token(tok->token));
}

TEST_F(EauthService, CheckLowstateChunks) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(",
      "dean": ["test.*", {"web*": ["pkg.*", {"cmd.run": {"args": ["ls.*"]}}]}, "@jobs", {"@wheel": ["key.list.*"]}],
      "gene": ["@runner", "@wheel"]}})";
  auto s = make(t.c_str());
  auto dean = *s->authenticate("file", "dean", "goneFishing");
  auto gene = *s->authenticate("file", "gene", "OceanMan");
  auto ok = [&](const identity& w, const char* chunk) { return s->check(w, J(chunk)).allowed; };
  EXPECT_TRUE(ok(dean, R"({"client": "local", "tgt": "*", "fun": "test.ping"})"));
  EXPECT_TRUE(ok(dean, R"({"client": "local_async", "tgt": "web*", "fun": "pkg.install", "arg": ["vim"]})"));
  EXPECT_FALSE(ok(dean, R"({"client": "local", "tgt": "*", "fun": "pkg.install"})"));  // db1 targeted
  EXPECT_TRUE(ok(dean, R"({"client": "local", "tgt": ["web1", "web2"], "tgt_type": "list", "fun": "pkg.version"})"));
  EXPECT_TRUE(ok(dean, R"({"client": "local", "tgt": "web1", "fun": "cmd.run", "arg": ["ls -l"]})"));
  EXPECT_FALSE(ok(dean, R"({"client": "local", "tgt": "web1", "fun": "cmd.run", "arg": ["rm -rf /"]})"));
  EXPECT_FALSE(ok(dean, R"({"client": "local", "tgt": "web1", "fun": "cmd.run"})"));
  EXPECT_TRUE(ok(dean, R"({"client": "local", "tgt": "web1", "expr_form": "glob", "fun": "saltutil.find_job"})"));
  EXPECT_TRUE(ok(dean, R"({"client": "local_batch", "tgt": "*", "fun": "test.ping", "batch": "50%"})"));
  // Runners: @jobs only for dean; @runner for gene.
  EXPECT_TRUE(ok(dean, R"({"client": "runner", "fun": "jobs.list_jobs"})"));
  EXPECT_TRUE(ok(dean, R"({"client": "jobs"})"));
  EXPECT_FALSE(ok(dean, R"({"client": "runner", "fun": "manage.up"})"));
  EXPECT_TRUE(ok(gene, R"({"client": "runner_async", "fun": "manage.up"})"));
  EXPECT_FALSE(ok(gene, R"({"client": "local", "tgt": "*", "fun": "test.ping"})"));
  // Wheel.
  EXPECT_TRUE(ok(dean, R"({"client": "wheel", "fun": "key.list_all"})"));
  EXPECT_FALSE(ok(dean, R"({"client": "wheel", "fun": "key.delete", "match": "web1"})"));
  EXPECT_TRUE(ok(gene, R"({"client": "wheel_async", "fun": "key.accept", "match": "web1"})"));
  // Refusal kinds and texts.
  auto d = s->check(dean, J(R"({"client": "local", "tgt": "*", "fun": "pkg.install"})"));
  EXPECT_EQ(d.why, refusal::forbidden);
  EXPECT_EQ(d.reason, "Authorization error occurred.");
  d = s->check(dean, J(R"({"client": "runner", "fun": "manage.up"})"));
  EXPECT_EQ(d.why, refusal::forbidden);
  EXPECT_EQ(d.reason, "Authentication failure of type \"token\" occurred for user dean.");
  d = s->check(gene, J(R"({"client": "runner", "fun": "manageup"})"));
  EXPECT_EQ(d.why, refusal::bad_request);
  for (const char* bad : {R"([])", R"({"fun": "test.ping"})", R"({"client": "local", "tgt": "*"})",
                          R"({"client": "local", "fun": "test.ping"})", R"({"client": "ssh", "fun": "test.ping"})",
                          R"({"client": 5, "fun": "test.ping"})", R"({"client": "runner"})"})
    EXPECT_EQ(s->check(dean, J(bad)).why, refusal::bad_request) << bad;
  // Hostile shapes never crash and never allow.
  for (const char* weird : {R"({"client": "local", "tgt": "*", "fun": ["test.ping"], "arg": 5})",
                            R"({"client": "local", "tgt": "web1", "fun": "cmd.run", "arg": {"a": 1}})",
                            R"({"client": "wheel", "fun": "key.list_all", "kwarg": [1]})",
                            R"({"client": "local", "tgt": 7, "fun": "pkg.install"})"}) {
    auto r = s->check(dean, J(weird));
    (void)r;
  }
}

TEST_F(EauthService, LoginPermsAndGroupsFromToken) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "dean": ["test.*"], "*": ["@jobs"]}})";
  auto s = make(t.c_str());
  auto who = s->authenticate("file", "dean", "goneFishing");
  ASSERT_TRUE(who);
  EXPECT_EQ(s->login_perms(*who), J(R"(["@jobs", "test.*"])"));
  EXPECT_EQ(who->perms, J(R"(["test.*"])"));  // fill_auth_list: '*' only when the name did not match
}

TEST_F(EauthService, PublisherAcl) {
  cfg.raw = value::object();
  cfg.raw["publisher_acl"] = J(R"({"fred": ["test.*", {"web*": ["pkg.*"]}], "ops.*": [".*"]})");
  cfg.raw["publisher_acl_blacklist"] = J(R"({"users": ["mallory"], "modules": ["cmd.*"]})");
  cfg.user = "salt";
  eauth_service s(cfg, expand_fixed);
  EXPECT_TRUE(s.publisher_acl_configured());
  auto ok = [&](const char* user, const char* fun, const char* tgt) {
    return s.check_publisher(user, value(fun), J("[]"), value(tgt), "glob").allowed;
  };
  EXPECT_TRUE(ok("root", "pkg.install", "*"));
  EXPECT_TRUE(ok("salt", "pkg.install", "*"));    // the master's own user
  EXPECT_FALSE(ok("root", "cmd.run", "*"));       // the blacklist applies to everyone
  EXPECT_TRUE(ok("fred", "test.ping", "*"));
  EXPECT_TRUE(ok("fred", "pkg.install", "web*"));
  EXPECT_FALSE(ok("fred", "pkg.install", "*"));
  EXPECT_FALSE(ok("fred", "cmd.run", "web1"));
  EXPECT_TRUE(ok("opsadmin", "disk.usage", "*"));
  EXPECT_FALSE(ok("mallory", "test.ping", "*"));
  auto d = s.check_publisher("eve", value("test.ping"), J("[]"), value("*"), "glob");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.why, refusal::unauthorized);
  EXPECT_EQ(d.reason, "Authentication error occurred.");
  d = s.check_publisher("fred", "pkg.install", value("*"), "glob");
  EXPECT_EQ(d.why, refusal::forbidden);
  EXPECT_EQ(d.reason, "Authorization error occurred.");
}

TEST_F(EauthService, FailedAuthenticationIsPadded) {
  std::string t = R"({"file": {"^filename": ")" + users() + R"(", "dean": [".*"]}})";
  auto s = make(t.c_str());
  s->set_failure_delay(0.2);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s->authenticate("file", "dean", "wrong"));
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 0.15);
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(s->authenticate("file", "dean", "goneFishing"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.15);
}

}  // namespace
}  // namespace sylvite::master::api
