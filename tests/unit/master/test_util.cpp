#include "test_util.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::test {

namespace fs = std::filesystem;
using wire::value;

temp_dir::temp_dir() {
  static std::atomic<int> n{0};
  path = fs::temp_directory_path() /
         ("sylvite-master-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::remove_all(path);
  fs::create_directories(path);
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

const crypto::rsa_key& cached_key(int index) {
  static std::mutex mu;
  static std::map<int, crypto::rsa_key> keys;
  std::lock_guard lk(mu);
  auto it = keys.find(index);
  if (it == keys.end()) {
    auto k = crypto::rsa_key::generate(2048);
    if (!k) std::abort();
    it = keys.emplace(index, std::move(*k)).first;
  }
  return it->second;
}

config::master_config make_config(const fs::path& dir) {
  config::master_config c;
  c.id = "testmaster";
  c.root_dir = dir;
  c.pki_dir = dir / "pki";
  c.cachedir = dir / "cache";
  c.sock_dir = dir / "sock";
  c.log_file = dir / "master.log";
  c.file_roots = {{"base", {(dir / "srv/salt").string()}}};
  c.pillar_roots = {{"base", {(dir / "srv/pillar").string()}}};
  fs::create_directories(dir / "srv/salt");
  fs::create_directories(dir / "srv/pillar");
  // A master key is slow to generate: reuse a cached one.
  fs::create_directories(c.pki_dir);
  util::write_file_atomic(c.pki_dir / "master.pem", cached_key(0).private_pem(), 0400);
  util::write_file_atomic(c.pki_dir / "master.pub", cached_key(0).public_pem(), 0644);
  return c;
}

std::string fake_minion::pub_clean() const { return crypto::clean_key(key.public_pem()); }

std::string fake_minion::tok() const {
  auto t = crypto::x931_sign(key, "salt");
  return t ? *t : std::string();
}

value fake_minion::auth_load(const std::string& nonce, const crypto::rsa_key* master_pub, const std::string& enc_algo,
                             const std::string& sig_algo) const {
  value l = value::object();
  l["cmd"] = "_auth";
  l["id"] = id;
  l["nonce"] = nonce;
  l["enc_algo"] = enc_algo;
  l["sig_algo"] = sig_algo;
  if (master_pub) {
    auto t = crypto::oaep_encrypt(*master_pub, token_plain);
    if (t) l["token"] = wire::make_bin(*t);
  }
  l["pub"] = pub_clean();
  return l;
}

value fake_minion::auth_body(const value& load, int version) const {
  return value{{"enc", "clear"}, {"load", load}, {"version", version}};
}

value fake_minion::aes_body(value load, const std::string& nonce, const std::string& key_string, int version,
                            bool add_tok) const {
  load["nonce"] = nonce;
  load["ts"] = static_cast<std::int64_t>(std::time(nullptr));
  if (add_tok) load["tok"] = wire::make_bin(tok());
  if (!load.contains("id")) load["id"] = id;
  auto c = crypto::crypticle::from_key_string(key_string);
  value body = value::object();
  body["enc"] = "aes";
  body["load"] = wire::make_bin(c ? c->dumps(load) : std::string());
  body["version"] = version;
  body["id"] = id;
  body["enc_algo"] = "OAEP-SHA1";
  body["sig_algo"] = "PKCS1v15-SHA1";
  return body;
}

result<value> fake_minion::open_reply(const value& reply, const std::string& nonce, const std::string& key_string) const {
  auto b = wire::as_bytes(reply);
  if (!b || reply.is_string()) return crypto::make_error_code(crypto::errc::bad_format);
  auto c = crypto::crypticle::from_key_string(key_string);
  if (!c) return c.error();
  return c->loads(*b, nonce);
}

result<value> fake_minion::check_auth_reply(const value& reply, const std::string& nonce,
                                            const crypto::rsa_key& master_pub, bool sent_token) const {
  auto bad = crypto::make_error_code(crypto::errc::bad_format);
  if (!reply.is_object()) return bad;
  const value* lv = wire::find(reply, "load");
  const value* sv = wire::find(reply, "sig");
  if (!lv || !sv) return bad;
  auto lb = wire::as_bytes(*lv);
  auto sb = wire::as_bytes(*sv);
  if (!lb || !sb || lv->is_object()) return bad;
  if (!crypto::verify(master_pub, *lb, *sb)) return crypto::make_error_code(crypto::errc::bad_signature);
  auto load = wire::unpack(*lb);
  if (!load) return load.error();
  auto n = wire::get_text(*load, "nonce");
  if (!n || *n != nonce) return crypto::make_error_code(crypto::errc::bad_nonce);
  if (!wire::find(*load, "pub_key")) return *load;  // a ret answer
  auto* self = const_cast<fake_minion*>(this);
  auto aes_enc = wire::as_bytes(*wire::find(*load, "aes"));
  auto aes = crypto::oaep_decrypt(key, *aes_enc);
  if (!aes) return aes.error();
  auto sig = crypto::x931_recover(master_pub, *wire::as_bytes(*wire::find(*load, "sig")));
  if (!sig || *sig != crypto::sha256_hex(*aes)) return crypto::make_error_code(crypto::errc::bad_signature);
  if (sent_token) {
    const value* t = wire::find(*load, "token");
    if (!t) return crypto::make_error_code(crypto::errc::bad_key);
    auto tok = crypto::oaep_decrypt(key, *wire::as_bytes(*t));
    if (!tok || *tok != token_plain) return crypto::make_error_code(crypto::errc::bad_key);
  }
  const value* s = wire::find(*load, "session");
  if (!s) return crypto::make_error_code(crypto::errc::bad_format);
  auto sess = crypto::oaep_decrypt(key, *wire::as_bytes(*s));
  if (!sess) return sess.error();
  self->aes = *aes;
  self->session = *sess;
  return *load;
}

value fake_minion::hello_body(const std::string& aes_key) const {
  auto c = crypto::crypticle::from_key_string(aes_key);
  value l = value::object();
  l["id"] = id;
  l["tok"] = wire::make_bin(tok());
  return value{{"enc", "aes"}, {"load", wire::make_bin(c->dumps(l))}, {"version", 3}};
}

void fake_sink::publish_all(std::shared_ptr<const std::string> frame) {
  std::lock_guard lk(mu_);
  sent_.push_back({std::move(frame), true, {}});
}
void fake_sink::publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) {
  std::lock_guard lk(mu_);
  sent_.push_back({std::move(frame), false, ids});
}
std::vector<std::string> fake_sink::connected_ids() const { return connected; }
bool fake_sink::is_connected(const std::string& id) const {
  return std::find(connected.begin(), connected.end(), id) != connected.end();
}
void fake_sink::disconnect(const std::string& id) { disconnected.push_back(id); }
std::vector<fake_sink::sent> fake_sink::take() {
  std::lock_guard lk(mu_);
  std::vector<sent> out;
  out.swap(sent_);
  return out;
}

void accept_key(const master::master_core& m, const fake_minion& fm) {
  auto r = m.key_store().write(pki::key_state::accepted, fm.id, fm.pub_clean());
  (void)r;
}

}  // namespace sylvite::test
