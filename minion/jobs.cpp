// sylvite::minion jobs (see jobs.hpp).
#include "minion/jobs.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>

#include <spdlog/spdlog.h>

#include "core/match/match.hpp"

namespace sylvite::minion {

bool jid_queue::add(const std::string& jid) {
  if (std::find(q_.begin(), q_.end(), jid) != q_.end()) return false;
  q_.push_back(jid);
  while (q_.size() > hwm_) q_.pop_front();
  return true;
}

bool is_job_for_me(const wire::value& load, const target_facts& me) {
  if (!load.is_object()) return false;
  for (const char* k : {"tgt", "jid", "fun", "arg"})
    if (!load.contains(k)) return false;
  const wire::value& tgt = load["tgt"];
  static const wire::value empty = wire::value::object();
  match::minion_facts facts{me.id, me.grains ? me.grains : &empty, me.pillar ? me.pillar : &empty};
  std::string tgt_type = "glob";
  if (auto t = wire::get_text(load, "tgt_type")) tgt_type = std::string(*t);
  char delim = ':';
  if (tgt_type == "grain" || tgt_type == "grain_pcre" || tgt_type == "pillar" || tgt_type == "compound") {
    if (auto d = wire::get_text(load, "delimiter"); d && d->size() == 1) delim = (*d)[0];
  }
  return match::matches(tgt, tgt_type, facts, delim);
}

std::string unsupported_job_reason(const wire::value& load) {
  const wire::value* fun = wire::find(load, "fun");
  if (fun && fun->is_array()) return "multi-function jobs are not supported by the sylvite minion";
  if (!fun || !wire::as_text(*fun)) return "job has no function name";
  return {};
}

wire::value make_return_load(const std::string& id, const wire::value& pub, const exec_outcome& o) {
  wire::value load = wire::value::object();
  load["cmd"] = "_return";
  load["id"] = id;
  load["success"] = o.success;
  load["return"] = o.ret;
  load["retcode"] = o.retcode;
  load["jid"] = pub.contains("jid") ? pub["jid"] : wire::value("");
  load["fun"] = pub.contains("fun") ? pub["fun"] : wire::value("");
  load["fun_args"] = pub.contains("arg") ? pub["arg"] : wire::value::array();
  if (pub.contains("user")) load["user"] = pub["user"];
  if (pub.contains("master_id")) load["master_id"] = pub["master_id"];
  if (pub.contains("metadata") && pub["metadata"].is_object()) load["metadata"] = pub["metadata"];
  if (o.out) load["out"] = *o.out;
  return load;
}

wire::value make_call_return_load(const std::string& id, const std::string& fun, const wire::value& fun_args,
                                  const exec_outcome& o) {
  wire::value load = wire::value::object();
  load["cmd"] = "_return";
  load["id"] = id;
  load["jid"] = "req";
  load["return"] = o.ret;
  load["retcode"] = o.retcode;
  if (o.out) load["out"] = *o.out;
  load["fun"] = fun;
  load["fun_args"] = fun_args;
  return load;
}

std::string gen_jid() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(now);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - secs).count();
  std::time_t t = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
  std::string micro = std::to_string(us % 1000000);
  return std::string(buf) + std::string(6 - micro.size(), '0') + micro;
}

job_pool::job_pool(std::size_t threads, std::size_t max_queue) : max_queue_(max_queue) {
  if (threads == 0) threads = 1;
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

job_pool::~job_pool() { stop(); }

bool job_pool::submit(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    if (stopping_ || q_.size() >= max_queue_) return false;
    q_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

void job_pool::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

std::size_t job_pool::busy() const {
  std::lock_guard lk(mu_);
  return busy_ + q_.size();
}

void job_pool::run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !q_.empty(); });
      if (q_.empty()) return;
      fn = std::move(q_.front());
      q_.pop_front();
      ++busy_;
    }
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("job thread: unexpected exception: {}", e.what());
    }
    std::lock_guard lk(mu_);
    --busy_;
  }
}

}  // namespace sylvite::minion
