"""Issue 7, test 4: a master joins a running three-master cluster (loopback, shared
directory, real HAProxy) while 1,000 simulated minions (sylvite-swarm, through the load
balancer) answer a stream of jobs published by two members; after the join the new
master publishes too and is added to HAProxy through the runtime API. Every return of
every job is acknowledged to its minion and is in the shared job cache: none is lost.
"""
import json
import re
import subprocess
import threading
import time

import pytest

from clusterlab import LocalCluster, master_logs as logs
from swarmlab import SWARM, Swarm
from sylvite_harness import BIN, free_port

SECRET = "load-join-secret"
N = 1000

pytestmark = pytest.mark.skipif(not SWARM.exists(), reason=f"{SWARM} is not built")


def jid_of(r) -> str:
    assert r.returncode == 0, r.stdout + r.stderr
    return re.search(r"\b(\d{20})\b", r.stdout).group(1)


def test_join_under_load_loses_no_return(env):
    c = LocalCluster(env, cluster_secret=SECRET, auto_accept=True, log_level_logfile="info")
    sw = None
    try:
        sw = Swarm(env.root, N, c.lb_req, c.lb_pub, prefix="jl-")
        st = sw.wait_ready(300)
        print(f"\n{N} swarm minions signed in ({st['auth_attempts']} attempts)")
        cm1, cm2, _ = c.masters
        jids: list[str] = []
        stop = threading.Event()
        errors: list[str] = []

        def publisher(m):
            while not stop.is_set():
                r = m.salt("--async", "jl-*", "test.ping")
                if r.returncode == 0:
                    jids.append(jid_of(r))
                else:
                    errors.append(r.stdout + r.stderr)
                time.sleep(0.4)

        threads = [threading.Thread(target=publisher, args=(m,), daemon=True) for m in (cm1, cm2)]
        for t in threads:
            t.start()
        time.sleep(3)  # jobs in flight
        before = len(jids)

        # the join, mid-stream
        port = free_port()
        j = env.master("cm4", root_dir="/", cluster_id="sylvite-test",
                       cluster_peers=[f"127.0.0.1:{c.pool_ports['cm1']}"], cluster_pool_port=port,
                       cluster_pki_dir=str(c.shared / "pki"), cachedir=str(c.shared / "cache"),
                       cluster_secret=SECRET, auto_accept=True, log_level_logfile="info",
                       file_roots={"base": [str(c.shared / "srv" / "salt")]},
                       pillar_roots={"base": [str(c.shared / "srv" / "pillar")]})
        t0 = time.monotonic()
        j.start()
        j.wait_ready(timeout=60)
        took = re.search(r"cluster join took (\d+) ms", logs(j))
        assert took, logs(j)
        print(f"cm4 joined under load in {took.group(1)} ms ({time.monotonic() - t0:.2f} s to ready); "
              f"{len(jids) - before} jobs published meanwhile")
        r = subprocess.run([str(BIN / "sylvite-haproxy-cfg"), "-c", str(j.conf_dir), "--stats-socket", str(c.stats),
                            "--publish-backend", "salt_publish", "--request-backend", "salt_request",
                            "--add-server", "cm4", "--server-address", "127.0.0.1"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        # the new master publishes too, while the others go on
        own = []
        for _ in range(3):
            own.append(jid_of(j.salt("--async", "jl-*", "test.ping")))
            time.sleep(0.5)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors[:3]
        all_jids = jids + own
        assert len(jids) >= 10, jids

        # every return acknowledged to its minion ...
        short = {}
        for jid in all_jids:
            w = sw.wait_job(jid, N, 120)
            if w["acked"] != N:
                short[jid] = (w["received"], w["acked"], w["failed"])
        assert not short, f"jobs whose returns were not all acknowledged: {short}"
        # ... and in the shared job cache, seen the same from an old and the new master
        for jid in all_jids:
            for m in (cm1, j):
                out = json.loads(m.salt_run("jobs.lookup_jid", jid, "--out", "json", timeout=120).stdout or "{}")
                assert len(out) == N and set(out.values()) == {True}, (m.name, jid, len(out))
        print(f"{len(all_jids)} jobs x {N} minions: every return acknowledged and in the job cache")
        assert sw.status()["returns_failed"] == 0
    finally:
        if sw:
            sw.close()
        c.close()
