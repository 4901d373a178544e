#include "core/util/result.hpp"

namespace sylvite::util {
namespace {
class category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sylvite.util"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok: return "ok";
      case errc::io_error: return "i/o error";
      case errc::not_found: return "not found";
      case errc::already_exists: return "already exists";
      case errc::invalid_argument: return "invalid argument";
    }
    return "unknown util error";
  }
};
}  // namespace

const boost::system::error_category& util_category() noexcept {
  static const category c;
  return c;
}
}  // namespace sylvite::util
