#!/bin/bash
# Issue 21 goal 1, session 25: profile the fan-out rounds only, per process. Starts a
# 40-round bench/run (1k minions, sylvite only), waits 12 s (onboarding is over), then
# records the master and the swarm for 8 s with perf (cpu-clock, call graphs).
# Usage (root, repository root): bench/results/goal1-s25/prof.sh BIN OUT_DIR [bench/run args...]
#   e.g. prof.sh build/bin /tmp/prof-zmq --transport zeromq --swarm-zmq-engine libzmq
# Read: perf report -i OUT_DIR/master.data --no-children -g none --sort dso,sym
#       perf report -i OUT_DIR/master.data --children -g none --sort sym | grep __x64_sys
set -u
bin=$(cd "$1" && pwd) out=$2; shift 2
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
bench/run --scenarios fanout --sizes 1000 "$@" --only sylvite --sylvite-bin "$bin" \
  --swarm "$bin/sylvite-swarm" --fanout-rounds 40 --tmp-dir $mnt --out "$out/run.json" > "$out/bench.log" 2>&1 &
bp=$!
sp=
for _ in $(seq 1 300); do sp=$(pgrep -n -x sylvite-swarm) && break; sleep 0.2; done
mp=$(pgrep -n -x salt-master)
echo "master=$mp swarm=$sp" > "$out/pids"
sleep 12
perf record -F 1999 -g -o "$out/master.data" -p "$mp" -- sleep 8 2>/dev/null &
perf record -F 1999 -g -o "$out/swarm.data" -p "$sp" -- sleep 8 2>/dev/null &
wait %2 %3 2>/dev/null
wait $bp
