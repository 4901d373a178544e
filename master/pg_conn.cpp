// sylvite::master PostgreSQL job cache: libpq connection and reader pool (pg_conn.hpp).
#include "master/pg_conn.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace sylvite::master::pg {

std::string one_line(const char* s) {
  std::string m = s ? s : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  for (auto& ch : m)
    if (ch == '\n') ch = ' ';
  return m;
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
      spdlog::warn("pgjsonb: cannot connect to PostgreSQL ({}): {}", describe(o_), c->error());
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

std::size_t pool::open_connections() const {
  std::lock_guard lk(mu_);
  return total_;
}

}  // namespace sylvite::master::pg
