// Unit tests for master/ipc_protocol: the bytes of every CLI IPC message are pinned (the
// msgpack hex below was made by an independent packer, gen_golden.py: a 30-line Python
// msgpack writer over the same maps in the same key order), every message round-trips,
// and malformed or unknown messages are refused with a reason.
#include <gtest/gtest.h>

#include "core/wire/msgpack.hpp"
#include "master/ipc_protocol.hpp"

namespace {

using sylvite::wire::value;
namespace ipc = sylvite::master::ipc;
namespace wire = sylvite::wire;

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) {
    h += d[c >> 4];
    h += d[c & 15];
  }
  return h;
}
std::string frame_hex(const value& v) { return hex(wire::pack(v, wire::packing::frame)); }

const std::string J = "20240101010101010101";

// ---- golden bytes ------------------------------------------------------------------------

TEST(IpcGolden, Ping) {
  // 81 map(1) a3 "cmd" a4 "ping"
  EXPECT_EQ(frame_hex(ipc::encode(ipc::ping{})), "81a3636d64a470696e67");
}

TEST(IpcGolden, PublishAsSaltSendsIt) {
  // salt '*' test.ping: cmd, tgt, tgt_type, fun, arg, ret, timeout, user, delimiter, wait
  ipc::publish p;
  p.tgt = "*";
  p.fun = "test.ping";
  p.timeout = 5;
  p.user = "root";
  p.wait = true;
  EXPECT_EQ(frame_hex(ipc::encode(p)),
            "8aa3636d64a77075626c697368a3746774a12aa87467745f74797065a4676c6f62a366756ea9746573742e70696e67a3617267"
            "90a3726574a0a774696d656f757405a475736572a4726f6f74a964656c696d69746572a13aa477616974c3");
}

TEST(IpcGolden, ReturnItem) {
  ipc::return_item r;
  r.id = "m1";
  r.jid = J;
  r.ret = true;
  EXPECT_EQ(frame_hex(ipc::encode(r)),
            "85a26964a26d31a36a6964b43230323430313031303130313031303130313031a672657475726ec3a7726574636f646500a773"
            "756363657373c3");
}

TEST(IpcGolden, PublishDone) {
  EXPECT_EQ(frame_hex(ipc::encode(ipc::publish_done{J, {"m2"}})),
            "83a4646f6e65c3a36a6964b43230323430313031303130313031303130313031a96e6f5f72657475726e91a26d32");
}

TEST(IpcGolden, KeyEventWithRotateFalse) {
  EXPECT_EQ(frame_hex(ipc::encode(ipc::key_event{"delete", {"m1"}, false})),
            "84a3636d64a96b65795f6576656e74a3616374a664656c657465a369647391a26d31a6726f74617465c2");
}

// Key names and order of every message (what the CLIs and the master built by hand).
TEST(IpcGolden, KeyOrder) {
  ipc::publish p;
  p.tgt = value::array({"a", "b"});
  p.tgt_type = "list";
  p.fun = "cmd.run";
  p.arg = value::array({"ls"});
  p.kwarg = value::object();
  p.ret = "";
  p.timeout = 3;
  p.user = "ops";
  p.delimiter = ":";
  p.jid = J;
  p.wait = false;
  p.ret_config = "cfg";
  p.ret_kwargs = value{{"a", 1}};
  p.metadata = value{{"m", 1}};
  p.module_executors = value::array({"direct_call"});
  p.executor_opts = value{{"x", 1}};
  p.start_event = true;
  p.kwargs = value{{"k", 1}};
  EXPECT_EQ(ipc::encode(p).dump(),
            R"({"cmd":"publish","tgt":["a","b"],"tgt_type":"list","fun":"cmd.run","arg":["ls"],"kwarg":{},"ret":"",)"
            R"("timeout":3,"user":"ops","delimiter":":","jid":"20240101010101010101","wait":false,"ret_config":"cfg",)"
            R"("ret_kwargs":{"a":1},"metadata":{"m":1},"module_executors":["direct_call"],"executor_opts":{"x":1},)"
            R"("start_event":true,"kwargs":{"k":1}})");
  EXPECT_EQ(ipc::encode(ipc::runner{"manage.up", value::array(), value::object(), std::nullopt, std::nullopt}).dump(),
            R"({"cmd":"runner","fun":"manage.up","arg":[],"kwarg":{}})");
  EXPECT_EQ(ipc::encode(ipc::runner{"jobs.lookup_jid", value::array({J}), value{{"a", 1}}, 9, "j"}).dump(),
            R"({"cmd":"runner","fun":"jobs.lookup_jid","arg":["20240101010101010101"],"kwarg":{"a":1},"timeout":9,"jid":"j"})");
  // salt-run's user (the runner job's User); decoded back.
  auto withu = ipc::encode(ipc::runner{"jobs.active", value::array(), value::object(), std::nullopt, std::nullopt, "alice"});
  EXPECT_EQ(withu.dump(), R"({"cmd":"runner","fun":"jobs.active","arg":[],"kwarg":{},"user":"alice"})");
  auto du = ipc::decode_request(withu);
  ASSERT_TRUE(du);
  EXPECT_EQ(std::get<ipc::runner>(*du).user, std::optional<std::string>("alice"));
  EXPECT_EQ(ipc::encode(ipc::key_event{"accept", {"a", "b"}, std::nullopt}).dump(),
            R"({"cmd":"key_event","act":"accept","ids":["a","b"]})");
  ipc::local_return l;
  l.id = "m1";
  l.jid = "req";
  l.load = value{{"id", "m1"}, {"fun", "test.ping"}, {"fun_args", value::array()}, {"return", true}, {"retcode", 0},
                 {"success", true}};
  EXPECT_EQ(ipc::encode(l).dump(),
            R"({"cmd":"local_return","id":"m1","fun":"test.ping","fun_args":[],"return":true,"retcode":0,)"
            R"("success":true,"jid":"req"})");
  EXPECT_EQ(ipc::encode(ipc::ping_reply{"master1"}).dump(), R"({"ok":true,"id":"master1"})");
  EXPECT_EQ(ipc::encode(ipc::publish_head{J, {"a"}, {"b"}}).dump(),
            R"({"jid":"20240101010101010101","minions":["a"],"missing":["b"]})");
  ipc::return_item r;
  r.id = "a";
  r.jid = J;
  r.ret = "x";
  r.retcode = 1;
  r.success = false;
  r.out = "txt";
  EXPECT_EQ(ipc::encode(r).dump(),
            R"({"id":"a","jid":"20240101010101010101","return":"x","retcode":1,"success":false,"out":"txt"})");
  EXPECT_EQ(ipc::encode(ipc::publish_done{J, {}}).dump(), R"({"done":true,"jid":"20240101010101010101","no_return":[]})");
  EXPECT_EQ(ipc::encode(ipc::error_reply{"boom"}).dump(), R"({"error":"boom"})");
  EXPECT_EQ(ipc::encode(ipc::runner_reply{value{{"a", 1}}, 2}).dump(), R"({"return":{"a":1},"retcode":2})");
  EXPECT_EQ(ipc::encode(ipc::key_event_reply{true}).dump(), R"({"ok":true,"rotated":true})");
  EXPECT_EQ(ipc::encode(ipc::local_return_reply{"req"}).dump(), R"({"ok":true,"jid":"req"})");
}

// ---- round trips -------------------------------------------------------------------------

TEST(IpcRoundTrip, Requests) {
  ipc::publish p;
  p.tgt = value::array({"a"});
  p.tgt_type = "list";
  p.fun = "test.arg";
  p.arg = value::array({1, value{{"__kwarg__", true}, {"x", 2}}});
  p.timeout = 7;
  p.user = "u";
  p.wait = true;
  p.metadata = value{{"m", 1}};
  p.start_event = true;
  for (const ipc::request& r : std::vector<ipc::request>{
           ipc::ping{}, p, ipc::runner{"manage.up", value::array({1}), value{{"k", "v"}}, 3, std::nullopt},
           ipc::key_event{"reject", {"m1", "m2"}, false}}) {
    const value body = ipc::encode(r);
    auto d = ipc::decode_request(body);
    ASSERT_TRUE(d) << d.error;
    EXPECT_EQ(d->index(), r.index());
    EXPECT_EQ(ipc::encode(*d), body);  // decode then encode gives the same bytes
  }
}

TEST(IpcRoundTrip, LocalReturnDefaultsJid) {
  value body = {{"cmd", "local_return"}, {"id", "m1"}, {"fun", "test.ping"}, {"return", true}};
  auto d = ipc::decode_request(body);
  ASSERT_TRUE(d) << d.error;
  const auto& l = std::get<ipc::local_return>(*d);
  EXPECT_EQ(l.id, "m1");
  EXPECT_EQ(l.jid, "req");
  EXPECT_EQ(l.load.dump(), R"({"id":"m1","fun":"test.ping","return":true,"jid":"req"})");
}

TEST(IpcRoundTrip, BinaryTextAccepted) {
  // Salt cannot tell str from bin: every text field takes both.
  value body = {{"cmd", "publish"}, {"tgt", wire::make_bin("web*")}, {"fun", wire::make_bin("test.ping")},
                {"user", wire::make_bin("root")}};
  auto d = ipc::decode_request(body);
  ASSERT_TRUE(d) << d.error;
  const auto& p = std::get<ipc::publish>(*d);
  EXPECT_EQ(p.tgt, value("web*"));
  EXPECT_EQ(p.fun, value("test.ping"));
  EXPECT_EQ(p.delimiter, ":");
  EXPECT_FALSE(p.wait);
  EXPECT_FALSE(p.timeout);
}

TEST(IpcRoundTrip, Replies) {
  auto h = ipc::decode_publish_push(ipc::encode(ipc::publish_head{J, {"a", "b"}, {"c"}}));
  ASSERT_TRUE(h) << h.error;
  const auto& head = std::get<ipc::publish_head>(*h);
  EXPECT_EQ(head.jid, J);
  EXPECT_EQ(head.minions, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(head.missing, (std::vector<std::string>{"c"}));

  ipc::return_item r = ipc::return_item_of("a", J, value{{"return", "ok"}, {"retcode", 3}, {"out", "txt"}, {"jid", J}});
  auto ri = ipc::decode_publish_push(ipc::encode(r));
  ASSERT_TRUE(ri) << ri.error;
  const auto& item = std::get<ipc::return_item>(*ri);
  EXPECT_EQ(item.id, "a");
  EXPECT_EQ(item.ret, value("ok"));
  EXPECT_EQ(ipc::retcode_of(item), 3);
  EXPECT_EQ(item.success, value(true));
  EXPECT_EQ(item.out, std::optional<std::string>("txt"));

  auto f = ipc::decode_publish_final(ipc::encode(ipc::publish_done{J, {"x"}}));
  ASSERT_TRUE(f);
  EXPECT_EQ(std::get<ipc::publish_done>(*f).no_return, std::vector<std::string>{"x"});
  auto e = ipc::decode_publish_final(ipc::encode(ipc::error_reply{"No minions matched the target."}));
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<ipc::error_reply>(*e).error, "No minions matched the target.");

  auto rr = ipc::decode_runner_reply(ipc::encode(ipc::runner_reply{value::array({1}), 4}));
  ASSERT_TRUE(rr);
  EXPECT_EQ(std::get<ipc::runner_reply>(*rr).retcode, 4);
  auto rr0 = ipc::decode_runner_reply(value::object());  // older masters: both optional
  ASSERT_TRUE(rr0);
  EXPECT_EQ(std::get<ipc::runner_reply>(*rr0).ret, value(nullptr));

  auto k = ipc::decode_key_event_reply(ipc::encode(ipc::key_event_reply{true}));
  ASSERT_TRUE(k);
  EXPECT_TRUE(std::get<ipc::key_event_reply>(*k).rotated);
  auto p = ipc::decode_ping_reply(ipc::encode(ipc::ping_reply{"m"}));
  ASSERT_TRUE(p);
  EXPECT_EQ(std::get<ipc::ping_reply>(*p).id, "m");
  auto a = ipc::decode_async_publish_reply(ipc::encode(ipc::publish_head{J, {}, {}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(std::get<ipc::publish_head>(*a).jid, J);
  auto lr = ipc::decode_local_return_reply(ipc::encode(ipc::local_return_reply{"req"}));
  ASSERT_TRUE(lr);
  EXPECT_EQ(std::get<ipc::local_return_reply>(*lr).jid, "req");
}

TEST(IpcRoundTrip, RetcodeOfMultiFunction) {
  ipc::return_item r;
  r.retcode = value{{"test.ping", 0}, {"cmd.run", 2}};
  EXPECT_EQ(ipc::retcode_of(r), 2);
  r.retcode = value::array({1, 5});
  EXPECT_EQ(ipc::retcode_of(r), 5);
  r.retcode = "x";
  EXPECT_EQ(ipc::retcode_of(r), 0);
}

TEST(IpcRoundTrip, ReturnItemOfDefaults) {
  auto r = ipc::return_item_of("a", J, value::object());
  EXPECT_EQ(ipc::encode(r).dump(), R"({"id":"a","jid":"20240101010101010101","return":null,"retcode":0,"success":true})");
  // a non-integer retcode is 0 on the wire (as before)
  auto m = ipc::return_item_of("a", J, value{{"retcode", value{{"f", 1}}}});
  EXPECT_EQ(m.retcode, value(0));
}

// ---- refusals ----------------------------------------------------------------------------

void expect_refused(const value& body, const std::string& why) {
  auto d = ipc::decode_request(body);
  EXPECT_FALSE(d) << body.dump();
  EXPECT_EQ(d.error, why) << body.dump();
}

TEST(IpcRefuse, UnknownAndMalformed) {
  expect_refused(value::array(), "bad request: the body is not a map");
  expect_refused(value("ping"), "bad request: the body is not a map");
  expect_refused(value::object(), "unknown command ''");
  expect_refused(value{{"cmd", "wheel"}}, "unknown command 'wheel'");
  expect_refused(value{{"cmd", 3}}, "unknown command ''");
  expect_refused(value{{"cmd", "publish"}, {"fun", "test.ping"}}, "publish: tgt missing");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}}, "publish: fun missing");
  expect_refused(value{{"cmd", "publish"}, {"tgt", 5}, {"fun", "f"}}, "publish: tgt must be a string or a list of ids");
  expect_refused(value{{"cmd", "publish"}, {"tgt", value::array({1})}, {"fun", "f"}},
                 "publish: tgt must be a string or a list of ids");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", value::object()}},
                 "publish: fun must be a string or a list");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"arg", "x"}}, "publish: arg must be a list");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"kwarg", value::array()}},
                 "publish: kwarg must be a map");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"timeout", "5"}},
                 "publish: timeout must be an integer");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"wait", 1}}, "publish: wait must be true or false");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"user", 1}}, "publish: user must be a string");
  expect_refused(value{{"cmd", "publish"}, {"tgt", "*"}, {"fun", "f"}, {"kwargs", 1}}, "publish: kwargs must be a map");
  expect_refused(value{{"cmd", "runner"}}, "runner: fun missing");
  expect_refused(value{{"cmd", "runner"}, {"fun", ""}}, "runner: fun missing");
  expect_refused(value{{"cmd", "runner"}, {"fun", 1}}, "runner: fun must be a string");
  expect_refused(value{{"cmd", "runner"}, {"fun", "a.b"}, {"arg", value::object()}}, "runner: arg must be a list");
  expect_refused(value{{"cmd", "key_event"}, {"act", "nuke"}, {"ids", value::array()}},
                 "key_event: act must be accept, reject or delete");
  expect_refused(value{{"cmd", "key_event"}, {"act", "accept"}}, "key_event: ids missing");
  expect_refused(value{{"cmd", "key_event"}, {"act", "accept"}, {"ids", "m1"}}, "key_event: ids must be a list");
  expect_refused(value{{"cmd", "key_event"}, {"act", "accept"}, {"ids", value::array({1})}},
                 "key_event: ids must hold strings only");
  expect_refused(value{{"cmd", "key_event"}, {"act", "accept"}, {"ids", value::array()}, {"rotate", "no"}},
                 "key_event: rotate must be true or false");
  expect_refused(value{{"cmd", "local_return"}, {"return", 1}}, "local_return needs a valid id and a return");
  expect_refused(value{{"cmd", "local_return"}, {"id", "m"}}, "local_return needs a valid id and a return");
}

TEST(IpcRefuse, Replies) {
  EXPECT_FALSE(ipc::decode_publish_push(value::array()));
  EXPECT_FALSE(ipc::decode_publish_push(value{{"id", 1}}));
  EXPECT_FALSE(ipc::decode_publish_push(value{{"minions", value::array()}}));  // no jid, no id
  EXPECT_FALSE(ipc::decode_publish_push(value{{"jid", J}, {"minions", "a"}}));
  EXPECT_FALSE(ipc::decode_publish_final(value{{"done", true}, {"no_return", "a"}}));
  EXPECT_FALSE(ipc::decode_runner_reply(value{{"return", 1}, {"retcode", "x"}}));
  EXPECT_FALSE(ipc::decode_key_event_reply(value("ok")));
  EXPECT_FALSE(ipc::decode_ping_reply(value{{"id", 3}}));
  // an error reply whose text is not a string still decodes as an error (shown as JSON)
  auto e = ipc::decode_runner_reply(value{{"error", value::array({1})}});
  ASSERT_TRUE(e);
  EXPECT_EQ(std::get<ipc::error_reply>(*e).error, "[1]");
}

}  // namespace
