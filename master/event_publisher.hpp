// sylvite::master event publisher: the master's event bus for external subscribers, as
// Salt's master_event_pub.ipc. Every event of this master's hub (local and peer ones:
// subscribe_all) is written to every connected subscriber of the Unix socket
//   <sock_dir>/master_event_pub.ipc   (mode 0660; sock_dir is 0700 for the master's user)
// in Salt 3008's framing, so that Salt's own Python client reads it:
//   salt.utils.event.get_master_event(opts, sock_dir, listen=True).get_event(full=True)
// Each message is one msgpack map {"head": {}, "body": <bytes>} (salt.transport.frame.
// frame_msg; the TCP transport's PublishClient over a Unix socket), body being
// SaltEvent.pack(tag, data): the tag, "\n\n", then msgpack(data) with use_bin_type=True.
// Subscribers never send anything; what they send is read and discarded.
// Slow subscribers never block the master: each has a bounded queue (max_queue events,
// max_bytes bytes);
// an event that does not fit is shed for that subscriber only, counted (shed()) and
// logged once per 10 s. At most max_subscribers connections; more are closed at once.
// Thread-safety: start/stop from the daemon thread; hub handlers on any thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio.hpp>

#include "core/util/rate_limit.hpp"
#include "core/util/result.hpp"
#include "core/wire/value.hpp"
#include "master/event_hub.hpp"

namespace sylvite::master {

inline std::filesystem::path event_pub_socket_path(const std::filesystem::path& sock_dir) {
  return sock_dir / "master_event_pub.ipc";
}

// SaltEvent.pack(tag, data): tag + "\n\n" + msgpack(data, use_bin_type=True).
std::string pack_salt_event(const std::string& tag, const wire::value& data);
// The whole message on the socket: msgpack {"head": {}, "body": pack_salt_event(...)}.
std::string frame_salt_event(const std::string& tag, const wire::value& data);
// The inverse of pack_salt_event (tests, tools): nullopt when malformed.
std::optional<std::pair<std::string, wire::value>> unpack_salt_event(std::string_view packed);

class event_publisher {
 public:
  struct settings {
    std::filesystem::path path;
    std::size_t max_queue = 10000;       // events waiting per subscriber
    std::size_t max_subscribers = 256;
    std::size_t max_bytes = 64u << 20;   // bytes waiting per subscriber (one event always fits)
  };
  event_publisher(boost::asio::io_context& io, settings s, event_hub& hub);
  ~event_publisher();
  event_publisher(const event_publisher&) = delete;
  event_publisher& operator=(const event_publisher&) = delete;

  result<void> start();
  void stop();

  std::uint64_t shed() const noexcept { return shed_.load(); }
  std::uint64_t sent() const noexcept;
  std::size_t subscribers() const;

 private:
  struct conn;
  // What the connections and the accept handler share. It outlives the publisher, so a
  // handler that runs during or after stop() finds `stopped` set and touches nothing else.
  struct book;
  void accept();
  void on_event(const std::string& tag, const wire::value& data);

  boost::asio::io_context& io_;
  settings s_;
  event_hub& hub_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::uint64_t sub_ = 0;
  std::shared_ptr<book> book_;
  bool created_ = false;
  std::atomic<std::uint64_t> shed_{0};
  util::log_limiter shed_log_;
};

}  // namespace sylvite::master
