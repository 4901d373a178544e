// sylvite::master pub_process_group: the publish port served by `publish_processes`
// child processes (`sylvite-publisher`, master/bin/publisher.cpp) instead of the master
// itself (TCP transport). The master opens one listening socket per child on the publish
// port (SO_REUSEPORT: the kernel spreads new connections evenly over them by address) and
// each child accepts on its own, so the minions' publish connections (one descriptor
// each) are spread over the children and a master is no longer bound by one process's
// open-files limit. The master keeps the rest: each hello a child receives is checked
// here (key_service) and the child told the id; children report presence (first/last
// connection of an id) and their connection counts; publishes go to the children as raw
// frames, a targeted one only to the children holding a target, with only those ids.
// A child that dies is started again (backoff 0.5 s doubling to 30 s) on the same
// listening socket, which the master keeps open: connections that arrive meanwhile wait
// in its backlog. Each child is pinged over its link every 5 s; one that leaves a ping
// unanswered for 30 s after it was written to the link (stopped, hung) is killed and
// started again the same way. The link is master/pub_link.hpp.
// Thread-safety: every public method is thread-safe. Handlers (hello, presence) run on
// an io thread; presence calls are serialized.
#pragma once
#include <boost/asio/io_context.hpp>
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/transport/transport.hpp"
#include "master/services.hpp"

namespace sylvite::master {

struct pub_process_settings {
  int count = 2;
  std::filesystem::path exe;  // empty: sylvite-publisher next to this program
  // The publish port's options. max_connections, pre_auth_max_connections and the
  // pre-auth byte budget are divided among the children; the per-source cap applies in each.
  transport::options topt;
  std::string log_level, log_file, log_level_logfile;  // for the children's logs
};

class pub_process_group final : public pub_sink {
 public:
  // A hello (any frame a minion sends on its publish connection): the minion id now, or
  // nullopt and later identified(id) from any thread (a key read off the io thread).
  using hello_fn = std::function<std::optional<std::string>(const wire::value& body, const std::string& address,
                                                            std::function<void(const std::string&)> identified)>;
  using presence_fn = std::function<void(const std::string& id, bool connected)>;

  pub_process_group(boost::asio::io_context& io, transport::endpoint ep, pub_process_settings s, hello_fn hello,
                    presence_fn presence);
  ~pub_process_group() override;
  // Listen on the publish port (no process yet): a port in use fails here.
  result<void> start();
  // Start the processes. Call once the master runs as its final user.
  void launch();
  // Close the links, wait up to 3 s for the processes to exit, kill what is left.
  void stop();
  void reopen_logs();  // the children reopen the log file too (SIGHUP)
  std::uint16_t bound_port() const;
  std::vector<pid_t> pids() const;  // running children

  void publish_all(std::shared_ptr<const std::string> frame) override;
  void publish_to(std::shared_ptr<const std::string> frame, const std::vector<std::string>& ids) override;
  std::vector<std::string> connected_ids() const override;
  bool is_connected(const std::string& id) const override;
  std::size_t connection_count() const override;
  void disconnect(const std::string& id) override;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace sylvite::master
