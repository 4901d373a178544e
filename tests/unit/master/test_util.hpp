// Shared helpers for the master unit tests: temp dirs, cached RSA keys, a fake minion
// (built only from core/crypto + core/wire) and a fake publish sink.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/wire/value.hpp"
#include "master/master.hpp"

namespace sylvite::test {

struct temp_dir {
  std::filesystem::path path;
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

// RSA keys are slow to generate: a few cached per process (index 0..n).
const crypto::rsa_key& cached_key(int index);

// A master config rooted in dir (pki, cache, sock, file_roots, pillar_roots).
config::master_config make_config(const std::filesystem::path& dir);

// What a Salt 3008 minion does (salt/crypt.py, salt/channel/client.py).
struct fake_minion {
  std::string id;
  crypto::rsa_key key;
  std::string token_plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789abcdefghijkl==";
  std::string session;  // session key string after auth
  std::string aes;      // publish AES key string after auth

  std::string pub_clean() const;
  std::string tok() const;  // X9.31 of "salt"
  // _auth load (clear); with_token adds the OAEP token to master_pub.
  wire::value auth_load(const std::string& nonce, const crypto::rsa_key* master_pub = nullptr,
                        const std::string& enc_algo = "OAEP-SHA1", const std::string& sig_algo = "PKCS1v15-SHA1") const;
  wire::value auth_body(const wire::value& load, int version = 3) const;
  // v3 aes envelope around load (adds nonce, ts, tok, id) encrypted with `with` key.
  wire::value aes_body(wire::value load, const std::string& nonce, const std::string& key_string,
                       int version = 3, bool add_tok = true) const;
  // Decrypt a "send" reply with the session key and nonce.
  result<wire::value> open_reply(const wire::value& reply, const std::string& nonce, const std::string& key_string) const;
  // Full auth reply check as AsyncAuth.handle_signin_response; on success fills
  // session/aes and returns the decoded reply map.
  result<wire::value> check_auth_reply(const wire::value& reply, const std::string& nonce,
                                       const crypto::rsa_key& master_pub, bool sent_token) const;
  wire::value hello_body(const std::string& aes_key) const;
};

class fake_sink : public master::pub_sink {
 public:
  struct sent {
    std::shared_ptr<const std::string> frame;
    bool all = false;
    std::vector<std::string> ids;
  };
  void publish_all(std::shared_ptr<const std::string> frame) override;
  void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) override;
  std::vector<std::string> connected_ids() const override;
  bool is_connected(const std::string& id) const override;
  std::size_t connection_count() const override { return connections; }
  std::size_t connections = 0;
  void disconnect(const std::string& id) override;
  std::vector<sent> take();
  std::vector<std::string> connected;
  std::vector<std::string> disconnected;

 private:
  mutable std::mutex mu_;
  std::vector<sent> sent_;
};

// Accept a minion key on disk.
void accept_key(const master::master_core& m, const fake_minion& fm);

}  // namespace sylvite::test
