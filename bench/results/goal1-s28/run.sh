#!/bin/bash
# Issue 21 goal 1, session 28: the swarm on one io_context per thread (e18aa08) against the
# swarm before it, the same master (docs/benchmarks.md, "Goal 1, session 28"). 1k swarm
# minions, ZeroMQ, 7 rounds per run, variants taking turns.
# Usage (root, repository root): bench/results/goal1-s28/run.sh BIN OLD_SWARM OUT_DIR
#   BIN        a build at e18aa08 or later (its master and, as N, its swarm)
#   OLD_SWARM  sylvite-swarm built at 45ee359~3 (575923c..f6bcdd4 have the same swarm):
#              git worktree add /tmp/old f6bcdd4 && cmake -S /tmp/old -B /tmp/old/build -G Ninja \
#                -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSYLVITE_TESTS=OFF && ninja -C /tmp/old/build sylvite-swarm
# Summary: python3 bench/results/goal1-s27/summary.py OUT_DIR/swarm (and OUT_DIR/swarm-threads)
set -eu
bin=$1 old=$2 out=$3
z='--transport zeromq'
bench/results/ab-fanout.sh "$bin" "$out/swarm" 5 N="$z" O="$z --swarm $old"
bench/results/ab-fanout.sh "$bin" "$out/swarm-threads" 4 N4="$z --swarm-threads 4" O="$z --swarm $old" N="$z"
