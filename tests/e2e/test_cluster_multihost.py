"""Issue 6, multi-host: three sylvite masters in three network namespaces sharing a real
GlusterFS replica-3 volume (one brick and one FUSE mount per master host), a real
HAProxy in a fourth namespace, minions in a fifth that know only the load balancer.

  2. kill one master -> HAProxy marks it down, its minions reconnect through the load
     balancer, the next job gets every return; restart it -> it serves again;
  3. cut one master's network (silent blackhole: its Gluster brick goes with it) during a
     job -> no return a minion got acknowledged is lost: every return is in the job cache.
"""
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from clusterlab import HAPROXY, haproxy_cfg
from glusterlab import GlusterLab, gluster_available
from netlab import NetLab
from sylvite_harness import wait_for

why_skip = gluster_available()
pytestmark = pytest.mark.skipif(why_skip is not None, reason=why_skip or "")

MINIONS = [f"gx{i}" for i in range(1, 7)]


class MultiHostCluster:
    def __init__(self, env, lab):
        self.env = env
        self.hosts = [lab.host(f"m{i}") for i in (1, 2, 3)]
        self.lb_host = lab.host("lb")
        self.mhost = lab.host("minions")
        self.gl = GlusterLab(lab, self.hosts)
        self.gl.__enter__()
        self.masters = []
        for h in self.hosts:
            mnt = self.gl.mounts[h.name]
            for d in ("pki/cluster", "cache", "srv/salt", "srv/pillar"):
                (mnt / d).mkdir(parents=True, exist_ok=True)
            peers = [o.ip for o in self.hosts if o is not h]
            m = env.master(h.name, host=h, root_dir="/", cluster_id="gx", cluster_peers=peers,
                           cluster_pki_dir=str(mnt / "pki" / "cluster"), cachedir=str(mnt / "cache"),
                           file_roots={"base": [str(mnt / "srv" / "salt")]},
                           pillar_roots={"base": [str(mnt / "srv" / "pillar")]})
            self.masters.append(m)
        for m in self.masters:
            m.start()
        for m in self.masters:
            m.wait_ready(timeout=60)
        self.lb_dir = env.root / "haproxy"
        self.lb_dir.mkdir()
        self.stats = self.lb_dir / "stats.sock"
        cfg = self.lb_dir / "haproxy.cfg"
        cfg.write_text(haproxy_cfg(self.lb_host.ip, 4505, 4506,
                                   [(m.name, m.host.ip, 4505, 4506) for m in self.masters], self.stats))
        r = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        self.lb_log = open(self.lb_dir / "haproxy.out", "ab")
        self.lb = self.lb_host.popen([HAPROXY, "-db", "-f", str(cfg)], stdout=self.lb_log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.mhost.can_connect(self.lb_host.ip, 4506), 20, "haproxy to listen")

    def server_status(self, backend):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.stats))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode().strip().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, ln.split(","))) for ln in lines[1:] if ln]
        return {r["svname"]: r for r in rows if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")}

    def minions(self, names):
        out = []
        for n in names:
            mn = self.env.minion(n, self.masters[0], host=self.mhost, acceptance_wait_time=1, random_reauth_delay=1,
                                 return_retry_timer=2, return_retry_timer_max=3, return_retry_tries=5)
            mn.write_config(master=self.lb_host.ip, master_port=4506)
            out.append(mn.start())
        return out

    def close(self):
        try:
            if self.lb.poll() is None:
                os.killpg(self.lb.pid, 9)
                self.lb.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self.lb_log.close()
        for m in self.masters:
            try:
                m.kill()
            except Exception:
                pass
        self.gl.close()


@pytest.fixture
def mh(env):
    with NetLab() as lab:
        c = MultiHostCluster(env, lab)
        try:
            yield c
        finally:
            c.close()


def ping(master, names, t=5):
    out = master.salt_json("gx*", "test.ping", "-t", str(t))
    return {k: v for k, v in out.items() if k in names}


def wait_ping(master, names, timeout=120):
    return wait_for(lambda: ping(master, names) == {n: True for n in names}, timeout,
                    f"{names} to answer test.ping from {master.name}", interval=1)


def onboard(mh, names=MINIONS):
    mh.minions(names)
    m1 = mh.masters[0]
    wait_for(lambda: set(names) <= set(m1.keys().get("minions_pre", [])), 90, "minion keys pending")
    assert m1.salt_key("-A", "-y").returncode == 0
    for m in mh.masters:
        wait_ping(m, names)


def test_master_killed_minions_move_through_the_load_balancer(env, mh):
    onboard(mh)
    m1, m2, m3 = mh.masters
    pub = mh.server_status("salt_publish")
    assert sum(int(r["scur"]) for r in pub.values()) == len(MINIONS), pub
    on_m3 = int(pub["m3"]["scur"])
    m3.kill()
    wait_for(lambda: mh.server_status("salt_publish")["m3"]["status"].startswith("DOWN"), 30, "m3 marked down")
    t0 = time.monotonic()
    wait_ping(m1, MINIONS)
    print(f"m3 (had {on_m3} publish connections) killed: every minion answered m1 after "
          f"{time.monotonic() - t0:.1f}s")
    r = m1.salt("--out", "json", "--static", "gx*", "test.echo", "after-kill")
    assert json.loads(r.stdout[r.stdout.index("{"):]) == {n: "after-kill" for n in MINIONS}, r.stdout
    m3.start().wait_ready(timeout=60)
    wait_for(lambda: mh.server_status("salt_publish")["m3"]["status"] == "UP", 30, "m3 up again")
    wait_ping(m3, MINIONS)


def test_blackholed_master_during_a_job_loses_no_return(env, mh):
    onboard(mh)
    m1, m2, m3 = mh.masters
    r = m1.salt("--async", "gx*", "test.sleep", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"\b(\d{20})\b", r.stdout).group(1)
    time.sleep(1)  # the job runs on every minion now
    m3.host.blackhole(True)  # silent: no RST, and its Gluster brick is cut off too
    t0 = time.monotonic()

    def all_returned():
        r = m1.salt_run("jobs.lookup_jid", jid, "--out", "json", timeout=120)
        try:
            out = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
        except json.JSONDecodeError:
            return None
        return out if set(out) >= set(MINIONS) else None

    out = wait_for(all_returned, 150, "every return of the job in the shared job cache", interval=2)
    assert out == {n: True for n in MINIONS}, out
    print(f"all {len(MINIONS)} returns in the job cache {time.monotonic() - t0:.1f}s after m3 was cut off")
    # and the cluster keeps serving every minion without m3
    wait_ping(m1, MINIONS, timeout=150)
