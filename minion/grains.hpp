// sylvite::minion grains: the core grains Salt computes (salt/grains/core.py) that masters
// and states commonly use, plus static grains. Precedence as Salt: core grains, then the
// `grains` file in the config dir (YAML), then the `grains` option of the minion config.
// Core grains: id, os, os_family, osfullname, osrelease, osrelease_info, osmajorrelease,
// oscodename, osfinger, lsb_distrib_*, kernel, kernelrelease, kernelversion, cpuarch, osarch, host,
// nodename, fqdn, domain, localhost, ipv4, ipv6, ip*_interfaces, hwaddr_interfaces, fqdn_ip4, num_cpus, cpu_model, mem_total,
// swap_total, machine_id, saltversion, saltversioninfo, sylvite_version, shell, path,
// systempath, cwd, pid,
// uid, gid, username, groupname, master, init, virtual, server_id.
// Thread-safety: pure function (reads the OS and files).
#pragma once
#include <string>

#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

// All grains for this minion.
wire::value collect_grains(const config::minion_config& cfg);

// Pieces, exposed for tests.
struct os_release_info {
  std::string id, name, version_id, codename, pretty_name;
};
os_release_info parse_os_release(const std::string& text);
// Salt's os / os_family for an os-release ID ("debian" -> Debian/Debian, "ubuntu" -> Ubuntu/Debian...).
std::pair<std::string, std::string> os_and_family(const os_release_info& rel);
// MemTotal from /proc/meminfo text, in MiB (Salt: kB // 1024).
long long mem_total_mib(const std::string& meminfo);

}  // namespace sylvite::minion
