// Shared pieces of the execution-module tests (test_modules, test_mod_mine,
// test_mod_event): a call_context over minion config "m1" that calls the builtin
// registry, a master_link recording the loads sent to the master, and kw() building a
// Salt __kwarg__ map. Each test's fixture adds its grains, pillar, pub and jid.
// Thread-safety: single-threaded test helpers.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "minion/modules.hpp"

namespace sylvite::test {

// {"__kwarg__": True, **m}: keyword arguments as the minion receives them.
inline wire::value kw(wire::value m) {
  wire::value k = {{"__kwarg__", true}};
  for (auto& [key, v] : m.items()) k[key] = v;
  return k;
}

// The master as a module sees it: every load is recorded and answered with `answer`
// (an io_error when `fail`).
class recording_master : public minion::master_link {
 public:
  std::vector<wire::value> sent;
  wire::value answer = true;
  bool fail = false;
  result<wire::value> send(wire::value load, std::chrono::milliseconds, int) override {
    sent.push_back(std::move(load));
    if (fail) return util::make_error_code(util::errc::io_error);
    return answer;
  }
  result<wire::value> fetch_pillar() override { return wire::value::object(); }
};

struct module_fixture {
  config::minion_config cfg;
  minion::call_context ctx;
  module_fixture() {
    cfg.id = "m1";
    ctx.cfg = &cfg;
  }
  module_fixture(const module_fixture&) = delete;
  module_fixture& operator=(const module_fixture&) = delete;
  minion::exec_outcome call(const std::string& fun, wire::value args = wire::value::array()) {
    return minion::module_registry::builtin().call(fun, args, ctx);
  }
};

}  // namespace sylvite::test
