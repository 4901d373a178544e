"""Issue 19, the console's data: salt-run sylvite.minions (per minion: key state, the master
holding its publish connection, every master it is connected to, the last time a master
heard from it) and the fields cluster.peers gained (aes_epoch, join, health).

Single master, two minions: both connected to this master with a last-seen time that moves
forward when the minion talks to the master; a stopped minion shows connected false and
keeps its last-seen time. A three-master cluster (two on the shared cluster_pki_dir, one
joined through cm1 with a local copy): a minion connected straight to cm2 is shown with cm2
by every master, one behind HAProxy with the same master by all; cluster.peers on every
master carries the AES key epoch (equal key ids; changed after cluster.rotate_key), the
join state (cm3 joined through cm1) and health (links up, peers heard, AES key in step).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import time

import pytest

from clusterlab import LocalCluster
from sylvite_harness import free_port, wait_for

SECRET = "presence-s3cret"
CLUSTER_ID = "sylvite-test"


def run_json(m, *args):
    r = m.salt_run(*args, "--out", "json")
    assert r.returncode == 0, (m.name, args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def when(iso: str) -> dt.datetime:
    assert iso.endswith("Z"), iso
    return dt.datetime.fromisoformat(iso[:-1]).replace(tzinfo=dt.timezone.utc)


def accept(master, names):
    wait_for(lambda: set(names) <= set(master.keys().get("minions_pre", [])), 60, f"{names} pending")
    r = master.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr


def test_single_master_last_seen_and_connection(env):
    master = env.master().start().wait_ready()
    names = ["pa", "pb"]
    minions = [env.minion(n, master).start() for n in names]
    accept(master, names)
    wait_for(lambda: master.salt_json("p*", "test.ping", "-t", "5") == {n: True for n in names}, 60,
             "pa and pb to answer", interval=0.5)

    def view():
        return run_json(master, "sylvite.minions")

    v = wait_for(lambda: (lambda x: x if all(x.get(n, {}).get("connected") for n in names) else None)(view()), 30,
                 "both minions connected in sylvite.minions")
    now = dt.datetime.now(dt.timezone.utc)
    assert set(v) == set(names), v
    for n in names:
        e = v[n]
        assert e["key"] == "accepted" and e["connected"] is True, e
        assert e["master"] == "master" and e["masters"] == ["master"], e
        seen = when(e["last_seen"])
        assert now - dt.timedelta(seconds=120) < seen <= now + dt.timedelta(seconds=2), (e, now)
    # print it as an operator sees it (salt-run's default outputter) once
    r = master.salt_run("sylvite.minions")
    assert r.returncode == 0 and "last_seen" in r.stdout, r.stdout + r.stderr

    # a return is a request: last_seen moves forward
    before = when(v["pa"]["last_seen"])
    time.sleep(1.2)
    assert master.salt_json("pa", "test.ping", "-t", "10") == {"pa": True}
    after = when(view()["pa"]["last_seen"])
    assert after > before, (before, after)

    # subset
    assert set(run_json(master, "sylvite.minions", "subset=pa")) == {"pa"}

    # a stopped minion: not connected, its last_seen kept (its disconnect is the last word)
    last_pb = when(view()["pb"]["last_seen"])
    minions[1].stop()
    v = wait_for(lambda: (lambda x: x if x["pb"]["connected"] is False else None)(view()), 30,
                 "pb to show disconnected")
    assert v["pb"]["master"] is None and v["pb"]["masters"] == [], v["pb"]
    assert v["pb"]["last_seen"] is not None and when(v["pb"]["last_seen"]) >= last_pb, (v["pb"], last_pb)
    assert v["pa"]["connected"] is True
    time.sleep(1.2)
    assert view()["pb"]["last_seen"] == v["pb"]["last_seen"]  # nothing heard since

    # a pending key with no connection is not listed; accepted but never seen: null times
    master.salt_key("-d", "pb", "-y")
    assert "pb" not in view()


@pytest.fixture
def cluster(env):
    c = LocalCluster(env, n=2, cluster_id=CLUSTER_ID, cluster_secret=SECRET, start=False)
    c.start_masters()
    c.start_lb()
    pki = c.shared / "pki"
    # a third master joins through cm1 with a local-copy cluster_pki_dir
    cm3 = env.master("cm3", root_dir="/", cluster_id=CLUSTER_ID, cluster_peers=[f"127.0.0.1:{c.pool_ports['cm1']}"],
                     cluster_pool_port=free_port(), cluster_pki_dir=str(env.root / "cm3" / "cpki"),
                     cachedir=str(c.shared / "cache"), cluster_secret=SECRET,
                     cluster_pub_fingerprint=hashlib.sha256((pki / "cluster.pub").read_bytes()).hexdigest(),
                     file_roots={"base": [str(c.shared / "srv" / "salt")]},
                     pillar_roots={"base": [str(c.shared / "srv" / "pillar")]})
    cm3.start()
    cm3.wait_ready()
    c.masters.append(cm3)
    yield c
    c.close()


def test_cluster_wide_presence_and_peers(env, cluster):
    cm1, cm2, cm3 = cluster.masters
    ids = [m.name for m in cluster.masters]

    def peers(m):
        return run_json(m, "cluster.peers")

    # every master linked to the two others
    wait_for(lambda: all(sum(1 for p in peers(m)["peers"] if p["state"] == "up" and p["id"]) >= 2
                         for m in cluster.masters), 60, "every peer link up")

    # px1 straight to cm2 (not through HAProxy), px2 through HAProxy (any master)
    direct = env.minion("px1", cm2, acceptance_wait_time=1, random_reauth_delay=1).start()
    cluster.minion("px2", acceptance_wait_time=1, random_reauth_delay=1).start()
    accept(cm1, ["px1", "px2"])
    wait_for(lambda: cm1.salt_json("px*", "test.ping", "-t", "5") == {"px1": True, "px2": True}, 90,
             "px1 and px2 to answer", interval=0.5)

    def agreed():
        views = {m.name: run_json(m, "sylvite.minions") for m in cluster.masters}
        for name, v in views.items():
            if not (v.get("px1", {}).get("master") == "cm2" and v["px1"]["masters"] == ["cm2"]):
                return None
            if not v.get("px2", {}).get("connected"):
                return None
        px2 = {v["px2"]["master"] for v in views.values()}
        return views if len(px2) == 1 else None

    views = wait_for(agreed, 45, "every master to show px1 on cm2 and agree on px2's master", interval=1)
    px2_master = views["cm1"]["px2"]["master"]
    assert px2_master in ids, views
    for name, v in views.items():
        assert v["px1"]["key"] == "accepted" and v["px1"]["connected"] is True, (name, v)
        assert v["px1"]["last_seen"] is not None and v["px2"]["last_seen"] is not None, (name, v)
        assert v["px2"]["masters"] == [px2_master], (name, v)
    print("\nsalt-run sylvite.minions on cm1:", json.dumps(views["cm1"], indent=1))

    # last_seen is the max over the cluster: after a ping published on cm3 the return goes
    # to whichever master px1 talks to (cm2); cm1 and cm3 learn the new time from cm2.
    before = when(views["cm1"]["px1"]["last_seen"])
    time.sleep(1.2)
    assert cm3.salt_json("px1", "test.ping", "-t", "10") == {"px1": True}
    wait_for(lambda: all(when(run_json(m, "sylvite.minions")["px1"]["last_seen"]) > before for m in cluster.masters),
             30, "every master to see px1's newer last_seen")

    # cluster.peers: the old keys are still there, plus aes_epoch, join, health
    def healthy():
        ps = {m.name: peers(m) for m in cluster.masters}
        ok = all(p["health"]["status"] == "ok" and len(p["health"]["links"]) == 2 and
                 all(lk["up"] and lk["last_heard"] and lk["aes_in_step"] is True for lk in p["health"]["links"])
                 for p in ps.values())
        return ps if ok else None

    ps = wait_for(healthy, 45, "every master healthy (links up, peers heard, AES key in step)", interval=1)
    print("salt-run cluster.peers on cm3:", json.dumps(ps["cm3"], indent=1))
    for name, p in ps.items():
        assert p["id"] == name and p["cluster_id"] == CLUSTER_ID
        assert {"peers", "events"} <= set(p), p
        assert p["health"]["uptime_s"] >= 0 and when(p["health"]["started"])
        assert {"requests", "refused", "shed", "returns", "publishes"} <= set(p["health"]["counters"]), p
        assert {lk["id"] for lk in p["health"]["links"]} == set(ids) - {name}
        assert len(p["aes_epoch"]["key_id"]) == 16 and p["aes_epoch"]["generation"] >= 1
        assert when(p["aes_epoch"]["since"])
    assert len({p["aes_epoch"]["key_id"] for p in ps.values()}) == 1, ps
    assert ps["cm2"]["health"]["minions_connected"] >= 1  # px1
    states = {n: p["join"]["state"] for n, p in ps.items()}
    assert states["cm3"] == "joined" and ps["cm3"]["join"]["via"] == "cm1", ps["cm3"]["join"]
    assert when(ps["cm3"]["join"]["since"])
    # cm1 and cm2 share the directory and start together: the one that made the cluster key
    # pair is the founder; the other found the key there (member) or, when the founder was
    # already serving, joined through it with cluster_secret (joined): both are right.
    assert sorted([states["cm1"], states["cm2"]]) in (["founder", "member"], ["founder", "joined"]), states

    # the epoch moves with salt-run cluster.rotate_key, on every master, in step again
    old = ps["cm1"]["aes_epoch"]
    r = cm1.salt_run("cluster.rotate_key", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr

    def rotated():
        e = {m.name: peers(m)["aes_epoch"] for m in cluster.masters}
        ok = all(x["key_id"] != old["key_id"] for x in e.values()) and len({x["key_id"] for x in e.values()}) == 1
        return e if ok else None

    epochs = wait_for(rotated, 45, "every master to serve the new AES key", interval=1)
    assert epochs["cm1"]["generation"] > old["generation"], (old, epochs)
    assert when(epochs["cm1"]["since"]) >= when(old["since"])
    direct.stop()
    wait_for(lambda: all(run_json(m, "sylvite.minions")["px1"]["connected"] is False for m in cluster.masters), 45,
             "every master to show px1 disconnected")
