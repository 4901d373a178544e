// sylvite::minion version strings.
// salt_compat_version is what test.version and the saltversion grain report: the Salt
// release whose wire protocol and module return shapes this minion reproduces. A Salt
// master parses it (salt-run manage.versions uses SaltStackVersion.parse and compares it
// with its own version; "3008.5" reads as "Up to date" under a 3008.5 master), and states
// and Jinja compare saltversioninfo numerically, so it must be a plain Salt version.
// The sylvite release is reported separately: grain `sylvite_version`, test.versions_report
// and `salt-minion --version`.
#pragma once

namespace sylvite::minion {

inline constexpr const char* salt_compat_version = "3008.5";
inline constexpr int salt_compat_versioninfo[2] = {3008, 5};  // SaltStackVersion.info for 3008.5
#ifdef SYLVITE_VERSION
inline constexpr const char* sylvite_version = SYLVITE_VERSION;
#else
inline constexpr const char* sylvite_version = "0.1.0";
#endif

}  // namespace sylvite::minion
