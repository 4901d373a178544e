// sylvite::util child processes: fork + exec of a helper program (render workers, publish
// processes) with a chosen set of inherited descriptors. No Asio.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sylvite::util {

// `name` in the directory of the running program (/proc/self/exe): the helper programs
// are installed beside the daemons. Just `name` if /proc/self/exe cannot be read.
std::filesystem::path program_beside_self(std::string_view name);

struct child_spec {
  std::filesystem::path program;          // execv path
  std::vector<std::string> argv;          // argv[0] first
  std::vector<std::pair<int, int>> fds;   // {parent descriptor, number in the child}
  std::uint64_t address_space_limit = 0;  // RLIMIT_AS in bytes; 0 = unlimited
};

// Starts spec.program in a session of its own, with an empty signal mask and SIGPIPE at
// its default. The child keeps descriptors 0, 1 and 2 unless `fds` maps onto them, gets
// each mapped descriptor at its number, and nothing else (close_range). The pid, or -1
// with errno set (fork failed). An exec failure shows as the child's exit status 127
// (126: the descriptors could not be mapped). Async-signal-safe after fork; callable from
// any thread.
pid_t spawn_child(const child_spec& spec);

}  // namespace sylvite::util
