// sylvite::minion channel codecs (see channel.hpp). Salt references: salt/channel/client.py
// AsyncReqChannel._package_load / _crypted_transfer / crypted_transfer_decode_dictentry and
// AsyncPubChannel.send_id / _decode_payload / _verify_master_signature (3008.5).
#include "minion/channel.hpp"

#include <spdlog/spdlog.h>

#include <climits>

#include "core/wire/msgpack.hpp"
#include "minion/errors.hpp"

namespace sylvite::minion {

wire::value pillar_load(const std::string& id, const wire::value& grains) {
  wire::value load = wire::value::object();
  load["id"] = id;
  load["grains"] = grains;
  load["saltenv"] = wire::value();
  load["pillarenv"] = wire::value();
  load["pillar_override"] = wire::value::object();
  load["extra_minion_data"] = wire::value::object();
  load["ver"] = "2";
  load["cmd"] = "_pillar";
  return load;
}

wire::value package_aes(wire::value load, const request_identity& who, const crypto::crypticle& session,
                        std::string_view nonce, std::int64_t now_seconds) {
  if (!load.is_object()) load = wire::value::object();
  load["nonce"] = std::string(nonce);
  load["ts"] = now_seconds;
  load["tok"] = wire::make_bin(who.tok);
  load["id"] = who.id;
  wire::value env = wire::value::object();
  env["enc"] = "aes";
  env["load"] = wire::make_bin(session.dumps(load));
  env["version"] = 3;
  env["id"] = who.id;
  env["enc_algo"] = who.enc_name;
  env["sig_algo"] = who.sig_name;
  return env;
}

result<wire::value> decode_aes_reply(const wire::value& reply, const crypto::crypticle& session,
                                     std::string_view nonce) {
  if (reply.is_null()) return wire::value();
  auto bytes = wire::as_bytes(reply);
  if (!bytes) return make_error_code(errc::bad_reply);  // a map or number: not a `send` reply
  if (bytes->empty()) return wire::value();
  auto v = session.loads(*bytes, nonce, /*check_serial=*/false);
  if (!v) {
    spdlog::debug("Cannot decrypt reply ({}): {}", v.error().message(),
                  bytes->size() < 64 ? std::string(*bytes) : std::string("<binary>"));
    return make_error_code(errc::bad_reply);
  }
  return wire::decode_embedded_strs(*v);
}

result<wire::value> decode_private_reply(const wire::value& reply, const crypto::rsa_key& minion_key,
                                         crypto::enc_algo enc, const crypto::rsa_key& master_pub,
                                         crypto::sig_algo sig, std::string_view nonce,
                                         std::string_view dictkey) {
  auto key_ct = wire::get_text(reply, "key");
  if (!reply.is_object() || !key_ct) return make_error_code(errc::bad_reply);
  auto blob = wire::get_text(reply, dictkey);
  if (!blob) return make_error_code(errc::bad_pillar);
  auto one_shot = crypto::oaep_decrypt(minion_key, *key_ct, enc);
  if (!one_shot) return make_error_code(errc::bad_pillar);
  auto pcrypt = crypto::crypticle::from_key_string(*one_shot);
  if (!pcrypt) return make_error_code(errc::bad_pillar);
  auto signed_msg = pcrypt->loads(*blob, {}, /*check_serial=*/false);
  if (!signed_msg || !signed_msg->is_object()) return make_error_code(errc::bad_pillar);
  auto data = wire::get_text(*signed_msg, "data");
  auto dsig = wire::get_text(*signed_msg, "sig");
  if (!data || !dsig) return make_error_code(errc::bad_pillar);
  if (!crypto::verify(master_pub, *data, *dsig, sig)) {
    spdlog::error("Pillar payload signature failed to validate.");
    return make_error_code(errc::bad_pillar);
  }
  auto inner = wire::unpack(*data);
  if (!inner || !inner->is_object()) return make_error_code(errc::bad_pillar);
  if (wire::get_text(*inner, "key").value_or("") != *key_ct) {
    spdlog::error("Key verification failed.");
    return make_error_code(errc::bad_pillar);
  }
  if (wire::get_text(*inner, "nonce").value_or("") != nonce) {
    spdlog::error("Pillar nonce verification failed.");
    return make_error_code(errc::bad_pillar);
  }
  const wire::value* p = wire::find(*inner, dictkey);
  if (!p) return make_error_code(errc::bad_pillar);
  return wire::decode_embedded_strs(*p);
}

wire::value make_hello(const std::string& id, const std::string& tok, const crypto::crypticle& aes) {
  wire::value load = wire::value::object();
  load["id"] = id;
  load["tok"] = wire::make_bin(tok);
  wire::value body = wire::value::object();
  body["enc"] = "aes";
  body["load"] = wire::make_bin(aes.dumps(load));
  body["version"] = 3;
  return body;
}

publish_decoded decode_publish(const wire::value& body, const crypto::crypticle& aes, bool require_sig,
                               const crypto::rsa_key* master_pub, bool reauth_on_bad_sig) {
  publish_decoded out;
  wire::value payload;
  if (body.is_object()) {
    payload = body;
  } else if (auto bytes = wire::as_bytes(body)) {
    auto p = wire::unpack(*bytes);
    if (!p) {
      out.reason = "publish body is not msgpack: " + p.error().message();
      return out;
    }
    payload = std::move(*p);
  } else {
    out.reason = "publish body is neither bytes nor a map";
    return out;
  }
  if (!payload.is_object()) {
    out.reason = "publish payload is not a map";
    return out;
  }
  if (wire::get_text(payload, "enc").value_or("") != "aes") {
    out.verdict = publish_verdict::ignore;
    out.reason = "publish payload is not aes";
    return out;
  }
  auto load = wire::get_text(payload, "load");
  if (!load) {
    out.reason = "publish payload has no load";
    return out;
  }
  if (require_sig) {
    auto sig = wire::get_text(payload, "sig");
    if (!sig) {
      out.reason = "Message signing is enabled but the payload has no signature.";
      return out;
    }
    auto algo = crypto::parse_sig_algo(wire::get_text(payload, "sig_algo").value_or("PKCS1v15-SHA1"));
    if (!algo || !master_pub || !crypto::verify(*master_pub, *load, *sig, *algo)) {
      out.reason = "Message signature failed to validate.";
      if (reauth_on_bad_sig) {
        out.verdict = publish_verdict::reauth;
        out.reason += " The master key may have been rotated: re-authenticating.";
      }
      return out;
    }
  }
  // Only a MAC failure drives re-authentication (Salt's AuthenticationError); a stale
  // serial or a missing pickle:: prefix is dropped (Salt yields {} and ignores it).
  std::int64_t serial = INT64_MIN;  // loads() sets it when the load has one
  auto v = aes.loads(*load, {}, /*check_serial=*/true, &serial);
  if (!v) {
    if (v.error() == crypto::errc::bad_mac) {
      out.verdict = publish_verdict::reauth;
      out.reason = "message authentication failed";
    } else if (v.error() == crypto::errc::stale_serial) {
      out.reason = "A message with an invalid serial was received. The minion will not honor this request.";
    } else {
      out.reason = "publish load could not be decoded: " + v.error().message();
    }
    return out;
  }
  if (!v->is_object()) {
    out.reason = "publish load is not a map";
    return out;
  }
  out.verdict = publish_verdict::ok;
  if (serial != INT64_MIN) out.serial = serial;
  out.load = wire::decode_embedded_strs(*v);
  return out;
}

}  // namespace sylvite::minion
