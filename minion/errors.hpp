// sylvite::minion error codes (one enum + category for the minion layer).
// Thread-safety: plain values.
#pragma once
#include "core/util/result.hpp"

namespace sylvite::minion {

enum class errc {
  ok = 0,
  auth_failed = 1,   // sign-in did not produce credentials (see log for the reason)
  not_connected,     // no credentials / no master (salt-call --local, or during reconnect)
  bad_reply,         // reply could not be decrypted/verified (drives re-auth in Salt)
  timeout,           // the master did not answer in time
  bad_pillar,        // send_private pillar reply failed verification
  stopped,           // the daemon is shutting down
};
const boost::system::error_category& minion_category() noexcept;
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), minion_category()}; }

}  // namespace sylvite::minion

template <>
struct boost::system::is_error_code_enum<sylvite::minion::errc> : std::true_type {};
