// sylvite::master event hub: see event_hub.hpp.
#include "master/event_hub.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace sylvite::master {

std::uint64_t event_hub::subscribe_jid(const std::string& jid, handler h) {
  std::lock_guard lk(mu_);
  auto id = next_++;
  subs_[id] = sub{jid, std::make_shared<handler>(std::move(h))};
  by_jid_.emplace(jid, id);
  return id;
}

std::uint64_t event_hub::subscribe_all(handler h, std::function<bool()> wanted) {
  std::lock_guard lk(mu_);
  auto id = next_++;
  subs_[id] = sub{{}, std::make_shared<handler>(std::move(h)), false, std::move(wanted)};
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

std::string event_hub::stamp_now() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto us = duration_cast<microseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[160];
  const auto frac = static_cast<long>(us % 1000000);
  // isoformat() omits the fraction when it is 0
  if (frac == 0)
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d+00:00", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  else
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ld+00:00", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

void event_hub::fire(const std::string& tag, const wire::value& data_in, const std::string& jid, origin from) {
  if (!data_in.is_object()) {
    refused_++;
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    auto last = refused_log_ms_.load();
    if (now - last >= 10000 && refused_log_ms_.compare_exchange_strong(last, now))
      spdlog::warn("event '{}' not fired: its data is not a map ({} such event(s) so far)", tag, refused_.load());
    return;
  }
  fired_++;
  std::vector<std::shared_ptr<handler>> hs;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, s] : subs_) {
      if (s.jid.empty() && (!s.local_only || from == origin::local) && (!s.wanted || s.wanted())) hs.push_back(s.h);
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
  if (hs.empty()) return;  // nobody listens: no stamped copy
  wire::value stamped;
  const wire::value* data = &data_in;
  if (from == origin::local || !wire::find(data_in, "_stamp")) {
    stamped = data_in;
    stamped["_stamp"] = stamp_now();
    data = &stamped;
  }
  for (auto& h : hs) (*h)(tag, *data);
}

void event_hub::fire_jid_only(const std::string& tag, const wire::value& data, const std::string& jid) {
  std::vector<std::shared_ptr<handler>> hs;
  {
    std::lock_guard lk(mu_);
    auto [b, e] = by_jid_.equal_range(jid);
    for (auto i = b; i != e; ++i) {
      auto it = subs_.find(i->second);
      if (it != subs_.end()) hs.push_back(it->second.h);
    }
  }
  for (auto& h : hs) (*h)(tag, data);
}

std::size_t event_hub::subscriber_count() const {
  std::lock_guard lk(mu_);
  return subs_.size();
}

}  // namespace sylvite::master
