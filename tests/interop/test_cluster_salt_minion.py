"""Issue 6, test 6: unmodified Salt 3008.5 salt-minions behind HAProxy against a
three-master sylvite cluster (local: masters on loopback, one shared directory). The
minions know only the load balancer; any master's test.ping, cmd.run and state.apply are
answered, whichever master holds their publish connection; they cached the cluster key.
Issue 16: on both transports (zeromq: masters and minions on Salt's default).
"""
import json

import pytest

from clusterlab import LocalCluster
from conftest import SALT3008
from sylvite_harness import wait_for

REAL_MINION = str(SALT3008 / "salt-minion")
NAMES = ["sx1", "sx2"]


@pytest.fixture(params=["tcp", "zeromq"])
def cluster(env, request):
    c = LocalCluster(env, transport=request.param)
    c.transport = request.param
    yield c
    c.close()


def test_real_minions_behind_haproxy(env, cluster):
    shared = cluster.shared
    (shared / "srv" / "salt" / "motd.txt").write_text("managed by the sylvite cluster\n")
    (shared / "srv" / "salt" / "web.sls").write_text(
        "motd:\n  file.managed:\n    - name: {{ grains['id'] | replace('sx', '" + str(env.root) +
        "/motd-') }}\n    - source: salt://motd.txt\n")
    for n in NAMES:
        m = cluster.minion(n)
        if cluster.transport == "zeromq":
            m.opts.pop("transport", None)  # Salt's default
        m.write_config(multiprocessing=False, log_level_logfile="debug", acceptance_wait_time=2)
        m.start(binary=REAL_MINION)
    m1 = cluster.masters[0]
    wait_for(lambda: set(NAMES) <= set(m1.keys().get("minions_pre", [])), 90, "real minions pending")
    assert m1.salt_key("-A", "-y").returncode == 0

    def ping_ok(master):
        out = master.salt_json("sx*", "test.ping", "-t", "10")
        return all(out.get(n) is True for n in NAMES)

    for m in cluster.masters:
        wait_for(lambda: ping_ok(m), 120, f"real minions to answer {m.name}", interval=1)
    cluster_pub = (shared / "pki" / "cluster.pub").read_text().strip()
    for n in NAMES:
        assert (env.root / n / "pki" / "minion_master.pub").read_text().strip() == cluster_pub
    for m in cluster.masters:
        assert m.salt_json("sx*", "cmd.run", f"echo via-{m.name}", "-t", "30") == {n: f"via-{m.name}" for n in NAMES}
    out = cluster.masters[2].salt_json("sx*", "state.apply", "web", "-t", "120")
    for n in NAMES:
        results = out[n]
        assert isinstance(results, dict) and results, out
        assert all(r["result"] is True for r in results.values()), json.dumps(out, indent=1)
        motd = env.root / f"motd-{n[2:]}"
        assert motd.read_text() == "managed by the sylvite cluster\n"
