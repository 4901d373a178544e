"""HAProxy in front of sylvite masters (deploy/haproxy, docs/deploy.md).

Two ordinary sylvite masters on their own 127.0.<n>.x addresses with health_port set,
haproxy.cfg written by sylvite-haproxy-cfg from a master's config (plus cluster_peers),
real `haproxy -db -f` started and stopped by PID. The runtime API (`show stat` on the
admin stats socket) must show:
  - both masters UP in both backends;
  - a stopped master DOWN within a bounded wait (the other stays UP), UP again after a
    restart;
  - a master that is up but not ready (its cachedir replaced by a file) DOWN because its
    /ready answers 503 (check_status L7STS), while /health still answers 200.
Addresses and ports are picked at random / free so tests can run in parallel.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sylvite_harness import BIN, Proc, free_port, wait_for, yaml_dump

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
GEN = BIN / "sylvite-haproxy-cfg"

pytestmark = [
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
    pytest.mark.skipif(not GEN.exists(), reason=f"{GEN} is missing: build first"),
]


def lab_addresses():
    n = random.randint(2, 250)
    return f"127.0.{n}.11", f"127.0.{n}.12", f"127.0.{n}.10"


def http_get(addr: str, port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://{addr}:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def can_connect(addr: str, port: int) -> bool:
    try:
        socket.create_connection((addr, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_master(m, health_port: int, timeout=30):
    def up():
        if m.proc and not m.proc.alive():
            raise AssertionError(f"{m.name} exited early:\n{m.log_text()}")
        return all(can_connect(m.address, p) for p in (m.ret_port, m.publish_port, health_port))
    wait_for(up, timeout, f"{m.name} to listen on {m.address}")


def show_stat(sock_path: Path) -> dict:
    """{(backend, server): row} from `show stat` on the admin socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock_path))
        s.sendall(b"show stat\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        row = dict(zip(header, line.split(",")))
        rows[(row["pxname"], row["svname"])] = row
    return rows


BACKENDS = ("salt_publish_masters", "salt_request_masters")


class Lab:
    def __init__(self, env):
        self.env = env
        self.a1, self.a2, self.lb = lab_addresses()
        # free_port: free on every local address (the masters and HAProxy share port numbers
        # on different 127.0.<n>.x addresses)
        self.pub, self.ret, self.health = free_port(), free_port(), free_port()
        common = dict(publish_port=self.pub, ret_port=self.ret, health_port=self.health)
        self.m1 = env.master("m1", interface=self.a1, **common)
        self.m2 = env.master("m2", interface=self.a2, **common)
        self.haproxy: Proc | None = None
        self.stats = env.root / "admin.sock"
        self.cfg = env.root / "haproxy.cfg"
        # The generator reads one master's configuration plus the cluster's peers; the
        # masters themselves run as ordinary (non-cluster) masters here.
        self.gen_conf = env.root / "gen-conf"
        self.gen_conf.mkdir()
        opts = dict(self.m1.opts, cluster_id="hap-e2e", cluster_peers=[self.a2])
        (self.gen_conf / "master").write_text(yaml_dump(opts))

    def generate(self, *extra):
        return subprocess.run([str(GEN), "-c", str(self.gen_conf), "--lb-address", self.lb,
                               "--stats-socket", str(self.stats), "--log", "none", *extra],
                              capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)

    def start_haproxy(self):
        self.haproxy = Proc([HAPROXY, "-db", "-f", str(self.cfg)], self.env.root / "haproxy.out")
        wait_for(lambda: self.stats.exists() or not self.haproxy.alive(), 20, "haproxy stats socket")
        assert self.haproxy.alive(), (self.env.root / "haproxy.out").read_text()

    def status(self, server: str, backend: str) -> str:
        return show_stat(self.stats)[(backend, server)]["status"]

    def wait_status(self, server: str, want: str, timeout: float):
        def ok():
            st = show_stat(self.stats)
            got = {b: st[(b, server)]["status"] for b in BACKENDS}
            return all(v == want for v in got.values()) and got
        return wait_for(ok, timeout, f"{server} {want} in both backends", interval=0.1)

    def close(self):
        if self.haproxy is not None:
            self.haproxy.kill(signal.SIGKILL)
            self.haproxy = None


@pytest.fixture
def lab(env):
    lab = Lab(env)
    try:
        yield lab
    finally:
        if lab.haproxy is not None:
            print(f"===== haproxy.out\n{(env.root / 'haproxy.out').read_text(errors='replace')[-4000:]}")
        lab.close()


def test_generated_config_backends_follow_master_health_and_readiness(lab):
    m1, m2 = lab.m1, lab.m2
    m1.start()
    m2.start()
    wait_master(m1, lab.health)
    wait_master(m2, lab.health)

    # Health endpoint answers directly.
    code, body = http_get(m1.address, lab.health, "/health")
    assert (code, body) == (200, {"id": "m1", "status": "up"})
    code, body = wait_for(lambda: (r := http_get(m2.address, lab.health, "/ready"))[0] == 200 and r, 10,
                          "m2 ready")
    assert body["status"] == "ready"

    r = lab.generate("--out", str(lab.cfg))
    assert r.returncode == 0, r.stderr
    text = lab.cfg.read_text()
    for backend in BACKENDS:
        assert f"backend {backend}" in text
    assert f"server {lab.a1} {lab.a1}:{lab.pub} check port {lab.health}" in text
    assert f"server {lab.a2} {lab.a2}:{lab.ret} check port {lab.health}" in text
    assert f"bind {lab.lb}:{lab.pub}" in text and f"bind {lab.lb}:{lab.ret}" in text
    assert "timeout client 86400s" in text

    lab.start_haproxy()
    lab.wait_status(lab.a1, "UP", 20)
    lab.wait_status(lab.a2, "UP", 20)
    # The frontends accept connections and reach a master.
    assert can_connect(lab.lb, lab.ret) and can_connect(lab.lb, lab.pub)

    # Stop m1: DOWN within a bounded wait, m2 stays UP.
    m1.stop()
    t0 = time.monotonic()
    lab.wait_status(lab.a1, "DOWN", 15)
    print(f"m1 marked DOWN {time.monotonic() - t0:.2f}s after it stopped")
    assert all(lab.status(lab.a2, b) == "UP" for b in BACKENDS)
    assert can_connect(lab.lb, lab.ret)  # served by m2

    # Restart: UP again.
    m1.start()
    wait_master(m1, lab.health)
    t0 = time.monotonic()
    lab.wait_status(lab.a1, "UP", 20)
    print(f"m1 marked UP {time.monotonic() - t0:.2f}s after it listened again")

    # m2 up but not ready: its cachedir replaced by a file (a vanished shared mount).
    cache = Path(m2.opts["cachedir"])
    moved = cache.with_name("cache.moved")
    cache.rename(moved)
    cache.write_text("not a directory\n")
    try:
        code, body = wait_for(lambda: (r := http_get(m2.address, lab.health, "/ready"))[0] == 503 and r, 15,
                              "m2 /ready 503")
        assert body["status"] == "not ready" and "cachedir" in body["reason"], body
        t0 = time.monotonic()
        lab.wait_status(lab.a2, "DOWN", 15)
        print(f"not-ready m2 marked DOWN {time.monotonic() - t0:.2f}s after /ready said 503")
        st = show_stat(lab.stats)
        for b in BACKENDS:
            # failed on the HTTP status (the check connected), not on the connection
            assert st[(b, lab.a2)]["check_status"] == "L7STS", st[(b, lab.a2)]
            assert st[(b, lab.a2)]["check_code"] == "503", st[(b, lab.a2)]
            assert st[(b, lab.a1)]["status"] == "UP"
        assert m2.proc.alive()
        assert http_get(m2.address, lab.health, "/health") == (200, {"id": "m2", "status": "up"})
    finally:
        cache.unlink()
        moved.rename(cache)
    lab.wait_status(lab.a2, "UP", 20)


def test_runtime_api_disable_enable_server(lab):
    lab.m1.start()
    lab.m2.start()
    wait_master(lab.m1, lab.health)
    wait_master(lab.m2, lab.health)
    assert lab.generate("--out", str(lab.cfg)).returncode == 0
    lab.start_haproxy()
    lab.wait_status(lab.a1, "UP", 20)

    def cmd(line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(lab.stats))
            s.sendall(line.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    cmd(f"disable server salt_publish_masters/{lab.a1}")
    assert lab.status(lab.a1, "salt_publish_masters") == "MAINT"
    assert lab.status(lab.a1, "salt_request_masters") == "UP"
    cmd(f"enable server salt_publish_masters/{lab.a1}")
    wait_for(lambda: lab.status(lab.a1, "salt_publish_masters") == "UP", 15, "enabled server UP")


def test_generator_refuses_bad_input_and_keeps_the_old_file(env, tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    # Wildcard interface without --self-address: exit 1 naming the fix.
    (conf / "master").write_text(yaml_dump({"interface": "0.0.0.0", "health_port": 4507,
                                            "cluster_id": "c", "cluster_peers": ["10.0.0.2"]}))
    r = subprocess.run([str(GEN), "-c", str(conf), "--no-check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "--self-address" in r.stderr, r
    # With it: written to stdout, both masters in each backend.
    r = subprocess.run([str(GEN), "-c", str(conf), "--self-address", "10.0.0.1", "--no-check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("check port 4507") == 4
    # A check that fails (here a fake haproxy that exits 1): exit 3, --out untouched.
    out = tmp_path / "haproxy.cfg"
    out.write_text("old\n")
    fake = tmp_path / "fake-haproxy"
    fake.write_text("#!/bin/sh\necho '[ALERT] fake: config rejected'\nexit 1\n")
    fake.chmod(0o755)
    r = subprocess.run([str(GEN), "-c", str(conf), "--self-address", "10.0.0.1", "--out", str(out),
                        "--haproxy", str(fake)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r
    assert "config rejected" in r.stderr
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "fake-haproxy", "haproxy.cfg"]
    # Real haproxy accepts the real output and --out is replaced.
    r = subprocess.run([str(GEN), "-c", str(conf), "--self-address", "10.0.0.1", "--out", str(out),
                        "--stats-socket", str(tmp_path / "admin.sock")],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    assert "backend salt_request_masters" in out.read_text()
