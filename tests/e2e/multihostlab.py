"""A sylvite master cluster across network namespaces for end-to-end tests: three masters
(m1..m3), each in its own namespace with a brick and a FUSE mount of a real GlusterFS
replica-3 volume (cluster_pki_dir, cachedir, file_roots, pillar_roots on it), a real
HAProxy in an "lb" namespace (admin socket for `show stat` and the runtime API), and
minions in a "minions" namespace that know only the load balancer. `clients` hosts may
mount the volume later (a master joining the cluster: GlusterLab.mount_client).
"""
from __future__ import annotations

import os
import subprocess

from clusterlab import HAPROXY, haproxy_cfg, haproxy_stat
from glusterlab import GlusterLab
from sylvite_harness import wait_for

SHARED_DIRS = ("pki/cluster", "cache", "srv/salt", "srv/pillar")


def shared_opts(mnt) -> dict:
    """The options that put a master's shared state on the volume mounted at mnt."""
    return dict(cluster_pki_dir=str(mnt / "pki" / "cluster"), cachedir=str(mnt / "cache"),
                file_roots={"base": [str(mnt / "srv" / "salt")]},
                pillar_roots={"base": [str(mnt / "srv" / "pillar")]})


class MultiHostCluster:
    PUBLISH_BACKEND = "salt_publish"
    REQUEST_BACKEND = "salt_request"

    def __init__(self, env, lab, cluster_id="gx", clients=(), lb_admin_port=None, **master_opts):
        """lb_admin_port: HAProxy also listens for its runtime API on lb_ip:port, and the
        masters get it as cluster_lb_admin (a joined master is added automatically)."""
        self.env = env
        self.cluster_id = cluster_id
        self.hosts = [lab.host(f"m{i}") for i in (1, 2, 3)]
        self.lb_host = lab.host("lb")
        self.lb_admin = f"{self.lb_host.ip}:{lb_admin_port}" if lb_admin_port else None
        if self.lb_admin:
            master_opts = dict(master_opts, cluster_lb_admin=self.lb_admin,
                               cluster_lb_backends=[self.PUBLISH_BACKEND, self.REQUEST_BACKEND])
        self.mhost = lab.host("minions")
        self.gl = GlusterLab(lab, self.hosts, clients=list(clients))
        self.gl.__enter__()
        self.masters = []
        self.lb = None
        self.lb_log = None
        try:
            for h in self.hosts:
                mnt = self.gl.mounts[h.name]
                for d in SHARED_DIRS:
                    (mnt / d).mkdir(parents=True, exist_ok=True)
                peers = [o.ip for o in self.hosts if o is not h]
                m = env.master(h.name, host=h, root_dir="/", cluster_id=cluster_id, cluster_peers=peers,
                               **shared_opts(mnt), **master_opts)
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
                                       [(m.name, m.host.ip, 4505, 4506) for m in self.masters], self.stats,
                                       self.lb_admin))
            r = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
            self.lb_log = open(self.lb_dir / "haproxy.out", "ab")
            self.lb = self.lb_host.popen([HAPROXY, "-db", "-f", str(cfg)], stdout=self.lb_log,
                                         stderr=subprocess.STDOUT)
            wait_for(lambda: self.mhost.can_connect(self.lb_host.ip, 4506), 20, "haproxy to listen")
        except BaseException:
            self.close()
            raise

    def server_status(self, backend):
        return {r["svname"]: r for r in haproxy_stat(self.stats)
                if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")}

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
            if self.lb is not None and self.lb.poll() is None:
                os.killpg(self.lb.pid, 9)
                self.lb.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        if self.lb_log:
            self.lb_log.close()
        for m in self.masters:
            try:
                m.kill()
            except Exception:
                pass
        self.gl.close()


def ping(master, names, pattern="gx*", t=5):
    out = master.salt_json(pattern, "test.ping", "-t", str(t))
    return {k: v for k, v in out.items() if k in names}


def wait_ping(master, names, timeout=120, pattern="gx*"):
    return wait_for(lambda: ping(master, names, pattern) == {n: True for n in names}, timeout,
                    f"{names} to answer test.ping from {master.name}", interval=1)


def onboard(mh, names, pattern="gx*"):
    mh.minions(names)
    m1 = mh.masters[0]
    wait_for(lambda: set(names) <= set(m1.keys().get("minions_pre", [])), 90, "minion keys pending")
    assert m1.salt_key("-A", "-y").returncode == 0
    for m in mh.masters:
        wait_ping(m, names, pattern=pattern)
