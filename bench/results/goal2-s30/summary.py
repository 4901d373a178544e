#!/usr/bin/env python3
"""Medians of bench/results/goal2-s30/run.sh's runs: python3 summary.py OUT_DIR

Context-switch medians leave out counts below MIN_SWITCHES (5,000): there `perf stat`
caught a process that was not the storm's restarted master, or only part of the storm
(docs/benchmarks.md, "Goal 2, session 30"). bench/results/goal2-s29/summary.py uses
the same table with every non-zero count."""
import collections
import glob
import json
import re
import statistics as st
import sys

MIN_SWITCHES = 5000


def load(out_dir):
    """{(transport, build): [(round, fraction, CPU ms per sign-in, private-op equivalents,
    context switches or None, signed in, RSA ops per core-second)]}"""
    rows = collections.defaultdict(list)
    for f in sorted(glob.glob(out_dir + "/*.json")):
        v, t, i = f.rsplit("/", 1)[-1][:-5].rsplit("-", 2)
        r = json.load(open(f))["results"]["auth_storm"]["1000"]["sylvite"]
        m = re.search(r"([\d,]+)\s+context-switches", open(f[:-5] + ".stat").read())
        cs = int(m.group(1).replace(",", "")) if m else None
        rows[(t, v)].append((int(i), r["rsa_ceiling_fraction"], r["master_cpu_ms_per_auth"],
                             r["master_cpu_ms_per_auth"] * r["rsa_private_ops_per_core_s"] / 1000, cs,
                             r["signed_in"], r["rsa_private_ops_per_core_s"]))
    return rows


def table(rows, min_switches, label="build"):
    print(f"transport {label} runs | fraction median (range) | CPU/sign-in median | private-op equivalents median |"
          " context switches median | signed in | RSA ops/core-s range")
    for (t, v), rs in sorted(rows.items()):
        fr = [x[1] for x in rs]
        css = [x[4] for x in rs if x[4] and x[4] >= min_switches]
        print(f"{t} {v} {len(rs)} | {st.median(fr):.3f} ({min(fr):.3f}-{max(fr):.3f}) | {st.median(x[2] for x in rs):.2f} ms"
              f" | {st.median(x[3] for x in rs):.3f} | {st.median(css) if css else 0:.0f}"
              f" | {min(x[5] for x in rs)}-{max(x[5] for x in rs)} | {min(x[6] for x in rs):.0f}-{max(x[6] for x in rs):.0f}")


if __name__ == "__main__":
    table(load(sys.argv[1]), MIN_SWITCHES)
