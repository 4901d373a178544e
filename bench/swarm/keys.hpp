// sylvite-swarm key cache: RSA minion keys generated once and kept on disk
// (<dir>/<index>.pem, PKCS#1 as Salt writes minion.pem), so a benchmark run costs a PEM
// parse per minion instead of a 2048-bit key generation (~50-100 ms each).
// Keys are indexed, not named: the same file serves any --id-prefix.
// Thread-safety: load_keys() runs its own worker threads; the returned keys are
// immutable handles (crypto::rsa_key), safe to share.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"

namespace sylvite::bench {

struct key_load_stats {
  std::size_t loaded = 0;     // read from the cache
  std::size_t generated = 0;  // generated now (and written to the cache)
  double seconds = 0;
};

// Keys first_index .. first_index+count-1 from dir, generating (in `threads` threads)
// the missing ones. `per_key` runs in the worker thread right after a key is available
// (used to build the auth clients in parallel). Errors: util::errc::io_error (cache not
// writable), crypto errors from generation.
result<std::vector<crypto::rsa_key>> load_keys(const std::filesystem::path& dir, std::size_t first_index,
                                               std::size_t count, int bits, unsigned threads,
                                               key_load_stats* stats,
                                               const std::function<void(std::size_t, const crypto::rsa_key&)>& per_key = {});

}  // namespace sylvite::bench
