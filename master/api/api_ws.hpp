// salt-api's WebSocket event stream (rest_cherrypy's WebsocketEndpoint, GET /ws): the
// pure parts the server's /ws session uses.
//   - ws_event_frame: the text frame of one bus event, "data: {"data": ..., "tag": ...}\n\n"
//     (salt-api sends the same text as its SSE data line, one frame per event);
//   - salt_info: `format_events` (rest_cherrypy/event_processor.py SaltInfo): job and
//     minion state built from salt/job/*/new|ret, salt/key and salt/presence/* events,
//     published as {"jobs": {...}} and {"minions": [...]} frames. Where SaltInfo raises on
//     an event it does not expect (and salt-api's stream process dies), the event is
//     skipped here. New minions seen in a presence event are returned to the caller,
//     which runs grains.items on them with the stream's token as SaltInfo does.
// Thread-safety: ws_event_frame is pure; a salt_info belongs to one stream.
#pragma once
#include <string>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master::api {

std::string ws_event_frame(const std::string& tag, const wire::value& data);

class salt_info {
 public:
  struct output {
    std::vector<std::string> frames;  // text frames to send, in order
    std::string grains_tgt;           // non-empty: run grains.items on this glob (SaltInfo's tgt)
  };
  output process(const std::string& tag, const wire::value& data);

 private:
  std::string publish_minions() const;
  wire::value jobs_ = wire::value::object();
  wire::value minions_ = wire::value::object();
};

}  // namespace sylvite::master::api
