// sylvite::cli salt-key logic: Salt 3008's salt/key.py (KeyCLI.run, Key.glob_match,
// list_keys, finger, key_str, change_state, delete_key) and salt/output/key.py, on the
// master's key directories through pki::key_store. The tool main only parses flags
// and wires the master notification; everything here is testable with streams.
// Thread-safety: single-threaded.
#pragma once
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/output/output.hpp"
#include "core/pki/key_store.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cli::keys {

inline constexpr const char* acc = "minions";
inline constexpr const char* pend = "minions_pre";
inline constexpr const char* rej = "minions_rejected";
inline constexpr const char* den = "minions_denied";

// Python fnmatch.fnmatch on POSIX ('*' crosses '/', no escapes).
bool fnmatch(const std::string& pattern, const std::string& name);

// {"minions_pre": [...], "minions_rejected": [...], "minions": [...], "minions_denied": [...]}
// each sorted case-insensitively (Salt's sorted_ignorecase).
wire::value list_keys(const pki::key_store& ks);
// {"local": [*.pem / *.pub in the master's pki_dir]}.
wire::value local_keys(const std::filesystem::path& pki_dir);
// Key.glob_match: match may be "a,b*" (comma list); "*" returns every non-empty state.
wire::value glob_match(const wire::value& all, const std::string& match);
// Key.dict_match: current states of the ids named in match_dict.
wire::value dict_match(const wire::value& match_dict, const wire::value& cur_keys);

// salt/output/key.py: "Accepted Keys:" blocks (statuses sorted by their dir name), ids
// sorted; dict values print as "id:  value".
std::string render_key_listing(const wire::value& data, bool color);

// "The key glob '<m>' does not match any unaccepted[, x] or y keys."
std::string no_match_message(const std::string& match, bool inc_accepted, bool inc_rejected, bool inc_denied);

// What `salt-key -F` prints for a stored key: Salt 3008 hashes the whole stored text
// (hash_type from the config), hex pairs joined by ':'.
result<std::string> key_fingerprint(std::string_view content, std::string_view hash_type);

// Salt's salt.crypt.dropfile: cachedir/.dfn holding master_id, mode 0400, left alone if
// present (a rotation is already pending).
bool write_dropfile(const std::filesystem::path& cachedir, const std::string& master_id);

struct key_options {
  std::optional<std::string> list;  // -l STATE
  bool list_all = false;            // -L
  std::optional<std::string> accept, reject, del, print, finger;
  bool accept_all = false, reject_all = false, delete_all = false, print_all = false, finger_all = false;
  bool include_all = false, include_accepted = false, include_rejected = false, include_denied = false;
  bool yes = false;
  bool rotate_aes_key = true;
  std::string out;  // "" -> Salt's key listing
  output::options oopt;
};

struct key_io {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  // Tell the running master about a change (act: accept|reject|delete). Returns false
  // when the master is not reachable (the caller then writes the drop file if needed).
  std::function<bool(const std::string& act, const std::vector<std::string>& ids)> notify;
};

// Run one salt-key invocation; returns the exit code (Salt: 0 even when nothing matched).
int run_salt_key(const key_options& opt, const config::master_config& cfg, key_io& io);

}  // namespace sylvite::cli::keys
