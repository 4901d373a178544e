// sylvite::transport internals shared by the server and client translation units:
// uuid4 message ids, frame packing without exceptions, socket options, peer formatting.
// Not part of the public contract (include only from core/transport/*.cpp).
// Thread-safety: every function is thread-safe (uuid4 uses a thread_local generator).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/transport/transport.hpp"

namespace sylvite::transport::detail {

// Random (version 4) UUID as Salt's str(uuid4()): 36 chars, lowercase hex.
std::string uuid4();

// pack_frame() that never throws: nullptr if the value cannot be encoded (logged).
std::shared_ptr<const std::string> pack_shared(const wire::value& head, const wire::value& body) noexcept;

// TCP_NODELAY, SO_KEEPALIVE (+ TCP_KEEPIDLE/INTVL/CNT when > 0), TCP_USER_TIMEOUT (> 0)
// on a connected TCP socket. Failures are logged at debug level and ignored.
void apply_tcp_options(int fd, const options& opt) noexcept;

// "1.2.3.4:5678", "[::1]:5678" or "unix" for a sockaddr of the given length.
std::string format_peer(const void* sockaddr_ptr, std::size_t len);
// Port of an AF_INET/AF_INET6 sockaddr, 0 for anything else.
std::uint16_t port_of(const void* sockaddr_ptr, std::size_t len) noexcept;
// True for AF_INET / AF_INET6.
bool is_inet(const void* sockaddr_ptr, std::size_t len) noexcept;

// Human readable endpoint for log lines ("host:port" or the Unix path).
std::string describe(const endpoint& ep);
// True when ep names a Unix socket (host empty, unix_path set).
inline bool is_unix(const endpoint& ep) { return ep.host.empty() && !ep.unix_path.empty(); }

}  // namespace sylvite::transport::detail
