#!/bin/bash
# Issue 21 goal 1 (docs/benchmarks.md): fan-out at 1,000 minions, the journal (default)
# against job_cache_journal: False (sync) and job_cache: False, alternated, same build;
# first a run beside real Salt 3008.5. Run from the repository root after scripts/build.sh.
set -u
B="--sylvite-bin build/bin --swarm build/bin/sylvite-swarm --fanout-rounds 7"
for tr in tcp zeromq; do
  bench/run --scenarios fanout --sizes 1000 --transport $tr $B --out bench/results/goal1-journal/both-$tr-1k.json
  for i in 1 2; do
    for o in job_cache_journal=true job_cache_journal=false job_cache=false; do
      bench/run --scenarios fanout --sizes 1000 --only sylvite --transport $tr $B --master-opt $o --out bench/results/goal1-journal/$tr-1k-$o-$i.json
    done
  done
done
echo done
