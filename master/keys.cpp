// sylvite::master keys: see keys.hpp. Salt quirks:
//  - the auth reply "sig" is X9.31 over the 64 hex chars of SHA-256(AES key string);
//    it depends only on the key, so it is computed once per AES key, not per minion
//    (Salt recomputes it on every auth: one private RSA op saved per auth);
//  - session files hold the bare key string, no newline (Crypticle.write_key), 0600.
#include "master/keys.hpp"

#include <spdlog/spdlog.h>

#include <system_error>

#include "core/util/files.hpp"

namespace sylvite::master {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- master_keys
result<master_keys> master_keys::load_or_generate(const fs::path& pki_dir, int keysize) {
  auto k = pki::load_or_generate_keypair(pki_dir, "master", keysize);
  if (!k) return k.error();
  return from_key(std::move(*k));
}

master_keys master_keys::from_key(crypto::rsa_key priv) {
  master_keys m;
  m.priv_ = std::move(priv);
  m.pub_clean_ = crypto::clean_key(m.priv_.public_pem());
  auto pub = crypto::rsa_key::from_public_pem(m.priv_.public_pem());
  if (pub) m.pub_ = std::move(*pub);
  return m;
}

// ---------------------------------------------------------------- aes_manager
aes_manager::aes_manager(crypto::rsa_key master_priv) : priv_(std::move(master_priv)) {}

result<std::shared_ptr<aes_key>> aes_manager::make(std::string key_string) {
  auto c = crypto::crypticle::from_key_string(key_string);
  if (!c) return c.error();
  auto sig = crypto::x931_sign(priv_, crypto::sha256_hex(key_string));
  if (!sig) return sig.error();
  auto k = std::make_shared<aes_key>();
  k->crypt = std::move(*c);
  k->sig = std::move(*sig);
  k->created = sys_clock::now();
  return k;
}

result<void> aes_manager::rotate() {
  auto k = make(crypto::crypticle::generate_key_string());
  if (!k) return k.error();
  std::lock_guard lk(mu_);
  (*k)->generation = ++generation_;
  previous_ = std::move(current_);
  current_ = std::move(*k);
  rotated_at_ = sys_clock::now();
  serial_ = 0;
  return {};
}

result<void> aes_manager::set_key_string(std::string_view key_string) {
  auto k = make(std::string(key_string));
  if (!k) return k.error();
  std::lock_guard lk(mu_);
  (*k)->generation = ++generation_;
  previous_ = std::move(current_);
  current_ = std::move(*k);
  rotated_at_ = sys_clock::now();
  serial_ = 0;
  return {};
}

std::shared_ptr<const aes_key> aes_manager::current() const {
  std::lock_guard lk(mu_);
  return current_;
}

std::shared_ptr<const aes_key> aes_manager::previous(std::chrono::seconds grace) const {
  std::lock_guard lk(mu_);
  if (!previous_ || sys_clock::now() - rotated_at_ > grace) return nullptr;
  return previous_;
}

std::int64_t aes_manager::next_serial() {
  std::lock_guard lk(mu_);
  return ++serial_;
}

// ---------------------------------------------------------------- session_store
session_store::session_store(fs::path dir, std::chrono::seconds lifetime)
    : dir_(std::move(dir)), lifetime_(lifetime) {}

namespace {
bool expired(fs::file_time_type mtime, std::chrono::seconds lifetime) {
  auto age = fs::file_time_type::clock::now() - mtime;
  return age > lifetime;
}
}  // namespace

std::shared_ptr<const crypto::crypticle> session_store::load_locked(const std::string& id, bool create) {
  const fs::path p = dir_ / id;
  std::error_code ec;
  auto mtime = fs::last_write_time(p, ec);
  const bool missing = static_cast<bool>(ec);
  auto it = cache_.find(id);
  if (!missing && it != cache_.end() && it->second.mtime == mtime && !expired(mtime, lifetime_)) {
    return it->second.crypt;
  }
  if (missing || expired(mtime, lifetime_)) {
    if (!create) {
      if (it != cache_.end()) cache_.erase(it);
      return nullptr;
    }
    auto w = util::write_file_atomic(p, crypto::crypticle::generate_key_string(), 0600);
    if (!w) {
      spdlog::error("cannot write session key {}: {}", p.string(), w.error().message());
      return nullptr;
    }
    mtime = fs::last_write_time(p, ec);
    if (ec) return nullptr;
  }
  auto text = util::read_file(p);
  if (!text) return nullptr;
  // Tolerate a trailing newline written by hand/other tools.
  std::string ks = *text;
  while (!ks.empty() && (ks.back() == '\n' || ks.back() == '\r' || ks.back() == ' ')) ks.pop_back();
  auto c = crypto::crypticle::from_key_string(ks);
  if (!c) {
    if (!create) return nullptr;
    // Corrupt file: replace it.
    auto w = util::write_file_atomic(p, crypto::crypticle::generate_key_string(), 0600);
    if (!w) return nullptr;
    text = util::read_file(p);
    if (!text) return nullptr;
    c = crypto::crypticle::from_key_string(*text);
    if (!c) return nullptr;
    mtime = fs::last_write_time(p, ec);
  }
  auto sp = std::make_shared<const crypto::crypticle>(std::move(*c));
  cache_[id] = entry{mtime, sp};
  return sp;
}

result<std::shared_ptr<const crypto::crypticle>> session_store::get_or_create(const std::string& id) {
  std::lock_guard lk(mu_);
  auto c = load_locked(id, true);
  if (!c) return util::make_error_code(util::errc::io_error);
  return c;
}

std::shared_ptr<const crypto::crypticle> session_store::lookup(const std::string& id) {
  std::lock_guard lk(mu_);
  return load_locked(id, false);
}

void session_store::remove(const std::string& id) {
  std::lock_guard lk(mu_);
  cache_.erase(id);
  (void)util::remove_file(dir_ / id);
}

// ---------------------------------------------------------------- accepted_keys
std::shared_ptr<const accepted_keys::entry> accepted_keys::get(const std::string& id) {
  if (!pki::valid_id(id)) return nullptr;
  const fs::path p = store_.path(pki::key_state::accepted, id);
  std::error_code ec;
  auto mtime = fs::last_write_time(p, ec);
  if (ec) {
    std::lock_guard lk(mu_);
    cache_.erase(id);
    good_tok_.erase(id);
    return nullptr;
  }
  auto size = fs::file_size(p, ec);
  if (ec) size = 0;
  {
    std::lock_guard lk(mu_);
    auto it = cache_.find(id);
    if (it != cache_.end() && it->second->mtime == mtime && it->second->size == size) return it->second;
  }
  auto pem = store_.read(pki::key_state::accepted, id);
  if (!pem) return nullptr;
  auto key = crypto::rsa_key::from_public_pem(*pem);
  if (!key) {
    spdlog::warn("accepted key of {} does not parse: {}", id, key.error().message());
    return nullptr;
  }
  auto e = std::make_shared<entry>();
  e->pem_clean = crypto::clean_key(*pem);
  e->key = std::move(*key);
  e->mtime = mtime;
  e->size = size;
  std::lock_guard lk(mu_);
  cache_[id] = e;
  good_tok_.erase(id);
  return e;
}

bool accepted_keys::verify_token(const std::string& id, std::string_view tok) {
  auto e = get(id);
  if (!e) return false;
  {
    std::lock_guard lk(mu_);
    auto it = good_tok_.find(id);
    auto cit = cache_.find(id);
    if (it != good_tok_.end() && cit != cache_.end() && cit->second == e) {
      if (crypto::constant_time_equal(it->second, tok)) return true;
    }
  }
  auto rec = crypto::x931_recover(e->key, tok);
  if (!rec || *rec != "salt") return false;
  std::lock_guard lk(mu_);
  auto cit = cache_.find(id);
  if (cit != cache_.end() && cit->second == e) good_tok_[id] = std::string(tok);
  return true;
}

void accepted_keys::invalidate(const std::string& id) {
  std::lock_guard lk(mu_);
  cache_.erase(id);
  good_tok_.erase(id);
}

void accepted_keys::clear() {
  std::lock_guard lk(mu_);
  cache_.clear();
  good_tok_.clear();
}

}  // namespace sylvite::master
