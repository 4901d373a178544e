// sylvite::transport::pub_server: publish server. Connections are identified by the
// hello handler; a registry id -> {conn_id -> weak session} serves targeted publishes
// and presence. Fan-out copies weak pointers under the lock and queues the one shared
// frame buffer on every session outside it.
// Thread-safety: public methods are thread-safe. Lock order: hello_mu_ (shared) then
// presence_mu_ then mu_; presence callbacks run with presence_mu_ held (so events for one
// id never reorder) and must not call back into this server's presence-changing paths
// (none are public) nor stop it. Once stop() (or the destructor) returns, neither handler
// runs again: stop waits for a hello or presence call in progress, and the connections it
// closes afterwards report to nobody. So the handlers may capture what the owner destroys
// after stop().
#include <spdlog/spdlog.h>

#include <algorithm>
#include <shared_mutex>
#include <unordered_set>

#include "core/transport/detail/server.hpp"

namespace sylvite::transport {

struct pub_server::impl final : detail::server_base {
  using session_ptr = std::shared_ptr<detail::server_session>;

  impl(asio::io_context& io, endpoint ep, options opt, hello_handler h, presence_handler p)
      : server_base(io, std::move(ep), std::move(opt), "pub"), hello_(std::move(h)), presence_(std::move(p)) {}

  void on_frame(const session_ptr& s, wire::frame&& f) override {
    if (!hello_) return;
    std::shared_lock hl(hello_mu_);  // stop() waits for a hello in progress
    if (silenced_hello_) return;
    std::optional<std::string> id = hello_(f.body, s->peer());  // exceptions caught by the session
    if (!id || id->empty()) return;
    identify(s, *id);
  }

  // After this returns no handler runs again (see the header comment).
  void stop_and_silence() {
    server_base::stop();
    {
      std::unique_lock hl(hello_mu_);
      silenced_hello_ = true;
    }
    std::lock_guard pl(presence_mu_);
    silenced_presence_ = true;
  }

  bool identify_conn(std::uint64_t conn_id, const std::string& id) {
    session_ptr s;
    {
      std::lock_guard lk(mu_);
      auto it = conns_.find(conn_id);
      if (it == conns_.end()) return false;
      s = it->second.lock();
    }
    if (!s || id.empty()) return false;
    identify(s, id);
    return true;
  }

  void identify(const session_ptr& s, const std::string& id) {
    std::lock_guard pl(presence_mu_);
    std::optional<std::string> gone;
    bool came = false;
    {
      std::lock_guard lk(mu_);
      if (!conns_.count(s->id())) return;  // already closed and unregistered
      auto& cur = ident_[s->id()];
      if (cur == id) return;
      if (!cur.empty()) gone = detach_locked(cur, s->id());
      cur = id;
      auto& set = by_id_[id];
      came = set.empty();
      set.emplace(s->id(), s);
    }
    spdlog::debug("transport: pub connection {} from {} identified as {}", s->id(), s->peer().address, id);
    s->mark_authenticated();  // a verified hello: the pre-authentication limits are lifted
    if (gone) notify(*gone, false);
    if (came) notify(id, true);
  }

  void on_session_closed(const session_ptr& s) override {
    std::lock_guard pl(presence_mu_);
    std::optional<std::string> gone;
    {
      std::lock_guard lk(mu_);
      conns_.erase(s->id());
      uncount_unauth_locked(*s);
      auto it = ident_.find(s->id());
      if (it != ident_.end()) {
        gone = detach_locked(it->second, s->id());
        ident_.erase(it);
      }
    }
    if (gone) notify(*gone, false);
  }

  // mu_ held. Returns id if conn_id was its last connection.
  std::optional<std::string> detach_locked(const std::string& id, std::uint64_t conn_id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    it->second.erase(conn_id);
    if (!it->second.empty()) return std::nullopt;
    by_id_.erase(it);
    return id;
  }

  // presence_mu_ held.
  void notify(const std::string& id, bool connected) {
    if (!presence_ || silenced_presence_) return;
    try {
      presence_(id, connected);
    } catch (const std::exception& e) {
      spdlog::error("transport: presence handler failed for {}: {}", id, e.what());
    } catch (...) {
      spdlog::error("transport: presence handler failed for {}", id);
    }
  }

  static void send_all(const std::vector<std::weak_ptr<detail::server_session>>& targets,
                       const std::shared_ptr<const std::string>& frame) {
    for (const auto& w : targets) {
      if (auto s = w.lock()) s->send(frame);
    }
  }

  std::vector<std::weak_ptr<detail::server_session>> targets_all() const {
    std::vector<std::weak_ptr<detail::server_session>> out;
    std::lock_guard lk(mu_);
    out.reserve(conns_.size());
    for (const auto& [cid, w] : conns_) out.push_back(w);
    return out;
  }

  std::vector<std::weak_ptr<detail::server_session>> targets_of(const std::vector<std::string>& ids) const {
    std::vector<std::weak_ptr<detail::server_session>> out;
    std::unordered_set<std::uint64_t> seen;
    std::lock_guard lk(mu_);
    for (const auto& id : ids) {
      auto it = by_id_.find(id);
      if (it == by_id_.end()) continue;
      for (const auto& [cid, w] : it->second) {
        if (seen.insert(cid).second) out.push_back(w);
      }
    }
    return out;
  }

  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    {
      std::lock_guard lk(mu_);
      out.reserve(by_id_.size());
      for (const auto& [id, set] : by_id_) out.push_back(id);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  bool has(const std::string& id) const {
    std::lock_guard lk(mu_);
    return by_id_.count(id) != 0;
  }

  std::size_t count_of(const std::string& id) const {
    std::lock_guard lk(mu_);
    auto it = by_id_.find(id);
    return it == by_id_.end() ? 0 : it->second.size();
  }

  hello_handler hello_;
  presence_handler presence_;
  std::shared_mutex hello_mu_;
  bool silenced_hello_ = false;  // guarded by hello_mu_
  std::mutex presence_mu_;
  bool silenced_presence_ = false;  // guarded by presence_mu_
  // Guarded by server_base::mu_.
  std::unordered_map<std::uint64_t, std::string> ident_;
  std::unordered_map<std::string, std::unordered_map<std::uint64_t, std::weak_ptr<detail::server_session>>> by_id_;
};

pub_server::pub_server(asio::io_context& io, endpoint ep, options opt, hello_handler h, presence_handler p)
    : impl_(std::make_shared<impl>(io, std::move(ep), std::move(opt), std::move(h), std::move(p))) {}

pub_server::~pub_server() { impl_->stop_and_silence(); }

result<void> pub_server::start() { return impl_->start(); }
void pub_server::stop() { impl_->stop_and_silence(); }
std::uint16_t pub_server::bound_port() const { return impl_->bound_port(); }
std::size_t pub_server::connection_count() const { return impl_->connection_count(); }

void pub_server::publish_all(std::shared_ptr<const std::string> frame) {
  if (frame) impl::send_all(impl_->targets_all(), frame);
}

void pub_server::publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) {
  if (frame && !ids.empty()) impl::send_all(impl_->targets_of(ids), frame);
}

std::size_t pub_server::disconnect(const std::string& id) {
  std::size_t n = 0;
  for (const auto& w : impl_->targets_of({id})) {
    if (auto s = w.lock()) {
      s->close();
      ++n;
    }
  }
  return n;
}

std::vector<std::string> pub_server::connected_ids() const { return impl_->ids(); }

bool pub_server::is_connected(const std::string& id) const { return impl_->has(id); }
std::size_t pub_server::connections_of(const std::string& id) const { return impl_->count_of(id); }
bool pub_server::identify(std::uint64_t conn_id, const std::string& id) { return impl_->identify_conn(conn_id, id); }

}  // namespace sylvite::transport
