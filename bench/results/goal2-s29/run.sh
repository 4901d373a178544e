#!/usr/bin/env bash
# Issue 21 goal 2, session 29: the auth storm, two master builds taking turns (TCP and
# ZeroMQ, 1,000 swarm minions, sylvite only, the AFTER build's swarm for both), with the
# context switches of the restarted master counted over the storm (perf stat, 7 s from
# the new master's start).
# Usage (root, repository root): bench/results/goal2-s29/run.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS, default 4]
# Summary: python3 bench/results/goal2-s29/summary.py OUT_DIR
set -u
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd) out=$3 n=${4:-4}
mkdir -p "$out"
for i in $(seq 1 "$n"); do
  for t in tcp zeromq; do
    for v in before after; do
      if [ $v = before ]; then bin=$before; else bin=$after; fi
      f=$out/$v-$t-$i
      bench/run --scenarios auth_storm --sizes 1000 --transport $t --only sylvite --sylvite-bin "$bin" \
        --swarm "$after/sylvite-swarm" --out "$f.json" > "$f.log" 2>&1 &
      bp=$!
      first=
      for _ in $(seq 1 600); do first=$(pgrep -n -x salt-master) && break; sleep 0.1; done
      cur=$first
      for _ in $(seq 1 1500); do  # the master the storm restarts
        cur=$(pgrep -n -x salt-master)
        if [ -n "$cur" ] && [ "$cur" != "$first" ]; then break; fi
        sleep 0.02
      done
      perf stat -e context-switches -p "$cur" -o "$f.stat" -- sleep 7 > /dev/null 2>&1
      wait $bp
    done
  done
done
