// Unit tests of the REST API's socket-free pieces (master/api/api_http.hpp,
// api_lowstate.hpp reformat_low, api_routes.hpp make_tar): content negotiation as
// CherryPy's cptools.accept, request bodies as salt-api's hypermedia_in processors and
// lowdata_fmt, query strings, cookies, tokens, SSE framing, the rest_cherrypy options.
#include <gtest/gtest.h>

#include "master/api/api_http.hpp"
#include "master/api/api_lowstate.hpp"
#include "master/api/api_routes.hpp"

using namespace sylvite::master::api;
using sylvite::wire::value;

TEST(ApiHttp, NegotiateAcceptHeader) {
  EXPECT_EQ(negotiate(""), media::json);  // no header: the first offered type
  EXPECT_EQ(negotiate("application/json"), media::json);
  EXPECT_EQ(negotiate("application/x-yaml"), media::yaml);
  EXPECT_EQ(negotiate("*/*"), media::json);
  EXPECT_EQ(negotiate("application/*"), media::json);
  EXPECT_EQ(negotiate("text/html, application/x-yaml;q=0.5"), media::yaml);
  EXPECT_EQ(negotiate("application/json;q=0.2, application/x-yaml;q=0.9"), media::yaml);
  EXPECT_EQ(negotiate("Application/JSON"), media::json);
  EXPECT_FALSE(negotiate("text/html"));
  EXPECT_FALSE(negotiate("application/json;q=0"));
  EXPECT_FALSE(negotiate("text/*"));
  EXPECT_FALSE(negotiate("application/json;q=bogus"));
}

TEST(ApiHttp, SerializeJsonAndYaml) {
  value v = {{"return", value::array({{{"m1", true}}})}};
  EXPECT_EQ(serialize(v, media::json), R"({"return":[{"m1":true}]})");
  EXPECT_EQ(serialize(v, media::yaml), "return:\n- m1: true\n");
  EXPECT_EQ(serialize(sylvite::wire::make_bin("text"), media::json), "\"text\"");
}

TEST(ApiHttp, JsonBody) {
  auto r = parse_body("application/json; charset=utf-8", R"([{"client": "local", "tgt": "*"}])");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.data[0]["client"], "local");
  auto bad = parse_body("application/json", "[{\"client\": ");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.error, "Invalid JSON document");
}

TEST(ApiHttp, YamlBody) {
  auto r = parse_body("application/x-yaml", "- client: local\n  tgt: '*'\n  arg: [1, yes]\n");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.data[0]["tgt"], "*");
  EXPECT_EQ(r.data[0]["arg"][1], true);  // YAML 1.1 as PyYAML
  EXPECT_EQ(parse_body("text/yaml", "a: 1").data["a"], 1);
  EXPECT_EQ(parse_body("application/x-yaml", "- client: [local\n  tgt: *").status, 400);
}

TEST(ApiHttp, UrlencodedBodyTypesArgsLikeTheCli) {
  auto r = parse_body("application/x-www-form-urlencoded",
                      "client=local&tgt=%2A&fun=test.arg&arg=1&arg=two&arg=%7Ba%3A+1%7D&kwarg=%7Bx%3A+2%7D&empty=");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.data["tgt"], "*");
  EXPECT_EQ(r.data["arg"], value::array({1, "two", value{{"a", 1}}}));
  EXPECT_EQ(r.data["kwarg"], (value{{"x", 2}}));
  EXPECT_FALSE(r.data.contains("empty"));  // parse_qsl drops blank values
  // a single arg is a list too
  EXPECT_EQ(parse_body("application/x-www-form-urlencoded", "arg=5").data["arg"], value::array({5}));
  // curl -d without -H: urlencoded
  EXPECT_EQ(parse_body("", "fun=test.ping").data["fun"], "test.ping");
}

TEST(ApiHttp, OtherBodies) {
  EXPECT_EQ(parse_body("text/plain", R"({"a": 1})").data["a"], 1);
  EXPECT_EQ(parse_body("text/plain", "hello").data, "hello");
  auto r = parse_body("application/xml", "<a/>");
  EXPECT_EQ(r.status, 415);
  EXPECT_EQ(r.error, "Content type not supported");
  EXPECT_TRUE(parse_body("application/xml", "").data.is_null());  // no body: nothing to refuse
}

TEST(ApiHttp, LowdataFmt) {
  EXPECT_EQ(lowstate_of(value{{"fun", "test.echo"}, {"arg", "x"}}),
            value::array({{{"fun", "test.echo"}, {"arg", value::array({"x"})}}}));
  value list = value::array({{{"fun", "f"}}});
  EXPECT_EQ(lowstate_of(list), list);
  EXPECT_EQ(lowstate_of("text"), "text");
  EXPECT_TRUE(lowstate_of(nullptr).is_null());
}

TEST(ApiHttp, QueryCookiesTokens) {
  auto q = parse_query("token=ab%20c&x=1+2&flag&blank=&token=2");
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0], (std::pair<std::string, std::string>{"token", "ab c"}));
  EXPECT_EQ(q[1].second, "1 2");
  EXPECT_EQ(url_decode("/a%2Fb+c", false), "/a/b+c");
  EXPECT_EQ(url_decode("%zz"), "%zz");
  EXPECT_EQ(cookie_value("a=1; session_id=abc; b=2", "session_id"), "abc");
  EXPECT_EQ(cookie_value("session_id=\"q\"", "session_id"), "q");
  EXPECT_FALSE(cookie_value("a=1", "session_id"));
  EXPECT_TRUE(is_hex_token("0123abcDEF"));
  EXPECT_TRUE(is_hex_token(" 0xff "));
  EXPECT_TRUE(is_hex_token("ab_cd"));
  EXPECT_FALSE(is_hex_token(""));
  EXPECT_FALSE(is_hex_token("xyz"));
  EXPECT_FALSE(is_hex_token("ab__cd"));
  EXPECT_FALSE(is_hex_token("../etc"));
}

TEST(ApiHttp, SseFraming) {
  EXPECT_EQ(sse_event("salt/job/1/ret/m1", value{{"id", "m1"}}),
            "tag: salt/job/1/ret/m1\ndata: {\"data\":{\"id\":\"m1\"},\"tag\":\"salt/job/1/ret/m1\"}\n\n");
  EXPECT_EQ(sse_retry, "retry: 400\n");
}

TEST(ApiHttp, SortedPermissions) {
  value p = value::array({"test.*", "@wheel", value{{"web*", value::array({"a"})}}, "test.*", ".*"});
  EXPECT_EQ(sorted_permissions(p), value::array({".*", "@wheel", "test.*", value{{"web*", value::array({"a"})}}}));
}

TEST(ApiHttp, Options) {
  EXPECT_FALSE(parse_api_options(value::object()).opts);  // no block, no API
  EXPECT_TRUE(parse_api_options(value::object()).error.empty());
  auto r = parse_api_options(value{{"rest_cherrypy", {{"port", 8001}, {"disable_ssl", true}, {"webhook_url", "hooks/"}}}});
  ASSERT_TRUE(r.opts) << r.error;
  EXPECT_EQ(r.opts->port, 8001);
  EXPECT_EQ(r.opts->host, "0.0.0.0");
  EXPECT_EQ(r.opts->webhook_url, "/hooks");
  EXPECT_EQ(r.opts->max_request_body_size, 1048576u);
  auto nossl = parse_api_options(value{{"rest_cherrypy", {{"port", 8000}}}});
  EXPECT_FALSE(nossl.opts);
  EXPECT_NE(nossl.error.find("ssl_crt"), std::string::npos);
  EXPECT_FALSE(parse_api_options(value{{"rest_cherrypy", {{"port", 70000}, {"disable_ssl", true}}}}).opts);
  EXPECT_FALSE(parse_api_options(value{{"rest_cherrypy", "on"}}).opts);
  auto tls = parse_api_options(value{{"rest_cherrypy", {{"ssl_crt", "/c"}, {"ssl_key", "/k"}, {"disable_ssl", "False"}}}});
  ASSERT_TRUE(tls.opts) << tls.error;
  EXPECT_FALSE(tls.opts->disable_ssl);
}

TEST(ApiHttp, ApiAcl) {
  value acl = {{"users", {{"alice", value::array({"10.0.0.1"})}, {"*", value::array({"127.0.0.1"})}}}};
  EXPECT_TRUE(api_acl_allows(nullptr, "x", "1.2.3.4"));
  EXPECT_TRUE(api_acl_allows(acl, "alice", "10.0.0.1"));
  EXPECT_FALSE(api_acl_allows(acl, "alice", "127.0.0.1"));
  EXPECT_TRUE(api_acl_allows(acl, "bob", "127.0.0.1"));
  EXPECT_FALSE(api_acl_allows(acl, "bob", "10.0.0.1"));
}

TEST(ApiLowstate, ReformatLowLikeSaltsRunnerClient) {
  value chunk = {{"client", "runner"}, {"fun", "jobs.lookup_jid"}, {"token", "ab"}, {"arg", value::array({"123", "missing=True"})},
                 {"kwarg", {{"ext_source", "x"}}}, {"display_progress", false}, {"timeout", 5}};
  auto c = reformat_low(chunk);
  EXPECT_EQ(c.args, value::array({"123"}));
  EXPECT_EQ(c.kwargs, (value{{"missing", true}, {"ext_source", "x"}, {"display_progress", false}}));
}

TEST(ApiLowstate, UnknownClientIs400) {
  lowstate_services s;
  lowstate_runner r(s);
  auto res = r.run(value{{"client", "bogus"}}, "u");
  EXPECT_EQ(res.status, 400);
  EXPECT_EQ(res.error, "Invalid client specified: 'bogus'");
  EXPECT_EQ(r.run(value{{"client", "ssh"}}, "u").status, 400);
  EXPECT_EQ(r.run(value::array(), "u").status, 400);
  EXPECT_EQ(r.run(value{{"client", "local"}, {"fun", "test.ping"}}, "u").status, 400);  // no tgt
}

TEST(ApiRoutes, TarballAsPythonTarfile) {
  auto t = make_tar({{"minion.pub", "PUB"}, {"minion.pem", "PRIV"}});
  EXPECT_EQ(t.size() % 10240, 0u);
  EXPECT_EQ(t.substr(0, 10), "minion.pub");
  EXPECT_EQ(t.substr(257, 5), "ustar");
  EXPECT_EQ(t.substr(512, 3), "PUB");
  EXPECT_EQ(t.substr(1024, 10), "minion.pem");
  // checksum: sum of the header with the checksum field as blanks
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(i >= 148 && i < 156 ? ' ' : t[i]);
  EXPECT_EQ(std::stoul(t.substr(148, 6), nullptr, 8), sum);
}
