#!/bin/bash
# Issue 21 goal 1, session 25: the swarm's ZeroMQ sockets without libzmq. One build,
# alternated, sylvite only, 1k swarm minions, 7 fan-out rounds on the journaled ext4 image:
#   S = master native ZMTP (the default), swarm native ZMTP (bench/run's default now)
#   Z = master native ZMTP, swarm on libzmq sockets (--swarm-zmq-engine libzmq: sessions 23-24)
#   T = TCP, for reference (the swarm has no ZeroMQ sockets there)
# Usage (root, repository root): bench/results/goal1-s25/ab.sh BIN OUT_DIR [ROUNDS]
set -eu
bin=$1 out=$2 n=${3:-5}
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
mkdir -p "$out"
for i in $(seq 1 "$n"); do for v in S Z T; do
  case $v in
    S) args=(--transport zeromq --swarm-zmq-engine native);;
    Z) args=(--transport zeromq --swarm-zmq-engine libzmq);;
    T) args=(--transport tcp);;
  esac
  bench/run --scenarios fanout --sizes 1000 "${args[@]}" --only sylvite --sylvite-bin "$bin" \
            --swarm "$bin/sylvite-swarm" --fanout-rounds 7 --tmp-dir $mnt --out "$out/$v-$i.json"
done; done
