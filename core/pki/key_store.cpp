// sylvite::pki key_store: minion key states as files (Salt's localfs_key layout) and the
// daemon's own key pair. Every write is util::write_file_atomic (temp + fsync + rename)
// so a reader on a shared filesystem never sees half a key; reads tolerate missing files.
// Ids are checked with Salt's valid_id() before any path is built from them.
// Thread-safety: no state besides the directory path; safe from any thread.
#include "core/pki/key_store.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <array>

#include "core/util/files.hpp"

namespace sylvite::pki {
namespace fs = std::filesystem;

namespace {
constexpr std::array<key_state, 4> k_states = {key_state::accepted, key_state::pending, key_state::rejected,
                                               key_state::denied};
}  // namespace

std::string_view dir_name(key_state s) {
  switch (s) {
    case key_state::accepted: return "minions";
    case key_state::pending: return "minions_pre";
    case key_state::rejected: return "minions_rejected";
    case key_state::denied: return "minions_denied";
  }
  return "minions";
}

std::string_view state_name(key_state s) {
  switch (s) {
    case key_state::accepted: return "accepted";
    case key_state::pending: return "pending";
    case key_state::rejected: return "rejected";
    case key_state::denied: return "denied";
  }
  return "accepted";
}

std::optional<key_state> parse_state(std::string_view s) {
  if (s == "accepted" || s == "acc" || s == "minions") return key_state::accepted;
  if (s == "pending" || s == "pre" || s == "un" || s == "unaccepted" || s == "minions_pre") return key_state::pending;
  if (s == "rejected" || s == "rej" || s == "minions_rejected") return key_state::rejected;
  if (s == "denied" || s == "den" || s == "minions_denied") return key_state::denied;
  return std::nullopt;
}

bool valid_id(std::string_view id) {
  // salt.utils.verify.valid_id: no '/', '\\' or NUL, and <pki_dir>/<id> must name an
  // entry directly inside pki_dir (so neither "." nor ".." nor "").
  if (id.empty() || id.size() > 255) return false;
  if (id.front() == '.') return false;  // also "." and ".."
  for (char c : id) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f) return false;  // NUL is < 0x20
  }
  return true;
}

std::string check_minion_pub(std::string_view pem) {
  if (pem.size() > max_pub_pem_bytes)
    return "public key of " + std::to_string(pem.size()) + " bytes (at most " + std::to_string(max_pub_pem_bytes) +
           " for a PEM RSA key)";
  if (pem.find("-----BEGIN ") == std::string_view::npos) return "public key is not PEM";
  auto key = crypto::rsa_key::from_public_pem(pem);
  if (!key) return "public key is not a PEM RSA public key";
  const int bits = EVP_PKEY_get_bits(key->native());
  if (bits < min_pub_bits || bits > max_pub_bits)
    return "RSA public key of " + std::to_string(bits) + " bits (accepted: " + std::to_string(min_pub_bits) + ".." +
           std::to_string(max_pub_bits) + ")";
  BIGNUM* e = nullptr;
  if (EVP_PKEY_get_bn_param(key->native(), OSSL_PKEY_PARAM_RSA_E, &e) != 1 || e == nullptr)
    return "RSA public key without a readable exponent";
  const int ebits = BN_num_bits(e);
  const bool odd = BN_is_odd(e) == 1;
  const bool small = BN_cmp(e, BN_value_one()) <= 0 || (ebits == 2 && !odd);
  BN_free(e);
  if (ebits > 32 || !odd || small) return "RSA public exponent out of range (odd, 3..2^32-1)";
  return {};
}

bool valid_id(const fs::path& dir, std::string_view id) {
  if (!valid_id(id)) return false;
  // Salt's clean_path(realpath=True): a symlink named <id> leading elsewhere is refused.
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return false;
  // Follow the link chain by hand: weakly_canonical() leaves a dangling link unresolved,
  // while Python's realpath() resolves it.
  fs::path p = root / std::string(id);
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
    fs::path t = fs::read_symlink(p, ec);
    if (ec) return false;
    p = (t.is_absolute() ? t : p.parent_path() / t).lexically_normal();
  }
  p = fs::weakly_canonical(p, ec);
  if (ec) return false;
  return p.parent_path() == root;
}

fs::path key_store::path(key_state s, std::string_view id) const {
  return dir_ / std::string(dir_name(s)) / std::string(id);
}

result<void> key_store::ensure_dirs() const {
  for (auto s : k_states)
    if (auto r = util::make_dirs(dir_ / std::string(dir_name(s)), 0700); !r) return r;
  return util::make_dirs(dir_ / "minions_autosign", 0700);
}

std::optional<std::string> key_store::read(key_state s, std::string_view id) const {
  if (!valid_id(id)) return std::nullopt;
  // Keys live on a filesystem other masters (and whoever can write the share) write: a
  // symlink planted as <id> could make us serve or trust any file the master can read.
  auto r = util::read_file_nofollow(path(s, id), 1u << 20);
  if (!r) {
    if (r.error() != util::errc::not_found)
      spdlog::warn("refusing key file {}: {} (a key must be a regular file, not a symlink)", path(s, id).string(),
                   r.error().message());
    return std::nullopt;
  }
  return std::move(*r);
}

bool key_store::exists(key_state s, std::string_view id) const {
  if (!valid_id(id)) return false;
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(path(s, id), ec));
}

std::optional<key_state> key_store::state_of(std::string_view id) const {
  for (auto s : {key_state::accepted, key_state::pending, key_state::rejected})
    if (exists(s, id)) return s;
  return std::nullopt;
}

result<void> key_store::write(key_state s, std::string_view id, std::string_view pem) const {
  if (!valid_id(id)) return util::errc::invalid_argument;
  return util::write_file_atomic(path(s, id), pem, 0644);
}

result<void> key_store::remove(key_state s, std::string_view id) const {
  if (!valid_id(id)) return util::errc::invalid_argument;
  return util::remove_file(path(s, id));
}

result<void> key_store::move(std::string_view id, key_state from, key_state to) const {
  if (!valid_id(id)) return util::errc::invalid_argument;
  auto pem = util::read_file_nofollow(path(from, id), 1u << 20);
  if (!pem) return pem.error();
  if (from == to) return {};
  if (auto w = util::write_file_atomic(path(to, id), *pem, 0644); !w) return w;
  return util::remove_file(path(from, id));
}

std::vector<std::string> key_store::list(key_state s) const {
  std::vector<std::string> out;
  for (auto& name : util::list_dir(dir_ / std::string(dir_name(s))))
    if (valid_id(name)) out.push_back(std::move(name));
  return out;  // list_dir sorts
}

result<crypto::rsa_key> load_or_generate_keypair(const fs::path& dir, std::string_view name, int bits) {
  const fs::path pem_path = dir / (std::string(name) + ".pem");
  const fs::path pub_path = dir / (std::string(name) + ".pub");

  auto existing = util::read_file(pem_path);
  if (!existing && existing.error() != util::errc::not_found) {
    spdlog::error("cannot read {}: {}", pem_path.string(), existing.error().message());
    return existing.error();
  }
  if (!existing) {
    if (auto d = util::make_dirs(dir, 0700); !d) {
      spdlog::error("cannot create key directory {}", dir.string());
      return d.error();
    }
    auto key = crypto::rsa_key::generate(bits);
    if (!key) return key.error();
    // O_EXCL create: two daemons racing on a shared directory end with one key pair.
    auto c = util::create_exclusive(pem_path, key->private_pem(), 0400);
    if (c) {
      if (auto w = util::write_file_atomic(pub_path, key->public_pem(), 0644); !w) {
        spdlog::error("cannot write {}", pub_path.string());
        return w.error();
      }
      spdlog::info("generated a {}-bit key pair {}", bits, pem_path.string());
      return key;
    }
    if (c.error() != util::errc::already_exists) {
      spdlog::error("cannot write {}", pem_path.string());
      return c.error();
    }
    existing = util::read_file(pem_path);  // lost the race: use the winner's key
    if (!existing) return existing.error();
  }

  auto key = crypto::rsa_key::from_private_pem(*existing);
  if (!key || !key->has_private()) {
    spdlog::error("{} exists but is not a valid RSA private key; refusing to replace it (move it away to "
                  "generate a new pair)",
                  pem_path.string());
    return crypto::errc::bad_key;
  }
  std::error_code ec;
  if (!fs::exists(pub_path, ec)) {
    if (auto w = util::write_file_atomic(pub_path, key->public_pem(), 0644); !w) {
      spdlog::error("cannot write {}", pub_path.string());
      return w.error();
    }
  }
  return key;
}

}  // namespace sylvite::pki
