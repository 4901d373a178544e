// sylvite::pki: key directories and minion key states, laid out as Salt's localfs_key:
//   <dir>/minions/<id>           accepted
//   <dir>/minions_pre/<id>       pending
//   <dir>/minions_rejected/<id>  rejected
//   <dir>/minions_denied/<id>    denied (a key that differed from the accepted/pending one)
//   <dir>/minions_autosign/<id>  autosign markers
// In cluster mode <dir> is cluster_pki_dir on the shared filesystem, so every write is
// atomic (util::write_file_atomic) and every read tolerates a missing file.
// Thread-safety: key_store holds only a path; all calls are safe from any thread (the
// filesystem is the shared state).
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/crypto/rsa.hpp"
#include "core/util/result.hpp"

namespace sylvite::pki {

enum class key_state { accepted, pending, rejected, denied };
std::string_view dir_name(key_state s);        // "minions", "minions_pre", ...
std::string_view state_name(key_state s);      // "accepted", "pending", "rejected", "denied"
std::optional<key_state> parse_state(std::string_view s);  // also accepts salt-key's "acc", "pre", "un", "unaccepted", "rej", "den"

// Salt's valid_id: non-empty, no '/', '\\', NUL, not "." or "..", at most 255 bytes;
// sylvite also refuses a leading '.' (hidden files, the temp files of atomic writes) and
// control characters (bytes < 0x20 and 0x7f: log and terminal injection).
bool valid_id(std::string_view id);

// A minion's sign-in `pub`: at most max_pub_pem_bytes, a PEM RSA public key (SPKI "PUBLIC
// KEY" or PKCS#1 "RSA PUBLIC KEY", as cryptography's load_pem_public_key) of
// min_pub_bits..max_pub_bits bits with a public exponent of 3..2^32-1 (a huge exponent
// makes every public-key operation with it as costly as a private one). Returns the
// reason it is refused, empty if it is acceptable.
inline constexpr std::size_t max_pub_pem_bytes = 8192;
inline constexpr int min_pub_bits = 1024;   // = the smallest `keysize` the configs accept
inline constexpr int max_pub_bits = 16384;
std::string check_minion_pub(std::string_view pem);
// valid_id(id) and <dir>/<id>, symlinks resolved, is an entry directly inside dir
// (Salt's clean_path(pki_dir, id) with realpath). Use on untrusted ids before touching dir.
bool valid_id(const std::filesystem::path& dir, std::string_view id);

class key_store {
 public:
  explicit key_store(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const noexcept { return dir_; }

  result<void> ensure_dirs() const;  // creates the four state dirs + minions_autosign (0700)
  // Key PEM text in that state, nullopt if absent. A symlink (or FIFO, device) planted
  // as <state dir>/<id> is not followed: refused as absent, logged at warning.
  std::optional<std::string> read(key_state s, std::string_view id) const;
  bool exists(key_state s, std::string_view id) const;  // a regular file, not a symlink
  // State of id: accepted > pending > rejected (denied is separate: a minion can be both).
  std::optional<key_state> state_of(std::string_view id) const;
  result<void> write(key_state s, std::string_view id, std::string_view pem) const;
  result<void> remove(key_state s, std::string_view id) const;
  // Move from one state to another (write new then remove old).
  result<void> move(std::string_view id, key_state from, key_state to) const;
  std::vector<std::string> list(key_state s) const;  // sorted ids
  std::filesystem::path path(key_state s, std::string_view id) const;

 private:
  std::filesystem::path dir_;
};

// Load <dir>/<name>.pem (+ .pub), generating a new pair (mode 0400 / 0644) if absent.
// Refuses (errc bad_key) if the .pem exists but does not parse. The .pub is rewritten
// from the private key if missing.
result<crypto::rsa_key> load_or_generate_keypair(const std::filesystem::path& dir,
                                                 std::string_view name, int bits = 2048);

}  // namespace sylvite::pki
