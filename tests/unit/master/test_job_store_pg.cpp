// The PostgreSQL job cache's pure parts (issue 20): Salt's pgjsonb options, the DDL and
// SQL text, the JSON and COPY text sent to the server, and the spool (record format,
// append, ordered read back, reopen after a crash, torn tail, release, bound).
// The parts that talk to a server are tested end to end (tests/e2e/test_pg_jobcache.py).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/wire/value.hpp"
#include "master/event_hub.hpp"
#include "master/job_store_pg.hpp"
#include "master/pg_events.hpp"
#include "master/spool.hpp"
#include "master/pg_sql.hpp"

using namespace sylvite;
using namespace sylvite::master::pg;
using sylvite::master::spool;
using sylvite::master::spool_record;
using sylvite::master::decode_status;
using sylvite::master::spool_header_size;
using sylvite::master::crc32;
using sylvite::master::keyed_payload;
using sylvite::master::split_keyed_payload;
using sylvite::master::encode_record;
using sylvite::master::decode_record;
namespace fs = std::filesystem;

namespace {
struct tmp {
  fs::path path;
  tmp() {
    std::string t = (fs::temp_directory_path() / "sylvite-pgspool-XXXXXX").string();
    char* p = ::mkdtemp(t.data());
    path = p ? fs::path(p) : fs::path();
  }
  ~tmp() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

options parse(const wire::value& raw, std::string* err = nullptr) {
  std::string e;
  auto o = parse_options(raw, "/var/cache/salt/master", "m1", e);
  if (err) *err = e;
  return o ? *o : options{};
}
bool refused(const wire::value& raw) {
  std::string e;
  return !parse_options(raw, "/c", "m1", e) && !e.empty();
}
}  // namespace

// ---------------------------------------------------------------- options

TEST(PgOptions, SaltDefaultsAndTheFileCacheStaysTheDefault) {
  auto o = parse(wire::value::object());
  EXPECT_FALSE(o.job_cache);
  EXPECT_FALSE(o.event_return);
  EXPECT_EQ(o.host, "localhost");
  EXPECT_EQ(o.user, "salt");
  EXPECT_EQ(o.pass, "salt");
  EXPECT_EQ(o.db, "salt");
  EXPECT_EQ(o.port, 5432);
  EXPECT_FALSE(o.sslmode);
  EXPECT_EQ(o.keep_jobs_seconds, 86400);
  EXPECT_EQ(o.spool_dir, fs::path("/var/cache/salt/master/pgjsonb_spool/m1"));
  EXPECT_EQ(o.master_id, "m1");
}

TEST(PgOptions, FlatKeysAsInSaltsDocs) {
  wire::value raw = {{"master_job_cache", "pgjsonb"},
                     {"event_return", "pgjsonb"},
                     {"returner.pgjsonb.host", "db.example"},
                     {"returner.pgjsonb.port", "5433"},
                     {"returner.pgjsonb.db", "jobs"},
                     {"returner.pgjsonb.user", "u"},
                     {"returner.pgjsonb.pass", "p w"},
                     {"returner.pgjsonb.sslmode", "verify-full"},
                     {"returner.pgjsonb.sslrootcert", "/etc/ca.pem"},
                     {"returner.pgjsonb.sslcert", nullptr},
                     {"returner.pgjsonb.sslkey", "None"},
                     {"returner.pgjsonb.connect_timeout", 5},
                     {"keep_jobs_seconds", 3600},
                     {"archive_jobs", true}};
  auto o = parse(raw);
  EXPECT_TRUE(o.job_cache);
  EXPECT_TRUE(o.event_return);
  EXPECT_EQ(o.host, "db.example");
  EXPECT_EQ(o.port, 5433);
  EXPECT_EQ(o.db, "jobs");
  EXPECT_EQ(o.user, "u");
  EXPECT_EQ(o.pass, "p w");
  EXPECT_EQ(o.sslmode.value_or(""), "verify-full");
  EXPECT_EQ(o.sslrootcert.value_or(""), "/etc/ca.pem");
  EXPECT_FALSE(o.sslcert);  // None in YAML
  EXPECT_FALSE(o.sslkey);   // "None" as text, as Salt's docs write it
  EXPECT_EQ(o.connect_timeout.value_or(0), 5);
  EXPECT_EQ(o.keep_jobs_seconds, 3600);
  EXPECT_TRUE(o.archive_jobs);
}

TEST(PgOptions, TheMapFormWinsOverTheFlatKey) {
  wire::value raw = {{"returner.pgjsonb", {{"host", "from-map"}}},
                     {"returner.pgjsonb.host", "from-flat"},
                     {"returner.pgjsonb.db", "flatdb"}};
  auto o = parse(raw);
  EXPECT_EQ(o.host, "from-map");
  EXPECT_EQ(o.db, "flatdb");
  wire::value nested = {{"returner", {{"pgjsonb", {{"port", 6000}}}}}};
  EXPECT_EQ(parse(nested).port, 6000);
}

TEST(PgOptions, EventReturnAsAList) {
  EXPECT_TRUE(parse({{"event_return", {"mysql", "pgjsonb"}}}).event_return);
  EXPECT_FALSE(parse({{"event_return", "mysql"}}).event_return);
  auto o = parse({{"event_return_whitelist", {"salt/job/*"}}, {"event_return_blacklist", "salt/job/*/ret/x"}});
  EXPECT_TRUE(event_wanted(o, "salt/job/1/new"));
  EXPECT_FALSE(event_wanted(o, "salt/auth"));
  EXPECT_FALSE(event_wanted(o, "salt/job/1/ret/x"));
  EXPECT_TRUE(event_wanted(options{}, "anything"));
}

TEST(PgOptions, BadValuesAreRefused) {
  EXPECT_FALSE(refused({{"master_job_cache", "mysql"}}));  // the file cache, logged
  EXPECT_EQ(parse({{"master_job_cache", "mysql"}}).unsupported_cache, "mysql");
  EXPECT_FALSE(parse({{"master_job_cache", "mysql"}}).job_cache);
  EXPECT_TRUE(refused({{"master_job_cache", 3}}));
  EXPECT_TRUE(refused({{"returner.pgjsonb.port", "x"}}));
  EXPECT_TRUE(refused({{"returner.pgjsonb.port", 70000}}));
  EXPECT_TRUE(refused({{"returner.pgjsonb.host", {1, 2}}}));
  EXPECT_TRUE(refused({{"pgjsonb_spool_dir", "relative/dir"}}));
  EXPECT_TRUE(refused({{"pgjsonb_pool_size", 0}}));
  EXPECT_TRUE(refused({{"keep_jobs_seconds", -1}}));
  EXPECT_FALSE(refused({{"master_job_cache", "local_cache"}}));
  auto o = parse({{"pgjsonb_spool_dir", "/var/lib/sylvite/spool"}, {"pgjsonb_pool_size", 8},
                  {"pgjsonb_spool_max_mb", 16}, {"pgjsonb_spool_sync", true}});
  EXPECT_TRUE(o.spool_sync);
  EXPECT_EQ(o.spool_dir, fs::path("/var/lib/sylvite/spool"));
  EXPECT_EQ(o.pool_size, 8);
  EXPECT_EQ(o.spool_max_bytes, 16ll << 20);
}

TEST(PgOptions, ConnInfoAndMaskedDescription) {
  auto o = parse({{"returner.pgjsonb.pass", "secret"}, {"returner.pgjsonb.sslmode", "require"}});
  bool has_ssl = false, has_pw = false, has_cert = false;
  for (const auto& [k, v] : conninfo(o)) {
    if (k == "sslmode") has_ssl = v == "require";
    if (k == "password") has_pw = v == "secret";
    if (k == "sslcert") has_cert = true;
  }
  EXPECT_TRUE(has_ssl);
  EXPECT_TRUE(has_pw);
  EXPECT_FALSE(has_cert);
  const auto d = describe(o);
  EXPECT_EQ(d.find("secret"), std::string::npos);
  EXPECT_NE(d.find("password=***"), std::string::npos);
  EXPECT_NE(d.find("dbname=salt"), std::string::npos);
}

// ---------------------------------------------------------------- SQL text

TEST(PgSql, SaltsSchemaIsThereAndIdempotent) {
  std::string all;
  for (const auto& s : schema_statements()) {
    EXPECT_NE(s.find("IF NOT EXISTS"), std::string::npos) << s;
    all += s + ";\n";
  }
  for (const char* want :
       {"CREATE TABLE IF NOT EXISTS jids (jid varchar(255) NOT NULL primary key, load jsonb NOT NULL)",
        "fun varchar(50) NOT NULL, jid varchar(255) NOT NULL, return jsonb NOT NULL, id varchar(255) NOT NULL, "
        "success varchar(10) NOT NULL, full_ret jsonb NOT NULL, alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW()",
        "id BIGINT NOT NULL UNIQUE DEFAULT nextval('seq_salt_events_id')", "idx_jids_jsonb", "idx_salt_returns_id",
        "idx_salt_returns_jid", "idx_salt_returns_fun", "idx_salt_returns_return", "idx_salt_returns_full_ret",
        "idx_salt_events_tag", "idx_salt_events_data", "master_id varchar(255) NOT NULL"})
    EXPECT_NE(all.find(want), std::string::npos) << want;
}

TEST(PgSql, UpsertsHaveOnePlaceholderPairPerRow) {
  EXPECT_EQ(jids_upsert_sql(2),
            "INSERT INTO jids (jid, load) VALUES ($1, $2::jsonb), ($3, $4::jsonb) ON CONFLICT (jid) DO UPDATE SET "
            "load = EXCLUDED.load");
  const auto m = minions_upsert_sql(3);
  EXPECT_NE(m.find("($5, $6::jsonb)"), std::string::npos);
  EXPECT_NE(m.find("jsonb_agg(DISTINCT e ORDER BY e)"), std::string::npos);
  for (const auto& s : purge_statements()) EXPECT_NE(s.find("$1"), std::string::npos);
}

TEST(PgSql, JsonTextIsWhatJsonbAccepts) {
  wire::value v = wire::value::object();
  v["bin"] = wire::make_bin("caf\xc3\xa9");
  v["badbin"] = wire::make_bin(std::string("a\xff" "b", 3));
  v["nul"] = std::string("a\0b", 3);
  v["nan"] = std::numeric_limits<double>::quiet_NaN();
  v["inf"] = std::numeric_limits<double>::infinity();
  v["n"] = 1.5;
  v["list"] = {1, "x", nullptr, true};
  const auto t = json_text(v);
  auto back = wire::value::parse(t);
  EXPECT_EQ(back["bin"], "caf\xc3\xa9");
  EXPECT_EQ(back["badbin"], "a\xef\xbf\xbd" "b");
  EXPECT_EQ(back["nul"], "ab");
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_TRUE(back["inf"].is_null());
  EXPECT_EQ(back["n"], 1.5);
  EXPECT_EQ(back["list"], wire::value({1, "x", nullptr, true}));
  EXPECT_EQ(t.find("\\u0000"), std::string::npos);
  // Invalid UTF-8 in a plain string too (never throws).
  EXPECT_EQ(wire::value::parse(json_text(std::string("\xc3(", 2))), "\xef\xbf\xbd(");
}

TEST(PgSql, CopyTextEscapesAndTimestamps) {
  std::string out;
  copy_escape(out, "a\\b\tc\nd\re");
  EXPECT_EQ(out, "a\\\\b\\tc\\nd\\re");
  EXPECT_EQ(timestamp(0), "1970-01-01 00:00:00.000000+00");
  EXPECT_EQ(timestamp(1795000000123456), "2026-11-18 11:06:40.123456+00");
  EXPECT_EQ(clip("abcdef", 3), "abc");
  EXPECT_EQ(clip("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9");  // not inside a character
}

TEST(PgSql, CopyLinesSplitBackIntoTheirFields) {
  std::string line;
  bool first = true;
  for (std::string_view f : {"a\\b\tc\nd\re", "", "{\"k\": \"v\\\\n\"}", "x"}) {
    if (!first) line.push_back('\t');
    first = false;
    copy_escape(line, f);
  }
  line.push_back('\n');
  auto f = split_copy_line(line);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0], "a\\b\tc\nd\re");
  EXPECT_EQ(f[1], "");
  EXPECT_EQ(f[2], "{\"k\": \"v\\\\n\"}");
  EXPECT_EQ(f[3], "x");
  // A return row as the spool keeps it.
  std::string row;
  append_copy_line(row, make_return_row("20261127000000000001", "alpha",
                                        {{"id", "alpha"}, {"fun", "test.echo"}, {"return", "a\tb"}}, 0));
  auto r = split_copy_line(row);
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[1], "20261127000000000001");
  EXPECT_EQ(r[3], "alpha");
  EXPECT_EQ(wire::value::parse(r[5])["return"], "a\tb");
}

TEST(PgSql, ReturnRowAsSaltsReturnerWritesIt) {
  wire::value load = {{"id", "alpha"}, {"jid", "20261127000000000001"}, {"fun", "cmd.run"},
                      {"return", "line1\nline2\ttab\\"}, {"retcode", 0}, {"success", true}};
  auto r = make_return_row("20261127000000000001", "alpha", load, 1795000000000000);
  EXPECT_EQ(r.fun, "cmd.run");
  EXPECT_EQ(r.success, "true");
  EXPECT_EQ(wire::value::parse(r.ret_json), "line1\nline2\ttab\\");
  auto full = wire::value::parse(r.full_json);
  EXPECT_EQ(full["_stamp"], "2026-11-18T11:06:40.000000+00:00");  // as Salt's event stamps it
  full.erase("_stamp");
  EXPECT_EQ(full, load);
  std::string line;
  append_copy_line(line, r);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 6);  // 7 columns, no raw tab inside
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  EXPECT_EQ(line.substr(0, 29), "cmd.run\t20261127000000000001\t");
  EXPECT_NE(line.find("\talpha\ttrue\t"), std::string::npos);
  EXPECT_NE(line.find("\t2026-11-18 11:06:40.000000+00\n"), std::string::npos);
  // Missing success is Python's False; fun is cut to varchar(50).
  wire::value l2 = {{"fun", std::string(80, 'f')}, {"return", 1}};
  auto r2 = make_return_row("j", "i", l2, 0);
  EXPECT_EQ(r2.success, "false");
  EXPECT_EQ(r2.fun.size(), 50u);
  wire::value l3 = {{"success", false}, {"return", nullptr}};
  EXPECT_EQ(make_return_row("j", "i", l3, 0).success, "false");
  EXPECT_EQ(make_return_row("j", "i", l3, 0).ret_json, "null");
  std::string ev;
  append_event_line(ev, "salt/job/1/new", "{\"a\":\"x\\ny\"}", "m1", 0);
  EXPECT_EQ(ev, "salt/job/1/new\t{\"a\":\"x\\\\ny\"}\tm1\t1970-01-01 00:00:00.000000+00\n");
}

// ---------------------------------------------------------------- spool

TEST(PgSpool, RecordRoundTripAndDamage) {
  spool_record r{42, 'R', std::string("pay\0load", 8)};
  const auto bytes = encode_record(r);
  ASSERT_EQ(bytes.size(), spool_header_size + 8);
  spool_record back;
  std::size_t used = 0;
  ASSERT_EQ(decode_record(bytes, back, used), decode_status::ok);
  EXPECT_EQ(used, bytes.size());
  EXPECT_EQ(back.seq, 42u);
  EXPECT_EQ(back.kind, 'R');
  EXPECT_EQ(back.payload, r.payload);
  EXPECT_EQ(decode_record(bytes.substr(0, 10), back, used), decode_status::incomplete);
  EXPECT_EQ(decode_record(bytes.substr(0, bytes.size() - 1), back, used), decode_status::incomplete);
  auto flipped = bytes;
  flipped[spool_header_size + 2] ^= 1;
  EXPECT_EQ(decode_record(flipped, back, used), decode_status::corrupt);
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_EQ(decode_record(bad_magic, back, used), decode_status::corrupt);
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the standard check value
  std::string_view jid, json;
  ASSERT_TRUE(split_keyed_payload(keyed_payload("2026", "{\"a\":1}"), jid, json));
  EXPECT_EQ(jid, "2026");
  EXPECT_EQ(json, "{\"a\":1}");
  EXPECT_FALSE(split_keyed_payload("ab", jid, json));
}

TEST(PgSpool, AppendReadInOrderReopenKeepsIdentityAndSequence) {
  tmp t;
  std::string id;
  {
    auto s = spool::open(t.path / "sp", 1 << 20);
    ASSERT_TRUE(s);
    id = (*s)->id();
    EXPECT_EQ(id.size(), 32u);
    for (int i = 1; i <= 10; ++i) {
      auto q = (*s)->append(i % 2 ? 'R' : 'L', "rec" + std::to_string(i));
      ASSERT_TRUE(q);
      EXPECT_EQ(*q, static_cast<std::uint64_t>(i));
    }
    auto a = (*s)->read_after(0, 4, 1 << 20);
    ASSERT_EQ(a.size(), 4u);
    EXPECT_EQ(a[0].payload, "rec1");
    EXPECT_EQ(a[3].seq, 4u);
    auto b = (*s)->read_after(4, 100, 1 << 20);  // from the cursor
    ASSERT_EQ(b.size(), 6u);
    EXPECT_EQ(b[0].seq, 5u);
    EXPECT_EQ(b[5].payload, "rec10");
    auto c = (*s)->read_after(7, 100, 1 << 20);  // not at the cursor: from the segment's start
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].seq, 8u);
    EXPECT_TRUE((*s)->read_after(10, 100, 1 << 20).empty());
  }
  // A crash: the spool is opened again; nothing committed, so everything is read again.
  auto s = spool::open(t.path / "sp", 1 << 20);
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)->id(), id);
  EXPECT_EQ((*s)->last_seq(), 10u);
  auto all = (*s)->read_after(0, 100, 1 << 20);
  ASSERT_EQ(all.size(), 10u);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].seq, i + 1);
  EXPECT_EQ(*(*s)->append('R', "rec11"), 11u);
}

TEST(PgSpool, ATornTailIsCutAtOpen) {
  tmp t;
  fs::path seg;
  {
    auto s = spool::open(t.path / "sp", 1 << 20);
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->append('R', "one"));
    ASSERT_TRUE((*s)->append('R', "two"));
  }
  for (auto& e : fs::directory_iterator(t.path / "sp"))
    if (e.path().extension() == ".spool") seg = e.path();
  ASSERT_FALSE(seg.empty());
  const auto whole = fs::file_size(seg);
  {
    // Half of a third record: a write cut by a crash (never acknowledged).
    std::ofstream f(seg, std::ios::binary | std::ios::app);
    auto rec = encode_record({3, 'R', "three"});
    f.write(rec.data(), 10);
  }
  auto s = spool::open(t.path / "sp", 1 << 20);
  ASSERT_TRUE(s);
  EXPECT_EQ(fs::file_size(seg), whole);
  EXPECT_EQ((*s)->last_seq(), 2u);
  EXPECT_EQ((*s)->get_stats().cut_bytes, 10u);
  EXPECT_EQ(*(*s)->append('R', "three"), 3u);
  auto all = (*s)->read_after(0, 100, 1 << 20);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].payload, "three");
}

TEST(PgSpool, SegmentsRollAndCommittedOnesAreRemoved) {
  tmp t;
  auto s = spool::open(t.path / "sp", 1 << 20, 4096);
  ASSERT_TRUE(s);
  const std::string big(1000, 'x');
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*s)->append('R', big));
  EXPECT_GT((*s)->get_stats().segments, 3u);
  // Reads cross segment boundaries in order.
  std::uint64_t after = 0, n = 0;
  for (;;) {
    auto b = (*s)->read_after(after, 3, 1 << 20);
    if (b.empty()) break;
    for (const auto& r : b) EXPECT_EQ(r.seq, ++n);
    after = b.back().seq;
  }
  EXPECT_EQ(n, 20u);
  (*s)->release(12);
  auto rest = (*s)->read_after(12, 100, 1 << 20);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(rest[0].seq, 13u);
  (*s)->release(20);
  EXPECT_EQ((*s)->get_stats().segments, 1u);  // an empty newest one stays
  EXPECT_EQ((*s)->get_stats().bytes, 0u);
  s->reset();
  auto again = spool::open(t.path / "sp", 1 << 20, 4096);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)->last_seq(), 20u);  // the sequence goes on after a restart
  EXPECT_EQ(*(*again)->append('R', "next"), 21u);
}

TEST(PgSpool, AFullSpoolRefuses) {
  tmp t;
  auto s = spool::open(t.path / "sp", 200);
  ASSERT_TRUE(s);
  ASSERT_TRUE((*s)->append('R', std::string(100, 'a')));
  EXPECT_FALSE((*s)->append('R', std::string(100, 'b')));
  (*s)->release(1);  // committed: its segment goes, room again
  EXPECT_TRUE((*s)->append('R', std::string(100, 'b')));
  EXPECT_EQ((*s)->last_seq(), 2u);
}

// ---------------------------------------------------------------- event_return

TEST(PgEvents, ABoundedQueueDropsAndCountsWhileTheDatabaseIsAway) {
  options o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens: every connect is refused at once
  o.connect_timeout = 1;
  o.event_queue_max = 5;
  o.event_blacklist = {"salt/skip/*"};
  o.master_id = "m1";
  master::event_hub hub;
  {
    pg_event_sink sink(o, hub);
    for (int i = 0; i < 20; ++i) hub.fire("salt/test/" + std::to_string(i), wire::value::object());
    hub.fire("salt/skip/x", wire::value::object());  // filtered: neither queued nor dropped
    // The writer may hold one batch out of the queue while it tries to connect.
    EXPECT_EQ(sink.stored(), 0u);
    EXPECT_GE(sink.dropped(), 10u);
    EXPECT_LE(sink.queued(), 5u);
    // Peer events are not this master's to store.
    const auto before = sink.dropped() + sink.queued();
    hub.fire("salt/peer/1", wire::value::object(), {}, master::event_hub::origin::peer);
    EXPECT_EQ(sink.dropped() + sink.queued(), before);
  }  // stops without a database
}

// ---------------------------------------------------------------- reads from the spool

namespace {
options away(const fs::path& spool) {
  options o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens: every connect is refused at once
  o.connect_timeout = 1;
  o.read_wait_ms = 100;
  o.master_id = "m1";
  o.spool_dir = spool;
  return o;
}
}  // namespace

TEST(PgJobStore, WhileTheDatabaseIsAwayReadsAnswerFromTheSpool) {
  tmp t;
  const std::string jid = "20261127000000000001";
  const wire::value load = {{"fun", "test.echo"}, {"jid", jid}, {"tgt", "*"}, {"arg", {"x"}}};
  {
    auto s = job_store_pg::create(away(t.path / "spool"));
    ASSERT_TRUE(s);
    auto& st = **s;
    ASSERT_TRUE(st.save_load(jid, load, {"b", "a"}));
    ASSERT_TRUE(st.add_minions(jid, {"c"}));
    ASSERT_EQ(*st.record_return(jid, "a", {{"id", "a"}, {"jid", jid}, {"fun", "test.echo"}, {"return", "x"},
                                           {"retcode", 0}}),
              master::return_record::stored);
    ASSERT_EQ(*st.record_return(jid, "b", {{"id", "b"}, {"jid", jid}, {"fun", "test.echo"}, {"return", "y\tz"}}),
              master::return_record::stored);
    EXPECT_EQ(st.pending_records(), 5u);  // L, M, M, R, R
    auto rets = st.get_returns(jid);
    EXPECT_EQ(rets["a"]["return"], "x");
    EXPECT_EQ(rets["a"]["retcode"], 0);
    EXPECT_EQ(rets["b"]["return"], "y\tz");
    EXPECT_EQ(st.get_load(jid), load);
    EXPECT_EQ(st.get_minions(jid), (std::vector<std::string>{"a", "b", "c"}));
    auto jobs = st.list_jobs();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].jid, jid);
    EXPECT_EQ(jobs[0].minions, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_FALSE(st.get_load("20261127000000000002"));
    EXPECT_TRUE(st.get_returns("20261127000000000002").empty());
  }
  // A restarted master (the database still away) reads them from the spool it reopens.
  auto s = job_store_pg::create(away(t.path / "spool"));
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)->get_returns(jid)["b"]["return"], "y\tz");
  EXPECT_EQ((*s)->get_load(jid), load);
}

TEST(PgJobStore, ThePendingViewIsBounded) {
  tmp t;
  auto o = away(t.path / "spool");
  o.pending_view_bytes = 600;
  auto s = job_store_pg::create(o);
  ASSERT_TRUE(s);
  const std::string jid = "20261127000000000003";
  ASSERT_TRUE((*s)->save_load(jid, {{"fun", "test.echo"}, {"jid", jid}}, {}));
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE((*s)->record_return(jid, "m" + std::to_string(i), {{"return", std::string(50, 'x')}}));
  EXPECT_LE((*s)->pending_bytes(), 600u);
  EXPECT_GT((*s)->stats().view_skipped.load(), 0u);
  EXPECT_LT((*s)->get_returns(jid).size(), 20u);
  EXPECT_GT((*s)->get_returns(jid).size(), 0u);
}
