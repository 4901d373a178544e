// sylvite::master pub_link: the stream between a salt-master and its publish processes
// (`publish_processes`, master/pub_processes.hpp; the child is master/bin/publisher.cpp).
// One AF_UNIX socketpair per process. A message is a 4-byte big-endian length n, then n
// bytes: one op byte and its payload. Publish frames travel as their raw bytes (no
// re-encoding per process); structured payloads are msgpack (frame packing).
//
//   master -> publisher                      publisher -> master
//   'O' init    map of settings              'Y' ready     port (int)
//   'A' all     frame bytes                  'H' hello     [conn_id, address, body]
//   'T' to      array of ids, frame bytes    'U' up        id (bytes): first connection of id
//   'I' ident   [conn_id, id]                'W' down      id (bytes): its last one closed
//   'D' drop    id (bytes)                   'C' count     connections (int), when it changed
//   'R' reopen the log file                  'K' pong      the ping's payload, at once
//   'P' ping    a few bytes (liveness)
//
// Sans-I/O. Thread-safety: a reader per stream; the encoders are plain functions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/result.hpp"
#include "core/wire/value.hpp"

namespace sylvite::master::pub_link {

// The default limit of a message; both ends use max_message_size + 16 MiB (the init
// message carries it as link_limit).
inline constexpr std::size_t k_max_message = 128u << 20;

struct message {
  char op = 0;
  std::string payload;
};

// length + op + payload
std::string encode(char op, std::string_view payload);
// length + op + msgpack(v)
std::string encode_value(char op, const wire::value& v);
// 'T': length + op + msgpack(ids) + frame
std::string encode_to(const std::vector<std::string>& ids, std::string_view frame);
// Split a 'T' payload: ids and the frame bytes. nullopt when malformed.
struct to_payload {
  std::vector<std::string> ids;
  std::string_view frame;
};
std::optional<to_payload> decode_to(std::string_view payload);

class reader {
 public:
  explicit reader(std::size_t max_message = k_max_message) : max_(max_message) {}
  void set_max(std::size_t max_message) { max_ = max_message; }
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // The next whole message, nullopt when more bytes are needed; an error (a length of 0
  // or over the limit) poisons the stream: the caller closes it.
  result<std::optional<message>> next();

 private:
  std::string buf_;
  std::size_t pos_ = 0;
  std::size_t max_;
};

}  // namespace sylvite::master::pub_link
