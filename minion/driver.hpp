// sylvite::minion driver: salt-minion's daemon, the thin Asio layer that runs the sockets and
// timers of every configured master and feeds masters_fsm (which masters, when) and one
// session_fsm per master (that master's connection) with what happened, performing the
// actions they return. Publishes go through publish_intake to a job pool; job returns go back
// to the master that published the job (hot) or the active one (failover), else to the
// on-disk return_queue.
// Threads: one io thread runs every socket, timer and protocol step; execution modules run on
// a job pool and reach the master through master_link, which hops onto the io thread and
// blocks the calling job thread only. The few RSA operations of a sign-in (about 1 ms) run on
// the io thread.
#pragma once
#include "core/config/config.hpp"
#include "core/wire/value.hpp"

namespace sylvite::minion {

// Runs until SIGTERM/SIGINT (returns 0) or a fatal sign-in outcome: 77 (key rejected,
// after Salt's 10-20 s pause) or 42 (master_finger mismatch). grains: collect_grains(cfg).
int run_minion_daemon(const config::minion_config& cfg, wire::value grains);

}  // namespace sylvite::minion
