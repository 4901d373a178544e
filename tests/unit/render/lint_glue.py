#!/usr/bin/env python3
"""Fails on an undefined name in the render worker's Python glue (a name copied from Salt
without its import: such a filter fails only when a template calls it).

    /usr/bin/python3 tests/unit/render/lint_glue.py core/render/py/sylvite_render.py
"""
import subprocess
import sys

r = subprocess.run([sys.executable, "-m", "pyflakes", *sys.argv[1:]], capture_output=True, text=True)
if r.returncode not in (0, 1) or "No module named pyflakes" in r.stderr:
    sys.exit(f"pyflakes did not run (apt-get install python3-pyflakes): {r.stderr.strip()}")
bad = [line for line in r.stdout.splitlines() if "undefined name" in line]
for line in bad:
    print(line)
print(f"render glue lint: {len(bad)} undefined name(s)")
sys.exit(1 if bad else 0)
