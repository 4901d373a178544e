// sylvite::transport::zmtp: the ZMTP 3.1 codec and encoders (detail/zmtp_codec.hpp).
// The receive buffer is a wire::input_buffer, as frame_parser's: its capacity_after()
// lets the session charge the pre-authentication budget before memory is allocated.
#include "core/transport/detail/zmtp_codec.hpp"

#include <algorithm>
#include <cstring>

namespace sylvite::transport::zmtp {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::uint64_t be64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void append_property(std::string& out, std::string_view name, std::string_view value) {
  out.push_back(static_cast<char>(name.size()));
  out.append(name);
  const auto n = static_cast<std::uint32_t>(value.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(value);
}

// Peer socket types each of our roles talks to (libzmq's compatibility table).
bool compatible(role r, std::string_view peer) {
  switch (r) {
    case role::router:
      return iequals(peer, "REQ") || iequals(peer, "DEALER") || iequals(peer, "ROUTER");
    case role::xpub:
      return iequals(peer, "SUB") || iequals(peer, "XSUB");
    case role::req:
      return iequals(peer, "REP") || iequals(peer, "ROUTER");
    case role::sub:
      return iequals(peer, "PUB") || iequals(peer, "XPUB");
  }
  return false;
}

const char* type_name(role r) {
  switch (r) {
    case role::router:
      return "ROUTER";
    case role::xpub:
      return "XPUB";
    case role::req:
      return "REQ";
    case role::sub:
      return "SUB";
  }
  return "";
}

}  // namespace

void append_frame(std::string& out, std::string_view data, bool more, bool command) {
  unsigned char flags = (more ? flag_more : 0) | (command ? flag_command : 0);
  if (data.size() > 255) {
    flags |= flag_long;
    out.push_back(static_cast<char>(flags));
    const auto n = static_cast<std::uint64_t>(data.size());
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  } else {
    out.push_back(static_cast<char>(flags));
    out.push_back(static_cast<char>(data.size()));
  }
  out.append(data);
}

std::string encode_message(const std::vector<std::string>& frames) {
  std::size_t total = 0;
  for (const auto& f : frames) total += f.size() + 9;
  std::string out;
  out.reserve(total);
  for (std::size_t i = 0; i < frames.size(); ++i) append_frame(out, frames[i], i + 1 < frames.size());
  return out;
}

std::string command(std::string_view name, std::string_view data) {
  std::string body;
  body.reserve(1 + name.size() + data.size());
  body.push_back(static_cast<char>(name.size()));
  body.append(name);
  body.append(data);
  std::string out;
  append_frame(out, body, false, true);
  return out;
}

std::string ping(std::uint16_t ttl) {
  const char d[2] = {static_cast<char>(ttl >> 8), static_cast<char>(ttl & 0xff)};
  return command("PING", std::string_view(d, 2));
}

std::string request(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 11);
  append_frame(out, {}, true);
  append_frame(out, payload, false);
  return out;
}

std::string subscribe(std::string_view topic) {
  std::string body;
  body.reserve(topic.size() + 1);
  body.push_back('\x01');
  body.append(topic);
  std::string out;
  append_frame(out, body, false);
  return out;
}

std::string handshake(role r) {
  std::string out;
  out.reserve(greeting_size + 64);
  static const unsigned char sig[10] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
  out.append(reinterpret_cast<const char*>(sig), sizeof sig);
  out.push_back(3);  // version 3.1
  out.push_back(1);
  std::string mech("NULL");
  mech.resize(20, '\0');
  out.append(mech);
  out.push_back(0);                  // as-server: 0 with NULL
  out.append(31, '\0');              // filler
  std::string props;
  append_property(props, "Socket-Type", type_name(r));
  // libzmq sends an Identity for the socket types that route (REQ, DEALER, ROUTER).
  if (r == role::router || r == role::req) append_property(props, "Identity", "");
  out += command("READY", props);
  return out;
}

// ---------------------------------------------------------------- codec ----

codec::codec(role r) : role_(r) { out_ = handshake(r); }

void codec::clear() noexcept {
  buf_.clear();
  scan_ = msg_bytes_ = 0;
  parts_.clear();
  parts_.shrink_to_fit();
  std::string().swap(out_);
}

void codec::feed(std::string_view data) {
  if (poisoned_ || data.empty()) return;
  try {
    buf_.append(data);
  } catch (const std::exception&) {
    poisoned_ = wire::errc::too_large;
  }
}

result<std::optional<wire::frame>> codec::fail(error_code ec) {
  poisoned_ = ec;
  return ec;
}

result<std::optional<wire::frame>> codec::next() {
  if (poisoned_) return poisoned_;
  for (;;) {
    const std::string_view avail = buf_.pending();
    const auto* u = reinterpret_cast<const unsigned char*>(avail.data());
    if (state_ == state::greeting) {
      // Refuse what is not ZMTP 3 as soon as the bytes show it (an HTTP client, a TCP
      // minion on the wrong port): signature FF .. 7F, then the major version.
      if (!avail.empty() && u[0] != 0xff) return fail(wire::errc::bad_frame);
      if (avail.size() >= 10 && (u[9] & 1) == 0) return fail(wire::errc::bad_frame);
      if (avail.size() >= 11 && u[10] < 3) return fail(wire::errc::bad_frame);
      if (avail.size() < greeting_size) return std::optional<wire::frame>{};
      static const char null_mech[20] = {'N', 'U', 'L', 'L'};
      if (std::memcmp(avail.data() + 12, null_mech, sizeof null_mech) != 0) return fail(wire::errc::bad_frame);
      buf_.consume(greeting_size);
      state_ = state::ready;
      continue;
    }
    // One frame header at scan_.
    const std::string_view rest = avail.substr(scan_);
    if (rest.size() < 2) return std::optional<wire::frame>{};
    const auto* h = reinterpret_cast<const unsigned char*>(rest.data());
    const unsigned char flags = h[0];
    if (flags & ~(flag_more | flag_long | flag_command)) return fail(wire::errc::bad_frame);
    const bool is_command = flags & flag_command;
    const bool more = flags & flag_more;
    std::size_t hdr = 2;
    std::uint64_t size = h[1];
    if (flags & flag_long) {
      hdr = 9;
      if (rest.size() < hdr) return std::optional<wire::frame>{};
      size = be64(h + 1);
    }
    if (is_command) {
      // Commands stand alone: never inside a message, never with MORE.
      if (more || !parts_.empty() || size > max_command_size) return fail(wire::errc::bad_frame);
      if (rest.size() < hdr + size) return std::optional<wire::frame>{};
      const std::string_view data = rest.substr(hdr, size);
      buf_.consume(hdr + size);
      scan_ = 0;
      auto r = on_command(data);
      if (!r) return r;
      if (*r) return r;
      continue;
    }
    if (state_ != state::traffic) return fail(wire::errc::bad_frame);  // a message before READY
    if (size > lim_.max_bytes || msg_bytes_ + size > lim_.max_bytes) return fail(wire::errc::too_large);
    if (parts_.size() >= max_message_frames) return fail(wire::errc::bad_frame);
    if (rest.size() < hdr + size) return std::optional<wire::frame>{};
    parts_.push_back(part{scan_ + hdr, static_cast<std::size_t>(size)});
    scan_ += hdr + size;
    msg_bytes_ += size;
    if (more) continue;
    auto r = on_message();
    buf_.consume(scan_);
    scan_ = 0;
    msg_bytes_ = 0;
    parts_.clear();
    if (!r) return r;
    if (*r) return r;
  }
}

result<std::optional<wire::frame>> codec::on_command(std::string_view data) {
  if (data.empty()) return fail(wire::errc::bad_frame);
  const std::size_t nlen = static_cast<unsigned char>(data[0]);
  if (nlen == 0 || data.size() < 1 + nlen) return fail(wire::errc::bad_frame);
  const std::string_view name = data.substr(1, nlen);
  const std::string_view body = data.substr(1 + nlen);
  if (state_ == state::ready) {
    if (name != "READY") return fail(wire::errc::bad_frame);
    std::string_view type;
    std::string_view p = body;
    while (!p.empty()) {
      const std::size_t kl = static_cast<unsigned char>(p[0]);
      if (kl == 0 || p.size() < 1 + kl + 4) return fail(wire::errc::bad_frame);
      const std::string_view key = p.substr(1, kl);
      const auto* v = reinterpret_cast<const unsigned char*>(p.data() + 1 + kl);
      const std::size_t vl = (std::size_t{v[0]} << 24) | (std::size_t{v[1]} << 16) | (std::size_t{v[2]} << 8) | v[3];
      if (p.size() < 1 + kl + 4 + vl) return fail(wire::errc::bad_frame);
      if (iequals(key, "Socket-Type")) type = p.substr(1 + kl + 4, vl);
      p.remove_prefix(1 + kl + 4 + vl);
    }
    if (!compatible(role_, type)) return fail(wire::errc::bad_frame);
    state_ = state::traffic;
    wire::value head = wire::value::object();
    head["ready"] = std::string(type);
    return std::optional<wire::frame>(wire::frame{std::move(head), nullptr});
  }
  if (name == "PING") {
    // TTL (2 bytes), then a context of up to 16 bytes that PONG echoes.
    if (body.size() < 2 || body.size() > 18) return fail(wire::errc::bad_frame);
    out_ += command("PONG", body.substr(2));
    return std::optional<wire::frame>{};
  }
  if (name == "ERROR") return fail(wire::errc::bad_frame);
  if (role_ == role::xpub && (name == "SUBSCRIBE" || name == "CANCEL")) {
    wire::value head = wire::value::object();
    head["sub"] = name == "SUBSCRIBE";
    return std::optional<wire::frame>(wire::frame{std::move(head), wire::make_bin(body)});
  }
  return std::optional<wire::frame>{};  // PONG, and commands this side does not use
}

result<std::optional<wire::frame>> codec::on_message() {
  const std::string_view base = buf_.pending();
  if (role_ == role::sub) {
    // Salt's publish: [payload] without zmq_filtering, [topic, payload] with it.
    if (parts_.size() == 1)
      return std::optional<wire::frame>(
          wire::frame{wire::value::object(), wire::make_bin(base.substr(parts_[0].off, parts_[0].len))});
    if (parts_.size() != 2) {
      // Not a Salt publish: the client ignores it (as the libzmq client does), the
      // connection stays.
      wire::value head = wire::value::object();
      head["malformed"] = true;
      return std::optional<wire::frame>(wire::frame{std::move(head), nullptr});
    }
    wire::value head = wire::value::object();
    head["topic"] = wire::make_bin(base.substr(parts_[0].off, parts_[0].len));
    return std::optional<wire::frame>(
        wire::frame{std::move(head), wire::make_bin(base.substr(parts_[1].off, parts_[1].len))});
  }
  if (role_ == role::req) {
    // A REP/ROUTER's reply to a REQ: ["", payload].
    if (parts_.size() != 2 || parts_[0].len != 0) return fail(wire::errc::bad_frame);
    auto body = wire::unpack(base.substr(parts_[1].off, parts_[1].len), lim_);
    if (!body) return fail(body.error());
    return std::optional<wire::frame>(wire::frame{wire::value::object(), std::move(*body)});
  }
  if (role_ == role::xpub) {
    // A subscriber sends (un)subscriptions only: one frame, \x01topic or \x00topic.
    if (parts_.size() != 1 || parts_[0].len == 0) return std::optional<wire::frame>{};
    const std::string_view f = base.substr(parts_[0].off, parts_[0].len);
    if (f[0] != 0 && f[0] != 1) return std::optional<wire::frame>{};
    wire::value head = wire::value::object();
    head["sub"] = f[0] == 1;
    return std::optional<wire::frame>(wire::frame{std::move(head), wire::make_bin(f.substr(1))});
  }
  // ROUTER: the envelope is every frame up to and including the first empty one, then
  // exactly one payload frame (a REQ message: ["", payload]).
  std::size_t delim = parts_.size();
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (parts_[i].len == 0) {
      delim = i;
      break;
    }
  }
  if (delim == parts_.size() || delim + 2 != parts_.size()) return fail(wire::errc::bad_frame);
  const part& pl = parts_.back();
  auto body = wire::unpack(base.substr(pl.off, pl.len), lim_);
  if (!body) return fail(body.error());
  wire::value head = wire::value::object();
  if (delim > 0) {
    wire::value env = wire::value::array();
    for (std::size_t i = 0; i <= delim; ++i) env.push_back(wire::make_bin(base.substr(parts_[i].off, parts_[i].len)));
    head["envelope"] = std::move(env);
  }
  return std::optional<wire::frame>(wire::frame{std::move(head), std::move(*body)});
}

}  // namespace sylvite::transport::zmtp
