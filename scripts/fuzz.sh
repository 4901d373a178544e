#!/usr/bin/env bash
# Build the libFuzzer targets with clang and run each for a bounded time.
#   scripts/fuzz.sh [BUILD_DIR] [SECONDS_PER_TARGET]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-fuzz}; secs=${2:-30}
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja -DSYLVITE_FUZZ=ON -DSYLVITE_TESTS=OFF >/dev/null
ninja -C "$build" -j"$(nproc)" $(ninja -C "$build" -t targets all | sed -n 's/^\(fuzz_[a-z_]*\): .*/\1/p' | sort -u)
for f in "$build"/fuzz/fuzz_*; do
  [[ -x "$f" ]] || continue
  name=$(basename "$f")
  corpus="$build/corpus/$name"; mkdir -p "$corpus"
  seeds="$here/tests/fuzz/corpus/$name"
  echo "fuzz: $name for ${secs}s"
  "$f" -max_total_time="$secs" -print_final_stats=1 "$corpus" $( [[ -d "$seeds" ]] && echo "$seeds" ) 2>&1 | tail -n 12
done
