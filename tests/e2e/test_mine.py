"""Issue 18 item 3: the mine with sylvite minions, on one master and on a 3-master cluster.

mine_functions in the minion config, the update at start and every mine_interval,
mine.send/get/delete/flush, every target type, the allow_tgt ACL, salt['mine.get'] in
pillar Jinja, and the cluster: data sent through master 1 is returned through master 2
(the mine lives in the shared cachedir).
"""
import time

import msgpack
import pytest

from clusterlab import LocalCluster
from sylvite_harness import wait_for

MINIONS = ("alpha", "beta", "gamma")

MINE_FUNCTIONS = {
    "test.ping": [],
    "myid": [{"mine_function": "grains.get"}, "id"],
    "secret": [{"mine_function": "test.echo"}, "s3cr3t", {"allow_tgt": "alpha"}],
}

PILLAR_MINE = """\
ids: {{ salt['mine.get']('*', 'myid') | json }}
pinged: {{ salt['mine.get']('G@os:* and not beta', 'test.ping', tgt_type='compound') | json }}
runner: {{ salt['saltutil.runner']('mine.get', tgt='*', fun='myid') | json }}
secret: {{ salt['mine.get']('alpha', 'secret') | json }}
"""


def accept_all(master, names):
    wait_for(lambda: set(names) <= set(master.keys().get("minions_pre", [])), 60, "minion keys to be pending")
    r = master.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr


def mine_get(master, tgt_minion, *args):
    return master.salt_json(tgt_minion, "mine.get", *args, "-t", "10").get(tgt_minion)


def test_mine_single_master(env):
    master = env.master().start().wait_ready()
    (master.pillar_root / "top.sls").write_text("base:\n  '*':\n    - mine\n")
    (master.pillar_root / "mine.sls").write_text(PILLAR_MINE)
    minions = [env.minion(n, master, mine_functions=MINE_FUNCTIONS).start() for n in MINIONS]
    accept_all(master, MINIONS)
    wait_for(lambda: master.salt_json("*", "test.ping", "-t", "5") == {n: True for n in MINIONS}, 60,
             "every minion to answer")
    cache = master.root / "cache" / "mine"

    # The update at start (Salt's run_on_start): no command needed.
    wait_for(lambda: all((cache / f"{n}.p").exists() for n in MINIONS), 60, "every minion's mine at start")
    stored = msgpack.unpackb((cache / "alpha.p").read_bytes(), raw=False)
    assert stored["test.ping"] is True and stored["myid"] == "alpha"
    assert stored["secret"] == {"__saltmine_acl__": 1, "__data__": "s3cr3t", "allow_tgt": "alpha"}
    for m in minions:
        assert "Added mine.update to scheduler" in (m.root / "minion.log").read_text(errors="replace")

    # Every target type.
    everyone = {n: n for n in MINIONS}
    assert wait_for(lambda: mine_get(master, "beta", "*", "myid") == everyone or None, 60, "mine.get *")
    assert mine_get(master, "beta", "alpha,gamma", "myid", "tgt_type=list") == {"alpha": "alpha", "gamma": "gamma"}
    assert mine_get(master, "beta", "gam*", "myid,test.ping") == {"myid": {"gamma": "gamma"},
                                                                 "test.ping": {"gamma": True}}
    assert mine_get(master, "beta", "id:beta", "myid", "tgt_type=grain") == {"beta": "beta"}
    assert mine_get(master, "beta", "G@id:alpha or L@gamma", "myid", "tgt_type=compound") == \
        {"alpha": "alpha", "gamma": "gamma"}
    assert mine_get(master, "beta", "^(alpha|beta)$", "myid", "tgt_type=pcre") == {"alpha": "alpha", "beta": "beta"}
    assert mine_get(master, "beta", "*", "myid", "exclude_minion=True") == {"alpha": "alpha", "gamma": "gamma"}

    # allow_tgt: only alpha may read secret.
    assert mine_get(master, "alpha", "*", "secret") == {n: "s3cr3t" for n in MINIONS}
    assert mine_get(master, "beta", "*", "secret") == {}

    # mine.send adds; mine.delete removes one function; mine.flush removes the minion's mine.
    assert master.salt_json("gamma", "mine.send", "extra", "mine_function=test.echo", "hello")["gamma"] is True
    assert mine_get(master, "beta", "gamma", "extra") == {"gamma": "hello"}
    assert master.salt_json("gamma", "mine.delete", "extra")["gamma"] is True
    assert mine_get(master, "beta", "gamma", "extra") == {}
    assert mine_get(master, "beta", "gamma", "myid") == {"gamma": "gamma"}
    assert master.salt_json("gamma", "mine.flush")["gamma"] is True
    assert not (cache / "gamma.p").exists()
    assert mine_get(master, "beta", "*", "myid") == {"alpha": "alpha", "beta": "beta"}
    assert master.salt_json("gamma", "mine.update")["gamma"] is True
    assert mine_get(master, "beta", "*", "myid") == everyone
    assert master.salt_json("beta", "mine.valid")["beta"] == {
        "test.ping": [], "myid": {"grains.get": ["id"]}, "secret": {"test.echo": ["s3cr3t"]}}

    # salt['mine.get'] in pillar Jinja: asked for the minion the pillar is for.
    out = master.salt_json("*", "pillar.items", "unmask=True", "-t", "20")
    for n in MINIONS:
        p = out[n]
        assert p["ids"] == everyone, p
        assert p["runner"] == everyone, p
        assert p["pinged"] == {"alpha": True, "gamma": True}, p
    assert out["alpha"]["secret"] == {"alpha": "s3cr3t"}
    assert out["beta"]["secret"] == {}


def test_mine_interval_refreshes(env):
    """mine_interval (minutes; sylvite accepts fractions) re-runs mine.update."""
    master = env.master().start().wait_ready()
    m = env.minion("ticker", master, mine_interval=0.05,
                   mine_functions={"now": [{"mine_function": "cmd.run"}, "date +%s%N"]}).start()
    accept_all(master, ["ticker"])
    f = master.root / "cache" / "mine" / "ticker.p"
    wait_for(f.exists, 60, "the first mine update")
    first = msgpack.unpackb(f.read_bytes(), raw=False)["now"]
    wait_for(lambda: msgpack.unpackb(f.read_bytes(), raw=False)["now"] != first, 30, "a periodic mine update")
    assert m.proc.alive()


def test_mine_disabled_and_bad_loads(env):
    """mine_enabled: False schedules nothing; the master keeps serving after bad loads."""
    master = env.master().start().wait_ready()
    env.minion("quiet", master, mine_enabled=False, mine_functions={"test.ping": []}).start()
    accept_all(master, ["quiet"])
    wait_for(lambda: master.salt_json("quiet", "test.ping", "-t", "5").get("quiet") is True, 60, "quiet to answer")
    time.sleep(2)
    assert not (master.root / "cache" / "mine" / "quiet.p").exists()
    # a mine.send of a function that is not there stores nothing and answers False
    assert master.salt_json("quiet", "mine.send", "no.such")["quiet"] is False
    assert master.salt_json("quiet", "mine.send", "test.ping")["quiet"] is True
    assert mine_get(master, "quiet", "quiet", "test.ping") == {"quiet": True}


@pytest.fixture
def cluster(env):
    c = LocalCluster(env)
    yield c
    c.close()


def test_mine_across_the_cluster(env, cluster):
    """Sent through master 1, read through master 2 and in a pillar compiled by master 3."""
    cm1, cm2, cm3 = cluster.masters
    (cluster.shared / "srv" / "pillar" / "top.sls").write_text("base:\n  'cx3':\n    - mine\n")
    (cluster.shared / "srv" / "pillar" / "mine.sls").write_text("ids: {{ salt['mine.get']('cx*', 'myid') | json }}\n")

    def on(master, name, **opts):
        m = env.minion(name, master, master_port=master.ret_port, publish_port=master.publish_port, **opts)
        m.write_config(master="127.0.0.1")
        return m.start()

    on(cm1, "cx1", mine_functions={"myid": [{"mine_function": "grains.get"}, "id"]})
    on(cm2, "cx2")
    on(cm3, "cx3")
    accept_all(cm1, ["cx1", "cx2", "cx3"])
    # A publish reaches only minions already connected (as in Salt): wait for each minion
    # to answer through its own master before the checks below publish to it.
    for master, name in ((cm1, "cx1"), (cm2, "cx2"), (cm3, "cx3")):
        wait_for(lambda: master.salt_json(name, "test.ping", "-t", "5").get(name) is True, 60,
                 f"{name} to answer through its master")
    wait_for(lambda: (cluster.shared / "cache" / "mine" / "cx1.p").exists(), 60, "cx1's mine through cm1")
    assert wait_for(lambda: mine_get(cm2, "cx2", "cx*", "myid") == {"cx1": "cx1"} or None, 60,
                    "cx1's mine through cm2")
    # mine.send through cm2, visible from cm1 and cm3
    assert cm2.salt_json("cx2", "mine.send", "myid", "mine_function=grains.get", "id")["cx2"] is True
    want = {"cx1": "cx1", "cx2": "cx2"}
    assert mine_get(cm1, "cx1", "cx*", "myid") == want
    assert mine_get(cm3, "cx3", "cx*", "myid") == want
    out = cm3.salt_json("cx3", "pillar.items", "unmask=True", "-t", "20")
    assert out["cx3"]["ids"] == want
    # a flush through cm3 is seen by cm2
    assert cm3.salt_json("cx2", "mine.flush")["cx2"] is True
    assert mine_get(cm2, "cx2", "cx*", "myid") == {"cx1": "cx1"}
