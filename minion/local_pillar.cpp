// sylvite::minion local pillar (see local_pillar.hpp).
#include "minion/local_pillar.hpp"

#include <filesystem>

#include "core/match/match.hpp"
#include "core/util/files.hpp"

namespace sylvite::minion {

namespace fs = std::filesystem;

namespace {

void merge_into(wire::value& dst, const wire::value& src) {
  if (!dst.is_object() || !src.is_object()) {
    dst = src;
    return;
  }
  for (const auto& [k, v] : src.items()) {
    if (dst.contains(k) && dst[k].is_object() && v.is_object()) merge_into(dst[k], v);
    else dst[k] = v;
  }
}

std::optional<fs::path> find_sls(const std::vector<std::string>& roots, const std::string& sls) {
  std::string rel = sls;
  for (auto& c : rel)
    if (c == '.') c = '/';
  for (const auto& root : roots) {
    std::error_code ec;
    fs::path a = fs::path(root) / (rel + ".sls");
    if (fs::is_regular_file(a, ec)) return a;
    fs::path b = fs::path(root) / rel / "init.sls";
    if (fs::is_regular_file(b, ec)) return b;
  }
  return std::nullopt;
}

}  // namespace

wire::value compile_local_pillar(const config::minion_config& cfg, const wire::value& grains, const std::string& saltenv) {
  wire::value pillar = wire::value::object();
  wire::value errors = wire::value::array();
  auto it = cfg.pillar_roots.find(saltenv);
  if (it == cfg.pillar_roots.end()) return pillar;
  const auto& roots = it->second;
  std::optional<wire::value> top;
  for (const auto& root : roots) {
    auto text = util::read_file(fs::path(root) / "top.sls");
    if (!text) continue;
    auto parsed = config::parse_yaml(*text);
    if (!parsed) {
      errors.push_back("Failed to render top.sls: " + parsed.error());
      continue;
    }
    top = std::move(*parsed);
    break;
  }
  if (top && top->is_object()) {
    const wire::value* env_top = wire::find(*top, saltenv);
    const wire::value empty = wire::value::object();
    match::minion_facts facts{cfg.id, &grains, &empty};
    if (env_top && env_top->is_object()) {
      for (const auto& [tgt, entries] : env_top->items()) {
        if (!entries.is_array()) continue;
        std::string tgt_type = "glob";
        for (const auto& e : entries)
          if (e.is_object())
            if (auto m = wire::get_text(e, "match")) tgt_type = std::string(*m);
        if (!match::matches(wire::value(tgt), tgt_type, facts)) continue;
        for (const auto& e : entries) {
          auto sls = wire::as_text(e);
          if (!sls) continue;
          auto path = find_sls(roots, std::string(*sls));
          if (!path) {
            errors.push_back("Specified SLS '" + std::string(*sls) + "' in environment '" + saltenv + "' is not available on the salt master");
            continue;
          }
          auto text = util::read_file(*path);
          if (!text) continue;
          auto data = config::parse_yaml(*text);
          if (!data) {
            errors.push_back("Rendering SLS '" + std::string(*sls) + "' failed: " + data.error());
            continue;
          }
          if (data->is_object()) merge_into(pillar, *data);
        }
      }
    }
  }
  if (!errors.empty()) pillar["_errors"] = errors;
  return pillar;
}

}  // namespace sylvite::minion
