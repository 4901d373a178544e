// sylvite::master minion data cache: grains and pillar of each minion from its last
// `_pillar` request, in cachedir/minions/<id>/data.p (msgpack, frame packing, map
// {"grains", "pillar"}), kept in memory too. Used for grain/pillar/compound targeting.
// Thread-safety: all methods safe from any thread; disk I/O inside (worker pool).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master {

class minion_data_cache {
 public:
  struct entry {
    wire::value grains = wire::value::object();
    wire::value pillar = wire::value::object();
  };
  explicit minion_data_cache(std::filesystem::path cachedir, bool enabled = true);
  void store(const std::string& id, const wire::value& grains, const wire::value& pillar);
  // nullptr if unknown (reads the file on a miss).
  std::shared_ptr<const entry> get(const std::string& id);
  void remove(const std::string& id);

 private:
  std::filesystem::path dir_;
  bool enabled_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const entry>> mem_;
  std::map<std::string, bool> missing_;  // negative cache (cleared by store)
};

}  // namespace sylvite::master
