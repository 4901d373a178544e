// Tests of master/api/console_assets: the web console's files are built into the binary
// byte for byte, found by their names only (no path tricks), with the right content types.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "master/api/console_assets.hpp"

using sylvite::master::api::find_console_asset;

namespace {
std::string source_file(const std::string& name) {
  std::ifstream f(std::string(SYLVITE_SOURCE_DIR) + "/master/api/console/" + name, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
}  // namespace

TEST(ConsoleAssets, EveryFileIsEmbeddedByteForByte) {
  for (const char* name : {"index.html", "app.js", "app.css"}) {
    const auto* a = find_console_asset(name);
    ASSERT_NE(a, nullptr) << name;
    const std::string disk = source_file(name);
    ASSERT_FALSE(disk.empty()) << name;
    EXPECT_EQ(a->body, disk) << name;
  }
}

TEST(ConsoleAssets, ContentTypes) {
  EXPECT_EQ(find_console_asset("index.html")->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(find_console_asset("app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(find_console_asset("app.css")->content_type, "text/css; charset=utf-8");
}

TEST(ConsoleAssets, EmptyPathIsThePage) {
  EXPECT_EQ(find_console_asset(""), find_console_asset("index.html"));
  EXPECT_EQ(find_console_asset("/"), find_console_asset("index.html"));
  EXPECT_EQ(find_console_asset("/app.js"), find_console_asset("app.js"));
  EXPECT_EQ(find_console_asset("app.js?v=1"), find_console_asset("app.js"));
}

TEST(ConsoleAssets, UnknownAndTrickyPathsFindNothing) {
  for (const char* p : {"nope.js", "../app.js", "./app.js", "//app.js", "/etc/passwd", "console/app.js",
                        "APP.JS", "app.js/", "..", "%2e%2e/app.js"})
    EXPECT_EQ(find_console_asset(p), nullptr) << p;
  EXPECT_EQ(find_console_asset(std::string_view("app.js\0", 7)), nullptr);
}
