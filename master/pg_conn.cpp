// sylvite::master PostgreSQL job cache: libpq connection and reader pool (pg_conn.hpp).
#include "master/pg_conn.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace sylvite::master::pg {

std::string one_line(const char* s) {
  std::string m = s ? s : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  for (auto& ch : m)
    if (ch == '\n') ch = ' ';
  return m;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
struct connect_log_state {
  std::mutex mu;
  std::string last_err;
  std::int64_t last_ms = 0;
  std::uint64_t repeated = 0;
  bool failing = false;
};
connect_log_state& connect_log() {
  static connect_log_state s;
  return s;
}
}  // namespace

void log_connect_failure(const options& o, const std::string& err, const std::string& extra) {
  auto& st = connect_log();
  std::unique_lock lk(st.mu);
  const auto now = now_ms();
  st.failing = true;
  if (err == st.last_err && now - st.last_ms < 300000) {
    st.repeated++;
    lk.unlock();
    spdlog::debug("pgjsonb: connect failed again: {}{}", err, extra);
    return;
  }
  const auto repeated = std::exchange(st.repeated, 0);
  const bool same = err == st.last_err;
  st.last_err = err;
  st.last_ms = now;
  lk.unlock();
  const bool tls = err.find("SSL") != std::string::npos || err.find("certificate") != std::string::npos ||
                   err.find("sslmode") != std::string::npos;
  spdlog::error("pgjsonb: PostgreSQL unavailable ({}): {}{}{}{}", describe(o), err,
                tls ? " [TLS: check returner.pgjsonb.sslmode, sslrootcert, sslcert, sslkey, sslcrl]" : "", extra,
                same ? " (the same failure " + std::to_string(repeated) + " more time(s) in the last 5 minutes)"
                     : std::string(" (logged once; retried until it connects)"));
}

void log_connect_success(const options& o) {
  auto& st = connect_log();
  std::unique_lock lk(st.mu);
  if (!st.failing) return;
  st.failing = false;
  st.last_err.clear();
  st.repeated = 0;
  lk.unlock();
  spdlog::info("pgjsonb: connected to PostgreSQL ({})", describe(o));
}

connection::connection(const options& o) {
  auto kv = conninfo(o);
  std::vector<const char*> keys, vals;
  for (const auto& [k, v] : kv) {
    keys.push_back(k.c_str());
    vals.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  vals.push_back(nullptr);
  c_ = PQconnectdbParams(keys.data(), vals.data(), 0);
  if (c_ && PQstatus(c_) == CONNECTION_OK) {
    ok_ = true;
    // Server notices (IF NOT EXISTS ... skipping) are not for the master's stderr.
    PQsetNoticeProcessor(c_, [](void*, const char*) {}, nullptr);
    pg_result r(PQexec(c_, "SET TIME ZONE 'UTC'"));
  } else {
    err_ = one_line(c_ ? PQerrorMessage(c_) : "out of memory");
  }
}

connection::~connection() {
  if (c_) PQfinish(c_);
}

pg_result connection::exec(const std::string& sql, const std::vector<std::string>& params, ExecStatusType want) {
  std::vector<const char*> vals;
  vals.reserve(params.size());
  for (const auto& p : params) vals.push_back(p.c_str());
  pg_result r(params.empty() ? PQexec(c_, sql.c_str())
                             : PQexecParams(c_, sql.c_str(), static_cast<int>(vals.size()), nullptr, vals.data(),
                                            nullptr, nullptr, 0));
  state_.clear();
  if (!r || PQresultStatus(r.get()) != want) {
    if (r)
      if (const char* st = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE)) state_ = st;
    err_ = one_line(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(c_));
    if (err_.empty()) err_ = one_line(PQerrorMessage(c_));
    return nullptr;
  }
  return r;
}

bool connection::copy_in(const char* sql, const std::string& data) {
  state_.clear();
  pg_result r(PQexec(c_, sql));
  if (!r || PQresultStatus(r.get()) != PGRES_COPY_IN) {
    err_ = one_line(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(c_));
    return false;
  }
  r.reset();
  constexpr std::size_t chunk = 1 << 20;
  for (std::size_t off = 0; off < data.size(); off += chunk) {
    const auto n = std::min(chunk, data.size() - off);
    if (PQputCopyData(c_, data.data() + off, static_cast<int>(n)) != 1) {
      err_ = one_line(PQerrorMessage(c_));
      return false;
    }
  }
  if (PQputCopyEnd(c_, nullptr) != 1) {
    err_ = one_line(PQerrorMessage(c_));
    return false;
  }
  bool good = true;
  while (PGresult* res = PQgetResult(c_)) {
    pg_result rr(res);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
      if (const char* st = PQresultErrorField(res, PG_DIAG_SQLSTATE)) state_ = st;
      err_ = one_line(PQresultErrorMessage(res));
      good = false;
    }
  }
  return good;
}

// ---------------------------------------------------------------- pool

pool::pool(options o, std::size_t size) : o_(std::move(o)), size_(std::max<std::size_t>(size, 1)) {}
pool::~pool() = default;

pool::lease::lease(pool* p, std::unique_ptr<connection> c) : p_(p), c_(std::move(c)) {}
pool::lease::lease(lease&& o) noexcept : p_(o.p_), c_(std::move(o.c_)) { o.p_ = nullptr; }
pool::lease::~lease() {
  if (p_) p_->give_back(std::move(c_));
}

std::optional<pool::lease> pool::acquire(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lk(mu_);
  for (;;) {
    if (std::chrono::steady_clock::now() < fail_until_) return std::nullopt;
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      if (c->ok()) return lease(this, std::move(c));
      --total_;  // broken while idle: dropped, make another
      continue;
    }
    if (total_ < size_) {
      ++total_;
      lk.unlock();
      auto c = std::make_unique<connection>(o_);
      if (c->ok()) return lease(this, std::move(c));
      log_connect_failure(o_, c->error(), " (a read)");
      lk.lock();
      --total_;
      fail_until_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      cv_.notify_all();
      return std::nullopt;
    }
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout) return std::nullopt;
  }
}

void pool::give_back(std::unique_ptr<connection> c) {
  std::lock_guard lk(mu_);
  if (c && c->ok()) {
    idle_.push_back(std::move(c));
  } else {
    --total_;
  }
  cv_.notify_one();
}

void pool::drop_idle() {
  std::lock_guard lk(mu_);
  total_ -= idle_.size();
  idle_.clear();
  cv_.notify_all();
}

void pool::reset_backoff() {
  std::lock_guard lk(mu_);
  fail_until_ = {};
}

std::size_t pool::open_connections() const {
  std::lock_guard lk(mu_);
  return total_;
}

}  // namespace sylvite::master::pg
