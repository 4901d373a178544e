"""Issue 18, item 6, on the three-master cluster (tests/e2e/clusterlab.py): the jobs.*
runners answer from any master, whatever master published the job (one shared job cache),
jobs.active from master 3 sees a job master 1 published, and the runners that read the
master's own state (fileserver.*, saltutil.sync_all) answer alike on every master.
"""
import json
import re
import time

import pytest

from clusterlab import LocalCluster
from sylvite_harness import wait_for

MINIONS = ["rx1", "rx2"]


@pytest.fixture
def cluster(env):
    c = LocalCluster(env)
    yield c
    c.close()


def run_json(m, *args):
    r = m.salt_run(*args, "--out", "json")
    assert r.returncode == 0, (m.name, args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_jobs_runners_from_every_master(env, cluster):
    for n in MINIONS:
        cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
    m1, m2, m3 = cluster.masters
    wait_for(lambda: set(MINIONS) <= set(m1.keys().get("minions_pre", [])), 60, "keys pending")
    assert m1.salt_key("-A", "-y").returncode == 0
    for m in cluster.masters:
        wait_for(lambda m=m: m.salt_json("rx*", "test.ping", "-t", "5") == {n: True for n in MINIONS}, 90,
                 f"ping from {m.name}", interval=0.5)
    (cluster.shared / "srv" / "salt" / "top.sls").write_text("base: {}\n")

    # A job published on master 1 with metadata.
    r = m1.salt("--out", "json", "--static", "--show-jid", "--metadata", '{"who": "m1"}', "rx*", "test.echo",
                "hello")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"\b(\d{20})\b", r.stdout).group(1)

    for m in cluster.masters:
        jobs = run_json(m, "jobs.list_jobs", 'search_metadata={"who": "m1"}')
        assert list(jobs) == [jid], (m.name, jobs)
        assert jobs[jid]["Function"] == "test.echo" and jobs[jid]["Metadata"] == {"who": "m1"}
        assert run_json(m, "jobs.exit_success", jid) == {n: True for n in MINIONS}, m.name
        lj = run_json(m, "jobs.list_job", jid)
        assert lj["Minions"] == MINIONS and set(lj["Result"]) == set(MINIONS), (m.name, lj)
        assert run_json(m, "jobs.lookup_jid", jid) == {n: "hello" for n in MINIONS}
        # runner jobs of every master are in the shared cache too
        mine = run_json(m, "jobs.list_jobs", "search_function=runner.jobs.exit_success")
        assert mine, m.name
        assert run_json(m, "fileserver.file_list") == ["top.sls"]
        assert run_json(m, "saltutil.sync_all")["modules"] == []

    # jobs.active on master 3 sees a job that master 1 published.
    r = m1.salt("--async", "rx*", "test.sleep", "30")
    sleep_jid = r.stdout.strip().split()[-1]
    time.sleep(2)
    active = run_json(m3, "jobs.active")
    assert sleep_jid in active, active
    running = {k for e in active[sleep_jid]["Running"] for k in e}
    assert running == set(MINIONS), active
    # and jobs.list_jobs from master 2 lists it
    assert sleep_jid in run_json(m2, "jobs.list_jobs", "search_function=test.sleep")

    # An unknown runner: Salt's text and exit code on every master.
    for m in cluster.masters:
        r = m.salt_run("nosuch.fun")
        assert r.returncode == 0 and "'nosuch.fun' is not available." in r.stdout, (r.stdout, r.stderr)
