#!/bin/bash
# Issue 21 goal 1, session 15 (docs/benchmarks.md): requests answered on the io thread.
# A/B with SYLVITE_REQUEST_INLINE=0 (the old io thread -> pool -> io thread path), the same
# build, alternated. rootfs: the runs' temp dirs on / (this VM's ext4 has no journal and is
# mounted with discard: file creates are slow after deletions); loop-ext4: on a journaled
# ext4 image on the same disk. Run as root from the repository root after scripts/build.sh.
set -eu
B="--sylvite-bin build/bin --swarm build/bin/sylvite-swarm --fanout-rounds 7 --only sylvite"
O=bench/results/goal1-inline
for i in 1 2; do for tr in zeromq tcp; do for inl in 1 0; do
  SYLVITE_REQUEST_INLINE=$inl bench/run --scenarios fanout --sizes 1000 --transport $tr $B --out $O/rootfs/$tr-inline$inl-$i.json
done; done; done
source bench/ext4-image.sh  # $mnt: a journaled ext4 image, removed on exit
for i in 1 2; do for v in "1 job_cache_journal=true" "0 job_cache_journal=true" "1 job_cache=false"; do
  set -- $v
  SYLVITE_REQUEST_INLINE=$1 bench/run --scenarios fanout --sizes 1000 --transport tcp $B --tmp-dir $mnt \
    --master-opt $2 --out $O/loop-ext4/tcp-inline$1-$2-$i.json
done; done
# 5,000 minions (keys 1000..4999 made first: openssl genrsa -traditional -out build/bench-keys/<i>.pem 2048)
bench/run --scenarios fanout --sizes 5000 --only sylvite --transport tcp --sylvite-bin build/bin \
  --swarm build/bin/sylvite-swarm --fanout-rounds 5 --tmp-dir $mnt --out $O/5k/tcp-5k-loop.json
bench/run --scenarios fanout --sizes 5000 --only sylvite --transport tcp --sylvite-bin build/bin \
  --swarm build/bin/sylvite-swarm --fanout-rounds 5 --out $O/5k/tcp-5k-rootfs.json
# Final: beside Salt (TCP, ZeroMQ) and sylvite alone twice, on the journaled image
bench/run --scenarios fanout --sizes 1000 --transport tcp --sylvite-bin build/bin --swarm build/bin/sylvite-swarm \
  --fanout-rounds 7 --tmp-dir $mnt --out $O/loop-ext4/both-tcp-1k.json
for i in 1 2; do
  bench/run --scenarios fanout --sizes 1000 --transport tcp $B --tmp-dir $mnt --out $O/loop-ext4/final-tcp-1k-$i.json
done
bench/run --scenarios fanout --sizes 1000 --transport zeromq --sylvite-bin build/bin --swarm build/bin/sylvite-swarm \
  --fanout-rounds 7 --tmp-dir $mnt --out $O/loop-ext4/both-zeromq-1k.json
