// sylvite-join-probe: drives the cluster discover/join handshake (cluster/join.hpp) from
// outside a master, with the product's own message builders and keys, so end-to-end tests
// (tests/e2e/test_cluster_join_refusals.py) can send what a real joiner or member never
// would. Modes:
//   tamper-discover  one cluster/discover whose self-signature has a bit flipped.
//   tamper-join      a valid discover, then a cluster/join whose signature has a bit
//                    flipped (the token, the secret and every other field are right).
//   replay-join      a valid discover and join (the probe's id becomes a member: the
//                    acceptor writes peers/<id>.pub), then the same join body again,
//                    byte for byte.
//   fake-peer        listens on --listen-port like a pool port and plays a member: it
//                    answers cluster/discover with a correct discover-reply from --as
//                    (that master's key, endorsed by the cluster key), and cluster/join
//                    (after checking it as a member would) with a join-reply made and
//                    signed by --reply-as instead. Prints "listening on <port>", then
//                    one line per request; runs until killed.
//   make-discovers   writes --count valid cluster/discover bodies (ids <--id>-0..N-1, one
//                    key, fresh nonces) as one msgpack array to --out, for a flood sent by
//                    a test from chosen source addresses (tests/e2e/test_hardening_cluster.py).
// Client modes print one line per exchange, "<step>: ok <cmd>" or "<step>: error
// <reason>", and exit 0 when every request got a reply (refusals included), 1 otherwise.
#include <CLI/CLI.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "cluster/cluster_pki.hpp"
#include "cluster/join.hpp"
#include "core/crypto/rsa.hpp"
#include "core/transport/transport.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"

namespace cl = sylvite::cluster;
namespace crypto = sylvite::crypto;
namespace transport = sylvite::transport;
namespace wire = sylvite::wire;
namespace fs = std::filesystem;
using wire::value;

namespace {

std::int64_t now() { return static_cast<std::int64_t>(std::time(nullptr)); }

[[noreturn]] void die(const std::string& why) {
  std::cerr << "sylvite-join-probe: " << why << "\n";
  std::exit(2);
}

crypto::rsa_key load_priv(const fs::path& p) {
  auto pem = sylvite::util::read_file(p);
  if (!pem) die("cannot read " + p.string() + ": " + pem.error().message());
  auto k = crypto::rsa_key::from_private_pem(*pem);
  if (!k) die("not a private key: " + p.string());
  return std::move(*k);
}

void flip_sig(value& m) {
  auto s = wire::as_bytes(m["sig"]);
  if (!s || s->empty()) die("message has no signature");
  std::string b(*s);
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x01);
  m["sig"] = wire::make_bin(b);
}

// Send one request; print the step's outcome. nullopt when nothing came back.
std::optional<value> exchange(const transport::endpoint& ep, const std::string& step, const value& body) {
  auto r = transport::request_once(ep, body, std::chrono::milliseconds(10000));
  if (!r) {
    std::cout << step << ": no reply (" << r.error().message() << ")" << std::endl;
    return std::nullopt;
  }
  if (auto e = wire::get_text(*r, "error")) std::cout << step << ": error " << *e << std::endl;
  else std::cout << step << ": ok " << wire::get_text(*r, "cmd").value_or("?") << std::endl;
  return std::move(*r);
}

struct client_opts {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string id, cluster_id, addr = "127.0.0.1:1", secret;
  fs::path key;
};

int make_discovers(const client_opts& o, int count, const fs::path& out) {
  const crypto::rsa_key me = load_priv(o.key);
  value all = value::array();
  for (int i = 0; i < count; ++i)
    all.push_back(cl::make_discover(o.cluster_id, o.id + "-" + std::to_string(i), me.public_pem(), o.addr, me,
                                    crypto::uuid4_hex(), now()));
  if (auto w = sylvite::util::write_file_atomic(out, wire::pack(all, wire::packing::frame), 0600); !w)
    die("cannot write " + out.string() + ": " + w.error().message());
  std::cout << "wrote " << count << " discovers to " << out.string() << std::endl;
  return 0;
}

int run_client(const std::string& mode, const client_opts& o) {
  const transport::endpoint ep{o.host, static_cast<std::uint16_t>(o.port), {}};
  const crypto::rsa_key me = load_priv(o.key);
  const std::string nonce = crypto::uuid4_hex();
  value disc = cl::make_discover(o.cluster_id, o.id, me.public_pem(), o.addr, me, nonce, now());
  if (mode == "tamper-discover") {
    flip_sig(disc);
    return exchange(ep, "discover", disc) ? 0 : 1;
  }
  auto dr = exchange(ep, "discover", disc);
  if (!dr) return 1;
  if (wire::get_text(*dr, "error")) return 0;
  // The probe tests the acceptor, not the pin: it takes the cluster.pub the reply names.
  cl::cluster_pin pin;
  pin.shared_pub_pem = std::string(wire::get_text(*dr, "cluster_pub").value_or(""));
  std::string why;
  auto info = cl::verify_discover_reply(*dr, o.id, nonce, pin, why);
  if (!info) {
    std::cout << "discover-reply: invalid " << why << std::endl;
    return 1;
  }
  value join = cl::make_join(o.id, me, *info, o.secret);
  if (mode == "tamper-join") flip_sig(join);
  if (!exchange(ep, "join", join)) return 1;
  if (mode == "replay-join" && !exchange(ep, "replay", join)) return 1;
  return 0;
}

struct peer_opts {
  int listen_port = 0;
  std::string cluster_id, as_id, reply_as_id, secret;
  fs::path as_key, reply_key, cluster_pki;
};

int run_fake_peer(const peer_opts& o) {
  const crypto::rsa_key as_key = load_priv(o.as_key);
  const crypto::rsa_key reply_key = load_priv(o.reply_key);
  const crypto::rsa_key cluster_key = load_priv(o.cluster_pki / "cluster.pem");
  auto aes = cl::read_aes(o.cluster_pki);
  if (!aes) die("cannot read " + (o.cluster_pki / ".aes").string());
  cl::cluster_identity ident;
  ident.cluster_pem = cluster_key.private_pem();
  ident.cluster_pub_pem = cluster_key.public_pem();
  ident.aes = aes->key;
  for (const auto& [id, k] : cl::list_peer_keys(o.cluster_pki)) ident.peers[id] = k.public_pem();
  ident.peers[o.as_id] = as_key.public_pem();
  ident.peers[o.reply_as_id] = reply_key.public_pem();
  const std::optional<std::string> secret = o.secret;
  cl::pending_joins pending;  // one io thread: no lock

  auto answer = [&](const value& body, const std::string& peer) -> value {
    const std::string cmd(wire::get_text(body, "cmd").value_or(""));
    std::string why;
    if (cmd == "cluster/discover") {
      auto d = cl::verify_discover(body, o.cluster_id, o.as_id, now(), why);
      if (!d) return std::cout << "discover from " << peer << ": refused " << why << std::endl, value{{"error", why}};
      std::cout << "discover from " << d->from << ": discover-reply as " << o.as_id << std::endl;
      return cl::make_discover_reply(o.as_id, as_key, cluster_key, *d, pending.add(*d, now()));
    }
    if (cmd == "cluster/join") {
      auto j = cl::verify_join(body, as_key, secret, false, pending, now(), why);
      if (!j) return std::cout << "join from " << peer << ": refused " << why << std::endl, value{{"error", why}};
      std::cout << "join from " << j->from << ": join-reply as " << o.reply_as_id << std::endl;
      cl::cluster_identity id = ident;
      id.peers[j->from] = j->pub_pem;
      return cl::make_join_reply(o.reply_as_id, reply_key, *j, id);
    }
    std::cout << "request from " << peer << ": unknown cmd '" << cmd << "'" << std::endl;
    return value{{"error", "unknown cmd"}};
  };

  boost::asio::io_context io;
  transport::req_server server(io, transport::endpoint{"127.0.0.1", static_cast<std::uint16_t>(o.listen_port), {}},
                               transport::options{},
                               [&](value body, std::shared_ptr<transport::responder> r) {
                                 r->reply(answer(body, r->peer().address));
                               });
  if (auto r = server.start(); !r) die("cannot listen on port " + std::to_string(o.listen_port) + ": " + r.error().message());
  std::cout << "listening on " << server.bound_port() << std::endl;
  io.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sylvite-join-probe: send crafted cluster discover/join messages, or play a fake member"};
  app.require_subcommand(1);
  client_opts c;
  for (const char* mode : {"tamper-discover", "tamper-join", "replay-join"}) {
    auto* sub = app.add_subcommand(mode, std::string("client mode ") + mode);
    sub->add_option("--host", c.host, "acceptor host (default 127.0.0.1)");
    sub->add_option("--port", c.port, "acceptor's cluster_pool_port")->required();
    sub->add_option("--id", c.id, "the probe's master id")->required();
    sub->add_option("--cluster-id", c.cluster_id, "cluster_id")->required();
    sub->add_option("--key", c.key, "the probe's private key (PEM)")->required();
    sub->add_option("--secret", c.secret, "cluster_secret sent in the join");
    sub->add_option("--addr", c.addr, "bus address announced in the discover (default 127.0.0.1:1)");
  }
  int count = 0;
  fs::path out;
  auto* gen = app.add_subcommand("make-discovers", "write valid discover bodies for a flood");
  gen->add_option("--id", c.id, "id prefix")->required();
  gen->add_option("--cluster-id", c.cluster_id, "cluster_id")->required();
  gen->add_option("--key", c.key, "the signing private key (PEM)")->required();
  gen->add_option("--count", count, "how many")->required();
  gen->add_option("--out", out, "output file (msgpack array)")->required();
  peer_opts p;
  auto* fake = app.add_subcommand("fake-peer", "serve discover/join as a fake member");
  fake->add_option("--listen-port", p.listen_port, "port to listen on, 127.0.0.1 (0: any)");
  fake->add_option("--cluster-id", p.cluster_id, "cluster_id")->required();
  fake->add_option("--as", p.as_id, "member id the discover-reply comes from")->required();
  fake->add_option("--as-key", p.as_key, "that member's master.pem")->required();
  fake->add_option("--reply-as", p.reply_as_id, "member id the join-reply comes from")->required();
  fake->add_option("--reply-key", p.reply_key, "that member's master.pem")->required();
  fake->add_option("--cluster-pki", p.cluster_pki, "dir with cluster.pem, .aes, peers/")->required();
  fake->add_option("--secret", p.secret, "cluster_secret the join must carry");
  CLI11_PARSE(app, argc, argv);
  if (fake->parsed()) return run_fake_peer(p);
  if (gen->parsed()) return make_discovers(c, count, out);
  for (auto* sub : app.get_subcommands()) return run_client(sub->get_name(), c);
  return 2;
}
