// sylvite::master::api server: the REST API (salt-api's rest_cherrypy, issue 19) served by
// salt-master itself over HTTP/1.1 (Boost.Beast), with TLS (OpenSSL through Asio's ssl
// stream) unless disable_ssl. It owns
//   - its own io_context and threads (never the master's): accepting, reading requests
//     (head <= 16 KiB, body <= max_request_body_size: 413 before the body is read),
//     writing replies, the /events streams;
//   - a bounded worker pool for the requests themselves (api_routes::handle blocks on
//     lowstate runs, logins, key files); a full queue answers 503 at once;
//   - the Server-Sent Events streams of GET /events: one event_hub subscription per
//     client, each with a bounded queue; a client that lets its queue fill is dropped
//     (logged), so a slow reader never holds the master's event path or other clients.
// Deadlines: TLS handshake and request read 30 s, each write 30 s; connections capped.
// Thread-safety: start()/stop() from one thread (the daemon's); everything else runs on
// the server's own threads.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/wire/value.hpp"
#include "master/api/api_routes.hpp"

namespace sylvite::master {
class event_hub;
}

namespace sylvite::master::api {

struct api_server_deps {
  api_routes_deps routes;
  event_hub* hub = nullptr;  // GET /events (null: 404)
  std::size_t io_threads = 2;
  std::size_t max_connections = 1000;
};

class api_server {
 public:
  explicit api_server(api_server_deps d);
  ~api_server();  // stop()
  api_server(const api_server&) = delete;
  api_server& operator=(const api_server&) = delete;

  // Loads the TLS certificate and key (unless disable_ssl), binds host:port (port 0 in
  // tests: a free one) and starts the threads. Returns "" when serving, else a message
  // naming the option or the bind error.
  std::string start();
  // Stops accepting, closes every connection and stream, joins the threads.
  void stop();
  std::uint16_t bound_port() const;
  api_routes& routes();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace sylvite::master::api
