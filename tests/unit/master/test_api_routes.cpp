// Unit tests of the REST API's routes (master/api/api_routes.hpp) without sockets: the real
// eauth service (file backend in a temp dir) and a fake CLI service behind the lowstate
// runner. Checks the status codes of salt-api's refusals and the reply shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "master/api/api_routes.hpp"
#include "master/ipc_protocol.hpp"

using namespace sylvite::master::api;
using sylvite::wire::value;
namespace fs = std::filesystem;

namespace {

struct ApiRoutesFixture : ::testing::Test {
  fs::path dir;
  sylvite::config::master_config cfg;
  std::unique_ptr<eauth_service> eauth;
  std::unique_ptr<api_routes> routes;
  std::vector<value> cli_calls;

  void SetUp() override {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("sylvite-api-routes-" + std::to_string(rd()));
    fs::create_directories(dir);
    std::ofstream(dir / "users") << "alice:secret\nbob:pw\n";
    cfg.cachedir = dir / "cache";
    cfg.pki_dir = dir / "pki";
    fs::create_directories(cfg.cachedir);
    cfg.raw = {{"external_auth", {{"file", {{"^filename", (dir / "users").string()},
                                            {"alice", value::array({".*", "@runner", "@wheel", "@jobs"})},
                                            {"bob", value::array({"test.ping"})}}}}},
               {"netapi_enable_clients", value::array({"local", "local_async", "runner"})}};
    eauth = std::make_unique<eauth_service>(cfg, [](const value&, const std::string&) {
      return std::vector<std::string>{"m1"};
    });
    eauth->set_failure_delay(0);
    lowstate_services ls;
    ls.cfg = &cfg;
    // A fake CLI service: a publish answers one return for m1; a runner echoes its fun.
    ls.cli = [this](const value& body, std::shared_ptr<sylvite::master::cli_reply> out) {
      cli_calls.push_back(body);
      if (body["cmd"] == "publish") {
        if (body.value("wait", false)) {
          out->push(value{{"jid", "1"}, {"minions", value::array({"m1"})}, {"missing", value::array()}});
          out->push(value{{"id", "m1"}, {"jid", "1"}, {"return", true}, {"retcode", 0}, {"success", true}});
          out->reply(value{{"done", true}, {"jid", "1"}, {"no_return", value::array()}});
        } else {
          out->reply(value{{"jid", "1"}, {"minions", value::array({"m1"})}, {"missing", value::array()}});
        }
      } else {
        out->reply(value{{"return", body["fun"]}, {"retcode", 0}});
      }
    };
    api_routes_deps d;
    d.cfg = &cfg;
    d.opts.disable_ssl = true;
    d.opts.max_request_body_size = 4096;
    d.eauth = eauth.get();
    d.runner = std::make_shared<lowstate_runner>(ls);
    routes = std::make_unique<api_routes>(std::move(d));
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  api_response call(const std::string& method, const std::string& path, const std::string& body = "",
                    std::map<std::string, std::string> headers = {}) {
    api_request r;
    r.method = method;
    r.path = path;
    if (auto q = r.path.find('?'); q != std::string::npos) {
      r.query = r.path.substr(q + 1);
      r.path = r.path.substr(0, q);
    }
    r.body = body;
    r.remote = "127.0.0.1";
    r.headers = std::move(headers);
    if (!body.empty() && !r.headers.contains("content-type")) r.headers["content-type"] = "application/json";
    return routes->handle(r);
  }
  std::string login(const std::string& user = "alice", const std::string& pw = "secret") {
    auto r = call("POST", "/login", value{{"username", user}, {"password", pw}, {"eauth", "file"}}.dump());
    EXPECT_EQ(r.status, 200u) << r.body;
    return value::parse(r.body)["return"][0]["token"].get<std::string>();
  }
};

}  // namespace

TEST_F(ApiRoutesFixture, LoginAndLocal) {
  auto tok = login();
  auto r = call("POST", "/", R"([{"client": "local", "tgt": "*", "fun": "test.ping"}])", {{"x-auth-token", tok}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(value::parse(r.body), (value{{"return", value::array({{{"m1", true}}})}}));
  ASSERT_EQ(cli_calls.size(), 1u);
  EXPECT_EQ(cli_calls[0]["user"], "alice");  // the job runs as the API user
  r = call("POST", "/", R"([{"client": "local_async", "tgt": "*", "fun": "test.ping"}])",
           {{"cookie", "session_id=" + tok}});
  EXPECT_EQ(value::parse(r.body)["return"][0], (value{{"jid", "1"}, {"minions", value::array({"m1"})}}));
  r = call("POST", "/", R"([{"client": "runner", "fun": "manage.up"}])", {{"x-auth-token", tok}});
  EXPECT_EQ(value::parse(r.body)["return"][0], "manage.up");
}

TEST_F(ApiRoutesFixture, Refusals) {
  auto tok = login();
  std::map<std::string, std::string> h = {{"x-auth-token", tok}};
  const std::string ping = R"([{"client": "local", "tgt": "*", "fun": "test.ping"}])";
  EXPECT_EQ(call("POST", "/", ping).status, 401u);
  EXPECT_EQ(call("POST", "/", ping, {{"x-auth-token", std::string(64, 'a')}}).status, 401u);
  EXPECT_EQ(call("POST", "/", ping, {{"x-auth-token", "../../etc/passwd"}}).status, 401u);
  EXPECT_EQ(call("POST", "/", "[{", h).status, 400u);
  EXPECT_EQ(call("POST", "/", ping, {{"x-auth-token", tok}, {"content-type", "application/xml"}}).status, 415u);
  EXPECT_EQ(call("POST", "/", "\"x\"", h).status, 400u);
  EXPECT_EQ(call("POST", "/", R"([{"client": "bogus"}])", h).status, 400u);
  EXPECT_EQ(call("POST", "/", R"([{"client": "wheel", "fun": "key.list_all"}])", h).status, 400u);  // disabled
  EXPECT_EQ(call("GET", "/", "", {{"accept", "text/html"}}).status, 406u);
  EXPECT_EQ(call("GET", "/nowhere").status, 404u);
  EXPECT_EQ(call("PUT", "/").status, 405u);
  EXPECT_EQ(call("POST", "/login", R"({"username": "alice", "password": "x", "eauth": "file"})").status, 401u);
  auto bob = login("bob", "pw");
  EXPECT_EQ(call("POST", "/", R"([{"client": "local", "tgt": "*", "fun": "test.echo"}])", {{"x-auth-token", bob}}).status,
            401u);  // an ACL refusal, as salt-api answers it
  EXPECT_EQ(call("POST", "/", ping, {{"x-auth-token", bob}}).status, 200u);
  EXPECT_EQ(cli_calls.size(), 1u);  // nothing refused reached the master
  // logout revokes
  EXPECT_EQ(call("POST", "/logout", "", h).status, 200u);
  EXPECT_EQ(call("POST", "/", ping, h).status, 401u);
}

TEST_F(ApiRoutesFixture, EventsAuthorization) {
  auto tok = login();
  api_request r;
  r.method = "GET";
  r.path = "/events";
  r.remote = "127.0.0.1";
  api_response refusal;
  r.query = "token=" + tok;
  EXPECT_TRUE(routes->authorize_stream(r, refusal));
  r.query = "salt_token=" + tok;
  EXPECT_TRUE(routes->authorize_stream(r, refusal));
  r.query = "";
  r.headers["x-auth-token"] = tok;
  EXPECT_TRUE(routes->authorize_stream(r, refusal));
  r.headers.clear();
  EXPECT_FALSE(routes->authorize_stream(r, refusal));
  EXPECT_EQ(refusal.status, 401u);
  r.query = "other=1&token=" + tok;
  EXPECT_FALSE(routes->authorize_stream(r, refusal));
  EXPECT_EQ(refusal.status, 400u);
}

TEST_F(ApiRoutesFixture, WebhookNeedsAuthAndFires) {
  EXPECT_EQ(call("POST", "/hook/a/b", R"({"x": 1})").status, 401u);
}
