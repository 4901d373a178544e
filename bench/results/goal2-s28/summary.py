#!/usr/bin/env python3
"""Medians of bench/results/goal2-s28/run.sh's JSONs: summary.py OUT_DIR"""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
for prefix in ("tcp", "zeromq", "salt-tcp", "salt-zeromq"):
    rows = {}
    for f in sorted(out.glob(f"{prefix}*.json")):
        if prefix in ("tcp", "zeromq") and not f.stem.split("-")[-1].isdigit():
            continue
        r = json.load(open(f))["results"]["auth_storm"]["1000"]
        for who, v in r.items():
            rows.setdefault(who, []).append(v)
    for who, vs in rows.items():
        fr = [v["rsa_ceiling_fraction"] for v in vs if v.get("rsa_ceiling_fraction") is not None]
        cpu = [v["master_cpu_ms_per_auth"] for v in vs]
        rsa = [v.get("rsa_private_ops_per_core_s") for v in vs]
        signed = [v["signed_in"] for v in vs]
        print(f"{prefix:12} {who:8} n={len(vs)} fraction median {statistics.median(fr) if fr else None} "
              f"all {[round(x, 3) for x in fr]} cpu/auth median {statistics.median(cpu)} ms all {cpu} "
              f"rsa ops/core-s {rsa} signed_in {signed}")
