// fuzz_auth: the master's request port (master_core::handle_request) with untrusted
// bytes. First byte picks the mode:
//   0: the rest is a msgpack frame body, handed over as is (envelope checks, _auth)
//   1: the rest is a msgpack load, sent as a clear `_auth` load (v3 envelope)
//   2: the rest is a msgpack load, encrypted with the session key of the accepted
//      minion "fz" in a v3 AES envelope with a valid tok (reaches the AES commands)
// Invariant: handle_request never throws or crashes and always answers.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/crypto/crypticle.hpp"
#include "core/crypto/rsa.hpp"
#include "core/wire/msgpack.hpp"
#include "master/master.hpp"

namespace {

using sylvite::wire::value;
namespace fs = std::filesystem;

struct state {
  fs::path dir;
  std::unique_ptr<sylvite::master::master_core> core;
  sylvite::crypto::rsa_key minion;
  std::string tok;
  std::string session;
};

state& get() {
  static state* s = [] {
    auto* st = new state;
    st->dir = fs::temp_directory_path() / ("sylvite-fuzz-auth-" + std::to_string(::getpid()));
    fs::remove_all(st->dir);
    sylvite::config::master_config cfg;
    cfg.id = "fuzzmaster";
    cfg.pki_dir = st->dir / "pki";
    cfg.cachedir = st->dir / "cache";
    cfg.sock_dir = st->dir / "sock";
    cfg.file_roots = {{"base", {(st->dir / "srv/salt").string()}}};
    cfg.pillar_roots = {{"base", {(st->dir / "srv/pillar").string()}}};
    cfg.keysize = 1024;  // speed; any size works
    auto c = sylvite::master::master_core::create(cfg);
    if (!c) std::abort();
    st->core = std::move(*c);
    auto k = sylvite::crypto::rsa_key::generate(1024);
    if (!k) std::abort();
    st->minion = std::move(*k);
    (void)st->core->key_store().write(sylvite::pki::key_state::accepted, "fz", st->minion.public_pem());
    st->tok = *sylvite::crypto::x931_sign(st->minion, "salt");
    st->session = (*st->core->sessions().get_or_create("fz"))->key_string();
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(get().dir, ec);
    });
    return st;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  auto& st = get();
  const int mode = data[0] % 3;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  auto v = sylvite::wire::unpack(rest);
  if (!v) return 0;
  value body;
  if (mode == 0) {
    body = *v;
  } else if (mode == 1) {
    body = value{{"enc", "clear"}, {"load", *v}, {"version", 3}};
  } else {
    value load = *v;
    if (load.is_object()) {
      load["id"] = "fz";
      load["tok"] = sylvite::wire::make_bin(st.tok);
      if (!load.contains("nonce")) load["nonce"] = "0123456789abcdef0123456789abcdef";
    }
    auto c = sylvite::crypto::crypticle::from_key_string(st.session);
    body = value{{"enc", "aes"}, {"load", sylvite::wire::make_bin(c->dumps(load))}, {"version", 3}, {"id", "fz"},
                 {"enc_algo", "OAEP-SHA1"}, {"sig_algo", "PKCS1v15-SHA1"}};
  }
  value reply = st.core->handle_request(body, "fuzz");
  (void)sylvite::wire::pack(reply, sylvite::wire::packing::frame);
  return 0;
}
