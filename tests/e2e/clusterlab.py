"""A local sylvite master cluster for end-to-end tests: N masters on 127.0.0.1 (free
ports each), one shared directory standing in for the shared filesystem
(cluster_pki_dir, cachedir, file_roots, pillar_roots), a real HAProxy in front
(publish and request frontends, TCP health checks, stats socket) and minions that know
only the load balancer's address. Multi-host variants pass netlab hosts.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

from sylvite_harness import Proc, free_port, wait_for

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def haproxy_cfg(lb_host: str, pub_port: int, req_port: int, masters, stats_sock: Path,
                admin_tcp: str | None = None) -> str:
    """masters: list of (name, host, publish_port, ret_port); admin_tcp: "ip:port" for a
    second, TCP admin socket (cluster_lb_admin of masters in other namespaces)."""
    lines = [
        "global",
        f"    stats socket {stats_sock} mode 600 level admin",
        *([f"    stats socket ipv4@{admin_tcp} level admin"] if admin_tcp else []),
        "    maxconn 9000",
        "defaults",
        "    mode tcp",
        "    timeout connect 3s",
        "    retries 2",
        "    option redispatch",
        "    default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions",
        "frontend salt_publish",
        f"    bind {lb_host}:{pub_port}",
        "    timeout client 86400s",
        "    default_backend salt_publish",
        "backend salt_publish",
        "    balance leastconn",
        "    timeout server 86400s",
    ]
    lines += [f"    server {n} {h}:{p} check" for n, h, p, _ in masters]
    lines += [
        "frontend salt_request",
        f"    bind {lb_host}:{req_port}",
        "    timeout client 60s",
        "    default_backend salt_request",
        "backend salt_request",
        "    balance roundrobin",
        "    timeout server 60s",
    ]
    lines += [f"    server {n} {h}:{r} check" for n, h, _, r in masters]
    return "\n".join(lines) + "\n"


def master_logs(m) -> str:
    """A master's stdout/stderr and its log_file, for assertions on what it logged."""
    p = m.root / "master.log"
    return m.log_text() + (p.read_text(errors="replace") if p.exists() else "")


def peer_states(m) -> dict:
    """{peer id: link state} from `salt-run cluster.peers` on master m."""
    r = m.salt_run("cluster.peers", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return {p["id"]: p["state"] for p in json.loads(r.stdout)["peers"] if p["id"]}


def haproxy_stat(stats_sock) -> list[dict]:
    """`show stat` from an HAProxy admin socket as dicts (pxname, svname, status, scur...)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(stats_sock))
        s.sendall(b"show stat\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    lines = data.decode().strip().splitlines()
    header = lines[0].lstrip("# ").split(",")
    return [dict(zip(header, ln.split(","))) for ln in lines[1:] if ln]


class LocalCluster:
    def __init__(self, env, n=3, cluster_id="sylvite-test", start=True, **master_opts):
        self.env = env
        self.shared = env.root / "shared"
        for d in ("pki", "cache", "srv/salt", "srv/pillar"):
            (self.shared / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.shared / "pki", 0o700)
        self.names = [f"cm{i + 1}" for i in range(n)]
        self.pool_ports = {name: free_port() for name in self.names}
        self.masters = []
        for name in self.names:
            peers = [f"127.0.0.1:{self.pool_ports[p]}" for p in self.names if p != name]
            # root_dir "/": Salt prepends root_dir to absolute paths outside it, and the
            # shared directories live outside each master's own directory.
            m = env.master(name, root_dir="/", cluster_id=cluster_id, cluster_peers=peers,
                           cluster_pool_port=self.pool_ports[name],
                           cluster_pki_dir=str(self.shared / "pki"), cachedir=str(self.shared / "cache"),
                           file_roots={"base": [str(self.shared / "srv" / "salt")]},
                           pillar_roots={"base": [str(self.shared / "srv" / "pillar")]}, **master_opts)
            self.masters.append(m)
        self.lb_pub = free_port()
        self.lb_req = free_port()
        self.lb_dir = env.root / "haproxy"
        self.lb_dir.mkdir(exist_ok=True)
        self.stats = self.lb_dir / "stats.sock"
        self.lb: Proc | None = None
        if start:
            self.start_masters()
            self.start_lb()

    def start_masters(self, masters=None):
        for m in masters or self.masters:
            m.start()
        for m in masters or self.masters:
            m.wait_ready()

    def start_lb(self):
        cfg = self.lb_dir / "haproxy.cfg"
        cfg.write_text(haproxy_cfg("127.0.0.1", self.lb_pub, self.lb_req,
                                   [(m.name, "127.0.0.1", m.publish_port, m.ret_port) for m in self.masters],
                                   self.stats))
        check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.lb = Proc([HAPROXY, "-db", "-f", str(cfg)], self.lb_dir / "haproxy.out")
        wait_for(lambda: self._listening(self.lb_pub) and self._listening(self.lb_req), 20, "haproxy to listen")

    @staticmethod
    def _listening(port) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def stat(self) -> list[dict]:
        """`show stat` from the stats socket as dicts (pxname, svname, status, scur...)."""
        return haproxy_stat(self.stats)

    def server_status(self, backend: str) -> dict:
        return {r["svname"]: r for r in self.stat() if r["pxname"] == backend and r["svname"] not in
                ("FRONTEND", "BACKEND")}

    def minion(self, name, **opts):
        m = self.env.minion(name, self.masters[0], master_port=self.lb_req, publish_port=self.lb_pub, **opts)
        m.write_config(master="127.0.0.1")
        return m

    def close(self):
        if self.lb:
            self.lb.kill()
