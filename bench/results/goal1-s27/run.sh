#!/bin/bash
# Issue 21 goal 1, session 27: the alternated fan-out runs behind docs/benchmarks.md
# ("Goal 1, session 27"). 1k swarm minions, ZeroMQ (native engine), 7 rounds per run.
# Usage (root, repository root): bench/results/goal1-s27/run.sh BIN BASE3 BASE5 OUT_DIR
#   BIN    the build under test (e.g. build/bin, at 4dd0f19 or later)
#   BASE3  a build of c851120 (before frames written at once), e.g.
#          git worktree add /tmp/b3 c851120 && cmake -S /tmp/b3 -B /tmp/b3/build -G Ninja && ninja -C /tmp/b3/build
#   BASE5  a build of 867f546 (before the group commit's single wake-up), made the same way
# (the JSONs in ab/ came from BIN and BASE3/BASE5 as named in docs/benchmarks.md)
# Allocators are loaded with LD_PRELOAD through wrapper directories (Debian bookworm:
# apt-get install libmimalloc2.0 libjemalloc2).
set -eu
bin=$(cd "$1" && pwd) base3=$(cd "$2" && pwd) base5=$(cd "$3" && pwd) out=$4
wrap() {  # wrap NAME EXE LIB: a directory with BIN's files and EXE preloading LIB
  local d=$out/wrap-$1
  rm -rf "$d"; mkdir -p "$d"
  for f in "$bin"/*; do ln -s "$f" "$d/"; done
  rm "$d/$2"
  printf '#!/bin/sh\nLD_PRELOAD=%s exec %s "$@"\n' "$3" "$bin/$2" > "$d/$2"
  chmod +x "$d/$2"
}
mkdir -p "$out"
lib=/usr/lib/x86_64-linux-gnu
wrap mi salt-master $lib/libmimalloc.so.2
wrap je salt-master $lib/libjemalloc.so.2
wrap swarm-mi sylvite-swarm $lib/libmimalloc.so.2
z='--transport zeromq'
# 1. The master's allocator (G glibc, M mimalloc, J jemalloc).
bench/results/ab-fanout.sh "$bin" "$out/alloc" 5 G="$z" M="$z --sylvite-bin $out/wrap-mi" J="$z --sylvite-bin $out/wrap-je"
# 2. worker_threads (the io threads): 5 (Salt's default), 1, 2.
bench/results/ab-fanout.sh "$bin" "$out/threads" 4 W5="$z" W1="$z --master-opt worker_threads=1" \
  W2="$z --master-opt worker_threads=2"
# 3. Frames written at once (N, this build) against the build before (B: its master and swarm).
bench/results/ab-fanout.sh "$bin" "$out/write-now" 6 N="$z" B="$z --sylvite-bin $base3 --swarm $base3/sylvite-swarm"
# 4. The swarm's allocator (G glibc, S mimalloc), the master unchanged.
bench/results/ab-fanout.sh "$bin" "$out/swarm-alloc" 6 G="$z" S="$z --swarm $out/wrap-swarm-mi/sylvite-swarm"
# 5. The group commit's wake-ups (N, this build) against BASE5 (B).
bench/results/ab-fanout.sh "$bin" "$out/syncer" 6 N="$z" B="$z --sylvite-bin $base5 --swarm $base5/sylvite-swarm"
