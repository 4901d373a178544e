#!/usr/bin/env bash
# Issue 21 goal 2, session 30: the auth storm with several master builds taking turns (TCP
# and ZeroMQ, 1,000 swarm minions, sylvite only, the first build's swarm for all unless
# SWARM names one), with the
# context switches of the restarted master counted over the storm (perf stat, 7 s from the
# new master's start), as bench/results/goal2-s29/run.sh does for two builds.
# Usage (root, repository root):
#   bench/results/goal2-s30/run.sh OUT_DIR ROUNDS NAME=BIN_DIR [NAME=BIN_DIR ...]
# Summary: python3 bench/results/goal2-s30/summary.py OUT_DIR
set -u
. "$(dirname "$0")/../storm-master.sh"
out=$1 n=$2
shift 2
names=() bins=()
for a in "$@"; do names+=("${a%%=*}"); bins+=("$(cd "${a#*=}" && pwd)"); done
swarm=${SWARM:-${bins[0]}/sylvite-swarm}  # SWARM=PATH: another build's swarm
mkdir -p "$out"
for i in $(seq 1 "$n"); do
  for t in tcp zeromq; do
    for k in "${!names[@]}"; do
      f=$out/${names[$k]}-$t-$i
      bench/run --scenarios auth_storm --sizes 1000 --transport $t --only sylvite --sylvite-bin "${bins[$k]}" \
        --swarm "$swarm" --out "$f.json" > "$f.log" 2>&1 &
      bp=$!
      cur=$(storm_master_pid)
      perf stat -e context-switches -p "$cur" -o "$f.stat" -- sleep 7 > /dev/null 2>&1
      wait $bp
    done
  done
done
