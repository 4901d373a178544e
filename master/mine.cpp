// sylvite::master mine (mine.hpp). Salt 3008.5 quirks kept, and the few not kept:
//   - _mine with clear=False merges the new functions into the stored map (dict.update);
//     Salt 3008.5 raises UnboundLocalError for clear=True (its `data` is only set on the
//     update path) and the minion gets an error string back; sylvite replaces the stored
//     map with the new one, which is what the option means (mine.update(clear=True)).
//   - a stored value that is not a map is replaced by the update (Salt keeps the old value
//     and drops the new data).
//   - _mine_flush answers whether a file was removed (Salt's cache.flush: False when the
//     minion had no mine); _mine_delete answers True also when the function was not there.
//   - _mine_get: fun "a,b" is split and de-duplicated (one function: {minion: data}, more
//     or a list: {function: {minion: data}}); pillar targets are exact (pillar_exact,
//     compound_pillar_exact); greedy=False (minions without cached grains/pillar are not
//     selected by data targets); the master's mine_get ACL (regexes, re.match) and each
//     entry's allow_tgt/allow_tgt_type (targeted greedily; a target that selects nobody
//     hides the entry) are applied.
#include "master/mine.hpp"

#include <spdlog/spdlog.h>

#include <cctype>
#include <map>
#include <set>

#include "core/match/match.hpp"
#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/wire/function_list.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::master {

using wire::value;

namespace {

constexpr const char* acl_id = "__saltmine_acl__";    // salt.utils.mine.MINE_ITEM_ACL_ID
constexpr const char* acl_data = "__data__";          // salt.utils.mine.MINE_ITEM_ACL_DATA

// Every store of this process (fcntl locks exclude other processes only).
std::mutex& write_mu() {
  static std::mutex mu;
  return mu;
}

bool py_truthy(const value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<std::int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_binary()) return !v.get_binary().empty();
  return !v.empty();
}

}  // namespace

mine_store::mine_store(options opt, targeter target)
    : opt_(std::move(opt)),
      target_(std::move(target)),
      dir_(opt_.cachedir / "mine"),
      lock_path_(opt_.cachedir / ".mine.lock") {}

void mine_store::refuse(const std::string& what) {
  if (auto n = refuse_log_.hit()) spdlog::warn("mine: refused {} ({} refusal(s) in the last 10 s)", what, n);
}

value mine_store::fetch(const std::string& id) {
  if (!pki::valid_id(id)) return value::object();
  auto text = util::read_file_nofollow(file_of(id));
  if (!text) {
    if (text.error() != util::make_error_code(util::errc::not_found))
      refuse("reading the mine of '" + id + "': " + text.error().message());
    return value::object();
  }
  if (text->empty()) return value::object();  // Salt's payload.load: empty file -> None
  auto v = wire::unpack(*text);
  if (!v) {
    refuse("the mine file of '" + id + "' (" + v.error().message() + "; treated as empty)");
    return value::object();
  }
  return std::move(*v);
}

bool mine_store::store(const std::string& id, const value& data) {
  auto r = util::write_file_atomic(file_of(id), wire::pack(data, wire::packing::frame), 0600);
  if (!r) {
    spdlog::error("mine: cannot write {}: {}", file_of(id).string(), r.error().message());
    return false;
  }
  return true;
}

value mine_store::handle_mine(const value& load) {
  if (!load.is_object()) {
    refuse("a _mine load that is not a map");
    return value::object();
  }
  auto id_v = wire::get_text(load, "id");
  const value* data = wire::find(load, "data");
  if (!wire::find(load, "id") || !data) return value::object();  // AESFuncs.__verify_load
  if (!opt_.enabled) return true;
  if (!id_v || !pki::valid_id(*id_v)) {
    refuse("_mine from an invalid id");
    return false;
  }
  if (!data->is_object()) {
    refuse("_mine data of '" + std::string(*id_v) + "' that is not a map");
    return false;
  }
  const std::string id(*id_v);
  const bool clear = wire::find(load, "clear") && py_truthy(*wire::find(load, "clear"));
  std::lock_guard lk(write_mu());
  util::file_lock fl(lock_path_);  // other masters of the cluster (best effort if it fails)
  if (!fl.locked()) spdlog::debug("mine: no lock on {}: {}", lock_path_.string(), fl.error().message());
  value merged = clear ? value::object() : fetch(id);
  if (!merged.is_object()) merged = value::object();
  for (auto it = data->begin(); it != data->end(); ++it) merged[it.key()] = *it;
  return store(id, merged);
}

value mine_store::handle_delete(const value& load) {
  if (!load.is_object()) return value::object();
  if (!wire::find(load, "id") || !wire::find(load, "fun")) return value::object();
  if (!opt_.enabled) return true;
  auto id_v = wire::get_text(load, "id");
  if (!id_v || !pki::valid_id(*id_v)) {
    refuse("_mine_delete from an invalid id");
    return false;
  }
  const std::string id(*id_v);
  auto fun = wire::as_text(*wire::find(load, "fun"));
  std::lock_guard lk(write_mu());
  util::file_lock fl(lock_path_);
  value data = fetch(id);
  if (!data.is_object()) return false;
  if (!fun) return true;  // a non-string key is never in the map
  auto it = data.find(std::string(*fun));
  if (it == data.end()) return true;
  data.erase(it);
  return store(id, data);
}

value mine_store::handle_flush(const value& load) {
  if (!load.is_object()) return value::object();
  if (!wire::find(load, "id")) return value::object();
  if (!opt_.enabled) return true;
  auto id_v = wire::get_text(load, "id");
  if (!id_v || !pki::valid_id(*id_v)) {
    refuse("_mine_flush from an invalid id");
    return false;
  }
  std::lock_guard lk(write_mu());
  std::error_code ec;
  const auto p = file_of(std::string(*id_v));
  if (!std::filesystem::is_regular_file(p, ec)) return false;
  if (!std::filesystem::remove(p, ec) || ec) {
    spdlog::error("mine: cannot remove {}: {}", p.string(), ec.message());
    return false;
  }
  return true;
}

value mine_store::handle_get(const value& load) {
  if (!load.is_object()) return value::object();
  if (!wire::find(load, "id") || !wire::find(load, "tgt") || !wire::find(load, "fun")) return value::object();
  auto id_v = wire::get_text(load, "id");
  if (!id_v) {
    refuse("_mine_get with an id that is not a string");
    return value::object();
  }
  // expr_form (pre-2017 minions) when tgt_type is absent.
  std::string tgt_type = "glob";
  const value* tt = wire::find(load, "tgt_type");
  if (!tt) tt = wire::find(load, "expr_form");
  if (tt && !tt->is_null()) {
    auto t = wire::as_text(*tt);
    if (!t) {
      refuse("_mine_get from '" + std::string(*id_v) + "' with a tgt_type that is not a string");
      return value::object();
    }
    tgt_type = std::string(*t);
  }
  return get(std::string(*id_v), *wire::find(load, "tgt"), *wire::find(load, "fun"), tgt_type);
}

value mine_store::get(const std::string& requester, const value& tgt, const value& fun, const std::string& tgt_type_in) {
  auto fl = wire::function_list(fun);
  if (!fl) return value::object();
  std::vector<std::string> functions = std::move(fl->functions);
  const bool ret_dict = fl->keyed;

  // The master's mine_get ACL: {regex on requester: [regexes on functions]}.
  if (!opt_.mine_get_acl.is_null()) {
    if (!opt_.mine_get_acl.is_object()) return value::object();
    std::vector<std::string> perms;
    for (auto it = opt_.mine_get_acl.begin(); it != opt_.mine_get_acl.end(); ++it) {
      if (!match::pcre_match(it.key(), requester) || !it->is_array()) continue;
      for (const auto& p : *it)
        if (auto t = wire::as_text(p)) perms.emplace_back(*t);
    }
    std::vector<std::string> allowed;
    for (const auto& f : functions) {
      for (const auto& p : perms) {
        if (match::pcre_match(p, f)) {
          allowed.push_back(f);
          break;
        }
      }
    }
    if (allowed.empty()) return value::object();
    functions = std::move(allowed);
  }

  value ret = value::object();
  if (!pki::valid_id(requester)) return ret;
  std::string tgt_type = tgt_type_in;
  std::string lower = tgt_type;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "pillar") tgt_type = "pillar_exact";
  if (lower == "compound") tgt_type = "compound_pillar_exact";
  const auto minions = target_ ? target_(tgt, tgt_type, false) : std::vector<std::string>{};

  // allow_tgt -> the minions it selects (greedy, as Salt's check_minions default).
  std::map<std::pair<std::string, std::string>, std::set<std::string>> allow_cache;
  for (const auto& minion : minions) {
    value data = fetch(minion);
    if (!data.is_object()) continue;
    for (const auto& function : functions) {
      auto it = data.find(function);
      if (it == data.end()) continue;
      const value* result = &*it;
      if (it->is_object() && it->contains(acl_id)) {
        const value* d = wire::find(*it, acl_data);
        result = d;
        if (const value* at = wire::find(*it, "allow_tgt")) {
          std::string att = "glob";
          if (const value* t = wire::find(*it, "allow_tgt_type"))
            if (auto s = wire::as_text(*t)) att = std::string(*s);
          const std::pair<std::string, std::string> key{at->dump(), att};
          auto c = allow_cache.find(key);
          if (c == allow_cache.end()) {
            auto sel = target_ ? target_(*at, att, true) : std::vector<std::string>{};
            c = allow_cache.emplace(key, std::set<std::string>(sel.begin(), sel.end())).first;
          }
          if (c->second.empty()) continue;  // Salt: the allowed target does not exist
          if (!c->second.contains(requester)) {
            spdlog::debug("Salt mine request from {} for function {} on minion {} denied.", requester, function,
                          minion);
            continue;
          }
        }
        if (!result) continue;  // an ACL entry without data (Salt: KeyError)
      }
      if (ret_dict)
        ret[function][minion] = *result;
      else
        ret[minion] = *result;
    }
  }
  return ret;
}

}  // namespace sylvite::master
