#!/bin/bash
# Issue 21 goal 1, session 24 (first in session 23): the master's ZeroMQ ports served by native ZMTP (N,
# zmq_engine: native, the default) or by libzmq sockets (L, zmq_engine: libzmq), one build,
# alternated, sylvite only, 1k swarm minions, 7 fan-out rounds on the journaled ext4 image;
# T = the same build on TCP, for reference. The swarm is the same binary in all three.
# Usage (root, repository root): bench/results/goal1-s23/ab.sh BIN OUT_DIR [ROUNDS]
set -eu
bin=$1 out=$2 n=${3:-5}
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
for i in $(seq 1 "$n"); do for v in N L T; do
  case $v in
    N) args=(--transport zeromq --master-opt 'zmq_engine="native"');;
    L) args=(--transport zeromq --master-opt 'zmq_engine="libzmq"');;
    T) args=(--transport tcp);;
  esac
  bench/run --scenarios fanout --sizes 1000 "${args[@]}" --only sylvite --sylvite-bin "$bin" \
            --swarm "$bin/sylvite-swarm" --fanout-rounds 7 --tmp-dir $mnt --out "$out/$v-$i.json"
done; done
