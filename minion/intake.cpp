// sylvite::minion publish intake (see intake.hpp for the rules).
#include "minion/intake.hpp"

namespace sylvite::minion {

intake_result publish_intake::admit(const std::string& label, publish_decoded d, const target_facts& me,
                                    std::int64_t now_us) {
  intake_result out;
  auto log = [&](mm_log_level l, std::string text) { out.logs.emplace_back(l, std::move(text)); };
  if (d.verdict != publish_verdict::ok) {
    if (d.verdict == publish_verdict::drop) {
      if (auto n = guard_.log_hit(now_us, d.reason))
        log(mm_log_level::warning, "Discarding publish from " + label + ": " + d.reason + " [" + std::to_string(n) +
                                       " refusal(s) since the last such line]");
    }
    return out;
  }
  wire::value& load = d.load;
  // Replay: a sylvite master's serial is its clock; refuse what is outside the window.
  if (auto r = guard_.check_time(d.serial, now_us); r.verdict != replay_verdict::ok) {
    if (r.log_count)
      log(mm_log_level::warning, "Refused a publish (jid " + std::string(wire::get_text(load, "jid").value_or("?")) +
                                     ") from master " + label + ": " + r.reason + " [" +
                                     std::to_string(r.log_count) + " refusal(s) since the last such line]");
    return out;
  }
  if (!is_job_for_me(load, me)) {
    log(mm_log_level::debug, "Publish not targeted at this minion: " + load.value("tgt", wire::value()).dump());
    return out;
  }
  // Salt 3008.5's _target_load annotates the load (resource targeting); jobs see these
  // keys as __pub_resource_targets etc., so keep them for identical module returns.
  load["resource_targets"] = wire::value::array();
  load["pure_resource_target"] = false;
  load["minion_is_target"] = true;
  const std::string jid(wire::get_text(load, "jid").value_or(""));
  if (auto r = guard_.check_jid(jid, now_us); r.verdict != replay_verdict::ok) {
    // With several masters the same jid can legitimately come twice (info); with one
    // master it is a replay (warning).
    if (r.log_count)
      log(single_ ? mm_log_level::warning : mm_log_level::info,
          "Refused a publish from master " + label + ": " + r.reason + " [" + std::to_string(r.log_count) +
              " refusal(s) since the last such line]");
    return out;
  }
  if (auto why = unsupported_job_reason(load); !why.empty()) {
    log(mm_log_level::error, "Job " + jid + ": " + why);
    return out;
  }
  const std::string fun(wire::get_text(load, "fun").value_or(""));
  if (auto user = wire::get_text(load, "user"))
    log(mm_log_level::info, "User " + std::string(*user) + " Executing command " + fun + " with jid " + jid);
  else
    log(mm_log_level::info, "Executing command " + fun + " with jid " + jid);
  out.run = true;
  out.jid = jid;
  out.load = std::move(load);
  return out;
}

}  // namespace sylvite::minion
