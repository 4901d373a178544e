// sylvite::minion grains (see grains.hpp). Values follow salt/grains/core.py on Linux:
// ipv4/ipv6 are sorted address lists including loopback, mem_total is MiB, num_cpus is the
// online CPU count, osmajorrelease an int, osrelease_info a list of ints.
#include "minion/grains.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <net/if.h>
#include <pwd.h>
#include <grp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "sylvite/version.hpp"

namespace sylvite::minion {

namespace {

std::string unquote(std::string v) {
  if (v.size() >= 2 && ((v.front() == '"' && v.back() == '"') || (v.front() == '\'' && v.back() == '\'')))
    v = v.substr(1, v.size() - 2);
  return v;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string resolve_fqdn(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  std::string out = host;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res) {
    if (res->ai_canonname && *res->ai_canonname) out = res->ai_canonname;
    ::freeaddrinfo(res);
  }
  return out;
}

void interface_addresses(std::vector<std::string>& v4, std::vector<std::string>& v6) {
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) != 0) return;
  std::set<std::string> s4, s6;
  for (ifaddrs* p = ifa; p; p = p->ifa_next) {
    if (!p->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (p->ifa_addr->sa_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(p->ifa_addr);
      if (::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) s4.insert(buf);
    } else if (p->ifa_addr->sa_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(p->ifa_addr);
      if (::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) s6.insert(buf);
    }
  }
  ::freeifaddrs(ifa);
  v4.assign(s4.begin(), s4.end());
  v6.assign(s6.begin(), s6.end());
}

wire::value int_list(const std::string& dotted) {
  wire::value out = wire::value::array();
  std::stringstream ss(dotted);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty() || !std::all_of(part.begin(), part.end(), ::isdigit)) break;
    out.push_back(std::stoll(part));
  }
  return out;
}

std::string cpu_model() {
  auto text = util::read_file("/proc/cpuinfo");
  if (!text) return {};
  std::stringstream ss(*text);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return trim(line.substr(pos + 1));
    }
  }
  return {};
}

long long meminfo_field_mib(const std::string& meminfo, const std::string& field) {
  std::stringstream ss(meminfo);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::stringstream ls(line.substr(field.size() + 1));
      long long kb = 0;
      ls >> kb;
      return kb / 1024;
    }
  }
  return 0;
}

std::string dpkg_arch(const std::string& machine) {
  if (machine == "x86_64") return "amd64";
  if (machine == "aarch64") return "arm64";
  if (machine == "i686" || machine == "i386") return "i386";
  if (machine.rfind("armv7", 0) == 0) return "armhf";
  return machine;
}

// Salt's server_id: abs(int(sha256(id).hexdigest(), 16) % 2**31) = low 31 bits of the digest.
long long server_id(const std::string& id) {
  std::string d = crypto::sha256(id);
  std::uint32_t low = 0;
  for (std::size_t i = d.size() - 4; i < d.size(); ++i) low = (low << 8) | static_cast<unsigned char>(d[i]);
  return static_cast<long long>(low & 0x7FFFFFFFu);
}

// salt.grains.core._linux_init_system, simplified: look at pid 1's command.
std::string init_system() {
  auto cmdline = util::read_file("/proc/1/cmdline");
  if (!cmdline || cmdline->empty()) return "unknown";
  std::string first = cmdline->substr(0, cmdline->find('\0'));
  std::string base = std::filesystem::path(first).filename().string();
  std::error_code ec;
  if (base == "systemd") return "systemd";
  if (base == "init") {
    auto target = std::filesystem::read_symlink(first.empty() ? "/sbin/init" : first, ec);
    if (!ec && target.string().find("systemd") != std::string::npos) return "systemd";
    if (std::filesystem::exists("/run/systemd/system", ec)) return "systemd";
    if (std::filesystem::exists("/run/openrc", ec)) return "openrc";
    return "sysvinit";
  }
  if (base == "runit" || base == "runsvdir") return "runit";
  if (base == "openrc-init") return "openrc";
  return "unknown";
}

struct iface_addrs {
  std::map<std::string, std::vector<std::string>> v4, v6;
  std::map<std::string, std::string> hw;
};

iface_addrs per_interface() {
  iface_addrs out;
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* p = ifa; p; p = p->ifa_next) {
    if (!p->ifa_name) continue;
    std::string name = p->ifa_name;
    out.v4[name];
    out.v6[name];
    if (!p->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (p->ifa_addr->sa_family == AF_INET) {
      if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr, buf, sizeof buf))
        out.v4[name].push_back(buf);
    } else if (p->ifa_addr->sa_family == AF_INET6) {
      if (::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(p->ifa_addr)->sin6_addr, buf, sizeof buf))
        out.v6[name].push_back(buf);
    }
  }
  ::freeifaddrs(ifa);
  for (const auto& [name, v] : out.v4) {
    if (auto mac = util::read_file("/sys/class/net/" + name + "/address")) out.hw[name] = trim(*mac);
  }
  return out;
}

}  // namespace

os_release_info parse_os_release(const std::string& text) {
  os_release_info r;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos || line[0] == '#') continue;
    std::string k = trim(line.substr(0, eq));
    std::string v = unquote(trim(line.substr(eq + 1)));
    if (k == "ID") r.id = v;
    else if (k == "NAME") r.name = v;
    else if (k == "VERSION_ID") r.version_id = v;
    else if (k == "VERSION_CODENAME") r.codename = v;
    else if (k == "PRETTY_NAME") r.pretty_name = v;
  }
  return r;
}

std::pair<std::string, std::string> os_and_family(const os_release_info& rel) {
  static const std::vector<std::tuple<std::string, std::string, std::string>> map = {
      {"debian", "Debian", "Debian"},       {"ubuntu", "Ubuntu", "Debian"},       {"linuxmint", "Mint", "Debian"},
      {"raspbian", "Raspbian", "Debian"},   {"devuan", "Devuan", "Debian"},       {"centos", "CentOS", "RedHat"},
      {"centos_stream", "CentOS Stream", "RedHat"},
      {"rhel", "RedHat", "RedHat"},         {"fedora", "Fedora", "RedHat"},       {"rocky", "Rocky", "RedHat"},
      {"almalinux", "AlmaLinux", "RedHat"}, {"ol", "OEL", "RedHat"},              {"amzn", "Amazon", "RedHat"},
      {"alpine", "Alpine", "Alpine"},       {"arch", "Arch", "Arch"},             {"manjaro", "Manjaro", "Arch"},
      {"gentoo", "Gentoo", "Gentoo"},       {"sles", "SUSE", "Suse"},             {"opensuse-leap", "Leap", "Suse"},
      {"opensuse-tumbleweed", "openSUSE Tumbleweed", "Suse"}, {"void", "Void", "Void"}, {"nixos", "NixOS", "NixOS"},
  };
  for (const auto& [id, os, fam] : map)
    if (rel.id == id) return {os, fam};
  std::string os = rel.name.empty() ? std::string("Linux") : rel.name;
  return {os, os};
}

long long mem_total_mib(const std::string& meminfo) { return meminfo_field_mib(meminfo, "MemTotal"); }

wire::value collect_grains(const config::minion_config& cfg) {
  wire::value g = wire::value::object();
  utsname u{};
  ::uname(&u);
  const std::string host = hostname();
  const std::string fqdn = resolve_fqdn(host);
  os_release_info rel;
  if (auto t = util::read_file("/etc/os-release")) rel = parse_os_release(*t);
  else if (auto t2 = util::read_file("/usr/lib/os-release")) rel = parse_os_release(*t2);
  auto [os, family] = os_and_family(rel);

  g["id"] = cfg.id;
  g["kernel"] = std::string(u.sysname);
  g["kernelrelease"] = std::string(u.release);
  g["kernelversion"] = std::string(u.version);
  g["cpuarch"] = std::string(u.machine);
  g["osarch"] = dpkg_arch(u.machine);
  g["os"] = os;
  g["os_family"] = family;
  g["osfullname"] = rel.name.empty() ? os : rel.name;
  g["osrelease"] = rel.version_id;
  g["osrelease_info"] = int_list(rel.version_id);
  if (!g["osrelease_info"].empty()) g["osmajorrelease"] = g["osrelease_info"][0];
  g["oscodename"] = rel.codename;
  {
    // salt.grains.core: os for a few distributions, osfullname otherwise; the full
    // osrelease for Ubuntu/Pop/NixOS, else the major release.
    static const std::set<std::string> by_os = {"Debian", "FreeBSD", "OpenBSD", "NetBSD", "Mac", "Raspbian", "AlmaLinux"};
    const std::string os_name = by_os.count(os) ? os : g["osfullname"].get<std::string>();
    std::string ver;
    if (os == "Ubuntu" || os == "Pop" || os == "NixOS") ver = rel.version_id;
    else if (!g["osrelease_info"].empty()) ver = std::to_string(g["osrelease_info"][0].get<long long>());
    g["osfinger"] = os_name + "-" + ver;
  }
  g["lsb_distrib_id"] = rel.name;
  g["lsb_distrib_release"] = rel.version_id;
  g["lsb_distrib_codename"] = rel.codename.empty() ? rel.pretty_name : rel.codename;
  g["host"] = host.substr(0, host.find('.'));
  g["nodename"] = std::string(u.nodename);
  g["localhost"] = host;
  g["fqdn"] = fqdn;
  auto dot = fqdn.find('.');
  g["domain"] = dot == std::string::npos ? std::string() : fqdn.substr(dot + 1);
  std::vector<std::string> v4, v6;
  interface_addresses(v4, v6);
  g["ipv4"] = v4;
  g["ipv6"] = v6;
  {
    auto per = per_interface();
    wire::value ip4 = wire::value::object(), ip6 = wire::value::object(), ipall = wire::value::object(),
                hw = wire::value::object();
    for (const auto& [name, addrs] : per.v4) {
      ip4[name] = addrs;
      wire::value both = addrs;
      for (const auto& a : per.v6[name]) both.push_back(a);
      ipall[name] = both;
      ip6[name] = per.v6[name];
    }
    for (const auto& [name, mac] : per.hw) hw[name] = mac;
    g["ip4_interfaces"] = ip4;
    g["ip6_interfaces"] = ip6;
    g["ip_interfaces"] = ipall;
    g["hwaddr_interfaces"] = hw;
  }
  {
    wire::value ip4 = wire::value::array();
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (::getaddrinfo(fqdn.c_str(), nullptr, &hints, &res) == 0) {
      std::set<std::string> seen;
      for (addrinfo* p = res; p; p = p->ai_next) {
        char buf[INET_ADDRSTRLEN] = {};
        if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, buf, sizeof buf)) seen.insert(buf);
      }
      ::freeaddrinfo(res);
      for (const auto& s : seen) ip4.push_back(s);
    }
    g["fqdn_ip4"] = ip4;
  }
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  g["num_cpus"] = n > 0 ? n : static_cast<long>(std::thread::hardware_concurrency());
  g["cpu_model"] = cpu_model();
  if (auto mi = util::read_file("/proc/meminfo")) {
    g["mem_total"] = mem_total_mib(*mi);
    g["swap_total"] = meminfo_field_mib(*mi, "SwapTotal");
  } else {
    g["mem_total"] = 0;
    g["swap_total"] = 0;
  }
  if (auto mid = util::read_file("/etc/machine-id")) g["machine_id"] = trim(*mid);
  g["saltversion"] = salt_compat_version;
  g["saltversioninfo"] = wire::value::array({salt_compat_versioninfo[0], salt_compat_versioninfo[1]});
  g["sylvite_version"] = sylvite_version;
  const char* shell = std::getenv("SHELL");
  g["shell"] = shell && *shell ? shell : "/bin/sh";
  const char* path = std::getenv("PATH");
  g["path"] = path ? path : "";
  {
    wire::value sp = wire::value::array();
    std::stringstream ps(path ? path : "");
    std::string dir;
    while (std::getline(ps, dir, ':'))
      if (!dir.empty()) sp.push_back(dir);
    g["systempath"] = sp;
    std::error_code ec;
    g["cwd"] = std::filesystem::current_path(ec).string();
  }
  g["pid"] = static_cast<long long>(::getpid());
  g["uid"] = static_cast<long long>(::geteuid());
  g["gid"] = static_cast<long long>(::getegid());
  {
    std::vector<char> buf(16384);
    passwd pw{}, *pres = nullptr;
    if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &pres) == 0 && pres) g["username"] = pw.pw_name;
    group gr{}, *gres = nullptr;
    if (::getgrgid_r(::getegid(), &gr, buf.data(), buf.size(), &gres) == 0 && gres) g["groupname"] = gr.gr_name;
  }
  g["master"] = cfg.master.empty() ? std::string() : cfg.master.front();
  g["init"] = init_system();
  g["virtual"] = std::filesystem::exists("/.dockerenv") ? "container" : "physical";
  g["server_id"] = server_id(cfg.id);

  // Static grains: <config_dir>/grains, then the config's `grains` option.
  if (!cfg.config_dir.empty()) {
    if (auto text = util::read_file(cfg.config_dir / "grains")) {
      auto parsed = config::parse_yaml(*text);
      if (parsed && parsed->is_object()) {
        for (const auto& [k, v] : parsed->items()) g[k] = v;
      } else if (!parsed) {
        spdlog::error("Cannot parse {}: {}", (cfg.config_dir / "grains").string(), parsed.error());
      }
    }
  }
  if (cfg.grains.is_object())
    for (const auto& [k, v] : cfg.grains.items()) g[k] = v;
  return g;
}

}  // namespace sylvite::minion
