// master_core driven through handle_request without sockets, shared by test_request.cpp
// and test_events.cpp: a fresh config in a temp dir, a fake pub sink, minion m1, and
// login()/call() helpers speaking the auth and AES request protocol. Subclasses adjust
// the config (customize) and the pillar renderer (make_renderer).
// Thread-safety: single-threaded test fixture.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core/util/files.hpp"
#include "test_util.hpp"

namespace sylvite::test {

inline const std::string kNonce = "0123456789abcdef0123456789abcdef";

// The pillar compiler's renderer in these tests: YAML only, no sylvite-render worker.
class yaml_renderer final : public render::renderer {
 public:
  render::outcome render(const render::request& r) override {
    render::outcome o;
    auto text = util::read_file(r.path);
    if (!text) {
      o.st = render::outcome::status::render_error;
      o.error = "unreadable";
      return o;
    }
    auto v = config::parse_yaml(*text);
    if (!v) {
      o.st = render::outcome::status::render_error;
      o.error = v.error();
      return o;
    }
    o.st = render::outcome::status::ok;
    o.data = v->is_null() ? wire::value::object() : std::move(*v);
    return o;
  }
};

// Every render an empty map.
class null_renderer final : public render::renderer {
 public:
  render::outcome render(const render::request&) override {
    render::outcome o;
    o.st = render::outcome::status::ok;
    o.data = wire::value::object();
    return o;
  }
};

struct master_core_test : ::testing::Test {
  temp_dir tmp;
  std::unique_ptr<master::master_core> core;
  fake_sink sink;
  fake_minion m1{"m1", cached_key(1)};

  void SetUp() override {
    auto cfg = make_config(tmp.path);
    customize(cfg);
    auto c = master::master_core::create(cfg);
    ASSERT_TRUE(c) << c.error().message();
    core = std::move(*c);
    core->set_renderer(make_renderer());
    core->set_pub_sink(&sink);
  }
  virtual void customize(config::master_config&) {}
  virtual std::unique_ptr<render::renderer> make_renderer() { return std::make_unique<yaml_renderer>(); }

  // Accept fm's key and authenticate it so it has a session key.
  void login(fake_minion& fm) {
    accept_key(*core, fm);
    auto reply = core->handle_request(fm.auth_body(fm.auth_load(kNonce)), "test");
    auto r = fm.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false);
    ASSERT_TRUE(r) << reply.dump();
  }
  // One AES request from fm; its opened reply.
  wire::value call(fake_minion& fm, wire::value load, const std::string& nonce = kNonce) {
    auto reply = core->handle_request(fm.aes_body(std::move(load), nonce, fm.session), "test");
    auto r = fm.open_reply(reply, nonce, fm.session);
    EXPECT_TRUE(r) << reply.dump();
    return r ? *r : wire::value("<undecryptable>");
  }
};

}  // namespace sylvite::test
