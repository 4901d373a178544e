#!/bin/bash
# What publish_processes: 2 costs a small estate: fan-out at 1,000 minions (TCP, journal job
# cache, journaled ext4 image), alternated with publish_processes: 0 (the master serves the
# port itself). Run as root from the repository root after scripts/build.sh.
set -eu
O=bench/results/goal4-20000/ab-1k
mkdir -p $O
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
for i in 1 2 3; do for n in 2 0; do
  bench/run --scenarios memory,fanout --sizes 1000 --only sylvite --transport tcp --master-opt publish_processes=$n \
    --sylvite-bin build/bin --swarm build/bin/sylvite-swarm --fanout-rounds 7 --tmp-dir $mnt --out $O/pp$n-$i.json
done; done
