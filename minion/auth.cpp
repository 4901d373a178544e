// sylvite::minion auth: sign-in request and reply verification (see auth.hpp).
// Mirrors salt/crypt.py AsyncAuth (3008.5): minion_sign_in_payload, handle_signin_response,
// verify_master, decrypt_aes, extract_aes, check_auth_deps, verify_signing_master.
// Salt quirks kept on purpose:
//   - TOFU writes minion_master.pub before the AES signature is checked (as Salt does);
//   - the clear signature over `load` is only checked when minion_master.pub exists;
//   - `ret` is tested with Python truthiness (False/None/0/"" -> rejected).
#include "minion/auth.hpp"

#include <spdlog/spdlog.h>

#include <system_error>

#include "core/crypto/crypticle.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "minion/errors.hpp"

namespace sylvite::minion {

namespace {

class minion_category_impl : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.minion"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::auth_failed: return "authentication with the master failed";
      case errc::not_connected: return "not connected to a master";
      case errc::bad_reply: return "reply could not be decrypted or verified";
      case errc::timeout: return "the master did not answer in time";
      case errc::bad_pillar: return "pillar reply failed verification";
      case errc::stopped: return "minion is stopping";
    }
    return "unknown minion error";
  }
};

// Python truthiness for the msgpack values Salt may put in `ret`.
bool py_truthy(const wire::value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (auto b = wire::as_bytes(v)) return !b->empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::string trim_ws(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out;
  for (std::size_t i = b; i < e; ++i)
    if (!std::isspace(static_cast<unsigned char>(s[i]))) out.push_back(s[i]);
  return out;
}

}  // namespace

const boost::system::error_category& minion_category() noexcept {
  static const minion_category_impl cat;
  return cat;
}

std::string_view to_string(auth_status s) {
  switch (s) {
    case auth_status::accepted: return "accepted";
    case auth_status::pending: return "pending";
    case auth_status::rejected: return "rejected";
    case auth_status::rejected_retry: return "rejected_retry";
    case auth_status::full: return "full";
    case auth_status::bad_algo: return "bad_algo";
    case auth_status::failed: return "failed";
    case auth_status::finger_mismatch: return "finger_mismatch";
  }
  return "unknown";
}

result<auth_settings> auth_settings::from_config(const config::minion_config& cfg, const wire::value& grains) {
  auth_settings s;
  s.id = cfg.id;
  s.pki_dir = cfg.pki_dir;
  s.keysize = cfg.keysize;
  auto e = crypto::parse_enc_algo(cfg.encryption_algorithm);
  auto g = crypto::parse_sig_algo(cfg.signing_algorithm);
  if (!e || !g) return make_error_code(crypto::errc::unsupported_algo);
  s.enc = *e;
  s.sig = *g;
  s.enc_name = cfg.encryption_algorithm;
  s.sig_name = cfg.signing_algorithm;
  s.rejected_retry = cfg.rejected_retry;
  s.master_finger = cfg.master_finger;
  s.hash_type = cfg.hash_type;
  s.verify_master_pubkey_sign = cfg.verify_master_pubkey_sign;
  s.master_sign_key_name = cfg.master_sign_key_name;
  s.acceptance_wait_time = cfg.acceptance_wait_time;
  if (auto v = wire::get_bool(cfg.raw, "open_mode")) s.open_mode = *v;
  if (auto v = wire::get_bool(cfg.raw, "always_verify_signature")) s.always_verify_signature = *v;
  if (const wire::value* ag = wire::find(cfg.raw, "autosign_grains"); ag && ag->is_array()) {
    wire::value m = wire::value::object();
    for (const auto& name : *ag) {
      auto n = wire::as_text(name);
      if (!n) continue;
      const wire::value* gv = wire::find(grains, *n);
      m[std::string(*n)] = gv ? *gv : wire::value();
    }
    s.autosign_grains = std::move(m);
  }
  return s;
}

result<auth_client> auth_client::create(auth_settings s) {
  auto key = pki::load_or_generate_keypair(s.pki_dir, "minion", s.keysize);
  if (!key) return key.error();
  return auth_client(std::move(s), std::move(*key));
}

auth_client::auth_client(auth_settings s, crypto::rsa_key key)
    : s_(std::move(s)), key_(std::move(key)) {
  pub_clean_ = crypto::clean_key(key_.public_pem());
  if (auto t = crypto::x931_sign(key_, "salt")) tok_ = std::move(*t);
  token_ = crypto::crypticle::generate_key_string();
}

std::optional<crypto::rsa_key> auth_client::master_key() const {
  auto text = util::read_file(master_pub_path());
  if (!text) return std::nullopt;
  auto k = crypto::rsa_key::from_public_pem(*text);
  if (!k) return std::nullopt;
  return std::move(*k);
}

sign_in_request auth_client::make_request() const {
  sign_in_request req;
  req.nonce = crypto::uuid4_hex();
  wire::value load = wire::value::object();
  load["cmd"] = "_auth";
  load["id"] = s_.id;
  load["nonce"] = req.nonce;
  load["enc_algo"] = s_.enc_name;
  load["sig_algo"] = s_.sig_name;
  if (s_.autosign_grains) load["autosign_grains"] = *s_.autosign_grains;
  if (auto mk = master_key()) {
    if (auto tok = crypto::oaep_encrypt(*mk, token_, s_.enc)) {
      load["token"] = wire::make_bin(*tok);
      req.sent_token = true;
    } else {
      spdlog::debug("Exception while encrypting token {}", tok.error().message());
    }
  } else {
    spdlog::debug("Master public key not found");
  }
  load["pub"] = pub_clean_;
  req.body = wire::value::object();
  req.body["enc"] = "clear";
  req.body["load"] = std::move(load);
  req.body["version"] = 3;
  return req;
}

std::pair<std::string, std::string> auth_client::decrypt_aes(const wire::value& payload, bool master_pub) const {
  auto aes_ct = wire::get_text(payload, "aes");
  if (!aes_ct) return {};
  auto key_str = crypto::oaep_decrypt(key_, *aes_ct, s_.enc);
  if (!key_str) {
    spdlog::error("Failed to decrypt the master AES key: {}", key_str.error().message());
    return {};
  }
  auto sig = wire::get_text(payload, "sig");
  if (!sig) return {};
  if (std::filesystem::exists(master_pub_path())) {
    auto mkey = master_key();
    if (!mkey) {
      spdlog::error("Something unexpected occured loading master pub-key");
      return {};
    }
    auto digest = crypto::x931_recover(*mkey, *sig);
    if (!digest || *digest != crypto::sha256_hex(*key_str)) return {};
  }
  std::string ks = std::move(*key_str);
  if (auto pos = ks.find("_|-"); pos != std::string::npos) {
    // auth_mode >= 2 masters: "<aes>_|-<token>"
    return {ks.substr(0, pos), ks.substr(pos + 3)};
  }
  if (auto tok_ct = wire::get_text(payload, "token")) {
    auto tok = crypto::oaep_decrypt(key_, *tok_ct, s_.enc);
    if (!tok) return {ks, std::string()};
    return {ks, std::move(*tok)};
  }
  if (!master_pub) return {ks, std::string()};
  return {};
}

std::string auth_client::extract_aes(const wire::value& payload, bool master_pub, std::string* why) const {
  auto [aes, token] = decrypt_aes(payload, master_pub);
  if (master_pub) {
    if (aes.empty() || !crypto::constant_time_equal(token, token_)) {
      *why = "The master failed to decrypt the random minion token";
      spdlog::error("{}", *why);
      return {};
    }
  }
  if (aes.empty()) *why = "The master AES key could not be decrypted or its signature did not verify";
  return aes;
}

bool auth_client::check_auth_deps(const wire::value& payload, std::string* why) const {
  const bool has_sig = wire::find(payload, "pub_sig") != nullptr;
  if (has_sig == s_.verify_master_pubkey_sign) return true;
  if (has_sig) {
    *why =
        "The masters sent its public-key signature, but signature verification is not enabled on "
        "the minion. Either enable signature verification on the minion or disable signing the "
        "public key on the master!";
  } else {
    *why =
        "The master did not send its public-key signature, but signature verification is enabled "
        "on the minion. Either disable signature verification on the minion or enable signing the "
        "public on the master!";
  }
  spdlog::error("{}", *why);
  return false;
}

bool auth_client::verify_signing_master(const wire::value& payload, std::string* why) const {
  auto pub_key = wire::get_text(payload, "pub_key");
  auto pub_sig = wire::get_text(payload, "pub_sig");
  if (!pub_key || !pub_sig) {
    *why = "The master did not send its public key signature";
    return false;
  }
  const auto path = s_.pki_dir / (s_.master_sign_key_name + ".pub");
  auto text = util::read_file(path);
  if (!text) {
    *why = "Verification public key " + path.filename().string() +
           " does not exist. You need to copy it from the master to the minions pki directory";
    spdlog::error("{}", *why);
    return false;
  }
  auto sign_key = crypto::rsa_key::from_public_pem(*text);
  auto raw_sig = crypto::base64_decode(trim_ws(*pub_sig));
  if (!sign_key || !raw_sig || !crypto::verify(*sign_key, *pub_key, *raw_sig, s_.sig)) {
    *why = "Received signed public-key from master but signature verification failed!";
    spdlog::error("{}", *why);
    return false;
  }
  spdlog::info("Received signed and verified master pubkey from master");
  if (auto w = util::write_file_atomic(master_pub_path(), *pub_key, 0644); !w)
    spdlog::error("Cannot write {}: {}", master_pub_path().string(), w.error().message());
  return true;
}

std::string auth_client::verify_master(const wire::value& payload, bool master_pub, std::string* why) const {
  const auto m_pub_fn = master_pub_path();
  std::error_code ec;
  const bool m_pub_exists = std::filesystem::is_regular_file(m_pub_fn, ec);
  const std::string payload_pub = crypto::clean_key(wire::get_text(payload, "pub_key").value_or(""));
  if (m_pub_exists && master_pub && !s_.open_mode) {
    auto local = util::read_file(m_pub_fn);
    const std::string local_pub = local ? crypto::clean_key(*local) : std::string();
    if (payload_pub != local_pub) {
      if (!check_auth_deps(payload, why)) return {};
      if (s_.verify_master_pubkey_sign) {
        if (verify_signing_master(payload, why)) return extract_aes(payload, false, why);
        return {};
      }
      *why =
          "The master key has changed, the salt master could have been subverted, verify salt "
          "master's public key";
      spdlog::error("{}", *why);
      return {};
    }
    if (!check_auth_deps(payload, why)) return {};
    if (s_.always_verify_signature) {
      if (verify_signing_master(payload, why)) return extract_aes(payload, true, why);
      *why = "The masters public could not be verified. Is the verification pubkey " +
             s_.master_sign_key_name + ".pub up to date?";
      spdlog::error("{}", *why);
      return {};
    }
    return extract_aes(payload, true, why);
  }
  if (!check_auth_deps(payload, why)) return {};
  if (s_.verify_master_pubkey_sign) {
    if (verify_signing_master(payload, why)) return extract_aes(payload, false, why);
    return {};
  }
  if (!m_pub_exists) {
    // Trust on first use: store the clean form so later compares are like-for-like.
    if (auto w = util::write_file_atomic(m_pub_fn, payload_pub, 0644); !w)
      spdlog::error("Cannot write {}: {}", m_pub_fn.string(), w.error().message());
  }
  return extract_aes(payload, false, why);
}

auth_result auth_client::handle_reply(const sign_in_request& req, const wire::value& body) const {
  auth_result r;
  const wire::value* load = wire::find(body, "load");
  if (!body.is_object() || !load) {
    r.message = "Sign-in attempt failed: " + body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    spdlog::error("{}", r.message);
    return r;
  }
  if (load->is_object()) {
    if (auto ret = wire::get_text(*load, "ret")) {
      if (*ret == "bad enc algo") {
        r.status = auth_status::bad_algo;
        r.message =
            "This minion is using a encryption algorithm that is not supported by it's Master. "
            "Please check your minion configutation.";
        spdlog::error("{}", r.message);
        return r;
      }
      if (*ret == "bad sig algo") {
        r.status = auth_status::bad_algo;
        r.message =
            "This minion is using a signing algorithm that is not supported by it's Master. Please "
            "check your minion configutation.";
        spdlog::error("{}", r.message);
        return r;
      }
    }
  }
  auto signed_data = wire::as_bytes(*load);
  auto clear_sig = wire::get_text(body, "sig");
  if (!signed_data || !clear_sig) {
    r.message = "Sign-in reply is not clear-signed (no load bytes or no sig)";
    spdlog::error("{}", r.message);
    return r;
  }
  auto payload_r = wire::unpack(*signed_data);
  if (!payload_r || !payload_r->is_object()) {
    r.message = "Sign-in reply load is not a msgpack map";
    spdlog::error("{}", r.message);
    return r;
  }
  const wire::value& payload = *payload_r;

  if (wire::find(payload, "pub_key")) {
    std::string why;
    r.creds.aes = verify_master(payload, req.sent_token, &why);
    if (r.creds.aes.empty()) {
      spdlog::critical(
          "The Salt Master server's public key did not authenticate!\nThe master may need to be "
          "updated if it is a version of Salt lower than 3008.5, or\nIf you are confident that you "
          "are connecting to a valid Salt Master, then remove the master public key and restart "
          "the Salt Minion.\nThe master public key can be found at:\n{}",
          master_pub_path().string());
      r.message = "Invalid master key" + (why.empty() ? std::string() : ": " + why);
      return r;
    }
    r.creds.master_pub = crypto::clean_key(wire::get_text(payload, "pub_key").value_or(""));
    auto sess_ct = wire::get_text(payload, "session");
    if (!sess_ct) {
      r.message = "Sign-in reply has no 'session' key (master older than protocol version 3?)";
      spdlog::error("{}", r.message);
      r.creds = {};
      return r;
    }
    auto sess = crypto::oaep_decrypt(key_, *sess_ct, s_.enc);
    if (!sess) {
      r.message = "Cannot decrypt the session key: " + sess.error().message();
      spdlog::error("{}", r.message);
      r.creds = {};
      return r;
    }
    r.creds.session = std::move(*sess);
  }

  std::error_code ec;
  if (std::filesystem::exists(master_pub_path(), ec)) {
    auto mk = master_key();
    if (!mk || !crypto::verify(*mk, *signed_data, *clear_sig, s_.sig)) {
      spdlog::critical("The payload signature did not validate.");
      r.message = "Invalid signature";
      r.creds = {};
      return r;
    }
  }

  if (wire::get_text(payload, "nonce").value_or("") != req.nonce) {
    spdlog::critical("The payload nonce did not validate.");
    r.message = "Invalid nonce";
    r.creds = {};
    return r;
  }

  if (const wire::value* ret = wire::find(payload, "ret")) {
    r.creds = {};
    if (!py_truthy(*ret)) {
      if (s_.rejected_retry) {
        r.status = auth_status::rejected_retry;
        r.message =
            "The Salt Master has rejected this minion's public key.\nTo repair this issue, delete "
            "the public key for this minion on the Salt Master.\nThe Salt Minion will attempt to "
            "re-authenticate.";
        spdlog::error("{}", r.message);
      } else {
        r.status = auth_status::rejected;
        r.message =
            "The Salt Master has rejected this minion's public key!\nTo repair this issue, delete "
            "the public key for this minion on the Salt Master and restart this minion.\nOr restart "
            "the Salt Master in open mode to clean out the keys. The Salt Minion will now exit.";
        spdlog::critical("{}", r.message);
      }
      return r;
    }
    if (wire::as_text(*ret).value_or("") == "full") {
      r.status = auth_status::full;
      r.message = "The Salt Master is full (max_minions reached)";
      spdlog::error("{}", r.message);
      return r;
    }
    r.status = auth_status::pending;
    r.message = "The Salt Master has cached the public key for this node, this salt minion will wait for " +
                std::to_string(s_.acceptance_wait_time) + " seconds before attempting to re-authenticate";
    spdlog::error("{}", r.message);
    return r;
  }

  if (!s_.master_finger.empty()) {
    auto text = util::read_file(master_pub_path());
    std::string actual;
    if (text) {
      if (auto f = crypto::pem_fingerprint(*text, s_.hash_type)) actual = *f;
    }
    if (actual != s_.master_finger) {
      r.status = auth_status::finger_mismatch;
      r.message = finger_fail_message(s_.master_finger, actual);
      r.creds = {};
      spdlog::critical("{}", r.message);
      return r;
    }
  }

  if (r.creds.aes.empty()) {
    r.message = "Attempt to authenticate with the salt master failed";
    spdlog::error("{}", r.message);
    return r;
  }
  auto port = wire::get_int(payload, "publish_port");
  if (!port || *port <= 0 || *port > 65535) {
    r.message = "Sign-in reply has no valid publish_port";
    spdlog::error("{}", r.message);
    r.creds = {};
    return r;
  }
  r.creds.publish_port = static_cast<int>(*port);
  r.status = auth_status::accepted;
  return r;
}

std::string finger_fail_message(std::string_view configured, std::string_view actual) {
  return "The specified fingerprint in the master configuration file:\n" + std::string(configured) +
         "\nDoes not match the authenticating master's key:\n" + std::string(actual) +
         "\nVerify that the configured fingerprint matches the fingerprint of the correct master "
         "and that this minion is not subject to a man-in-the-middle attack.";
}

}  // namespace sylvite::minion
