// The `file` and `pam` eauth backends (see eauth_backends.hpp).
#include "master/api/eauth_backends.hpp"

#include <crypt.h>
#include <grp.h>
#include <pwd.h>
#include <security/pam_appl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"

namespace sylvite::master::api::backends {

using wire::value;

namespace {

constexpr std::size_t max_password_file = 64u << 20;

std::string opt_text(const value& cfg, const char* key, std::string def) {
  const value* v = wire::find(cfg, key);
  if (!v) return def;
  if (auto s = wire::as_text(*v)) return std::string(*s);
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  return def;
}

// Python int(x) of an option (an int or a decimal string); nullopt when it raises.
std::optional<long> opt_int(const value& cfg, const char* key, long def) {
  const value* v = wire::find(cfg, key);
  if (!v) return def;
  if (v->is_number_integer()) return static_cast<long>(v->get<std::int64_t>());
  if (auto s = wire::as_text(*v)) {
    std::string t(*s);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    std::size_t b = 0;
    while (b < t.size() && std::isspace(static_cast<unsigned char>(t[b]))) ++b;
    t = t.substr(b);
    if (t.empty()) return std::nullopt;
    char* end = nullptr;
    long n = std::strtol(t.c_str(), &end, 10);
    if (*end) return std::nullopt;
    return n;
  }
  return std::nullopt;
}

// Python str.split(sep) (sep non-empty) and str.strip().
std::vector<std::string> py_split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    auto f = s.find(sep, pos);
    if (f == std::string::npos) {
      out.push_back(s.substr(pos));
      return out;
    }
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep.size();
  }
}
std::string py_strip(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Python's str.splitlines() for readlines()+strip(): \n, \r\n, \r all end a line.
std::vector<std::string> lines_of(const std::string& data) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 0; i < data.size(); ++i) {
    char c = data[i];
    if (c == '\n' || c == '\r') {
      cur += c;
      if (c == '\r' && i + 1 < data.size() && data[i + 1] == '\n') cur += data[++i];
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::optional<std::string> read_small(const std::string& filename) {
  auto r = util::read_file(filename);
  if (!r) return std::nullopt;
  if (r->size() > max_password_file) return std::nullopt;
  return std::move(*r);
}

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string md5_raw(const std::string& s) {
  auto h = crypto::hash_hex(s, "md5");
  return h ? unhex(*h) : std::string(16, '\0');
}

// md5-crypt ("$1$") and Apache's variant ("$apr1$"): PHK's algorithm, the magic string
// being the only difference.
std::string md5_crypt(const std::string& pw, const std::string& salt_in, const std::string& magic) {
  std::string salt = salt_in.substr(0, std::min<std::size_t>(8, salt_in.find('$')));
  std::string fin = md5_raw(pw + salt + pw);
  std::string ctx = pw + magic + salt;
  for (long i = static_cast<long>(pw.size()); i > 0; i -= 16) ctx += fin.substr(0, static_cast<std::size_t>(std::min(16L, i)));
  for (std::size_t i = pw.size(); i; i >>= 1) ctx += (i & 1) ? std::string(1, '\0') : pw.substr(0, 1);
  fin = md5_raw(ctx);
  for (int i = 0; i < 1000; ++i) {
    std::string c1 = (i & 1) ? pw : fin;
    if (i % 3) c1 += salt;
    if (i % 7) c1 += pw;
    c1 += (i & 1) ? fin : pw;
    fin = md5_raw(c1);
  }
  static const char itoa64[] = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string out = magic + salt + "$";
  auto to64 = [&](unsigned long v, int n) {
    while (n-- > 0) {
      out += itoa64[v & 0x3f];
      v >>= 6;
    }
  };
  auto b = [&](int i) { return static_cast<unsigned long>(static_cast<unsigned char>(fin[static_cast<std::size_t>(i)])); };
  to64((b(0) << 16) | (b(6) << 8) | b(12), 4);
  to64((b(1) << 16) | (b(7) << 8) | b(13), 4);
  to64((b(2) << 16) | (b(8) << 8) | b(14), 4);
  to64((b(3) << 16) | (b(9) << 8) | b(15), 4);
  to64((b(4) << 16) | (b(10) << 8) | b(5), 4);
  to64(b(11), 2);
  return out;
}

bool crypt_verify(const std::string& hash, const std::string& password) {
  auto data = std::make_unique<crypt_data>();
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* out = ::crypt_r(password.c_str(), hash.c_str(), data.get());
  if (!out || out[0] == '*') return false;  // "*0"/"*1": unsupported or invalid setting
  return crypto::constant_time_equal(out, hash);
}

bool text_auth(const std::string& username, const std::string& password, const value& cfg,
               const std::string& filename) {
  const std::string hashtype = opt_text(cfg, "^hashtype", "plaintext");
  const std::string sep = opt_text(cfg, "^field_separator", ":");
  auto uf = opt_int(cfg, "^username_field", 1), pf = opt_int(cfg, "^password_field", 2);
  if (!uf || !pf) {
    spdlog::error("eauth file: ^username_field/^password_field must be integers");
    return false;
  }
  if (sep.empty()) {
    spdlog::error("eauth file: ^field_separator is empty");  // str.split('') raises
    return false;
  }
  auto data = read_small(filename);
  if (!data) {
    spdlog::error("eauth file: cannot read {}", filename);
    return false;
  }
  // Python list indexing: field - 1, negative counts from the end.
  auto pick = [](const std::vector<std::string>& f, long idx, std::string& out) {
    long n = static_cast<long>(f.size());
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) return false;
    out = f[static_cast<std::size_t>(idx)];
    return true;
  };
  for (const auto& line : lines_of(*data)) {
    auto fields = py_split(py_strip(line), sep);
    std::string this_user, this_pass;
    if (!pick(fields, *uf - 1, this_user)) {
      spdlog::error("eauth file: username field ({}) does not exist in file {}", *uf - 1, filename);
      return false;
    }
    if (!pick(fields, *pf - 1, this_pass)) {
      spdlog::error("eauth file: password field ({}) does not exist in file {}", *pf - 1, filename);
      return false;
    }
    if (this_user != username) continue;
    if (hashtype == "plaintext") return crypto::constant_time_equal(this_pass, password);
    if (hashtype != "md5" && hashtype != "sha256" && hashtype != "sha512") {
      spdlog::error("eauth file: hash func '{}' is not supported", hashtype);
      return false;
    }
    auto h = crypto::hash_hex(password, hashtype);
    // Short circuit: the user was found; a wrong password ends the search.
    return h && crypto::constant_time_equal(this_pass, *h);
  }
  return false;
}

bool htpasswd_auth(const std::string& username, const std::string& password, const std::string& filename) {
  auto data = read_small(filename);
  if (!data) return false;
  for (const auto& raw : lines_of(*data)) {
    std::string line = py_strip(raw);
    if (line.empty() || line[0] == '#') continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (line.substr(0, colon) != username) continue;
    return htpasswd_verify(line.substr(colon + 1), password);
  }
  return false;
}

bool htdigest_auth(const std::string& username, const std::string& password, const std::string& realm,
                   const std::string& filename) {
  auto data = read_small(filename);
  if (!data) return false;
  for (const auto& raw : lines_of(*data)) {
    std::string line = py_strip(raw);
    if (line.empty() || line[0] == '#') continue;
    auto f = py_split(line, ":");
    if (f.size() != 3 || f[0] != username || f[1] != realm) continue;
    auto h = crypto::hash_hex(username + ":" + realm + ":" + password, "md5");
    std::string want = f[2];
    std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
    return h && crypto::constant_time_equal(want, *h);
  }
  return false;
}

}  // namespace

bool htpasswd_verify(const std::string& hash_in, const std::string& password) {
  std::string hash = py_strip(hash_in);
  if (hash.rfind("$apr1$", 0) == 0) {
    std::string rest = hash.substr(6);
    return crypto::constant_time_equal(md5_crypt(password, rest, "$apr1$"), hash);
  }
  if (hash.rfind("$1$", 0) == 0) {
    return crypto::constant_time_equal(md5_crypt(password, hash.substr(3), "$1$"), hash);
  }
  if (hash.rfind("{SHA}", 0) == 0) {
    auto h = crypto::hash_hex(password, "sha1");
    return h && crypto::constant_time_equal(crypto::base64_encode(unhex(*h)), hash.substr(5));
  }
  if (hash.rfind("$2", 0) == 0 || hash.rfind("$5$", 0) == 0 || hash.rfind("$6$", 0) == 0 ||
      hash.rfind("$y$", 0) == 0) {
    return crypt_verify(hash, password);
  }
  if (hash.size() == 13 && hash.find_first_not_of("./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") ==
                               std::string::npos) {
    if (crypt_verify(hash, password)) return true;  // traditional DES crypt
  }
  return crypto::constant_time_equal(hash, password);  // plaintext, passlib's last resort
}

bool file_auth(const value& cfg, const std::string& username, const std::string& password) {
  const value* fn = wire::find(cfg, "^filename");
  auto filename = fn ? wire::as_text(*fn) : std::nullopt;
  if (!filename) {
    spdlog::error("eauth file: an authentication file must be specified via external_auth:file:^filename");
    return false;
  }
  std::string path(*filename);
  if (::access(path.c_str(), F_OK) != 0) {
    spdlog::error("eauth file: the configured external_auth:file:^filename ({}) does not exist", path);
    return false;
  }
  const std::string filetype = opt_text(cfg, "^filetype", "text");
  if (filetype == "text") return text_auth(username, password, cfg, path);
  if (filetype == "htpasswd" || filetype == "htdigest") {
    if (filetype == "htdigest") {
      std::string realm = opt_text(cfg, "^realm", "");
      if (realm.empty()) {
        spdlog::error("eauth file: a ^realm must be defined in external_auth:file for htdigest filetype");
        return false;
      }
      return htdigest_auth(username, password, realm, path);
    }
    return htpasswd_auth(username, password, path);
  }
  spdlog::error("eauth file: unknown ^filetype {}", filetype);  // Salt calls "text"(): raises
  return false;
}

// ---- PAM -------------------------------------------------------------------------------

namespace {

struct conv_data {
  const std::string* username;
  const std::string* password;
};

extern "C" int sylvite_pam_conv(int n, const struct pam_message** msg, struct pam_response** resp, void* appdata) {
  if (n <= 0 || n > PAM_MAX_NUM_MSG) return PAM_CONV_ERR;
  auto* d = static_cast<conv_data*>(appdata);
  auto* r = static_cast<pam_response*>(std::calloc(static_cast<std::size_t>(n), sizeof(pam_response)));
  if (!r) return PAM_BUF_ERR;
  for (int i = 0; i < n; ++i) {
    const char* answer = nullptr;
    if (msg[i]->msg_style == PAM_PROMPT_ECHO_OFF) answer = d->password->c_str();
    else if (msg[i]->msg_style == PAM_PROMPT_ECHO_ON) answer = d->username->c_str();
    else continue;  // PAM_ERROR_MSG / PAM_TEXT_INFO: no answer
    r[i].resp = ::strdup(answer);
    if (!r[i].resp) {
      for (int j = 0; j < i; ++j) {
        if (r[j].resp) {
          std::memset(r[j].resp, 0, std::strlen(r[j].resp));
          std::free(r[j].resp);
        }
      }
      std::free(r);
      return PAM_BUF_ERR;
    }
    r[i].resp_retcode = 0;
  }
  *resp = r;
  return PAM_SUCCESS;
}

}  // namespace

bool pam_auth(const std::string& service, const std::string& username, const std::string& password) {
  if (username.empty() || username.find('\0') != std::string::npos || password.find('\0') != std::string::npos)
    return false;
  conv_data d{&username, &password};
  struct pam_conv conv {
    sylvite_pam_conv, &d
  };
  pam_handle_t* h = nullptr;
  int rc = ::pam_start(service.c_str(), username.c_str(), &conv, &h);
  if (rc != PAM_SUCCESS) {
    spdlog::error("eauth pam: pam_start({}) failed: {}", service, h ? ::pam_strerror(h, rc) : "error");
    if (h) ::pam_end(h, rc);
    return false;
  }
  rc = ::pam_authenticate(h, 0);
  if (rc == PAM_SUCCESS) rc = ::pam_acct_mgmt(h, 0);
  if (rc != PAM_SUCCESS) {
    spdlog::warn("eauth pam: authentication of {} through service {} failed: {}", username, service,
                 ::pam_strerror(h, rc));
    if (::geteuid() != 0 && ::access("/etc/shadow", R_OK) != 0) {
      static std::once_flag once;
      std::call_once(once, [] {
        spdlog::critical(
            "eauth pam: the master runs as uid {} and cannot read /etc/shadow, so pam_unix refuses to check "
            "other users' passwords: run the master as root or add its user to the shadow group",
            ::geteuid());
      });
    }
  }
  ::pam_end(h, rc);
  return rc == PAM_SUCCESS;
}

std::vector<std::string> system_groups(const std::string& username) {
  std::vector<std::string> out;
  long sz = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(static_cast<std::size_t>(sz > 0 ? sz : 16384));
  struct passwd pw {};
  struct passwd* res = nullptr;
  while (::getpwnam_r(username.c_str(), &pw, buf.data(), buf.size(), &res) == ERANGE && buf.size() < (1u << 20))
    buf.resize(buf.size() * 2);
  if (!res) return out;
  const gid_t base = pw.pw_gid;
  int n = 64;
  std::vector<gid_t> gids(static_cast<std::size_t>(n));
  while (::getgrouplist(username.c_str(), base, gids.data(), &n) == -1 && n < 65536) gids.resize(static_cast<std::size_t>(n) + 64), n = static_cast<int>(gids.size());
  gids.resize(static_cast<std::size_t>(std::max(n, 0)));
  std::vector<char> gbuf(16384);
  for (gid_t g : gids) {
    struct group gr {};
    struct group* gres = nullptr;
    int e;
    while ((e = ::getgrgid_r(g, &gr, gbuf.data(), gbuf.size(), &gres)) == ERANGE && gbuf.size() < (1u << 22))
      gbuf.resize(gbuf.size() * 2);
    if (gres && gres->gr_name) out.emplace_back(gres->gr_name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sylvite::master::api::backends
