"""Issue 6, multi-host: three sylvite masters in three network namespaces sharing a real
GlusterFS replica-3 volume (one brick and one FUSE mount per master host), a real
HAProxy in a fourth namespace, minions in a fifth that know only the load balancer.

  2. kill one master -> HAProxy marks it down, its minions reconnect through the load
     balancer, the next job gets every return; restart it -> it serves again;
  3. cut one master's network (silent blackhole: its Gluster brick goes with it) during a
     job -> no return a minion got acknowledged is lost: every return is in the job cache.
"""
import json
import re
import time

import pytest

from glusterlab import gluster_available
from multihostlab import MultiHostCluster, onboard as _onboard, ping, wait_ping  # noqa: F401
from netlab import NetLab
from sylvite_harness import wait_for

why_skip = gluster_available()
pytestmark = pytest.mark.skipif(why_skip is not None, reason=why_skip or "")

MINIONS = [f"gx{i}" for i in range(1, 7)]


@pytest.fixture
def mh(env):
    with NetLab() as lab:
        c = MultiHostCluster(env, lab)
        try:
            yield c
        finally:
            c.close()


def onboard(mh, names=MINIONS):
    _onboard(mh, names)


def test_master_killed_minions_move_through_the_load_balancer(env, mh):
    onboard(mh)
    m1, m2, m3 = mh.masters
    pub = mh.server_status("salt_publish")
    assert sum(int(r["scur"]) for r in pub.values()) == len(MINIONS), pub
    on_m3 = int(pub["m3"]["scur"])
    m3.kill()
    wait_for(lambda: mh.server_status("salt_publish")["m3"]["status"].startswith("DOWN"), 30, "m3 marked down")
    t0 = time.monotonic()
    wait_ping(m1, MINIONS)
    print(f"m3 (had {on_m3} publish connections) killed: every minion answered m1 after "
          f"{time.monotonic() - t0:.1f}s")
    r = m1.salt("--out", "json", "--static", "gx*", "test.echo", "after-kill")
    assert json.loads(r.stdout[r.stdout.index("{"):]) == {n: "after-kill" for n in MINIONS}, r.stdout
    m3.start().wait_ready(timeout=60)
    wait_for(lambda: mh.server_status("salt_publish")["m3"]["status"] == "UP", 30, "m3 up again")
    wait_ping(m3, MINIONS)


def test_blackholed_master_during_a_job_loses_no_return(env, mh):
    onboard(mh)
    m1, m2, m3 = mh.masters
    r = m1.salt("--async", "gx*", "test.sleep", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"\b(\d{20})\b", r.stdout).group(1)
    time.sleep(1)  # the job runs on every minion now
    m3.host.blackhole(True)  # silent: no RST, and its Gluster brick is cut off too
    t0 = time.monotonic()

    def all_returned():
        r = m1.salt_run("jobs.lookup_jid", jid, "--out", "json", timeout=120)
        try:
            out = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
        except json.JSONDecodeError:
            return None
        return out if set(out) >= set(MINIONS) else None

    out = wait_for(all_returned, 150, "every return of the job in the shared job cache", interval=2)
    assert out == {n: True for n in MINIONS}, out
    print(f"all {len(MINIONS)} returns in the job cache {time.monotonic() - t0:.1f}s after m3 was cut off")
    # and the cluster keeps serving every minion without m3
    wait_ping(m1, MINIONS, timeout=150)
