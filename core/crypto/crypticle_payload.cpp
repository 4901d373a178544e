// sylvite::crypto crypticle payload layer: dumps/loads ("pickle::" [+ nonce] + Salt
// payload msgpack), serial check. Split from crypticle.cpp so that the cipher layer
// links without core/wire.
// Thread-safety: dumps is const; loads moves last_serial_ with a CAS loop.
#include <string>
#include <string_view>

#include "core/crypto/crypticle.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::crypto {

namespace {
constexpr std::string_view pickle_pad = "pickle::";
constexpr std::size_t nonce_size = 32;
}  // namespace

std::string crypticle::dumps(const wire::value& obj, std::string_view nonce) const {
  std::string plain(pickle_pad);
  plain.append(nonce);  // Salt: nonce.encode() when a nonce is given, nothing otherwise
  try {
    plain += wire::pack(obj, wire::packing::salt_payload);
  } catch (...) {
    return {};  // pack() is documented never to fail; keep exceptions out regardless
  }
  return encrypt(plain);
}

result<wire::value> crypticle::loads(std::string_view data, std::string_view nonce,
                                     bool check_serial, std::int64_t* serial_out) const {
  // Errors: those of decrypt(); bad_format (no "pickle::" prefix: Salt silently returns
  // {}); bad_nonce (expected nonce not the next 32 bytes); the wire error of unpack();
  // bad_format (serial not an integer); stale_serial (serial <= last seen).
  // With check_serial=false a "serial" key is still removed but neither checked nor
  // recorded.
  auto plain = decrypt(data);
  if (!plain) return plain.error();
  std::string_view rest = *plain;
  if (rest.substr(0, pickle_pad.size()) != pickle_pad) return make_error_code(errc::bad_format);
  rest.remove_prefix(pickle_pad.size());
  if (!nonce.empty()) {
    if (rest.size() < nonce_size || nonce.size() != nonce_size ||
        rest.substr(0, nonce_size) != nonce)
      return make_error_code(errc::bad_nonce);
    rest.remove_prefix(nonce_size);
  }
  auto v = wire::unpack(rest);
  if (!v) return v.error();
  try {
    if (v->is_object()) {
      auto it = v->find("serial");
      if (it != v->end()) {
        std::int64_t serial = 0;
        if (it->is_number_integer() && !it->is_number_unsigned()) {
          serial = it->get<std::int64_t>();
        } else if (it->is_number_unsigned()) {
          auto u = it->get<std::uint64_t>();
          serial = u > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(u);
        } else {
          return make_error_code(errc::bad_format);
        }
        v->erase(it);
        if (serial_out) *serial_out = serial;
        if (check_serial) {
          std::int64_t last = last_serial_.load();
          do {
            if (serial <= last) return make_error_code(errc::stale_serial);
          } while (!last_serial_.compare_exchange_weak(last, serial));
        }
      }
    }
  } catch (...) {
    return make_error_code(errc::bad_format);
  }
  return std::move(*v);
}

}  // namespace sylvite::crypto
