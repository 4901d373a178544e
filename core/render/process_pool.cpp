// sylvite::render process pool (render.hpp). Skeleton: the worker pool lands with
// issue 17's render engine; until then every render reports `unavailable`.
#include "core/render/render.hpp"

namespace sylvite::render {
namespace {
class no_engine final : public renderer {
 public:
  outcome render(const request& r) override {
    outcome o;
    o.st = outcome::status::unavailable;
    o.error = "no render engine in this build: " + r.path.string();
    return o;
  }
};
}  // namespace

std::unique_ptr<renderer> make_process_pool(const pool_options&) { return std::make_unique<no_engine>(); }

}  // namespace sylvite::render
