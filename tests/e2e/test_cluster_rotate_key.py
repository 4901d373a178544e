"""Issue 14 item 6: salt-run cluster.rotate_key on a loopback cluster of two masters
(clusterlab.LocalCluster, one shared cluster_pki_dir, HAProxy in front) with
master_sign_pubkey on both masters (one master_sign pair) and sylvite minions that set
verify_master_pubkey_sign and hold master_sign.pub:
  - the runner writes a new cluster.pem/cluster.pub on the share, keeps the old pair as
    cluster.pem.old/cluster.pub.old, reports old and new fingerprints and the members it
    told, and rotates the cluster AES key;
  - a third master joined with a local-copy cluster_pki_dir gets the new key sealed to its
    peers/<id>.pub and writes it into its copy;
  - both masters serve the new key (the peer logs the reload), every minion re-authenticates,
    verifies the new key's signature, replaces minion_master.pub with the new cluster.pub and
    answers test.ping from each master;
  - a fake member that still holds the OLD cluster.pem endorses a discover: a joiner that
    pins the shared cluster.pub refuses it.
"""
import hashlib
import json
import re
import shutil
import time

import pytest

from clusterlab import LocalCluster, master_logs as logs, peer_states
from sylvite_harness import BIN, Proc, copy_key_pair, free_port, gen_key_pair, wait_for

SECRET = "rotate-s3cret"
CLUSTER_ID = "sylvite-test"
PROBE = BIN / "sylvite-join-probe"
MINIONS = ["rk1", "rk2", "rk3", "rk4"]


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, n=2, cluster_id=CLUSTER_ID, cluster_secret=SECRET, master_sign_pubkey=True,
                     start=False)
    # one master_sign pair on both masters, its public half on the minions
    gen_key_pair(env.root / "signkey", "master_sign")
    for m in c.masters:
        copy_key_pair(env.root / "signkey", m.pki_dir, "master_sign")
    c.start_masters()
    c.start_lb()
    yield c
    c.close()


def fingerprint(pem: str) -> str:
    return hashlib.sha256(pem.encode()).hexdigest()


def ping(master):
    out = master.salt_json("rk*", "test.ping", "-t", "5")
    return {k: v for k, v in out.items() if k in MINIONS}


def wait_ping(master, timeout=90):
    return wait_for(lambda: ping(master) == {n: True for n in MINIONS}, timeout,
                    f"{MINIONS} to answer test.ping from {master.name}", interval=0.5)


def test_rotate_key_minions_follow_old_key_refused(env, cluster):
    t0 = time.monotonic()
    pki = cluster.shared / "pki"
    cm1, cm2 = cluster.masters
    for n in MINIONS:
        copy_key_pair(env.root / "signkey", env.root / n / "pki", "master_sign", private=False)
    minions = [cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1, verify_master_pubkey_sign=True)
               for n in MINIONS]
    for mn in minions:
        mn.start()
    wait_for(lambda: set(MINIONS) <= set(cm1.keys().get("minions_pre", [])), 60, "minion keys pending")
    r = cm1.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    for m in cluster.masters:
        wait_ping(m)
    old_pub = (pki / "cluster.pub").read_text()
    old_pem = (pki / "cluster.pem").read_text()
    for n in MINIONS:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == old_pub.strip()
    pub_conns = {name: int(row["scur"]) for name, row in cluster.server_status("salt_publish").items()}
    # a third master joins through cm1 with a local-copy cluster_pki_dir (not behind HAProxy)
    cm3 = env.master("cm3", root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{cluster.pool_ports['cm1']}"],
                     cluster_pool_port=free_port(), cluster_pki_dir=str(env.root / "cm3" / "cpki"),
                     cachedir=str(cluster.shared / "cache"), cluster_secret=SECRET,
                     cluster_pub_fingerprint=hashlib.sha256((pki / "cluster.pub").read_bytes()).hexdigest(),
                     file_roots={"base": [str(cluster.shared / "srv" / "salt")]},
                     pillar_roots={"base": [str(cluster.shared / "srv" / "pillar")]})
    cm3.start()
    cm3.wait_ready()
    cpki3 = env.root / "cm3" / "cpki"
    assert (cpki3 / ".sylvite-local-copy").exists()
    wait_for(lambda: peer_states(cm2).get("cm3") == "up", 30, "cm2's link to cm3")

    # rotate on cm2
    r = cm2.salt_run("cluster.rotate_key", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    ret = json.loads(r.stdout)
    print("\nsalt-run cluster.rotate_key:", json.dumps(ret, indent=1))
    new_pub = (pki / "cluster.pub").read_text()
    assert new_pub != old_pub
    assert (pki / "cluster.pem").read_text() != old_pem
    assert (pki / "cluster.pem.old").read_text() == old_pem
    assert (pki / "cluster.pub.old").read_text().strip() == old_pub.strip()
    assert ret["old_fingerprint"] != ret["new_fingerprint"]
    assert ret["members_told"] == ["cm1", "cm3"], ret
    assert ret["aes_rotated"] is True, ret
    assert ret["master_pubkey_signature"].startswith("re-made"), ret
    # cm1 (told over the bus) reloads the key from the share
    wait_for(lambda: re.search(r"Loaded the rotated cluster key pair \(rotated by cluster peer cm2\)", logs(cm1)), 20,
             "cm1 to load the new cluster key")

    # cm3 (local copy) gets the key sealed to its peers/cm3.pub and writes its copy
    wait_for(lambda: (cpki3 / "cluster.pub").read_text() == new_pub, 20, "cm3's local copy to hold the new key")
    assert (cpki3 / "cluster.pem").read_text() == (pki / "cluster.pem").read_text()
    assert (cpki3 / "cluster.pem.old").read_text() == old_pem
    wait_for(lambda: re.search(r"Loaded the rotated cluster key pair \(from cluster peer cm2, local copy\)", logs(cm3)),
             20, "cm3 to load the new cluster key")

    # the first publish under the new AES key makes every minion re-authenticate (as in
    # Salt, no publish no re-auth); each verifies the signed new key and keeps answering
    try:
        for m in cluster.masters:
            wait_ping(m)
    except AssertionError:
        for n in MINIONS[:2]:
            print(f"---- {n}", "\n".join((env.root / n / "minion.log").read_text().splitlines()[-40:]))
        print("---- cm1", "\n".join(logs(cm1).splitlines()[-30:]))
        raise
    for n in MINIONS:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == new_pub.strip(), n
    for n in MINIONS:
        log = (env.root / n / "minion.log").read_text()
        assert "Received signed and verified master pubkey from master" in log, log[-3000:]
    print(f"publish connections per master before the rotation: {pub_conns}")

    # a holder of the OLD cluster.pem (e.g. a removed host) endorses a discover as cm2:
    # a joiner that pins the shared (new) cluster.pub refuses it
    oldpki = env.root / "oldpki"
    (oldpki / "peers").mkdir(parents=True)
    shutil.copy(pki / "cluster.pem.old", oldpki / "cluster.pem")
    shutil.copy(pki / "cluster.pub.old", oldpki / "cluster.pub")
    shutil.copy(pki / ".aes", oldpki / ".aes")
    for p in (pki / "peers").iterdir():
        shutil.copy(p, oldpki / "peers" / p.name)
    fake_port = free_port()
    fake = Proc([str(PROBE), "fake-peer", "--listen-port", str(fake_port), "--cluster-id", CLUSTER_ID,
                 "--as", "cm2", "--as-key", str(cm2.pki_dir / "master.pem"), "--reply-as", "cm2",
                 "--reply-key", str(cm2.pki_dir / "master.pem"), "--cluster-pki", str(oldpki), "--secret", SECRET],
                env.root / "fake-old.out")
    try:
        wait_for(lambda: "listening on" in (env.root / "fake-old.out").read_text(), 15, "the fake member")
        cj = env.master("cj1", root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{fake_port}"],
                        cluster_pool_port=free_port(), cluster_pki_dir=str(pki),
                        cachedir=str(cluster.shared / "cache"), cluster_secret=SECRET)
        cj.start()
        wait_for(lambda: not cj.proc.alive(), 30, "cj1 to give up")
        assert cj.proc.p.returncode != 0
        text = (env.root / "fake-old.out").read_text()
        assert "discover from cj1: discover-reply as cm2" in text, text
        assert "join from" not in text, text
        assert "the cluster key differs from cluster_pki_dir/cluster.pub" in logs(cj), logs(cj)
        assert not (pki / "peers" / "cj1.pub").exists()
    finally:
        fake.kill()
    print(f"cluster key rotation, minions followed, old-key endorsement refused: {time.monotonic() - t0:.2f} s")
