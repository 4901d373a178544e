"""Join refusals that need crafted messages, on loopback against a running three-master
cluster (clusterlab.LocalCluster). sylvite-join-probe (tests/tools/join_probe.cpp, built
from the product libraries) sends what a real joiner never would, or plays a fake member:
  - a cluster/discover with a tampered self-signature: refused;
  - a cluster/join with a tampered signature (after a valid discover): refused, no
    peers/<id>.pub;
  - a valid discover + join (the probe becomes a member), then the same join body again:
    the replay is refused (token consumed); salt-run cluster.remove drops the probe;
  - a fake member answering discover as cm2 and join as cm3 (both keys and the cluster
    key taken from the cluster's pki dirs): a real joiner refuses the join-reply from a
    peer it did not ask, exits non-zero and leaves its cluster_pki_dir empty.
Every refusal is logged with its reason on the refusing side.
"""
import hashlib
import json
import re
import subprocess
import time

import pytest

from clusterlab import LocalCluster, master_logs as logs, peer_states as peers_of
from sylvite_harness import BIN, Proc, free_port, gen_key_pair, wait_for

SECRET = "join-s3cret"
CLUSTER_ID = "sylvite-test"
PROBE = BIN / "sylvite-join-probe"

pytestmark = pytest.mark.skipif(
    not PROBE.exists(),
    reason=f"{PROBE} is not built (test tool; build with SYLVITE_TESTS=ON, target sylvite-join-probe)")


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, cluster_secret=SECRET, cluster_id=CLUSTER_ID, start=False)
    c.start_masters()
    yield c
    c.close()


def probe(env, cluster, mode, probe_id, via="cm1", secret=SECRET) -> list[str]:
    """Run a client mode of the probe against `via`'s pool port; its output lines."""
    pem, _ = gen_key_pair(env.root / "probe" / probe_id, "master")
    r = subprocess.run([str(PROBE), mode, "--port", str(cluster.pool_ports[via]), "--id", probe_id,
                        "--cluster-id", CLUSTER_ID, "--key", str(pem), "--secret", secret],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def wait_logged(m, pattern, what):
    return wait_for(lambda: re.search(pattern, logs(m)), 10, what)


def test_crafted_discover_and_join_refused(env, cluster):
    t0 = time.monotonic()
    cm1 = cluster.masters[0]
    peers_dir = cluster.shared / "pki" / "peers"

    # 4. a discover whose self-signature is tampered
    out = probe(env, cluster, "tamper-discover", "probe-d")
    assert out == ["discover: error bad signature"], out
    wait_logged(cm1, r"cluster join from 127\.0\.0\.1:\d+ refused: bad signature", "cm1 to log the bad discover")
    assert not (peers_dir / "probe-d.pub").exists()

    # 1. a join with a tampered signature (valid discover, token, secret)
    out = probe(env, cluster, "tamper-join", "probe-t")
    assert out == ["discover: ok cluster/discover-reply", "join: error bad signature"], out
    wait_logged(cm1, r"cluster join from probe-t \(127\.0\.0\.1:\d+\) refused: bad signature",
                "cm1 to log the tampered join")
    assert not (peers_dir / "probe-t.pub").exists()

    # 2. a valid join, then the same join again
    out = probe(env, cluster, "replay-join", "probe-r")
    assert out == ["discover: ok cluster/discover-reply", "join: ok cluster/join-reply",
                   "replay: error no pending join (unknown, used or expired token)"], out
    wait_logged(cm1, r"cluster join from probe-r \(127\.0\.0\.1:\d+\) refused: no pending join \(unknown, used or "
                r"expired token\)", "cm1 to log the replayed join")
    assert re.search(r"master probe-r \(127\.0\.0\.1:\d+\) joined the cluster through this master", logs(cm1))
    pub = (env.root / "probe" / "probe-r" / "master.pub").read_text()
    assert (peers_dir / "probe-r.pub").read_text().strip() == pub.strip()
    # the probe is a member now: remove it again
    r = cluster.masters[1].salt_run("cluster.remove", "probe-r", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["removed"] == "probe-r", r.stdout
    assert not (peers_dir / "probe-r.pub").exists()
    for m in cluster.masters:
        wait_for(lambda: peers_of(m).get("probe-r") in (None, "removed"), 15, f"{m.name} to drop probe-r")
    assert sorted(p.name for p in peers_dir.iterdir()) == ["cm1.pub", "cm2.pub", "cm3.pub"]
    print(f"\ncrafted discover/join refusals: {time.monotonic() - t0:.2f} s")


def test_join_reply_from_a_peer_not_asked_refused(env, cluster):
    t0 = time.monotonic()
    cm2, cm3 = cluster.masters[1], cluster.masters[2]
    fake = Proc([str(PROBE), "fake-peer", "--listen-port", "0", "--cluster-id", CLUSTER_ID,
                 "--as", "cm2", "--as-key", str(cm2.pki_dir / "master.pem"),
                 "--reply-as", "cm3", "--reply-key", str(cm3.pki_dir / "master.pem"),
                 "--cluster-pki", str(cluster.shared / "pki"), "--secret", SECRET], env.root / "fake-peer.out")
    fake_log = env.root / "fake-peer.out"
    try:
        port = int(wait_for(lambda: re.search(r"listening on (\d+)", fake_log.read_text()), 10,
                            "the fake peer to listen").group(1))
        fp = hashlib.sha256((cluster.shared / "pki" / "cluster.pub").read_bytes()).hexdigest()
        name = "cj1"
        j = env.master(name, root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{port}"],
                       cluster_pool_port=free_port(), cluster_pki_dir=str(env.root / name / "cpki"),
                       cachedir=str(cluster.shared / "cache"), cluster_secret=SECRET, cluster_pub_fingerprint=fp,
                       file_roots={"base": [str(cluster.shared / "srv" / "salt")]},
                       pillar_roots={"base": [str(cluster.shared / "srv" / "pillar")]})
        j.start()
        wait_for(lambda: not j.proc.alive(), 30, "the joiner to give up")
        assert j.proc.p.returncode != 0
        # the fake peer got as far as the join-reply (the refusal is the joiner's)
        text = fake_log.read_text()
        assert "discover from cj1: discover-reply as cm2" in text, text
        assert "join from cj1: join-reply as cm3" in text, text
        reason = f"cluster join refused: join via 127.0.0.1:{port} (cm2): join-reply from a peer that was not asked"
        assert reason in logs(j), logs(j)
        cpki = j.root / "cpki"
        left = [p for p in cpki.rglob("*") if p.is_file()] if cpki.exists() else []
        assert left == [], left
        assert not (cluster.shared / "pki" / "peers" / "cj1.pub").exists()
    finally:
        fake.kill()
    print(f"\njoin-reply from a peer not asked: {time.monotonic() - t0:.2f} s")
