// The pam eauth backend end to end through libpam and the system's "login" service: as
// root, a throwaway system user with a password (useradd + chpasswd) and a throwaway group,
// authenticated through eauth_service, then removed (also when an assertion fails). Not
// root: skipped with the reason (CI runs as root, where a skip fails the run).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "master/api/eauth.hpp"
#include "master/api/eauth_backends.hpp"

namespace sylvite::master::api {
namespace {

using wire::value;

// Run argv (no shell), stdin = input; exit status.
int run(const std::vector<std::string>& argv, const std::string& input = "") {
  int in[2];
  if (::pipe(in) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::close(in[0]);
    ::close(in[1]);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  ::close(in[0]);
  if (!input.empty()) (void)!::write(in[1], input.data(), input.size());
  ::close(in[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct throwaway_user {
  std::string name, group;
  bool made_user = false, made_group = false;
  throwaway_user() {
    const std::string tag = std::to_string(::getpid() % 100000);
    name = "sylveauth" + tag;
    group = "sylveauthg" + tag;
    made_group = run({"groupadd", group}) == 0;
    made_user = run({"useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", group, name}) == 0;
  }
  ~throwaway_user() {
    if (made_user) run({"userdel", name});
    if (made_group) run({"groupdel", group});
  }
};

TEST(EauthPam, SystemUserThroughLibpam) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: creates a throwaway system user (CI runs as root)";
  throwaway_user u;
  ASSERT_TRUE(u.made_group && u.made_user) << "useradd/groupadd failed";
  const std::string pw = "Corr3ct-Horse-" + std::to_string(::getpid());
  ASSERT_EQ(run({"chpasswd"}, u.name + ":" + pw + "\n"), 0);

  EXPECT_TRUE(backends::pam_auth("login", u.name, pw));
  EXPECT_FALSE(backends::pam_auth("login", u.name, pw + "x"));
  EXPECT_FALSE(backends::pam_auth("login", u.name, ""));
  EXPECT_FALSE(backends::pam_auth("login", u.name + "nobody", pw));
  auto groups = backends::system_groups(u.name);
  EXPECT_NE(std::find(groups.begin(), groups.end(), u.group), groups.end());

  // Through eauth_service: the user only through the group entry.
  config::master_config cfg;
  cfg.cachedir = ::testing::TempDir() + "/sylvite-eauth-pam-" + std::to_string(::getpid());
  cfg.raw = value::object();
  cfg.raw["external_auth"] = value{{"pam", {{u.group + "%", value::array({"test.*", "@runner"})}}}};
  eauth_service s(cfg, [](const value&, const std::string&) { return std::vector<std::string>{"m1"}; });
  s.set_failure_delay(0);
  auto who = s.authenticate("pam", u.name, pw);
  ASSERT_TRUE(who);
  EXPECT_EQ(who->perms, value::array({"test.*", "@runner"}));
  EXPECT_TRUE(s.check(*who, value{{"client", "local"}, {"tgt", "*"}, {"fun", "test.ping"}}).allowed);
  EXPECT_FALSE(s.check(*who, value{{"client", "wheel"}, {"fun", "key.list_all"}}).allowed);
  auto tok = s.mint_token(*who);
  ASSERT_TRUE(tok);
  auto back = s.get_token(tok->token);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->who.groups, who->groups);  // groups travel in the token
  EXPECT_TRUE(s.check(back->who, value{{"client", "runner"}, {"fun", "jobs.list_jobs"}}).allowed);
  EXPECT_FALSE(s.authenticate("pam", u.name, "wrong"));
  // auth.pam.service is honoured: a throwaway service whose auth stack denies everyone.
  const std::string svc = "sylvite-eauth-deny-" + std::to_string(::getpid());
  const std::string svc_path = "/etc/pam.d/" + svc;
  struct rm_guard {
    std::string p;
    ~rm_guard() { std::remove(p.c_str()); }
  } guard{svc_path};
  {
    FILE* f = std::fopen(svc_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("auth requisite pam_deny.so\naccount required pam_permit.so\n", f);
    std::fclose(f);
  }
  cfg.raw["auth.pam.service"] = svc;
  eauth_service s2(cfg, nullptr);
  s2.set_failure_delay(0);
  EXPECT_FALSE(s2.authenticate("pam", u.name, pw));
  cfg.raw["auth.pam.service"] = "login";
  eauth_service s3(cfg, nullptr);
  EXPECT_TRUE(s3.authenticate("pam", u.name, pw));
  std::error_code ec;
  std::filesystem::remove_all(cfg.cachedir, ec);
}

}  // namespace
}  // namespace sylvite::master::api
