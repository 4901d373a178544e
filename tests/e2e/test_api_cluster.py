"""Issue 19 "api", point 3 (cluster part): the REST API on a 3-master sylvite cluster
(tests/e2e/clusterlab.py: shared cluster_pki_dir and cachedir, HAProxy in front of the
minions). A token minted by master 1 works on every master (tokens live in the shared
cachedir); a job started through master 1's API reaches every minion and its returns are
visible through master 2's /jobs/<jid>; master 3's /events carries the events of that
job; pepper works through each master.
"""
from __future__ import annotations

import pytest

from clusterlab import LocalCluster
from sylvite_harness import free_port, wait_for
from test_api import CLIENTS, EAUTH, USERS, Api, SseClient, pepper

NAMES = ["ca1", "ca2", "ca3"]


@pytest.fixture
def api_cluster(env):
    users = env.root / "users.txt"
    users.write_text(USERS)
    c = LocalCluster(env, start=False, external_auth={"file": {"^filename": str(users), **EAUTH}},
                     netapi_enable_clients=CLIENTS)
    ports = {}
    for m in c.masters:
        ports[m.name] = free_port()
        m.write_config(rest_cherrypy={"port": ports[m.name], "host": "127.0.0.1", "disable_ssl": True})
    c.start_masters()
    c.start_lb()
    yield c, [Api(ports[m.name]) for m in c.masters]
    c.close()


def test_api_cluster_wide(env, api_cluster):
    cluster, apis = api_cluster
    for n in NAMES:
        cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
    m1 = cluster.masters[0]
    wait_for(lambda: set(NAMES) <= set(m1.keys().get("minions_pre", [])), 60, "minion keys pending")
    assert m1.salt_key("-A", "-y").returncode == 0
    for master in cluster.masters:
        wait_for(lambda: master.salt_json("ca*", "test.ping", "-t", "5") == {n: True for n in NAMES}, 90,
                 f"minions to answer from {master.name}", interval=0.5)

    a1, a2, a3 = apis
    a1.login()
    # one login, every master: the token is in the shared cachedir
    a2.token = a3.token = a1.token
    sse = SseClient(a3, headers={"X-Auth-Token": a1.token})
    try:
        assert sse.status == 200
        st, body = a1.json("POST", "/", [{"client": "local_async", "tgt": "ca*", "fun": "test.ping"}])
        assert st == 200, body
        job = body["return"][0]
        assert sorted(job["minions"]) == NAMES
        jid = job["jid"]
        # master 3's stream carries every return of the job started on master 1
        for n in NAMES:
            sse.wait(lambda t, n=n: t == f"salt/job/{jid}/ret/{n}", 60, f"{n}'s return on master 3's /events")

        # master 2's /jobs/<jid> shows every return
        def on_m2():
            st, b = a2.json("GET", f"/jobs/{jid}")
            return st == 200 and b["return"][0] == {n: True for n in NAMES} and b
        b = wait_for(on_m2, 60, "the job's returns through master 2's /jobs/<jid>")
        assert b["info"][0]["Function"] == "test.ping"
        st, b = a2.json("GET", "/jobs")
        assert st == 200 and jid in b["return"][0]
    finally:
        sse.close()
    # a waiting local call through each master reaches every minion
    for a in apis:
        st, body = a.json("POST", "/", [{"client": "local", "tgt": "ca*", "fun": "test.ping"}])
        assert st == 200 and body == {"return": [{n: True for n in NAMES}]}, body
    # keys: the same view from every master
    for a in apis:
        st, body = a.json("GET", "/keys")
        assert st == 200 and body["return"]["minions"] == NAMES
    # pepper through each master
    for a in apis:
        r = pepper(a.port, "ca*", "test.ping")
        assert r.returncode == 0, r.stderr
        for n in NAMES:
            assert f"{n}:\n    True" in r.stdout, r.stdout
        r = pepper(a.port, "--client", "local_async", "ca*", "test.ping")
        assert r.returncode == 0 and "jid:" in r.stdout, r.stdout + r.stderr
