// util::spawn_child: descriptor mapping, nothing else inherited, exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <sstream>
#include <string>

#include "core/util/spawn.hpp"

namespace util = sylvite::util;

namespace {

int wait_status(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -2;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

TEST(Spawn, maps_descriptors_and_closes_the_rest) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  // Two inheritable descriptors (no CLOEXEC) the child must not get anyway: one at the
  // lowest free number, below the mapped target, one far above it.
  const int low = ::fcntl(devnull, F_DUPFD, 3);
  const int high = ::fcntl(devnull, F_DUPFD, 60);
  ASSERT_GE(low, 3);
  ASSERT_GE(high, 60);
  const int target = low + 1;
  util::child_spec spec;
  spec.program = "/bin/ls";
  spec.argv = {"ls", "-1", "/proc/self/fd"};
  spec.fds = {{devnull, 0}, {sv[1], 1}, {devnull, 2}, {sv[1], target}};
  const pid_t pid = util::spawn_child(spec);
  ASSERT_GT(pid, 0);
  ::close(sv[1]);
  std::set<std::string> open;
  std::istringstream lines(read_all(sv[0]));
  for (std::string l; std::getline(lines, l);) open.insert(l);
  EXPECT_EQ(wait_status(pid), 0);
  // 0-2, the target, and the directory ls reads (the lowest free number: 3).
  EXPECT_EQ(open, (std::set<std::string>{"0", "1", "2", "3", std::to_string(target)}));
  for (int fd : {sv[0], devnull, low, high}) ::close(fd);
}

TEST(Spawn, one_descriptor_on_two_numbers_and_exec_failure) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  util::child_spec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", "read line; echo \"got:$line\""};
  spec.fds = {{sv[1], 0}, {sv[1], 1}};  // stdin and stdout, as the render workers
  const pid_t pid = util::spawn_child(spec);
  ASSERT_GT(pid, 0);
  ::close(sv[1]);
  ASSERT_EQ(::write(sv[0], "hello\n", 6), 6);
  ::shutdown(sv[0], SHUT_WR);
  EXPECT_EQ(read_all(sv[0]), "got:hello\n");
  EXPECT_EQ(wait_status(pid), 0);
  ::close(sv[0]);

  util::child_spec missing;
  missing.program = "/nonexistent/sylvite-helper";
  missing.argv = {"sylvite-helper"};
  const pid_t p2 = util::spawn_child(missing);
  ASSERT_GT(p2, 0);
  EXPECT_EQ(wait_status(p2), 127);
}

TEST(Spawn, program_beside_self_is_in_the_test_binary_folder) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  ASSERT_GT(n, 0);
  const std::filesystem::path self(std::string(buf, static_cast<std::size_t>(n)));
  EXPECT_EQ(util::program_beside_self("sylvite-render"), self.parent_path() / "sylvite-render");
}
