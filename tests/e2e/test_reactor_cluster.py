"""Issue 18, reactor on the three-master cluster: every master has the same reactor config
(the SLS on the shared file_roots); an event reacts exactly once in the cluster, on the
master that fired it first (event_hub::subscribe_local), not once per master.

The event is the publish's own salt/job/<jid>/new (fired by the master that publishes);
the reaction appends the event's jid to a file on a minion with cmd.run. A job published
from each master in turn must leave each jid in the file exactly once. A second reactor
SLS with a Jinja error is matched by every publish: it is logged, and no master stops."""
import re
import time

import pytest

from clusterlab import LocalCluster, master_logs
from sylvite_harness import wait_for

MINIONS = ["rx1", "rx2"]

REACT = """\
{% if data.get('fun') == 'test.echo' and data.get('arg') and data['arg'][0] == 'react-once' %}
count_reaction:
  local.cmd.run:
    - tgt: rx1
    - arg:
      - echo {{ data['jid'] }} >> OUT
{% endif %}
"""

BROKEN = """\
broken:
  local.test.ping:
    - tgt: {{ data['jid'] }
"""


@pytest.fixture
def cluster(env):
    shared = env.root / "shared"
    (shared / "srv" / "salt" / "reactor").mkdir(parents=True, exist_ok=True)
    out = env.root / "reactions.txt"
    (shared / "srv" / "salt" / "reactor" / "once.sls").write_text(REACT.replace("OUT", str(out)))
    (shared / "srv" / "salt" / "reactor" / "broken.sls").write_text(BROKEN)
    c = LocalCluster(env, reactor=[{"salt/job/*/new": ["salt://reactor/once.sls", "salt://reactor/broken.sls"]}])
    c.out = out
    yield c
    c.close()


def test_an_event_reacts_once_in_the_cluster(env, cluster):
    for n in MINIONS:
        cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
    m0 = cluster.masters[0]
    wait_for(lambda: set(MINIONS) <= set(m0.keys().get("minions_pre", [])), 60, "minion keys pending")
    r = m0.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    for m in cluster.masters:
        wait_for(lambda: m.salt_json("rx*", "test.ping", "-t", "5") == {n: True for n in MINIONS}, 90,
                 f"minions to answer {m.name}", interval=0.5)

    jids = []
    for m in cluster.masters:
        r = m.salt("--out", "json", "--static", "--show-jid", "rx*", "test.echo", "react-once", "-t", "20")
        assert r.returncode == 0, r.stdout + r.stderr
        jids.append(re.search(r"\b(\d{20})\b", r.stdout).group(1))

    def lines():
        return cluster.out.read_text().split() if cluster.out.exists() else []
    wait_for(lambda: set(jids) <= set(lines()), 90, "one reaction per published job")
    time.sleep(5)  # a duplicate reaction (a peer reacting too) would land by now
    got = lines()
    assert sorted(got) == sorted(jids), f"expected each of {jids} once, got {got}"
    # the broken SLS was logged by the masters that reacted, and every master still serves
    assert any("broken.sls" in master_logs(m) for m in cluster.masters)
    for m in cluster.masters:
        assert m.proc.alive(), m.name
        assert m.salt_json("rx*", "test.ping", "-t", "10") == {n: True for n in MINIONS}
