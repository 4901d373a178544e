"""Issue 14 item 6 with Salt 3008.5's own salt-minion: a two-master sylvite cluster on
loopback (clusterlab.LocalCluster, HAProxy) with master_sign_pubkey and one master_sign
pair; a real minion with verify_master_pubkey_sign and master_sign.pub. After
salt-run cluster.rotate_key the minion (default sign_pub_messages: False) fails the HMAC of
the first publish under the new AES key, signs in again, verifies the new key's pub_sig,
replaces minion_master.pub and answers test.ping from both masters.
"""
import json

import pytest

from clusterlab import LocalCluster
from conftest import SALT3008
from sylvite_harness import copy_key_pair, gen_key_pair, wait_for

REAL_MINION = str(SALT3008 / "salt-minion")
NAMES = ["sr1", "sr2"]


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, n=2, master_sign_pubkey=True, start=False)
    gen_key_pair(env.root / "signkey", "master_sign")
    for m in c.masters:
        copy_key_pair(env.root / "signkey", m.pki_dir, "master_sign")
    c.start_masters()
    c.start_lb()
    yield c
    c.close()


def test_real_minion_follows_cluster_key_rotation(env, cluster):
    pki = cluster.shared / "pki"
    for n in NAMES:
        copy_key_pair(env.root / "signkey", env.root / n / "pki", "master_sign", private=False)
        m = cluster.minion(n)
        m.write_config(multiprocessing=False, log_level_logfile="debug", acceptance_wait_time=2,
                       verify_master_pubkey_sign=True)
        m.start(binary=REAL_MINION)
    m1 = cluster.masters[0]
    wait_for(lambda: set(NAMES) <= set(m1.keys().get("minions_pre", [])), 90, "real minions pending")
    assert m1.salt_key("-A", "-y").returncode == 0

    def ping_ok(master):
        out = master.salt_json("sr*", "test.ping", "-t", "10")
        return all(out.get(n) is True for n in NAMES)

    for m in cluster.masters:
        wait_for(lambda: ping_ok(m), 120, f"real minions to answer {m.name}", interval=1)
    old_pub = (pki / "cluster.pub").read_text().strip()
    for n in NAMES:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == old_pub
    r = cluster.masters[1].salt_run("cluster.rotate_key", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    ret = json.loads(r.stdout)
    assert ret["members_told"] == ["cm1"] and ret["aes_rotated"] is True, ret
    new_pub = (pki / "cluster.pub").read_text().strip()
    assert new_pub != old_pub
    for m in cluster.masters:
        wait_for(lambda: ping_ok(m), 120, f"real minions to answer {m.name} after the rotation", interval=1)
    for n in NAMES:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == new_pub, n
        assert "Received signed and verified master pubkey from master" in (env.root / n / "minion.log").read_text()
