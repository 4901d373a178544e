// sylvite-swarm key cache (see keys.hpp). Generation is the slow part (OpenSSL prime
// search); it is spread over threads and each key is written atomically, so an
// interrupted run keeps the keys it finished and a concurrent run never reads half a file.
#include "bench/swarm/keys.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/util/files.hpp"

namespace sylvite::bench {

result<std::vector<crypto::rsa_key>> load_keys(const std::filesystem::path& dir, std::size_t first_index,
                                               std::size_t count, int bits, unsigned threads,
                                               key_load_stats* stats,
                                               const std::function<void(std::size_t, const crypto::rsa_key&)>& per_key) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error_code(util::errc::io_error);
  std::vector<crypto::rsa_key> keys(count);
  std::atomic<std::size_t> next{0}, loaded{0}, generated{0};
  std::mutex err_mu;
  error_code first_err;
  auto work = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= count) return;
      const auto path = dir / (std::to_string(first_index + i) + ".pem");
      bool ok = false;
      if (auto text = util::read_file(path)) {
        if (auto k = crypto::rsa_key::from_private_pem(*text); k && k->has_private()) {
          keys[i] = std::move(*k);
          ok = true;
          loaded++;
        }
      }
      if (!ok) {
        auto k = crypto::rsa_key::generate(bits);
        if (!k) {
          std::lock_guard lk(err_mu);
          if (!first_err) first_err = k.error();
          return;
        }
        if (auto w = util::write_file_atomic(path, k->private_pem(), 0600); !w) {
          std::lock_guard lk(err_mu);
          if (!first_err) first_err = w.error();
          return;
        }
        keys[i] = std::move(*k);
        generated++;
      }
      if (per_key) per_key(i, keys[i]);
    }
  };
  if (threads == 0) threads = 1;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (first_err) return first_err;
  if (stats) {
    stats->loaded = loaded;
    stats->generated = generated;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return keys;
}

}  // namespace sylvite::bench
