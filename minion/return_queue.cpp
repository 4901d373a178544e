// sylvite::minion return queue (see return_queue.hpp).
#include "minion/return_queue.hpp"

#include <algorithm>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

namespace sylvite::minion {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view k_ext = ".ret";

// 20-digit zero padded sequence numbers sort in delivery order as strings.
std::string seq_name(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(n));
  return std::string(buf) + std::string(k_ext);
}

bool is_entry(const std::string& name) {
  return name.size() == 20 + k_ext.size() && name.ends_with(k_ext) &&
         std::all_of(name.begin(), name.begin() + 20, [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

return_queue::return_queue(fs::path dir, std::size_t max_entries) : dir_(std::move(dir)), max_(max_entries) {
  if (auto r = util::make_dirs(dir_, 0700); !r) {
    spdlog::error("Cannot create the return queue directory {}: {}", dir_.string(), r.error().message());
    return;
  }
  for (const auto& name : util::list_dir(dir_)) {
    if (!is_entry(name)) continue;
    ++count_;
    next_ = std::max<std::uint64_t>(next_, std::stoull(name.substr(0, 20)) + 1);
  }
  if (count_ > 0) spdlog::info("{} undelivered job return(s) queued in {}", count_, dir_.string());
}

result<std::string> return_queue::push(const std::string& master, const wire::value& load) {
  std::lock_guard lk(mu_);
  if (count_ >= max_) return make_error_code(std::errc::value_too_large);
  wire::value rec = wire::value::object();
  rec["master"] = master;
  rec["load"] = load;
  std::string name = seq_name(next_++);
  auto w = util::write_file_atomic(dir_ / name, wire::pack(rec, wire::packing::frame), 0600);
  if (!w) return w.error();
  ++count_;
  return name;
}

std::vector<return_queue::entry> return_queue::pending(const std::string& master, bool any_ok) const {
  std::vector<entry> out;
  std::vector<std::string> names;
  {
    std::lock_guard lk(mu_);
    for (auto& n : util::list_dir(dir_))
      if (is_entry(n)) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  for (auto& n : names) {
    auto data = util::read_file(dir_ / n);
    if (!data) continue;  // removed meanwhile
    auto v = wire::unpack(*data);
    const wire::value* load = v && v->is_object() ? wire::find(*v, "load") : nullptr;
    auto m = v && v->is_object() ? wire::get_text(*v, "master") : std::nullopt;
    if (!load || !m || !load->is_object()) {
      spdlog::error("Return queue entry {} is unreadable; moved aside as {}.bad", (dir_ / n).string(), n);
      std::error_code ec;
      fs::rename(dir_ / n, dir_ / (n + ".bad"), ec);
      std::lock_guard lk(mu_);
      if (count_ > 0) --count_;
      continue;
    }
    if (*m == master || (any_ok && m->empty())) out.push_back(entry{n, std::string(*m), *load});
  }
  return out;
}

void return_queue::remove(const std::string& name) {
  std::lock_guard lk(mu_);
  std::error_code ec;
  if (fs::remove(dir_ / name, ec) && count_ > 0) --count_;
}

std::size_t return_queue::size() const {
  std::lock_guard lk(mu_);
  return count_;
}

}  // namespace sylvite::minion
