"""Issue 19, point 4, the cluster page: a three-master sylvite cluster (tests/e2e/
clusterlab.py, HAProxy in front of the minions) with the REST API on every master. The
console of master 2 shows this master, the cluster id, its links to the two other masters
(up, last heard, AES key in step), the AES key epoch, the join state and the health; its
minions page lists a minion with the master it is connected to, whatever master that is
(salt-run sylvite.minions is cluster-wide).
"""
from __future__ import annotations

import json
import time

import pytest
from selenium.webdriver.common.by import By

from clusterlab import LocalCluster, peer_states
from console_stack import BACKEND_OPTS, Api, free_port, make_driver, rest_opts
from sylvite_harness import Env, wait_for
from test_console import Page, css, wait


@pytest.fixture
def cluster():
    env = Env()
    c = None
    ok = False
    try:
        c = LocalCluster(env, start=False, **BACKEND_OPTS(env.root))
        ports = {}
        for m in c.masters:
            ports[m.name] = free_port()
            m.write_config(rest_cherrypy=rest_opts(ports[m.name]))
        c.start_masters()
        c.start_lb()
        c.api_ports = ports
        yield c
        ok = True
    finally:
        if not ok:
            print(env.dump_logs())
        if c is not None:
            c.close()
        env.close()


class _ClusterStack:
    """What Page needs of a stack: the URL, the backend name, keys and minion starts."""

    backend = "sylvite"

    def __init__(self, c, master):
        self.c, self.master = c, master
        self.port = c.api_ports[master.name]
        self.url = f"http://127.0.0.1:{self.port}/console/"

    def api(self):
        return Api(f"http://127.0.0.1:{self.port}").login()


def test_console_cluster_page(cluster, shots_dir):
    c = cluster
    m1, m2, m3 = c.masters
    c.minion("c1", random_reauth_delay=1).start()
    wait_for(lambda: "c1" in m1.keys().get("minions_pre", []), 60, "c1 pending")
    assert m1.salt_key("-A", "-y").returncode == 0
    wait_for(lambda: m2.salt_json("*", "test.ping", "-t", "5") == {"c1": True}, 90, "c1 answers", interval=1)
    wait_for(lambda: all(list(peer_states(m).values()).count("up") == 2 for m in c.masters), 60,
             "every peer link up")

    d = make_driver(1280, 860)
    try:
        p = Page(d, _ClusterStack(c, m2), shots_dir, "3masters")
        p.login()
        held = m2.salt_run("sylvite.minions", "--out", "json")
        assert held.returncode == 0, held.stdout + held.stderr
        p.minions(["c1"], master=json.loads(held.stdout)["c1"]["master"])
        p.shot("minions")
        p.nav("cluster")
        wait(d, lambda: css(d, "#cluster-master"), 30, "the cluster page")
        assert css(d, "#cluster-master")[0].text == "cm2"
        assert "sylvite-test" in css(d, "#cluster-body")[0].text

        def peers_up():
            rows = {r.get_attribute("data-peer"): r.text for r in css(d, "#peers-table tbody tr")}
            return {"cm1", "cm3"} <= set(rows) and all("up" in rows[k] for k in ("cm1", "cm3"))
        wait(d, peers_up, 30, "links to cm1 and cm3, up")
        # AES key epoch, join state and health, in labelled fields.
        assert len(css(d, "#cluster-aes-key-id")[0].text.strip()) == 16
        assert int(css(d, "#cluster-aes-generation")[0].text) >= 1
        assert "ago" in css(d, "#cluster-aes-since")[0].text
        assert css(d, "#cluster-join-state")[0].text in ("founder", "member")
        assert "ago" in css(d, "#cluster-join-since")[0].text
        assert "min" in css(d, "#cluster-uptime")[0].text
        assert css(d, "#cluster-minions-connected")[0].text.isdigit()

        def healthy():
            # last heard and AES key in step come with the peers' presence messages (5 s)
            rows = {r.get_attribute("data-peer"): r.text for r in css(d, "#peers-table tbody tr")}
            if css(d, "#cluster-health-status")[0].text == "ok" and all("in step" in rows.get(k, "") for k in ("cm1", "cm3")):
                return True
            css(d, "#page-cluster .refresh")[0].click()
            time.sleep(2)
            return False
        wait(d, healthy, 60, "health ok, AES key in step with cm1 and cm3")
        p.shot("cluster")
        d.set_window_size(390, 844)
        p.no_sideways_scroll("cluster at 390 px")
        p.shot("cluster-phone")
        d.set_window_size(1280, 860)
        # The same token works through another master (tokens live in the shared cache).
        token = d.execute_script("return JSON.parse(sessionStorage.getItem('sylvite.console.session')).token")
        other = Api(f"http://127.0.0.1:{c.api_ports['cm3']}")
        other.token = token
        assert "c1" in other.keys().get("minions", [])
        assert not [e for e in d.get_log("browser") if e.get("level") == "SEVERE" and "Uncaught" in e.get("message", "")]
        assert d.find_element(By.ID, "who-name").text.startswith("console")
    finally:
        d.quit()
