#!/bin/bash
# Issue 21 goal 1, session 21: A/B/C of the AES-layer change, alternated, sylvite only, TCP, 1k,
# the journaled ext4 image. A = master and swarm before (39c322d~1), B = master after (39c322d)
# with the swarm before, C = both after. Build each into a copy of build/bin first, e.g.
#   git worktree add /tmp/wt-before 39c322d~1 && ... ; cp -a build/bin /tmp/sylbin-after
# Usage (root, repository root): bench/results/goal1-s21/ab.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS]
# TRANSPORT=zeromq in the environment runs the same over ZeroMQ (goal1-s22/ab.sh).
set -eu
before=$1 after=$2 out=$3 n=${4:-5} transport=${TRANSPORT:-tcp}
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
for i in $(seq 1 "$n"); do for v in A B C; do
  case $v in A) m=$before s=$before;; B) m=$after s=$before;; C) m=$after s=$after;; esac
  bench/run --scenarios fanout --sizes 1000 --transport "$transport" --only sylvite --sylvite-bin "$m" \
            --swarm "$s/sylvite-swarm" --fanout-rounds 7 --tmp-dir $mnt --out "$out/$v-$i.json"
done; done
