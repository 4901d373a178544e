// sylvite::master::api console assets (issue 19): find_console_asset over the table the
// build generates from master/api/console/ (cmake/embed_console.cmake). Only the exact
// names of that table are served: no path is ever joined to a directory, so "..", "//"
// or an absolute path simply find nothing.
// Thread-safety: reads immutable data only.
#include "master/api/console_assets.hpp"

#include "master/api/console_assets_table.hpp"

namespace sylvite::master::api {

const console_asset* find_console_asset(std::string_view path) {
  // "/console/app.js" reaches us as "app.js"; tolerate one leading slash.
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  // The query string is the server's business, but never let it defeat the lookup.
  if (auto q = path.find_first_of("?#"); q != std::string_view::npos) path = path.substr(0, q);
  if (path.empty()) path = "index.html";
  for (std::size_t i = 0; i < detail::console_file_count; ++i)
    if (detail::console_files[i].path == path) return &detail::console_files[i].asset;
  return nullptr;
}

}  // namespace sylvite::master::api
