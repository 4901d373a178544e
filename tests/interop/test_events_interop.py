"""Issue 18, item 1 (event bus) against real Salt 3008.5:
  - Salt's own Python client (salt.utils.event.get_master_event(opts, sock_dir,
    listen=True)) reads sylvite's master_event_pub.ipc: a real salt-minion's salt/auth,
    minion_start, salt/minion/<id>/start, event.send from its salt-call, a job's new/ret;
  - the output of sylvite's `salt-run state.event` is byte for byte the output of real
    Salt's `salt-run state.event` reading the same bus (same events, same stamps);
  - the same actions under a real salt-master give the same tags and payload keys
    (modulo stamps, jids and timestamps) as under sylvite.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from conftest import SALT3008
from sylvite_harness import BIN, wait_for

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
from test_events import EventStream  # noqa: E402

REAL_MINION = str(SALT3008 / "salt-minion")
PY = str(SALT3008 / "python")


def real_minion(env, master, name, **opts):
    m = env.minion(name, master, **opts)
    m.write_config(multiprocessing=False, log_level_logfile="debug")
    return m.start(binary=REAL_MINION)


def accept(master, name, binary_dir=None):
    def pending():
        r = master.cli("salt-key", "-L", "--out", "json", binary_dir=binary_dir)
        return r.returncode == 0 and name in json.loads(r.stdout).get("minions_pre", [])
    wait_for(pending, 90, f"{name} pending")
    r = master.cli("salt-key", "-a", name, "-y", binary_dir=binary_dir)
    assert r.returncode == 0, r.stdout + r.stderr


# A subscriber written with Salt's own library, run by the venv's Python: prints one JSON
# line per event ({"tag", "data"}) until killed.
SALT_SUBSCRIBER = r"""
import json, sys
import salt.utils.event
sock_dir = sys.argv[1]
opts = {"sock_dir": sock_dir, "transport": "tcp", "ipc_mode": "ipc"}
ev = salt.utils.event.get_master_event(opts, sock_dir, listen=True)
print(json.dumps({"tag": "__ready__", "data": {}}), flush=True)
while True:
    e = ev.get_event(full=True, wait=1, auto_reconnect=True)
    if e is None:
        continue
    print(json.dumps({"tag": e["tag"], "data": e["data"]}, default=repr), flush=True)
"""


class SaltLibSubscriber:
    def __init__(self, sock_dir: Path):
        self.p = subprocess.Popen([PY, "-c", SALT_SUBSCRIBER, str(sock_dir)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.events: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: self.tagged("__ready__"), 60, "Salt's event client to connect")

    def _read(self):
        for line in self.p.stdout:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self.lock:
                self.events.append(e)

    def tagged(self, tag):
        with self.lock:
            return [e["data"] for e in self.events if e["tag"] == tag]

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def test_salt_library_reads_sylvite_bus(env):
    master = env.master().start().wait_ready()
    sub = SaltLibSubscriber(master.root / "sock")
    try:
        minion = real_minion(env, master, "rev1")
        wait_for(lambda: any(d.get("act") == "pend" for d in sub.tagged("salt/auth")), 90, "salt/auth pend")
        accept(master, "rev1")
        wait_for(lambda: [d for d in sub.tagged("salt/key") if d.get("act") == "accept"], 30, "salt/key accept")
        start = wait_for(lambda: sub.tagged("salt/minion/rev1/start"), 90, "salt/minion/rev1/start")
        assert start[0]["id"] == "rev1" and start[0]["cmd"] == "_minion_event"
        assert start[0]["data"].startswith("Minion rev1 started at ")
        assert "_stamp" in start[0]
        assert sub.tagged("minion_start")
        wait_for(lambda: master.salt_json("rev1", "test.ping", "-t", "10").get("rev1") is True, 90, "rev1 up")
        tag = f"interop/{uuid.uuid4().hex}"
        r = minion.salt_call("event.send", tag, '{"a": 1}', binary_dir=SALT3008)
        assert r.returncode == 0, r.stdout + r.stderr
        ev = wait_for(lambda: sub.tagged(tag), 30, "the real salt-call's event.send")
        # Salt's salt-call passes its __pub_* keys to event.send's **kwargs: they are data
        assert ev[0]["data"]["a"] == 1 and ev[0]["data"]["__pub_tgt"] == "salt-call" and ev[0]["id"] == "rev1"
        r = master.salt("rev1", "event.send", tag + "/daemon", "foo=bar")
        assert r.returncode == 0, r.stdout + r.stderr
        ev = wait_for(lambda: sub.tagged(tag + "/daemon"), 30, "the real minion's event.send")
        assert ev[0]["data"]["foo"] == "bar" and ev[0]["pretag"] is None
        news = [e for e in sub.events if e["tag"].endswith("/new") and e["data"].get("fun") == "event.send"]
        assert news, "salt/job/<jid>/new"
        jid = news[-1]["data"]["jid"]
        wait_for(lambda: sub.tagged(f"salt/job/{jid}/ret/rev1"), 30, "the job's return event")
    finally:
        sub.close()


def real_state_event(conf_dir: Path, *args):
    """Real Salt's salt-run state.event (it runs the runner in-process: it reads the bus
    of the master whose config it is given)."""
    proc_dir(conf_dir)
    return subprocess.Popen([str(SALT3008 / "salt-run"), "-c", str(conf_dir), "state.event", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def proc_dir(conf_dir: Path):
    """Real salt-run writes <cachedir>/proc/<jid> (sylvite's master keeps no such file)."""
    (conf_dir.parent / "cache" / "proc").mkdir(parents=True, exist_ok=True)


class LineStream:
    """A command's stdout lines, collected in the background."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.lines: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.lines)

    def close(self) -> str:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        return self.p.stderr.read() if self.p.stderr else ""


def test_state_event_output_is_salts(env):
    """sylvite's salt-run state.event and real Salt's, reading the same sylvite bus, print
    the same bytes for the same events (one-line and pretty forms)."""
    master = env.master().start().wait_ready()
    minion = env.minion("sev1", master).start()
    wait_for(lambda: "sev1" in master.keys().get("minions_pre", []), 30, "sev1 pending")
    assert master.salt_key("-a", "sev1", "-y").returncode == 0
    wait_for(lambda: master.salt_json("sev1", "test.ping", "-t", "5").get("sev1") is True, 60, "sev1 up")
    payloads = ['{"a": 1, "b": [1, 2.5, null, true], "c": {"z": "é", "y": {}}}', '{}',
                '{"text": "tab\\there \\"quoted\\"", "n": -3, "big": 12345678901234}']
    for pretty in ("pretty=False", "pretty=True"):
        ours = LineStream([str(BIN / "salt-run"), "-c", str(master.conf_dir), "state.event", "diff/*", pretty])
        proc_dir(master.conf_dir)
        theirs = LineStream([str(SALT3008 / "salt-run"), "-c", str(master.conf_dir), "state.event", "diff/*",
                             pretty])
        try:
            probe = f"diff/probe/{uuid.uuid4().hex}"

            def both_subscribed():
                minion.salt_call("event.send", probe)
                return probe in ours.text() and probe in theirs.text()
            wait_for(both_subscribed, 120, "both state.event to be subscribed", interval=1)
            for i, p in enumerate(payloads):
                r = minion.salt_call("event.send", f"diff/{pretty}/{i}", p)
                assert r.returncode == 0, r.stdout + r.stderr
            last = f"diff/{pretty}/{len(payloads) - 1}"
            wait_for(lambda: last in ours.text() and last in theirs.text(), 60, "the events on both")
            time.sleep(1)
        finally:
            o_err = ours.close()
            t_err = theirs.close()

        def after_probes(text):
            # from the first payload event on (the probes before it differ in number)
            i = text.find(f"diff/{pretty}/0\t")
            return text[i:] if i >= 0 else ""
        o, t = after_probes(ours.text()), after_probes(theirs.text())
        assert o and o == t, f"sylvite:\n{o}\nSalt:\n{t}\nstderr: {o_err}\n{t_err}"
        assert sum(1 for line in o.splitlines() if line.startswith(f"diff/{pretty}/")) == len(payloads), o


def normalized_events(lines: list[str]) -> list[tuple[str, object]]:
    out = []
    for line in lines:
        tag, _, data = line.partition("\t")
        d = json.loads(data)
        tag = re.sub(r"\d{20}", "<jid>", tag)
        out.append((tag, d))
    return out


def shape(v):
    """Keys (recursively) and scalar types, values dropped where they differ per run."""
    if isinstance(v, dict):
        return {k: (shape(x) if k not in ("_stamp", "jid", "ts", "tok", "pub", "data") or isinstance(x, dict)
                    else type(x).__name__) for k, x in v.items()}
    return type(v).__name__


def test_same_events_as_a_real_salt_master(env):
    """One real salt-minion's salt-call event.send, under a real salt-master and under
    sylvite: the same tag and payload shape on the bus (Salt's state.event output of each)."""
    results = {}
    for kind in ("real", "sylvite"):
        master = env.master(name=f"{kind}m")
        if kind == "real":
            master.start(binary=str(SALT3008 / "salt-master"))
            wait_for(lambda: (master.root / "sock" / "master_event_pub.ipc").exists(), 60, "real master up")
            key_dir = SALT3008
        else:
            master.start()
            master.wait_ready()
            wait_for(lambda: (master.root / "sock" / "master_event_pub.ipc").exists(), 30, "event bus up")
            key_dir = None
        name = f"same-{kind}"
        minion = real_minion(env, master, name)
        accept(master, name, binary_dir=key_dir)

        def pings():
            r = master.cli("salt", "--out", "json", "--static", name, "test.ping", "-t", "10", binary_dir=key_dir,
                           timeout=120)
            try:
                return json.loads(r.stdout or "{}").get(name) is True
            except json.JSONDecodeError:
                return False
        wait_for(pings, 180, f"{name} to answer", interval=2)
        stream = real_state_event(master.conf_dir, "same/*", "count=1")
        try:
            def send():
                minion.salt_call("event.send", "same/tag", '{"k": "v", "n": [1, 2]}', binary_dir=SALT3008)
                return stream.poll() is not None
            wait_for(send, 120, "state.event to see same/tag", interval=2)
            out, err = stream.communicate(timeout=30)
        finally:
            if stream.poll() is None:
                os.killpg(stream.pid, signal.SIGKILL)
                stream.wait()
        lines = [l for l in out.splitlines() if l.startswith("same/")]
        assert lines, out + err
        results[kind] = normalized_events(lines[:1])
        for n in list(env.nodes):
            n.kill()
    (rt, rd), (st, sd) = results["real"][0], results["sylvite"][0]
    assert rt == st == "same/tag"
    def plain(d):
        return {k: v for k, v in d.items() if not k.startswith("__pub_")}
    assert plain(rd["data"]) == plain(sd["data"]) == {"k": "v", "n": [1, 2]}
    assert sorted(rd["data"]) == sorted(sd["data"])
    rd["id"] = sd["id"] = "x"
    assert list(rd.keys()) == list(sd.keys()), (rd, sd)
    assert shape(rd) == shape(sd), (rd, sd)
