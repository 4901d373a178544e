// master_core request port: auth through handle_request, envelope refusals, AES
// commands (_pillar send_private, _return first-wins, unknown commands), hellos,
// key events and the maintenance tick.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "cluster/cluster_pki.hpp"
#include "cluster/unsettled_keys.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "core/config/config.hpp"
#include "core/render/render.hpp"
#include "core_fixture.hpp"
#include "test_util.hpp"

namespace sylvite::test {
namespace {

namespace fs = std::filesystem;
using wire::value;

struct CoreFixture : master_core_test {};

TEST_F(CoreFixture, auth_then_aes_request_roundtrip) {
  login(m1);
  EXPECT_FALSE(m1.session.empty());
  EXPECT_TRUE(fs::exists(core->cfg().cachedir / "sessions" / "m1"));
  EXPECT_EQ(call(m1, value{{"cmd", "_mine"}, {"data", value::object()}}), value(true));
  EXPECT_EQ(call(m1, value{{"cmd", "_master_tops"}}), value::object());
  EXPECT_EQ(call(m1, value{{"cmd", "_no_such_command"}}), value::object());  // Salt: {}
}

TEST_F(CoreFixture, session_key_is_stable_across_auths) {
  login(m1);
  auto s1 = m1.session;
  login(m1);
  EXPECT_EQ(s1, m1.session);
}

TEST_F(CoreFixture, v2_auth_refused_by_default) {
  accept_key(*core, m1);
  auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce), 2), "test");
  EXPECT_EQ(reply, value("bad load"));
}

TEST_F(CoreFixture, body_refusals) {
  EXPECT_EQ(core->handle_request(value("junk"), "t"), value("bad load"));
  EXPECT_EQ(core->handle_request(value{{"enc", "aes"}}, "t"), value("bad load"));
  EXPECT_EQ(core->handle_request(value{{"enc", "clear"}, {"load", 5}, {"version", 3}}, "t"),
            value("payload and load must be a dict"));
  EXPECT_EQ(core->handle_request(value{{"enc", "clear"}, {"load", value{{"id", 5}}}, {"version", 3}}, "t"),
            value("bad load: id 5 is not a string"));
  EXPECT_EQ(core->handle_request(value{{"enc", "clear"}, {"load", value{{"id", std::string("a\0b", 3)}}},
                                       {"version", 3}},
                                 "t"),
            value("bad load: id contains a null byte"));
}

// Issue 14 item 8: request_server_ttl defaults to 300 s and refuses a ts that is too old
// or too far in the future (a replayed request, or a minion clock that is off).
TEST_F(CoreFixture, request_server_ttl_refuses_old_and_future_ts) {
  EXPECT_EQ(core->cfg().request_server_ttl, 300);
  login(m1);
  auto body_with_ts = [&](std::int64_t ts) {
    value load{{"cmd", "_mine"}, {"data", value::object()}, {"nonce", kNonce}, {"ts", ts},
               {"tok", wire::make_bin(m1.tok())}, {"id", "m1"}};
    auto c = crypto::crypticle::from_key_string(m1.session);
    return value{{"enc", "aes"}, {"load", wire::make_bin(c->dumps(load))}, {"version", 3}, {"id", "m1"}};
  };
  // A margin of 10 s past the ttl on each side: the master reads its clock after this
  // test does, so a second can tick in between (a load-dependent race at exactly 301).
  const auto now = static_cast<std::int64_t>(std::time(nullptr));
  EXPECT_EQ(core->handle_request(body_with_ts(now - 310), "t"), value("bad load"));
  EXPECT_EQ(core->handle_request(body_with_ts(now + 310), "t"), value("bad load"));
  auto ok = core->handle_request(body_with_ts(now - 5), "t");
  auto r = m1.open_reply(ok, kNonce, m1.session);
  ASSERT_TRUE(r) << ok.dump();
  EXPECT_EQ(*r, value(true));
}

TEST_F(CoreFixture, envelope_refusals) {
  login(m1);
  value ok_load{{"cmd", "_mine"}, {"data", value::object()}};
  // bad version
  EXPECT_EQ(core->handle_request(m1.aes_body(ok_load, kNonce, m1.session, 2), "t"), value("bad load"));
  // no tok
  EXPECT_EQ(core->handle_request(m1.aes_body(ok_load, kNonce, m1.session, 3, false), "t"), value("bad load"));
  // bad tok (another key's token)
  {
    auto b = value(ok_load);
    fake_minion imposter{"m1", cached_key(2)};
    b["tok"] = wire::make_bin(imposter.tok());
    auto body = m1.aes_body(b, kNonce, m1.session, 3, false);
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
  }
  // envelope id != load id
  {
    auto body = m1.aes_body(value{{"cmd", "_mine"}, {"id", "m2"}}, kNonce, m1.session);
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
  }
  // id with '/'
  {
    auto body = m1.aes_body(ok_load, kNonce, m1.session);
    body["id"] = "../m1";
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
  }
  // garbage ciphertext
  {
    auto body = m1.aes_body(ok_load, kNonce, m1.session);
    body["load"] = wire::make_bin(std::string(200, 'x'));
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
  }
  // encrypted with another key (e.g. a session key regenerated since)
  {
    auto body = m1.aes_body(ok_load, kNonce, crypto::crypticle::generate_key_string());
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
  }
  // unknown minion: no session file
  {
    fake_minion m9{"m9", cached_key(2)};
    auto body = m9.aes_body(ok_load, kNonce, m1.session);
    EXPECT_EQ(core->handle_request(body, "t"), value("bad load"));
    EXPECT_FALSE(fs::exists(core->cfg().cachedir / "sessions" / "m9"));
  }
  // non-map load inside the ciphertext
  {
    auto c = crypto::crypticle::from_key_string(m1.session);
    value body{{"enc", "aes"}, {"load", wire::make_bin(c->dumps(value::array({1, 2})))}, {"version", 3}, {"id", "m1"}};
    EXPECT_EQ(core->handle_request(body, "t"), value("payload and load must be a dict"));
  }
  EXPECT_GE(core->counters().refused.load(), 8u);
  // still serving
  EXPECT_EQ(call(m1, ok_load), value(true));
}

TEST_F(CoreFixture, pillar_is_sent_private_and_cached) {
  ASSERT_TRUE(util::write_file_atomic(tmp.path / "srv/pillar/top.sls", "base:\n  '*':\n    - common\n"));
  ASSERT_TRUE(util::write_file_atomic(tmp.path / "srv/pillar/common.sls", "colour: blue\n"));
  login(m1);
  value load{{"cmd", "_pillar"}, {"grains", value{{"os", "Debian"}}}, {"saltenv", nullptr},
             {"pillarenv", nullptr}, {"pillar_override", value::object()},
             {"extra_minion_data", value::object()}, {"ver", "2"}};
  auto reply = core->handle_request(m1.aes_body(load, kNonce, m1.session), "t");
  ASSERT_TRUE(reply.is_object()) << reply.dump();
  auto key = crypto::oaep_decrypt(m1.key, *wire::as_bytes(reply["key"]));
  ASSERT_TRUE(key);
  auto pc = crypto::crypticle::from_key_string(*key);
  ASSERT_TRUE(pc);
  auto signed_msg = pc->loads(*wire::as_bytes(reply["pillar"]));
  ASSERT_TRUE(signed_msg);
  auto data = wire::as_bytes((*signed_msg)["data"]);
  auto sig = wire::as_bytes((*signed_msg)["sig"]);
  ASSERT_TRUE(data && sig);
  EXPECT_TRUE(crypto::verify(core->mkeys()->pub(), *data, *sig));
  auto d = wire::unpack(*data);
  ASSERT_TRUE(d);
  EXPECT_EQ(*wire::as_bytes((*d)["key"]), *wire::as_bytes(reply["key"]));
  EXPECT_EQ((*d)["nonce"], kNonce);
  EXPECT_EQ((*d)["pillar"]["colour"], "blue");
  auto cached = core->minion_data().get("m1");
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->grains["os"], "Debian");
  EXPECT_EQ(cached->grains["id"], "m1");
  EXPECT_TRUE(fs::exists(core->cfg().cachedir / "minions" / "m1" / "data.p"));
}

TEST_F(CoreFixture, pillar_without_grains_is_empty) {
  login(m1);
  auto reply = core->handle_request(m1.aes_body(value{{"cmd", "_pillar"}, {"ver", "2"}}, kNonce, m1.session), "t");
  auto key = crypto::oaep_decrypt(m1.key, *wire::as_bytes(reply["key"]));
  auto pc = crypto::crypticle::from_key_string(*key);
  auto signed_msg = pc->loads(*wire::as_bytes(reply["pillar"]));
  auto d = wire::unpack(*wire::as_bytes((*signed_msg)["data"]));
  EXPECT_EQ((*d)["pillar"], value::object());
}

TEST_F(CoreFixture, return_is_stored_first_wins_and_notifies) {
  login(m1);
  std::vector<std::string> tags;
  core->hub().subscribe_jid("20250101000000000001",
                            [&](const std::string& tag, const value&) { tags.push_back(tag); });
  value ret{{"cmd", "_return"}, {"success", true}, {"return", "first"}, {"retcode", 0},
            {"jid", "20250101000000000001"}, {"fun", "test.echo"}, {"fun_args", value::array({"first"})}};
  EXPECT_EQ(call(m1, ret), value(nullptr));
  ret["return"] = "second";
  EXPECT_EQ(call(m1, ret), value(nullptr));
  auto rets = core->jobs().get_returns("20250101000000000001");
  EXPECT_EQ(rets["m1"]["return"], "first");
  EXPECT_EQ(tags, std::vector<std::string>{"salt/job/20250101000000000001/ret/m1"});
}

TEST_F(CoreFixture, return_with_req_jid_gets_a_new_jid) {
  login(m1);
  std::string seen;
  core->hub().subscribe_all([&](const std::string& tag, const value&) {
    if (tag.rfind("salt/job/", 0) == 0) seen = tag;
  });
  value ret{{"cmd", "_return"}, {"success", true}, {"return", true}, {"retcode", 0},
            {"jid", "req"}, {"fun", "test.ping"}, {"fun_args", value::array()}};
  call(m1, ret);
  ASSERT_FALSE(seen.empty());
  auto jid = seen.substr(9, 20);
  auto load = core->jobs().get_load(jid);
  ASSERT_TRUE(load);
  EXPECT_EQ((*load)["tgt"], "m1");
  EXPECT_EQ((*load)["tgt_type"], "glob");
}

TEST_F(CoreFixture, minion_event_is_fired) {
  login(m1);
  std::vector<std::string> tags;
  core->hub().subscribe_all([&](const std::string& tag, const value&) { tags.push_back(tag); });
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"tag", "salt/minion/m1/start"}, {"data", "hi"},
                           {"pretag", nullptr}}),
            value(nullptr));
  EXPECT_EQ(tags, std::vector<std::string>{"salt/minion/m1/start"});
}

TEST_F(CoreFixture, minion_event_master_tags_are_filtered) {
  login(m1);
  std::vector<std::string> tags;
  core->hub().subscribe_all([&](const std::string& tag, const value&) { tags.push_back(tag); });
  value events = value::array();
  for (const char* t : {"salt/job/20260101000000000000/new", "salt/key", "salt/run/1/new", "salt/cluster/peer/x",
                        "salt/job/1/publish", "salt/wheel/1/return", "custom/m1/ok"}) {
    events.push_back(value{{"tag", t}, {"data", value::object()}});
  }
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"events", events}}), value(nullptr));
  EXPECT_EQ(call(m1, value{{"cmd", "_minion_event"}, {"tag", "salt/job/1/return"}, {"data", "x"}}), value(nullptr));
  EXPECT_EQ(tags, std::vector<std::string>{"custom/m1/ok"});
}

TEST(MinionTag, SaltBlacklist) {
  EXPECT_FALSE(master::valid_minion_tag("salt/job/20260101000000000000/new"));
  EXPECT_FALSE(master::valid_minion_tag("salt/key"));
  EXPECT_FALSE(master::valid_minion_tag("salt/cloud/x/created"));
  EXPECT_TRUE(master::valid_minion_tag("salt/job/20260101000000000000/ret/m1"));
  EXPECT_TRUE(master::valid_minion_tag("salt/minion/m1/start"));
  EXPECT_TRUE(master::valid_minion_tag("salt/keyx"));
}

TEST_F(CoreFixture, master_opts_has_mandatory_keys) {
  login(m1);
  auto r = call(m1, value{{"cmd", "_master_opts"}});
  EXPECT_TRUE(r.contains("file_roots"));
  EXPECT_TRUE(r.contains("renderer"));
  EXPECT_TRUE(r.contains("state_top"));
}

TEST_F(CoreFixture, hello_identifies_with_current_or_recent_key) {
  login(m1);
  auto id = core->handle_hello(m1.hello_body(m1.aes), "t");
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, "m1");
  auto old = m1.aes;
  ASSERT_TRUE(core->rotate_aes("test"));
  EXPECT_TRUE(core->handle_hello(m1.hello_body(old), "t"));  // previous key, within grace
  EXPECT_FALSE(core->handle_hello(m1.hello_body(crypto::crypticle::generate_key_string()), "t"));
  fake_minion imposter{"m1", cached_key(2)};
  EXPECT_FALSE(core->handle_hello(imposter.hello_body(core->aes().current()->crypt.key_string()), "t"));
  EXPECT_FALSE(core->handle_hello(value("x"), "t"));
}

// The io-thread form never reads a key file: an accepted key not in memory is checked by
// the offloaded task, which reports the id; a key in memory decides at once.
TEST_F(CoreFixture, hello_reads_an_uncached_key_off_the_io_thread) {
  accept_key(*core, m1);  // on disk, never read: not in memory
  const auto aes = core->aes().current()->crypt.key_string();
  std::vector<std::function<void()>> offloaded;
  std::vector<std::string> identified;
  auto offload = [&](std::function<void()> f) {
    offloaded.push_back(std::move(f));
    return true;
  };
  auto on_id = [&](const std::string& id) { identified.push_back(id); };
  EXPECT_FALSE(core->handle_hello(m1.hello_body(aes), "t", offload, on_id));
  ASSERT_EQ(offloaded.size(), 1u);
  EXPECT_TRUE(identified.empty());
  offloaded[0]();  // the worker thread: reads the key, verifies, reports
  EXPECT_EQ(identified, std::vector<std::string>{"m1"});

  // Now in memory (the watch on minions/ keeps it valid): decided at once, nothing offloaded.
  if (core->accepted().watching()) {
    auto id = core->handle_hello(m1.hello_body(aes), "t", offload, on_id);
    ASSERT_TRUE(id);
    EXPECT_EQ(*id, "m1");
    EXPECT_EQ(offloaded.size(), 1u);
    fake_minion imposter{"m1", cached_key(2)};  // wrong key: refused at once too
    EXPECT_FALSE(core->handle_hello(imposter.hello_body(aes), "t", offload, on_id));
    EXPECT_EQ(offloaded.size(), 1u);
  }

  // An imposter whose key must be read: offloaded, refused there, never reported.
  fake_minion m9{"m9", cached_key(2)};
  fake_minion m9_real{"m9", cached_key(3)};
  accept_key(*core, m9_real);
  EXPECT_FALSE(core->handle_hello(m9.hello_body(aes), "t", offload, on_id));
  ASSERT_EQ(offloaded.size(), 2u);
  offloaded[1]();
  EXPECT_EQ(identified, std::vector<std::string>{"m1"});

  // A full worker queue: refused (the minion's next hello is checked again).
  fake_minion m8{"m8", cached_key(3)};
  accept_key(*core, m8);
  EXPECT_FALSE(core->handle_hello(m8.hello_body(aes), "t", [](std::function<void()>) { return false; }, on_id));
  EXPECT_EQ(identified, std::vector<std::string>{"m1"});
}

// A master whose cluster_pki_dir is a local copy (made by a join) mirrors the minion keys
// from key snapshots. A snapshot asked for before a delete may still hold the deleted key:
// it must not bring it back; one asked for after the delete may.
struct recording_peers final : master::peer_sink {
  std::vector<std::tuple<std::string, std::string, value>> sent;  // to ("" = all), type, body
  void broadcast(const std::string& type, const value& body) override { sent.emplace_back("", type, body); }
  bool send(const std::string& to, const std::string& type, const value& body) override {
    sent.emplace_back(to, type, body);
    return true;
  }
  value status() const override { return value::array(); }
  void drop_peer(const std::string&) override {}
};

struct LocalCopyFixture : CoreFixture {
  recording_peers peers;
  void customize(config::master_config& c) override {
    c.cluster_id = "lc";
    c.cluster_pki_dir = tmp.path / "cluster";
    fs::create_directories(*c.cluster_pki_dir);
    ASSERT_TRUE(util::write_file_atomic(*c.cluster_pki_dir / ".sylvite-local-copy", "test\n", 0600));
  }
  void SetUp() override {
    CoreFixture::SetUp();
    ASSERT_TRUE(core->local_copy());
    core->set_peer_sink(&peers);
  }
  void TearDown() override { core->set_peer_sink(nullptr); }
  value snapshot(std::initializer_list<std::pair<std::string, int>> accepted, const std::string& for_id = "",
                 std::int64_t seq = 0) {
    value acc = value::object();
    for (const auto& [id, k] : accepted) acc[id] = cached_key(k).public_pem();
    value snap{{"accepted", acc}, {"rejected", value::object()}};
    if (!for_id.empty()) snap["for"] = for_id;
    if (seq) snap["seq"] = seq;
    return snap;
  }
  bool has(const std::string& id) { return core->key_store().exists(pki::key_state::accepted, id); }
  std::vector<value> sent_key_events() {
    std::vector<value> out;
    for (const auto& [to, type, body] : peers.sent)
      if (type == "key") out.push_back(body);
    return out;
  }
  // Exactly one key event was sent: act for id, from a local copy, with the key pem.
  void expect_one_key_event(const std::string& act, const std::string& id, const std::string& pem) {
    auto ev = sent_key_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(wire::get_text(ev[0], "act").value_or(""), act);
    EXPECT_TRUE(wire::get_bool(ev[0], "local").value_or(false));
    const value* pubs = wire::find(ev[0], "pubs");
    ASSERT_TRUE(pubs && pubs->contains(id));
    EXPECT_EQ((*pubs)[id].get<std::string>(), pem);
  }
  std::int64_t ask() {  // a key-sync request; returns its seq
    peers.sent.clear();
    core->on_peer_up("p1");
    EXPECT_EQ(peers.sent.size(), 1u);
    const auto& [to, type, body] = peers.sent.at(0);
    EXPECT_EQ(to, "p1");
    EXPECT_EQ(type, "key-sync");
    EXPECT_EQ(wire::get_text(body, "for").value_or(""), core->cfg().id);
    return wire::get_int(body, "seq").value_or(-1);
  }
};

TEST_F(LocalCopyFixture, stale_snapshot_does_not_restore_a_deleted_key) {
  const auto me = core->cfg().id;
  const auto s1 = ask();
  EXPECT_EQ(s1, 1);
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}, {"m2", 2}}, me, s1));
  EXPECT_TRUE(has("m1"));
  EXPECT_TRUE(has("m2"));

  core->handle_peer("p1", "key", value{{"act", "delete"}, {"ids", value::array({"m1"})}});
  EXPECT_FALSE(has("m1"));
  // The answer to request 1 built before the delete: m1 stays deleted.
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}, {"m2", 2}}, me, s1));
  EXPECT_FALSE(has("m1"));
  // A snapshot for another master, or without a request number: not trusted either.
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}}, "other", 99));
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}}));
  EXPECT_FALSE(has("m1"));
  // Asked after the delete: the share's word (re-accepted there meanwhile) stands.
  const auto s2 = ask();
  EXPECT_EQ(s2, 2);
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}}, me, s2));
  EXPECT_TRUE(has("m1"));

  // A key accepted again by an event is not held back by an earlier delete.
  core->handle_peer("p1", "key", value{{"act", "delete"}, {"ids", value::array({"m2"})}});
  EXPECT_FALSE(has("m2"));
  core->handle_peer("p1", "key", value{{"act", "accept"}, {"ids", value::array({"m2"})},
                                      {"pubs", value{{"m2", cached_key(2).public_pem()}}}});
  EXPECT_TRUE(has("m2"));
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m2"));  // lost locally
  core->handle_peer("p1", "keys", snapshot({{"m2", 2}}, me, s2));
  EXPECT_TRUE(has("m2"));
}

// handle_peer decodes first: an unknown type or a malformed message is refused (logged),
// never half-applied, never thrown.
TEST_F(LocalCopyFixture, malformed_peer_messages_are_refused) {
  const auto me = core->cfg().id;
  const auto s1 = ask();
  core->handle_peer("p1", "keys", snapshot({{"m1", 1}}, me, s1));
  ASSERT_TRUE(has("m1"));
  core->handle_peer("p1", "bogus", value::object());
  core->handle_peer("p1", "key", value{{"act", "delete"}, {"ids", "m1"}});          // ids not a list
  core->handle_peer("p1", "key", value{{"ids", value::array({"m1"})}});             // no act
  core->handle_peer("p1", "key", value::array({"delete", value::array({"m1"})}));  // not a map
  EXPECT_TRUE(has("m1"));
  peers.sent.clear();
  core->handle_peer("j1", "key-sync", value{{"for", 7}});  // for is not text: no answer
  core->handle_peer("p1", "return", value{{"jid", "j"}, {"id", "../m1"}, {"load", 1}});
  core->handle_peer("p1", "publish", value{{"jid", "j"}});
  EXPECT_TRUE(peers.sent.empty());
  // A key event whose list holds an invalid id applies to the valid ones (as before).
  core->handle_peer("p1", "key", value{{"act", "delete"}, {"ids", value::array({"../x", "m1"})}});
  EXPECT_FALSE(has("m1"));
}

// A complete snapshot from a master on the share removes, on a local copy, an accepted
// key the share has not (its delete or reject was lost to this master: a full peer
// queue, or this master was down); a fresh file or an accept made here is kept.
struct ShareSnapshotFixture : LocalCopyFixture {
  value share_snap(std::initializer_list<std::pair<std::string, int>> accepted,
                   std::initializer_list<std::pair<std::string, int>> rejected, std::int64_t seq) {
    value snap = snapshot(accepted, core->cfg().id, seq);
    for (const auto& [id, k] : rejected) snap["rejected"][id] = cached_key(k).public_pem();
    snap["share"] = true;
    return snap;
  }
  void backdate(const std::string& id, pki::key_state st = pki::key_state::accepted) {
    fs::last_write_time(core->key_store().path(st, id), fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  // The master stops and starts again on the same directories (its memory is gone).
  void restart() {
    if (core) core->set_peer_sink(nullptr);
    core.reset();
    SetUp();
  }
  fs::path unsettled_file() { return *core->cfg().cluster_pki_dir / cluster::k_unsettled_keys_file; }
  // The key events sent, as act -> ids.
  std::map<std::string, std::vector<std::string>> told() {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& body : sent_key_events())
      for (const auto& id : *wire::find(body, "ids"))
        out[std::string(wire::get_text(body, "act").value_or(""))].push_back(id.get<std::string>());
    return out;
  }
  std::size_t rotations_asked() {
    std::size_t n = 0;
    for (const auto& [to, type, body] : peers.sent) n += type == "aes-rotate";
    return n;
  }
};

TEST_F(ShareSnapshotFixture, keys_missing_on_the_share_are_removed) {
  const auto s1 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}, {"m2", 2}, {"m3", 3}}, {}, s1));
  ASSERT_TRUE(has("m1") && has("m2") && has("m3"));
  for (auto id : {"m1", "m2", "m3"}) backdate(id);

  // Deleted on the share (m1), rejected there (m2), while this master did not hear it.
  const auto s2 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m3", 3}}, {{"m2", 2}}, s2));
  EXPECT_FALSE(has("m1"));
  EXPECT_FALSE(has("m2"));
  EXPECT_TRUE(core->key_store().exists(pki::key_state::rejected, "m2"));
  EXPECT_TRUE(has("m3"));
  EXPECT_NE(std::find(sink.disconnected.begin(), sink.disconnected.end(), "m1"), sink.disconnected.end());
  EXPECT_NE(std::find(sink.disconnected.begin(), sink.disconnected.end(), "m2"), sink.disconnected.end());

  // Not from the share (a local-copy peer, an older sender), or not our request: no removal.
  const auto s3 = ask();
  value other = share_snap({}, {}, s3);
  other.erase("share");
  core->handle_peer("p1", "keys", other);
  core->handle_peer("p1", "keys", share_snap({}, {}, 0));
  value theirs = share_snap({}, {}, s3);
  theirs["for"] = "other";
  core->handle_peer("p1", "keys", theirs);
  EXPECT_TRUE(has("m3"));

  // A key file written lately (salt-key here writes it before the daemon hears of it) is
  // kept; the same file older than the grace is removed.
  ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, "m4", cached_key(4).public_pem()));
  const auto s4 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m3", 3}}, {}, s4));
  EXPECT_TRUE(has("m4"));
  backdate("m4");
  const auto s5 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m3", 3}}, {}, s5));
  EXPECT_FALSE(has("m4"));
  EXPECT_TRUE(has("m3"));

  // Another key under the same id on the share (the minion's key replaced there): the
  // share's key, and the sessions made with the old one end.
  sink.disconnected.clear();
  const auto s6 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m3", 6}}, {}, s6));
  EXPECT_EQ(core->key_store().read(pki::key_state::accepted, "m3").value_or(""), cached_key(6).public_pem());
  EXPECT_EQ(sink.disconnected, std::vector<std::string>{"m3"});
}

// An answer to a request older than the last 16 is not used to remove keys.
TEST_F(ShareSnapshotFixture, answers_to_forgotten_requests_remove_nothing) {
  const auto s1 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}}, {}, s1));
  backdate("m1");
  const auto old = ask();
  for (int i = 0; i < 16; ++i) (void)ask();
  core->handle_peer("p1", "keys", share_snap({}, {}, old));
  EXPECT_TRUE(has("m1"));
}

// salt-key -a on a local copy: the peers are told with the key; until a snapshot from the
// share has it, it is kept and told again; once settled, the share's word removes it.
TEST_F(ShareSnapshotFixture, accept_made_here_is_told_again_until_the_share_has_it) {
  (void)ask();
  peers.sent.clear();
  ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, "m5", cached_key(5).public_pem()));
  core->key_event("accept", {"m5"});
  auto ev = sent_key_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(wire::get_text(ev[0], "act").value_or(""), "accept");
  EXPECT_TRUE(wire::get_bool(ev[0], "local").value_or(false));
  ASSERT_TRUE(wire::find(ev[0], "pubs") && wire::find(ev[0], "pubs")->contains("m5"));
  backdate("m5");

  // The answer to a request sent before the accept: kept, nothing sent.
  // (ask() clears peers.sent.)
  const auto s2 = ask();
  core->handle_peer("p1", "keys", share_snap({}, {}, s2));  // the accept never reached the share
  EXPECT_TRUE(has("m5"));
  ev = sent_key_events();
  ASSERT_EQ(ev.size(), 1u);  // told again
  EXPECT_EQ(wire::get_text(ev[0], "act").value_or(""), "accept");
  ASSERT_TRUE(wire::find(ev[0], "pubs") && wire::find(ev[0], "pubs")->contains("m5"));

  const auto s3 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m5", 5}}, {}, s3));  // the share has it: settled
  EXPECT_TRUE(has("m5"));
  EXPECT_TRUE(sent_key_events().empty());
  const auto s4 = ask();
  core->handle_peer("p1", "keys", share_snap({}, {}, s4));  // deleted there later, event lost
  EXPECT_FALSE(has("m5"));
  EXPECT_TRUE(sent_key_events().empty());
}

// salt-key -d / -r on a local copy whose key event never reached the share: the share's
// answers do not bring the key back; the revoke is sent again until the share no longer
// has the key accepted; after that the share's word stands again.
TEST_F(ShareSnapshotFixture, revoke_made_here_is_told_again_until_the_share_has_it) {
  const auto s1 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}, {"m2", 2}}, {}, s1));
  ASSERT_TRUE(has("m1") && has("m2"));
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));  // salt-key -d m1 here
  core->key_event("delete", {"m1"});
  ASSERT_TRUE(core->key_store().move("m2", pki::key_state::accepted, pki::key_state::rejected));  // salt-key -r m2
  core->key_event("reject", {"m2"});
  for (int round = 0; round < 2; ++round) {  // the events were lost: the share still has both
    const auto s = ask();
    core->handle_peer("p1", "keys", share_snap({{"m1", 1}, {"m2", 2}}, {}, s));
    EXPECT_FALSE(has("m1"));
    EXPECT_FALSE(has("m2"));
    auto t = told();
    EXPECT_EQ(t["delete"], std::vector<std::string>{"m1"});
    EXPECT_EQ(t["reject"], std::vector<std::string>{"m2"});
  }
  // The share has them no longer: settled, nothing sent.
  const auto s4 = ask();
  core->handle_peer("p1", "keys", share_snap({}, {{"m2", 2}}, s4));
  EXPECT_TRUE(sent_key_events().empty());
  // Accepted again on the share later (its event lost too): the share's word.
  const auto s5 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}}, {}, s5));
  EXPECT_TRUE(has("m1"));
  // An accept after a revoke here (the share accepted it again, its event arrived):
  // not held back.
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));
  core->key_event("delete", {"m1"});
  core->handle_peer("p1", "key", value{{"act", "accept"}, {"ids", value::array({"m1"})},
                                      {"pubs", value{{"m1", cached_key(1).public_pem()}}}});
  ASSERT_TRUE(has("m1"));
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));  // lost locally
  const auto s6 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}}, {}, s6));
  EXPECT_TRUE(has("m1"));
  EXPECT_TRUE(sent_key_events().empty());
}

// The accepts and revokes made on a local copy that the share has not confirmed survive a
// restart of the copy (cluster_pki_dir/.sylvite-unsettled-keys): after it, the share's
// answer neither removes the accept nor brings the revoked key back; both are sent again
// until the share has them, then the file is gone.
TEST_F(ShareSnapshotFixture, unconfirmed_changes_survive_a_restart) {
  const auto s1 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}, {"m2", 2}}, {}, s1));
  ASSERT_TRUE(has("m1") && has("m2"));
  EXPECT_FALSE(fs::exists(unsettled_file()));
  // salt-key here: -a m5, -d m1, -r m2 (every message lost: the share never hears them).
  ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, "m5", cached_key(5).public_pem()));
  core->key_event("accept", {"m5"});
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));
  core->key_event("delete", {"m1"});
  ASSERT_TRUE(core->key_store().move("m2", pki::key_state::accepted, pki::key_state::rejected));
  core->keys().key_event("reject", {"m2"}, /*rotate=*/false);
  EXPECT_TRUE(fs::exists(unsettled_file()));  // on disk before salt-key is answered
  backdate("m5");

  restart();
  const auto s2 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}, {"m2", 2}}, {}, s2));
  EXPECT_TRUE(has("m5"));
  EXPECT_FALSE(has("m1"));
  EXPECT_FALSE(has("m2"));
  auto t = told();
  EXPECT_EQ(t["accept"], std::vector<std::string>{"m5"});
  EXPECT_EQ(t["delete"], std::vector<std::string>{"m1"});
  EXPECT_EQ(t["reject"], std::vector<std::string>{"m2"});
  EXPECT_EQ(rotations_asked(), 1u);  // the delete asked for one; the reject did not

  // The share has them now: nothing left to tell, nothing on disk.
  const auto s3 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m5", 5}}, {{"m2", 2}}, s3));
  EXPECT_TRUE(sent_key_events().empty());
  EXPECT_FALSE(fs::exists(unsettled_file()));
  restart();
  const auto s4 = ask();
  core->handle_peer("p1", "keys", share_snap({}, {}, s4));  // deleted on the share later
  EXPECT_FALSE(has("m5"));
  EXPECT_TRUE(sent_key_events().empty());
}

// An auto-accept on a local copy is written at the next maintenance tick; an entry whose
// key file changed while the master was down (accepted key gone, revoked key accepted
// again) is dropped at start; a file that cannot be read is logged and replaced.
TEST_F(ShareSnapshotFixture, unsettled_file_follows_the_key_files) {
  (void)ask();
  ASSERT_TRUE(core->key_store().write(pki::key_state::accepted, "m6", cached_key(6).public_pem()));
  core->keys().key_written_here(pki::key_state::accepted, "m6", cached_key(6).public_pem());
  EXPECT_FALSE(fs::exists(unsettled_file()));
  core->maintenance();
  auto u = cluster::read_unsettled_keys(*core->cfg().cluster_pki_dir);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->accepted, std::set<std::string>{"m6"});
  core->key_event("delete", {"m7"});
  core.reset();
  pki::key_store offline(tmp.path / "cluster");  // salt-key with the master down
  ASSERT_TRUE(offline.remove(pki::key_state::accepted, "m6"));
  ASSERT_TRUE(offline.write(pki::key_state::accepted, "m7", cached_key(7).public_pem()));
  restart();
  EXPECT_FALSE(fs::exists(unsettled_file()));  // nothing left that matches the key files
  ASSERT_TRUE(util::write_file_atomic(unsettled_file(), "{broken", 0600));
  restart();  // logged, set aside, nothing applied
  EXPECT_TRUE(has("m7"));
  EXPECT_FALSE(fs::exists(unsettled_file()));
  EXPECT_TRUE(fs::exists(unsettled_file().string() + ".bad"));
  core->key_event("delete", {"m7"});
  u = cluster::read_unsettled_keys(*core->cfg().cluster_pki_dir);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->revoked.contains("m7"));
}

// salt-key on the copy while the master could not be told (not running, or its socket
// did not answer) adds to the file; the running master picks the change up at its next
// tick: a revoked minion's publish connection closes, and the share is told.
TEST_F(ShareSnapshotFixture, changes_salt_key_kept_on_disk_are_picked_up) {
  const auto s1 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}}, {}, s1));
  ASSERT_TRUE(has("m1"));
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));
  ASSERT_TRUE(cluster::merge_unsettled(*core->cfg().cluster_pki_dir, "delete", {"m1"}, true));
  sink.disconnected.clear();
  core->maintenance();
  EXPECT_EQ(sink.disconnected, std::vector<std::string>{"m1"});
  const auto s2 = ask();
  core->handle_peer("p1", "keys", share_snap({{"m1", 1}}, {}, s2));
  EXPECT_FALSE(has("m1"));
  EXPECT_EQ(told()["delete"], std::vector<std::string>{"m1"});
}

// A key that went pending on a local copy (a minion's first sign-in there) whose "pend"
// never reached the share is sent again at each answer from the share that lists the id
// in no state, also after a restart of the copy; once listed there (pending, or decided),
// or decided here, it is forgotten.
TEST_F(ShareSnapshotFixture, pending_key_is_told_again_until_the_share_lists_it) {
  (void)ask();
  for (int k : {8, 9}) {
    const std::string id = "m" + std::to_string(k);
    ASSERT_TRUE(core->key_store().write(pki::key_state::pending, id, cached_key(k).public_pem()));
    core->keys().key_written_here(pki::key_state::pending, id, cached_key(k).public_pem());
  }
  core->maintenance();  // written to .sylvite-unsettled-keys at the tick
  restart();
  auto s = ask();
  core->handle_peer("p1", "keys", share_snap({}, {}, s));
  EXPECT_EQ(told()["pend"], (std::vector<std::string>{"m8", "m9"}));
  for (const auto& ev : sent_key_events()) {
    const value* pubs = wire::find(ev, "pubs");
    ASSERT_TRUE(pubs && pubs->contains("m8"));
    EXPECT_EQ((*pubs)["m8"].get<std::string>(), cached_key(8).public_pem());
  }
  // Listed pending on the share now: m8 settled; m9 accepted here meanwhile: no longer pending.
  ASSERT_TRUE(core->key_store().move("m9", pki::key_state::pending, pki::key_state::accepted));
  core->key_event("accept", {"m9"});
  s = ask();
  value listed = share_snap({}, {}, s);
  listed["pending"] = value::array({"m8"});
  core->handle_peer("p1", "keys", listed);
  EXPECT_TRUE(told()["pend"].empty());
  s = ask();
  core->handle_peer("p1", "keys", share_snap({{"m9", 9}}, {}, s));  // the share lost m8 later: its word
  EXPECT_TRUE(told()["pend"].empty());
  core->maintenance();
  auto u = cluster::read_unsettled_keys(*core->cfg().cluster_pki_dir);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->empty());
}

// The tick asks a peer whose snapshots come from the share before a local-copy peer.
TEST_F(ShareSnapshotFixture, key_sync_prefers_a_peer_on_the_share) {
  struct two_peers final : master::peer_sink {
    std::vector<std::string> to;
    void broadcast(const std::string&, const value&) override {}
    bool send(const std::string& t, const std::string&, const value&) override {
      to.push_back(t);
      return true;
    }
    value status() const override {
      return value::array({value{{"id", "local1"}, {"state", "up"}}, value{{"id", "share1"}, {"state", "up"}}});
    }
    void drop_peer(const std::string&) override {}
  } two;
  core->set_peer_sink(&two);
  core->maintenance();  // no snapshot yet: the first peer that is up
  ASSERT_EQ(two.to.size(), 1u);
  EXPECT_EQ(two.to[0], "local1");
  value from_local = snapshot({}, core->cfg().id, 1);
  core->handle_peer("local1", "keys", from_local);
  core->handle_peer("share1", "keys", share_snap({}, {}, 1));
  two.to.clear();
  for (int i = 0; i < 12; ++i) core->maintenance();
  ASSERT_FALSE(two.to.empty());
  EXPECT_EQ(two.to.back(), "share1");
  core->set_peer_sink(&peers);
}

// A member on the share marks its snapshot complete; a local copy's never is.
TEST_F(LocalCopyFixture, only_a_member_on_the_share_answers_as_the_share) {
  accept_key(*core, m1);
  peers.sent.clear();
  core->handle_peer("j1", "key-sync", value{{"for", "j1"}, {"seq", 3}});
  ASSERT_EQ(peers.sent.size(), 1u);
  EXPECT_FALSE(wire::get_bool(std::get<2>(peers.sent.at(0)), "share").value_or(false));
}

// A new minion signing in to a local copy goes pending there, and the peers get its key
// ("pend"), so salt-key on a master on the share lists and accepts it.
TEST_F(LocalCopyFixture, pending_key_is_told_to_the_peers) {
  peers.sent.clear();
  auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
  ASSERT_TRUE(core->key_store().exists(pki::key_state::pending, "m1")) << reply.dump();
  expect_one_key_event("pend", "m1", *core->key_store().read(pki::key_state::pending, "m1"));
  // Signing in again while pending writes nothing and tells nobody.
  peers.sent.clear();
  (void)core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
  EXPECT_TRUE(sent_key_events().empty());
  // The share accepts it: the accept comes back with the key; pending is cleared here.
  core->handle_peer("p1", "key", value{{"act", "accept"}, {"ids", value::array({"m1"})},
                                      {"pubs", value{{"m1", m1.key.public_pem()}}}});
  EXPECT_TRUE(has("m1"));
  EXPECT_FALSE(core->key_store().exists(pki::key_state::pending, "m1"));
}

struct LocalCopyAutoAcceptFixture : LocalCopyFixture {
  void customize(config::master_config& c) override {
    LocalCopyFixture::customize(c);
    c.auto_accept = true;
  }
};

// An auto-accept on a local copy reaches the share: the peers get the key.
TEST_F(LocalCopyAutoAcceptFixture, auto_accept_tells_the_peers) {
  peers.sent.clear();
  auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
  ASSERT_TRUE(m1.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false)) << reply.dump();
  ASSERT_TRUE(has("m1"));
  expect_one_key_event("accept", "m1", *core->key_store().read(pki::key_state::accepted, "m1"));
  // A second sign-in with the key accepted already tells nobody.
  peers.sent.clear();
  reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
  ASSERT_TRUE(m1.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false));
  EXPECT_TRUE(sent_key_events().empty());
}

// A member answers key-sync to the asker, echoing who asked and which request.
TEST_F(LocalCopyFixture, key_sync_answer_echoes_the_request) {
  accept_key(*core, m1);
  peers.sent.clear();
  core->handle_peer("j1", "key-sync", value{{"for", "j1"}, {"seq", 7}});
  ASSERT_EQ(peers.sent.size(), 1u);
  const auto& [to, type, body] = peers.sent.at(0);
  EXPECT_EQ(to, "j1");
  EXPECT_EQ(type, "keys");
  EXPECT_EQ(wire::get_text(body, "for").value_or(""), "j1");
  EXPECT_EQ(wire::get_int(body, "seq").value_or(0), 7);
  const value* acc = wire::find(body, "accepted");
  ASSERT_TRUE(acc && acc->contains("m1"));
}

TEST_F(CoreFixture, key_delete_rotates_and_revokes) {
  login(m1);
  auto before = core->aes().current()->generation;
  ASSERT_TRUE(core->key_store().remove(pki::key_state::accepted, "m1"));
  EXPECT_TRUE(core->key_event("delete", {"m1"}));
  EXPECT_GT(core->aes().current()->generation, before);
  EXPECT_FALSE(fs::exists(core->cfg().cachedir / "sessions" / "m1"));
  EXPECT_EQ(sink.disconnected, std::vector<std::string>{"m1"});
  EXPECT_FALSE(core->key_event("accept", {"m1"}));
}

TEST_F(CoreFixture, maintenance_rotates_on_drop_file) {
  auto before = core->aes().current()->generation;
  ASSERT_TRUE(util::write_file_atomic(core->cfg().cachedir / ".dfn", "testmaster", 0400));
  core->maintenance();
  EXPECT_GT(core->aes().current()->generation, before);
  EXPECT_FALSE(fs::exists(core->cfg().cachedir / ".dfn"));
  auto g = core->aes().current()->generation;
  core->maintenance(master::sys_clock::now() + std::chrono::seconds(core->cfg().publish_session + 1));
  EXPECT_GT(core->aes().current()->generation, g);
}

struct V2Fixture : CoreFixture {
  void customize(config::master_config& c) override { c.minimum_auth_version = 2; }
};

TEST_F(V2Fixture, v2_minion_uses_the_aes_key) {
  accept_key(*core, m1);
  auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce), 2), "test");
  ASSERT_TRUE(m1.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false));
  // v2 request: AES key, tok optional
  auto body = m1.aes_body(value{{"cmd", "_mine"}, {"data", value::object()}}, kNonce, m1.aes, 2, false);
  body.erase("id");
  auto r = m1.open_reply(core->handle_request(body, "t"), kNonce, m1.aes);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, value(true));
}

// The io-thread path (daemon.cpp): open_request, then run_request inline for what
// runs_inline accepts, the rest on the pool. Same replies as handle_request.
struct InlineFixture : CoreFixture {
  std::string published_jid() {
    master::publish_request req;
    req.tgt = "m1";
    req.fun = "test.ping";
    auto r = core->publish(req);
    EXPECT_TRUE(r.error.empty()) << r.error;
    return r.jid;
  }
  master::request_router::opened_request open(const value& body) {
    auto o = core->open_request(body, "test");
    EXPECT_EQ(o.index(), 1u) << (o.index() == 0 ? std::get<0>(o).dump() : "");
    return o.index() == 1 ? std::get<1>(o) : master::request_router::opened_request{};
  }
  value ret_load(const std::string& jid, const std::string& text) {
    return value{{"cmd", "_return"}, {"success", true}, {"return", text}, {"retcode", 0},
                 {"jid", jid}, {"fun", "test.ping"}, {"fun_args", value::array()}};
  }
};

TEST_F(InlineFixture, return_of_a_published_job_runs_inline_and_is_stored_first_wins) {
  login(m1);
  ASSERT_EQ(core->jobs().mode(), master::job_cache::write_mode::journal);
  const auto jid = published_jid();
  std::vector<std::string> tags;
  core->hub().subscribe_jid(jid, [&](const std::string& tag, const value&) { tags.push_back(tag); });
  for (const char* text : {"first", "second"}) {
    auto req = open(m1.aes_body(ret_load(jid, text), kNonce, m1.session));
    EXPECT_EQ(req.cmd, "_return");
    EXPECT_EQ(req.id, "m1");
    EXPECT_TRUE(core->router().runs_inline(req));
    bool authenticated = false;
    std::string who;
    auto reply = core->run_request(req, "test", &authenticated, &who);
    EXPECT_TRUE(authenticated);
    EXPECT_EQ(who, "m1");
    auto opened = m1.open_reply(reply, kNonce, m1.session);
    ASSERT_TRUE(opened) << reply.dump();
    EXPECT_EQ(*opened, value(nullptr));
  }
  EXPECT_EQ(core->jobs().get_returns(jid)["m1"]["return"], "first");
  EXPECT_EQ(tags, std::vector<std::string>{"salt/job/" + jid + "/ret/m1"});
}

TEST_F(InlineFixture, what_may_block_goes_to_the_pool) {
  login(m1);
  const auto jid = published_jid();
  // A sign-in (RSA), a pillar (render), salt-call's jid "req" (a load is saved first), a
  // job the cache does not index (a stat, maybe a new job dir), a file request.
  auto signin = open(m1.auth_body(m1.auth_load(kNonce)));
  EXPECT_FALSE(signin.aes);
  EXPECT_EQ(signin.cmd, "_auth");
  EXPECT_FALSE(core->router().runs_inline(signin));
  EXPECT_FALSE(core->router().runs_inline(
      open(m1.aes_body(value{{"cmd", "_pillar"}, {"grains", value::object()}}, kNonce, m1.session))));
  EXPECT_FALSE(core->router().runs_inline(open(m1.aes_body(ret_load("req", "x"), kNonce, m1.session))));
  EXPECT_FALSE(
      core->router().runs_inline(open(m1.aes_body(ret_load("20250101000000000001", "x"), kNonce, m1.session))));
  EXPECT_FALSE(core->router().runs_inline(
      open(m1.aes_body(value{{"cmd", "_file_list"}, {"saltenv", "base"}}, kNonce, m1.session))));
  EXPECT_TRUE(core->router().runs_inline(open(m1.aes_body(
      value{{"cmd", "_minion_event"}, {"tag", "custom/m1"}, {"data", value::object()}}, kNonce, m1.session))));
  EXPECT_TRUE(core->router().runs_inline(open(m1.aes_body(ret_load(jid, "x"), kNonce, m1.session))));
  // The sign-in opened on the io thread completes on the pool as through handle_request.
  auto reply = core->run_request(signin, "test");
  EXPECT_TRUE(m1.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false)) << reply.dump();
}

TEST_F(InlineFixture, refusals_are_the_reply_of_open) {
  login(m1);
  auto bad = core->open_request(value{{"enc", "aes"}, {"load", wire::make_bin("garbage")}, {"id", "m1"},
                                      {"version", 3}},
                                "test");
  ASSERT_EQ(bad.index(), 0u);
  EXPECT_EQ(std::get<0>(bad), value("bad load"));
  EXPECT_EQ(core->open_request(value("not a map"), "test").index(), 0u);
  // Big bodies are not opened on the io thread.
  EXPECT_TRUE(master::request_router::small_request(m1.aes_body(ret_load("1", "x"), kNonce, m1.session)));
  EXPECT_FALSE(master::request_router::small_request(
      m1.aes_body(ret_load("1", std::string(master::request_router::kSmallRequestBytes, 'x')), kNonce, m1.session)));
}

// The io thread opens a request without reading a file: a session key or an accepted key
// that is not in memory (a restarted master) or whose file changed sends the request to
// the pool, where open() reads it; the io thread stats a key due for its re-check at most.
TEST_F(InlineFixture, keys_not_in_memory_are_read_on_the_pool_not_the_io_thread) {
  login(m1);
  const value ev{{"cmd", "_minion_event"}, {"tag", "custom/m1"}, {"data", value::object()}};
  // A restarted master: the session key and the accepted key exist only on disk.
  core.reset();
  {
    auto cfg = make_config(tmp.path);
    customize(cfg);
    auto c = master::master_core::create(cfg);
    ASSERT_TRUE(c) << c.error().message();
    core = std::move(*c);
    core->set_pub_sink(&sink);
  }
  const auto body = m1.aes_body(ev, kNonce, m1.session);
  const auto requests = core->counters().requests.load();
  EXPECT_FALSE(core->open_request_in_memory(body, "test"));
  // Nothing was read (a stat at most): the keys are still not in memory.
  EXPECT_FALSE(core->open_request_in_memory(body, "test"));
  EXPECT_EQ(core->counters().requests.load(), requests);

  // Only the session key in memory: the token's key is still on disk.
  ASSERT_TRUE(core->sessions().lookup("m1"));
  EXPECT_FALSE(core->open_request_in_memory(body, "test"));
  EXPECT_FALSE(core->open_request_in_memory(body, "test"));

  // The pool's open() reads both; the next request opens on the io thread.
  auto pooled = core->open_request(body, "test");
  ASSERT_EQ(pooled.index(), 1u) << std::get<0>(pooled).dump();
  ASSERT_TRUE(core->accepted().watching()) << "inotify is needed for keys cached without a stat";
  const auto reads_after = core->sessions().file_reads();
  auto opened = core->open_request_in_memory(m1.aes_body(ev, kNonce, m1.session), "test");
  ASSERT_TRUE(opened);
  ASSERT_EQ(opened->index(), 1u) << std::get<0>(*opened).dump();
  EXPECT_EQ(core->sessions().file_reads(), reads_after);
  // Past the keys' 2 s re-check the io thread re-checks them with a stat (the files did
  // not change) and still opens the request itself.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto rechecked = core->open_request_in_memory(m1.aes_body(ev, kNonce, m1.session), "test");
  ASSERT_TRUE(rechecked);
  EXPECT_EQ(rechecked->index(), 1u);
  EXPECT_GT(core->sessions().file_reads(), reads_after);  // the stat
  auto& req = std::get<1>(*opened);
  EXPECT_TRUE(req.session);
  auto reply = core->run_request(req, "test");
  auto r = m1.open_reply(reply, kNonce, m1.session);
  ASSERT_TRUE(r) << reply.dump();
  EXPECT_EQ(*r, value(nullptr));  // Salt: _minion_event answers None

  // A refusal needs no file: it is the answer on the io thread, counted once.
  auto bad = core->open_request_in_memory(
      value{{"enc", "aes"}, {"load", wire::make_bin("garbage")}, {"id", "m1"}, {"version", 3}}, "test");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->index(), 0u);
  // A minion without a session key file: the stat says so, refused on the io thread.
  fake_minion m9{"m9", cached_key(2)};
  m9.session = m1.session;
  auto unknown = core->open_request_in_memory(m9.aes_body(ev, kNonce, m9.session), "test");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->index(), 0u);
}

// A sign-in of an accepted key parses it through the accepted-key cache, so the publish
// hello that follows is checked in memory (on the io thread) instead of reading the file.
TEST_F(InlineFixture, a_sign_in_leaves_the_accepted_key_in_memory_for_the_hello) {
  ASSERT_TRUE(core->accepted().watching()) << "inotify is needed for keys cached without a stat";
  login(m1);
  // An inotify event of the accept that arrives late drops the entry again (as it must), so
  // the check is repeated a few times; it never succeeds if the sign-in fills nothing.
  std::optional<bool> ok;
  for (int attempt = 0; attempt < 20 && !ok; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    core->accepted().clear();
    EXPECT_FALSE(core->accepted().verify_token_cached("m1", m1.tok()));  // not in memory
    auto reply = core->handle_request(m1.auth_body(m1.auth_load(kNonce)), "test");
    ASSERT_TRUE(m1.check_auth_reply(reply, kNonce, core->mkeys()->pub(), false)) << reply.dump();
    ok = core->accepted().verify_token_cached("m1", m1.tok());
  }
  ASSERT_TRUE(ok) << "the sign-in did not fill the accepted-key cache";
  EXPECT_TRUE(*ok);
}

struct InlineSyncFixture : InlineFixture {
  void customize(config::master_config& c) override { c.job_cache_journal = false; }
};

TEST_F(InlineSyncFixture, sync_job_cache_returns_go_to_the_pool) {
  login(m1);
  ASSERT_EQ(core->jobs().mode(), master::job_cache::write_mode::sync);
  const auto jid = published_jid();
  EXPECT_FALSE(core->router().runs_inline(open(m1.aes_body(ret_load(jid, "x"), kNonce, m1.session))));
}

struct InlineNoCacheFixture : InlineFixture {
  void customize(config::master_config& c) override { c.job_cache = false; }
};

TEST_F(InlineNoCacheFixture, returns_run_inline_without_a_job_cache) {
  login(m1);
  EXPECT_TRUE(core->router().runs_inline(
      open(m1.aes_body(ret_load("20250101000000000001", "x"), kNonce, m1.session))));
}

// Rotations by two peers close together reach a local copy over two links, in either
// order: the generation decides, not the arrival. A snapshot carries the share's key too
// (a copy that missed a message catches up), and a sender without generations is obeyed.
TEST_F(LocalCopyFixture, aes_keys_from_peers_are_taken_by_generation_not_arrival) {
  const fs::path cdir = *core->cfg().cluster_pki_dir;
  const auto key = [&] { return core->aes().current()->crypt.key_string(); };
  const std::string k1 = crypto::crypticle::generate_key_string();
  const std::string k2 = crypto::crypticle::generate_key_string();
  const std::string k3 = crypto::crypticle::generate_key_string();
  const std::string k4 = crypto::crypticle::generate_key_string();
  const std::int64_t g0 = static_cast<std::int64_t>(cluster::read_aes_gen(cdir));  // of the key made at start
  core->handle_peer("p2", "aes", value{{"why", "drop file"}, {"key", k2}, {"gen", g0 + 2000}});
  EXPECT_EQ(key(), k2);
  core->handle_peer("p1", "aes", value{{"why", "drop file"}, {"key", k1}, {"gen", g0 + 1000}});  // older, late
  EXPECT_EQ(key(), k2);
  EXPECT_EQ(util::read_file(cdir / ".aes").value(), k2);
  EXPECT_EQ(cluster::read_aes_gen(cdir), static_cast<std::uint64_t>(g0 + 2000));
  // The answer to a key-sync: newer key, taken; an older snapshot is not.
  const auto me = core->cfg().id;
  const auto s1 = ask();
  value snap = snapshot({}, me, s1);
  snap["aes"] = k3;
  snap["aes_gen"] = g0 + 3000;
  core->handle_peer("p1", "keys", snap);
  EXPECT_EQ(key(), k3);
  snap["aes"] = k1;
  snap["aes_gen"] = g0 + 1000;
  core->handle_peer("p1", "keys", snap);
  EXPECT_EQ(key(), k3);
  // An older master sends no generation: its key is taken, as before generations.
  core->handle_peer("p3", "aes", value{{"why", "x"}, {"key", k4}});
  EXPECT_EQ(key(), k4);
  EXPECT_EQ(util::read_file(cdir / ".aes").value(), k4);
}

// A member on the share: a drop file rotates the key once (removed under the lock), the
// broadcast carries the generation, and a key-sync answer carries the key with it.
struct ShareMemberFixture : LocalCopyFixture {
  void customize(config::master_config& c) override {
    c.cluster_id = "lc";
    c.cluster_pki_dir = tmp.path / "cluster";
    fs::create_directories(*c.cluster_pki_dir);
  }
  void SetUp() override {
    CoreFixture::SetUp();
    ASSERT_FALSE(core->local_copy());
    core->set_peer_sink(&peers);
  }
};

TEST_F(ShareMemberFixture, drop_file_rotation_tells_the_generation) {
  const fs::path cdir = *core->cfg().cluster_pki_dir;
  const auto g0 = cluster::read_aes_gen(cdir);
  EXPECT_GT(g0, 0u);
  ASSERT_TRUE(util::write_file_atomic(core->cfg().cachedir / ".dfn", "m", 0400));
  peers.sent.clear();
  core->maintenance();
  EXPECT_FALSE(fs::exists(core->cfg().cachedir / ".dfn"));
  const auto g1 = cluster::read_aes_gen(cdir);
  EXPECT_GT(g1, g0);
  const value* told = nullptr;
  for (const auto& [to, type, body] : peers.sent)
    if (type == "aes") told = &body;
  ASSERT_TRUE(told);
  EXPECT_EQ(wire::get_text(*told, "key").value_or(""), core->aes().current()->crypt.key_string());
  EXPECT_EQ(wire::get_int(*told, "gen").value_or(0), static_cast<std::int64_t>(g1));
  // The next tick finds no drop file: no second rotation.
  core->maintenance();
  EXPECT_EQ(cluster::read_aes_gen(cdir), g1);
  peers.sent.clear();
  core->handle_peer("j1", "key-sync", value{{"for", "j1"}, {"seq", 1}});
  ASSERT_EQ(peers.sent.size(), 1u);
  const auto& ans = std::get<2>(peers.sent.at(0));
  EXPECT_EQ(wire::get_text(ans, "aes").value_or(""), core->aes().current()->crypt.key_string());
  EXPECT_EQ(wire::get_int(ans, "aes_gen").value_or(0), static_cast<std::int64_t>(g1));
  // Listed and read whole on the share: a local copy may remove keys on its word.
  EXPECT_TRUE(wire::get_bool(ans, "share").value_or(false));
  // A key file that cannot be read (here: over the 1 MiB a key file may hold) makes the
  // answer incomplete: a failed read must not pass for a delete.
  ASSERT_TRUE(util::write_file_atomic(core->key_store().path(pki::key_state::accepted, "m9"),
                                      std::string((1u << 20) + 1, 'x'), 0644));
  peers.sent.clear();
  core->handle_peer("j1", "key-sync", value{{"for", "j1"}, {"seq", 2}});
  ASSERT_EQ(peers.sent.size(), 1u);
  EXPECT_FALSE(wire::get_bool(std::get<2>(peers.sent.at(0)), "share").value_or(false));
}

// peers/<id>.pub deleted: the members on the share rotate once. A member that finds the
// key rotated after the removal (another member was first) takes that key instead.
TEST_F(ShareMemberFixture, removed_peer_rotates_once) {
  const fs::path cdir = *core->cfg().cluster_pki_dir;
  auto key = [&] { return core->aes().current()->crypt.key_string(); };
  fs::create_directories(cdir / "peers");
  ASSERT_TRUE(util::write_file_atomic(cdir / "peers" / "p9.pub", "x", 0644));
  ASSERT_TRUE(util::write_file_atomic(cdir / "peers" / "p8.pub", "x", 0644));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // file times apart
  const auto k0 = key();
  const auto g0 = cluster::read_aes_gen(cdir);
  ASSERT_TRUE(util::remove_file(cdir / "peers" / "p9.pub"));
  core->on_peers_removed({"p9"});
  const auto k1 = key();
  EXPECT_NE(k1, k0);
  EXPECT_GT(cluster::read_aes_gen(cdir), g0);
  EXPECT_EQ(util::read_file(cdir / ".aes").value(), k1);
  // Told again (another watcher's notice): rotated since the removal, nothing more.
  const auto g1 = cluster::read_aes_gen(cdir);
  core->on_peers_removed({"p9"});
  EXPECT_EQ(key(), k1);
  EXPECT_EQ(cluster::read_aes_gen(cdir), g1);
  // Another member rotated after the next removal, before this one looked: its key.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(util::remove_file(cdir / "peers" / "p8.pub"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto other = cluster::rotate_aes(cdir, k1, nullptr);
  ASSERT_TRUE(other && other->rotated);
  core->on_peers_removed({"p8"});
  EXPECT_EQ(key(), other->now.key);
  EXPECT_EQ(cluster::read_aes_gen(cdir), other->now.gen);
}

// On the share, a local copy's "pend" writes the pending key unless the id has a key in
// some state already.
TEST_F(ShareMemberFixture, pending_key_from_a_local_copy_is_recorded_once) {
  auto pend = [](const std::string& id, const std::string& pem) {
    return value{{"act", "pend"}, {"ids", value::array({id})}, {"local", true}, {"pubs", value{{id, pem}}}};
  };
  core->handle_peer("j1", "key", pend("m7", cached_key(7).public_pem()));
  EXPECT_EQ(core->key_store().read(pki::key_state::pending, "m7").value_or(""), cached_key(7).public_pem());
  core->handle_peer("j1", "key", pend("m7", cached_key(8).public_pem()));  // not replaced
  EXPECT_EQ(core->key_store().read(pki::key_state::pending, "m7").value_or(""), cached_key(7).public_pem());
  accept_key(*core, m1);
  core->handle_peer("j1", "key", pend("m1", cached_key(8).public_pem()));  // accepted already
  EXPECT_FALSE(core->key_store().exists(pki::key_state::pending, "m1"));
  core->handle_peer("j1", "key", pend("m6", "not a key"));
  EXPECT_FALSE(core->key_store().exists(pki::key_state::pending, "m6"));
}

struct InlineClusterFixture : LocalCopyFixture {};

TEST_F(InlineClusterFixture, a_cluster_member_opens_nothing_on_the_io_thread) {
  EXPECT_FALSE(core->inline_requests());
}

}  // namespace
}  // namespace sylvite::test

namespace sylvite::test {
namespace {

// Cheap in-process fuzz smoke (the libFuzzer target is tests/fuzz/fuzz_auth.cpp):
// mutated bodies, loads and ciphertexts never throw and always get an answer.
TEST_F(CoreFixture, mutated_requests_never_crash) {
  login(m1);
  std::uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
  };
  const value samples[] = {nullptr, true, 7, -1, 3.5, "x", "", wire::make_bin("\x00\xff"), value::array({1, "a"}),
                           value::object(), value{{"k", value::array()}}};
  const char* keys[] = {"cmd", "id", "tok", "nonce", "grains", "jid", "return", "path", "saltenv", "loc",
                        "events", "tag", "data", "pub", "token", "enc_algo", "sig_algo", "ver", "prefix"};
  const char* cmds[] = {"_return", "_pillar", "_minion_event", "_mine", "_serve_file", "_file_list", "_file_hash",
                        "_file_find", "_master_opts", "_auth", "_dir_list", "_symlink_list", "nope"};
  for (int i = 0; i < 400; ++i) {
    value load{{"cmd", cmds[rnd() % std::size(cmds)]}};
    for (int k = 0, n = static_cast<int>(rnd() % 5); k < n; ++k) {
      load[keys[rnd() % std::size(keys)]] = samples[rnd() % std::size(samples)];
    }
    value body;
    switch (rnd() % 4) {
      case 0:
        body = m1.aes_body(load, kNonce, m1.session);
        break;
      case 1: {
        body = m1.aes_body(load, kNonce, m1.session);
        auto b = std::string(*wire::as_bytes(body["load"]));
        b[rnd() % b.size()] ^= static_cast<char>(1 + rnd() % 255);
        body["load"] = wire::make_bin(b);
        break;
      }
      case 2:
        body = value{{"enc", "clear"}, {"load", load}, {"version", static_cast<int>(rnd() % 5)}};
        break;
      default:
        body = value{{"enc", samples[rnd() % std::size(samples)]}, {"load", samples[rnd() % std::size(samples)]},
                     {"version", samples[rnd() % std::size(samples)]}, {"id", samples[rnd() % std::size(samples)]}};
    }
    value reply;
    EXPECT_NO_THROW(reply = core->handle_request(body, "fuzz"));
    EXPECT_FALSE(reply.is_null()) << body.dump();
  }
  EXPECT_EQ(call(m1, value{{"cmd", "_mine"}, {"data", value::object()}}), value(true));
}

}  // namespace
}  // namespace sylvite::test
