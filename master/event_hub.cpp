// sylvite::master event hub: see event_hub.hpp.
#include "master/event_hub.hpp"

#include <spdlog/spdlog.h>

namespace sylvite::master {

std::uint64_t event_hub::subscribe_jid(const std::string& jid, handler h) {
  std::lock_guard lk(mu_);
  auto id = next_++;
  subs_[id] = sub{jid, std::make_shared<handler>(std::move(h))};
  by_jid_.emplace(jid, id);
  return id;
}

std::uint64_t event_hub::subscribe_all(handler h) {
  std::lock_guard lk(mu_);
  auto id = next_++;
  subs_[id] = sub{{}, std::make_shared<handler>(std::move(h))};
  return id;
}

std::uint64_t event_hub::subscribe_local(handler h) {
  std::lock_guard lk(mu_);
  auto id = next_++;
  subs_[id] = sub{{}, std::make_shared<handler>(std::move(h)), true};
  return id;
}

void event_hub::unsubscribe(std::uint64_t id) {
  std::lock_guard lk(mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  if (!it->second.jid.empty()) {
    auto [b, e] = by_jid_.equal_range(it->second.jid);
    for (auto i = b; i != e; ++i) {
      if (i->second == id) {
        by_jid_.erase(i);
        break;
      }
    }
  }
  subs_.erase(it);
}

void event_hub::fire(const std::string& tag, const wire::value& data, const std::string& jid, origin from) {
  std::vector<std::shared_ptr<handler>> hs;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, s] : subs_) {
      if (s.jid.empty() && (!s.local_only || from == origin::local)) hs.push_back(s.h);
    }
    if (!jid.empty()) {
      auto [b, e] = by_jid_.equal_range(jid);
      for (auto i = b; i != e; ++i) {
        auto it = subs_.find(i->second);
        if (it != subs_.end()) hs.push_back(it->second.h);
      }
    }
  }
  spdlog::debug("event {}", tag);
  for (auto& h : hs) (*h)(tag, data);
}

std::size_t event_hub::subscriber_count() const {
  std::lock_guard lk(mu_);
  return subs_.size();
}

}  // namespace sylvite::master
