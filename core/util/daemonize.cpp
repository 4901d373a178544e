// Daemonizing and pid files (see daemonize.hpp).
#include "core/util/daemonize.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/util/files.hpp"

namespace sylvite::util {

bool daemonize(std::optional<mode_t> mask) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid > 0) ::_exit(0);
  if (::setsid() < 0) return false;  // cannot fail in a fresh child (never a group leader)
  pid = ::fork();
  if (pid < 0) return false;
  if (pid > 0) ::_exit(0);
  if (::chdir("/") != 0) return false;
  if (mask) ::umask(*mask);
  int fd = ::open("/dev/null", O_RDWR);
  if (fd >= 0) {
    ::dup2(fd, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (fd > 2) ::close(fd);
  }
  return true;
}

result<void> write_pid_file(const std::filesystem::path& p) {
  return write_file_atomic(p, std::to_string(::getpid()) + "\n", 0644);
}

}  // namespace sylvite::util
