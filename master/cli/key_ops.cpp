// sylvite::cli salt-key logic: a port of Salt 3008's KeyCLI/Key (salt/key.py) and the
// "key" outputter (salt/output/key.py) over pki::key_store. Messages, prompts, ordering
// and exit codes follow Salt: nothing matching is not an error (exit 0), deletes prompt
// "[N/y]" (default no), accept/reject "[n/Y]" (default yes).
#include "master/cli/key_ops.hpp"

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>

#include "cluster/join.hpp"
#include "cluster/unsettled_keys.hpp"
#include "core/crypto/rsa.hpp"
#include "master/cli/args.hpp"

namespace sylvite::cli::keys {
namespace {

using wire::value;

std::optional<pki::key_state> state_of_dir(std::string_view d) {
  if (d == acc) return pki::key_state::accepted;
  if (d == pend) return pki::key_state::pending;
  if (d == rej) return pki::key_state::rejected;
  if (d == den) return pki::key_state::denied;
  return std::nullopt;
}

std::vector<std::string> as_strings(const value& v) {
  std::vector<std::string> out;
  if (!v.is_array()) return out;
  for (const auto& e : v)
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

value to_list(const std::vector<std::string>& v) {
  value l = value::array();
  for (auto& s : v) l.push_back(s);
  return l;
}

std::filesystem::path key_dir(const config::master_config& cfg) {
  if (cfg.cluster_id) return cfg.cluster_pki_dir.value_or(cfg.pki_dir);
  return cfg.pki_dir;
}

std::optional<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

bool fnmatch(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_NOESCAPE) == 0;
}

wire::value list_keys(const pki::key_store& ks) {
  value ret = value::object();
  const std::pair<const char*, pki::key_state> order[] = {{pend, pki::key_state::pending},
                                                          {rej, pki::key_state::rejected},
                                                          {acc, pki::key_state::accepted},
                                                          {den, pki::key_state::denied}};
  for (auto& [name, st] : order) {
    auto ids = ks.list(st);
    sort_ignorecase(ids);
    ret[name] = to_list(ids);
  }
  return ret;
}

wire::value local_keys(const std::filesystem::path& pki_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(pki_dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    auto n = it->path().filename().string();
    if (n.size() > 4 && (n.ends_with(".pem") || n.ends_with(".pub"))) names.push_back(n);
  }
  sort_ignorecase(names);
  value ret = value::object();
  ret["local"] = to_list(names);
  return ret;
}

wire::value glob_match(const wire::value& all, const std::string& match) {
  std::vector<std::string> pats;
  if (match.find(',') != std::string::npos) {
    std::size_t pos = 0;
    while (true) {
      auto c = match.find(',', pos);
      pats.push_back(match.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
      if (c == std::string::npos) break;
      pos = c + 1;
    }
  } else {
    pats.push_back(match);
  }
  value ret = value::object();
  for (auto it = all.begin(); it != all.end(); ++it) {
    auto keys = as_strings(it.value());
    if (pats.size() == 1 && pats[0] == "*") {
      if (!keys.empty()) ret[it.key()] = it.value();
      continue;
    }
    sort_ignorecase(keys);
    for (auto& k : keys) {
      // Salt appends once per matching pattern; one entry per key is what it means.
      if (std::any_of(pats.begin(), pats.end(), [&](const std::string& p) { return fnmatch(p, k); }))
        ret[it.key()].push_back(k);
    }
  }
  return ret;
}

wire::value dict_match(const wire::value& match_dict, const wire::value& cur_keys) {
  value ret = value::object();
  for (auto it = match_dict.begin(); it != match_dict.end(); ++it) {
    auto keys = as_strings(it.value());
    sort_ignorecase(keys);
    for (auto& key : keys) {
      for (const char* kd : {acc, pend, rej, den}) {
        auto cur = cur_keys.contains(kd) ? as_strings(cur_keys[kd]) : std::vector<std::string>{};
        if (std::any_of(cur.begin(), cur.end(), [&](const std::string& c) { return fnmatch(key, c); }))
          ret[kd].push_back(key);
      }
    }
  }
  return ret;
}

std::string render_key_listing(const wire::value& data, bool color) {
  auto c = [&](std::string_view s) { return color ? std::string(s) : std::string(); };
  struct look {
    std::string header;
    std::string color;
  };
  auto trans = [&](const std::string& st) -> std::optional<look> {
    if (st == pend) return look{c(output::colors::light_red) + "Unaccepted Keys:" + c(output::colors::endc), c(output::colors::red)};
    if (st == acc) return look{c(output::colors::light_green) + "Accepted Keys:" + c(output::colors::endc), c(output::colors::green)};
    if (st == den) return look{c(output::colors::light_magenta) + "Denied Keys:" + c(output::colors::endc), c(output::colors::magenta)};
    if (st == rej) return look{c(output::colors::light_blue) + "Rejected Keys:" + c(output::colors::endc), c(output::colors::blue)};
    if (st == "local") return look{c(output::colors::light_magenta) + "Local Keys:" + c(output::colors::endc), c(output::colors::magenta)};
    return std::nullopt;
  };
  std::vector<std::string> statuses;
  for (auto it = data.begin(); it != data.end(); ++it) statuses.push_back(it.key());
  std::sort(statuses.begin(), statuses.end());
  std::vector<std::string> lines;
  for (auto& st : statuses) {
    auto t = trans(st);
    if (!t) continue;
    lines.push_back(t->header);
    const value& entry = data.at(st);
    std::vector<std::string> ids;
    if (entry.is_array()) ids = as_strings(entry);
    else if (entry.is_object())
      for (auto it = entry.begin(); it != entry.end(); ++it) ids.push_back(it.key());
    std::sort(ids.begin(), ids.end());
    for (auto& id : ids) {
      std::string sid = id;
      std::replace(sid.begin(), sid.end(), '\x1b', '?');
      if (entry.is_array()) lines.push_back(t->color + sid + c(output::colors::endc));
      else lines.push_back(t->color + sid + ":  " + output::py_str(entry.at(id)) + c(output::colors::endc));
    }
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    out += lines[i];
  }
  return out;
}

std::string no_match_message(const std::string& match, bool inc_accepted, bool inc_rejected, bool inc_denied) {
  std::vector<std::string> st = {"unaccepted"};
  if (inc_accepted) st.push_back("accepted");
  if (inc_rejected) st.push_back("rejected");
  if (inc_denied) st.push_back("denied");
  std::string s;
  if (st.size() == 1) {
    s = st[0];
  } else {
    for (std::size_t i = 0; i + 1 < st.size(); ++i) s += (i ? ", " : "") + st[i];
    s += " or " + st.back();
  }
  return "The key glob '" + match + "' does not match any " + s + " keys.";
}

result<std::string> key_fingerprint(std::string_view content, std::string_view hash_type) {
  // Salt's documented procedure compares `salt-key -f ID` with `salt-call --local
  // key.finger` on the minion, and puts `salt-key -F master` into the minion's
  // master_finger. Both of those hash the PEM body without the BEGIN/END lines
  // (salt.utils.crypt.pem_finger(path=...)). Salt 3008's Key.finger() passes the whole
  // stored text instead, so its values match neither; sylvite prints the value that
  // works (see docs/operations.md, "Fingerprints").
  return crypto::pem_fingerprint(content, hash_type);
}

bool write_dropfile(const std::filesystem::path& cachedir, const std::string& master_id) {
  const auto dfn = cachedir / ".dfn";
  std::error_code ec;
  if (std::filesystem::exists(dfn, ec)) return true;  // rotation already requested
  std::filesystem::create_directories(cachedir, ec);
  mode_t old = ::umask(0277);
  bool ok = false;
  {
    std::ofstream f(dfn, std::ios::binary | std::ios::trunc);
    if (f) {
      f << master_id;
      ok = static_cast<bool>(f.flush());
    }
  }
  ::umask(old);
  if (ok) ::chmod(dfn.c_str(), S_IRUSR);
  return ok;
}

int run_salt_key(const key_options& o, const config::master_config& cfg, key_io& io) {
  const pki::key_store ks(key_dir(cfg));
  // Command precedence as KeyCLI._update_opts (list_all is the default).
  std::string cmd;
  std::string match;
  if (o.list) cmd = "list", match = *o.list;
  else if (o.list_all) cmd = "list", match = "all";
  else if (o.print) cmd = "print", match = *o.print;
  else if (o.print_all) cmd = "print", match = "*";
  else if (o.accept) cmd = "accept", match = *o.accept;
  else if (o.accept_all) cmd = "accept", match = "*";
  else if (o.reject) cmd = "reject", match = *o.reject;
  else if (o.reject_all) cmd = "reject", match = "*";
  else if (o.del) cmd = "delete", match = *o.del;
  else if (o.delete_all) cmd = "delete", match = "*";
  else if (o.finger) cmd = "finger", match = *o.finger;
  else if (o.finger_all) cmd = "finger", match = "*";
  else cmd = "list", match = "all";

  bool inc_acc = o.include_accepted, inc_rej = o.include_rejected, inc_den = o.include_denied;
  if (cmd == "accept") {
    inc_rej = o.include_all || o.include_rejected;
    inc_acc = false;
  } else if (cmd == "reject") {
    inc_acc = o.include_all || o.include_accepted;
    inc_rej = false;
  }

  auto show = [&](const value& ret) {
    std::string text;
    if (o.out.empty()) {
      text = render_key_listing(ret, o.oopt.color);
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      if (!text.empty()) text += '\n';
    } else {
      text = output::display(o.out, ret, o.oopt);
    }
    io.out << text << std::flush;
  };

  if (cmd == "list") {
    value all = list_keys(ks);
    value ret = value::object();
    if (match.rfind("acc", 0) == 0) ret[acc] = all[acc];
    else if (match.rfind("pre", 0) == 0 || match.rfind("un", 0) == 0) ret[pend] = all[pend];
    else if (match.rfind("rej", 0) == 0) ret[rej] = all[rej];
    else if (match.rfind("den", 0) == 0) ret[den] = all[den];
    else if (match.rfind("all", 0) == 0) ret = all;
    show(ret);
    return 0;
  }

  if (cmd == "print") {
    value matches = glob_match(list_keys(ks), match);
    value ret = value::object();
    for (auto it = matches.begin(); it != matches.end(); ++it) {
      auto st = state_of_dir(it.key());
      ret[it.key()] = value::object();
      for (auto& id : as_strings(it.value())) {
        auto pem = st ? ks.read(*st, id) : std::nullopt;
        ret[it.key()][id] = pem ? value(*pem) : value(nullptr);
      }
    }
    show(ret);
    return 0;
  }

  if (cmd == "finger") {
    value all = list_keys(ks);
    value loc = local_keys(cfg.pki_dir);
    all["local"] = loc["local"];
    value matches = glob_match(all, match);
    value ret = value::object();
    for (auto it = matches.begin(); it != matches.end(); ++it) {
      ret[it.key()] = value::object();
      auto st = state_of_dir(it.key());
      for (auto& id : as_strings(it.value())) {
        std::optional<std::string> pem = st ? ks.read(*st, id) : read_file(cfg.pki_dir / id);
        if (!pem) continue;
        auto fp = key_fingerprint(*pem, cfg.hash_type);
        if (!fp) {
          io.err << "Unable to compute the fingerprint of " << id << ": " << fp.error().message() << "\n";
          continue;
        }
        ret[it.key()][id] = *fp;
      }
    }
    show(ret);
    return 0;
  }

  // accept / reject / delete
  value matches = glob_match(list_keys(ks), match);
  value filtered = value::object();
  if (cmd == "delete") {
    filtered = matches;
  } else {
    if (matches.contains(pend)) filtered[pend] = matches[pend];
    if (inc_acc && matches.contains(acc) && !matches[acc].empty()) filtered[acc] = matches[acc];
    if (inc_rej && matches.contains(rej) && !matches[rej].empty()) filtered[rej] = matches[rej];
    if (inc_den && matches.contains(den) && !matches[den].empty()) filtered[den] = matches[den];
  }
  if (filtered.empty()) {
    io.out << no_match_message(match, inc_acc, inc_rej, inc_den) << "\n";
    return 0;
  }
  const std::string verb = cmd == "delete" ? "delet" : cmd;  // cmd.rstrip("e")
  io.out << "The following keys are going to be " << verb << "ed:\n";
  show(filtered);

  if (!o.yes) {
    const bool is_delete = cmd == "delete";
    io.out << (is_delete ? "Proceed? [N/y] " : "Proceed? [n/Y] ") << std::flush;
    std::string veri;
    if (!std::getline(io.in, veri)) {
      // Salt: input() raises EOFError, logged, and nothing is changed.
      io.out << std::flush;
      io.err << "[ERROR   ] EOF when reading a line\n";
      return 0;
    }
    if (veri.empty()) veri = is_delete ? "n" : "y";
    if (veri[0] != 'y' && veri[0] != 'Y') return 0;
  }

  std::vector<std::string> affected;
  int rc = 0;
  if (cmd == "accept" || cmd == "reject") {
    const pki::key_state to = cmd == "accept" ? pki::key_state::accepted : pki::key_state::rejected;
    std::vector<const char*> keydirs = {pend};
    if (inc_rej) keydirs.push_back(rej);
    if (inc_den) keydirs.push_back(den);
    if (inc_acc) keydirs.push_back(acc);
    std::vector<std::string> invalid;
    for (const char* kd : keydirs) {
      if (!filtered.contains(kd)) continue;
      auto from = *state_of_dir(kd);
      for (auto& id : as_strings(filtered[kd])) {
        auto pem = ks.read(from, id);
        if (!pem || !crypto::rsa_key::from_public_pem(*pem)) {
          invalid.push_back(id);
          continue;
        }
        if (auto r = ks.move(id, from, to); !r) {
          io.err << "Unable to move the key of " << id << ": " << r.error().message() << "\n";
          rc = 1;
          continue;
        }
        affected.push_back(id);
      }
    }
    for (auto& id : invalid) io.err << "Unable to accept invalid key for " << id << ".\n";
    value now = dict_match(filtered, list_keys(ks));
    for (auto it = now.begin(); it != now.end(); ++it)
      for (auto& id : as_strings(it.value())) io.out << "Key for minion " << id << " " << verb << "ed.\n";
  } else {
    for (auto it = filtered.begin(); it != filtered.end(); ++it) {
      auto st = state_of_dir(it.key());
      if (!st) continue;
      for (auto& id : as_strings(it.value())) {
        if (auto r = ks.remove(*st, id); !r) {
          io.err << "Unable to delete the key of " << id << ": " << r.error().message() << "\n";
          rc = 1;
          continue;
        }
        affected.push_back(id);
      }
    }
    for (auto it = filtered.begin(); it != filtered.end(); ++it)
      for (auto& id : as_strings(it.value())) io.out << "Key for minion " << id << " deleted.\n";
  }
  io.out << std::flush;

  // Tell the master; when it is not running, leave the drop file so it rotates the AES
  // key on start (Salt writes it on every reject/delete when rotate_aes_key is on).
  std::vector<std::string> uniq;
  for (auto& a : affected)
    if (std::find(uniq.begin(), uniq.end(), a) == uniq.end()) uniq.push_back(a);
  const bool reachable = !uniq.empty() && io.notify ? io.notify(cmd, uniq) : false;
  if ((cmd == "reject" || cmd == "delete") && o.rotate_aes_key && cfg.rotate_aes_key && !reachable) {
    if (!write_dropfile(cfg.cachedir, cfg.id)) io.err << "Unable to write " << (cfg.cachedir / ".dfn").string() << "\n";
  }
  // A local copy of cluster_pki_dir whose master is not running: the change is kept for
  // that master, which tells the cluster's share when it is back (docs/cluster.md).
  if (!reachable && !uniq.empty() && cfg.cluster_id && cfg.cluster_pki_dir &&
      cluster::is_local_copy(*cfg.cluster_pki_dir) && (cmd == "accept" || cmd == "reject" || cmd == "delete")) {
    if (auto r = cluster::merge_unsettled(*cfg.cluster_pki_dir, cmd, uniq, o.rotate_aes_key); !r)
      io.err << "Unable to record the change for the cluster in "
             << (*cfg.cluster_pki_dir / cluster::k_unsettled_keys_file).string() << ": " << r.error().message()
             << "\n";
  }
  return rc;
}

}  // namespace sylvite::cli::keys
