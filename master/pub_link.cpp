// sylvite::master pub_link (pub_link.hpp): the master <-> publish process stream.
#include "master/pub_link.hpp"

#include "core/wire/msgpack.hpp"

namespace sylvite::master::pub_link {

namespace {

void put_header(std::string& out, std::size_t body, char op) {
  const auto n = static_cast<std::uint32_t>(body + 1);
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(op);
}

}  // namespace

std::string encode(char op, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  put_header(out, payload.size(), op);
  out.append(payload);
  return out;
}

std::string encode_value(char op, const wire::value& v) { return encode(op, wire::pack(v, wire::packing::frame)); }

std::string encode_to(const std::vector<std::string>& ids, std::string_view frame) {
  wire::value arr = wire::value::array();
  for (const auto& id : ids) arr.push_back(id);
  std::string ids_packed = wire::pack(arr, wire::packing::frame);
  std::string out;
  out.reserve(5 + ids_packed.size() + frame.size());
  put_header(out, ids_packed.size() + frame.size(), 'T');
  out.append(ids_packed);
  out.append(frame);
  return out;
}

std::optional<to_payload> decode_to(std::string_view payload) {
  std::size_t used = 0;
  auto v = wire::unpack_prefix(payload, used);
  if (!v || !v->is_array()) return std::nullopt;
  to_payload out;
  out.ids.reserve(v->size());
  for (const auto& e : *v) {
    auto id = wire::as_text(e);
    if (!id) return std::nullopt;
    out.ids.emplace_back(*id);
  }
  out.frame = payload.substr(used);
  return out;
}

result<std::optional<message>> reader::next() {
  const std::size_t avail = buf_.size() - pos_;
  if (avail < 4) {
    if (pos_ > 0 && avail == 0) {
      buf_.clear();
      pos_ = 0;
    }
    return std::optional<message>{};
  }
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const std::size_t n = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
  if (n == 0 || n > max_) return util::make_error_code(util::errc::invalid_argument);
  if (avail < 4 + n) {
    // Keep the buffer from growing without bound at the front.
    if (pos_ > 0 && pos_ >= buf_.size() / 2) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return std::optional<message>{};
  }
  message m;
  m.op = buf_[pos_ + 4];
  m.payload.assign(buf_, pos_ + 5, n - 1);
  pos_ += 4 + n;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return std::optional<message>{std::move(m)};
}

}  // namespace sylvite::master::pub_link
