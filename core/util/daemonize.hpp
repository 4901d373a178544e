// sylvite::util daemonizing and pid files for the daemons' mains (salt-master, salt-minion).
// Thread-safety: daemonize() must run before any thread exists; write_pid_file() is a
// plain atomic file write.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <optional>

#include "core/util/result.hpp"

namespace sylvite::util {

// Classic double fork (fork, setsid, fork), chdir("/"), umask `mask` if given, and stdin,
// stdout and stderr on /dev/null. Both parents exit 0 at once; the grandchild returns true,
// or false if a step failed (nothing is logged).
bool daemonize(std::optional<mode_t> mask = std::nullopt);

// Write "<pid>\n" to p (temp + fsync + rename, 0644). Errors: as write_file_atomic.
result<void> write_pid_file(const std::filesystem::path& p);

}  // namespace sylvite::util
