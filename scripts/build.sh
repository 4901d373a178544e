#!/usr/bin/env bash
# Configure and build sylvite.  scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Always -Werror (CI's setting): identical flags let ccache serve CI from local builds.
# Builds everything, unit tests included (SYLVITE_TESTS=ON even when the demo configured
# the folder without them); scripts/demo.sh builds only the daemons and CLIs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}; shift || true
extra=(-DSYLVITE_WERROR=ON -DSYLVITE_TESTS=ON)
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
cmake -S "$here" -B "$build" -G Ninja "${extra[@]}" "$@" >/dev/null
ninja -C "$build" -j"$(nproc)"
