#!/bin/bash
# Issue 21 goal 1, session 19 (docs/benchmarks.md): TCP at 1k on the journaled ext4 image,
# beside Salt and sylvite alone. Run as root from the repository root after scripts/build.sh.
set -eu
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
O=bench/results/goal1-s19
B="--scenarios fanout --sizes 1000 --transport tcp --sylvite-bin build/bin --swarm build/bin/sylvite-swarm --fanout-rounds 7 --tmp-dir $mnt"
bench/run $B --out $O/both-tcp-1k.json
for i in 1 2; do bench/run $B --only sylvite --out $O/alone-tcp-1k-$i.json; done
