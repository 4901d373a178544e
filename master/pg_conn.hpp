// sylvite::master PostgreSQL job cache: one libpq connection (text parameters, COPY
// FROM STDIN) and a bounded pool of them for readers. Errors come back as text
// (connection::error()); nothing throws.
// Thread-safety: a connection is used by one thread at a time; the pool from any thread.
#pragma once
#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "master/pg_sql.hpp"

namespace sylvite::master::pg {

struct result_deleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using pg_result = std::unique_ptr<PGresult, result_deleter>;

// A libpq message on one line, without its trailing newline.
std::string one_line(const char* s);

// Time since the epoch (the spool's and the events' stamps, log rate limits).
std::int64_t now_us();
inline std::int64_t now_ms() { return now_us() / 1000; }

// Failed connects, shared by the writer, the readers' pool and the event sink of this
// process: a cause is logged once (error level, with a hint when it is TLS's), the same
// cause again only every 5 minutes with how many times it repeated, and the first
// success after failures once (info). `extra` follows the message (e.g. what waits).
void log_connect_failure(const options& o, const std::string& err, const std::string& extra = {});
void log_connect_success(const options& o);

class connection {
 public:
  explicit connection(const options& o);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  bool ok() const noexcept { return ok_ && c_ && PQstatus(c_) == CONNECTION_OK; }
  const std::string& error() const noexcept { return err_; }
  // SQLSTATE of the last refused statement ("" if none or the connection broke).
  const std::string& sqlstate() const noexcept { return state_; }
  // The last failure is the data's (bad value, constraint, too large: classes 22, 23, 54),
  // so sending it again cannot succeed; anything else (read-only standby after a
  // failover, shutdown, missing table, lock timeout) is retried.
  bool data_refused() const noexcept {
    return !broken() && state_.size() == 5 && (state_.starts_with("22") || state_.starts_with("23") ||
                                               state_.starts_with("54"));
  }
  // The last failure broke the connection (not a refused statement).
  bool broken() const noexcept { return !c_ || PQstatus(c_) != CONNECTION_OK; }
  // A statement with text parameters; the result if its status is `want`, else null (error()).
  pg_result exec(const std::string& sql, const std::vector<std::string>& params = {},
                 ExecStatusType want = PGRES_COMMAND_OK);
  bool run(const std::string& sql, const std::vector<std::string>& params = {}) {
    return static_cast<bool>(exec(sql, params));
  }
  pg_result query(const std::string& sql, const std::vector<std::string>& params = {}) {
    return exec(sql, params, PGRES_TUPLES_OK);
  }
  // COPY ... FROM STDIN with the data in COPY text format.
  bool copy_in(const char* sql, const std::string& data);
  bool staging_ready = false;  // the writer's temp table exists in this session

 private:
  PGconn* c_ = nullptr;
  bool ok_ = false;
  std::string err_;
  std::string state_;
};

// A bounded set of connections for readers. acquire() waits up to timeout for a free one
// (or opens one below the bound); after a failed connect, acquire fails at once for a
// second (a database that is down does not make every reader wait connect_timeout).
class pool {
 public:
  pool(options o, std::size_t size);
  ~pool();
  class lease {
   public:
    lease(pool* p, std::unique_ptr<connection> c);
    lease(lease&& o) noexcept;
    lease& operator=(lease&&) = delete;
    ~lease();
    connection* operator->() const noexcept { return c_.get(); }
    connection& get() const noexcept { return *c_; }

   private:
    pool* p_;
    std::unique_ptr<connection> c_;
  };
  std::optional<lease> acquire(std::chrono::milliseconds timeout);
  // Closes every idle connection: one was found broken, so the server restarted and the
  // others (still CONNECTION_OK until used) are broken too.
  void drop_idle();
  // Ends the pause after a failed connect (the writer reached the server again).
  void reset_backoff();
  std::size_t open_connections() const;

 private:
  void give_back(std::unique_ptr<connection> c);
  options o_;
  std::size_t size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<connection>> idle_;
  std::size_t total_ = 0;
  std::chrono::steady_clock::time_point fail_until_{};
};

}  // namespace sylvite::master::pg
