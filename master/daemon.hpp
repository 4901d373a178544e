// sylvite::master daemon: the Asio wiring of salt-master. Owns the io_context (run by
// worker_threads threads), the request server (ret_port), the publish server
// (publish_port), the CLI Unix socket, the worker pool, signals and the maintenance
// timer; hands everything to master_core. This is the only master TU that includes
// core/transport (Asio).
// Thread-safety: run_master() blocks the calling thread until SIGTERM/SIGINT.
#pragma once
#include "core/config/config.hpp"

namespace sylvite::master {

// Returns the process exit code (0 clean stop, 1 startup failure).
int run_master(const config::master_config& cfg);

}  // namespace sylvite::master
