// sylvite::util files: atomic writes and tolerant reads.
// Every write is temp-file + fsync + rename (+ fsync of the directory), so a reader
// (possibly another master on a shared filesystem) sees the old or the new content,
// never a half-written file. create_exclusive() uses O_EXCL for once-only creates.
// Thread-safety: free functions, safe to call concurrently on different paths.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/result.hpp"

namespace sylvite::util {

// Read a whole file. errc::not_found if missing, errc::io_error otherwise.
result<std::string> read_file(const std::filesystem::path& p);

// Atomically replace p with data (mode applied to the temp file before rename).
// Creates parent directories (0700) if missing.
result<void> write_file_atomic(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);

// Create p with data only if it does not exist yet (O_EXCL on a temp + link(2), so the
// content is complete the moment the name appears). errc::already_exists if it exists.
result<void> create_exclusive(const std::filesystem::path& p, std::string_view data, unsigned mode = 0644);

// Remove a file; missing is not an error.
result<void> remove_file(const std::filesystem::path& p);

// mkdir -p with mode for created dirs.
result<void> make_dirs(const std::filesystem::path& p, unsigned mode = 0755);

// Regular file names in a directory, sorted; missing dir -> empty.
std::vector<std::string> list_dir(const std::filesystem::path& p);

}  // namespace sylvite::util
