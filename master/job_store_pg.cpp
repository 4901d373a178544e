// sylvite::master job store on PostgreSQL (job_store_pg.hpp): libpq connections, the
// reader pool, the spool writer thread and the event_return sink.
#include "master/job_store_pg.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/pki/key_store.hpp"
#include "master/detail.hpp"
#include "master/pg_conn.hpp"

namespace sylvite::master::pg {

namespace {
// The jid Salt would give at a time (%Y%m%d%H%M%S%f, UTC).
std::string jid_at(std::int64_t unix_us) {
  std::string t = timestamp(unix_us);  // "YYYY-MM-DD HH:MM:SS.ffffff+00"
  std::string j;
  for (char ch : t.substr(0, 26))
    if (ch >= '0' && ch <= '9') j.push_back(ch);
  return j;
}

}  // namespace

namespace {
wire::value parse_json(const char* text) {
  if (!text) return nullptr;
  auto v = wire::value::parse(text, nullptr, false);
  if (v.is_discarded()) return nullptr;
  return v;
}

std::string minions_json(const std::vector<std::string>& minions) {
  std::set<std::string> s(minions.begin(), minions.end());
  wire::value a = wire::value::array();
  for (const auto& m : s) a.push_back(m);
  return json_text(a);
}

}  // namespace

// ---------------------------------------------------------------- job store

job_store_pg::job_store_pg(options o)
    : o_(std::move(o)), pool_(std::make_unique<pool>(o_, static_cast<std::size_t>(o_.pool_size))) {}

result<std::unique_ptr<job_store_pg>> job_store_pg::create(const options& o) {
  std::unique_ptr<job_store_pg> s(new job_store_pg(o));
  auto sp = spool::open(o.spool_dir, static_cast<std::uint64_t>(o.spool_max_bytes));
  if (!sp) return sp.error();
  s->spool_ = std::move(*sp);
  // The pending view starts with what the spool retains (some of it may be committed
  // already: pruned once the writer reads the database's checkpoint).
  for (std::uint64_t after = 0;;) {
    auto recs = s->spool_->read_after(after, 10000, 16u << 20);
    if (recs.empty()) break;
    after = recs.back().seq;
    for (auto& r : recs) {
      std::string jid;
      std::string_view j, json;
      if (r.kind == 'R') {
        auto f = split_copy_line(r.payload);
        if (f.size() >= 2) jid = f[1];
      } else if (split_keyed_payload(r.payload, j, json)) {
        jid = std::string(j);
      }
      if (!jid.empty()) s->note_pending(r.seq, r.kind, jid, std::move(r.payload));
    }
    if (s->pending_bytes() >= static_cast<std::size_t>(o.pending_view_bytes)) break;
  }
  spdlog::info("pgjsonb job cache on {} (spool {} in {}, {} record(s) not yet sent)", describe(o), s->spool_->id(),
               o.spool_dir.string(), s->spool_->last_seq());
  s->writer_ = std::thread([p = s.get()] { p->run_writer(); });
  return s;
}

job_store_pg::~job_store_pg() {
  // A clean stop sends what is spooled if the database answers within a moment; the rest
  // stays in the spool for the next start.
  (void)wait_committed(std::chrono::milliseconds(3000));
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  spool_->flush();
}

void job_store_pg::wake_writer() {
  // Under the writer's mutex: it is either before its predicate (and sees the record) or
  // waiting (and gets the notification); no lost wake-up.
  { std::lock_guard lk(mu_); }
  work_cv_.notify_one();
}

bool job_store_pg::first_return(const std::string& jid, const std::string& id) {
  std::lock_guard lk(idx_mu_);
  auto it = idx_.find(jid);
  if (it == idx_.end()) {
    it = idx_.emplace(jid, std::unordered_set<std::string>{}).first;
    idx_order_.push_back(jid);
    while (idx_order_.size() > 64) {
      idx_.erase(idx_order_.front());
      idx_order_.pop_front();
    }
  }
  return it->second.insert(id).second;
}

result<void> job_store_pg::save_load(const std::string& jid, const wire::value& load,
                                     const std::vector<std::string>& minions) {
  const std::string j = clip(jid, 255);
  std::string lp = keyed_payload(j, json_text(load));
  auto r = spool_->append('L', lp);
  if (!r) {
    stats_.spool_refused++;
    spdlog::error("pgjsonb: the load of job {} is not kept: the spool refused it (full or failing: {})",
                  detail::printable(jid), r.error().message());
    return r.error();
  }
  wake_writer();
  note_pending(*r, 'L', j, std::move(lp));
  if (!minions.empty()) {
    std::string mp = keyed_payload(j, minions_json(minions));
    auto m = spool_->append('M', mp);
    if (!m) {
      stats_.spool_refused++;
      return m.error();
    }
    wake_writer();
    note_pending(*m, 'M', j, std::move(mp));
  }
  return {};
}

result<void> job_store_pg::add_minions(const std::string& jid, const std::vector<std::string>& minions) {
  if (minions.empty()) return {};
  const std::string j = clip(jid, 255);
  std::string mp = keyed_payload(j, minions_json(minions));
  auto m = spool_->append('M', mp);
  if (!m) {
    stats_.spool_refused++;
    spdlog::error("pgjsonb: expected minions of job {} not kept: {}", detail::printable(jid), m.error().message());
    return m.error();
  }
  wake_writer();
  note_pending(*m, 'M', j, std::move(mp));
  return {};
}

result<return_record> job_store_pg::record_return(const std::string& jid, const std::string& id,
                                                  const wire::value& ret_load) {
  if (jid == "nocache") return return_record::not_kept;
  if (!pki::valid_id(id)) {
    spdlog::warn("pgjsonb: refusing return for jid {} from invalid id '{}'", detail::printable(jid),
                 detail::printable(id));
    return util::errc::invalid_argument;
  }
  if (!first_return(jid, id)) return return_record::duplicate;
  std::string line;
  append_copy_line(line, make_return_row(jid, id, ret_load, now_us()));
  auto r = spool_->append('R', line);
  if (!r) {
    stats_.spool_refused++;
    spdlog::error("pgjsonb: the return of {} for job {} is not kept: the spool refused it (full or failing: {})",
                  detail::printable(id), detail::printable(jid), r.error().message());
    return r.error();
  }
  wake_writer();
  note_pending(*r, 'R', clip(jid, 255), std::move(line));
  // Optional: the ack also waits for the group fsync (power loss safe, a few ms later).
  if (o_.spool_sync) spool_->flush();
  return return_record::stored;
}

bool job_store_pg::wait_committed(std::chrono::milliseconds timeout) const {
  const std::uint64_t target = spool_->last_seq();
  std::unique_lock lk(mu_);
  return committed_cv_.wait_for(lk, timeout, [&] { return committed_.load() >= target || stop_; }) &&
         committed_.load() >= target;
}

void job_store_pg::flush() {
  spool_->flush();  // durable in the spool
  (void)wait_committed(std::chrono::milliseconds(o_.read_wait_ms));
}

bool job_store_pg::ensure_schema(connection& c) {
  // One master at a time (three masters starting together would race on CREATE ... IF NOT
  // EXISTS, which is not atomic in PostgreSQL).
  if (!c.run("BEGIN")) return false;
  bool ok = static_cast<bool>(c.query("SELECT pg_advisory_xact_lock(7365726174697465)"));  // any constant
  for (const auto& s : schema_statements()) {
    if (!ok) break;
    ok = c.run(s);
  }
  if (ok && o_.archive_jobs)
    for (const auto& s : archive_statements()) {
      if (!ok) break;
      ok = c.run(s);
    }
  if (ok) ok = c.run("COMMIT");
  if (!ok) {
    spdlog::error("pgjsonb: cannot create the schema: {}", c.error());
    (void)c.run("ROLLBACK");
  }
  return ok;
}

job_store_pg::batch_result job_store_pg::write_batch(connection& c, const std::vector<spool_record>& batch) {
  // jids: the last load per jid (ON CONFLICT cannot touch a row twice in one statement).
  std::map<std::string, std::string> loads;
  std::vector<std::string> load_order;
  std::map<std::string, std::set<std::string>> minions;
  std::string copy;
  std::size_t returns = 0;
  for (const auto& r : batch) {
    std::string_view jid, json;
    switch (r.kind) {
      case 'L':
        if (!split_keyed_payload(r.payload, jid, json)) break;
        if (!loads.count(std::string(jid))) load_order.emplace_back(jid);
        loads[std::string(jid)] = std::string(json);
        break;
      case 'M': {
        if (!split_keyed_payload(r.payload, jid, json)) break;
        auto v = wire::value::parse(json, nullptr, false);
        auto& set = minions[std::string(jid)];
        if (v.is_array())
          for (const auto& e : v)
            if (e.is_string()) set.insert(e.get<std::string>());
        break;
      }
      case 'R':
        copy += r.payload;
        ++returns;
        break;
      default:
        spdlog::error("pgjsonb spool: record {} of unknown kind {} skipped", r.seq, static_cast<int>(r.kind));
    }
  }
  auto fail = [&](const char* what) {
    const bool broken = c.broken();
    const bool data = c.data_refused();
    c.staging_ready = false;  // a rolled back CREATE TEMP TABLE is gone
    spdlog::log(data ? spdlog::level::err : spdlog::level::warn, "pgjsonb: {} failed: {}{}", what, c.error(),
                data ? "" : " (retried)");
    if (!broken) (void)c.run("ROLLBACK");
    // Only a record the database refuses for its content is ever skipped; a read-only
    // standby, a shutdown or a missing table are waited out (the spool keeps the records).
    return data ? batch_result::data_error : batch_result::conn_error;
  };
  if (!c.run("BEGIN")) return fail("BEGIN");
  constexpr std::size_t rows_per_stmt = 1000;
  for (std::size_t i = 0; i < load_order.size(); i += rows_per_stmt) {
    const std::size_t n = std::min(rows_per_stmt, load_order.size() - i);
    std::vector<std::string> params;
    for (std::size_t k = 0; k < n; ++k) {
      params.push_back(load_order[i + k]);
      params.push_back(loads[load_order[i + k]]);
    }
    if (!c.run(jids_upsert_sql(n), params)) return fail("INSERT INTO jids");
  }
  if (!minions.empty()) {
    std::vector<std::pair<std::string, std::string>> rows;
    for (auto& [jid, set] : minions) rows.emplace_back(jid, minions_json({set.begin(), set.end()}));
    for (std::size_t i = 0; i < rows.size(); i += rows_per_stmt) {
      const std::size_t n = std::min(rows_per_stmt, rows.size() - i);
      std::vector<std::string> params;
      for (std::size_t k = 0; k < n; ++k) {
        params.push_back(rows[i + k].first);
        params.push_back(rows[i + k].second);
      }
      if (!c.run(minions_upsert_sql(n), params)) return fail("INSERT INTO sylvite_job_minions");
    }
  }
  if (!copy.empty()) {
    if (!c.staging_ready) {
      if (!c.run(staging_create_sql)) return fail("CREATE TEMP TABLE");
      c.staging_ready = true;
    }
    if (!c.copy_in(copy_staging_sql, copy)) return fail("COPY salt_returns");
    if (!c.run(staging_insert_sql)) return fail("INSERT INTO salt_returns");
  }
  if (!c.run(checkpoint_upsert_sql, {spool_->id(), clip(o_.master_id, 255), std::to_string(batch.back().seq)}))
    return fail("the spool checkpoint");
  if (!c.run("COMMIT")) return fail("COMMIT");
  stats_.batches++;
  stats_.records += batch.size();
  stats_.returns += returns;
  return batch_result::ok;
}

std::size_t job_store_pg::clean_with(connection& c, std::chrono::seconds keep) {
  if (keep.count() <= 0) return 0;
  // Salt: the cutoff is the server's NOW() - keep_jobs_seconds.
  auto st = c.query("SELECT (NOW() - make_interval(secs => $1::double precision))::text",
                    {std::to_string(keep.count())});
  if (!st || PQntuples(st.get()) != 1) {
    spdlog::error("pgjsonb: keep_jobs_seconds: {}", c.error());
    return 0;
  }
  const std::string stamp = PQgetvalue(st.get(), 0, 0);
  std::size_t removed = 0;
  if (o_.archive_jobs) {
    for (const auto& s : archive_statements())
      if (!c.run(s)) spdlog::error("pgjsonb: archive_jobs: {}", c.error());
    for (const auto& s : archive_copy_statements())
      if (!c.run(s, {stamp})) {
        spdlog::error("pgjsonb: archive_jobs: {}", c.error());
        return 0;  // nothing is purged that was not archived
      }
  }
  bool first = true;
  for (const auto& s : purge_statements()) {
    auto r = c.exec(s, {stamp});
    if (!r) {
      spdlog::error("pgjsonb: keep_jobs_seconds: {}", c.error());
      return removed;
    }
    if (first) removed = static_cast<std::size_t>(std::strtoull(PQcmdTuples(r.get()), nullptr, 10));
    first = false;
  }
  if (!c.run("DELETE FROM sylvite_job_minions m WHERE NOT EXISTS (SELECT 1 FROM jids j WHERE j.jid = m.jid) "
             "AND NOT EXISTS (SELECT 1 FROM salt_returns r WHERE r.jid = m.jid) AND m.jid < $1",
             {jid_at(now_us() - static_cast<std::int64_t>(keep.count()) * 1000000)}))
    spdlog::error("pgjsonb: keep_jobs_seconds (expected minions): {}", c.error());
  stats_.cleaned += removed;
  return removed;
}

std::size_t job_store_pg::clean_old(std::chrono::seconds keep) {
  if (keep.count() <= 0) return 0;
  auto l = pool_->acquire(std::chrono::milliseconds(o_.read_wait_ms));
  if (!l) return 0;
  return clean_with(l->get(), keep);
}

void job_store_pg::run_writer() {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 5);
  std::unique_ptr<connection> c;
  auto backoff = std::chrono::milliseconds(100);
  auto last_clean = std::chrono::steady_clock::now();
  bool have_checkpoint = false;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (stop_) return;
    }
    if (!c || !c->ok()) {
      c = std::make_unique<connection>(o_);
      have_checkpoint = false;
      if (!c->ok() || !ensure_schema(*c)) {
        db_state_ = 2;
        const auto pending = spool_->last_seq() - std::min(spool_->last_seq(), committed_.load());
        log_connect_failure(o_, c->error().empty() ? std::string("cannot create the schema") : c->error(),
                            "; " + std::to_string(pending) + " record(s) wait in the spool");
        c.reset();
        stats_.reconnects++;
        std::unique_lock lk(mu_);
        if (work_cv_.wait_for(lk, backoff, [this] { return stop_; })) return;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
    }
    if (!have_checkpoint) {
      // Exactly once: what the database already has of this spool is not sent again.
      auto r = c->query("SELECT seq FROM sylvite_spool_checkpoint WHERE spool_id = $1", {spool_->id()});
      if (!r) {
        spdlog::warn("pgjsonb: cannot read the spool checkpoint: {}", c->error());
        c.reset();
        continue;
      }
      // The server is back: a read need not wait out the pool's pause after a failed
      // connect (before the view drops what the database now has).
      pool_->reset_backoff();
      std::uint64_t seq = 0;
      if (PQntuples(r.get()) == 1) seq = std::strtoull(PQgetvalue(r.get(), 0, 0), nullptr, 10);
      if (seq > spool_->last_seq()) {
        spdlog::error("pgjsonb: the database's checkpoint of spool {} ({}) is past the spool ({}): spool lost?",
                      spool_->id(), seq, spool_->last_seq());
      }
      {
        std::lock_guard lk(mu_);
        committed_ = std::max(committed_.load(), seq);
      }
      committed_cv_.notify_all();
      note_committed(committed_.load());
      db_state_ = 1;
      log_connect_success(o_);
      have_checkpoint = true;
      if (seq < spool_->last_seq())
        spdlog::info("pgjsonb: connected; replaying {} spooled record(s) after {}", spool_->last_seq() - seq, seq);
    }
    auto batch = spool_->read_after(committed_.load(), static_cast<std::size_t>(o_.batch_max), 16u << 20);
    if (batch.empty()) {
      if (o_.keep_jobs_seconds > 0 &&
          std::chrono::steady_clock::now() - last_clean >= std::chrono::seconds(o_.clean_interval)) {
        last_clean = std::chrono::steady_clock::now();
        auto n = clean_with(*c, std::chrono::seconds(o_.keep_jobs_seconds));
        if (n) spdlog::info("pgjsonb: removed {} old job(s) (keep_jobs_seconds)", n);
        continue;
      }
      std::unique_lock lk(mu_);
      if (work_cv_.wait_for(lk, std::chrono::milliseconds(500),
                            [this] { return stop_ || spool_->last_seq() > committed_.load(); }) &&
          stop_)
        return;
      continue;
    }
    auto res = write_batch(*c, batch);
    if (res == batch_result::data_error) {
      // One record the database refuses must not stop the others: one by one, and a
      // refused one is skipped (logged) with the checkpoint moved past it.
      stats_.failed_batches++;
      for (const auto& r : batch) {
        std::vector<spool_record> one{r};
        auto r1 = write_batch(*c, one);
        if (r1 == batch_result::conn_error) {
          res = r1;
          break;
        }
        if (r1 == batch_result::data_error) {
          stats_.skipped_records++;
          spdlog::error("pgjsonb: spool record {} (kind {}) refused by the database, skipped", r.seq, r.kind);
          if (c->run("BEGIN") &&
              c->run(checkpoint_upsert_sql, {spool_->id(), clip(o_.master_id, 255), std::to_string(r.seq)}) &&
              c->run("COMMIT")) {
          } else {
            res = batch_result::conn_error;
            break;
          }
        }
        {
          std::lock_guard lk(mu_);
          committed_ = r.seq;
        }
        committed_cv_.notify_all();
        note_committed(r.seq);
      }
      if (res != batch_result::conn_error) res = batch_result::ok;
    }
    if (res == batch_result::conn_error) {
      // The outcome of a COMMIT cut off is unknown: the checkpoint is read again.
      c.reset();
      db_state_ = 2;
      std::unique_lock lk(mu_);
      if (work_cv_.wait_for(lk, backoff, [this] { return stop_; })) return;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      continue;
    }
    backoff = std::chrono::milliseconds(100);
    {
      std::lock_guard lk(mu_);
      committed_ = std::max(committed_.load(), batch.back().seq);
    }
    committed_cv_.notify_all();
    note_committed(committed_.load());
    spool_->release(committed_.load());
  }
}

void job_store_pg::log_read_error(const char* what, const std::string& err) const {
  // No connection at all: log_connect_failure said why (once); the read answers from the
  // pending view.
  if (err.empty()) return;
  const auto now = now_ms();
  auto last = read_err_log_ms_.load();
  if (now - last < 10000 || !read_err_log_ms_.compare_exchange_strong(last, now)) return;
  spdlog::error("pgjsonb: {}: {} (answered from this master's spool only)", what, err);
}

namespace {
// A reader's query: a pooled connection, and once more on a fresh one when that
// connection turns out broken (the server restarted since it was last used). The other
// idle connections date from before the restart too: they are dropped, so the retry
// connects anew instead of taking another dead one from the pool.
pg_result read_query(pool& p, int wait_ms, const std::string& sql, const std::vector<std::string>& params,
                     std::string& err) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto l = p.acquire(std::chrono::milliseconds(wait_ms));
    if (!l) {
      if (attempt == 0) err.clear();
      return nullptr;
    }
    auto r = (*l)->query(sql, params);
    if (r) return r;
    err = (*l)->error();
    if (!(*l)->broken()) return nullptr;
    p.drop_idle();
  }
  return nullptr;
}
}  // namespace

// ---------------------------------------------------------------- pending view

void job_store_pg::note_pending(std::uint64_t seq, char kind, const std::string& jid, std::string payload) {
  if (seq <= committed_.load()) return;  // committed already (the writer was quicker)
  std::unique_lock lk(pend_mu_);
  if (pending_bytes_ + payload.size() > static_cast<std::size_t>(o_.pending_view_bytes)) {
    lk.unlock();
    stats_.view_skipped++;
    const auto now = now_ms();
    auto last = view_log_ms_.load();
    if (now - last >= 10000 && view_log_ms_.compare_exchange_strong(last, now))
      spdlog::warn("pgjsonb: {} spooled record(s) are not visible to reads until the database has them "
                   "(the pgjsonb_pending_view_mb bound, {} bytes, is reached)",
                   stats_.view_skipped.load(), o_.pending_view_bytes);
    return;
  }
  auto& j = pending_[jid];
  j.last_seq = std::max(j.last_seq, seq);
  j.bytes += payload.size();
  pending_bytes_ += payload.size();
  pending_count_++;
  j.records.push_back({seq, kind, std::move(payload)});
  pending_order_.emplace_back(seq, jid);
}

void job_store_pg::note_committed(std::uint64_t seq) {
  std::lock_guard lk(pend_mu_);
  while (!pending_order_.empty() && pending_order_.front().first <= seq) {
    auto it = pending_.find(pending_order_.front().second);
    if (it != pending_.end() && it->second.last_seq <= seq) {
      pending_bytes_ -= it->second.bytes;
      pending_count_ -= it->second.records.size();
      pending_.erase(it);
    }
    pending_order_.pop_front();
  }
}

std::vector<job_store_pg::pending_record> job_store_pg::pending_of(const std::string& jid) const {
  std::lock_guard lk(pend_mu_);
  auto it = pending_.find(jid);
  if (it == pending_.end()) return {};
  auto recs = it->second.records;
  std::sort(recs.begin(), recs.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return recs;
}

std::size_t job_store_pg::pending_records() const {
  std::lock_guard lk(pend_mu_);
  return pending_count_;
}

std::size_t job_store_pg::pending_bytes() const {
  std::lock_guard lk(pend_mu_);
  return pending_bytes_;
}

void job_store_pg::wait_for_writes() const {
  // While the writer cannot reach the database, waiting for it is pointless: the view
  // has this master's writes. At start (not tried yet) a read waits for the replay.
  if (db_state_.load() != 2) (void)wait_committed(std::chrono::milliseconds(o_.read_wait_ms));
}

namespace {
// What jobs.lookup_jid shows of a return, from its full_ret.
wire::value ret_record(const wire::value& full) {
  wire::value rec = wire::value::object();
  for (const char* k : {"return", "retcode", "success", "out"})
    if (const wire::value* v = full.is_object() ? wire::find(full, k) : nullptr) rec[k] = *v;
  if (!rec.contains("return")) rec["return"] = nullptr;
  return rec;
}

wire::value parse_json_view(std::string_view text) {
  auto v = wire::value::parse(text, nullptr, false);
  if (v.is_discarded()) return nullptr;
  return v;
}

void add_minions_of(std::string_view json, std::set<std::string>& out) {
  auto v = parse_json_view(json);
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_string()) out.insert(e.get<std::string>());
}
}  // namespace

std::optional<wire::value> job_store_pg::get_load(const std::string& jid) const {
  wait_for_writes();
  std::string err;
  auto r = read_query(*pool_, o_.read_wait_ms, "SELECT load FROM jids WHERE jid = $1", {jid}, err);
  if (!r) log_read_error("get_load", err);
  if (r && PQntuples(r.get()) >= 1) return parse_json(PQgetvalue(r.get(), 0, 0));
  std::optional<wire::value> load;
  for (const auto& p : pending_of(jid)) {
    std::string_view j, json;
    if (p.kind == 'L' && split_keyed_payload(p.payload, j, json)) load = parse_json_view(json);
  }
  return load;
}

std::vector<std::string> job_store_pg::get_minions(const std::string& jid) const {
  wait_for_writes();
  std::string err;
  // The expected minions sylvite keeps; for a job another master (Salt) wrote, the
  // minions that returned (as Salt's pgjsonb get_minions, per job).
  auto r = read_query(*pool_, o_.read_wait_ms,
      "SELECT e FROM sylvite_job_minions m, jsonb_array_elements_text(m.minions) e WHERE m.jid = $1 "
      "UNION SELECT DISTINCT id FROM salt_returns WHERE jid = $1 AND NOT EXISTS "
      "(SELECT 1 FROM sylvite_job_minions WHERE jid = $1) ORDER BY 1",
      {jid}, err);
  if (!r) log_read_error("get_minions", err);
  std::set<std::string> out;
  if (r)
    for (int i = 0; i < PQntuples(r.get()); ++i) out.emplace(PQgetvalue(r.get(), i, 0));
  for (const auto& p : pending_of(jid)) {
    std::string_view j, json;
    if (p.kind == 'M' && split_keyed_payload(p.payload, j, json)) add_minions_of(json, out);
  }
  return {out.begin(), out.end()};
}

wire::value job_store_pg::get_returns(const std::string& jid) const {
  wait_for_writes();
  wire::value out = wire::value::object();
  std::string err;
  auto r = read_query(*pool_, o_.read_wait_ms, "SELECT id, full_ret FROM salt_returns WHERE jid = $1 ORDER BY id, alter_time",
                      {jid}, err);
  if (!r) log_read_error("get_returns", err);
  std::map<std::string, wire::value> by_id;  // sorted ids, first return wins
  if (r)
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      std::string id = PQgetvalue(r.get(), i, 0);
      if (by_id.count(id)) continue;
      by_id.emplace(std::move(id), ret_record(parse_json(PQgetvalue(r.get(), i, 1))));
    }
  for (const auto& p : pending_of(jid)) {
    if (p.kind != 'R') continue;
    auto f = split_copy_line(p.payload);  // fun, jid, return, id, success, full_ret, alter_time
    if (f.size() < 6 || by_id.count(f[3])) continue;
    by_id.emplace(f[3], ret_record(parse_json_view(f[5])));
  }
  for (auto& [id, rec] : by_id) out[id] = std::move(rec);
  return out;
}

std::vector<job_summary> job_store_pg::list_jobs(std::size_t max) const {
  wait_for_writes();
  std::map<std::string, job_summary, std::greater<>> jobs;  // newest first
  std::string err;
  std::string sql =
      "SELECT j.jid, j.load, m.minions FROM jids j LEFT JOIN sylvite_job_minions m ON m.jid = j.jid "
      "ORDER BY j.jid DESC";
  if (max) sql += " LIMIT " + std::to_string(max);
  auto r = read_query(*pool_, o_.read_wait_ms, sql, {}, err);
  if (!r) log_read_error("list_jobs", err);
  if (r)
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      job_summary s;
      s.jid = PQgetvalue(r.get(), i, 0);
      s.load = parse_json(PQgetvalue(r.get(), i, 1));
      if (!s.load.is_object()) continue;
      if (!PQgetisnull(r.get(), i, 2)) {
        auto m = parse_json(PQgetvalue(r.get(), i, 2));
        if (m.is_array())
          for (const auto& e : m)
            if (e.is_string()) s.minions.push_back(e.get<std::string>());
      }
      std::string jid = s.jid;
      jobs.emplace(std::move(jid), std::move(s));
    }
  // Jobs still only in the spool (the database away, or behind).
  std::vector<std::pair<std::string, std::vector<pending_record>>> pend;
  {
    std::lock_guard lk(pend_mu_);
    for (const auto& [jid, pj] : pending_)
      for (const auto& p : pj.records)
        if (p.kind == 'L' && !jobs.count(jid)) {
          pend.emplace_back(jid, pj.records);
          break;
        }
  }
  for (auto& [jid, recs] : pend) {
    std::sort(recs.begin(), recs.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    job_summary s;
    s.jid = jid;
    std::set<std::string> minions;
    for (const auto& p : recs) {
      std::string_view j, json;
      if (!split_keyed_payload(p.payload, j, json)) continue;
      if (p.kind == 'L') s.load = parse_json_view(json);
      if (p.kind == 'M') add_minions_of(json, minions);
    }
    if (!s.load.is_object()) continue;
    s.minions.assign(minions.begin(), minions.end());
    jobs.emplace(jid, std::move(s));
  }
  std::vector<job_summary> out;
  for (auto& [jid, s] : jobs) {
    if (max && out.size() >= max) break;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sylvite::master::pg
