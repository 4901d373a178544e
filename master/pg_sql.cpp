// sylvite::master PostgreSQL job cache, pure parts (pg_sql.hpp): options, DDL, JSON and
// COPY text. Nothing here talks to a server; nothing throws.
#include "master/pg_sql.hpp"

#include <cmath>
#include <ctime>

#include "core/match/match.hpp"

namespace sylvite::master::pg {

namespace {

// Salt's _fetch_option: the dict `returner.pgjsonb` first, then `returner.pgjsonb.<key>`.
const wire::value* returner_opt(const wire::value& raw, const std::string& key) {
  if (const wire::value* d = wire::find(raw, "returner.pgjsonb"); d && d->is_object())
    if (const wire::value* v = wire::find(*d, key); v && !v->is_null()) return v;
  if (const wire::value* d = wire::find(raw, "returner"); d && d->is_object())
    if (const wire::value* p = wire::find(*d, "pgjsonb"); p && p->is_object())
      if (const wire::value* v = wire::find(*p, key); v && !v->is_null()) return v;
  const wire::value* v = wire::find(raw, "returner.pgjsonb." + key);
  return v && !v->is_null() ? v : nullptr;
}

// A scalar as Python's str() would give it (Salt passes the values on to psycopg2).
std::optional<std::string> scalar_text(const wire::value& v) {
  if (auto t = wire::as_text(v)) return std::string(*t);
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? std::string("True") : std::string("False");
  if (v.is_number_float()) return v.dump();
  return std::nullopt;
}

std::optional<std::int64_t> int_of(const wire::value& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_unsigned()) return static_cast<std::int64_t>(v.get<std::uint64_t>());
  if (auto t = wire::as_text(v)) {
    std::string s(*t);
    if (s.empty() || s.size() > 18) return std::nullopt;
    std::int64_t n = 0;
    std::size_t i = 0;
    bool neg = false;
    if (s[0] == '-') {
      neg = true;
      i = 1;
    }
    if (i == s.size()) return std::nullopt;
    for (; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      n = n * 10 + (s[i] - '0');
    }
    return neg ? -n : n;
  }
  return std::nullopt;
}

bool names_pgjsonb(const wire::value& v) {
  if (auto t = wire::as_text(v)) return *t == "pgjsonb";
  if (v.is_array())
    for (const auto& e : v)
      if (auto t = wire::as_text(e); t && *t == "pgjsonb") return true;
  return false;
}

std::vector<std::string> string_list(const wire::value* v) {
  std::vector<std::string> out;
  if (!v) return out;
  if (auto t = wire::as_text(*v)) {
    out.emplace_back(*t);
  } else if (v->is_array()) {
    for (const auto& e : *v)
      if (auto t = wire::as_text(e)) out.emplace_back(*t);
  }
  return out;
}

// Append one UTF-8 code point (valid input) or U+FFFD for each invalid byte.
std::string utf8_clean(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    bool ok = i + n < s.size();  // the n continuation bytes are there
    if (ok) {
      for (std::size_t k = 1; k <= n; ++k) {
        const auto cc = static_cast<unsigned char>(s[i + k]);
        if ((cc & 0xC0) != 0x80) {
          ok = false;
          break;
        }
        cp = (cp << 6) | (cc & 0x3F);
      }
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (ok && ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
               (cp >= 0xD800 && cp <= 0xDFFF)))
      ok = false;
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(s.substr(i, n + 1));
    i += n + 1;
  }
  return out;
}

}  // namespace

std::optional<options> parse_options(const wire::value& raw, const std::filesystem::path& cachedir,
                                     const std::string& master_id, std::string& error) {
  options o;
  o.master_id = master_id;
  if (const wire::value* v = wire::find(raw, "master_job_cache"); v && !v->is_null()) {
    auto t = wire::as_text(*v);
    if (!t) {
      error = "master_job_cache must be a returner name";
      return std::nullopt;
    }
    if (*t == "pgjsonb") {
      o.job_cache = true;
    } else if (*t != "local_cache") {
      o.unsupported_cache = std::string(*t);  // as Salt without that returner: jobs still run
    }
  }
  if (const wire::value* v = wire::find(raw, "event_return"); v && !v->is_null()) o.event_return = names_pgjsonb(*v);
  for (auto [key, slot] : {std::pair{"host", &o.host}, std::pair{"user", &o.user}, std::pair{"pass", &o.pass},
                           std::pair{"db", &o.db}}) {
    if (const wire::value* v = returner_opt(raw, key)) {
      auto t = scalar_text(*v);
      if (!t) {
        error = std::string("returner.pgjsonb.") + key + " must be a string";
        return std::nullopt;
      }
      if (!t->empty()) *slot = *t;
    }
  }
  if (const wire::value* v = returner_opt(raw, "port")) {
    auto p = int_of(*v);
    if (!p || *p < 1 || *p > 65535) {
      error = "returner.pgjsonb.port must be a port number";
      return std::nullopt;
    }
    o.port = static_cast<int>(*p);
  }
  if (const wire::value* v = returner_opt(raw, "connect_timeout")) {
    auto p = int_of(*v);
    if (!p || *p < 0 || *p > 86400) {
      error = "returner.pgjsonb.connect_timeout must be seconds";
      return std::nullopt;
    }
    o.connect_timeout = static_cast<int>(*p);
  }
  for (auto [key, slot] : {std::pair{"sslmode", &o.sslmode}, std::pair{"sslcert", &o.sslcert},
                           std::pair{"sslkey", &o.sslkey}, std::pair{"sslrootcert", &o.sslrootcert},
                           std::pair{"sslcrl", &o.sslcrl}}) {
    if (const wire::value* v = returner_opt(raw, key)) {
      auto t = scalar_text(*v);
      if (!t) {
        error = std::string("returner.pgjsonb.") + key + " must be a string";
        return std::nullopt;
      }
      if (!t->empty() && *t != "None") *slot = *t;
    }
  }
  if (auto b = wire::get_bool(raw, "archive_jobs")) o.archive_jobs = *b;
  if (auto b = wire::get_bool(raw, "pgjsonb_spool_sync")) o.spool_sync = *b;
  if (const wire::value* v = wire::find(raw, "keep_jobs_seconds"); v && !v->is_null()) {
    auto k = int_of(*v);
    if (!k || *k < 0) {
      error = "keep_jobs_seconds must be a number of seconds";
      return std::nullopt;
    }
    o.keep_jobs_seconds = *k;
  }
  o.spool_dir = cachedir / "pgjsonb_spool" / (master_id.empty() ? std::string("master") : master_id);
  if (const wire::value* v = wire::find(raw, "pgjsonb_spool_dir"); v && !v->is_null()) {
    auto t = wire::as_text(*v);
    if (!t || t->empty() || (*t)[0] != '/') {
      error = "pgjsonb_spool_dir must be an absolute path";
      return std::nullopt;
    }
    o.spool_dir = std::string(*t);
  }
  struct bounded {
    const char* key;
    std::int64_t lo, hi;
    std::int64_t* out64;
    int* out;
  };
  std::int64_t spool_mb = o.spool_max_bytes >> 20;
  std::int64_t view_mb = o.pending_view_bytes >> 20;
  for (const bounded& b : {bounded{"pgjsonb_pool_size", 1, 64, nullptr, &o.pool_size},
                           bounded{"pgjsonb_batch_max", 1, 100000, nullptr, &o.batch_max},
                           bounded{"pgjsonb_event_queue_max", 1, 10000000, nullptr, &o.event_queue_max},
                           bounded{"pgjsonb_clean_interval", 1, 86400, nullptr, &o.clean_interval},
                           bounded{"pgjsonb_read_wait_ms", 0, 600000, nullptr, &o.read_wait_ms},
                           bounded{"pgjsonb_pending_view_mb", 0, 1LL << 20, &view_mb, nullptr},
                           bounded{"pgjsonb_spool_max_mb", 1, 1LL << 30, &spool_mb, nullptr}}) {
    const wire::value* v = wire::find(raw, b.key);
    if (!v || v->is_null()) continue;
    auto n = int_of(*v);
    if (!n || *n < b.lo || *n > b.hi) {
      error = std::string(b.key) + " must be a number from " + std::to_string(b.lo) + " to " + std::to_string(b.hi);
      return std::nullopt;
    }
    if (b.out) *b.out = static_cast<int>(*n);
    if (b.out64) *b.out64 = *n;
  }
  o.spool_max_bytes = spool_mb << 20;
  o.pending_view_bytes = view_mb << 20;
  o.event_whitelist = string_list(wire::find(raw, "event_return_whitelist"));
  o.event_blacklist = string_list(wire::find(raw, "event_return_blacklist"));
  return o;
}

std::vector<std::pair<std::string, std::string>> conninfo(const options& o) {
  std::vector<std::pair<std::string, std::string>> kv{
      {"host", o.host},
      {"port", std::to_string(o.port)},
      {"dbname", o.db},
      {"user", o.user},
      {"password", o.pass},
      {"connect_timeout", std::to_string(o.connect_timeout.value_or(10))},
      {"application_name", "sylvite-master"},
      // Several hosts ("pg1,pg2"): the primary is the one that takes writes.
      {"target_session_attrs", "read-write"},
      // A dead server or a cut network is noticed in seconds, not after the kernel's hours.
      {"keepalives", "1"},
      {"keepalives_idle", "10"},
      {"keepalives_interval", "5"},
      {"keepalives_count", "3"},
      {"tcp_user_timeout", "30000"},
  };
  for (auto [k, v] : {std::pair{"sslmode", &o.sslmode}, std::pair{"sslcert", &o.sslcert},
                      std::pair{"sslkey", &o.sslkey}, std::pair{"sslrootcert", &o.sslrootcert},
                      std::pair{"sslcrl", &o.sslcrl}})
    if (*v) kv.emplace_back(k, **v);
  return kv;
}

std::string describe(const options& o) {
  std::string s;
  for (const auto& [k, v] : conninfo(o)) {
    if (k == "application_name" || k.starts_with("keepalives") || k == "tcp_user_timeout") continue;
    if (!s.empty()) s += ' ';
    s += k + "=" + (k == "password" ? std::string("***") : v);
  }
  return s;
}

const std::vector<std::string>& schema_statements() {
  static const std::vector<std::string> s{
      // Salt's documented schema (salt/returners/pgjsonb.py), IF NOT EXISTS.
      "CREATE TABLE IF NOT EXISTS jids (jid varchar(255) NOT NULL primary key, load jsonb NOT NULL)",
      "CREATE INDEX IF NOT EXISTS idx_jids_jsonb on jids USING gin (load) WITH (fastupdate=on)",
      "CREATE TABLE IF NOT EXISTS salt_returns (fun varchar(50) NOT NULL, jid varchar(255) NOT NULL, "
      "return jsonb NOT NULL, id varchar(255) NOT NULL, success varchar(10) NOT NULL, full_ret jsonb NOT NULL, "
      "alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW())",
      "CREATE INDEX IF NOT EXISTS idx_salt_returns_id ON salt_returns (id)",
      "CREATE INDEX IF NOT EXISTS idx_salt_returns_jid ON salt_returns (jid)",
      "CREATE INDEX IF NOT EXISTS idx_salt_returns_fun ON salt_returns (fun)",
      "CREATE INDEX IF NOT EXISTS idx_salt_returns_return ON salt_returns USING gin (return) with (fastupdate=on)",
      "CREATE INDEX IF NOT EXISTS idx_salt_returns_full_ret ON salt_returns USING gin (full_ret) with "
      "(fastupdate=on)",
      "CREATE SEQUENCE IF NOT EXISTS seq_salt_events_id",
      "CREATE TABLE IF NOT EXISTS salt_events (id BIGINT NOT NULL UNIQUE DEFAULT nextval('seq_salt_events_id'), "
      "tag varchar(255) NOT NULL, data jsonb NOT NULL, alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(), "
      "master_id varchar(255) NOT NULL)",
      "CREATE INDEX IF NOT EXISTS idx_salt_events_tag on salt_events (tag)",
      "CREATE INDEX IF NOT EXISTS idx_salt_events_data ON salt_events USING gin (data) with (fastupdate=on)",
      // sylvite's side tables: Salt's SQL never sees them.
      "CREATE TABLE IF NOT EXISTS sylvite_job_minions (jid varchar(255) NOT NULL primary key, minions jsonb NOT "
      "NULL)",
      "CREATE TABLE IF NOT EXISTS sylvite_spool_checkpoint (spool_id varchar(64) NOT NULL primary key, "
      "master_id varchar(255) NOT NULL, seq bigint NOT NULL, alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW())",
  };
  return s;
}

const std::vector<std::string>& archive_statements() {
  static const std::vector<std::string> s{
      "create table IF NOT exists jids_archive (LIKE jids)",
      "create table IF NOT exists salt_returns_archive (LIKE salt_returns)",
      "create table IF NOT exists salt_events_archive (LIKE salt_events)",
  };
  return s;
}

const std::vector<std::string>& archive_copy_statements() {
  static const std::vector<std::string> s{
      "insert into jids_archive select * from jids j where exists (select 1 from salt_returns r where r.jid = "
      "j.jid) and not exists (select 1 from salt_returns r where r.jid = j.jid and r.alter_time >= $1)",
      "insert into salt_returns_archive select * from salt_returns where alter_time < $1",
      "insert into salt_events_archive select * from salt_events where alter_time < $1",
  };
  return s;
}

const std::vector<std::string>& purge_statements() {
  static const std::vector<std::string> s{
      "delete from jids j where exists (select 1 from salt_returns r where r.jid = j.jid) and not exists (select 1 "
      "from salt_returns r where r.jid = j.jid and r.alter_time >= $1)",
      "delete from salt_returns where alter_time < $1",
      "delete from salt_events where alter_time < $1",
  };
  return s;
}

wire::value sanitize(const wire::value& v) {
  switch (v.type()) {
    case wire::value::value_t::binary: {
      const auto& b = v.get_binary();
      return utf8_clean(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
    }
    case wire::value::value_t::string:
      return utf8_clean(v.get_ref<const std::string&>());
    case wire::value::value_t::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d)) return nullptr;
      return v;
    }
    case wire::value::value_t::array: {
      wire::value out = wire::value::array();
      for (const auto& e : v) out.push_back(sanitize(e));
      return out;
    }
    case wire::value::value_t::object: {
      wire::value out = wire::value::object();
      for (auto it = v.begin(); it != v.end(); ++it) out[utf8_clean(it.key())] = sanitize(it.value());
      return out;
    }
    default:
      return v;
  }
}

std::string json_text(const wire::value& v) {
  try {
    return sanitize(v).dump(-1, ' ', false, wire::value::error_handler_t::replace);
  } catch (...) {
    return "null";
  }
}

std::string clip(std::string_view s, std::size_t max) {
  std::string c = utf8_clean(s);
  if (c.size() <= max) return c;
  // varchar(n) counts characters; bytes <= characters, so a byte cut is always short enough.
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(c[n]) & 0xC0) == 0x80) --n;
  c.resize(n);
  return c;
}

void copy_escape(std::string& out, std::string_view field) {
  for (char ch : field) {
    switch (ch) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out.push_back(ch);
    }
  }
}

std::vector<std::string> split_copy_line(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  std::vector<std::string> out(1);
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (ch == '\t') {
      out.emplace_back();
    } else if (ch == '\\' && i + 1 < line.size()) {
      const char e = line[++i];
      out.back().push_back(e == 't' ? '\t' : e == 'n' ? '\n' : e == 'r' ? '\r' : e);
    } else {
      out.back().push_back(ch);
    }
  }
  return out;
}

std::string timestamp(std::int64_t unix_us) {
  std::int64_t secs = unix_us / 1000000;
  std::int64_t us = unix_us % 1000000;
  if (us < 0) {
    us += 1000000;
    secs -= 1;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06d+00", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us));
  return buf;
}

std::string iso_stamp(std::int64_t unix_us) {
  std::string t = timestamp(unix_us);  // "YYYY-MM-DD HH:MM:SS.ffffff+00"
  t[10] = 'T';
  return t + ":00";
}

return_row make_return_row(const std::string& jid, const std::string& id, const wire::value& load,
                           std::int64_t unix_us) {
  return_row r;
  r.jid = clip(jid, 255);
  r.id = clip(id, 255);
  if (auto f = wire::get_text(load, "fun")) r.fun = clip(*f, 50);
  // psycopg2 sends Python's bool as SQL true/false: the varchar holds "true"/"false".
  const wire::value* s = wire::find(load, "success");
  if (!s || s->is_null()) r.success = "false";
  else if (s->is_boolean()) r.success = s->get<bool>() ? "true" : "false";
  else if (auto t = wire::as_text(*s)) r.success = clip(*t, 10);
  else r.success = clip(s->dump(), 10);
  const wire::value* ret = wire::find(load, "return");
  r.ret_json = ret ? json_text(*ret) : std::string("null");
  if (load.is_object() && !load.contains("_stamp")) {
    // Salt's store_job fires the return event (which stamps the load in place) before
    // the returner runs: its full_ret carries the event's _stamp.
    wire::value full = load;
    full["_stamp"] = iso_stamp(unix_us);
    r.full_json = json_text(full);
  } else {
    r.full_json = json_text(load);
  }
  r.unix_us = unix_us;
  return r;
}

void append_copy_line(std::string& out, const return_row& r) {
  copy_escape(out, r.fun);
  out.push_back('\t');
  copy_escape(out, r.jid);
  out.push_back('\t');
  copy_escape(out, r.ret_json);
  out.push_back('\t');
  copy_escape(out, r.id);
  out.push_back('\t');
  copy_escape(out, r.success);
  out.push_back('\t');
  copy_escape(out, r.full_json);
  out.push_back('\t');
  out += timestamp(r.unix_us);
  out.push_back('\n');
}

void append_event_line(std::string& out, std::string_view tag, std::string_view data_json,
                       std::string_view master_id, std::int64_t unix_us) {
  copy_escape(out, clip(tag, 255));
  out.push_back('\t');
  copy_escape(out, data_json);
  out.push_back('\t');
  copy_escape(out, clip(master_id, 255));
  out.push_back('\t');
  out += timestamp(unix_us);
  out.push_back('\n');
}

std::string jids_upsert_sql(std::size_t rows) {
  std::string s = "INSERT INTO jids (jid, load) VALUES ";
  for (std::size_t i = 0; i < rows; ++i) {
    if (i) s += ", ";
    s += "($" + std::to_string(2 * i + 1) + ", $" + std::to_string(2 * i + 2) + "::jsonb)";
  }
  s += " ON CONFLICT (jid) DO UPDATE SET load = EXCLUDED.load";
  return s;
}

std::string minions_upsert_sql(std::size_t rows) {
  std::string s = "INSERT INTO sylvite_job_minions AS m (jid, minions) VALUES ";
  for (std::size_t i = 0; i < rows; ++i) {
    if (i) s += ", ";
    s += "($" + std::to_string(2 * i + 1) + ", $" + std::to_string(2 * i + 2) + "::jsonb)";
  }
  s += " ON CONFLICT (jid) DO UPDATE SET minions = (SELECT COALESCE(jsonb_agg(DISTINCT e ORDER BY e), "
       "'[]'::jsonb) FROM jsonb_array_elements(m.minions || EXCLUDED.minions) AS e)";
  return s;
}

bool event_wanted(const options& o, std::string_view tag) {
  bool ret = o.event_whitelist.empty();
  for (const auto& a : o.event_whitelist)
    if (match::glob_match(a, tag)) {
      ret = true;
      break;
    }
  for (const auto& d : o.event_blacklist)
    if (match::glob_match(d, tag)) {
      ret = false;
      break;
    }
  return ret;
}

}  // namespace sylvite::master::pg
