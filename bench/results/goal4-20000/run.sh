#!/bin/bash
# Issue 21 goal 4, session 17 (docs/benchmarks.md): 20,000 connected minions on one master.
# The master serves its publish port from two publish processes (publish_processes: 2,
# TCP); the swarm runs in two processes (--swarm-procs 2): every process here may hold at
# most 20,000 descriptors. Keys pre-seeded as accepted; temp dirs on a journaled ext4 image.
# Keys 18500..19999 were made first:
#   for i in $(seq 18500 19999); do openssl genrsa -traditional -out build/bench-keys/$i.pem 2048; done
# Run as root from the repository root after scripts/build.sh.
set -eu
O=bench/results/goal4-20000
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
bench/run --scenarios memory,fanout,ingest --sizes 20000 --only sylvite --transport tcp --preseed \
  --swarm-procs 2 --master-opt publish_processes=2 --sylvite-bin build/bin --swarm build/bin/sylvite-swarm \
  --fanout-rounds 5 --tmp-dir $mnt --out $O/tcp-20000.json
