#!/usr/bin/env bash
# Issue 21 goal 2, session 29: the auth storm, two master builds taking turns (TCP and
# ZeroMQ, 1,000 swarm minions, sylvite only, the AFTER build's swarm for both), with the
# context switches of the restarted master counted over the storm (perf stat, 7 s from
# the new master's start). The loop is bench/results/goal2-s30/run.sh's.
# Usage (root, repository root): bench/results/goal2-s29/run.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS, default 4]
# Summary: python3 bench/results/goal2-s29/summary.py OUT_DIR
set -u
SWARM="$(cd "$2" && pwd)/sylvite-swarm" exec "$(dirname "$0")/../goal2-s30/run.sh" "$3" "${4:-4}" before="$1" after="$2"
