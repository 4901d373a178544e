#!/bin/bash
# Alternated fan-out runs of one build (issue 21, goal 1): sylvite only, 1k swarm minions,
# 7 rounds per run, on a journaled ext4 image (bench/ext4-image.sh). Each round runs every
# variant in the order given and writes OUT_DIR/NAME-ROUND.json.
# Usage (root, repository root):
#   bench/results/ab-fanout.sh BIN OUT_DIR ROUNDS NAME='bench/run args' [NAME='...' ...]
# The args are split on spaces (no quoting inside): e.g. T='--transport tcp'.
set -eu
bin=$1 out=$2 n=$3
shift 3
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
for i in $(seq 1 "$n"); do for spec in "$@"; do
  name=${spec%%=*}
  read -ra args <<< "${spec#*=}"
  # the variant's args come last: a --sylvite-bin there overrides BIN (the last one wins)
  bench/run --scenarios fanout --sizes 1000 --only sylvite --sylvite-bin "$bin" \
            --swarm "$bin/sylvite-swarm" --fanout-rounds 7 --tmp-dir "$mnt" \
            --out "$out/$name-$i.json" "${args[@]}"
done; done
