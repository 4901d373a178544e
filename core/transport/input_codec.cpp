// sylvite::transport::detail: Salt's TCP framing (wire::frame_parser) as an input codec.
#include "core/transport/detail/input_codec.hpp"

namespace sylvite::transport::detail {

namespace {

class salt_codec final : public input_codec {
 public:
  void set_limits(const wire::limits& lim) noexcept override { p_.set_limits(lim); }
  const wire::limits& get_limits() const noexcept override { return p_.get_limits(); }
  bool in_frame() const noexcept override { return p_.in_frame(); }
  std::size_t capacity() const noexcept override { return p_.capacity(); }
  std::size_t capacity_after(std::size_t n) const noexcept override { return p_.capacity_after(n); }
  void release_memory() noexcept override { p_.release_memory(); }
  void feed(std::string_view data) override { p_.feed(data); }
  result<std::optional<wire::frame>> next() override { return p_.next(); }
  void clear() noexcept override { p_ = wire::frame_parser(wire::limits{}); }

 private:
  wire::frame_parser p_{wire::limits{}};
};

}  // namespace

std::unique_ptr<input_codec> make_salt_codec() { return std::make_unique<salt_codec>(); }

}  // namespace sylvite::transport::detail
