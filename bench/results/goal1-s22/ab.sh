#!/bin/bash
# Issue 21 goal 1, session 22: A/B/C of the ZeroMQ socket change (one ZMQ_EVENTS query per
# read loop instead of one per message; replies sent in batches), alternated, sylvite
# only, ZeroMQ, 1k, the journaled ext4 image. A = master and swarm before, B = master
# after with the swarm before, C = both after. Build each into a copy of build/bin first:
#   git stash; ninja -C build; cp -a build/bin /tmp/sylbin-before; git stash pop; ...
# Usage (root, repository root): bench/results/goal1-s22/ab.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS]
set -eu
before=$1 after=$2 out=$3 n=${4:-4}
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
for i in $(seq 1 "$n"); do for v in A B C; do
  case $v in A) m=$before s=$before;; B) m=$after s=$before;; C) m=$after s=$after;; esac
  bench/run --scenarios fanout --sizes 1000 --transport zeromq --only sylvite --sylvite-bin "$m" \
            --swarm "$s/sylvite-swarm" --fanout-rounds 7 --tmp-dir $mnt --out "$out/$v-$i.json"
done; done
