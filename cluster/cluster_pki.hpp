// sylvite::cluster shared PKI: the files every master of a cluster shares in
// cluster_pki_dir (usually on GlusterFS) and the rules for writing them.
//   cluster.pem / cluster.pub   the cluster key pair minions see as "the master key";
//                               created exactly once even when every master starts at
//                               the same moment on an empty share: the first link(2) of a
//                               complete temp file wins, the others load the winner's.
//   .aes                        the cluster AES key string (Crypticle) handed to minions;
//                               created once the same way; rotated under an fcntl lock on
//                               .aes.lock so exactly one master rotates.
//   peers/<id>.pub              each master's own public key, written by that master; a
//                               different key already there is a refusal to start.
// Readers tolerate a missing or half-written file (writes are temp + fsync + rename/link,
// so a reader sees old or new, and a parse failure is retried by the caller).
// No sockets, no Asio. Thread-safety: free functions; the lock is a process-wide fcntl
// lock (one rotation at a time per process is the caller's job).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"

namespace sylvite::cluster {

enum class errc {
  ok = 0,
  peer_key_mismatch = 1,  // peers/<id>.pub holds another key
  bad_id,                 // not a valid master id (path traversal, empty, ...)
  unreadable,             // a shared file exists but cannot be parsed (after retries)
  lock_failed,
};
const boost::system::error_category& cluster_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), cluster_category()}; }

// A master/peer id usable as a file name: pki::valid_id plus no leading dot.
bool valid_peer_id(const std::string& id);

struct cluster_keys {
  crypto::rsa_key priv;
  std::string pub_pem;   // cluster.pub as on disk
  bool created = false;  // this call created them
};
// Load cluster.pem (and make sure cluster.pub matches it), or create both once.
result<cluster_keys> load_or_create_cluster_keys(const std::filesystem::path& dir, int keysize);

// Rotate the cluster key pair (salt-run cluster.rotate_key): under the .aes.lock rotation
// lock, keep the current pair as cluster.pem.old / cluster.pub.old, then write a new pair
// of `keysize` bits (temp + fsync + rename: readers see the old or the new file). With
// `new_pem` set (a local copy installing the key a member sent) that key is written
// instead of a generated one. Errors: lock, generate, parse or write failures; on a
// failure before cluster.pem is renamed the old pair stays in place.
struct key_rotation {
  std::string old_pub_pem;  // "" if there was no cluster.pub
  crypto::rsa_key priv;     // the new cluster key
  std::string pub_pem;      // the new cluster.pub
};
result<key_rotation> rotate_cluster_keys(const std::filesystem::path& dir, int keysize,
                                         const std::optional<std::string>& new_pem = std::nullopt);

struct aes_file {
  std::string key;                        // Crypticle key string
  std::filesystem::file_time_type mtime;  // of .aes when read
  bool created = false;
  // The key's generation: .aes.gen, moved at every write of .aes (rotate_aes, the
  // creation in load_or_create_aes) to max(previous + 1, ms since the epoch), both files
  // written under .aes.lock: it only grows, also when .aes.gen was lost. Masters that copy
  // the key (a local cluster_pki_dir) keep the highest generation they were told of,
  // whatever order the peers' messages arrive in. 0: unknown (read_aes does not read it:
  // the pair is only consistent under the lock).
  std::uint64_t gen = 0;
};
// Read .aes, creating it once if absent (under the lock, generation bumped). Retries a
// few times on an unreadable file.
result<aes_file> load_or_create_aes(const std::filesystem::path& dir);
// Read .aes if present (no create, no lock, gen 0). errc::unreadable / not_found.
result<aes_file> read_aes(const std::filesystem::path& dir);
// Read .aes and .aes.gen together under .aes.lock (waits for a rotation in progress).
result<aes_file> read_aes_locked(const std::filesystem::path& dir);
// The generation in dir/.aes.gen, 0 if absent or not a number.
std::uint64_t read_aes_gen(const std::filesystem::path& dir);
// The generation the next write of .aes gets (caller holds .aes.lock).
std::uint64_t next_aes_gen(const std::filesystem::path& dir);
result<void> write_aes_gen(const std::filesystem::path& dir, std::uint64_t gen);
// Rotate under the lock: if .aes still holds `expected` (the key this master uses), write
// a new key; if another master already rotated, return its key (rotated = false).
// With a drop file (cachedir/.dfn, Salt's request for one rotation), the test is the drop
// file instead: present under the lock -> rotate and remove it, still under the lock;
// gone -> another master served it, adopt its key. So masters that share cachedir and see
// the same drop file rotate once between them, not once each.
struct rotation {
  aes_file now;  // gen set (0 if .aes.gen could not be written)
  bool rotated = false;
};
result<rotation> rotate_aes(const std::filesystem::path& dir, const std::string& expected,
                            const std::filesystem::path* dropfile = nullptr);

// peers/<id>.pub: write ours if absent; mismatch -> errc::peer_key_mismatch.
result<void> ensure_peer_key(const std::filesystem::path& dir, const std::string& id, const std::string& pub_pem);
// Every peers/<id>.pub with a valid id and a parseable key (others are skipped, logged).
std::map<std::string, crypto::rsa_key> list_peer_keys(const std::filesystem::path& dir);
std::optional<crypto::rsa_key> peer_key(const std::filesystem::path& dir, const std::string& id);

}  // namespace sylvite::cluster

template <>
struct boost::system::is_error_code_enum<sylvite::cluster::errc> : std::true_type {};
