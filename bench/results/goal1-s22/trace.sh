#!/bin/bash
# Issue 21 goal 1, session 22: system calls of the master and the swarm during a ZeroMQ 1k
# fan-out (20 rounds), `perf trace -s` attached for 8 s once the rounds run.
# Usage (root, repository root): bench/results/goal1-s22/trace.sh BIN TAG
#   -> bench/results/goal1-s22/trace-TAG-{master,swarm}.txt
# Needs perf (apt-get install linux-perf); mounts tracefs if it is not mounted.
set -u
bin=$1 tag=$2 out=bench/results/goal1-s22
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
tracefs=0
if ! mountpoint -q /sys/kernel/tracing; then mount -t tracefs nodev /sys/kernel/tracing && tracefs=1; fi
trap 'umount $mnt; rm -f $img; ((tracefs)) && umount /sys/kernel/tracing' EXIT
log=$(mktemp)
bench/run --scenarios fanout --sizes 1000 --transport zeromq --only sylvite --sylvite-bin "$bin" \
  --swarm "$bin/sylvite-swarm" --fanout-rounds 20 --tmp-dir $mnt --out "$out/trace-$tag.json" > "$log" 2>&1 &
run=$!
for _ in $(seq 1 200); do grep -q "swarm keys" "$log" && break; sleep 0.2; done
mp=$(grep -o "master up (pid [0-9]*" "$log" | grep -o "[0-9]*$")
sleep 4  # the swarm signs in; the rounds start
sp=$(pgrep -n -f "$bin/sylvite-swarm")
timeout -s INT 8 perf trace -s -p "$mp" -o "$out/trace-$tag-master.txt" &
timeout -s INT 8 perf trace -s -p "$sp" -o "$out/trace-$tag-swarm.txt" &
wait $run
wait
grep -o '"p99_ms": [0-9.]*' "$log" | head -1
rm -f "$log"
