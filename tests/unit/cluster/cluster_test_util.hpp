// Shared by the cluster unit tests: a temp directory removed at the end of the test.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace sylvite::test {

struct tmpdir {
  std::filesystem::path p;
  explicit tmpdir(const std::string& prefix = "sylvite-cl") {
    std::string tpl = "/tmp/" + prefix + "-XXXXXX";
    p = ::mkdtemp(tpl.data());
  }
  ~tmpdir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  tmpdir(const tmpdir&) = delete;
  tmpdir& operator=(const tmpdir&) = delete;
};

}  // namespace sylvite::test
