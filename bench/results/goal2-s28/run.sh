#!/usr/bin/env bash
# Issue 21 goal 2, session 28: the auth storm on a host with a third of the lab notes' RSA
# speed. TCP and ZeroMQ, 1,000 swarm minions, sylvite only, RUNS runs per transport taking
# turns; then one run per transport beside real Salt 3008.5 (its figure in the same hour).
# Usage (root, repository root): bench/results/goal2-s28/run.sh BIN OUT_DIR [RUNS, default 5]
# Summary: python3 bench/results/goal2-s28/summary.py OUT_DIR
set -euo pipefail
bin=$(cd "$1" && pwd) out=$2 runs=${3:-5}
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  for t in tcp zeromq; do
    bench/run --scenarios auth_storm --sizes 1000 --transport "$t" --only sylvite \
      --sylvite-bin "$bin" --swarm "$bin/sylvite-swarm" --out "$out/$t-$i.json"
  done
done
for t in tcp zeromq; do
  bench/run --scenarios auth_storm --sizes 1000 --transport "$t" \
    --sylvite-bin "$bin" --swarm "$bin/sylvite-swarm" --out "$out/salt-$t.json"
done
