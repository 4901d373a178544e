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
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.core import REPO, SaltMaster, SylviteMaster, rmtree, stop_all  # noqa: E402

MINION = "benchmin"
SLS = """\
{% set n = data.get('data', {}).get('n', data.get('n', 0)) %}
ping_{{ n }}:
  local.test.ping:
    - tgt: """ + MINION + """
    - metadata:
        reactor_tag: {{ tag }}
"""


def gen_minion_key(d: Path):
    import subprocess
    d.mkdir(parents=True, exist_ok=True)
    key = subprocess.run(["openssl", "genrsa", "-traditional", "2048"], capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "rsa", "-pubout"], input=key, capture_output=True, check=True).stdout
    (d / "minion.pem").write_bytes(key)
    os.chmod(d / "minion.pem", 0o400)
    (d / "minion.pub").write_bytes(pub)


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
    import shutil
    logging.disable(logging.CRITICAL)
    import salt.channel.client
    import salt.config

    pki = workdir / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    for f in ("minion.pem", "minion.pub"):
        shutil.copyfile(keydir / f, pki / f)
    os.chmod(pki / "minion.pem", 0o400)
    opts = salt.config.minion_config(None)
    opts.update({"id": MINION, "master": "127.0.0.1", "master_port": port, "master_ip": "127.0.0.1",
                 "master_uri": f"tcp://127.0.0.1:{port}", "pki_dir": str(pki), "cachedir": str(workdir / "cache"),
                 "sock_dir": str(workdir / "sock"), "transport": "zeromq", "acceptance_wait_time": 1,
                 "auth_timeout": 60, "auth_tries": 10})
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
    opts.update(json.loads(a.master_opts or "{}"))
    cls, bin_dir = (SylviteMaster, Path(a.sylvite_bin)) if kind == "sylvite" else (SaltMaster, Path(a.salt_bin))
    m = cls(root, bin_dir, opts, transport="zeromq")
    acc = Path(m.opts["pki_dir"]) / "minions"
    acc.mkdir(parents=True, exist_ok=True)
    (acc / MINION).write_bytes((keydir / "minion.pub").read_bytes())
    m.start()
    m.wait_ready(timeout=120)
    time.sleep(1.0)
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="events per master (default 1000)")
    ap.add_argument("--batch", type=int, default=50, help="events per _minion_event request")
    ap.add_argument("--only", choices=["sylvite", "salt"], help="one master only")
    ap.add_argument("--sylvite-bin", default=os.environ.get("SYLVITE_BIN", str(REPO / "build" / "bin")))
    ap.add_argument("--salt-bin", default=str(Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"))
    ap.add_argument("--master-opts", help="JSON dict of extra options for both masters")
    ap.add_argument("--idle", type=float, default=20, help="stop waiting after this long without a new action")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "reactor-latest.json"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sylvite-reactor-bench-"))
    results = []
    try:
        keydir = tmp / "minion-key"
        gen_minion_key(keydir)
        for kind in ([a.only] if a.only else ["sylvite", "salt"]):
            print(f"[{time.strftime('%H:%M:%S')}] {kind}: {a.n} events, batches of {a.batch}", flush=True)
            r = run_master(kind, a, tmp, keydir)
            results.append(r)
            print(json.dumps(r, indent=2), flush=True)
    finally:
        stop_all()
        if a.keep:
            print("kept", tmp)
        else:
            rmtree(tmp)
    doc = {"bench": "reactor", "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "loadavg": os.getloadavg(),
           "cpus": os.cpu_count(), "argv": sys.argv[1:], "results": results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    if len(results) == 2:
        s, r = results
        print(f"\n{'':32}{'sylvite':>12}{'salt':>12}{'ratio':>10}")
        for k in ("events_in_per_s", "actions", "actions_out_per_s", "first_event_to_last_action_s",
                  "master_cpu_s", "master_cpu_ms_per_action"):
            ratio = ""
            if isinstance(s[k], (int, float)) and isinstance(r[k], (int, float)) and r[k]:
                ratio = f"{s[k] / r[k]:.2f}"
            print(f"{k:32}{str(s[k]):>12}{str(r[k]):>12}{ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
