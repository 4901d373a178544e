#!/usr/bin/env bash
# Issue 21 goal 2, session 31: where the master's CPU goes in an auth storm. ROUNDS auth
# storms (1,000 swarm minions, sylvite only) per transport, taking turns, each with
# `perf record` (DWARF call graphs, 999 Hz) on the restarted master from its start to the
# storm's end; then the samples of all rounds of a transport by category.
# The RSA uprobe count is off (--no-rsa-count): its perf session and this one do not mix.
# Usage (root, repository root, a built build/):
#   bench/results/goal2-s31/profile.sh OUT_DIR ROUNDS [BIN_DIR]
set -u
. "$(dirname "$0")/../storm-master.sh"
out=$1 n=$2 bin=$(cd "${3:-build/bin}" && pwd)
mkdir -p "$out"
for i in $(seq 1 "$n"); do
  for t in tcp zeromq; do
    f=$out/$t-$i
    bench/run --scenarios auth_storm --sizes 1000 --transport $t --only sylvite --sylvite-bin "$bin" \
      --swarm "$bin/sylvite-swarm" --no-rsa-count --out "$f.json" > "$f.log" 2>&1 &
    bp=$!
    cur=$(storm_master_pid)
    # From the new master's start to the storm's end (bench/run prints its result line);
    # not the readiness ping and teardown after it.
    perf record -F 999 --call-graph dwarf,16384 -p "$cur" -o "$f.data" > "$f.perf.log" 2>&1 &
    pp=$!
    for _ in $(seq 1 1200); do grep -q "auth_storm: {" "$f.log" && break; sleep 0.05; done
    kill -INT $pp
    wait $pp
    wait $bp
    perf script -i "$f.data" -F comm,tid,ip,sym --no-inline 2> /dev/null > "$f.script"
    rm -f "$f.data"
  done
done
join() { local IFS=,; echo "$*"; }
python3 "$(dirname "$0")/categorize.py" "tcp=$(join "$out"/tcp-*.script)" "zeromq=$(join "$out"/zeromq-*.script)"
