// sylvite::cluster shared PKI (see cluster_pki.hpp).
#include "cluster/cluster_pki.hpp"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/crypto/crypticle.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"

namespace sylvite::cluster {

namespace fs = std::filesystem;

namespace {
class category : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.cluster"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::peer_key_mismatch: return "peers/<id>.pub holds a different key";
      case errc::bad_id: return "invalid master id";
      case errc::unreadable: return "shared file cannot be parsed";
      case errc::lock_failed: return "cannot lock the shared AES key file";
    }
    return "unknown cluster error";
  }
};

// A shared file another master may be writing (temp + rename, so normally whole):
// a few tries with a short pause before calling it unreadable.
template <class F>
auto with_retries(F&& f) -> decltype(f()) {
  decltype(f()) r = f();
  for (int i = 0; i < 5 && !r; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * (i + 1)));
    r = f();
  }
  return r;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

const boost::system::error_category& cluster_category() noexcept {
  static category c;
  return c;
}

bool valid_peer_id(const std::string& id) { return pki::valid_id(id) && id.front() != '.'; }

result<cluster_keys> load_or_create_cluster_keys(const fs::path& dir, int keysize) {
  const fs::path pem = dir / "cluster.pem";
  const fs::path pub = dir / "cluster.pub";
  cluster_keys out;
  std::error_code ec;
  if (!fs::exists(pem, ec)) {
    auto k = crypto::rsa_key::generate(keysize);
    if (!k) return k.error();
    // create_exclusive: temp + fsync + link(): the first complete file wins.
    auto c = util::create_exclusive(pem, k->private_pem(), 0400);
    if (c) {
      out.created = true;
      spdlog::info("Created the cluster key pair in {}", dir.string());
    } else if (c.error() != util::errc::already_exists) {
      return c.error();
    }
  }
  auto loaded = with_retries([&]() -> result<crypto::rsa_key> {
    auto text = util::read_file(pem);
    if (!text) return text.error();
    return crypto::rsa_key::from_private_pem(*text);
  });
  if (!loaded) {
    spdlog::error("Cannot read the cluster key {}: {}", pem.string(), loaded.error().message());
    return make_error_code(errc::unreadable);
  }
  out.priv = std::move(*loaded);
  out.pub_pem = out.priv.public_pem();
  auto cur = util::read_file(pub);
  if (!cur || trim(*cur) != trim(out.pub_pem)) {
    // Absent, half-written, or stale next to a newer cluster.pem: derive it (every master
    // writes the same bytes, so a race between writers is harmless).
    if (auto w = util::write_file_atomic(pub, out.pub_pem, 0644); !w) return w.error();
  }
  return out;
}

result<key_rotation> rotate_cluster_keys(const fs::path& dir, int keysize, const std::optional<std::string>& new_pem) {
  key_rotation out;
  if (new_pem) {
    auto k = crypto::rsa_key::from_private_pem(*new_pem);
    if (!k) return k.error();
    out.priv = std::move(*k);
  } else {
    auto k = crypto::rsa_key::generate(keysize);
    if (!k) return k.error();
    out.priv = std::move(*k);
  }
  if (!out.priv.has_private()) return make_error_code(errc::unreadable);
  out.pub_pem = out.priv.public_pem();
  util::file_lock lk(dir / ".aes.lock");
  if (!lk.locked()) return make_error_code(errc::lock_failed);
  const fs::path pem = dir / "cluster.pem";
  const fs::path pub = dir / "cluster.pub";
  if (auto old = util::read_file(pem)) {
    if (auto w = util::write_file_atomic(dir / "cluster.pem.old", *old, 0400); !w) return w.error();
    if (auto k = crypto::rsa_key::from_private_pem(*old)) out.old_pub_pem = k->public_pem();
  }
  if (auto oldpub = util::read_file(pub)) {
    if (out.old_pub_pem.empty()) out.old_pub_pem = *oldpub;
    if (auto w = util::write_file_atomic(dir / "cluster.pub.old", *oldpub, 0644); !w) return w.error();
  }
  // cluster.pem first: a master starting between the two renames derives cluster.pub
  // from it (load_or_create_cluster_keys), never pairs the old pem with the new pub.
  if (auto w = util::write_file_atomic(pem, out.priv.private_pem(), 0400); !w) return w.error();
  if (auto w = util::write_file_atomic(pub, out.pub_pem, 0644); !w) return w.error();
  return out;
}

result<aes_file> read_aes(const fs::path& dir) {
  const fs::path p = dir / ".aes";
  return with_retries([&]() -> result<aes_file> {
    std::error_code ec;
    auto mtime = fs::last_write_time(p, ec);
    if (ec) return make_error_code(util::errc::not_found);
    auto text = util::read_file(p);
    if (!text) return text.error();
    std::string key = trim(*text);
    if (!crypto::crypticle::from_key_string(key)) return make_error_code(errc::unreadable);
    return aes_file{key, mtime, false};
  });
}

result<aes_file> load_or_create_aes(const fs::path& dir) {
  const fs::path p = dir / ".aes";
  std::error_code ec;
  bool created = false;
  if (!fs::exists(p, ec)) {
    // Under the lock, so the generation moves with the key; a lock that cannot be taken
    // (read-only share) leaves the create to race as before: create_exclusive decides.
    util::file_lock lk(dir / ".aes.lock");
    auto c = util::create_exclusive(p, crypto::crypticle::generate_key_string(), 0600);
    if (c) {
      created = true;
      if (lk.locked()) (void)write_aes_gen(dir, next_aes_gen(dir));
      spdlog::info("Created the cluster AES key {}", p.string());
    } else if (c.error() != util::errc::already_exists) {
      return c.error();
    }
  }
  auto r = read_aes(dir);
  if (r) r->created = created;
  return r;
}

std::uint64_t read_aes_gen(const fs::path& dir) {
  auto text = util::read_file(dir / ".aes.gen");
  if (!text) return 0;
  const std::string t = trim(*text);
  std::uint64_t g = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), g);
  if (ec != std::errc() || end != t.data() + t.size()) return 0;
  return g;
}

std::uint64_t next_aes_gen(const fs::path& dir) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  return std::max<std::uint64_t>(read_aes_gen(dir) + 1, now_ms > 0 ? static_cast<std::uint64_t>(now_ms) : 0);
}

result<void> write_aes_gen(const fs::path& dir, std::uint64_t gen) {
  return util::write_file_atomic(dir / ".aes.gen", std::to_string(gen) + "\n", 0600);
}

result<aes_file> read_aes_locked(const fs::path& dir) {
  util::file_lock lk(dir / ".aes.lock");
  if (!lk.locked()) return make_error_code(errc::lock_failed);
  auto r = read_aes(dir);
  if (r) r->gen = read_aes_gen(dir);
  return r;
}

result<rotation> rotate_aes(const fs::path& dir, const std::string& expected, const fs::path* dropfile) {
  // fcntl locks are coherent across GlusterFS mounts (lab notes); this waits for the
  // master that is rotating right now.
  util::file_lock lk(dir / ".aes.lock");
  if (!lk.locked()) return make_error_code(errc::lock_failed);
  rotation out;
  auto cur = read_aes(dir);
  std::error_code ec;
  const bool served = dropfile ? !fs::exists(*dropfile, ec) : cur && cur->key != expected;
  if (cur && served) {
    out.now = std::move(*cur);  // someone rotated first: adopt theirs
    out.now.gen = read_aes_gen(dir);
    return out;
  }
  const std::uint64_t gen = next_aes_gen(dir);
  std::string key = crypto::crypticle::generate_key_string();
  auto w = util::write_file_atomic(dir / ".aes", key, 0600);
  if (!w) return w.error();
  auto again = read_aes(dir);
  if (!again) return again.error();
  out.now = std::move(*again);
  out.rotated = true;
  if (auto g = write_aes_gen(dir, gen); g) {
    out.now.gen = gen;
  } else {
    spdlog::warn("cannot write {}: {} (peers with a local cluster_pki_dir take the key unordered)",
                 (dir / ".aes.gen").string(), g.error().message());
  }
  if (dropfile) {  // Salt leaves it 0400; removed here, while no other master can look
    ::chmod(dropfile->c_str(), 0600);
    (void)util::remove_file(*dropfile);
  }
  return out;
}

result<void> ensure_peer_key(const fs::path& dir, const std::string& id, const std::string& pub_pem) {
  if (!valid_peer_id(id)) return make_error_code(errc::bad_id);
  const fs::path peers = dir / "peers";
  if (auto r = util::make_dirs(peers, 0755); !r) return r.error();
  const fs::path p = peers / (id + ".pub");
  auto c = util::create_exclusive(p, pub_pem, 0644);
  if (c) return {};
  if (c.error() != util::errc::already_exists) return c.error();
  auto cur = with_retries([&]() -> result<std::string> { return util::read_file(p); });
  if (!cur) return cur.error();
  if (trim(*cur) != trim(pub_pem)) return make_error_code(errc::peer_key_mismatch);
  return {};
}

std::optional<crypto::rsa_key> peer_key(const fs::path& dir, const std::string& id) {
  if (!valid_peer_id(id)) return std::nullopt;
  auto text = util::read_file(dir / "peers" / (id + ".pub"));
  if (!text) return std::nullopt;
  auto k = crypto::rsa_key::from_public_pem(*text);
  if (!k) return std::nullopt;
  return std::move(*k);
}

std::map<std::string, crypto::rsa_key> list_peer_keys(const fs::path& dir) {
  std::map<std::string, crypto::rsa_key> out;
  for (const auto& name : util::list_dir(dir / "peers")) {
    if (!name.ends_with(".pub")) continue;
    std::string id = name.substr(0, name.size() - 4);
    if (!valid_peer_id(id)) continue;
    if (auto k = peer_key(dir, id)) out.emplace(id, std::move(*k));
  }
  return out;
}

}  // namespace sylvite::cluster
