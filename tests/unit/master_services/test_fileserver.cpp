// fileserver: roots backend answers (shapes as Salt 3008), traversal refusals, chunking at
// buffer boundaries, hashes equal to coreutils' sha256sum/md5sum, prefixes, empty dirs,
// symlinks; master_opts_reply.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "master/fileserver.hpp"
#include "test_util.hpp"

using namespace sylvite;
using sylvite::test::temp_dir;
using sylvite::test::write;
namespace fs = std::filesystem;

namespace {

struct tree {
  temp_dir d;
  fs::path r1, r2, dev;
  config::master_config cfg;
  tree() {
    r1 = d / "r1";
    r2 = d / "r2";
    dev = d / "dev";
    write(r1 / "top.sls", "base:\n  '*':\n    - a\n");
    write(r1 / "a/b.txt", "from r1\n");
    write(r1 / "a/deep/x.sls", "x: 1\n");
    write(r1 / ".hidden", "h");
    fs::create_directories(r1 / "empty");
    fs::create_directories(r1 / "_modules");
    write(r1 / "_modules/mod.py", "pass\n");
    fs::create_symlink("a/b.txt", r1 / "link_in");
    fs::create_symlink("a", r1 / "linkdir");
    fs::create_symlink("/etc/passwd", r1 / "link_out");
    fs::create_symlink("../r2", r1 / "link_up");  // resolves outside r1
    fs::create_symlink("nothing-here", r1 / "dangling");
    write(r2 / "a/b.txt", "from r2 (shadowed)\n");
    write(r2 / "c.txt", "only in r2\n");
    fs::create_directories(r2 / "empty2");
    write(dev / "devfile", "dev\n");
    write(d / "secret", "secret\n");
    cfg.file_roots = {{"base", {r1.string(), r2.string()}}, {"dev", {dev.string()}}};
    cfg.file_buffer_size = 4096;
  }
};

wire::value req(std::initializer_list<std::pair<const char*, wire::value>> kv) {
  wire::value l = wire::value::object();
  l["id"] = "minion1";
  for (auto& [k, v] : kv) l[k] = v;
  return l;
}

std::string sum(const std::string& tool, const fs::path& p) {
  auto out = sylvite::test::run(tool + " '" + p.string() + "'");
  return out.substr(0, out.find(' '));
}

std::string bytes_of(const wire::value& v) {
  auto b = wire::as_bytes(v);
  return b ? std::string(*b) : std::string("<not bytes>");
}

}  // namespace

TEST(Fileserver, Handles) {
  for (auto c : {"_file_envs", "_file_list", "_file_list_emptydirs", "_dir_list", "_symlink_list", "_file_hash",
                 "_file_hash_and_stat", "_file_find", "_serve_file"})
    EXPECT_TRUE(master::fileserver::handles(c)) << c;
  EXPECT_FALSE(master::fileserver::handles("_pillar"));
  EXPECT_FALSE(master::fileserver::handles("_master_opts"));
}

TEST(Fileserver, EnvsAndLists) {
  tree t;
  master::fileserver fsrv(t.cfg);
  EXPECT_EQ(fsrv.handle("_file_envs", req({})), wire::value::array({"base", "dev"}));
  auto files = fsrv.handle("_file_list", req({{"saltenv", "base"}}));
  EXPECT_EQ(files, wire::value::array({".hidden", "_modules/mod.py", "a/b.txt", "a/deep/x.sls", "c.txt",
                                       "link_in", "linkdir/b.txt", "linkdir/deep/x.sls", "top.sls"}))
      << files.dump();
  // saltenv missing or null -> base
  EXPECT_EQ(fsrv.handle("_file_list", req({})), files);
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", nullptr}})), files);
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "dev"}})), wire::value::array({"devfile"}));
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "nope"}})), wire::value::array());
  // prefix: stripped of '/', plain startswith (as Salt)
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "base"}, {"prefix", "_modules"}})),
            wire::value::array({"_modules/mod.py"}));
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "base"}, {"prefix", "/a/"}})),
            wire::value::array({"a/b.txt", "a/deep/x.sls"}));
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "base"}, {"prefix", "_states"}})), wire::value::array());
  EXPECT_EQ(fsrv.handle("_dir_list", req({{"saltenv", "base"}})),
            wire::value::array({"_modules", "a", "a/deep", "empty", "empty2", "linkdir", "linkdir/deep"}));
  EXPECT_EQ(fsrv.handle("_file_list_emptydirs", req({{"saltenv", "base"}})), wire::value::array({"empty", "empty2"}));
  EXPECT_EQ(fsrv.handle("_file_list_emptydirs", req({{"saltenv", "base"}, {"prefix", "empty2"}})),
            wire::value::array({"empty2"}));
  wire::value links = wire::value::object();
  links["link_in"] = "a/b.txt";
  links["linkdir"] = "a";
  EXPECT_EQ(fsrv.handle("_symlink_list", req({{"saltenv", "base"}})), links);
  EXPECT_EQ(fsrv.handle("_symlink_list", req({{"saltenv", "base"}, {"prefix", "linkd"}})).size(), 1u);
  EXPECT_EQ(fsrv.handle("_symlink_list", req({{"saltenv", "nope"}})), wire::value::object());
}

TEST(Fileserver, SymlinkLoopDoesNotHang) {
  tree t;
  fs::create_symlink("..", t.r1 / "a" / "loop");
  master::fileserver fsrv(t.cfg);
  auto files = fsrv.handle("_file_list", req({{"saltenv", "base"}}));
  EXPECT_TRUE(files.is_array());
  EXPECT_LT(files.size(), 10000u);
}

TEST(Fileserver, HashMatchesCoreutils) {
  tree t;
  std::string big(300000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) & 0xff);
  write(t.r1 / "big.bin", big);
  master::fileserver fsrv(t.cfg);
  for (std::string f : {"top.sls", "big.bin", "a/b.txt"}) {
    auto h = fsrv.handle("_file_hash", req({{"path", f}, {"saltenv", "base"}}));
    ASSERT_TRUE(h.is_object()) << f;
    EXPECT_EQ(h["hash_type"], "sha256");
    EXPECT_EQ(h["hsum"], sum("sha256sum", t.r1 / f)) << f;
    EXPECT_EQ(h.begin().key(), "hash_type");  // Salt's key order
  }
  // The first root wins: a/b.txt from r1, c.txt from r2.
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "c.txt"}}))["hsum"], sum("sha256sum", t.r2 / "c.txt"));
  // Changed file -> new hash (no stale memo).
  write(t.r1 / "a/b.txt", "changed content, other size\n");
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "a/b.txt"}}))["hsum"], sum("sha256sum", t.r1 / "a/b.txt"));
  // Missing -> exactly "".
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "missing.sls"}, {"saltenv", "base"}})), "");
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"saltenv", "base"}})), "");
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "top.sls"}, {"saltenv", "nope"}})), "");
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "a"}})), "");  // a directory
  // hash_type from the config
  t.cfg.hash_type = "md5";
  master::fileserver md5srv(t.cfg);
  auto h = md5srv.handle("_file_hash", req({{"path", "big.bin"}}));
  EXPECT_EQ(h["hash_type"], "md5");
  EXPECT_EQ(h["hsum"], sum("md5sum", t.r1 / "big.bin"));
  // _file_hash_and_stat: [hash, stat]
  auto hs = fsrv.handle("_file_hash_and_stat", req({{"path", "top.sls"}}));
  ASSERT_TRUE(hs.is_array());
  EXPECT_EQ(hs[0]["hsum"], sum("sha256sum", t.r1 / "top.sls"));
  EXPECT_EQ(hs[1][6], fs::file_size(t.r1 / "top.sls"));
  EXPECT_EQ(fsrv.handle("_file_hash_and_stat", req({{"path", "nope"}})), wire::value::array({"", nullptr}));
}

TEST(Fileserver, TraversalRefused) {
  tree t;
  t.cfg.file_buffer_size = 1 << 20;
  master::fileserver fsrv(t.cfg);
  wire::value nf = wire::value::object();
  nf["data"] = "";
  nf["dest"] = "";
  wire::value nf_find = wire::value::object();
  nf_find["path"] = "";
  nf_find["rel"] = "";
  const std::vector<std::string> bads = {"../secret", "a/../../secret", "/etc/passwd", std::string("top.sls\0x", 9),
                                         "link_out", "link_up/c.txt", "..", "", "dangling", "a/../../r1/top.sls"};
  for (const auto& bad : bads) {
    EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", bad}})), "") << bad;
    EXPECT_EQ(fsrv.handle("_serve_file", req({{"path", bad}, {"loc", 0}})), nf) << bad;
    EXPECT_EQ(fsrv.handle("_file_find", req({{"path", bad}})), nf_find) << bad;
  }
  // "." components and doubled slashes are normalised (os.path.normpath), not refused.
  auto ok = fsrv.handle("_serve_file", req({{"path", "./a//b.txt"}, {"loc", 0}}));
  EXPECT_EQ(ok["dest"], "a/b.txt");
  EXPECT_EQ(bytes_of(ok["data"]), "from r1\n");
  // A link inside the root is served.
  EXPECT_EQ(bytes_of(fsrv.handle("_serve_file", req({{"path", "link_in"}, {"loc", 0}}))["data"]), "from r1\n");
  // Bad loc / missing fields.
  EXPECT_EQ(fsrv.handle("_serve_file", req({{"path", "top.sls"}, {"loc", -1}})), nf);
  EXPECT_EQ(fsrv.handle("_serve_file", req({{"path", "top.sls"}, {"loc", "x"}})), nf);
  EXPECT_EQ(fsrv.handle("_serve_file", req({{"path", "top.sls"}})), nf);
  EXPECT_EQ(fsrv.handle("_serve_file", req({{"loc", 0}})), nf);
  // Non-map load, wrong types: no throw, empty answers.
  EXPECT_EQ(fsrv.handle("_file_hash", wire::value::array({1, 2})), "");
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", wire::value::array()}})).is_array(), true);
  EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", 5}})), "");
}

TEST(Fileserver, ServeChunksAtBufferBoundaries) {
  tree t;
  const std::size_t N = 4096;
  std::string exact(3 * N, 'x');
  for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<char>(i % 251);
  write(t.r1 / "exact.bin", exact);
  write(t.r1 / "plus1.bin", exact + "!");
  write(t.r1 / "zero.bin", "");
  master::fileserver fsrv(t.cfg);

  auto fetch = [&](const std::string& path, int* requests) {
    std::string got;
    *requests = 0;
    for (;;) {
      auto r = fsrv.handle("_serve_file", req({{"path", path}, {"saltenv", "base"}, {"loc", got.size()}}));
      ++*requests;
      EXPECT_EQ(r["dest"], path);
      EXPECT_TRUE(r["data"].is_binary());
      EXPECT_FALSE(r.contains("hsum"));  // off by default (see fileserver_options)
      std::string chunk = bytes_of(r["data"]);
      EXPECT_LE(chunk.size(), N);
      if (chunk.empty()) break;
      got += chunk;
      if (*requests > 100) break;
    }
    return got;
  };
  int n = 0;
  EXPECT_EQ(fetch("exact.bin", &n), exact);
  EXPECT_EQ(n, 4);  // 3 full chunks + the empty EOF chunk
  EXPECT_EQ(fetch("plus1.bin", &n), exact + "!");
  EXPECT_EQ(n, 5);
  EXPECT_EQ(fetch("zero.bin", &n), "");
  EXPECT_EQ(n, 1);
  // Reading past the end is just EOF.
  auto past = fsrv.handle("_serve_file", req({{"path", "exact.bin"}, {"loc", 10 * N}}));
  EXPECT_EQ(bytes_of(past["data"]), "");
  EXPECT_EQ(past["dest"], "exact.bin");
  // Exact chunk at N: bytes N..2N-1.
  auto mid = fsrv.handle("_serve_file", req({{"path", "exact.bin"}, {"loc", N}}));
  EXPECT_EQ(bytes_of(mid["data"]), exact.substr(N, N));
  // gzip requested: served plain, no "gzip" key (the minion then uses data as is).
  auto gz = fsrv.handle("_serve_file", req({{"path", "exact.bin"}, {"loc", 0}, {"gzip", 5}}));
  EXPECT_FALSE(gz.contains("gzip"));
  EXPECT_EQ(bytes_of(gz["data"]), exact.substr(0, N));
  // Key order as Salt's roots.serve_file: data, dest.
  EXPECT_EQ(mid.begin().key(), "data");

  master::fileserver with_hsum(t.cfg, master::fileserver_options{true});
  auto last = with_hsum.handle("_serve_file", req({{"path", "exact.bin"}, {"loc", 3 * N}}));
  EXPECT_EQ(bytes_of(last["data"]), "");
  EXPECT_EQ(last["hsum"], sum("sha256sum", t.r1 / "exact.bin"));
  EXPECT_EQ(last["hash_type"], "sha256");
  EXPECT_FALSE(with_hsum.handle("_serve_file", req({{"path", "exact.bin"}, {"loc", 0}})).contains("hsum"));
}

TEST(Fileserver, FileFind) {
  tree t;
  master::fileserver fsrv(t.cfg);
  auto f = fsrv.handle("_file_find", req({{"path", "c.txt"}, {"saltenv", "base"}}));
  EXPECT_EQ(f["path"], (t.r2 / "c.txt").string());
  EXPECT_EQ(f["rel"], "c.txt");
  EXPECT_EQ(f["back"], "roots");
  struct stat st {};
  ASSERT_EQ(::stat((t.r2 / "c.txt").c_str(), &st), 0);
  ASSERT_EQ(f["stat"].size(), 10u);
  EXPECT_EQ(f["stat"][0], st.st_mode);
  EXPECT_EQ(f["stat"][1], st.st_ino);
  EXPECT_EQ(f["stat"][6], st.st_size);
  EXPECT_EQ(f["stat"][8], st.st_mtime);
  auto dev = fsrv.handle("_file_find", req({{"path", "devfile"}, {"saltenv", "dev"}}));
  EXPECT_EQ(dev["rel"], "devfile");
  // Salt's "?saltenv=" query form.
  EXPECT_EQ(fsrv.handle("_file_find", req({{"path", "devfile?saltenv=dev"}}))["rel"], "devfile");
}

TEST(Fileserver, EnvPlaceholderRoot) {
  temp_dir d;
  write(d / "envs/feature1/f.sls", "x: 1\n");
  config::master_config cfg;
  cfg.file_roots = {{"__env__", {(d.path / "envs/__env__").string()}}};
  master::fileserver fsrv(cfg);
  EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", "feature1"}})), wire::value::array({"f.sls"}));
  EXPECT_EQ(fsrv.handle("_file_find", req({{"path", "f.sls"}, {"saltenv", "feature1"}}))["rel"], "f.sls");
}

// Issue 14 item 4: saltenv=../../pki with an __env__ root would serve master.pem.
TEST(Fileserver, EnvPlaceholderRefusesTraversalSaltenv) {
  temp_dir d;
  write(d / "srv/envs/dev/ok.txt", "dev\n");
  write(d / "pki/master.pem", "-----BEGIN RSA PRIVATE KEY-----\nsecret\n");
  config::master_config cfg;
  cfg.file_roots = {{"__env__", {(d.path / "srv/envs/__env__").string()}}};
  master::fileserver fsrv(cfg);
  for (const char* env : {"../../pki", "..", "../envs/dev", "a/../../../pki", "/", "x\\y"}) {
    EXPECT_EQ(fsrv.handle("_file_find", req({{"path", "master.pem"}, {"saltenv", env}}))["rel"], "") << env;
    EXPECT_EQ(fsrv.handle("_file_hash", req({{"path", "master.pem"}, {"saltenv", env}})), "") << env;
    EXPECT_EQ(fsrv.handle("_serve_file", req({{"path", "master.pem"}, {"saltenv", env}, {"loc", 0}}))["data"], "")
        << env;
    EXPECT_EQ(fsrv.handle("_file_list", req({{"saltenv", env}})), wire::value::array()) << env;
    // the "?saltenv=" query form goes through the same check
    EXPECT_EQ(fsrv.handle("_file_find", req({{"path", std::string("master.pem?saltenv=") + env}}))["rel"], "");
  }
  EXPECT_EQ(fsrv.handle("_file_find", req({{"path", "ok.txt"}, {"saltenv", "dev"}}))["rel"], "ok.txt");
}

TEST(Fileserver, ValidSaltenvNames) {
  for (const char* ok : {"base", "dev", "feature-1_x.y", "..x", "x..", "é"}) EXPECT_TRUE(master::valid_saltenv(ok)) << ok;
  for (std::string bad : {std::string(), std::string("."), std::string(".."), std::string("a/b"), std::string("../x"),
                          std::string("a\\b"), std::string("a\nb"), std::string("a\0b", 3), std::string(256, 'a')})
    EXPECT_FALSE(master::valid_saltenv(bad)) << bad;
}

TEST(Fileserver, MasterOptsReply) {
  config::master_config cfg;
  cfg.file_roots = {{"base", {"/srv/salt"}}, {"prod", {"/srv/prod"}}};
  auto full = master::master_opts_reply(cfg, req({}));
  std::vector<std::string> keys;
  for (auto it = full.begin(); it != full.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"file_roots", "top_file_merging_strategy", "env_order", "default_top",
                                            "renderer", "failhard", "state_top", "state_top_saltenv", "nodegroups",
                                            "state_auto_order", "state_events", "state_aggregate", "jinja_env",
                                            "jinja_sls_env", "jinja_lstrip_blocks", "jinja_trim_blocks"}));
  wire::value roots = wire::value::object();
  roots["base"] = wire::value::array();
  roots["prod"] = wire::value::array();
  EXPECT_EQ(full["file_roots"], roots);
  EXPECT_EQ(full["renderer"], "jinja|yaml");
  EXPECT_EQ(full["state_top"], "top.sls");
  EXPECT_EQ(full["top_file_merging_strategy"], "merge");
  EXPECT_EQ(full["env_order"], wire::value::array());
  EXPECT_EQ(full["default_top"], "base");
  EXPECT_EQ(full["failhard"], false);
  EXPECT_TRUE(full["state_top_saltenv"].is_null());
  EXPECT_EQ(full["nodegroups"], wire::value::object());
  EXPECT_EQ(full["state_auto_order"], true);
  EXPECT_EQ(full["state_events"], false);
  EXPECT_EQ(full["state_aggregate"], false);
  EXPECT_EQ(full["jinja_env"], wire::value::object());
  EXPECT_EQ(full["jinja_lstrip_blocks"], false);

  auto env_only = master::master_opts_reply(cfg, req({{"env_only", true}}));
  EXPECT_EQ(env_only.size(), 4u);
  EXPECT_TRUE(env_only.contains("file_roots"));
  EXPECT_FALSE(env_only.contains("renderer"));

  // Values from the config.
  cfg.raw["failhard"] = true;
  cfg.raw["env_order"] = wire::value::array({"prod", "base"});
  cfg.nodegroups = {{"web", "web*"}};
  auto c = master::master_opts_reply(cfg, req({}));
  EXPECT_EQ(c["failhard"], true);
  EXPECT_EQ(c["env_order"], wire::value::array({"prod", "base"}));
  EXPECT_EQ(c["nodegroups"]["web"], "web*");
}
