// sylvite::minion process runner for cmd.*: fork/exec in a new process group, optional
// stdin data, stdout and stderr captured (or merged like subprocess.STDOUT), a deadline
// after which the whole process group gets SIGKILL.
// Thread-safety: run_process() may be called concurrently from job threads (the child only
// calls async-signal-safe functions between fork and exec).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace sylvite::minion {

struct process_spec {
  std::vector<std::string> argv;     // argv[0] is searched in PATH when it has no '/'
  std::string cwd;                   // must exist
  std::vector<std::string> env;      // "KEY=VALUE"
  std::optional<std::string> stdin_data;  // nullopt: /dev/null
  bool merge_stderr = false;         // stderr goes to the stdout pipe
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<uid_t> uid;          // runas (we must be root)
  std::optional<gid_t> gid;
  std::optional<std::string> user;   // for initgroups
  std::optional<mode_t> umask;
};

struct process_result {
  bool started = false;
  int exec_errno = 0;                // errno of a failed exec (started is false)
  pid_t pid = 0;
  int retcode = 0;                   // exit status, or 128+signal (shell convention)... see .cpp
  bool timed_out = false;
  std::string out;
  std::string err;
};

process_result run_process(const process_spec& spec);

// POSIX shlex.split (quotes, backslash escapes); nullopt on an unterminated quote.
std::optional<std::vector<std::string>> shlex_split(const std::string& s);

}  // namespace sylvite::minion
