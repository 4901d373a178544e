#!/usr/bin/env python3
"""Medians of bench/results/goal2-s30/run.sh's runs: python3 summary.py OUT_DIR"""
import collections
import glob
import json
import re
import statistics as st
import sys

rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    v, t, i = f.rsplit("/", 1)[-1][:-5].rsplit("-", 2)
    r = json.load(open(f))["results"]["auth_storm"]["1000"]["sylvite"]
    m = re.search(r"([\d,]+)\s+context-switches", open(f[:-5] + ".stat").read())
    cs = int(m.group(1).replace(",", "")) if m else None
    rows[(t, v)].append((int(i), r["rsa_ceiling_fraction"], r["master_cpu_ms_per_auth"],
                         r["master_cpu_ms_per_auth"] * r["rsa_private_ops_per_core_s"] / 1000, cs,
                         r["signed_in"], r["rsa_private_ops_per_core_s"]))
print("transport build runs | fraction median (range) | CPU/sign-in median | private-op equivalents median |"
      " context switches median | signed in | RSA ops/core-s range")
for (t, v), rs in sorted(rows.items()):
    fr = [x[1] for x in rs]
    css = [x[4] for x in rs if x[4]]
    print(f"{t} {v} {len(rs)} | {st.median(fr):.3f} ({min(fr):.3f}-{max(fr):.3f}) | {st.median(x[2] for x in rs):.2f} ms"
          f" | {st.median(x[3] for x in rs):.3f} | {st.median(css) if css else 0:.0f}"
          f" | {min(x[5] for x in rs)}-{max(x[5] for x in rs)} | {min(x[6] for x in rs):.0f}-{max(x[6] for x in rs):.0f}")
