// sylvite::master::api console assets (issue 19): the web console's static files (HTML,
// JS, CSS under master/api/console/), built into the binary at compile time (no CDN, no
// files to install). The API server serves them under /console/.
// Thread-safety: immutable data; safe from any thread.
#pragma once
#include <string_view>

namespace sylvite::master::api {

struct console_asset {
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;
};

// The asset at path, relative to /console/ ("" and "index.html" are the page itself);
// nullptr if there is none. Never touches the file system.
const console_asset* find_console_asset(std::string_view path);

}  // namespace sylvite::master::api
