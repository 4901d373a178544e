// sylvite::master keys: see keys.hpp. Salt quirks:
//  - the auth reply "sig" is X9.31 over the 64 hex chars of SHA-256(AES key string);
//    it depends only on the key, so it is computed once per AES key, not per minion
//    (Salt recomputes it on every auth: one private RSA op saved per auth);
//  - session files hold the bare key string, no newline (Crypticle.write_key), 0600.
#include "master/keys.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>

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
  crypto::rsa_key priv;
  {
    std::lock_guard lk(priv_mu_);
    priv = priv_;
  }
  auto sig = crypto::x931_sign(priv, crypto::sha256_hex(key_string));
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

void aes_manager::set_master_key(crypto::rsa_key master_priv) {
  std::lock_guard lk(priv_mu_);
  priv_ = std::move(master_priv);
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
namespace {
bool expired(fs::file_time_type mtime, std::chrono::seconds lifetime) {
  auto age = fs::file_time_type::clock::now() - mtime;
  return age > lifetime;
}

std::string trim_key(std::string ks) {
  // Tolerate a trailing newline written by hand/other tools.
  while (!ks.empty() && (ks.back() == '\n' || ks.back() == '\r' || ks.back() == ' ')) ks.pop_back();
  return ks;
}
}  // namespace

session_store::session_store(fs::path dir, std::chrono::seconds lifetime, std::chrono::milliseconds revalidate)
    : dir_(std::move(dir)),
      lifetime_(lifetime),
      revalidate_(revalidate),
      shards_(new shard[kShards]),
      syncer_(util::group_syncer::shared_for(dir_)) {}

session_store::shard& session_store::shard_of(const std::string& id) {
  return shards_[std::hash<std::string>{}(id) % kShards];
}

std::shared_ptr<const crypto::crypticle> session_store::cached(shard& s, const std::string& id) {
  std::lock_guard lk(s.mu);
  auto it = s.map.find(id);
  if (it == s.map.end()) return nullptr;
  if (std::chrono::steady_clock::now() - it->second.checked >= revalidate_) return nullptr;
  if (expired(it->second.mtime, lifetime_)) return nullptr;
  return it->second.crypt;
}

std::shared_ptr<const crypto::crypticle> session_store::load(shard& s, const std::string& id, bool create,
                                                              bool* needs_read) {
  const std::uint64_t epoch = epoch_.load();
  const fs::path p = dir_ / id;
  const auto now = std::chrono::steady_clock::now();
  file_checks_++;
  std::error_code ec;
  auto mtime = fs::last_write_time(p, ec);
  bool missing = static_cast<bool>(ec);
  if (missing && ec != std::errc::no_such_file_or_directory) {
    // Unreadable, not absent (e.g. EIO from a GlusterFS split brain, ENOTCONN): creating a
    // new key over it would fail the same way or hand this minion a key the other masters
    // cannot read. Refuse, naming the cause.
    spdlog::error("cannot read session key {}: {}", p.string(), ec.message());
    return nullptr;
  }
  {
    std::lock_guard lk(s.mu);
    auto it = s.map.find(id);
    if (!missing && it != s.map.end() && it->second.mtime == mtime && !expired(mtime, lifetime_)) {
      it->second.checked = now;  // unchanged file: the cached key stands
      return it->second.crypt;
    }
    if ((missing || expired(mtime, lifetime_)) && !create) {
      if (it != s.map.end()) s.map.erase(it);
      return nullptr;
    }
  }
  if (needs_read) {  // stat only: the file is new or changed, and must be read
    *needs_read = true;
    return nullptr;
  }
  std::string ks;
  bool wrote = false;
  {
    // Creation and regeneration of ids of this shard are serialised (two sign-ins of one
    // minion must not hand out two different keys); lookups never wait for it.
    std::unique_lock create_lk(s.create_mu, std::defer_lock);
    if (missing || expired(mtime, lifetime_)) {
      if (!create) return nullptr;
      create_lk.lock();
      mtime = fs::last_write_time(p, ec);  // another thread may have made it meanwhile
      missing = static_cast<bool>(ec);
      if (missing && ec != std::errc::no_such_file_or_directory) {
        spdlog::error("cannot read session key {}: {}", p.string(), ec.message());
        return nullptr;
      }
      if (missing) {
        auto w = util::create_exclusive_nosync(p, crypto::crypticle::generate_key_string(), 0600);
        if (!w && w.error() != util::errc::already_exists) {
          spdlog::error("cannot write session key {}: {}", p.string(), w.error().message());
          return nullptr;
        }
        wrote = true;
      } else if (expired(mtime, lifetime_)) {
        auto w = util::write_file_atomic_nosync(p, crypto::crypticle::generate_key_string(), 0600);
        if (!w) {
          spdlog::error("cannot write session key {}: {}", p.string(), w.error().message());
          return nullptr;
        }
        wrote = true;
      }
      mtime = fs::last_write_time(p, ec);
      if (ec) return nullptr;
    }
    auto text = util::read_file_nofollow(p, 4096);
    if (!text) return nullptr;
    ks = trim_key(std::move(*text));
    if (!crypto::crypticle::from_key_string(ks)) {
      if (!create) return nullptr;
      // Corrupt or empty file (e.g. lost by an OS crash before the group sync): replace it.
      if (!create_lk.owns_lock()) create_lk.lock();
      auto w = util::write_file_atomic_nosync(p, crypto::crypticle::generate_key_string(), 0600);
      if (!w) return nullptr;
      wrote = true;
      auto again = util::read_file_nofollow(p, 4096);
      if (!again) return nullptr;
      ks = trim_key(std::move(*again));
      mtime = fs::last_write_time(p, ec);
    }
  }
  if (wrote) syncer_->note();
  auto c = crypto::crypticle::from_key_string(ks);
  if (!c) return nullptr;
  auto sp = std::make_shared<const crypto::crypticle>(std::move(*c));
  std::lock_guard lk(s.mu);
  if (epoch_.load() == epoch) s.map[id] = entry{mtime, sp, now};  // not if removed meanwhile
  return sp;
}

result<std::shared_ptr<const crypto::crypticle>> session_store::get_or_create(const std::string& id) {
  auto& s = shard_of(id);
  if (auto c = cached(s, id)) return c;
  auto c = load(s, id, true);
  if (!c) return util::make_error_code(util::errc::io_error);
  return c;
}

std::shared_ptr<const crypto::crypticle> session_store::lookup(const std::string& id) {
  auto& s = shard_of(id);
  if (auto c = cached(s, id)) return c;
  return load(s, id, false);
}

std::optional<std::shared_ptr<const crypto::crypticle>> session_store::lookup_cached(const std::string& id) {
  auto& s = shard_of(id);
  if (auto c = cached(s, id)) return c;
  bool needs_read = false;
  auto c = load(s, id, false, &needs_read);
  if (needs_read) return std::nullopt;
  return c;
}

void session_store::remove(const std::string& id) {
  auto& s = shard_of(id);
  {
    std::lock_guard lk(s.mu);
    epoch_++;
    s.map.erase(id);
  }
  (void)util::remove_file(dir_ / id);
}

// ---------------------------------------------------------------- accepted_keys
struct accepted_keys::watcher {
  int ifd = -1;
  int efd = -1;
  std::atomic<bool> alive{false};
  std::thread thread;
  ~watcher() {
    if (efd >= 0) {
      std::uint64_t one = 1;
      ssize_t n = ::write(efd, &one, sizeof one);
      (void)n;
    }
    if (thread.joinable()) thread.join();
    if (ifd >= 0) ::close(ifd);
    if (efd >= 0) ::close(efd);
  }
};

accepted_keys::accepted_keys(const pki::key_store& store, std::chrono::milliseconds revalidate)
    : store_(store), revalidate_(revalidate) {}

accepted_keys::~accepted_keys() { watch_.reset(); }

void accepted_keys::ensure_watch() {
  std::call_once(watch_once_, [this] {
    const fs::path dir = store_.path(pki::key_state::accepted, "x").parent_path();
    auto w = std::make_unique<watcher>();
    w->ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w->efd = ::eventfd(0, EFD_CLOEXEC);
    if (w->ifd < 0 || w->efd < 0 ||
        ::inotify_add_watch(w->ifd, dir.c_str(),
                            IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |
                                IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) < 0) {
      spdlog::info("accepted keys: no inotify watch on {} ({}); every lookup stats the key file", dir.string(),
                   std::strerror(errno));
      return;  // w's destructor closes the fds; watch_ stays null
    }
    w->alive = true;
    watcher* wp = w.get();
    w->thread = std::thread([this, wp] {
      alignas(struct inotify_event) char buf[16384];
      for (;;) {
        struct pollfd fds[2] = {{wp->ifd, POLLIN, 0}, {wp->efd, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (fds[1].revents) break;  // stop
        for (;;) {
          ssize_t n = ::read(wp->ifd, buf, sizeof buf);
          if (n <= 0) break;
          for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<struct inotify_event*>(p);
            if (ev->mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) {
              clear();
              if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) wp->alive = false;
            } else if (ev->len > 0) {
              invalidate(std::string(ev->name));
            }
            p += sizeof(struct inotify_event) + ev->len;
          }
        }
        if (!wp->alive) {
          spdlog::warn("accepted keys: the inotify watch ended; every lookup stats the key file");
          break;
        }
      }
      wp->alive = false;
    });
    watch_ = std::move(w);
  });
}

bool accepted_keys::watching() {
  ensure_watch();
  return watch_ && watch_->alive.load();
}

std::shared_ptr<const accepted_keys::entry> accepted_keys::get(const std::string& id) {
  return lookup(id, nullptr);
}

std::shared_ptr<const accepted_keys::entry> accepted_keys::lookup(const std::string& id, bool* needs_read) {
  if (!pki::valid_id(id)) return nullptr;
  ensure_watch();
  const bool watched = watch_ && watch_->alive.load();
  const auto now = std::chrono::steady_clock::now();
  const std::uint64_t gen = gen_.load();
  if (watched) {
    std::lock_guard lk(mu_);
    auto it = cache_.find(id);
    if (it != cache_.end() && now - it->second.checked < revalidate_) return it->second.e;
  }
  file_checks_++;
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
    if (it != cache_.end() && it->second.e->mtime == mtime && it->second.e->size == size) {
      if (gen_.load() == gen) it->second.checked = now;
      return it->second.e;
    }
  }
  if (needs_read) {  // stat only: the key is new or changed, and must be read
    *needs_read = true;
    return nullptr;
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
  // An invalidation while the file was read (key deleted/rewritten meanwhile): use the
  // key for this call but do not cache it.
  if (gen_.load() == gen) {
    cache_[id] = cached{e, now};
    good_tok_.erase(id);
  }
  return e;
}

bool accepted_keys::verify_token(const std::string& id, std::string_view tok) {
  auto e = get(id);
  if (!e) return false;
  {
    std::lock_guard lk(mu_);
    auto it = good_tok_.find(id);
    auto cit = cache_.find(id);
    if (it != good_tok_.end() && cit != cache_.end() && cit->second.e == e) {
      if (crypto::constant_time_equal(it->second, tok)) return true;
    }
  }
  return check_token(id, e, tok);
}

bool accepted_keys::check_token(const std::string& id, const std::shared_ptr<const entry>& e, std::string_view tok) {
  auto rec = crypto::x931_recover(e->key, tok);
  if (!rec || *rec != "salt") return false;
  std::lock_guard lk(mu_);
  auto cit = cache_.find(id);
  if (cit != cache_.end() && cit->second.e == e) good_tok_[id] = std::string(tok);  // next time: a compare
  return true;
}

std::optional<bool> accepted_keys::verify_token_cached(const std::string& id, std::string_view tok) {
  if (!pki::valid_id(id)) return false;
  bool needs_read = false;
  auto e = lookup(id, &needs_read);  // at most a stat (the re-check), never a read
  if (needs_read) return std::nullopt;
  if (!e) return false;  // no accepted key
  {
    std::lock_guard lk(mu_);
    auto tit = good_tok_.find(id);
    auto cit = cache_.find(id);
    if (tit != good_tok_.end() && cit != cache_.end() && cit->second.e == e &&
        crypto::constant_time_equal(tit->second, tok))
      return true;
  }
  return check_token(id, e, tok);
}

void accepted_keys::invalidate(const std::string& id) {
  std::lock_guard lk(mu_);
  gen_++;
  cache_.erase(id);
  good_tok_.erase(id);
}

void accepted_keys::clear() {
  std::lock_guard lk(mu_);
  gen_++;
  cache_.clear();
  good_tok_.clear();
}

}  // namespace sylvite::master
