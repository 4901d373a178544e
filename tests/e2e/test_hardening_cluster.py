"""Issue 14, items 5 (cluster half) and 6, on loopback against real masters.

5. A discover flood on cluster_pool_port (valid, self-signed discovers from several source
   addresses, 127.0.0.2-5) is rate-limited per source before any RSA work, never evicts a
   real joiner's pending token, and does not slow the publish/return relay: while it runs,
   `salt test.ping` on cm1 reaches a minion connected to cm2 (publish and return both
   cross the bus) and a fourth master joins through cm1.
6. Deleting peers/<id>.pub is enough to take a master out: the members drop it and rotate
   the cluster AES key once; the removed master writing its peers/<id>.pub back is ignored;
   a removed master that still holds cluster.pem and answers a discover with a valid
   endorsement is not joined through by a joiner that can read the shared directory, and
   never receives the secret.
"""
import hashlib
import json
import re
import socket
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path

import msgpack
import pytest

from clusterlab import LocalCluster, master_logs as logs, peer_states
from sylvite_harness import BIN, Proc, free_port, gen_key_pair, wait_for

SECRET = "hardening-cluster-s3cret"
CLUSTER_ID = "sylvite-test"
PROBE = BIN / "sylvite-join-probe"

pytestmark = pytest.mark.skipif(
    not PROBE.exists(),
    reason=f"{PROBE} is not built (test tool; build with SYLVITE_TESTS=ON, target sylvite-join-probe)")


def peers_of(m) -> dict:
    """peer_states, {} while the master's CLI socket does not answer yet (busy machine)."""
    try:
        return peer_states(m)
    except AssertionError:
        return {}


def fingerprint(cluster) -> str:
    return hashlib.sha256((cluster.shared / "pki" / "cluster.pub").read_bytes()).hexdigest()


def rss_kb(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    get = lambda k: int(re.search(rf"^{k}:\s+(\d+) kB", status, re.M).group(1))  # noqa: E731
    return get("VmRSS"), get("VmHWM")


class Flooder:
    """Sends pre-signed cluster/discover bodies as fast as the master answers, from one
    source address per thread (one connection each, reconnecting when closed)."""

    def __init__(self, port: int, bodies: list, sources: list[str]):
        self.port = port
        self.bodies = bodies
        self.sources = sources
        self.stop = threading.Event()
        self.replies: dict[str, int] = {}
        self.sent = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(s, i), daemon=True) for i, s in enumerate(sources)]

    def _count(self, key):
        with self.lock:
            self.replies[key] = self.replies.get(key, 0) + 1

    def _run(self, src: str, n: int):
        i = n
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(src, 0)) as s:
                    unpacker = msgpack.Unpacker(raw=False)
                    while not self.stop.is_set():
                        body = self.bodies[i % len(self.bodies)]
                        i += len(self.sources)
                        s.sendall(msgpack.packb({"head": {"mid": uuid.uuid4().hex}, "body": body}, use_bin_type=True))
                        with self.lock:
                            self.sent += 1
                        frame = None
                        while frame is None:
                            data = s.recv(65536)
                            if not data:
                                raise ConnectionError("closed")
                            unpacker.feed(data)
                            for f in unpacker:
                                frame = f
                                break
                        b = frame.get("body", {})
                        self._count(("error: " + b["error"]) if isinstance(b, dict) and "error" in b
                                    else "ok " + str(b.get("cmd") if isinstance(b, dict) else b))
            except (OSError, ConnectionError, ValueError):
                self._count("connection closed")
                time.sleep(0.05)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(10)


def timed_ping(master, tgt: str) -> tuple[float, dict]:
    t0 = time.monotonic()
    out = master.salt_json(tgt, "test.ping", "-t", "10")
    return time.monotonic() - t0, out


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, n=2, cluster_secret=SECRET, cluster_id=CLUSTER_ID, start=False)
    c.start_masters()
    yield c
    c.close()


def test_discover_flood_spares_relay_and_real_joiner(env, cluster):
    cm1, cm2 = cluster.masters
    # a minion on cm2 only: a job from cm1 is published over the bus and returns over it
    mn = env.minion("fl1", cm2, acceptance_wait_time=1)
    mn.start()
    wait_for(lambda: "fl1" in cm1.keys().get("minions_pre", []), 60, "fl1's key pending")
    assert cm1.salt_key("-a", "fl1", "-y").returncode == 0
    wait_for(lambda: cm1.salt_json("fl1", "test.ping", "-t", "5") == {"fl1": True}, 60, "fl1 via cm2")
    before = [timed_ping(cm1, "fl1") for _ in range(4)]
    assert all(o == {"fl1": True} for _, o in before), before

    # valid discovers (self-signed, distinct ids and nonces), each a would-be token
    key, _ = gen_key_pair(env.root / "flood", "flood")
    dfile = env.root / "flood" / "discovers.mpk"
    r = subprocess.run([str(PROBE), "make-discovers", "--id", "flood", "--cluster-id", CLUSTER_ID, "--key", str(key),
                        "--count", "300", "--out", str(dfile)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    bodies = msgpack.unpackb(dfile.read_bytes(), raw=False)
    rss0 = rss_kb(cm1.proc.pid)

    port = cluster.pool_ports["cm1"]
    sources = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
    joiner_port = free_port()
    j = env.master("cm4", root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{port}"],
                   cluster_pool_port=joiner_port, cluster_pki_dir=str(env.root / "cm4" / "cpki"),
                   cachedir=str(cluster.shared / "cache"), cluster_secret=SECRET,
                   cluster_pub_fingerprint=fingerprint(cluster),
                   file_roots={"base": [str(cluster.shared / "srv" / "salt")]},
                   pillar_roots={"base": [str(cluster.shared / "srv" / "pillar")]})
    t_flood = time.monotonic()
    with Flooder(port, bodies, sources) as fl:
        wait_for(lambda: fl.sent > 500, 30, "the flood to get going")
        during = [timed_ping(cm1, "fl1") for _ in range(3)]
        j.start()  # a real joiner (source 127.0.0.1) during the flood
        j.wait_ready(60)
        # keep flooding (and timing the relay) for 8 s in all: past the per-source burst,
        # so the refill rate and the pending caps are what limits the flood
        while time.monotonic() - t_flood < 8:
            during.append(timed_ping(cm1, "fl1"))
        sent = fl.sent
    flood_s = time.monotonic() - t_flood
    rss1 = rss_kb(cm1.proc.pid)
    replies = dict(fl.replies)
    b_med, d_med = statistics.median(t for t, _ in before), statistics.median(t for t, _ in during)
    print(f"\ndiscover flood: {sent} requests in {flood_s:.1f} s from {len(sources)} addresses; replies {replies}")
    print(f"relay (salt test.ping cm1 -> bus -> cm2 -> minion -> cm2 -> bus -> cm1): median {b_med * 1000:.0f} ms "
          f"before, {d_med * 1000:.0f} ms during (max {max(t for t, _ in during) * 1000:.0f} ms); "
          f"cm1 VmRSS {rss0[0]} -> {rss1[0]} kB, VmHWM {rss1[1]} kB")

    # relay unaffected: every job during the flood came back, in about the time it took before
    assert all(o == {"fl1": True} for _, o in during), during
    assert d_med < b_med + 2.0, (before, during)
    # the real joiner joined through cm1 during the flood
    assert re.search(r"joined cluster \S+ through cm1", logs(j)), logs(j)
    assert (cluster.shared / "pki" / "peers" / "cm4.pub").exists()
    # the flood got a handful of tokens (per-source cap, tokens live 30 s), the rest refused
    ok = replies.get("ok cluster/discover-reply", 0)
    assert ok <= 4 * len(sources) + 4, replies
    assert replies.get("error: too many join requests from this address; retry later", 0) > sent // 2, replies
    # refusals logged rate-limited (one line per 10 s, with a count), not once per request
    lines = re.findall(r"cluster pool port: \d+ join request\(s\) refused", logs(cm1))
    assert 1 <= len(lines) <= flood_s / 10 + 3, len(lines)
    assert cm1.proc.alive() and cm2.proc.alive()
    assert rss1[0] - rss0[0] < 50 * 1024, (rss0, rss1)


def test_deleted_peer_file_removes_rotates_and_stays_out(env):
    cluster = LocalCluster(env, n=3, cluster_secret=SECRET, cluster_id=CLUSTER_ID, start=False)
    cluster.start_masters()
    cm1, cm2, cm3 = cluster.masters
    pki = cluster.shared / "pki"
    for m in (cm1, cm2):
        wait_for(lambda: peers_of(m).get("cm3") == "up", 30, f"{m.name} linked to cm3")
    old_aes = (pki / ".aes").read_text().strip()
    cm3_pub = (pki / "peers" / "cm3.pub").read_text()

    # the operator deletes the file (no salt-run cluster.remove): members drop cm3 and the
    # AES key is rotated, once
    (pki / "peers" / "cm3.pub").unlink()
    for m in (cm1, cm2):
        wait_for(lambda: peers_of(m).get("cm3") in (None, "removed"), 15, f"{m.name} to drop cm3")
    wait_for(lambda: (pki / ".aes").read_text().strip() != old_aes, 15, "the cluster AES key to rotate")
    wait_for(lambda: all("peers/cm3.pub" in logs(m) for m in (cm1, cm2)), 15, "both members to see the removal")
    time.sleep(3)  # one more watcher pass on each member: a second rotation would show now
    # count in each master's log_file (stdout may repeat the lines)
    per_master = [sum("Rotating cluster AES key (cluster_pki_dir/peers/cm3.pub deleted)" in ln
                      and "another master rotated it first" not in ln
                      for ln in (m.root / "master.log").read_text(errors="replace").splitlines())
                  for m in (cm1, cm2)]
    assert sum(per_master) == 1, per_master
    new_aes = (pki / ".aes").read_text().strip()

    # the removed master (still running, still holding cluster.pem) writes its file back:
    # ignored by the members, its links are refused, no new rotation
    (pki / "peers" / "cm3.pub").write_text(cm3_pub)
    for m in (cm1, cm2):
        wait_for(lambda: "peers/cm3.pub is back after cm3 was removed: ignored" in logs(m), 15,
                 f"{m.name} to ignore cm3.pub")
    # the removed master restarts (its file is there, so it starts as a member): the
    # members' buses refuse its links
    cm3.stop()
    cm3.start()
    cm3.wait_ready()
    wait_for(lambda: re.search(r"cluster peer bus: refused 127\.0\.0\.1:\d+: no peers/cm3\.pub", logs(cm1)), 30,
             "cm1 to refuse cm3's link")
    assert peer_states(cm1).get("cm3") in (None, "removed")
    assert peer_states(cm2).get("cm3") in (None, "removed")
    assert (pki / ".aes").read_text().strip() == new_aes

    # the removed master answers a discover with a valid endorsement (it holds cluster.pem):
    # a joiner that reads the shared cluster_pki_dir, where peers/cm3.pub is gone, does not
    # join through it and sends it nothing. (A removed master that can still write the
    # share can put its file back and defeat this check: docs/security.md section 6.)
    (pki / "peers" / "cm3.pub").unlink()
    fake_port = free_port()
    fake = Proc([str(PROBE), "fake-peer", "--listen-port", str(fake_port), "--cluster-id", CLUSTER_ID,
                 "--as", "cm3", "--as-key", str(cm3.pki_dir / "master.pem"), "--reply-as", "cm3",
                 "--reply-key", str(cm3.pki_dir / "master.pem"), "--cluster-pki", str(pki), "--secret", SECRET],
                env.root / "fake-cm3.out")
    try:
        wait_for(lambda: "listening on" in (env.root / "fake-cm3.out").read_text(), 15, "the fake cm3")
        cj = env.master("cj1", root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{fake_port}"],
                        cluster_pool_port=free_port(), cluster_pki_dir=str(pki),
                        cachedir=str(cluster.shared / "cache"), cluster_secret=SECRET,
                        cluster_pub_fingerprint=fingerprint(cluster))
        cj.start()
        wait_for(lambda: not cj.proc.alive(), 30, "cj1 to give up")
        assert cj.proc.p.returncode != 0
        text = (env.root / "fake-cm3.out").read_text()
        assert "discover from cj1: discover-reply as cm3" in text, text
        assert "join from" not in text, text
        assert "cm3 answered via 127.0.0.1:" in logs(cj) and "is not a current member" in logs(cj), logs(cj)
        assert not (pki / "peers" / "cj1.pub").exists()
    finally:
        fake.kill()
        cluster.close()
