#!/bin/sh
# -*- mode: python -*-
# Re-exec with the project venv's Python (Salt 3008.5 lives there); the rest is Python.
''''exec "${SYLVITE_VENV:-$(dirname "$0")/../build/venv}/bin/python" "$0" "$@" # '''
"""bench/pillar_refresh.py (issue 17): a pillar refresh of N minions on a sylvite master
and on a real salt-master 3008.5, one master after the other, same machine, same tree.

The tree is a formula-style estate assembled from the differential corpus
(tests/fixtures/pillar_corpus: estate_roles, formula_openssh, formula_nginx,
formula_users, formula_postgres, formula_template_style, formula_salt_minion_conf):
Jinja top by roles, nested includes, map.jinja with grains.filter_by and import_yaml,
pillar.get merge=True, macros, loops. Each minion has its own id and grains (roles,
datacenter, env vary with the index), so every pillar is compiled for its minion.

Minions are Salt's own client code, not simulations of it: each id is a minion opts dict
(one shared key pair, accepted under every id) and a `_pillar` request goes through
salt.pillar.AsyncRemotePillar -> salt.channel.client.AsyncReqChannel (zeromq, Salt's
default), one per minion kept open like a running minion's connection, sending exactly
the `_pillar` request `saltutil.refresh_pillar` / `pillar.items` send. P client processes (--procs),
each with one event loop, own a slice of the ids and send one request at a time.

Round 1 (untimed) signs every minion in and compiles once; round 2 (timed) is the refresh:
every minion sends `_pillar` again. Reported per master: wall time of the round,
refreshes/s, latency p50/p99 per minion, master CPU seconds (all its processes, utime +
stime during the round) and CPU ms per minion, master RSS (sum over its processes) peak
during the round, and how many pillars came back with `_errors` (a figure for a master
whose pillars carry `_errors` measures refusals, not compiles).

  bench/pillar_refresh.py --n 50                 # both masters, 50 minions (~1 min here)
  bench/pillar_refresh.py --n 5000 --procs 8     # the issue's size
  bench/pillar_refresh.py --only salt --n 200 --keep
Writes bench/results/pillar-refresh-latest.json (or --out).
"""

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.core import REPO, pct  # noqa: E402
from benchlib.vs import (add_common_args, add_output_args, gen_minion_key, minion_opts,  # noqa: E402
                         print_comparison, run_masters, start_master, write_doc)

CORPUS = REPO / "tests" / "fixtures" / "pillar_corpus"
TREE_CASES = ["estate_roles", "formula_openssh", "formula_nginx", "formula_users", "formula_postgres",
              "formula_template_style", "formula_salt_minion_conf"]
TOP = """base:
  '*':
    - common
{%- for role in grains.get('roles', []) | sort %}
    - roles.{{ role }}
{%- endfor %}
    - openssh
    - openssh.config
    - nginx
    - nginx.resolved
    - users
    - postgres
    - TEMPLATE
    - TEMPLATE.resolved
    - salt
  'datacenter:dc1':
    - match: grain
    - dc.dc1
"""


def build_tree(dst: Path):
    for case in TREE_CASES:
        src = CORPUS / case
        for p in src.rglob("*"):
            rel = p.relative_to(src)
            if p.is_dir() or rel.name in ("top.sls", "case.yaml", "expected.json"):
                continue
            out = dst / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out)
    (dst / "top.sls").write_text(TOP)
    # the role the corpus's estate has no file for (grains_for gives some minions 'admin')
    (dst / "roles" / "admin.sls").write_text(
        "include:\n  - roles.base_service\nadmin:\n  sudoers: {{ ['ops', grains['id']] | json }}\n")


def grains_for(i: int) -> dict:
    roles = [["web"], ["db"], ["web", "db"], ["web", "admin"]][i % 4]
    return {"id": f"pm{i:05d}", "os": "Debian", "os_family": "Debian", "osfinger": "Debian-12",
            "osmajorrelease": 12, "roles": roles, "datacenter": "dc1" if i % 3 else "dc2",
            "env": "prod" if i % 5 else "dev", "app_tier": "frontend"}


# ----------------------------------------------------------------------------- client
def _worker(args):
    """One client process: its slice of ids, one request at a time. Returns per-round
    latencies (s) and the count of pillars with _errors / failures."""
    (ids, port, keydir, workdir, barrier_dir) = args
    import asyncio
    import logging
    logging.disable(logging.CRITICAL)
    import salt.pillar

    base = minion_opts(Path(workdir), Path(keydir), port, file_client="remote", saltenv="base", pillarenv=None)
    out = {"rounds": [[], []], "errors": [0, 0], "failed": [0, 0], "keys": 0}

    chans = {}

    async def rounds():
        for rnd in (0, 1):
            if rnd == 1:  # wait until every client finished round 1 (file barrier)
                (Path(barrier_dir) / f"ready-{os.getpid()}").touch()
                while not (Path(barrier_dir) / "go").exists():
                    await asyncio.sleep(0.02)
            for i in ids:
                mid = f"pm{i:05d}"
                opts = dict(base)
                opts["id"] = mid
                opts["grains"] = grains_for(i)
                # one AsyncRemotePillar (request channel) per minion, made in round 1
                # and reused by the refresh like a running minion's connection
                # (one made per request costs the client ~0.5 s of channel set-up and
                # tear-down here, which would swamp what the master does)
                if mid not in chans:
                    chans[mid] = salt.pillar.AsyncRemotePillar(opts, opts["grains"], mid, "base")
                t0 = time.monotonic()
                try:
                    ret = await chans[mid].compile_pillar()
                except Exception:  # noqa: BLE001 - counted, the round goes on
                    out["failed"][rnd] += 1
                    continue
                out["rounds"][rnd].append(time.monotonic() - t0)
                if not isinstance(ret, dict) or "_errors" in ret:
                    out["errors"][rnd] += 1
                elif rnd == 1:
                    out["keys"] += len(ret)

        for rp in chans.values():
            try:
                await rp.aclose()
            except Exception:  # noqa: BLE001
                pass

    asyncio.run(rounds())
    return out


def run_master(kind: str, a, tmp: Path, tree: Path, keydir: Path) -> dict:
    root = tmp / kind
    root.mkdir()
    opts = {"pillar_roots": {"base": [str(tree)]}, "transport": "zeromq"}
    m = start_master(kind, a, root, opts, keydir, [f"pm{i:05d}" for i in range(a.n)])
    barrier = root / "barrier"
    barrier.mkdir()
    slices = [list(range(a.n))[k::a.procs] for k in range(a.procs)]
    jobs = [(s, m.ret_port, str(keydir), str(root / f"client{k}"), str(barrier)) for k, s in enumerate(slices) if s]
    samples = {"rss_peak_kb": 0}
    cpu = {}
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            samples["rss_peak_kb"] = max(samples["rss_peak_kb"], m.rss_kb())
            stop.wait(0.2)

    ctx = mp.get_context("fork")
    with ctx.Pool(len(jobs)) as pool:
        res = pool.map_async(_worker, jobs)
        t_r1 = time.monotonic()
        while len(list(barrier.glob("ready-*"))) < len(jobs):
            if res.ready():
                res.get()  # a worker died: raise its error
                raise RuntimeError("a client finished before the barrier")
            time.sleep(0.05)
        r1 = time.monotonic() - t_r1
        rss_before = m.rss_kb()
        cpu0 = m.cpu_seconds()
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        t0 = time.monotonic()
        (barrier / "go").touch()
        outs = res.get(timeout=a.timeout)
        wall = time.monotonic() - t0
        cpu["round"] = m.cpu_seconds() - cpu0
        stop.set()
        th.join()
    rss_after = m.rss_kb()
    m.stop()
    lat = sorted(x for o in outs for x in o["rounds"][1])
    ok = len(lat)
    return {
        "master": kind, "n": a.n, "procs": a.procs,
        "round1_signin_and_compile_s": round(r1, 2),
        "refresh_wall_s": round(wall, 3),
        "refreshes_per_s": round(ok / wall, 1) if wall > 0 else None,
        "latency_ms_p50": round(1000 * pct(lat, 50), 1) if lat else None,
        "latency_ms_p99": round(1000 * pct(lat, 99), 1) if lat else None,
        "master_cpu_s": round(cpu["round"], 2),
        "master_cpu_ms_per_minion": round(1000 * cpu["round"] / max(1, ok), 2),
        "master_rss_mb_before": round(rss_before / 1024, 1),
        "master_rss_mb_peak": round(samples["rss_peak_kb"] / 1024, 1),
        "master_rss_mb_after": round(rss_after / 1024, 1),
        "answered": ok,
        "failed": sum(o["failed"][1] for o in outs),
        "pillars_with_errors": sum(o["errors"][1] for o in outs),
        "mean_top_keys": round(sum(o["keys"] for o in outs) / max(1, ok - sum(o["errors"][1] for o in outs)), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=Path(__file__).read_text().split('"""')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="minions (default 5000)")
    ap.add_argument("--procs", type=int, default=4, help="client processes (concurrent requests)")
    add_common_args(ap)
    ap.add_argument("--timeout", type=float, default=3600)
    add_output_args(ap, "pillar-refresh-latest.json")
    a = ap.parse_args()

    def prepare(tmp):
        tree = tmp / "pillar"
        build_tree(tree)
        keydir = tmp / "minion-key"
        gen_minion_key(keydir)
        return tree, keydir

    results = run_masters(a, "sylvite-pillar-bench-", prepare,
                          lambda kind, tmp, p: run_master(kind, a, tmp, p[0], p[1]),
                          f"{a.n} minions, {a.procs} client processes")
    write_doc(a.out, "pillar_refresh", results, tree=TREE_CASES)
    print_comparison(results, ("refresh_wall_s", "refreshes_per_s", "latency_ms_p50", "latency_ms_p99",
                               "master_cpu_s", "master_cpu_ms_per_minion", "master_rss_mb_peak",
                               "pillars_with_errors"), 28, ratio=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
