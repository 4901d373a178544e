// sylvite::master keys: the master RSA key pair, the publish AES key (with its X9.31
// signature computed once per key), per-minion session keys (cachedir/sessions/<id>)
// and an in-memory cache of accepted minion public keys.
// Thread-safety: every class here is safe to use from many threads at once (internal
// mutexes; values handed out as shared_ptr<const>). Disk I/O happens inside the calls:
// call from the worker pool, not from an io thread (hello handling is the exception:
// accepted keys are cached, so a hit costs no system call).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/util/result.hpp"

namespace sylvite::master {

using sys_clock = std::chrono::system_clock;

// pki_dir/master.pem + master.pub (load or generate).
class master_keys {
 public:
  static result<master_keys> load_or_generate(const std::filesystem::path& pki_dir, int keysize);
  static master_keys from_key(crypto::rsa_key priv);  // tests
  const crypto::rsa_key& priv() const noexcept { return priv_; }
  const crypto::rsa_key& pub() const noexcept { return pub_; }
  // Salt's clean key form of master.pub (what goes into the auth reply pub_key).
  const std::string& pub_clean() const noexcept { return pub_clean_; }

 private:
  crypto::rsa_key priv_;
  crypto::rsa_key pub_;
  std::string pub_clean_;
};

// One publish AES key generation.
struct aes_key {
  crypto::crypticle crypt;
  std::string sig;  // X9.31(master priv, sha256_hex(key string)): the auth reply "sig"
  sys_clock::time_point created;
  std::uint64_t generation = 0;
};

// The publish AES key: current + previous (kept `grace` after a rotation for hellos),
// and the publish serial (reset on rotation).
class aes_manager {
 public:
  explicit aes_manager(crypto::rsa_key master_priv);
  // Generate a new key (one private RSA op for its signature). The first call makes
  // the initial key. Errors only if signing fails.
  result<void> rotate();
  std::shared_ptr<const aes_key> current() const;
  // The key before the last rotation while younger than grace, else nullptr.
  std::shared_ptr<const aes_key> previous(std::chrono::seconds grace) const;
  // Next publish serial (1, 2, ...; back to 1 after a rotation).
  std::int64_t next_serial();
  // Test hook: install a given key string.
  result<void> set_key_string(std::string_view key_string);
  // Sign the keys made from now on with `master_priv` (salt-run cluster.rotate_key).
  void set_master_key(crypto::rsa_key master_priv);

 private:
  result<std::shared_ptr<aes_key>> make(std::string key_string);
  crypto::rsa_key priv_;  // under priv_mu_
  mutable std::mutex priv_mu_;
  mutable std::mutex mu_;
  std::shared_ptr<const aes_key> current_;
  std::shared_ptr<const aes_key> previous_;
  sys_clock::time_point rotated_at_{};
  std::int64_t serial_ = 0;
  std::uint64_t generation_ = 0;
};

// Per-minion session keys, cachedir/sessions/<id> (Crypticle key string, mode 0600),
// regenerated when older than publish_session. Cached in memory in 64 shards (one mutex
// each, held only for map operations, never across file I/O). A cache hit costs no
// system call; it is revalidated against the file (one stat, outside the lock) at most
// every `revalidate` (another master on a shared cachedir may rotate or remove it).
// New keys are written without fsync (temp + link, first writer wins; group commit via
// util::group_syncer): after an OS crash a minion whose key was lost signs in again.
class session_store {
 public:
  session_store(std::filesystem::path dir, std::chrono::seconds lifetime,
                std::chrono::milliseconds revalidate = std::chrono::milliseconds(2000));
  // For the auth reply: the key, created or regenerated as needed.
  result<std::shared_ptr<const crypto::crypticle>> get_or_create(const std::string& id);
  // For decrypting requests: the current key, nullptr if missing or expired (no disk
  // write: a refused request must not create files).
  std::shared_ptr<const crypto::crypticle> lookup(const std::string& id);
  // lookup without reading a file (the io thread): the re-check that is due is a stat;
  // nullopt when the key is not in memory or its file changed (then call lookup off the io
  // thread).
  std::optional<std::shared_ptr<const crypto::crypticle>> lookup_cached(const std::string& id);
  void remove(const std::string& id);  // key deleted/rejected
  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::uint64_t file_reads() const noexcept { return file_checks_.load(); }  // tests

 private:
  struct entry {
    std::filesystem::file_time_type mtime;
    std::shared_ptr<const crypto::crypticle> crypt;
    std::chrono::steady_clock::time_point checked;  // last stat of the file
  };
  struct shard {
    std::mutex mu;                    // the map
    std::mutex create_mu;             // creation/regeneration of ids of this shard
    std::unordered_map<std::string, entry> map;
  };
  static constexpr std::size_t kShards = 64;
  shard& shard_of(const std::string& id);
  std::shared_ptr<const crypto::crypticle> cached(shard& s, const std::string& id);
  // needs_read (lookup_cached): stat only; set when the file would have to be read.
  std::shared_ptr<const crypto::crypticle> load(shard& s, const std::string& id, bool create,
                                                bool* needs_read = nullptr);
  std::filesystem::path dir_;
  std::chrono::seconds lifetime_;
  std::chrono::milliseconds revalidate_;
  std::unique_ptr<shard[]> shards_;
  std::atomic<std::uint64_t> file_checks_{0};
  std::atomic<std::uint64_t> epoch_{0};  // bumped by remove(): in-flight loads do not cache
  std::shared_ptr<util::group_syncer> syncer_;
};

// Accepted minion public keys (pki_dir/minions/<id>), cached in memory.
// Invalidation: key events (salt-key through the CLI socket -> key_service::key_event,
// sign-in key actions) call invalidate(); an inotify watch on the accepted directory
// (one thread) drops an entry as soon as its file is written, removed or renamed (an
// operator's rm/mv, or salt-key run while the master could not be told); and a hit is
// revalidated with one stat (mtime + size) at most every `revalidate` (covers shared
// cluster_pki_dir changes by other masters, which inotify does not see). Without inotify
// every get() stats the file, as before. So a cache hit normally costs no system call.
// Also remembers the last token that verified for a key: tokens are deterministic
// (X9.31 of "salt"), so a repeat costs a string compare instead of an RSA operation.
class accepted_keys {
 public:
  struct entry {
    std::string pem_clean;
    crypto::rsa_key key;
    std::filesystem::file_time_type mtime;
    std::uintmax_t size = 0;
  };
  explicit accepted_keys(const pki::key_store& store,
                         std::chrono::milliseconds revalidate = std::chrono::milliseconds(2000));
  ~accepted_keys();
  accepted_keys(const accepted_keys&) = delete;
  accepted_keys& operator=(const accepted_keys&) = delete;
  // nullptr if id has no accepted key (or it does not parse).
  std::shared_ptr<const entry> get(const std::string& id);
  // True if tok recovers to "salt" with the accepted key of id.
  bool verify_token(const std::string& id, std::string_view tok);
  // verify_token without reading a file (the io thread): the re-check that is due is a
  // stat; nullopt when the key of id is not in memory or its file changed (then call
  // verify_token off the io thread).
  std::optional<bool> verify_token_cached(const std::string& id, std::string_view tok);
  void invalidate(const std::string& id);
  void clear();
  // Tests: whether the inotify watch runs; file stats done by get().
  bool watching();
  std::uint64_t file_checks() const noexcept { return file_checks_.load(); }

 private:
  struct cached {
    std::shared_ptr<const entry> e;
    std::chrono::steady_clock::time_point checked;
  };
  struct watcher;
  void ensure_watch();
  // get(); with needs_read, a stat at most: set instead of reading a new or changed file.
  std::shared_ptr<const entry> lookup(const std::string& id, bool* needs_read);
  // RSA check of tok with e's key; a good token is remembered while e is the cached entry.
  bool check_token(const std::string& id, const std::shared_ptr<const entry>& e, std::string_view tok);
  const pki::key_store& store_;
  std::chrono::milliseconds revalidate_;
  std::mutex mu_;
  std::unordered_map<std::string, cached> cache_;
  std::unordered_map<std::string, std::string> good_tok_;  // id -> last verified token bytes
  std::atomic<std::uint64_t> gen_{0};             // bumped on every invalidation
  std::atomic<std::uint64_t> file_checks_{0};
  std::once_flag watch_once_;
  std::unique_ptr<watcher> watch_;
};

}  // namespace sylvite::master
