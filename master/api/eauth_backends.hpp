// sylvite::master::api eauth backends: the password checks behind Salt's `pam` and `file`
// external_auth modules (salt/auth/pam.py, salt/auth/file.py) and the groups they report.
//   file: ^filename (required), ^filetype text|htpasswd|htdigest (default text),
//         ^hashtype plaintext|md5|sha256|sha512 (text only, Salt's hashutil.digest),
//         ^field_separator (':'), ^username_field (1), ^password_field (2), ^realm
//         (htdigest). htpasswd hashes: bcrypt ($2a$/$2b$/$2y$), sha256/sha512-crypt
//         ($5$/$6$), md5-crypt ($1$) and des via crypt(3) (libxcrypt), Apache's $apr1$,
//         {SHA} (base64 SHA-1), else plaintext, as passlib's htpasswd context accepts.
//         No groups (Salt's file module has none).
//   pam:  pam_start(auth.pam.service, default "login") + pam_authenticate + pam_acct_mgmt,
//         a conversation that answers hidden prompts with the password and visible ones
//         with the user name; groups: the user's system groups (getgrouplist).
// Passwords are never logged. Thread-safety: free functions, safe from any thread
// (crypt_r, getpwnam_r/getgrgid_r; PAM handles are per call).
#pragma once
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master::api::backends {

// salt.auth.file.auth(username, password) with the ^options of external_auth:file.
bool file_auth(const wire::value& file_config, const std::string& username, const std::string& password);

// One htpasswd hash (the part after "user:") against a password.
bool htpasswd_verify(const std::string& hash, const std::string& password);

// salt.auth.pam.auth(username, password) with service (auth.pam.service).
bool pam_auth(const std::string& service, const std::string& username, const std::string& password);

// salt.utils.user.get_group_list(username): group names, sorted; {} for an unknown user.
std::vector<std::string> system_groups(const std::string& username);

}  // namespace sylvite::master::api::backends
