// sylvite::master PostgreSQL job cache, the pure parts (no connection): the options of
// Salt's pgjsonb returner read from the master config, the libpq connection parameters,
// the DDL (Salt's documented schema, made idempotent, plus sylvite's two side tables),
// the JSON text PostgreSQL's jsonb accepts, and the COPY / INSERT text the writers send.
// Salt reference: salt/returners/pgjsonb.py (3008.5) and salt/returners/__init__.py
// (_fetch_option: `returner.pgjsonb: {host: ...}` first, then `returner.pgjsonb.host`).
// Thread-safety: free functions on their arguments only.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/wire/value.hpp"

namespace sylvite::master::pg {

struct options {
  bool job_cache = false;     // master_job_cache: pgjsonb
  std::string unsupported_cache;  // master_job_cache names a returner sylvite has not (file cache used)
  bool event_return = false;  // event_return: pgjsonb (a name or a list holding it)
  // returner.pgjsonb.* (Salt's defaults)
  std::string host = "localhost";
  std::string user = "salt";
  std::string pass = "salt";
  std::string db = "salt";
  int port = 5432;
  std::optional<int> connect_timeout;  // seconds; unset: sylvite uses 10 (never blocks forever)
  std::optional<std::string> sslmode, sslcert, sslkey, sslrootcert, sslcrl;
  bool archive_jobs = false;            // Salt: copy to <table>_archive before purging
  std::int64_t keep_jobs_seconds = 86400;
  std::string master_id;                // salt_events.master_id
  // sylvite extensions (pgjsonb_*):
  std::filesystem::path spool_dir;      // pgjsonb_spool_dir: local disk (default cachedir/pgjsonb_spool/<id>)
  int pool_size = 4;                    // pgjsonb_pool_size: reader connections
  int batch_max = 2000;                 // pgjsonb_batch_max: records per transaction
  std::int64_t spool_max_bytes = 1LL << 30;  // pgjsonb_spool_max_mb
  int event_queue_max = 20000;          // pgjsonb_event_queue_max: events waiting (then dropped, counted)
  int clean_interval = 60;              // pgjsonb_clean_interval: seconds between keep_jobs_seconds passes
  int read_wait_ms = 2000;              // pgjsonb_read_wait_ms: a reader waits this long for queued writes
  bool spool_sync = false;              // pgjsonb_spool_sync: ack a return only after the spool's fsync
  std::int64_t pending_view_bytes = 64LL << 20;  // pgjsonb_pending_view_mb: spooled records reads can see
  std::vector<std::string> event_whitelist, event_blacklist;  // event_return_whitelist/blacklist (globs)
};

// Reads the options from the merged master config. nullopt + error on a bad value
// (wrong type, port out of range). Unset keys keep Salt's defaults.
std::optional<options> parse_options(const wire::value& raw, const std::filesystem::path& cachedir,
                                     const std::string& master_id, std::string& error);

// libpq keyword/value pairs (PQconnectdbParams), in a fixed order; unset SSL keys are left out.
std::vector<std::pair<std::string, std::string>> conninfo(const options& o);
// The same as a conninfo string with the password masked (for logs).
std::string describe(const options& o);

// The DDL, one statement each, every one idempotent (IF NOT EXISTS). Salt's tables and
// indexes exactly as salt/returners/pgjsonb.py documents them, then sylvite's:
//   sylvite_job_minions (jid, minions jsonb)      expected minions (Salt keeps none)
//   sylvite_spool_checkpoint (spool_id, master_id, seq, alter_time)
//     the last spool record committed, in the same transaction as the rows (exactly once).
const std::vector<std::string>& schema_statements();
// Archive tables (archive_jobs), as Salt's _archive_jobs.
const std::vector<std::string>& archive_statements();

// JSON text for a jsonb column: binary values become text (UTF-8, invalid bytes
// replaced, as Salt's salt.utils.data.decode then json.dumps would need), NUL characters
// are removed (jsonb refuses \u0000), NaN and infinities become null.
std::string json_text(const wire::value& v);
// A copy of v with the same replacements (binary -> text, no NUL, no NaN).
wire::value sanitize(const wire::value& v);
// A text field cut to at most max bytes at a UTF-8 boundary, NUL removed (varchar(n)).
std::string clip(std::string_view s, std::size_t max);

// COPY ... FROM STDIN text format: backslash, tab, newline and CR escaped.
void copy_escape(std::string& out, std::string_view field);
// A COPY text line (without or with its newline) back into its fields, unescaped.
std::vector<std::string> split_copy_line(std::string_view line);
// "2026-11-27 17:20:00.123456+00" for microseconds since the epoch.
std::string timestamp(std::int64_t unix_us);

// Python's datetime.isoformat() of a UTC time: "2026-11-27T17:20:00.123456+00:00".
std::string iso_stamp(std::int64_t unix_us);

// One salt_returns row as Salt's returner() writes it.
struct return_row {
  std::string fun;        // ret["fun"]
  std::string jid;
  std::string id;
  std::string success;    // str of Python's ret.get("success", False) as psycopg2 sends it: "true"/"false"
  std::string ret_json;   // the "return" value
  std::string full_json;  // the whole return load, with "_stamp" (as Salt's, stamped by its event)
  std::int64_t unix_us = 0;
};
// From a minion's return load (the fields are clipped to the column sizes).
return_row make_return_row(const std::string& jid, const std::string& id, const wire::value& load,
                           std::int64_t unix_us);
// COPY salt_returns (fun, jid, return, id, success, full_ret, alter_time) line.
void append_copy_line(std::string& out, const return_row& r);
// COPY salt_events (tag, data, master_id, alter_time) line.
void append_event_line(std::string& out, std::string_view tag, std::string_view data_json,
                       std::string_view master_id, std::int64_t unix_us);
inline constexpr const char* copy_returns_sql =
    "COPY salt_returns (fun, jid, return, id, success, full_ret, alter_time) FROM STDIN";
// Returns go through a session's temp table, so that a return already stored (a minion
// that resent it after a master restart lost its ack) is not stored twice.
inline constexpr const char* staging_create_sql =
    "CREATE TEMP TABLE IF NOT EXISTS sylvite_returns_in (LIKE salt_returns) ON COMMIT DELETE ROWS";
inline constexpr const char* copy_staging_sql =
    "COPY sylvite_returns_in (fun, jid, return, id, success, full_ret, alter_time) FROM STDIN";
inline constexpr const char* staging_insert_sql =
    "INSERT INTO salt_returns (fun, jid, return, id, success, full_ret, alter_time) "
    "SELECT DISTINCT ON (t.jid, t.id) t.fun, t.jid, t.return, t.id, t.success, t.full_ret, t.alter_time "
    "FROM sylvite_returns_in t WHERE NOT EXISTS "
    "(SELECT 1 FROM salt_returns r WHERE r.jid = t.jid AND r.id = t.id) ORDER BY t.jid, t.id, t.alter_time";
inline constexpr const char* copy_events_sql =
    "COPY salt_events (tag, data, master_id, alter_time) FROM STDIN";
// INSERT INTO jids ... VALUES ($1, $2::jsonb), ... ON CONFLICT (jid) DO UPDATE (Salt's save_load).
std::string jids_upsert_sql(std::size_t rows);
// Expected minions, merged (sorted union) with what is there.
std::string minions_upsert_sql(std::size_t rows);
inline constexpr const char* checkpoint_upsert_sql =
    "INSERT INTO sylvite_spool_checkpoint (spool_id, master_id, seq, alter_time) VALUES ($1, $2, $3, NOW()) "
    "ON CONFLICT (spool_id) DO UPDATE SET seq = EXCLUDED.seq, master_id = EXCLUDED.master_id, alter_time = NOW()";
// Salt's _purge_jobs for a cutoff given as $1 (timestamptz), one statement per table,
// then sylvite_job_minions rows whose job is gone.
const std::vector<std::string>& purge_statements();
// Salt's _archive_jobs copies ($1 the cutoff), before purge_statements.
const std::vector<std::string>& archive_copy_statements();

// event_return_whitelist / event_return_blacklist (globs on the tag), as Salt's EventReturn.
bool event_wanted(const options& o, std::string_view tag);

}  // namespace sylvite::master::pg
