"""Issue 19 "api": the salt-api compatible REST API served by salt-master (rest_cherrypy
block), with real processes: a sylvite master, sylvite minions, the `file` eauth backend.
Curl-level (http.client) checks of every endpoint, the SSE stream carrying a job's
salt/job/<jid>/ret event, the bad-input refusals (status codes of salt-api), a slow client
not blocking others, TLS, and the real `pepper` client (salt-pepper from PyPI).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import msgpack
import pytest
import yaml

from sylvite_harness import Env, free_port, wait_for

VENV = Path(os.environ.get("SYLVITE_VENV", "/work/main/build/venv"))
CLIENTS = ["local", "local_async", "local_batch", "local_subset", "runner", "runner_async", "ssh", "wheel",
           "wheel_async"]
USERS = "alice:secret\nbob:bobpw\n"
EAUTH = {"alice": [".*", "@runner", "@wheel", "@jobs"], "bob": ["test.ping"]}


class Api:
    """A tiny HTTP(S) client for one API endpoint."""

    def __init__(self, port: int, tls: bool = False):
        self.port = port
        self.tls = tls
        self.token: str | None = None

    def conn(self, timeout=60):
        if self.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, token=True, timeout=60):
        h = {"Accept": "application/json"}
        if isinstance(body, (list, dict)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        if token and self.token:
            h["X-Auth-Token"] = self.token
        h.update(headers or {})
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, **kw):
        st, hd, data = self.request(method, path, body, **kw)
        return st, (json.loads(data) if data and hd.get("content-type", "").startswith("application/json") else data)

    def login(self, user="alice", password="secret"):
        st, body = self.json("POST", "/login", {"username": user, "password": password, "eauth": "file"})
        assert st == 200, body
        self.token = body["return"][0]["token"]
        return body["return"][0]


class SseClient:
    """GET /events in a thread; (tag, data) pairs collected as salt-api writes them."""

    def __init__(self, api: Api, path="/events", headers=None):
        self.c = api.conn(timeout=120)
        h = {"Accept": "text/event-stream"}
        h.update(headers or {})
        self.c.request("GET", path, headers=h)
        self.r = self.c.getresponse()
        self.status = self.r.status
        self.headers = {k.lower(): v for k, v in self.r.getheaders()}
        self.events: list[tuple[str, dict]] = []
        self.retry_seen = False
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._read, daemon=True)
        if self.status == 200:
            self.t.start()

    def _read(self):
        tag = None
        try:
            while True:
                line = self.r.readline()
                if not line:
                    return
                line = line.decode().rstrip("\n")
                if line.startswith("retry: "):
                    self.retry_seen = True
                elif line.startswith("tag: "):
                    tag = line[5:]
                elif line.startswith("data: "):
                    full = json.loads(line[6:])
                    with self.lock:
                        self.events.append((tag, full))
        except Exception:
            return

    def wait(self, pred, timeout=30, what="event"):
        def found():
            with self.lock:
                return [e for e in self.events if pred(e[0])]
        return wait_for(found, timeout, what)

    def close(self):
        try:
            self.c.sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        self.c.close()


def api_master(env: Env, name="master", tls=None, **extra):
    users = env.root / f"{name}-users.txt"
    users.write_text(USERS)
    port = free_port()
    rc = {"port": port, "host": "127.0.0.1", "disable_ssl": True, "webhook_url": "/hook"}
    if tls:
        rc.update({"disable_ssl": False, "ssl_crt": str(tls[0]), "ssl_key": str(tls[1])})
    rc.update(extra.pop("rest_cherrypy", {}))
    # timeout 20: the machine may be loaded; a local call returns as soon as all answered.
    opts = {"rest_cherrypy": rc, "external_auth": {"file": {"^filename": str(users), **EAUTH}},
            "netapi_enable_clients": CLIENTS, "timeout": 20}
    opts.update(extra)
    m = env.master(name, **opts)
    m.start()
    m.wait_ready(timeout=120)
    return m, port


def start_minions(env, m, names):
    for n in names:
        env.minion(n, m).start()
    wait_for(lambda: set(names) <= set(m.keys().get("minions_pre", [])), 60, "pending keys")
    m.salt_key("-A", "-y")
    wait_for(lambda: set(m.salt_json("*", "test.ping", "--timeout", "20")) >= set(names), 120, "minions up")


@pytest.fixture(scope="module")
def lab(request):
    env = Env()
    failed_before = request.session.testsfailed
    try:
        m, port = api_master(env)
        start_minions(env, m, ["m1", "m2"])
        api = Api(port)
        api.login()
        yield env, m, api
        if request.session.testsfailed > failed_before:
            print(env.dump_logs())
    except BaseException:
        print(env.dump_logs())
        raise
    finally:
        env.close()


# ------------------------------------------------------------------ endpoints

def test_welcome_and_login_shapes(lab):
    env, m, api = lab
    st, body = api.json("GET", "/", token=False)
    assert st == 200 and body["return"] == "Welcome" and "local" in body["clients"]
    st, hd, data = api.request("GET", "/login", token=False)
    assert st == 200 and hd["www-authenticate"] == "Session" and json.loads(data)["return"] == "Please log in"
    st, hd, data = api.request("POST", "/login", {"username": "alice", "password": "secret", "eauth": "file"},
                               token=False)
    assert st == 200
    r = json.loads(data)["return"][0]
    assert set(r) == {"token", "expire", "start", "user", "eauth", "perms"}
    assert r["user"] == "alice" and r["eauth"] == "file" and r["expire"] > r["start"]
    assert r["perms"] == [".*", "@jobs", "@runner", "@wheel"]
    assert hd["x-auth-token"] == r["token"] and f"session_id={r['token']}" in hd["set-cookie"]
    # urlencoded and YAML bodies, YAML reply
    st, hd, data = api.request("POST", "/login", "username=alice&password=secret&eauth=file",
                               {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/x-yaml"},
                               token=False)
    assert st == 200 and hd["content-type"] == "application/x-yaml"
    assert yaml.safe_load(data)["return"][0]["user"] == "alice"
    st, _, _ = api.request("POST", "/login", "username: alice\npassword: secret\neauth: file\n",
                           {"Content-Type": "application/x-yaml"}, token=False)
    assert st == 200
    # refusals
    for creds in ({"username": "alice", "password": "nope", "eauth": "file"},
                  {"username": "mallory", "password": "x", "eauth": "file"},
                  {"username": "alice", "password": "secret", "eauth": "nosuch"}, {}):
        st, _, _ = api.request("POST", "/login", creds, token=False)
        assert st == 401, creds


def test_local_clients_and_jobs(lab):
    env, m, api = lab
    st, body = api.json("POST", "/", [{"client": "local", "tgt": "*", "fun": "test.ping"}])
    assert st == 200 and body == {"return": [{"m1": True, "m2": True}]}
    # the session cookie works like X-Auth-Token
    st, body = api.json("POST", "/", [{"client": "local", "tgt": "m1", "fun": "test.echo", "arg": "hi"}],
                        token=False, headers={"Cookie": f"session_id={api.token}"})
    assert st == 200 and body == {"return": [{"m1": "hi"}]}
    # urlencoded lowstate, `arg` repeated and typed like the CLI
    st, hd, data = api.request("POST", "/", urllib.parse.urlencode(
        [("client", "local"), ("tgt", "m1"), ("fun", "test.arg"), ("arg", "1"), ("arg", "two"), ("arg", "k=v")]),
        {"Content-Type": "application/x-www-form-urlencoded"})
    assert st == 200, data
    ret = json.loads(data)["return"][0]["m1"]
    assert ret["args"] == [1, "two"] and ret["kwargs"].get("k") == "v"
    # YAML lowstate, YAML reply
    st, hd, data = api.request("POST", "/", "- client: local\n  tgt: m2\n  fun: test.ping\n",
                               {"Content-Type": "application/x-yaml", "Accept": "application/x-yaml"})
    assert st == 200 and yaml.safe_load(data) == {"return": [{"m2": True}]}
    # two chunks in one request
    st, body = api.json("POST", "/", [{"client": "local", "tgt": "m1", "fun": "test.ping"},
                                      {"client": "local", "tgt": "m2", "fun": "test.ping"}])
    assert body["return"] == [{"m1": True}, {"m2": True}]
    # no minion matched: {} as Salt's LocalClient
    st, body = api.json("POST", "/", [{"client": "local", "tgt": "nobody", "fun": "test.ping"}])
    assert st == 200 and body == {"return": [{}]}
    # local_async -> jid, then /jobs/<jid> shows both returns
    st, body = api.json("POST", "/", [{"client": "local_async", "tgt": "*", "fun": "test.ping"}])
    job = body["return"][0]
    assert set(job) == {"jid", "minions"} and sorted(job["minions"]) == ["m1", "m2"]

    def returned():
        st, b = api.json("GET", f"/jobs/{job['jid']}")
        return st == 200 and b["return"][0] == {"m1": True, "m2": True} and b
    b = wait_for(returned, 30, "job returns in /jobs/<jid>")
    assert b["info"][0]["Function"] == "test.ping"
    st, body = api.json("GET", "/jobs")
    assert st == 200 and job["jid"] in body["return"][0]
    # local_batch: one item per minion
    st, body = api.json("POST", "/", [{"client": "local_batch", "tgt": "*", "fun": "test.ping", "batch": "1"}])
    assert st == 200 and sorted(body["return"], key=lambda d: list(d)[0]) == [{"m1": True}, {"m2": True}]


def test_local_subset_and_ssh_clients(lab):
    env, m, api = lab
    # local_subset: `subset` random minions among those that have the function
    seen = set()
    for _ in range(12):  # random picks: both minions come up sooner or later
        st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.ping", "subset": 1}])
        assert st == 200 and len(body["return"][0]) == 1 and list(body["return"][0].values()) == [True], body
        seen |= set(body["return"][0])
        if seen == {"m1", "m2"}:
            break
    assert seen == {"m1", "m2"}
    st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.echo", "arg": ["hi"],
                                       "subset": 5}])
    assert st == 200 and body == {"return": [{"m1": "hi", "m2": "hi"}]}
    # Salt's default subset is 3; `sub` is the legacy name
    st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.ping"}])
    assert st == 200 and body == {"return": [{"m1": True, "m2": True}]}
    st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.ping", "sub": 1}])
    assert st == 200 and len(body["return"][0]) == 1
    # no minion has the function: nothing published, {}
    st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "no_such.fun", "subset": 1}])
    assert st == 200 and body == {"return": [{}]}
    # cli=True: one item per minion, as cmd_cli's generator
    st, body = api.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.ping", "subset": 2,
                                       "cli": True}])
    assert st == 200 and sorted(list(i)[0] for i in body["return"]) == ["m1", "m2"]
    assert all(list(i.values())[0]["ret"] is True for i in body["return"])
    # the ACL must allow sys.list_functions too (cmd_subset publishes it first)
    bob = Api(api.port)
    bob.login("bob", "bobpw")
    st, _ = bob.json("POST", "/", [{"client": "local_subset", "tgt": "*", "fun": "test.ping", "subset": 1}])
    assert st == 401
    # ssh: enabled here, but sylvite has no salt-ssh: 400 (salt-api's code for a client it
    # cannot run), the warning logged once
    for _ in range(2):
        st, body = api.json("POST", "/", [{"client": "ssh", "tgt": "*", "fun": "test.ping"}])
        assert st == 400 and "salt-ssh" in json.dumps(body), body
    logf = Path(m.opts["log_file"])
    logs = [m.log_text(), logf.read_text(errors="replace") if logf.exists() else ""]
    assert max(t.count("sylvite has no salt-ssh; ssh chunks are refused") for t in logs) == 1, logs


def test_minions_endpoint(lab):
    env, m, api = lab
    st, body = api.json("GET", "/minions")
    assert st == 200 and set(body["return"][0]) == {"m1", "m2"}
    assert body["return"][0]["m1"]["id"] == "m1"
    st, body = api.json("GET", "/minions/m2")
    assert st == 200 and list(body["return"][0]) == ["m2"]
    st, body = api.json("POST", "/minions", [{"tgt": "m1", "fun": "test.ping"}])
    assert st == 202
    jid = body["return"][0]["jid"]
    assert body["return"][0]["minions"] == ["m1"] and body["_links"]["jobs"] == [{"href": f"/jobs/{jid}"}]


def test_runner_and_wheel_clients(lab):
    env, m, api = lab
    st, body = api.json("POST", "/", [{"client": "runner", "fun": "manage.up"}])
    assert st == 200 and body == {"return": [["m1", "m2"]]}
    st, body = api.json("POST", "/", [{"client": "runner_async", "fun": "manage.up"}])
    r = body["return"][0]
    assert st == 200 and r["tag"] == f"salt/run/{r['jid']}"
    st, body = api.json("POST", "/", [{"client": "wheel", "fun": "key.list_all"}])
    w = body["return"][0]
    assert w["tag"].startswith("salt/wheel/") and w["data"]["tag"] == w["tag"]
    assert set(w["data"]) == {"jid", "return", "success", "tag", "user", "fun"}  # as salt-api 3008.5
    assert w["data"]["fun"] == "wheel.key.list_all" and w["data"]["user"] == "alice" and w["data"]["success"]
    assert w["data"]["return"]["minions"] == ["m1", "m2"]
    st, body = api.json("POST", "/", [{"client": "wheel", "fun": "key.finger", "match": "m1"}])
    assert ":" in body["return"][0]["data"]["return"]["minions"]["m1"]
    # /keys and /keys/<id>
    st, body = api.json("GET", "/keys")
    assert st == 200 and body["return"]["minions"] == ["m1", "m2"] and "master.pub" in body["return"]["local"]
    st, body = api.json("GET", "/keys/m2")
    assert st == 200 and list(body["return"]["minions"]) == ["m2"]
    # key.gen_accept through POST /keys (a tarball), then key.reject / key.delete through wheel
    st, hd, data = api.request("POST", "/keys", {"mid": "newbox", "username": "alice", "password": "secret",
                                                 "eauth": "file"}, token=False)
    assert st == 200 and hd["content-type"] == "application/x-tar" and b"BEGIN PUBLIC KEY" in data
    assert "newbox" in m.keys()["minions"]
    st, body = api.json("POST", "/", [{"client": "wheel", "fun": "key.reject", "match": "newbox",
                                       "include_accepted": True}])
    assert body["return"][0]["data"]["return"] == {"minions_rejected": ["newbox"]}
    st, body = api.json("POST", "/", [{"client": "wheel", "fun": "key.delete", "match": "newbox"}])
    assert body["return"][0]["data"]["return"] == {}
    assert "newbox" not in json.dumps(m.keys())
    st, body = api.json("POST", "/", [{"client": "wheel_async", "fun": "key.list_all"}])
    assert set(body["return"][0]) == {"tag", "jid"}


def test_events_stream_hook_and_run(lab):
    env, m, api = lab
    sse = SseClient(api, headers={"X-Auth-Token": api.token})
    try:
        assert sse.status == 200 and sse.headers["content-type"] == "text/event-stream"
        st, body = api.json("POST", "/", [{"client": "local_async", "tgt": "m1", "fun": "test.ping"}])
        jid = body["return"][0]["jid"]
        ev = sse.wait(lambda t: t == f"salt/job/{jid}/ret/m1", 30, "the job's return event")
        tag, full = ev[0]
        assert full["tag"] == tag and full["data"]["return"] is True and full["data"]["id"] == "m1"
        assert sse.retry_seen
        # webhook -> salt/netapi/hook/<path>, Salt's payload
        st, body = api.json("POST", "/hook/ci/build", {"revision": "abc"})
        assert st == 200 and body == {"success": True}
        ev = sse.wait(lambda t: t == "salt/netapi/hook/ci/build", 30, "the webhook event")
        data = ev[0][1]["data"]
        assert data["post"] == {"revision": "abc"} and json.loads(data["body"]) == {"revision": "abc"}
        assert data["headers"]["Content-Type"] == "application/json"
    finally:
        sse.close()
    # the token in the query string (browsers' EventSource) and the session cookie
    for path, headers in ((f"/events?token={api.token}", {}), (f"/events?salt_token={api.token}", {}),
                          ("/events", {"Cookie": f"session_id={api.token}"})):
        s = SseClient(api, path, headers)
        assert s.status == 200, path
        s.close()
    s = SseClient(api, "/events", {})
    assert s.status == 401
    s = SseClient(api, "/events?token=" + "ab" * 32, {})
    assert s.status == 401
    s = SseClient(api, f"/events?foo=1&token={api.token}", {})
    assert s.status == 400
    # /run: credentials inside each chunk, or a Salt token
    st, body = api.json("POST", "/run", [{"client": "local", "tgt": "m1", "fun": "test.ping", "username": "alice",
                                          "password": "secret", "eauth": "file"}], token=False)
    assert st == 200 and body == {"return": [{"m1": True}]}
    st, body = api.json("POST", "/run", [{"client": "runner", "fun": "jobs.list_job", "jid": jid,
                                          "token": api.token}], token=False)
    assert st == 200 and body["return"][0]["jid"] == jid and body["return"][0]["Function"] == "test.ping"
    st, _ = api.json("POST", "/run", [{"client": "local", "tgt": "m1", "fun": "test.ping", "username": "alice",
                                       "password": "bad", "eauth": "file"}], token=False)
    assert st == 401
    st, _ = api.json("POST", "/run", [{"client": "local", "tgt": "m1", "fun": "test.ping"}], token=False)
    assert st == 401
    # /token, /stats
    st, body = api.json("POST", "/token", [{"username": "alice", "password": "secret", "eauth": "file"}], token=False)
    assert st == 200 and set(body[0]) == {"start", "token", "expire", "name", "eauth"}
    st, body = api.json("GET", "/stats")
    assert st == 200 and body["sylvite-api"]["requests"] > 0
    st, _ = api.json("GET", "/stats", token=False)
    assert st == 401


def ws_frames(ws, pred, timeout=30):
    """Text frames from a /ws client until pred(frame) holds; that frame."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ws.settimeout(max(0.1, deadline - time.monotonic()))
        frame = ws.recv()
        if pred(frame):
            return frame
    raise AssertionError("no matching /ws frame")


def test_ws_event_stream(lab):
    import websocket
    env, m, api = lab
    base = f"ws://127.0.0.1:{api.port}"
    ws = websocket.create_connection(f"{base}/ws/{api.token}", timeout=30)
    try:
        # nothing flows before "websocket client ready"; every message is acknowledged
        ws.send("hello")
        assert ws.recv() == "server received message"
        ws.send("websocket client ready")
        assert ws.recv() == "server received message"
        st, body = api.json("POST", "/", [{"client": "local_async", "tgt": "m1", "fun": "test.ping"}])
        jid = body["return"][0]["jid"]

        def job_ret(f):
            assert f.startswith("data: ") and f.endswith("\n\n"), f
            return json.loads(f[6:])["tag"] == f"salt/job/{jid}/ret/m1"
        full = json.loads(ws_frames(ws, job_ret)[6:])
        assert list(full) == ["data", "tag"] and full["data"]["return"] is True and full["data"]["id"] == "m1"
    finally:
        ws.close()
    # the token as ?token=, X-Auth-Token, or the session cookie
    for url, header in ((f"{base}/ws?token={api.token}", []), (f"{base}/ws", [f"X-Auth-Token: {api.token}"]),
                        (f"{base}/ws", [f"Cookie: session_id={api.token}"])):
        ws = websocket.create_connection(url, header=header, timeout=30)
        ws.send("ping?")
        assert ws.recv() == "server received message", url
        ws.close()
    # refusals: no token, a forged one (401); a plain GET (400, no upgrade)
    for url in (f"{base}/ws", f"{base}/ws/{'ab' * 32}"):
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            websocket.create_connection(url, timeout=30)
        assert e.value.status_code == 401, url
    st, _, _ = api.request("GET", "/ws")
    assert st == 400
    # format_events: SaltInfo's {"jobs": {...}} frames
    ws = websocket.create_connection(f"{base}/ws/{api.token}?format_events", timeout=30)
    try:
        ws.send("websocket client ready")
        assert ws.recv() == "server received message"
        st, body = api.json("POST", "/", [{"client": "local_async", "tgt": "m1", "fun": "test.ping"}])
        jid = body["return"][0]["jid"]

        def complete(f):
            d = json.loads(f)
            return "jobs" in d and d["jobs"].get(jid, {}).get("state") == "complete"
        job = json.loads(ws_frames(ws, complete))["jobs"][jid]
        assert job["fun"] == "test.ping" and job["tgt"] == "m1" and job["minions"]["m1"]["return"] is True
        assert job["minions"]["m1"]["success"] is True and "start_time" in job
    finally:
        ws.close()


def test_ws_slow_client_is_dropped(env):
    import websocket
    m, port = api_master(env, rest_cherrypy={"sse_queue_events": 5})
    api = Api(port)
    api.login()
    stuck = websocket.create_connection(f"ws://127.0.0.1:{port}/ws/{api.token}", timeout=30,
                                        sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),))
    try:
        stuck.send("websocket client ready")
        time.sleep(0.5)
        # events the stuck client never reads: it is dropped, everyone else goes on
        # (more than the kernel buffers: loopback send buffers grow to 4 MB)
        for i in range(400):
            t0 = time.monotonic()
            st, _ = api.json("POST", f"/hook/flood/{i}", {"pad": "x" * 20000})
            assert st == 200 and time.monotonic() - t0 < 5
        logf = Path(m.opts["log_file"])
        wait_for(lambda: "dropped: it let 5 events queue up" in m.log_text() + (
            logf.read_text(errors="replace") if logf.exists() else ""), 30, "the slow /ws client dropped")
        ok = websocket.create_connection(f"ws://127.0.0.1:{port}/ws/{api.token}", timeout=30)
        ok.send("websocket client ready")
        assert ok.recv() == "server received message"
        api.json("POST", "/hook/after", {"x": 1})
        ws_frames(ok, lambda f: json.loads(f[6:])["tag"] == "salt/netapi/hook/after")
        ok.close()
    finally:
        stuck.close()


def test_logout_revokes(lab):
    env, m, api = lab
    other = Api(api.port)
    other.login()
    st, body = other.json("POST", "/logout")
    assert st == 200 and body == {"return": "Your token has been cleared"}
    st, _ = other.json("POST", "/", [{"client": "local", "tgt": "m1", "fun": "test.ping"}])
    assert st == 401


# ------------------------------------------------------------------ bad input

def test_bad_input_is_refused_with_salt_api_codes(lab):
    env, m, api = lab
    ls = [{"client": "local", "tgt": "m1", "fun": "test.ping"}]
    cases = [
        ("malformed JSON", "POST", "/", "[{\"client\": ", {"Content-Type": "application/json"}, 400),
        ("malformed YAML", "POST", "/", "- client: [local\n  tgt: *", {"Content-Type": "application/x-yaml"}, 400),
        ("wrong content type", "POST", "/", json.dumps(ls), {"Content-Type": "application/xml"}, 415),
        ("lowstate not a list", "POST", "/", "\"test.ping\"", {"Content-Type": "application/json"}, 400),
        ("unknown client", "POST", "/", json.dumps([{"client": "bogus", "fun": "test.ping"}]),
         {"Content-Type": "application/json"}, 400),
        ("unacceptable Accept", "GET", "/", None, {"Accept": "text/html"}, 406),
        ("unknown path", "GET", "/nowhere", None, {}, 404),
        ("no token", "POST", "/", json.dumps(ls), {"Content-Type": "application/json", "X-Auth-Token": ""}, 401),
        ("forged token", "POST", "/", json.dumps(ls),
         {"Content-Type": "application/json", "X-Auth-Token": "0123456789abcdef" * 4}, 401),
        ("non-hex token", "POST", "/", json.dumps(ls),
         {"Content-Type": "application/json", "X-Auth-Token": "not-a-token"}, 401),
        ("token in the chunk not hex", "POST", "/run", json.dumps([dict(ls[0], token="zz")]),
         {"Content-Type": "application/json"}, 401),
    ]
    for what, method, path, body, headers, want in cases:
        st, _, data = api.request(method, path, body, headers)
        assert st == want, (what, st, data)
    # oversize body: refused from Content-Length before it is read
    big = json.dumps([{"client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["x" * (2 * 1024 * 1024)]}])
    st, _, _ = api.request("POST", "/", big, {"Content-Type": "application/json"})
    assert st == 413
    # ... and a chunked body that grows past the limit while it is read
    c = api.conn()
    c.putrequest("POST", "/")
    c.putheader("Content-Type", "application/json")
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("X-Auth-Token", api.token)
    c.endheaders()
    try:
        for _ in range(40):
            piece = b"x" * 65536
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    except OSError:
        pass  # the server answered and closed
    assert c.getresponse().status == 413
    c.close()
    # the ACL says no: bob may only run test.ping
    bob = Api(api.port)
    bob.login("bob", "bobpw")
    st, _ = bob.json("POST", "/", [{"client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["x"]}])
    assert st == 401  # salt-api's code for an ACL refusal
    st, _ = bob.json("POST", "/", [{"client": "runner", "fun": "manage.up"}])
    assert st == 401
    st, body = bob.json("POST", "/", [{"client": "local", "tgt": "m1", "fun": "test.ping"}])
    assert st == 200 and body == {"return": [{"m1": True}]}
    # an expired token: rewrite its expiry in the token store
    victim = Api(api.port)
    victim.login()
    # Salt 3008's cache envelope: <cachedir>/tokens/<token>.p = {"data": tdata, "_expires": t}
    tok_file = Path(m.opts["cachedir"]) / "tokens" / f"{victim.token}.p"
    data = msgpack.unpackb(tok_file.read_bytes(), raw=False)
    inner = data["data"] if "data" in data else data
    inner["expire"] = time.time() - 5
    tok_file.write_bytes(msgpack.packb(data, use_bin_type=True))
    st, _ = victim.json("POST", "/", ls)
    assert st == 401
    # every refusal above is logged
    log = (Path(m.opts["log_file"])).read_text(errors="replace")
    assert "api: POST / from 127.0.0.1 refused: 400 Invalid JSON document" in log
    assert "refused: 413" in log and "refused: 415" in log and "refused: 401" in log
    # still serving
    st, body = api.json("POST", "/", ls)
    assert st == 200 and body == {"return": [{"m1": True}]}


def test_slow_clients_do_not_block_others(lab):
    env, m, api = lab
    # a client that sends half a request head and stalls; another that opens /events and
    # never reads; a flood of connections that send nothing
    slow = socket.create_connection(("127.0.0.1", api.port))
    slow.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
    stuck = socket.create_connection(("127.0.0.1", api.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.sendall(f"GET /events HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {api.token}\r\n\r\n".encode())
    idle = [socket.create_connection(("127.0.0.1", api.port)) for _ in range(50)]
    try:
        # fill the stuck client's pipe with events (hooks) while others get answers in time
        for i in range(40):
            t0 = time.monotonic()
            st, _ = api.json("POST", f"/hook/flood/{i}", {"pad": "x" * 20000})
            assert st == 200
            assert time.monotonic() - t0 < 5
        t0 = time.monotonic()
        st, body = api.json("POST", "/", [{"client": "local", "tgt": "*", "fun": "test.ping"}])
        assert st == 200 and body == {"return": [{"m1": True, "m2": True}]}
        assert time.monotonic() - t0 < 10
        # the master's own CLI path is unaffected
        assert m.salt_json("*", "test.ping") == {"m1": True, "m2": True}
    finally:
        for s in [slow, stuck, *idle]:
            s.close()


# ------------------------------------------------------------------ TLS and pepper

def make_cert(d: Path):
    crt, key = d / "api.crt", d / "api.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def pepper(port, *args, scheme="http", user="alice", password="secret", timeout=120):
    env = dict(os.environ, SALTAPI_URL=f"{scheme}://127.0.0.1:{port}", SALTAPI_USER=user, SALTAPI_PASS=password,
               SALTAPI_EAUTH="file", HOME=os.environ.get("HOME", "/tmp"))
    with tempfile.TemporaryDirectory(prefix="pepper-") as d:
        return subprocess.run([str(VENV / "bin" / "pepper"), "--non-interactive", "-x", str(Path(d) / "cache"),
                               *args], capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)


def test_pepper_against_sylvite(lab):
    env, m, api = lab
    # pepper prints with Salt's nested outputter
    r = pepper(api.port, "*", "test.ping")
    assert r.returncode == 0, r.stderr
    assert "m1:\n    True" in r.stdout and "m2:\n    True" in r.stdout, r.stdout
    r = pepper(api.port, "--client", "runner", "manage.up")
    assert r.returncode == 0, r.stderr
    assert "return:\n        - m1\n        - m2" in r.stdout, r.stdout
    r = pepper(api.port, "--client", "wheel", "key.list_all")
    assert r.returncode == 0, r.stderr
    assert "minions:\n    - m1\n    - m2" in r.stdout, r.stdout
    r = pepper(api.port, "--client", "local_async", "*", "test.ping")
    assert r.returncode == 0, r.stderr
    jid = re.search(r"jid:\n\s+(\d{20})", r.stdout)
    assert jid, r.stdout
    # the job pepper started is visible through the API
    wait_for(lambda: api.json("GET", f"/jobs/{jid.group(1)}")[1]["return"][0] == {"m1": True, "m2": True}, 30,
             "the pepper job's returns")


def test_tls(env, tmp_path):
    crt, key = make_cert(tmp_path)
    m, port = api_master(env, "tlsmaster", tls=(crt, key))
    start_minions(env, m, ["t1"])
    api = Api(port, tls=True)
    api.login()
    st, body = api.json("POST", "/", [{"client": "local", "tgt": "*", "fun": "test.ping"}])
    assert st == 200 and body == {"return": [{"t1": True}]}
    # plain HTTP to the TLS port gets nothing useful (and does not hurt the server)
    plain = Api(port)
    with pytest.raises(Exception):
        plain.request("GET", "/", timeout=5)
    r = pepper(port, "--ignore-ssl-errors", "*", "test.ping", scheme="https")
    assert r.returncode == 0, r.stderr
    assert "t1:\n    True" in r.stdout, r.stdout


def test_bad_api_config_refuses_to_start(env):
    m = env.master("badcfg", rest_cherrypy={"port": 8123})  # ssl on, no ssl_crt/ssl_key
    m.start()
    wait_for(lambda: not m.proc.alive(), 120, "salt-master to exit")
    assert "ssl_crt" in m.log_text() + (Path(m.opts["log_file"]).read_text() if Path(m.opts["log_file"]).exists() else "")
    m2 = env.master("noapi")  # no rest_cherrypy block: no API, master fine
    m2.start()
    m2.wait_ready(timeout=120)
    assert "REST API" not in Path(m2.opts["log_file"]).read_text()
