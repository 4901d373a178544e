// sylvite::master::api console asset table (issue 19): the files of master/api/console/
// as compiled into the binary. Defined by the source cmake/embed_console.cmake generates
// at build time; searched by find_console_asset (console_assets.cpp). Private to the
// sylvite_master_console library.
// Thread-safety: immutable data, constant-initialized; safe from any thread.
#pragma once
#include <cstddef>
#include <string_view>

#include "master/api/console_assets.hpp"

namespace sylvite::master::api::detail {

struct console_file {
  std::string_view path;  // relative to master/api/console/, e.g. "app.js"
  console_asset asset;
};

extern const console_file console_files[];
extern const std::size_t console_file_count;

}  // namespace sylvite::master::api::detail
