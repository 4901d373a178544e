// sylvite::cluster typed peer-bus messages (sans-I/O): the application messages masters
// exchange inside sealed batches ({type, body}, peer_protocol.hpp), one struct per type
// with one encode/decode pair, and the one table saying which thread runs each type.
//
// type          body (map, keys in this order on the wire)          lane
//   publish     {jid, frame: bin, targets: [id] | nil}               relay   (bus thread)
//   return      {jid, id, load}                                       relay
//   aes         {why, key, gen?}                                      control (one thread)
//   aes-rotate  {why}                                                 control
//   key         {act, ids: [id], local: bool, pubs?: {id: pem}}       control
//   cluster-key {pub, sealed: {id: sealed box}}                       control
//   key-sync    {for, seq}                                            control
//   keys        {accepted: {id: pem}, rejected: {id: pem}, for?, seq?, aes?, aes_gen?} control
//   join        {id, pub, addr, local: bool}                          membership (the bus)
//   leave       {id}                                                  membership
//   event       {tag, data: map, origin: master id, eid?: text}       relay
//   presence    {full: bool, minions: {id: [connected, last_ms]}, aes?: text}  relay
// Relay messages are memory-only and run at once on the bus thread; control messages read
// or write the shared file system (which can stall) and run on one control thread, in
// arrival order; membership messages are handled by the bus itself.
// The bytes are those of the hand-built maps of earlier versions (same type strings, keys
// and key order), so masters of both kinds work in one cluster.
// decode() refuses unknown types and malformed fields (missing, wrong type) with a reason;
// rules about values (valid ids, what an act means) stay with the handlers.
// Thread-safety: free functions over plain values.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cluster/peer_protocol.hpp"
#include "core/wire/value.hpp"

namespace sylvite::cluster {

// id -> PEM text, in the order sent.
using id_pems = std::vector<std::pair<std::string, std::string>>;
// The PEM for id, nullptr if absent.
const std::string* find_pem(const id_pems& m, std::string_view id);

namespace msg {
// A job published on a peer: the same frame goes to the minions connected here.
struct publish {
  std::string jid;
  std::string frame;                                // bytes of the publish frame
  std::optional<std::vector<std::string>> targets;  // nullopt: every minion (nil on the wire)
};
// A minion's return for a job another master published.
struct ret {
  std::string jid;
  std::string id;  // a valid minion id (checked at decode)
  wire::value load;
};
// The cluster AES key was rotated (the key rides along for local-copy masters). gen: its
// generation (cluster_pki.hpp aes_file), absent from older senders.
struct aes {
  std::string why;
  std::optional<std::string> key;
  std::optional<std::int64_t> gen;
};
// A local-copy master asks a master on the share to rotate the AES key.
struct aes_rotate {
  std::string why;
};
// salt-key accepted / rejected / deleted keys on a peer.
struct key_event {
  std::string act;
  std::vector<std::string> ids;
  bool local = false;            // the sender's cluster_pki_dir is a local copy
  std::optional<id_pems> pubs;   // accept: the keys themselves
};
// salt-run cluster.rotate_key: the new cluster public key, the private key sealed to each
// member (seal_to(), cluster/join.hpp).
struct cluster_key {
  std::string pub;
  std::vector<std::pair<std::string, wire::value>> sealed;
  const wire::value* sealed_for(std::string_view id) const;  // nullptr if none
};
// A local-copy master asks for the minion keys.
struct key_sync {
  std::optional<std::string> asker;  // "for"
  std::optional<std::int64_t> seq;
};
// The minion keys of the share (answer to key_sync; for/seq echoed), and the share's AES
// key with its generation (a local copy that missed an aes message catches up here).
// share: the sender's cluster_pki_dir is the share and every key in it was listed and
// read; only such a snapshot removes keys on a local copy (absent from older senders).
struct keys {
  id_pems accepted;
  id_pems rejected;
  std::optional<std::string> asker;  // "for"
  std::optional<std::int64_t> seq;
  std::optional<std::string> aes;
  std::optional<std::int64_t> aes_gen;
  bool share = false;
  // Ids in minions_pre/ (a member on the share; ids only): a local copy sends a pending
  // key of its own again until the share lists it (cluster/unsettled_keys.hpp).
  std::vector<std::string> pending;
};
// A master joined through the sender (cluster/join.hpp).
struct join {
  std::string id;
  std::string pub;
  std::string addr;
  bool local = false;
};
// salt-run cluster.remove on the sender.
struct leave {
  std::string id;
};
// An event first fired on the sender's bus (master/cluster_node: every master's bus
// carries every event of the cluster once). tag: text of at most 512 bytes, not empty;
// data: a map (Salt's event data); origin: the master that fired it (valid id); eid: the
// origin's unique id of the event (a batch sent again after a link reconnects carries
// the same eids: the receiver fires each once).
struct event {
  std::string tag;
  wire::value data;
  std::string origin;
  std::optional<std::string> eid;
};
// The sender's minions (master/presence.hpp): which hold a publish connection to it and
// when it last heard from each (ms since the epoch, 0: never); full: the whole table
// (replaces what it said before), else the changes since its last message. aes: the id
// of the AES key it serves (cluster.peers compares them).
struct presence_minion {
  std::string id;  // a valid minion id (checked at decode)
  bool connected = false;
  std::int64_t last_ms = 0;
};
struct presence {
  bool full = false;
  std::vector<presence_minion> minions;
  std::optional<std::string> aes;
};
}  // namespace msg

// Alternatives in peer_kind order.
using peer_msg = std::variant<msg::publish, msg::ret, msg::aes, msg::aes_rotate, msg::key_event, msg::cluster_key,
                              msg::key_sync, msg::keys, msg::join, msg::leave, msg::event, msg::presence>;

enum class peer_kind : std::uint8_t {
  publish, ret, aes, aes_rotate, key, cluster_key, key_sync, keys, join, leave, event, presence
};
// Which thread runs a message (see the table at the top).
enum class peer_lane : std::uint8_t { relay, control, membership };

struct peer_kind_info {
  peer_kind kind;
  std::string_view type;  // on the wire
  peer_lane lane;
};
// The one place that names each type and says where it runs.
inline constexpr std::array<peer_kind_info, 12> k_peer_kinds{{
    {peer_kind::publish, "publish", peer_lane::relay},
    {peer_kind::ret, "return", peer_lane::relay},
    {peer_kind::aes, "aes", peer_lane::control},
    {peer_kind::aes_rotate, "aes-rotate", peer_lane::control},
    {peer_kind::key, "key", peer_lane::control},
    {peer_kind::cluster_key, "cluster-key", peer_lane::control},
    {peer_kind::key_sync, "key-sync", peer_lane::control},
    {peer_kind::keys, "keys", peer_lane::control},
    {peer_kind::join, "join", peer_lane::membership},
    {peer_kind::leave, "leave", peer_lane::membership},
    {peer_kind::event, "event", peer_lane::relay},
    {peer_kind::presence, "presence", peer_lane::relay},
}};
static_assert(std::variant_size_v<peer_msg> == k_peer_kinds.size());
constexpr bool peer_kinds_in_order() {
  for (std::size_t i = 0; i < k_peer_kinds.size(); ++i)
    if (static_cast<std::size_t>(k_peer_kinds[i].kind) != i) return false;
  return true;
}
static_assert(peer_kinds_in_order(), "k_peer_kinds must list peer_kind in order (= peer_msg alternatives)");
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(peer_kind::leave), peer_msg>, msg::leave>);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(peer_kind::event), peer_msg>, msg::event>);

constexpr const peer_kind_info& info_of(peer_kind k) { return k_peer_kinds[static_cast<std::size_t>(k)]; }
constexpr std::string_view type_of(peer_kind k) { return info_of(k).type; }
constexpr peer_lane lane_of(peer_kind k) { return info_of(k).lane; }
constexpr std::optional<peer_kind> kind_of(std::string_view type) {
  for (const auto& i : k_peer_kinds)
    if (i.type == type) return i.kind;
  return std::nullopt;
}
// Lane by wire type; an unknown type runs on the control lane, where decode refuses it.
constexpr peer_lane lane_of(std::string_view type) {
  auto k = kind_of(type);
  return k ? lane_of(*k) : peer_lane::control;
}
inline peer_kind kind_of(const peer_msg& m) { return static_cast<peer_kind>(m.index()); }

// {type, body} for the wire (the bytes of earlier versions' hand-built maps).
peer_message encode(const peer_msg& m);
// The typed message; nullopt for an unknown type or a malformed body, the reason in why.
std::optional<peer_msg> decode(std::string_view type, const wire::value& body, std::string& why);
inline std::optional<peer_msg> decode(const peer_message& m, std::string& why) { return decode(m.type, m.body, why); }

}  // namespace sylvite::cluster
