"""Issue 7, on loopback: a fourth master joins a running three-master cluster through the
discover/join handshake gated by cluster_secret (its own local cluster_pki_dir, the cluster
key pinned by cluster_pub_fingerprint, the shared cachedir); refusals (wrong secret, empty
secret, wrong fingerprint, a "../" id, a peer that is not a member) are logged with the
reason on the refusing side and leave no file in the joiner's cluster_pki_dir; salt-run
cluster.remove drops it everywhere and, after cluster_secret is rotated, its re-join with
the old secret is refused.
"""
import hashlib
import json
import os
import re
import time

import pytest

from clusterlab import LocalCluster, master_logs as logs, peer_states as peers_of
from sylvite_harness import free_port, wait_for

SECRET = "join-s3cret"


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, cluster_secret=SECRET, start=False)
    c.start_masters()
    yield c
    c.close()


def fingerprint(cluster) -> str:
    return hashlib.sha256((cluster.shared / "pki" / "cluster.pub").read_bytes()).hexdigest()


def make_joiner(env, cluster, name="cm4", secret=SECRET, fp=None, via="cm1", **opts):
    port = free_port()
    m = env.master(name, root_dir="/", cluster_id="sylvite-test",
                   cluster_peers=[f"127.0.0.1:{cluster.pool_ports[via]}"], cluster_pool_port=port,
                   cluster_pki_dir=str(env.root / name / "cpki"), cachedir=str(cluster.shared / "cache"),
                   cluster_secret=secret, cluster_pub_fingerprint=fp if fp is not None else fingerprint(cluster),
                   file_roots={"base": [str(cluster.shared / "srv" / "salt")]},
                   pillar_roots={"base": [str(cluster.shared / "srv" / "pillar")]}, **opts)
    m.pool_port = port
    return m


def refused(cluster, joiner, reason, on="cm1"):
    joiner.start()
    wait_for(lambda: not joiner.proc.alive(), 30, f"{joiner.name} to give up")
    assert joiner.proc.p.returncode != 0
    acceptor = cluster.masters[cluster.names.index(on)]
    if reason is not None:
        wait_for(lambda: re.search(r"cluster join from .* refused: " + re.escape(reason), logs(acceptor)), 10,
                 f"{on} to log the refusal '{reason}'")
    cpki = joiner.root / "cpki"
    left = [p for p in cpki.rglob("*") if p.is_file()] if cpki.exists() else []
    assert left == [], left
    return logs(joiner)


def test_join_then_remove_then_rejoin_refused(env, cluster):
    j = make_joiner(env, cluster)
    t0 = time.monotonic()
    j.start()
    j.wait_ready()
    took = time.monotonic() - t0
    m = re.search(r"cluster join took (\d+) ms", logs(j))
    assert m, logs(j)
    print(f"\njoin handshake: {m.group(1)} ms (process start to ready: {took:.2f} s)")
    assert int(m.group(1)) < 1000
    cpki = j.root / "cpki"
    assert (cpki / "cluster.pub").read_text() == (cluster.shared / "pki" / "cluster.pub").read_text()
    assert (cpki / ".aes").read_text().strip() == (cluster.shared / "pki" / ".aes").read_text().strip()
    assert sorted(p.name for p in (cpki / "peers").iterdir()) == ["cm1.pub", "cm2.pub", "cm3.pub", "cm4.pub"]
    assert (cluster.shared / "pki" / "peers" / "cm4.pub").read_text() == (j.pki_dir / "master.pub").read_text()
    # every master links to the new one, and it to every master
    for m_ in cluster.masters:
        wait_for(lambda: peers_of(m_).get("cm4") == "up", 30, f"{m_.name} to link to cm4")
    wait_for(lambda: all(peers_of(j).get(n) == "up" for n in cluster.names), 30, "cm4 to link to every master")
    # a second start is a plain member start (no join)
    # leave: salt-run cluster.remove on another master
    r = cluster.masters[1].salt_run("cluster.remove", "cm4", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["removed"] == "cm4" and out["aes_rotated"] is True, out
    assert not (cluster.shared / "pki" / "peers" / "cm4.pub").exists()
    for m_ in cluster.masters:
        wait_for(lambda: peers_of(m_).get("cm4") in (None, "removed"), 15, f"{m_.name} to drop cm4")
    assert (cluster.shared / "pki" / ".aes").read_text().strip() != (cpki / ".aes").read_text().strip()
    j.stop()
    # rotate cluster_secret on the members (edit + restart), then the old secret is refused
    for m_ in cluster.masters:
        m_.opts["cluster_secret"] = "rotated-secret"
        m_.write_config()
        m_.stop()
    cluster.start_masters()
    j2 = make_joiner(env, cluster, name="cm5", secret=SECRET)
    refused(cluster, j2, "wrong cluster_secret")


def test_refusals_leave_nothing_behind(env, cluster):
    refused(cluster, make_joiner(env, cluster, name="cw1", secret="not-the-secret"), "wrong cluster_secret")
    out = refused(cluster, make_joiner(env, cluster, name="cw2", secret=""),
                  "empty or unset cluster_secret")
    assert "empty or unset cluster_secret" in out
    out = refused(cluster, make_joiner(env, cluster, name="cw3", fp="00" * 32), None)
    assert "the cluster key does not match cluster_pub_fingerprint" in out
    # a peer id that would escape peers/: refused by the acceptor before any file is named
    bad = make_joiner(env, cluster, name="cw4")
    bad.opts["id"] = "../evil"
    bad.write_config()
    bad.start()
    wait_for(lambda: not bad.proc.alive(), 30, "the ../ joiner to give up")
    assert not list((cluster.shared / "pki").glob("evil*"))
    assert not (cluster.shared / "pki" / "peers" / "../evil.pub").exists()
    # a master that is not a member (its own peers/<id>.pub is gone) cannot accept a join
    (cluster.shared / "pki" / "peers" / "cm3.pub").unlink()
    refused(cluster, make_joiner(env, cluster, name="cw5", via="cm3"), "not a member", on="cm3")


def test_joiner_with_a_local_cluster_pki_dir_mirrors_keys_and_aes(env, cluster):
    """A master that joins with its own cluster_pki_dir (not the share) gets the minion
    keys and follows AES rotations over the bus: its jobs reach every minion."""
    cluster.start_lb()
    names = ["lc1", "lc2", "lc3"]
    for n in names:
        cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
    cm1 = cluster.masters[0]
    wait_for(lambda: set(names) <= set(cm1.keys().get("minions_pre", [])), 60, "keys pending")
    assert cm1.salt_key("-A", "-y").returncode == 0
    wait_for(lambda: cm1.salt_json("lc*", "test.ping", "-t", "5") == {n: True for n in names}, 60, "minions up")
    j = make_joiner(env, cluster)
    j.start()
    j.wait_ready()
    cpki = j.root / "cpki"
    assert (cpki / ".sylvite-local-copy").exists()
    # the accepted keys arrive over the bus (key-sync at link-up)
    wait_for(lambda: {p.name for p in (cpki / "minions").iterdir()} >= set(names), 30, "keys copied to cm4")
    # logged once the whole snapshot is written, so a moment after the files appear
    wait_for(lambda: "minion key(s) copied from cluster peer" in logs(j), 10, "cm4 to log the key copy")
    # its jobs reach every minion, connected to the other masters
    wait_for(lambda: j.salt_json("lc*", "test.ping", "-t", "5") == {n: True for n in names}, 60,
             "cm4's job to reach every minion")
    # a key accepted later on another master follows (key event with the key)
    cluster.minion("lc4", acceptance_wait_time=1, random_reauth_delay=1).start()
    wait_for(lambda: "lc4" in cm1.keys().get("minions_pre", []), 60, "lc4 pending")
    assert cm1.salt_key("-a", "lc4", "-y").returncode == 0
    wait_for(lambda: (cpki / "minions" / "lc4").exists(), 30, "lc4's key on cm4")
    # AES rotation by a member on the share (drop file) reaches the local copy
    shared_aes = cluster.shared / "pki" / ".aes"
    old = shared_aes.read_text().strip()
    (cluster.shared / "cache" / ".dfn").touch()
    wait_for(lambda: shared_aes.read_text().strip() != old, 30, "the shared AES key to rotate")
    rotated_at = time.monotonic()
    wait_for(lambda: (cpki / ".aes").read_text().strip() == shared_aes.read_text().strip(), 30,
             "cm4 to adopt the rotated key")
    # One drop file, one rotation: the three masters on the share tick together (every
    # 5 s); the first to take .aes.lock rotates and removes the file, the others adopt.
    time.sleep(max(0.0, rotated_at + 6 - time.monotonic()))
    rotations = sum(1 for m in cluster.masters for line in (m.root / "master.log").read_text(errors="replace").splitlines()
                    if "Rotating cluster AES key (drop file)" in line and not line.endswith("adopted"))
    assert rotations == 1, rotations
    assert not (cluster.shared / "cache" / ".dfn").exists()
    assert (cpki / ".aes").read_text().strip() == shared_aes.read_text().strip()
    assert (cpki / ".aes.gen").read_text().strip() == (cluster.shared / "pki" / ".aes.gen").read_text().strip()
    # a rotation cm4 needs (a key deleted on it) is done by a member on the share
    old = shared_aes.read_text().strip()
    assert j.salt_key("-d", "lc4", "-y").returncode == 0
    wait_for(lambda: shared_aes.read_text().strip() != old, 30, "the rotation asked by cm4")
    wait_for(lambda: (cpki / ".aes").read_text().strip() == shared_aes.read_text().strip(), 30, "cm4 on the new key")
    wait_for(lambda: not (cluster.shared / "pki" / "minions" / "lc4").exists(), 15, "lc4 deleted on the share too")
    wait_for(lambda: j.salt_json("lc*", "test.ping", "-t", "5") == {n: True for n in names}, 90,
             "every minion again after the rotation")


def local_copy_with_minions(env, cluster, names):
    """The load balancer up, minions `names` accepted on the share (through cm1), then cm4
    joined with a local cluster_pki_dir holding copies of their keys: (cm1, cm4, its
    cluster_pki_dir)."""
    cluster.start_lb()
    for n in names:
        cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
    cm1 = cluster.masters[0]
    wait_for(lambda: set(names) <= set(cm1.keys().get("minions_pre", [])), 60, "keys pending")
    assert cm1.salt_key("-A", "-y").returncode == 0
    j = make_joiner(env, cluster)
    j.start()
    j.wait_ready()
    cpki = j.root / "cpki"
    wait_for(lambda: {p.name for p in (cpki / "minions").iterdir()} >= set(names), 30, "keys copied to cm4")
    return cm1, j, cpki


def test_local_copy_settles_missed_deletes_and_tells_the_share_its_accepts(env, cluster):
    """A minion key pending on a local-copy master is pending on the share too; a local
    copy that was down while a key was deleted on the share removes its copy when it is
    back (a complete key snapshot from a member on the share settles it); a key it
    auto-accepts itself reaches the share, so a job from a member reaches that minion."""
    cm1, j, cpki = local_copy_with_minions(env, cluster, ["lr1", "lr2"])
    # A minion signing in to cm4 alone goes pending there and on the share: salt-key on
    # cm1 lists it and accepts it, and the accept reaches cm4 with the key.
    lp = env.minion("lp1", j, acceptance_wait_time=1, random_reauth_delay=1)
    lp.start()
    wait_for(lambda: "lp1" in cm1.keys().get("minions_pre", []), 60, "lp1 pending on the share")
    assert (cluster.shared / "pki" / "minions_pre" / "lp1").read_text() == (cpki / "minions_pre" / "lp1").read_text()
    assert cm1.salt_key("-a", "lp1", "-y").returncode == 0
    wait_for(lambda: (cpki / "minions" / "lp1").exists() and not (cpki / "minions_pre" / "lp1").exists(), 30,
             "lp1 accepted on cm4")
    wait_for(lambda: j.salt_json("lp1", "test.ping", "-t", "5") == {"lp1": True}, 60, "lp1 to answer cm4")
    j.stop()
    j.opts["auto_accept"] = True
    j.write_config()
    # Deleted on the share while cm4 is down, then cm1 restarted: the key event cm1 queued
    # for cm4 is gone with it, so cm4 never hears of the delete.
    assert cm1.salt_key("-d", "lr2", "-y").returncode == 0
    wait_for(lambda: not (cluster.shared / "pki" / "minions" / "lr2").exists(), 15, "lr2 deleted on the share")
    cm1.stop()
    cm1.start()
    cm1.wait_ready()
    assert (cpki / "minions" / "lr2").exists()
    # cm4 keeps a key file younger than 15 s (salt-key there writes it before the daemon
    # hears of it); this copy was made before the stop: age it past that.
    hour_ago = time.time() - 3600
    os.utime(cpki / "minions" / "lr2", (hour_ago, hour_ago))
    j.start()
    j.wait_ready()
    wait_for(lambda: not (cpki / "minions" / "lr2").exists(), 30, "cm4 to drop the key deleted on the share")
    assert (cpki / "minions" / "lr1").exists()
    assert re.search(r"accepted minion key\(s\) removed: not on the cluster's share .*lr2", logs(j)), logs(j)
    assert "key event delete" not in logs(j)  # settled by the snapshot, not by a late event
    # A minion signing in to cm4 alone: auto-accepted there, and the share learns the key.
    la = env.minion("la1", j, acceptance_wait_time=1, random_reauth_delay=1)
    la.start()
    wait_for(lambda: (cpki / "minions" / "la1").exists(), 60, "cm4 to auto-accept la1")
    wait_for(lambda: (cluster.shared / "pki" / "minions" / "la1").exists(), 30, "la1's key on the share")
    assert (cluster.shared / "pki" / "minions" / "la1").read_text() == (cpki / "minions" / "la1").read_text()
    # cm1 publishes, cm4 forwards to the minion connected to it, the return comes back.
    wait_for(lambda: cm1.salt_json("la1", "test.ping", "-t", "5") == {"la1": True}, 60,
             "cm1's job to reach la1 through cm4")


def test_local_copy_keeps_salt_key_changes_made_while_it_is_down(env, cluster):
    """salt-key on a local-copy master that is not running: the accept and the delete are
    kept in cluster_pki_dir/.sylvite-unsettled-keys, and the master tells the share when it
    is back. Without that file its first answer from the share would remove the accept and
    bring the deleted key back."""
    cm1, j, cpki = local_copy_with_minions(env, cluster, ["kd1", "kd2"])
    share = cluster.shared / "pki"
    kp = env.minion("kp1", j, acceptance_wait_time=1, random_reauth_delay=1)
    kp.start()
    wait_for(lambda: (share / "minions_pre" / "kp1").exists(), 60, "kp1 pending on cm4 and the share")
    j.stop()
    aes_before = (share / ".aes").read_text()
    assert j.salt_key("-a", "kp1", "-y").returncode == 0
    assert j.salt_key("-d", "kd1", "-y").returncode == 0
    kept = json.loads((cpki / ".sylvite-unsettled-keys").read_text())
    assert kept["accepted"] == ["kp1"] and kept["revoked"] == {"kd1": {"act": "delete", "rotate": True}}, kept
    # Older than the 15 s grace a fresh key file gets: only the kept record saves the accept.
    hour_ago = time.time() - 3600
    os.utime(cpki / "minions" / "kp1", (hour_ago, hour_ago))
    j.start()
    j.wait_ready()
    wait_for(lambda: (share / "minions" / "kp1").exists() and not (share / "minions_pre" / "kp1").exists(), 30,
             "the accept made on the stopped cm4 to reach the share")
    wait_for(lambda: not (share / "minions" / "kd1").exists(), 30, "the delete made on the stopped cm4 to reach the share")
    assert (share / "minions" / "kp1").read_text() == (cpki / "minions" / "kp1").read_text()
    wait_for(lambda: (share / ".aes").read_text() != aes_before, 30, "the share to rotate for the delete")
    assert (cpki / "minions" / "kp1").exists() and not (cpki / "minions" / "kd1").exists()
    assert re.search(r"1 accept\(s\), 1 reject\(s\)/delete\(s\) and 0 pending key\(s\) made here are not yet confirmed",
                     logs(j)), logs(j)
    assert "kd1" not in cm1.keys().get("minions", [])
    wait_for(lambda: j.salt_json("kp1", "test.ping", "-t", "5") == {"kp1": True}, 60, "kp1 to answer cm4")
