"""Issue 19 point 3 (part "group"): a master group of INDEPENDENT sylvite masters (no
cluster: each its own cachedir and pki, one shared master key pair) seen as one through
either master's REST API (option master_group, docs/operations.md "Master group").

Real processes on loopback: masters m1 and m2 (each with a rest_cherrypy API and the same
master_group), minion A hot (master: [m1, m2], connected to both), minion B failover
(master_type failover, on m1), minion C only on m2. Checked:
  - the group minion list (runner sylvite.minions, manage.present) through m1 and m2: A, B,
    C once each, with the master(s) each is connected to;
  - `local test.ping '*'` through m1 answers A, B and C, and each minion ran the job
    exactly once (its log, and the returns in both masters' own job caches);
  - `/jobs/<jid>` through m2 shows the job m1 started with every return;
  - a key accepted through the group is accepted on both masters; key.list_all lists it once;
  - unsigned / wrongly signed / stale / replayed internal calls are refused 401;
  - a frozen member (SIGSTOP: connects, never answers) and a dead one make calls degrade
    within the group timeout, naming the member in X-Sylvite-Group-Unreachable.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import time
from pathlib import Path

import pytest

import test_api
from sylvite_harness import Env, free_port, preaccept, share_master_key, wait_for

SECRET = "group-secret-0123456789"
GROUP_TIMEOUT = 3
CLIENTS = ["local", "local_async", "local_batch", "runner", "runner_async", "wheel", "wheel_async"]
USERS = "alice:secret\n"
EAUTH = {"alice": [".*", "@runner", "@wheel", "@jobs"]}
FAILOVER = dict(master_type="failover", master_alive_interval=30, random_reauth_delay=1, acceptance_wait_time=1,
                auth_timeout=3)


class Api(test_api.Api):
    """test_api's client (plain HTTP here), with a longer default timeout, login() that
    chains, and one lowstate chunk per call."""

    def request(self, method, path, body=None, headers=None, token=True, timeout=90):
        return super().request(method, path, body, headers, token, timeout)

    def login(self, user="alice", password="secret"):
        super().login(user, password)
        return self

    def low(self, chunk, timeout=90):
        st, hd, data = self.request("POST", "/", [chunk], timeout=timeout)
        assert st == 200, (st, data)
        return json.loads(data)["return"][0], hd


def make_master(env: Env, name: str, api_port: int, urls: list[str]):
    users = env.root / f"{name}-users.txt"
    users.write_text(USERS)
    return env.master(name, rest_cherrypy={"port": api_port, "host": "127.0.0.1", "disable_ssl": True},
                      external_auth={"file": {"^filename": str(users), **EAUTH}}, netapi_enable_clients=CLIENTS,
                      timeout=15, master_group={"id": "g1", "secret": SECRET, "masters": urls,
                                                "timeout": GROUP_TIMEOUT})


def with_masters(mn, masters):
    """Masters on one loopback address, told apart by their ret_port (host:port)."""
    mn.opts["master"] = masters
    mn.write_config()
    return mn


def job_log_count(mn, jid: str) -> int:
    p = Path(mn.opts["log_file"])
    return p.read_text(errors="replace").count(f"Starting a new job {jid}") if p.exists() else 0


def local_returns(master, jid: str) -> dict:
    """The job's returns in this master's OWN job cache (its CLI, not the group API)."""
    r = master.salt_run("jobs.lookup_jid", jid, "--out", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip() else {}


@pytest.fixture(scope="module")
def lab():
    env = Env()
    try:
        p1, p2 = free_port(), free_port()
        urls = [f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"]
        m1 = make_master(env, "m1", p1, urls)
        m2 = make_master(env, "m2", p2, urls)
        share_master_key(m1, m2)
        a1, a2 = f"127.0.0.1:{m1.ret_port}", f"127.0.0.1:{m2.ret_port}"
        ma = with_masters(env.minion("A", [m1, m2]), [a1, a2])
        mb = with_masters(env.minion("B", [m1, m2], **FAILOVER), [a1, a2])
        mc = with_masters(env.minion("C", m2), a2)
        preaccept([m1, m2], "A", ma.opts["pki_dir"])
        preaccept([m1, m2], "B", mb.opts["pki_dir"])
        preaccept([m2], "C", mc.opts["pki_dir"])
        for m in (m1, m2):
            m.start()
        for m in (m1, m2):
            m.wait_ready(timeout=120)
        for mn in (ma, mb, mc):
            mn.start()

        def up(master, names):
            out = master.salt_json("*", "test.ping", "-t", "5")
            return all(out.get(n) is True for n in names)
        wait_for(lambda: up(m1, ["A", "B"]), 120, "A and B on m1")
        wait_for(lambda: up(m2, ["A", "C"]), 120, "A and C on m2")
        api1, api2 = Api(p1).login(), Api(p2).login()
        yield {"env": env, "m1": m1, "m2": m2, "A": ma, "B": mb, "C": mc, "api1": api1, "api2": api2,
               "urls": urls}
    except BaseException:
        print(env.dump_logs())
        raise
    finally:
        env.close()


def test_group_minion_list_through_each_member(lab):
    for api in (lab["api1"], lab["api2"]):
        ret, hd = api.low({"client": "runner", "fun": "sylvite.minions"})
        assert "x-sylvite-group-unreachable" not in hd
        assert set(ret) == {"A", "B", "C"}, ret
        assert sorted(ret["A"]["masters"]) == ["m1", "m2"] and ret["A"]["connected"] is True, ret
        assert ret["B"]["masters"] == ["m1"] and ret["B"]["master"] == "m1", ret
        assert ret["C"]["masters"] == ["m2"] and ret["C"]["master"] == "m2", ret
        # last_seen: the latest of the members' own sylvite.minions answers (presence).
        assert all(ret[n]["last_seen"] for n in ("A", "B", "C")), ret
        present, _ = api.low({"client": "runner", "fun": "manage.present"})
        assert present == ["A", "B", "C"], present


def test_local_through_m1_reaches_each_minion_once(lab):
    ret, hd = lab["api1"].low({"client": "local", "tgt": "*", "fun": "test.ping", "full_return": True})
    assert set(ret) == {"A", "B", "C"}, ret
    assert all(v["ret"] is True for v in ret.values()), ret
    jids = {v["jid"] for v in ret.values()}
    assert len(jids) == 1, ret
    jid = jids.pop()
    # Each minion executed it exactly once (a hot minion published to by both masters
    # would log two starts and leave a return in both job caches).
    for n in ("A", "B", "C"):
        wait_for(lambda: job_log_count(lab[n], jid) >= 1, 20, f"{n}'s log of {jid}")
    time.sleep(1)
    assert [job_log_count(lab[n], jid) for n in ("A", "B", "C")] == [1, 1, 1]
    r1, r2 = local_returns(lab["m1"], jid), local_returns(lab["m2"], jid)
    assert sorted(list(r1) + list(r2)) == ["A", "B", "C"], (r1, r2)
    assert "C" in r2 and "B" in r1  # each on the master it is connected to
    # /jobs/<jid> through m2: the job m1 started, with every return.
    st, _, data = lab["api2"].request("GET", f"/jobs/{jid}")
    assert st == 200, data
    body = json.loads(data)
    assert body["return"][0] == {"A": True, "B": True, "C": True}, body
    assert sorted(body["info"][0]["Minions"]) == ["A", "B", "C"], body
    st, _, data = lab["api2"].request("GET", "/jobs")
    assert st == 200 and jid in json.loads(data)["return"][0]


def test_local_async_through_m2(lab):
    ret, _ = lab["api2"].low({"client": "local_async", "tgt": "*", "fun": "test.ping"})
    assert ret["minions"] == ["A", "B", "C"], ret
    jid = ret["jid"]
    for n in ("A", "B", "C"):
        wait_for(lambda: job_log_count(lab[n], jid) >= 1, 30, f"{n}'s log of {jid}")
    time.sleep(1)
    assert [job_log_count(lab[n], jid) for n in ("A", "B", "C")] == [1, 1, 1]


def test_key_accepted_through_group_on_both(lab):
    env, m1, m2 = lab["env"], lab["m1"], lab["m2"]
    d = with_masters(env.minion("D", [m1, m2]), [f"127.0.0.1:{m1.ret_port}", f"127.0.0.1:{m2.ret_port}"])
    d.start()
    wait_for(lambda: "D" in m1.keys().get("minions_pre", []) and "D" in m2.keys().get("minions_pre", []), 60,
             "D pending on both")
    ret, _ = lab["api1"].low({"client": "wheel", "fun": "key.accept", "match": "D"})
    assert ret["data"]["success"] is True, ret
    assert "D" in m1.keys()["minions"] and "D" in m2.keys()["minions"]
    st, _, data = lab["api2"].request("GET", "/keys")
    keys = json.loads(data)["return"]
    assert keys["minions"].count("D") == 1 and "D" not in keys["minions_pre"], keys
    assert {"A", "B", "C", "D"} <= set(keys["minions"])
    # D runs jobs through the group once it connected.
    wait_for(lambda: lab["api1"].low({"client": "local", "tgt": "D", "fun": "test.ping", "timeout": 5})[0].get("D"),
             60, "D answers through the group")
    d.stop()
    # Deleted through m2: gone from both.
    ret, _ = lab["api2"].low({"client": "wheel", "fun": "key.delete", "match": "D"})
    assert ret["data"]["success"] is True, ret
    assert "D" not in m1.keys()["minions"] and "D" not in m2.keys()["minions"]


def sign(method, path, body, t=None, nonce=None, secret=SECRET, group="g1"):
    t = int(time.time()) if t is None else t
    nonce = nonce or os.urandom(16).hex()
    msg = f"{method}\n{path}\n{t}\n{nonce}\n{group}\n".encode() + body
    sig = hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()
    return {"X-Sylvite-Group-Time": str(t), "X-Sylvite-Group-Nonce": nonce, "X-Sylvite-Group-Signature": sig,
            "Content-Type": "application/json"}


def test_internal_calls_need_a_fresh_signature(lab):
    api = Api(lab["api1"].port)  # no session token
    body = b"{}"
    st, _, _ = api.request("POST", "/group/v1/view", body, headers={"Content-Type": "application/json"})
    assert st == 401
    st, _, _ = api.request("POST", "/group/v1/view", body, headers=sign("POST", "/group/v1/view", body,
                                                                         secret="wrong-secret-0123456789"))
    assert st == 401
    st, _, _ = api.request("POST", "/group/v1/view", body, headers=sign("POST", "/group/v1/view", body,
                                                                         t=int(time.time()) - 600))
    assert st == 401
    good = sign("POST", "/group/v1/view", body)
    st, _, data = api.request("POST", "/group/v1/view", body, headers=good)
    assert st == 200, data
    assert json.loads(data)["id"] == "m1"
    st, _, _ = api.request("POST", "/group/v1/view", body, headers=good)  # replayed
    assert st == 401
    # A signed run with a tampered body.
    run = json.dumps({"chunk": {"client": "runner", "fun": "manage.present"}, "user": "x"}).encode()
    h = sign("POST", "/group/v1/run", run)
    st, _, _ = api.request("POST", "/group/v1/run", run.replace(b"present", b"up     "), headers=h)
    assert st == 401
    log = (lab["m1"].root / "master.log").read_text(errors="replace")
    assert "bad group signature" in log and "stale group call" in log and "unsigned group call" in log


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def group_log(master) -> str:
    log = (master.root / "master.log").read_text(errors="replace")
    return "\n".join(line for line in log.splitlines() if "group" in line)[-3000:]


def test_frozen_then_dead_member_degrades_within_timeout(lab):
    m2, api1 = lab["m2"], lab["api1"]
    url2 = lab["urls"][1]
    os.kill(m2.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: process_state(m2.proc.pid) == "T", 10, "m2 to be stopped")
        t0 = time.monotonic()
        ret, hd = api1.low({"client": "runner", "fun": "sylvite.minions"}, timeout=60)
        took = time.monotonic() - t0
        assert took < GROUP_TIMEOUT + 5, took
        assert hd.get("x-sylvite-group-unreachable") == url2, (hd, ret, group_log(lab["m1"]))
        # C (only on m2) is unknown while m2 does not answer.
        assert set(ret) == {"A", "B"}, ret
        assert ret["A"]["masters"] == ["m1"], ret
        t0 = time.monotonic()
        ret, hd = api1.low({"client": "local", "tgt": "*", "fun": "test.ping", "timeout": 10}, timeout=60)
        took = time.monotonic() - t0
        assert ret == {"A": True, "B": True}, ret
        assert hd.get("x-sylvite-group-unreachable") == url2, hd
        assert took < GROUP_TIMEOUT + 10, took
    finally:
        os.kill(m2.proc.pid, signal.SIGCONT)
    m2.kill()
    t0 = time.monotonic()
    ret, hd = api1.low({"client": "local", "tgt": "*", "fun": "test.ping", "timeout": 10}, timeout=60)
    assert time.monotonic() - t0 < GROUP_TIMEOUT + 10
    assert ret == {"A": True, "B": True}, ret
    assert hd.get("x-sylvite-group-unreachable") == url2, hd
    st, _, data = api1.request("GET", "/keys")
    assert st == 200 and {"A", "B"} <= set(json.loads(data)["return"]["minions"])
