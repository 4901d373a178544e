// salt-api /ws helpers (api_ws.hpp): the event frame and a port of event_processor.py's
// SaltInfo (format_events). Each function names the SaltInfo method it ports.
#include "master/api/api_ws.hpp"

#include <algorithm>
#include <exception>
#include <set>

namespace sylvite::master::api {

using wire::value;

namespace {

std::vector<std::string> split_tag(const std::string& tag) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    auto p = tag.find('/', start);
    parts.push_back(tag.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return parts;
}

std::string dump(const value& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// Python truthiness of minion["success"].
bool truthy(const value& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

}  // namespace

std::string ws_event_frame(const std::string& tag, const value& data) {
  value full = value::object();
  full["data"] = wire::decode_embedded_strs(data);
  full["tag"] = tag;
  return "data: " + dump(full) + "\n\n";
}

// SaltInfo.publish_minions: {"minions": [{...info, "id": mid}, ...]}.
std::string salt_info::publish_minions() const {
  value list = value::array();
  for (auto it = minions_.begin(); it != minions_.end(); ++it) {
    value m = it.value().is_object() ? it.value() : value::object();
    m["id"] = it.key();
    list.push_back(std::move(m));
  }
  return dump(value{{"minions", std::move(list)}});
}

salt_info::output salt_info::process(const std::string& tag, const value& raw) try {
  output out;
  const value data = wire::decode_embedded_strs(raw);
  const auto parts = split_tag(tag);
  if (parts.size() < 2) return out;
  if (parts[1] == "job") {
    if (parts.size() < 4) return out;  // SaltInfo: IndexError
    if (parts[3] == "new") {
      // process_new_job_event
      value minions = value::object();
      for (const auto& mid : data.at("minions")) minions[mid.get<std::string>()] = value{{"success", false}};
      const std::string jid = data.at("jid").get<std::string>();
      jobs_[jid] = value{{"jid", data.at("jid")},       {"start_time", data.at("_stamp")},
                         {"minions", std::move(minions)}, {"fun", data.at("fun")},
                         {"tgt", data.at("tgt")},         {"tgt_type", data.at("tgt_type")},
                         {"state", "running"}};
      out.frames.push_back(dump(value{{"jobs", jobs_}}));
      if (data.at("fun") == "grains.items") minions_ = value::object();
    } else if (parts[3] == "ret") {
      // process_ret_job_event: _, _, jid, _, mid = tag.split("/")
      if (parts.size() != 5) return out;
      value& job = jobs_[parts[2]];
      if (!job.is_object()) job = value::object();
      if (!job.contains("minions")) job["minions"] = value::object();
      value& minion = job["minions"][parts[4]];
      if (!minion.is_object()) minion = value::object();
      minion["return"] = data.at("return");
      minion["retcode"] = data.at("retcode");
      minion["success"] = data.at("success");
      bool complete = true;
      for (const auto& m : job["minions"]) complete = complete && truthy(m.at("success"));
      if (complete) job["state"] = "complete";
      out.frames.push_back(dump(value{{"jobs", jobs_}}));
      if (data.at("fun") == "grains.items") {
        // process_minion_update
        value& m = minions_[parts[4]];
        if (!m.is_object() || m.empty()) m = value::object();
        m["grains"] = data.at("return");
        out.frames.push_back(publish_minions());
      }
    }
  }
  if (parts[1] == "key") {
    // process_key_event
    const std::string id = data.at("id").get<std::string>();
    if (data.at("act") == "delete") minions_.erase(id);
    else if (data.at("act") == "accept" && !minions_.contains(id)) minions_[id] = value::object();
    out.frames.push_back(publish_minions());
  }
  if (parts[1] == "presence") {
    // process_presence_events
    std::set<std::string> present;
    for (const auto& p : data.at("present")) present.insert(p.get<std::string>());
    bool changed = false;
    std::vector<std::string> dropped;
    for (auto it = minions_.begin(); it != minions_.end(); ++it)
      if (!present.contains(it.key())) dropped.push_back(it.key());
    for (const auto& d : dropped) {
      changed = true;
      minions_.erase(d);
    }
    std::string tgt;
    for (const auto& p : present)
      if (!minions_.contains(p)) tgt += (tgt.empty() ? "" : ",") + p;
    if (!tgt.empty()) {
      changed = true;
      out.grains_tgt = tgt;
    }
    if (changed) out.frames.push_back(publish_minions());
  }
  return out;
} catch (const std::exception&) {
  return {};  // SaltInfo raises (KeyError/TypeError): the event is skipped
}

}  // namespace sylvite::master::api
