// sylvite::transport::zmq_framing: Salt's framing over ZeroMQ (see zmq.hpp). Pure
// functions; no sockets.
#include "core/crypto/rsa.hpp"
#include "core/transport/zmq.hpp"

namespace sylvite::transport {

std::optional<kind> parse_kind(std::string_view s) {
  if (s == "zeromq") return kind::zeromq;
  if (s == "tcp") return kind::tcp;
  return std::nullopt;
}

const char* kind_name(kind k) { return k == kind::zeromq ? "zeromq" : "tcp"; }

namespace zmq_framing {

std::string topic_of(std::string_view minion_id) {
  auto h = crypto::hash_hex(minion_id, "sha1");
  return h ? *h : std::string();
}

std::vector<std::vector<std::string>> publish_messages(const std::string& payload,
                                                       const std::vector<std::string>* targets, bool filtering) {
  std::vector<std::vector<std::string>> out;
  if (!filtering) {
    out.push_back({payload});
    return out;
  }
  if (!targets) {
    out.push_back({std::string(broadcast_topic), payload});
    return out;
  }
  out.reserve(targets->size());
  for (const auto& id : *targets) out.push_back({topic_of(id), payload});
  return out;
}

result<std::optional<std::string>> accept_publish(std::vector<std::string>&& frames, std::string_view hexid) {
  if (frames.size() == 1) return std::optional<std::string>(std::move(frames[0]));
  if (frames.size() == 2) {
    if (frames[0] != broadcast_topic && frames[0] != hexid) return std::optional<std::string>();
    return std::optional<std::string>(std::move(frames[1]));
  }
  return make_error_code(wire::errc::bad_frame);
}

result<routed_message> split_routed(std::vector<std::string>&& frames) {
  // ROUTER prepends the routing id; REQ puts an empty delimiter before the body (and
  // ZMQ_REQ_CORRELATE a request id before that). Everything up to the delimiter goes back.
  for (std::size_t i = 1; i + 1 < frames.size(); ++i) {
    if (!frames[i].empty()) continue;
    if (i + 2 != frames.size()) break;  // more than one body frame
    routed_message m;
    m.payload = std::move(frames.back());
    frames.pop_back();
    m.envelope = std::move(frames);
    return m;
  }
  return make_error_code(wire::errc::bad_frame);
}

}  // namespace zmq_framing
}  // namespace sylvite::transport
