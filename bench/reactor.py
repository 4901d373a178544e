#!/bin/sh
# -*- mode: python -*-
# Re-exec with the project venv's Python (Salt 3008.5 lives there); the rest is Python.
''''exec "${SYLVITE_VENV:-$(dirname "$0")/../build/venv}/bin/python" "$0" "$@" # '''
"""bench/reactor.py (issue 18): reactor throughput, events in to actions out, on a sylvite
master and on a real salt-master 3008.5 with the same reactor config, one master after the
other in the same run, same machine.

Config (both masters): reactor: [{'bench/*': [<root>/reactor/ping.sls]}], ping.sls renders
the event with Jinja (`tag` and `data`) and publishes one local.test.ping per event to an
accepted minion id (its key pre-accepted; no minion process needed: each publish is a job
saved in the master's job cache, which is what is counted on both masters, Salt's
local_cache layout: cachedir/jobs/<h2>/<rest>/.load.p).

Events come from Salt's own client code, as a minion sends them: a
salt.channel.client.AsyncReqChannel (zeromq) authenticated with the minion's key sends
`_minion_event` loads carrying `events` batches (--batch events per request, what a minion's
_fire_master does for queued events), so the injection is not the bottleneck.

Reported per master: events sent, injection wall time, events/s in, actions (jobs) seen,
time from the first event to the last job, actions/s out, master CPU seconds over the
run (all its processes) and CPU ms per action.

  bench/reactor.py --n 1000            # both masters
  bench/reactor.py --only sylvite --n 20000
Writes bench/results/reactor-latest.json (or --out).
"""

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.vs import (add_common_args, add_output_args, gen_minion_key, minion_opts,  # noqa: E402
                         print_comparison, run_masters, start_master, write_doc)

MINION = "benchmin"
SLS = """\
{% set n = data.get('data', {}).get('n', data.get('n', 0)) %}
ping_{{ n }}:
  local.test.ping:
    - tgt: """ + MINION + """
    - metadata:
        reactor_tag: {{ tag }}
"""


def count_jobs(cachedir: Path) -> int:
    n = 0
    jobs = cachedir / "jobs"
    if not jobs.is_dir():
        return 0
    for b in os.scandir(jobs):
        if not b.is_dir():
            continue
        for j in os.scandir(b.path):
            if os.path.exists(os.path.join(j.path, ".load.p")):
                n += 1
    return n


def send_events(port: int, keydir: Path, workdir: Path, n: int, batch: int) -> tuple[float, float]:
    """Authenticate as MINION and send n events in batches; (t_first_send, t_last_ack)."""
    import asyncio
    import logging
    logging.disable(logging.CRITICAL)
    import salt.channel.client

    opts = minion_opts(workdir, keydir, port, id=MINION)
    times = {}

    async def run():
        chan = salt.channel.client.AsyncReqChannel.factory(opts)
        try:
            # sign in first (untimed): one empty batch
            await chan.send({"cmd": "_minion_event", "id": MINION, "events": []}, timeout=60)
            times["t0"] = time.monotonic()
            i = 0
            while i < n:
                evs = [{"tag": "bench/event", "data": {"n": k, "_stamp": "x"}} for k in range(i, min(n, i + batch))]
                await chan.send({"cmd": "_minion_event", "id": MINION, "events": evs}, timeout=60)
                i += len(evs)
            times["t1"] = time.monotonic()
        finally:
            chan.close()

    asyncio.run(run())
    return times["t0"], times["t1"]


def run_master(kind: str, a, tmp: Path, keydir: Path) -> dict:
    root = tmp / kind
    root.mkdir()
    rdir = root / "reactor"
    rdir.mkdir()
    (rdir / "ping.sls").write_text(SLS)
    opts = {"transport": "zeromq", "reactor": [{"bench/*": [str(rdir / "ping.sls")]}],
            "keep_jobs_seconds": 86400}
    m = start_master(kind, a, root, opts, keydir, [MINION])
    cachedir = Path(m.opts["cachedir"])
    base_jobs = count_jobs(cachedir)
    cpu0 = m.cpu_seconds()
    t0, t1 = send_events(m.ret_port, keydir, root / "client", a.n, a.batch)
    # wait for the actions: jobs in the cache (polled), until n or no progress for --idle s
    seen, last_change, last_seen, t_last = 0, time.monotonic(), -1, t1
    while True:
        seen = count_jobs(cachedir) - base_jobs
        now = time.monotonic()
        if seen != last_seen:
            last_seen, last_change, t_last = seen, now, now
        if seen >= a.n or now - last_change > a.idle or now - t0 > a.timeout:
            break
        time.sleep(0.05)
    cpu = m.cpu_seconds() - cpu0
    m.stop()
    span = max(1e-6, t_last - t0)
    return {
        "master": kind, "events": a.n, "batch": a.batch,
        "inject_s": round(t1 - t0, 3),
        "events_in_per_s": round(a.n / max(1e-6, t1 - t0), 1),
        "actions": seen,
        "first_event_to_last_action_s": round(span, 3),
        "actions_out_per_s": round(seen / span, 1),
        "master_cpu_s": round(cpu, 2),
        "master_cpu_ms_per_action": round(1000 * cpu / max(1, seen), 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=Path(__file__).read_text().split('"""')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="events per master (default 1000)")
    ap.add_argument("--batch", type=int, default=50, help="events per _minion_event request")
    add_common_args(ap)
    ap.add_argument("--idle", type=float, default=20, help="stop waiting after this long without a new action")
    ap.add_argument("--timeout", type=float, default=1800)
    add_output_args(ap, "reactor-latest.json")
    a = ap.parse_args()

    def prepare(tmp):
        keydir = tmp / "minion-key"
        gen_minion_key(keydir)
        return keydir

    results = run_masters(a, "sylvite-reactor-bench-", prepare,
                          lambda kind, tmp, keydir: run_master(kind, a, tmp, keydir),
                          f"{a.n} events, batches of {a.batch}")
    write_doc(a.out, "reactor", results, argv=sys.argv[1:])
    print_comparison(results, ("events_in_per_s", "actions", "actions_out_per_s", "first_event_to_last_action_s",
                               "master_cpu_s", "master_cpu_ms_per_action"), 32, ratio=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
