// sylvite::master minion data cache: see minion_data.hpp.
#include "master/minion_data.hpp"

#include <spdlog/spdlog.h>

#include "core/pki/key_store.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::master {

minion_data_cache::minion_data_cache(std::filesystem::path cachedir, bool enabled)
    : dir_(std::move(cachedir) / "minions"), enabled_(enabled) {}

void minion_data_cache::store(const std::string& id, const wire::value& grains, const wire::value& pillar) {
  if (!pki::valid_id(id)) return;
  auto e = std::make_shared<entry>();
  e->grains = grains.is_object() ? grains : wire::value::object();
  e->pillar = pillar.is_object() ? pillar : wire::value::object();
  {
    std::lock_guard lk(mu_);
    mem_[id] = e;
    missing_.erase(id);
  }
  if (!enabled_) return;
  wire::value doc = wire::value::object();
  doc["grains"] = e->grains;
  doc["pillar"] = e->pillar;
  auto r = util::write_file_atomic(dir_ / id / "data.p", wire::pack(doc, wire::packing::frame), 0600);
  if (!r) spdlog::warn("cannot write minion data cache for {}: {}", id, r.error().message());
}

std::shared_ptr<const minion_data_cache::entry> minion_data_cache::get(const std::string& id) {
  if (!pki::valid_id(id)) return nullptr;
  {
    std::lock_guard lk(mu_);
    auto it = mem_.find(id);
    if (it != mem_.end()) return it->second;
    if (missing_.count(id)) return nullptr;
  }
  if (!enabled_) return nullptr;
  auto text = util::read_file(dir_ / id / "data.p");
  std::shared_ptr<entry> e;
  if (text) {
    auto v = wire::unpack(*text);
    if (v && v->is_object()) {
      e = std::make_shared<entry>();
      if (auto g = wire::find(*v, "grains"); g && g->is_object()) e->grains = *g;
      if (auto p = wire::find(*v, "pillar"); p && p->is_object()) e->pillar = *p;
    }
  }
  std::lock_guard lk(mu_);
  if (e) {
    mem_[id] = e;
  } else if (missing_.size() < 100000) {
    missing_[id] = true;
  }
  return e;
}

void minion_data_cache::remove(const std::string& id) {
  if (!pki::valid_id(id)) return;
  {
    std::lock_guard lk(mu_);
    mem_.erase(id);
    missing_.erase(id);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_ / id, ec);
}

}  // namespace sylvite::master
