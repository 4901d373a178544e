// fuzz_peer: the cluster peer protocol's verifiers with untrusted bytes (a peer, or
// anyone who can reach cluster_pool_port). First byte picks the mode:
//   0: the rest is a msgpack value given to verify_hello
//   1: ... to verify_welcome
//   2: ... to open_batch under a fixed link key (its "data" field is also fed as is)
//   3: the rest is encrypted with the link key as the inner batch map (reaches the
//      message parsing after a valid MAC)
// Invariant: nothing throws, crashes or accepts garbage as valid.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cluster/peer_protocol.hpp"
#include "core/crypto/crypticle.hpp"
#include "core/wire/msgpack.hpp"

namespace {
using namespace sylvite;

struct state {
  crypto::rsa_key me;
  crypto::crypticle link;
  cluster::key_lookup keys;
};

state& get() {
  static state* s = [] {
    auto* st = new state;
    st->me = crypto::rsa_key::generate(1024).value();
    st->link = crypto::crypticle::from_key_string(crypto::crypticle::generate_key_string()).value();
    const std::string pub = st->me.public_pem();
    st->keys = [pub](const std::string& id) -> std::optional<crypto::rsa_key> {
      if (id == "peer") return crypto::rsa_key::from_public_pem(pub).value();
      return std::nullopt;
    };
    return st;
  }();
  return *s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  auto& s = get();
  const int mode = data[0] % 4;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string why;
  if (mode == 3) {
    auto v = wire::unpack(rest);
    if (!v) return 0;
    wire::value outer = wire::value::object();
    outer["cmd"] = "cluster/msg";
    outer["link"] = std::string(32, 'l');
    outer["data"] = wire::make_bin(s.link.dumps(*v));
    (void)cluster::open_batch(s.link, outer, 1, why);
    return 0;
  }
  auto v = wire::unpack(rest);
  if (!v) return 0;
  switch (mode) {
    case 0:
      if (cluster::verify_hello(*v, "c", "me", s.keys, 1'800'000'000, why)) __builtin_trap();  // unsigned garbage
      break;
    case 1:
      if (cluster::verify_welcome(*v, "me", s.me, std::string(32, 'n'), s.keys, why)) __builtin_trap();
      break;
    case 2:
      (void)cluster::open_batch(s.link, *v, 1, why);
      (void)cluster::open_ack(s.link, *v, 1, why);
      break;
  }
  return 0;
}
