#!/usr/bin/env python3
"""Medians of bench/results/goal2-s29/run.sh's runs: python3 summary.py OUT_DIR
(the table of bench/results/goal2-s30/summary.py, every non-zero count, and the pairs)"""
import importlib.util
import pathlib
import sys

spec = importlib.util.spec_from_file_location(
    "s30", pathlib.Path(__file__).resolve().parents[1] / "goal2-s30" / "summary.py")
s30 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s30)

rows = s30.load(sys.argv[1])
s30.table(rows, 1, label="variant")
for t in sorted({k[0] for k in rows}):
    b = {x[0]: x[1] for x in rows[(t, "before")]}
    a = {x[0]: x[1] for x in rows[(t, "after")]}
    pairs = sorted(set(a) & set(b))
    print(f"{t}: after above before in {sum(a[i] > b[i] for i in pairs)} of {len(pairs)} pairs")
