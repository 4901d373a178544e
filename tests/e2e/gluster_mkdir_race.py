#!/usr/bin/env python3
"""Measures the GlusterFS hazard behind util::make_shared_dirs (docs/gluster.md, section 4):
three mounts of a replica-3 lab volume mkdir the same directory names at the same moment,
then every name is looked up on every mount; a gfid split brain shows as EIO. Needs root
(network namespaces, glusterd); everything is torn down at the end.

    build/venv/bin/python tests/e2e/gluster_mkdir_race.py [--names 60] [--rounds 1]

Prints, per round, how many names were left unreadable (EIO) and on which mounts.
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from glusterlab import GlusterLab, gluster_available  # noqa: E402
from netlab import NetLab  # noqa: E402

RACE = r"""
import os, sys, time
d, start, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
while time.time() < start:
    pass
for i in range(n):
    try:
        os.makedirs(os.path.join(d, f"dir-{i}", "sub"), exist_ok=True)
    except OSError:
        pass
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=int, default=60, help="directory names raced per round")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    why = gluster_available()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    total = 0
    with NetLab() as lab:
        hosts = [lab.host(f"g{i}") for i in (1, 2, 3)]
        with GlusterLab(lab, hosts) as gl:
            mounts = [gl.mounts[h.name] for h in hosts]
            for r in range(a.rounds):
                (mounts[0] / f"race{r}").mkdir()
                start = time.time() + 1.0
                procs = [subprocess.Popen([sys.executable, "-c", RACE, str(m / f"race{r}"), str(start), str(a.names)])
                         for m in mounts]
                for p in procs:
                    p.wait()
                bad = set()
                for m, h in zip(mounts, hosts):
                    for i in range(a.names):
                        try:
                            os.stat(m / f"race{r}" / f"dir-{i}" / "sub")
                        except OSError as e:
                            bad.add(i)
                            print(f"round {r}: {h.name}: dir-{i}/sub: {e.strerror}")
                total += len(bad)
                print(f"round {r}: {len(bad)} of {a.names} names unreadable")
    print(f"total: {total} of {a.names * a.rounds} names unreadable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
