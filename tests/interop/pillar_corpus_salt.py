#!/usr/bin/env python3
"""Issue 17: run the pillar corpus against ONE master and print its result per case.

Default: the real salt-master 3008.5 alone (the venv in build/venv, or SYLVITE_VENV).
It checks that every case is meaningful (a non-empty result; `errors: true` cases hold
`_errors`, the other cases none) and exits 1 if one is not.

  build/venv/bin/python tests/interop/pillar_corpus_salt.py                  # all cases, print
  build/venv/bin/python tests/interop/pillar_corpus_salt.py --write-expected # regenerate snapshots
  build/venv/bin/python tests/interop/pillar_corpus_salt.py --case jinja_macros --case yaml_plain
  build/venv/bin/python tests/interop/pillar_corpus_salt.py --sylvite        # sylvite master alone,
                                                   # compared with the committed expected.json

--write-expected writes tests/fixtures/pillar_corpus/<case>/expected.json: a GENERATED
reference snapshot of real Salt's answer (normalised as tests/interop/pillar_corpus.py
says). Regenerate it after changing a case. It is for reading and for the quick
`--sylvite` check while the live comparison cannot pass yet; it never replaces the live
comparison in tests/interop/test_pillar_differential.py, which always asks a running
salt-master 3008.5.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(HERE))

from sylvite_harness import BIN, REPO, Env  # noqa: E402
import pillar_corpus as pc  # noqa: E402

SALT3008 = Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    ap.add_argument("--write-expected", action="store_true", help="write <case>/expected.json (real Salt only)")
    ap.add_argument("--sylvite", action="store_true", help="query a sylvite master (SYLVITE_BIN) instead")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    ap.add_argument("--quiet", action="store_true", help="one line per case")
    a = ap.parse_args()
    if a.sylvite and a.write_expected:
        ap.error("--write-expected records real Salt only")

    cases = pc.load_cases(a.case)
    env = Env()
    served = env.root / "served"
    gpg_home = None
    bad: list[str] = []
    equal = 0
    try:
        keys = pc.make_minion_keys(env.root)
        gpg_home = pc.make_gpg_home(env.root)
        master_bin = (BIN / "salt-master") if a.sylvite else (SALT3008 / "salt-master")
        rig = pc.Rig(env, "sylvite" if a.sylvite else "salt", master_bin, SALT3008, served, keys, gpg_home)

        def on_result(case, res):
            nonlocal equal
            result, raw = res[rig.name]
            norm = pc.normalise(result, str(env.root)) if result is not None else None
            problem = None
            if result is None:
                problem = "no JSON result:\n" + raw
            elif not a.sylvite:
                if pc.is_trivial(result):
                    problem = "trivial (empty) result"
                elif case.errors and "_errors" not in result:
                    problem = "an error case without _errors"
                elif not case.errors and "_errors" in result:
                    problem = "unexpected _errors: " + json.dumps(result["_errors"])
            else:
                exp = json.loads(case.expected_path.read_text()) if case.expected_path.exists() else None
                if norm == exp:
                    equal += 1
                else:
                    problem = "differs from expected.json"
            status = "ok" if problem is None else "BAD"
            print(f"[{status}] {case.name} ({res['_seconds']:.1f}s)" + (f": {problem}" if problem else ""))
            if not a.quiet:
                print(json.dumps(norm, indent=2, sort_keys=True))
            if problem:
                bad.append(case.name)
            if a.write_expected and norm is not None and problem is None:
                case.expected_path.write_text(json.dumps(norm, indent=2, sort_keys=True) + "\n")
            sys.stdout.flush()

        pc.run_cases([rig], served, cases, on_result)
        rig.close()
    finally:
        if a.keep:
            print("kept", env.root)
        pc.stop_gpg_agent(gpg_home)
        env.close(keep=a.keep)
    if a.sylvite:
        print(f"pillar corpus on sylvite vs expected.json: {len(cases)} cases, {equal} equal")
    else:
        print(f"pillar corpus on real Salt: {len(cases)} cases, {len(cases) - len(bad)} meaningful")
    if bad:
        print("cases:", " ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
