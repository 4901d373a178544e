// eauth_service (master/api/eauth.hpp): Salt 3008.5's LoadAuth (authenticate_eauth,
// time_auth, mk_token, get_tok, rm_token, get_auth_list), its token store and the
// master's authorization calls (ClearFuncs.publish -> CkMinions.auth_check,
// ClearFuncs.runner/wheel -> runner_check/wheel_check), over the pure ACL functions of
// eauth_acl.hpp and the backends of eauth_backends.hpp.
//
// Token store: Salt 3008.5 keeps eauth tokens in its cache (salt.cache, driver localfs):
// <cachedir>/tokens/<token>.p holding msgpack {"data": tdata, "_expires": <int epoch>}
// (Cache.store's fallback envelope). token_dir defaults to <cachedir>/tokens, the same
// folder, so a sylvite master and a Salt master sharing cachedir accept each other's
// tokens. Reads also accept a bare tdata map and the pre-3008 salt/tokens/localfs.py file
// <token_dir>/<token> (no extension). The folder may be on a shared filesystem written by
// other hosts: a token name is validated (hex, bounded) before any path is built, the file
// must be a regular file (no symlink, FIFO, directory), at most 64 KiB, a msgpack map with
// the expected fields; anything else is refused and logged once per token name.
#include "master/api/eauth.hpp"

#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/crypto/rsa.hpp"
#include "core/util/files.hpp"
#include "core/wire/msgpack.hpp"
#include "master/api/eauth_acl.hpp"
#include "master/api/eauth_backends.hpp"

namespace sylvite::master::api {

using wire::value;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t max_token_file = 64u << 10;
constexpr std::size_t max_token_name = 128;
constexpr std::size_t max_logged = 4096;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string safe(std::string_view in);
// A value as it goes into a log line (JSON, bounded; never throws on odd bytes).
std::string show(const value& v) {
  return safe(v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// A client-supplied text as it goes into a log line: control characters escaped (no
// forged log lines), at most 128 bytes.
std::string safe(std::string_view in) {
  std::string out;
  for (char c : in.substr(0, 128)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (in.size() > 128) out += "...";
  return out;
}

bool valid_token_name(const std::string& t) {
  if (t.empty() || t.size() > max_token_name) return false;
  for (char c : t)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
}

const value* raw_opt(const config::master_config& cfg, const char* key) { return wire::find(cfg.raw, key); }

std::optional<double> number(const value* v) {
  if (!v || !v->is_number() || v->is_boolean()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// salt.utils.args.condition_input(arg, kwarg): the publish load's arg list.
value condition_input(const value* arg, const value* kwarg) {
  value out = value::array();
  if (arg && arg->is_array()) {
    for (const auto& a : *arg) {
      // ints longer than 15 digits travel as text (Salt: JIDs).
      if (a.is_number_integer() && std::to_string(a.get<std::int64_t>()).size() > 15)
        out.push_back(std::to_string(a.get<std::int64_t>()));
      else
        out.push_back(a);
    }
  } else if (arg && !arg->is_null()) {
    out.push_back(*arg);  // rest_cherrypy turns a scalar arg into [arg]
  }
  if (kwarg && kwarg->is_object() && !kwarg->empty()) {
    value kw = value::object();
    kw["__kwarg__"] = true;
    for (auto it = kwarg->begin(); it != kwarg->end(); ++it) kw[it.key()] = it.value();
    out.push_back(std::move(kw));
  }
  return out;
}

// RunnerClient._reformat_low: {"arg": positional, "kwarg": name=value args + kwarg +
// old-style top-level keys}, the map ClearFuncs.runner hands to runner_check.
value runner_args(const value& chunk) {
  value args = value::array(), kw = value::object();
  if (const value* a = wire::find(chunk, "arg")) {
    value list = a->is_array() ? *a : value::array({*a});
    for (const auto& x : list) {
      auto s = wire::as_text(x);
      // salt.utils.args.parse_input: "name=value" (name an identifier, not "==") is a kwarg.
      if (s) {
        auto eq = s->find('=');
        bool ident = eq != std::string_view::npos && eq > 0 && (eq + 1 >= s->size() || (*s)[eq + 1] != '=');
        if (ident) {
          unsigned char c0 = static_cast<unsigned char>((*s)[0]);
          ident = std::isalpha(c0) || c0 == '_' || c0 >= 0x80;
          for (std::size_t i = 1; ident && i < eq; ++i) {
            unsigned char c = static_cast<unsigned char>((*s)[i]);
            ident = std::isalnum(c) || c == '_' || c == '.' || c == '-' || c >= 0x80;
          }
        }
        if (ident) {
          kw[std::string(s->substr(0, eq))] = std::string(s->substr(eq + 1));
          continue;
        }
      }
      args.push_back(x);
    }
  }
  if (const value* k = wire::find(chunk, "kwarg"); k && k->is_object())
    for (auto it = k->begin(); it != k->end(); ++it) kw[it.key()] = it.value();
  static const std::set<std::string> not_kwargs = {"fun",  "arg",    "kwarg", "username", "password", "eauth",
                                                   "token", "client", "user",  "key",      "timeout",  "full_return"};
  for (auto it = chunk.begin(); it != chunk.end(); ++it)
    if (!not_kwargs.count(it.key())) kw[it.key()] = it.value();
  return value{{"kwarg", kw}, {"arg", args}};
}

decision allow() {
  decision d;
  d.allowed = true;
  d.reason.clear();
  return d;
}
decision refuse(refusal why, std::string reason) {
  decision d;
  d.allowed = false;
  d.why = why;
  d.reason = std::move(reason);
  return d;
}

}  // namespace

struct eauth_service::impl {
  target_expander expand;
  value external_auth = value::object();
  fs::path token_dir;
  double token_expire = 43200;
  std::string hash_type = "sha256";
  bool permissive_acl = false;
  std::string pam_service = "login";
  std::string master_user = "root";
  value publisher_acl = value::object();
  value publisher_acl_blacklist = value::object();

  // time_auth: failures take about as long as the slowest failure so far.
  mutable std::mutex fail_mu;
  mutable double max_fail = 1.0;

  mutable std::mutex log_mu;
  mutable std::set<std::string> logged;

  // Log a refusal about one token (or other subject) once.
  template <class... A>
  void warn_once(const std::string& subject, spdlog::format_string_t<A...> fmt, A&&... a) const {
    {
      std::lock_guard lk(log_mu);
      if (logged.size() >= max_logged) logged.clear();
      if (!logged.insert(subject).second) return;
    }
    spdlog::warn(fmt, std::forward<A>(a)...);
  }

  acl::expander expander() const {
    return [this](const value& tgt, const std::string& tt) {
      return expand ? expand(tgt, tt) : std::vector<std::string>{};
    };
  }

  const value* backend(const std::string& eauth) const {
    if (eauth.empty()) return nullptr;
    return wire::find(external_auth, eauth);
  }

  // LoadAuth.get_groups: pam reports system groups, file none.
  std::vector<std::string> groups_of(const std::string& eauth, const std::string& name) const {
    if (eauth == "pam") return backends::system_groups(name);
    return {};
  }

  bool backend_auth(const std::string& eauth, const std::string& user, const std::string& password) const {
    if (eauth == "file") return backends::file_auth(*backend(eauth), user, password);
    if (eauth == "pam") return backends::pam_auth(pam_service, user, password);
    spdlog::warn("eauth: backend \"{}\" is configured but not available (pam and file are)", safe(eauth));
    return false;
  }

  // LoadAuth.time_auth's failure padding.
  void pad_failure(std::chrono::steady_clock::time_point start) const {
    double mf;
    {
      std::lock_guard lk(fail_mu);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (took > max_fail) max_fail = took;
      mf = max_fail;
    }
    if (mf <= 0) return;
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_real_distribution<double> dist(mf - mf / 4, mf + mf / 4);
    auto until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(dist(rng)));
    std::this_thread::sleep_until(until);
  }

  identity make_identity(const std::string& eauth, const std::string& name, std::vector<std::string> groups,
                         bool* in_table) const {
    identity who;
    who.name = name;
    who.eauth = eauth;
    who.groups = std::move(groups);
    const value* b = backend(eauth);
    who.perms = acl::fill_auth_list(b ? *b : value::object(), name, who.groups, permissive_acl, in_table);
    return who;
  }

  fs::path token_path(const std::string& tok) const { return token_dir / (tok + ".p"); }
  fs::path legacy_token_path(const std::string& tok) const { return token_dir / tok; }

  void remove_token_file(const fs::path& p) const {
    struct stat st {};
    // Only a regular file is ours to remove; never follow or remove anything else.
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(p.c_str());
  }

  std::optional<token_data> load_token(const std::string& tok) const;
};

std::optional<token_data> eauth_service::impl::load_token(const std::string& tok) const try {
  fs::path p = token_path(tok);
  auto data = util::read_file_nofollow(p, max_token_file);
  if (!data && data.error() == util::errc::not_found) {
    p = legacy_token_path(tok);
    data = util::read_file_nofollow(p, max_token_file);
  }
  if (!data) {
    if (data.error() != util::errc::not_found)
      warn_once(tok, "eauth: token file {} refused: {} (not a regular file of at most {} bytes)", p.string(),
                data.error().message(), max_token_file);
    return std::nullopt;
  }
  wire::limits lim;
  lim.max_bytes = max_token_file;
  lim.max_depth = 16;
  lim.max_nodes = 4096;
  auto parsed = wire::unpack(*data, lim);
  if (!parsed || !parsed->is_object()) {
    // Salt removes a token it cannot deserialize.
    warn_once(tok, "eauth: token file {} is not a msgpack map: removed", p.string());
    remove_token_file(p);
    return std::nullopt;
  }
  value tdata = std::move(*parsed);
  const double now = now_s();
  if (tdata.size() == 2 && tdata.contains("data") && tdata.contains("_expires")) {
    auto exp = number(wire::find(tdata, "_expires"));
    if (!exp || *exp <= now) {
      remove_token_file(p);
      return std::nullopt;
    }
    value inner = tdata["data"];
    tdata = std::move(inner);
    if (!tdata.is_object()) {
      warn_once(tok, "eauth: token file {}: data is not a map: removed", p.string());
      remove_token_file(p);
      return std::nullopt;
    }
  }
  auto expire = number(wire::find(tdata, "expire"));
  if (!expire || *expire < now) {  // expired, or no expire: Salt removes it
    remove_token_file(p);
    return std::nullopt;
  }
  auto name = wire::get_text(tdata, "name");
  auto eauth = wire::get_text(tdata, "eauth");
  if (!name || !eauth) {
    warn_once(tok, "eauth: token file {} lacks name/eauth: refused", p.string());
    return std::nullopt;
  }
  std::vector<std::string> groups;
  if (const value* g = wire::find(tdata, "groups"); g && g->is_array()) {
    for (const auto& x : *g)
      if (auto s = wire::as_text(x)) groups.emplace_back(*s);
  }
  token_data td;
  td.token = tok;
  td.start = number(wire::find(tdata, "start")).value_or(0);
  td.expire = *expire;
  bool in_table = false;
  td.who = make_identity(std::string(*eauth), std::string(*name), std::move(groups), &in_table);
  return td;
} catch (const std::exception& e) {
  warn_once(tok, "eauth: token {} refused: {}", tok, e.what());
  return std::nullopt;
}

eauth_service::eauth_service(const config::master_config& cfg, target_expander expand) : impl_(std::make_unique<impl>()) {
  impl_->expand = std::move(expand);
  if (const value* ea = raw_opt(cfg, "external_auth")) {
    if (ea->is_object()) {
      for (auto it = ea->begin(); it != ea->end(); ++it) {
        if (it.value().is_object() || it.value().is_null()) impl_->external_auth[it.key()] = it.value().is_null() ? value::object() : it.value();
        else spdlog::error("external_auth: backend {} is not a map: ignored", it.key());
      }
    } else if (!ea->is_null()) {
      spdlog::error("external_auth is not a map: external auth disabled");
    }
  }
  impl_->token_dir = cfg.cachedir / "tokens";
  if (auto td = wire::get_text(cfg.raw, "token_dir"); td && !td->empty()) impl_->token_dir = std::string(*td);
  if (auto te = number(raw_opt(cfg, "token_expire")); te && *te > 0) impl_->token_expire = *te;
  impl_->hash_type = cfg.hash_type.empty() ? "sha256" : cfg.hash_type;
  if (!crypto::hash_hex("", impl_->hash_type)) {
    spdlog::error("hash_type {} is not supported for eauth tokens: using sha256", impl_->hash_type);
    impl_->hash_type = "sha256";
  }
  if (auto p = wire::get_bool(cfg.raw, "permissive_acl")) impl_->permissive_acl = *p;
  if (auto s = wire::get_text(cfg.raw, "auth.pam.service"); s && !s->empty()) impl_->pam_service = std::string(*s);
  if (!cfg.user.empty()) impl_->master_user = cfg.user;
  if (const value* p = raw_opt(cfg, "publisher_acl"); p && p->is_object()) impl_->publisher_acl = *p;
  if (const value* p = raw_opt(cfg, "publisher_acl_blacklist"); p && p->is_object())
    impl_->publisher_acl_blacklist = *p;
}

eauth_service::~eauth_service() = default;

bool eauth_service::enabled() const { return !impl_->external_auth.empty(); }

void eauth_service::set_failure_delay(double seconds) const {
  std::lock_guard lk(impl_->fail_mu);
  impl_->max_fail = seconds;
}

std::optional<identity> eauth_service::authenticate(const std::string& eauth, const std::string& username,
                                                    const std::string& password) const {
  const auto start = std::chrono::steady_clock::now();
  if (!impl_->backend(eauth)) {
    spdlog::warn("eauth: the eauth system \"{}\" is not enabled; authentication failure of type \"eauth\" for user {}",
                 safe(eauth), safe(username));
    return std::nullopt;
  }
  if (username.empty() || username.size() > 256 || password.size() > 4096 ||
      !impl_->backend_auth(eauth, username, password)) {
    impl_->pad_failure(start);
    spdlog::warn("eauth: authentication failure of type \"eauth\" occurred for user {} (backend {})", safe(username), safe(eauth));
    return std::nullopt;
  }
  bool in_table = false;
  identity who = impl_->make_identity(eauth, username, impl_->groups_of(eauth, username), &in_table);
  if (!in_table) {
    // Salt would mint a token with empty perms; refusing here is the contract of
    // eauth.hpp (a user the table does not name can do nothing anyway).
    spdlog::warn("eauth: user {} authenticated through {} but external_auth:{} names neither the user, one of "
                 "the user's groups, nor '*': refused",
                 safe(username), safe(eauth), safe(eauth));
    return std::nullopt;
  }
  return who;
}

value eauth_service::login_perms(const identity& who) const {
  const value* b = impl_->backend(who.eauth);
  return acl::login_perms(b ? *b : value::object(), who.name, who.groups);
}

std::optional<token_data> eauth_service::mint_token(const identity& who) const {
  if (!impl_->backend(who.eauth)) {
    spdlog::warn("eauth: no token for {}: eauth system \"{}\" is not enabled", safe(who.name), safe(who.eauth));
    return std::nullopt;
  }
  token_data td;
  td.start = now_s();
  td.expire = td.start + impl_->token_expire;
  td.who = who;
  value tdata = value::object();
  tdata["start"] = td.start;
  tdata["expire"] = td.expire;
  tdata["name"] = who.name;
  tdata["eauth"] = who.eauth;
  if (!who.groups.empty()) {
    value g = value::array();
    for (const auto& x : who.groups) g.push_back(x);
    tdata["groups"] = std::move(g);
  }
  std::error_code ec;
  fs::create_directories(impl_->token_dir, ec);
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto tok = crypto::hash_hex(crypto::random_bytes(512), impl_->hash_type);
    if (!tok) return std::nullopt;
    tdata["token"] = *tok;
    value env{{"data", tdata}, {"_expires", static_cast<std::int64_t>(td.expire)}};
    auto r = util::create_exclusive(impl_->token_path(*tok), wire::pack_payload(env), 0600);
    if (r) {
      td.token = *tok;
      return td;
    }
    if (r.error() != util::errc::already_exists) {
      spdlog::warn("eauth: authentication failure: cannot write token file in {}: {}", impl_->token_dir.string(),
                   r.error().message());
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<token_data> eauth_service::get_token(const std::string& token) const {
  if (!valid_token_name(token)) {
    impl_->warn_once("name:" + token.substr(0, 64), "eauth: malformed token refused (not 1-{} hex digits)",
                     max_token_name);
    return std::nullopt;
  }
  auto td = impl_->load_token(token);
  if (!td) return std::nullopt;
  if (!impl_->backend(td->who.eauth)) {
    impl_->warn_once(token, "eauth: authentication failure of type \"token\": token of {} names eauth \"{}\", not enabled",
                     td->who.name, td->who.eauth);
    return std::nullopt;
  }
  return td;
}

void eauth_service::delete_token(const std::string& token) const {
  if (!valid_token_name(token)) return;
  impl_->remove_token_file(impl_->token_path(token));
  impl_->remove_token_file(impl_->legacy_token_path(token));
}

decision eauth_service::check(const identity& who, const value& chunk) const try {
  if (!chunk.is_object()) return refuse(refusal::bad_request, "lowstate chunk is not a map");
  auto client = wire::get_text(chunk, "client");
  if (!client) return refuse(refusal::bad_request, "lowstate chunk has no client");
  const std::string cl(*client);
  const value* fun = wire::find(chunk, "fun");
  const std::string fun_text = fun && wire::as_text(*fun) ? std::string(*wire::as_text(*fun)) : std::string();
  const std::string user_fail = "Authentication failure of type \"token\" occurred for user " + who.name + ".";

  if (cl == "local" || cl == "local_async" || cl == "local_batch" || cl == "local_subset" ||
      cl == "ssh") {  // NetapiClient._authorize_ssh: the same auth_check as a publish
    if (!fun || (!wire::as_text(*fun) && !fun->is_array()) || (fun->is_array() && fun->empty()) ||
        (wire::as_text(*fun) && fun_text.empty()))
      return refuse(refusal::bad_request, "lowstate chunk has no fun");
    const value* tgt = wire::find(chunk, "tgt");
    if (!tgt || tgt->is_null()) return refuse(refusal::bad_request, "lowstate chunk has no tgt");
    std::string tgt_type = "glob";
    if (auto t = wire::get_text(chunk, "tgt_type")) tgt_type = std::string(*t);
    else if (auto e = wire::get_text(chunk, "expr_form")) tgt_type = std::string(*e);
    std::vector<std::string> minions = impl_->expand ? impl_->expand(*tgt, tgt_type) : std::vector<std::string>{};
    value args;
    if (fun->is_array()) {
      const value* a = wire::find(chunk, "arg");
      args = a ? *a : value::array();
    } else {
      args = condition_input(wire::find(chunk, "arg"), wire::find(chunk, "kwarg"));
    }
    if (acl::auth_check(who.perms, *fun, args, minions, {"saltutil.find_job"}, impl_->expander())) return allow();
    spdlog::warn("eauth: authorization failure: user {} ({}) may not run {} on {} ({}, {} minions)", safe(who.name),
                 safe(who.eauth), show(*fun), show(*tgt), safe(tgt_type), minions.size());
    return refuse(refusal::forbidden, "Authorization error occurred.");
  }

  std::string form;
  value args;
  std::string f = fun_text;
  if (cl == "runner" || cl == "runner_async") {
    form = "runner";
    args = runner_args(chunk);
  } else if (cl == "jobs") {
    form = "runner";
    if (f.empty()) f = "jobs.list_jobs";
    args = value{{"kwarg", value::object()}, {"arg", value::array()}};
  } else if (cl == "wheel" || cl == "wheel_async") {
    form = "wheel";
    const value* k = wire::find(chunk, "kwarg");
    args = k ? *k : value::object();
  } else {
    spdlog::warn("eauth: user {} asked for unknown client {}: refused", safe(who.name), safe(cl));
    return refuse(refusal::bad_request, "unknown client " + cl);
  }
  if (f.empty()) return refuse(refusal::bad_request, "lowstate chunk has no fun");
  switch (acl::spec_check(who.perms, f, args, form)) {
    case acl::spec_result::allow: return allow();
    case acl::spec_result::syntax_error:
      spdlog::warn("eauth: user {} sent {} fun {}: not module.function", safe(who.name), safe(cl), safe(f));
      return refuse(refusal::bad_request, "A command invocation error occurred: Check syntax.");
    case acl::spec_result::deny: break;
  }
  spdlog::warn("eauth: authorization failure: user {} ({}) may not run {} {}", safe(who.name), safe(who.eauth), form, safe(f));
  return refuse(refusal::forbidden, user_fail);
} catch (const std::exception& e) {
  spdlog::warn("eauth: lowstate chunk of user {} refused: {}", safe(who.name), e.what());
  return refuse(refusal::bad_request, "malformed lowstate chunk");
}

decision eauth_service::check_publisher(const std::string& user, const std::string& fun, const value& tgt,
                                        const std::string& tgt_type) const {
  return check_publisher(user, value(fun), value::array(), tgt, tgt_type);
}

value eauth_service::publisher_auth_list(const std::string& user) const {
  return acl::publisher_auth_list(impl_->publisher_acl, user);
}

bool eauth_service::publisher_acl_configured() const {
  return !impl_->publisher_acl.empty() || !impl_->publisher_acl_blacklist.empty();
}

decision eauth_service::check_publisher(const std::string& user, const value& fun, const value& arg, const value& tgt,
                                        const std::string& tgt_type, bool trusted) const {
  // ClearFuncs.publish: the blacklist first, for every user (root included).
  if (acl::user_is_blacklisted(impl_->publisher_acl_blacklist, user) ||
      acl::cmd_is_blacklisted(impl_->publisher_acl_blacklist, fun)) {
    spdlog::error("{} does not have permissions to run {}. Please contact your local administrator if you believe "
                  "this is in error.",
                  safe(user), show(fun));
    return refuse(refusal::forbidden, "Authorization error occurred.");
  }
  // LoadAuth.authenticate_key: root and the master's own user are trusted as they are.
  if (trusted || user == "root" || user == impl_->master_user) return allow();
  value auth_list = acl::publisher_auth_list(impl_->publisher_acl, user);
  if (auth_list.empty()) {
    spdlog::warn("publisher_acl: user {} is not in publisher_acl: authentication failure of type \"user\"", safe(user));
    return refuse(refusal::unauthorized, "Authentication error occurred.");
  }
  std::vector<std::string> minions = impl_->expand ? impl_->expand(tgt, tgt_type) : std::vector<std::string>{};
  if (acl::auth_check(auth_list, fun, arg, minions, {"saltutil.find_job"}, impl_->expander())) return allow();
  spdlog::warn("publisher_acl: authorization failure: user {} may not run {} on {} ({})", safe(user), show(fun), show(tgt),
               tgt_type);
  return refuse(refusal::forbidden, "Authorization error occurred.");
}

}  // namespace sylvite::master::api
