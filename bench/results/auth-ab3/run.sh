#!/usr/bin/env bash
# Issue 21 goal 2, session 18: A/B of the auth storm, TCP, 1,000 swarm minions, sylvite only,
# the master built at ee89531 (before) and with the session's change (after), alternating,
# the same swarm binary. Usage: run.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS, default 8]
# (BIN: a build's bin folder; the swarm comes from AFTER_BIN.)
set -euo pipefail
cd "$(dirname "$0")/../../.."
before=$1 after=$2 out=$3 pairs=${4:-8}
mkdir -p "$out"
for i in $(seq 1 "$pairs"); do
  for v in after before; do
    bin=$before; [[ $v == after ]] && bin=$after
    bench/run --scenarios auth_storm --sizes 1000 --transport tcp --only sylvite \
      --sylvite-bin "$bin" --swarm "$after/sylvite-swarm" --out "$out/$v-$i.json"
  done
done
