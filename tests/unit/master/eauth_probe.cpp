// eauth_probe: answers ACL / eauth questions with sylvite's code, one JSON request per
// stdin line, one JSON answer per stdout line. Driven by test_eauth_vs_salt.py, which asks
// Salt 3008.5's own functions the same questions and compares.
//   {"op": "fill", "provider", "name", "groups", "permissive"}         -> list
//   {"op": "auth_check", "ids", "auth_list", "funs", "args", "tgt", "tgt_type", "whitelist"} -> bool
//   {"op": "spec", "auth_list", "fun", "args", "form"}                  -> "allow"|"deny"|"syntax"
//   {"op": "publisher", "acl", "user"}                                  -> list
//   {"op": "blacklist", "blacklist", "user", "cmd"}                     -> [user_bl, cmd_bl]
//   {"op": "login_perms", "eauth", "name", "groups"}                    -> list
//   {"op": "file_auth", "config", "user", "password"}                   -> bool
//   {"op": "check", "cachedir", "external_auth", "ids", "eauth", "user", "password", "chunk"} -> bool|null
//   {"op": "get_token", "cachedir", "external_auth", "token"}           -> {name, eauth, expire}|null
//   {"op": "mint", "cachedir", "external_auth", "eauth", "user", "password"} -> token|null
//   {"op": "check_minions", "ids", "tgt", "tgt_type"}                   -> list
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <string>

#include "core/match/match.hpp"
#include "master/api/eauth.hpp"
#include "master/api/eauth_acl.hpp"
#include "master/api/eauth_backends.hpp"

using sylvite::wire::value;
namespace api = sylvite::master::api;
namespace acl = sylvite::master::api::acl;

namespace {

std::vector<std::string> ids_of(const value& req) {
  std::vector<std::string> ids;
  if (auto it = req.find("ids"); it != req.end())
    for (const auto& i : *it) ids.push_back(i.get<std::string>());
  return ids;
}

acl::expander expander_for(std::vector<std::string> ids) {
  return [ids](const value& tgt, const std::string& tt) {
    auto facts = [](const std::string& id) { return sylvite::match::minion_facts{id, nullptr, nullptr}; };
    return sylvite::match::check_minions(tgt, tt, ids, facts, true).minions;
  };
}

std::vector<std::string> strs(const value& v) {
  std::vector<std::string> out;
  if (v.is_array())
    for (const auto& s : v)
      if (s.is_string()) out.push_back(s.get<std::string>());
  return out;
}

std::unique_ptr<api::eauth_service> service(const value& req) {
  static sylvite::config::master_config cfg;  // outlives the service
  cfg = sylvite::config::master_config{};
  cfg.cachedir = req.at("cachedir").get<std::string>();
  cfg.raw = value::object();
  cfg.raw["external_auth"] = req.at("external_auth");
  auto s = std::make_unique<api::eauth_service>(cfg, expander_for(ids_of(req)));
  s->set_failure_delay(0);
  return s;
}

value answer(const value& req) {
  const std::string op = req.at("op").get<std::string>();
  if (op == "fill")
    return acl::fill_auth_list(req.at("provider"), req.at("name").get<std::string>(), strs(req.at("groups")),
                               req.value("permissive", false));
  if (op == "auth_check") {
    auto ex = expander_for(ids_of(req));
    auto minions = ex(req.at("tgt"), req.value("tgt_type", "glob"));
    return acl::auth_check(req.at("auth_list"), req.at("funs"), req.at("args"), minions, strs(req.value("whitelist", value::array())), ex);
  }
  if (op == "spec") {
    auto r = acl::spec_check(req.at("auth_list"), req.at("fun").get<std::string>(), req.at("args"),
                             req.at("form").get<std::string>());
    return r == acl::spec_result::allow ? "allow" : r == acl::spec_result::deny ? "deny" : "syntax";
  }
  if (op == "publisher") return acl::publisher_auth_list(req.at("acl"), req.at("user").get<std::string>());
  if (op == "blacklist")
    return value::array({acl::user_is_blacklisted(req.at("blacklist"), req.at("user").get<std::string>()),
                         acl::cmd_is_blacklisted(req.at("blacklist"), req.at("cmd"))});
  if (op == "login_perms")
    return acl::login_perms(req.at("eauth"), req.at("name").get<std::string>(), strs(req.at("groups")));
  if (op == "file_auth")
    return sylvite::master::api::backends::file_auth(req.at("config"), req.at("user").get<std::string>(),
                                                      req.at("password").get<std::string>());
  if (op == "check_minions") {
    return expander_for(ids_of(req))(req.at("tgt"), req.value("tgt_type", "glob"));
  }
  if (op == "check") {
    auto s = service(req);
    auto who = s->authenticate(req.at("eauth").get<std::string>(), req.at("user").get<std::string>(),
                               req.at("password").get<std::string>());
    if (!who) return nullptr;
    return s->check(*who, req.at("chunk")).allowed;
  }
  if (op == "get_token") {
    auto s = service(req);
    auto t = s->get_token(req.at("token").get<std::string>());
    if (!t) return nullptr;
    return value{{"name", t->who.name}, {"eauth", t->who.eauth}, {"expire", t->expire}, {"start", t->start}};
  }
  if (op == "mint") {
    auto s = service(req);
    auto who = s->authenticate(req.at("eauth").get<std::string>(), req.at("user").get<std::string>(),
                               req.at("password").get<std::string>());
    if (!who) return nullptr;
    auto t = s->mint_token(*who);
    if (!t) return nullptr;
    return t->token;
  }
  return "unknown op";
}

}  // namespace

int main() {
  // stdout carries the answers: logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("probe"));
  spdlog::set_level(spdlog::level::err);
  std::string line;
  while (std::getline(std::cin, line)) {
    value out;
    try {
      out = answer(value::parse(line));
    } catch (const std::exception& e) {
      out = value{{"probe_error", e.what()}};
    }
    std::cout << out.dump() << "\n" << std::flush;
  }
  return 0;
}
