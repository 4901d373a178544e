// sylvite::cluster unsettled keys (see unsettled_keys.hpp).
#include "cluster/unsettled_keys.hpp"

#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cluster {

namespace fs = std::filesystem;
using wire::value;

namespace {
fs::path file_of(const fs::path& dir) { return dir / k_unsettled_keys_file; }
fs::path lock_of(const fs::path& dir) { return dir / (std::string(k_unsettled_keys_file) + ".lock"); }
bool revoke_act(std::string_view act) { return act == "reject" || act == "delete"; }

result<unsettled_keys> read_file_unlocked(const fs::path& dir, std::size_t* skipped) {
  auto text = util::read_file_nofollow(file_of(dir), k_unsettled_keys_max_bytes);
  if (!text) {
    if (text.error() == util::errc::not_found) return unsettled_keys{};
    return text.error();
  }
  return parse_unsettled_keys(*text, skipped);
}

result<void> write_file_unlocked(const fs::path& dir, const unsettled_keys& u) {
  if (u.empty()) {
    std::error_code ec;
    fs::remove(file_of(dir), ec);
    if (ec) return ec;
    return {};
  }
  return util::write_file_atomic(file_of(dir), to_text(u), 0600);
}
}  // namespace

void unsettled_keys::note(const std::string& act, const std::string& id, bool rotate) {
  if (act == "pend") {
    if (!accepted.contains(id) && !revoked.contains(id)) pending.insert(id);
    return;
  }
  if (act == "accept" || revoke_act(act)) pending.erase(id);
  if (act == "accept") {
    revoked.erase(id);
    accepted.insert(id);
  } else if (revoke_act(act)) {
    accepted.erase(id);
    revoked[id] = revoke{act, rotate};
  }
}

std::string to_text(const unsettled_keys& u) {
  value acc = value::array();
  for (const auto& id : u.accepted) acc.push_back(id);
  value rev = value::object();
  for (const auto& [id, r] : u.revoked) rev[id] = value{{"act", r.act}, {"rotate", r.rotate}};
  value pend = value::array();
  for (const auto& id : u.pending) pend.push_back(id);
  return value{{"accepted", acc}, {"revoked", rev}, {"pending", pend}}.dump(1) + "\n";
}

result<unsettled_keys> parse_unsettled_keys(const std::string& text, std::size_t* skipped) {
  const value v = value::parse(text, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return util::errc::invalid_argument;
  const value* acc = wire::find(v, "accepted");
  const value* rev = wire::find(v, "revoked");
  const value* pend = wire::find(v, "pending");
  if ((acc && !acc->is_array()) || (rev && !rev->is_object()) || (pend && !pend->is_array()))
    return util::errc::invalid_argument;
  unsettled_keys u;
  std::size_t bad = 0;
  if (acc)
    for (const auto& e : *acc) {
      auto id = wire::as_text(e);
      if (id && pki::valid_id(*id)) u.accepted.emplace(*id);
      else ++bad;
    }
  if (rev)
    for (auto it = rev->begin(); it != rev->end(); ++it) {
      auto act = wire::get_text(it.value(), "act");
      if (!pki::valid_id(it.key()) || !act || !revoke_act(*act) || u.accepted.contains(it.key())) {
        ++bad;
        continue;
      }
      u.revoked[it.key()] = unsettled_keys::revoke{std::string(*act), wire::get_bool(it.value(), "rotate").value_or(true)};
    }
  if (pend)
    for (const auto& e : *pend) {
      auto id = wire::as_text(e);
      if (id && pki::valid_id(*id) && !u.accepted.contains(std::string(*id)) && !u.revoked.contains(std::string(*id)))
        u.pending.emplace(*id);
      else ++bad;
    }
  if (skipped) *skipped = bad;
  return u;
}

result<unsettled_keys> read_unsettled_keys(const fs::path& dir, std::size_t* skipped) {
  return read_file_unlocked(dir, skipped);  // the writers rename: a reader sees one whole file
}

result<void> write_unsettled_keys(const fs::path& dir, const unsettled_keys& u) {
  util::file_lock lk(lock_of(dir));
  if (!lk.locked()) return lk.error();
  return write_file_unlocked(dir, u);
}

result<void> merge_unsettled(const fs::path& dir, const std::string& act, const std::vector<std::string>& ids,
                             bool rotate) {
  util::file_lock lk(lock_of(dir));
  if (!lk.locked()) return lk.error();
  auto cur = read_file_unlocked(dir, nullptr);
  unsettled_keys u = cur ? std::move(*cur) : unsettled_keys{};  // unparsable: replaced
  for (const auto& id : ids)
    if (pki::valid_id(id)) u.note(act, id, rotate);
  return write_file_unlocked(dir, u);
}

}  // namespace sylvite::cluster
