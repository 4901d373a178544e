// sylvite::minion return queue: job returns that could not be delivered (no master up, or
// the master that published the job is gone) wait here, on disk, until a master connects.
// One file per return in <cachedir>/return_queue/: <seq>.ret, a msgpack map
// {master: label or "" (any master), load: the `_return` load}. Written atomically
// (temp + fsync + rename), so a crash leaves whole entries or none. Bounded: push() refuses
// a new entry once `max_entries` are queued (the caller logs the loss loudly).
// Delivery is at least once: an entry is removed only after the master acknowledged it;
// a master that got it but whose ack was lost sees it again, and refuses the duplicate
// (Salt's job cache keeps the first return of a minion for a jid; sylvite's does too).
// No sockets, no Asio. Thread-safety: every member is safe to call from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

class return_queue {
 public:
  struct entry {
    std::string name;    // file name (ordering key)
    std::string master;  // label of the master it must go to; "" = any master
    wire::value load;
  };

  // Creates dir when needed; entries already there (from an earlier run) are kept and
  // numbered after. Unreadable files are renamed to <name>.bad and logged once.
  return_queue(std::filesystem::path dir, std::size_t max_entries);

  // Queue a return. errc: value_too_large when full, or the I/O error.
  result<std::string> push(const std::string& master, const wire::value& load);
  // Entries for `master` (and, if any_ok, those for any master), oldest first.
  std::vector<entry> pending(const std::string& master, bool any_ok) const;
  void remove(const std::string& name);
  std::size_t size() const;
  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
  std::size_t max_;
  mutable std::mutex mu_;
  std::uint64_t next_ = 1;
  mutable std::size_t count_ = 0;  // pending() moves unreadable entries aside
};

}  // namespace sylvite::minion
