"""Issue 6, local cluster: three sylvite masters sharing one directory (cluster_pki_dir,
cachedir, file_roots, pillar_roots) behind a real HAProxy, minions that know only the
load balancer. A job from any master reaches every minion and every return reaches the
publisher; lookup_jid on any master shows them all; publish connections spread over the
masters; salt-key on one master acts for all; a master killed and restarted serves again;
two masters starting together on an empty share create one cluster key pair.
"""
import json
import re
import time

import pytest

from clusterlab import LocalCluster
from sylvite_harness import wait_for

MINIONS = ["cx1", "cx2", "cx3"]


@pytest.fixture
def cluster(env):
    c = LocalCluster(env)
    yield c
    c.close()


def start_minions(cluster, names=MINIONS, **opts):
    out = [cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1, **opts).start() for n in names]
    m = cluster.masters[0]
    wait_for(lambda: set(names) <= set(m.keys().get("minions_pre", [])), 60, "minion keys pending")
    r = m.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def ping(master, names=MINIONS, t=5):
    out = master.salt_json("cx*", "test.ping", "-t", str(t))
    return {k: v for k, v in out.items() if k in names}


def wait_ping(master, names=MINIONS, timeout=90):
    return wait_for(lambda: ping(master, names) == {n: True for n in names}, timeout,
                    f"{names} to answer test.ping from {master.name}", interval=0.5)


def test_jobs_from_every_master_reach_every_minion(env, cluster):
    start_minions(cluster)
    for m in cluster.masters:
        wait_ping(m)
    # every master sees the same accepted keys (one shared cluster_pki_dir)
    for m in cluster.masters:
        assert sorted(m.keys()["minions"]) == MINIONS
    # the minions trust the cluster key, not any master's own key
    cluster_pub = (cluster.shared / "pki" / "cluster.pub").read_text().strip()
    for n in MINIONS:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == cluster_pub
    jids = {}
    for m in cluster.masters:
        r = m.salt("--out", "json", "--static", "--show-jid", "cx*", "test.echo", f"from-{m.name}")
        assert r.returncode == 0, r.stdout + r.stderr
        jids[m.name] = re.search(r"\b(\d{20})\b", r.stdout).group(1)
        out = json.loads(r.stdout[r.stdout.index("{"):])
        assert out == {n: f"from-{m.name}" for n in MINIONS}, out
    # lookup_jid on every master shows every return of every master's job
    for m in cluster.masters:
        for origin, jid in jids.items():
            r = m.salt_run("jobs.lookup_jid", jid, "--out", "json")
            assert r.returncode == 0, r.stdout + r.stderr
            assert json.loads(r.stdout) == {n: f"from-{origin}" for n in MINIONS}, (m.name, origin, r.stdout)
    # the publish connections are spread over the masters by the load balancer
    pub = cluster.server_status("salt_publish")
    conns = {name: int(row["scur"]) for name, row in pub.items()}
    assert sum(conns.values()) == len(MINIONS), conns
    assert sum(1 for v in conns.values() if v > 0) >= 2, conns
    # operators can see the peer links
    for m in cluster.masters:
        r = m.salt_run("cluster.peers", "--out", "json")
        assert r.returncode == 0, r.stdout + r.stderr
        peers = json.loads(r.stdout)
        ups = [p for p in peers["peers"] if p["state"] == "up"]
        assert len(ups) == 2, peers


def test_salt_key_on_one_master_acts_for_all(env, cluster):
    start_minions(cluster)
    m1, m2, m3 = cluster.masters
    for m in cluster.masters:
        wait_ping(m)
    r = m1.salt_key("-d", "cx3", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    for m in cluster.masters:
        assert "cx3" not in m.keys()["minions"]
    # refused by all: no master gets an answer from cx3, the others keep working
    for m in cluster.masters:
        out = ping(m, MINIONS, t=3)
        assert out.get("cx3") is not True, (m.name, out)
    wait_for(lambda: "cx3" in m2.keys().get("minions_pre", []), 60, "cx3 to ask again (pending)")
    for m in cluster.masters:
        wait_ping(m, ["cx1", "cx2"])
    r = m2.salt_key("-a", "cx3", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    for m in cluster.masters:
        wait_ping(m)


def test_master_killed_then_restarted(env, cluster):
    start_minions(cluster)
    m1, m2, m3 = cluster.masters
    for m in cluster.masters:
        wait_ping(m)
    m2.kill()
    wait_for(lambda: cluster.server_status("salt_publish")["cm2"]["status"].startswith("DOWN"), 30,
             "haproxy to mark cm2 down")
    # its minions reconnect through the load balancer to the others
    for m in (m1, m3):
        wait_ping(m, timeout=120)
    m2.start().wait_ready()
    wait_for(lambda: cluster.server_status("salt_publish")["cm2"]["status"] == "UP", 30, "cm2 up again")
    wait_ping(m2, timeout=120)
    for m in (m1, m3):
        wait_ping(m)


def test_two_masters_on_an_empty_share_make_one_cluster_key(env):
    c = LocalCluster(env, n=2, start=False)
    try:
        for m in c.masters:
            m.start()
        for m in c.masters:
            m.wait_ready()
        pki = c.shared / "pki"
        assert sorted(p.name for p in pki.glob("cluster.*")) == ["cluster.pem", "cluster.pub"]
        assert sorted(p.name for p in (pki / "peers").iterdir()) == ["cm1.pub", "cm2.pub"]
        for m in c.masters:
            assert (m.pki_dir / "master.pub").read_text() == (pki / "peers" / f"{m.name}.pub").read_text()
        c.start_lb()
        start_minions(c, ["cx1"])
        for m in c.masters:
            wait_ping(m, ["cx1"])
    finally:
        c.close()


def test_peer_key_mismatch_refuses_to_start(env):
    c = LocalCluster(env, n=1, start=False)
    m = c.masters[0]
    (c.shared / "pki" / "peers").mkdir(parents=True)
    (c.shared / "pki" / "peers" / "cm1.pub").write_text("-----BEGIN PUBLIC KEY-----\nnot this one\n")
    m.start()
    wait_for(lambda: not m.proc.alive(), 30, "the master to refuse to start")
    assert m.proc.p.returncode != 0
    assert "holds a different key" in m.log_text() + (m.root / "master.log").read_text(errors="replace")
