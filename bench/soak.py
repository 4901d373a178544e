#!/bin/sh
# -*- mode: python -*-
# Re-exec with the project venv's Python (cryptography, for the pre-seeded keys); the rest is Python.
''''exec "${SYLVITE_VENV:-$(dirname "$0")/../build/venv}/bin/python" "$0" "$@" # '''
"""bench/soak.py (issue 21, goal 5): a soak of a sylvite master. "1,000 minions for an hour
with jobs, pillar refreshes, API calls and a master restart in the middle: CPU, RSS flat,
0 lost, recorded."

One sylvite master (no real Salt here) with the REST API (rest_cherrypy on a free port,
disable_ssl, the file eauth backend, as bench/api.py) and a small pillar tree (a top.sls
matching on grains and a Jinja sls using grains['id'], so every pillar is rendered for its
minion), N swarm minions (bench/swarm, keys pre-seeded as accepted), for --seconds:

  jobs        every --job-interval: `salt --async '<prefix>*'` test.ping / cmd.run, alternately
  pillar      every --pillar-interval: saltutil.refresh_pillar; each swarm minion sends a real
              `_pillar` request (send_private reply decrypted and verified), then returns True
  API         every --api-interval: POST / local_async test.ping to the swarm's target (a job
              tracked like the others), GET /jobs/<the previous one's jid>, and GET /keys or
              GET /minions/<one id> by turns; answers other than 2xx are errors
  restart     at --restart-at (default half way): `test.sleep 1` is published; once every minion
              has received it the master is stopped, left down --restart-pause (2 s) and started
              again on the same dirs and ports, so the returns come while it is down (sent again
              until it is back); one publish is tried while it is down (publish_failed); the
              time until every minion has signed in again is measured
  samples     every --sample-interval: CPU% (of one core) and RSS of every master process

Lost: a job the master acknowledged (the CLI or the API got its jid) must get a return
acked from every minion that was connected when it was published: all N outside the
restart window; inside it (master up again, minions still reconnecting) the minions that
received it. A publish refused while the master is down is counted in publish_failed, not
as lost. Flat: per master lifetime (before and after the restart), the RSS slope over the
lifetime's second half (KB/min) and the mean CPU of each half.

  bench/soak.py                                                   # 1,000 minions, 1 hour, zeromq
  bench/soak.py --minions 1000 --seconds 3600 --out bench/results/soak-1h.json
  bench/soak.py --minions 200 --seconds 180 --job-interval 5 --pillar-interval 30   # a 3-minute trial
  bench/soak.py --transport tcp --minions 200 --seconds 180 --keep
Writes bench/results/soak-latest.json (or --out) and prints a summary.
"""

import argparse
import atexit
import fnmatch
import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.scenarios import _slope  # noqa: E402  (least-squares slope, shared with the long run)
from benchlib.core import (REPO, Swarm, SylviteMaster, free_port, jid_epoch, loadavg, pct,  # noqa: E402
                           preseed_accepted, proc_cpu_seconds, proc_rss_kb, process_tree, rmtree, stop_all,
                           tcp_established_to)

USER, PASSWORD = "soak", "soakpw"

TOP = """base:
  '*':
    - common
    - minion
  'roles:db':
    - match: grain
    - db
"""
COMMON = """ntp_servers:
  - 0.pool.ntp.org
  - 1.pool.ntp.org
motd: soak test
"""
MINION = """{%- set idx = grains.get('swarm_index', 0) | int %}
{%- set role = grains.get('roles', ['none'])[0] %}
soak:
  id: {{ grains['id'] }}
  role: {{ role }}
  shard: {{ idx % 16 }}
  peers:
{%- for i in range(3) %}
    - {{ grains['id'] }}-peer{{ i }}
{%- endfor %}
"""
DB = """postgres:
  owner: {{ grains['id'] }}
  max_connections: {{ 100 + (grains.get('swarm_index', 0) | int) % 50 }}
"""


def log(msg: str):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _r(x, nd=2):
    return None if x is None else round(x, nd)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# ----------------------------------------------------------------------------- REST API
class Api:
    """The API load in a thread of its own: one keep-alive connection, a round every
    `interval` seconds. local_async jids go to `jids` (tracked as jobs by the main loop)."""

    def __init__(self, port: int, tgt: str, interval: float, one_id: str):
        self.port, self.tgt, self.interval, self.one_id = port, tgt, interval, one_id
        self.jids: queue.Queue = queue.Queue()
        self.stats: dict[str, dict] = {}
        self.errors: list[tuple[float, str, str]] = []  # (time of the failure, endpoint, what)
        self.logins = 0
        self._stop = threading.Event()
        self._conn = None
        self._token = None
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join(timeout=60)

    def _request(self, method: str, path: str, body=None, auth=True):
        reused = self._conn is not None
        try:
            return self._request1(method, path, body, auth)
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
            if not reused:
                raise
            # A keep-alive connection the server closed (it restarted): once more on a new one,
            # as HTTP clients do.
            self._conn.close()
            self._conn = None
            return self._request1(method, path, body, auth)

    def _request1(self, method: str, path: str, body=None, auth=True):
        if self._conn is None:
            self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        if auth and self._token:
            h["X-Auth-Token"] = self._token
        self._conn.request(method, path, body=data, headers=h)
        r = self._conn.getresponse()
        return r.status, r.read()

    def _call(self, name: str, method: str, path: str, body=None):
        """One counted call: (status, data) or None on a connection error."""
        st = self.stats.setdefault(name, {"ok": 0, "errors": 0, "lat_ms": []})
        t0 = time.time()
        try:
            status, data = self._request(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            st["errors"] += 1
            self.errors.append((time.time(), name, f"{type(e).__name__}: {e}"[:200]))
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return None
        if 200 <= status < 300:
            st["ok"] += 1
            st["lat_ms"].append((time.time() - t0) * 1000)
        else:
            st["errors"] += 1
            self.errors.append((time.time(), name, f"HTTP {status}: {data[:200]!r}"))
            if status == 401:
                self._token = None  # log in again next round
        return status, data

    def _login(self) -> bool:
        r = self._call("POST /login", "POST", "/login", {"username": USER, "password": PASSWORD, "eauth": "file"})
        if not r or r[0] != 200:
            return False
        try:
            self._token = json.loads(r[1])["return"][0]["token"]
        except (ValueError, KeyError, IndexError, TypeError):
            return False
        self.logins += 1
        return True

    def _run(self):
        prev_jid = None
        k = 0
        while not self._stop.is_set():
            t0 = time.time()
            if self._token or self._login():
                r = self._call("POST / local_async", "POST", "/",
                               [{"client": "local_async", "tgt": self.tgt, "fun": "test.ping"}])
                jid = None
                if r and r[0] == 200:
                    try:
                        jid = json.loads(r[1])["return"][0]["jid"]
                    except (ValueError, KeyError, IndexError, TypeError):
                        jid = None
                    if jid:
                        self.jids.put((jid, t0))
                    else:
                        self.errors.append((t0, "POST / local_async", f"200 without a jid: {r[1][:200]!r}"))
                if prev_jid:
                    self._call("GET /jobs/<jid>", "GET", f"/jobs/{prev_jid}")
                if k % 2 == 0:
                    self._call("GET /keys", "GET", "/keys")
                else:
                    self._call("GET /minions/<id>", "GET", f"/minions/{self.one_id}")
                prev_jid = jid or prev_jid
                k += 1
            self._stop.wait(max(0.0, self.interval - (time.time() - t0)))
        if self._conn is not None:
            self._conn.close()


# ----------------------------------------------------------------------------- sampler
class Sampler:
    """CPU% (of one core) and RSS of every master process every `every` seconds, in a thread.
    `lifetime` is 0 before the restart and 1 after; the CPU baseline restarts with it."""

    def __init__(self, master: SylviteMaster, swarm_pid: int, lock: threading.Lock, t0: float, every: float):
        self.m, self.swarm_pid, self.lock, self.t0, self.every = master, swarm_pid, lock, t0, every
        self.lifetime = 0
        # [t_s, lifetime, cpu_pct, rss_kb, processes, swarm_cpu_pct, rss_kb of the main process]
        self.samples: list[list] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._t.start()

    def stop(self):
        self._stop.set()
        self._t.join(timeout=30)

    def _read(self):
        with self.lock:
            if self.m.proc is None or self.m.proc.poll() is not None:
                return None
            pids = process_tree(self.m.proc.pid)
            return (self.lifetime, sum(proc_cpu_seconds(p) for p in pids), sum(proc_rss_kb(p) for p in pids),
                    len(pids), proc_rss_kb(self.m.proc.pid))

    def _run(self):
        last = None  # (lifetime, t, cpu, swarm_cpu)
        first = True
        while not self._stop.wait(0 if first else (self.every if last is not None else 0.2)):
            first = False
            t = time.time()
            r = self._read()
            w = proc_cpu_seconds(self.swarm_pid)
            if r is None:
                last = None
                continue
            lt, c, rss, n, rss_main = r
            if last is not None and last[0] == lt and t > last[1]:
                self.samples.append([round(t - self.t0, 2), lt, round(100 * (c - last[2]) / (t - last[1]), 1), rss, n,
                                     round(100 * (w - last[3]) / (t - last[1]), 1), rss_main])
            last = (lt, t, c, w)


# ----------------------------------------------------------------------------- the soak
class Soak:
    def __init__(self, a):
        self.a = a
        self.n = a.minions
        self.tgt = f"{a.id_prefix}*"
        self.notes: list[str] = []
        self.jobs: list[dict] = []      # every acknowledged publish, in order
        self.pending: list[dict] = []   # not finalized yet
        self.publish_failed: list[dict] = []
        self.restart: dict = {}
        self.window = None              # (t_stop, t_all_back): the restart window
        self.master_lock = threading.Lock()
        self.tmp = Path(tempfile.mkdtemp(prefix="sylvite-soak-", dir=a.tmp_dir))
        self.master: SylviteMaster | None = None
        self.swarm: Swarm | None = None
        self.api: Api | None = None
        self.sampler: Sampler | None = None
        self.k = 0
        # minions the API's local_async target (a glob) matches
        self.api_targets = sum(fnmatch.fnmatchcase(f"{a.id_prefix}{i:05d}", a.api_tgt or self.tgt) for i in range(self.n))

    # -- setup
    def setup(self):
        a = self.a
        root = self.tmp / "master"
        root.mkdir(parents=True)
        users = self.tmp / "users.txt"
        users.write_text(f"{USER}:{PASSWORD}\n")
        self.api_port = free_port()
        opts = {
            "rest_cherrypy": {"port": self.api_port, "host": "127.0.0.1", "disable_ssl": True},
            "external_auth": {"file": {"^filename": str(users), "^filetype": "text",
                                       USER: [".*", "@runner", "@wheel", "@jobs"]}},
            "api_logfile": str(root / "api.log"),
            "api_pidfile": str(root / "api.pid"),
            "netapi_enable_clients": ["local", "local_async", "runner", "wheel"],
        }
        if a.keep_jobs is not None:
            opts["keep_jobs_seconds"] = a.keep_jobs
        for kv in a.master_opt or []:
            k, v = kv.split("=", 1)
            opts[k] = json.loads(v)
        self.master_opts = opts
        self.master = SylviteMaster(root, Path(a.sylvite_bin), opts, transport=a.transport)
        pillar = root / "srv" / "pillar"
        (pillar / "top.sls").write_text(TOP)
        (pillar / "common.sls").write_text(COMMON)
        (pillar / "minion.sls").write_text(MINION)
        (pillar / "db.sls").write_text(DB)
        # The swarm first, paused: it loads (or generates, once) the keys the pre-seeding reads.
        pool = a.pool or max(2, min(64, self.n // 50))
        if a.transport == "zeromq":
            pool = a.pool or max(pool, min(64, -(-min(256, self.n) // 8)))
        self.swarm = Swarm(Path(a.swarm), self.tmp / "swarm", self.master, self.n, Path(a.keys_dir), pool,
                           a.swarm_threads, id_prefix=a.id_prefix, transport=a.transport, extra=("--paused",))
        ke = self.swarm.keys_event
        log(f"swarm keys: {ke['loaded']} loaded, {ke['generated']} generated in {ke['seconds']:.1f}s")
        secs = preseed_accepted(Path(a.keys_dir), Path(self.master.opts["pki_dir"]), self.n, id_prefix=a.id_prefix)
        log(f"pre-seeded {self.n} accepted keys in {secs:.1f}s")
        self.master.start()
        self.master.wait_ready(timeout=120)
        log(f"master up (pid {self.master.proc.pid}, RSS {self.master.rss_kb()} KB), API on {self.api_port}")
        t0 = time.time()
        self.swarm.cmd("start", "start")
        ok, st = self.swarm.wait_status(lambda x: x["ready"] >= self.n, a.onboard_timeout, interval=0.25)
        if a.transport == "zeromq":
            deadline = time.monotonic() + 60
            while tcp_established_to(self.master.publish_port) < self.n and time.monotonic() < deadline:
                time.sleep(0.1)
        self.onboard = {"seconds": round(time.time() - t0, 2), "ready": st["ready"],
                        "auth_attempts": st["auth_attempts"], "auth_timeouts": st["auth_timeouts"]}
        log(f"onboarded {st['ready']}/{self.n} in {self.onboard['seconds']}s")
        if not ok:
            raise RuntimeError(f"only {st['ready']} of {self.n} minions signed in within {a.onboard_timeout:.0f}s")
        # Warm-up (not counted): every minion answers, the pillar renders for one.
        jid, _, _ = self.master.publish(self.tgt, "test.ping")
        j = self.swarm.wait_job(jid, self.n, 60)
        if j["acked"] < self.n:
            self.notes.append(f"warm-up ping: {j['acked']} of {self.n} answered")

    # -- jobs
    def publish(self, fun: str, *args, kind: str) -> str | None:
        t0 = time.time()
        try:
            jid, _, _ = self.master.publish(self.tgt, fun, *args)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            msg = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
            self.publish_failed.append({"t": round(t0 - self.t0, 2), "fun": fun, "kind": kind, "error": msg})
            return None
        self.track(jid, fun, kind)
        return jid

    def track(self, jid: str, fun: str, kind: str):
        j = {"jid": jid, "fun": fun, "kind": kind, "t": round(jid_epoch(jid) - self.t0, 2),
             "targets": self.api_targets if kind == "api" else self.n}
        self.jobs.append(j)
        self.pending.append(j)

    def finalize_ready(self, force: bool = False):
        """Close the jobs whose returns are all in (every minion finished), or older than
        --job-timeout (or all of them with force, after the final wait)."""
        now = time.time()
        still = []
        for j in self.pending:
            age = now - (self.t0 + j["t"])
            if age < 1.0 and not force:
                still.append(j)
                continue
            s = self.swarm.job(j["jid"])
            done = s["acked"] + s["failed"]
            # finished: every target; or, after 30 s, every minion that received it (a job
            # some minion never got: counted lost against its targets); or too old
            if done >= j["targets"] or (age > 30 and done >= s["received"]) or age > self.a.job_timeout or force:
                self._finalize(j)
            else:
                still.append(j)
        self.pending = still

    def _finalize(self, j: dict):
        s = self.swarm.cmd(f"job {j['jid']} full", "job")
        t_pub = jid_epoch(j["jid"])
        lat = [(e[2] / 1e9 - t_pub) * 1000 for e in s["entries"] if e[2]]
        j.update({"received": s["received"], "acked": s["acked"], "failed": s["failed"],
                  "p50_ms": _r(pct(lat, 50)), "p99_ms": _r(pct(lat, 99)), "last_ms": _r(max(lat)) if lat else None})

    def drain_api_jids(self):
        if not self.api:
            return
        while True:
            try:
                jid, _ = self.api.jids.get_nowait()
            except queue.Empty:
                return
            self.track(jid, "test.ping", "api")

    # -- restart
    def do_restart(self):
        a, n = self.a, self.n
        res = {}
        # A job still running on every minion when the master stops: its returns come while
        # the master is down (sent again until it is back), then go to the new master (a reply
        # that does not decrypt would make the minion sign in again and send once more; the
        # sylvite master keeps the session keys in cachedir/sessions, so they decrypt).
        jid = self.publish("test.sleep", str(a.restart_job_sleep), kind="restart-pre")
        if jid:
            deadline = time.monotonic() + 10
            s = self.swarm.job(jid)
            while s["received"] < n and time.monotonic() < deadline:
                time.sleep(0.01)
                s = self.swarm.job(jid)
            res.update({"pre_jid": jid, "pre_received_at_stop": s["received"], "pre_acked_at_stop": s["acked"]})
        st0 = self.swarm.status()
        t_stop = time.time()
        with self.master_lock:
            self.master.stop()
            t_down = time.time()
        # A publish while the master is down: refused, counted in publish_failed (not lost).
        self.publish("test.ping", kind="while-down")
        if a.drop_session_keys:
            # The new master will not know the minions' session keys: their returns get "bad
            # load", they sign in again and send once more (Salt's _crypted_transfer).
            rmtree(Path(self.master.opts["cachedir"]) / "sessions")
        time.sleep(max(0.0, a.restart_pause - (time.time() - t_down)))
        with self.master_lock:
            self.master.start()
            self.sampler.lifetime = 1
        t_up = self.master.wait_ready(timeout=120)
        log(f"master restarted: stopped in {t_down - t_stop:.2f}s, listening again {t_up - t_stop:.2f}s after the stop")
        res.update({"t": round(t_stop - self.t0, 2), "stop_s": round(t_down - t_stop, 3),
                    "down_s": round(t_up - t_stop, 3), "pid": self.master.proc.pid})
        since = int(t_stop * 1e9)
        if a.transport == "zeromq":
            # The SUB sockets reconnect by themselves (libzmq); a minion signs in again at the
            # first publish it cannot decrypt: wait for the sockets, then publish.
            deadline = time.monotonic() + 60
            conns = tcp_established_to(self.master.publish_port)
            while conns < n and time.monotonic() < deadline:
                time.sleep(0.05)
                conns = tcp_established_to(self.master.publish_port)
            res.update({"pub_reconnected": conns, "pub_reconnected_s": round(time.time() - t_up, 3)})
        # The first job after the restart (zeromq: it also makes every minion sign in again);
        # then one every 2 s until every minion is back.
        deadline = time.monotonic() + a.restart_timeout
        last_pub = 0.0
        st = self.swarm.status(since)
        while st["ready_since"] < n and time.monotonic() < deadline:
            if time.time() - last_pub >= 2.0:
                self.publish("test.ping", kind="restart-post")
                last_pub = time.time()
            time.sleep(0.05)
            st = self.swarm.status(since)
        if last_pub == 0.0:
            self.publish("test.ping", kind="restart-post")
        t_back = time.time()
        self.window = (t_stop, t_back)
        res.update({"all_back": st["ready_since"] >= n, "signed_in_again": st["ready_since"],
                    "all_back_after_up_s": round(t_back - t_up, 3), "all_back_after_stop_s": round(t_back - t_stop, 3),
                    "auth_attempts": st["auth_attempts"] - st0["auth_attempts"],
                    "auth_timeouts": st["auth_timeouts"] - st0["auth_timeouts"],
                    "returns_reauth": st["returns_reauth"] - st0["returns_reauth"],
                    "pillar_reauth": st["pillar_reauth"] - st0["pillar_reauth"],
                    "returns_conn_waits": st["returns_conn_waits"] - st0["returns_conn_waits"]})
        if st["ready_since"] < n:
            self.notes.append(f"restart: only {st['ready_since']} of {n} minions signed in again within "
                              f"{a.restart_timeout:.0f}s")
        log(f"every minion back {t_back - t_up:.2f}s after the master listened again "
            f"({st['ready_since']}/{n} signed in again)")
        self.restart = res

    # -- the run
    def run(self):
        a = self.a
        self.setup()
        self.t0 = time.time()
        self.sampler = Sampler(self.master, self.swarm.p.pid, self.master_lock, self.t0, a.sample_interval)
        self.sampler.start()
        if a.api_interval > 0:
            self.api = Api(self.api_port, a.api_tgt or self.tgt, a.api_interval, f"{a.id_prefix}{0:05d}")
            self.api.start()
        end = self.t0 + a.seconds
        restart_at = None if a.no_restart else self.t0 + (a.restart_at if a.restart_at is not None else a.seconds / 2)
        next_job = self.t0
        next_pillar = self.t0 + min(a.pillar_interval / 2, 30)
        last_log = self.t0
        log(f"soak: {self.n} minions, {a.seconds:.0f}s, {a.transport}; jobs every {a.job_interval}s, pillar refresh "
            f"every {a.pillar_interval}s, API every {a.api_interval}s, restart at "
            f"{'-' if restart_at is None else f'{restart_at - self.t0:.0f}s'}")
        while time.time() < end:
            now = time.time()
            if restart_at is not None and now >= restart_at:
                restart_at = None
                self.do_restart()
                continue
            if now >= next_pillar:
                self.publish("saltutil.refresh_pillar", kind="pillar")
                next_pillar += a.pillar_interval
            if now >= next_job:
                fun = ("test.ping",) if self.k % 2 == 0 else ("cmd.run", "uptime")
                self.publish(*fun, kind="job")
                self.k += 1
                next_job += a.job_interval
            self.drain_api_jids()
            self.finalize_ready()
            if now - last_log >= 60:
                last_log = now
                s = self.sampler.samples[-1] if self.sampler.samples else None
                log(f"t={now - self.t0:.0f}s jobs {len(self.jobs)} (pending {len(self.pending)}), publish failed "
                    f"{len(self.publish_failed)}" + (f", master CPU {s[2]}% RSS {s[3]} KB" if s else ""))
            wake = min(next_job, next_pillar, end, restart_at or end)
            time.sleep(max(0.0, min(0.5, wake - time.time())))
        t_end = time.time()
        self.sampler.stop()  # the series covers the soak, not the wait for its last returns
        if self.api:
            self.api.stop()
        self.drain_api_jids()
        # Every job gets --job-timeout to finish.
        log(f"soak over: {len(self.jobs)} jobs, waiting for the returns of {len(self.pending)}")
        deadline = time.monotonic() + a.job_timeout
        while self.pending and time.monotonic() < deadline:
            self.finalize_ready()
            time.sleep(0.5)
        if self.pending:
            log(f"{len(self.pending)} jobs unfinished after {a.job_timeout:.0f}s: "
                + ", ".join(f"{j['jid']} ({j['kind']} {j['fun']})" for j in self.pending[:5]))
        self.finalize_ready(force=True)
        self.final_status = self.swarm.status()
        self.t_end = t_end

    # -- the report
    def report(self, interrupted: str | None = None) -> dict:
        a, n = self.a, self.n
        jobs = self.jobs
        for j in jobs:
            t_pub = self.t0 + j["t"]
            j["restart_window"] = bool(self.window and self.window[0] <= t_pub <= self.window[1])
            # Expected: every minion, except inside the restart window (master up again,
            # minions reconnecting): the minions that were connected, i.e. received it.
            rec = j.get("received")
            j["expected"] = (rec or 0) if j["restart_window"] else j["targets"]
            j["lost"] = (j["expected"] - j["acked"]) if "acked" in j else None
        done = [j for j in jobs if "acked" in j]
        lost = sum(j["lost"] for j in done)
        by_kind = {}
        for j in done:
            k = by_kind.setdefault(j["kind"], {"jobs": 0, "expected": 0, "acked": 0, "lost": 0, "p99_ms": []})
            k["jobs"] += 1
            k["expected"] += j["expected"]
            k["acked"] += j["acked"]
            k["lost"] += j["lost"]
            if j["p99_ms"] is not None:
                k["p99_ms"].append(j["p99_ms"])
        for k in by_kind.values():
            p = k.pop("p99_ms")
            k["p99_ms_median"] = _r(pct(p, 50))
            k["p99_ms_max"] = _r(max(p)) if p else None
        window_jobs = [j for j in done if j["restart_window"]]
        api = {}
        if self.api:
            # master down: from the stop until it listens again, plus one API round and 2 s
            down = (self.restart["t"] + self.t0,
                    self.t0 + self.restart["t"] + self.restart["down_s"] + self.a.api_interval + 2.0) \
                if self.restart else None
            for name, st in self.api.stats.items():
                lat = st["lat_ms"]
                api[name] = {"ok": st["ok"], "errors": st["errors"], "p50_ms": _r(pct(lat, 50)),
                             "p99_ms": _r(pct(lat, 99)), "max_ms": _r(max(lat)) if lat else None}
            errs = self.api.errors
            is_down = [bool(down and down[0] <= e[0] <= down[1]) for e in errs]
            in_down = [e for e, d in zip(errs, is_down) if d]
            lat_all = [x for st in self.api.stats.values() for x in st["lat_ms"]]
            api["total"] = {"ok": sum(s["ok"] for s in self.api.stats.values()),
                            "errors": len(errs), "errors_while_master_down": len(in_down),
                            "errors_otherwise": len(errs) - len(in_down), "logins": self.api.logins,
                            "p50_ms": _r(pct(lat_all, 50)), "p99_ms": _r(pct(lat_all, 99))}
            api["error_samples"] = [{"t": round(e[0] - self.t0, 2), "call": e[1], "what": e[2]}
                                    for e in [x for x, d in zip(errs, is_down) if not d][:20]]
        samples = self.sampler.samples if self.sampler else []
        lifetimes = {}
        flat = True
        for lt in (0, 1):
            ss = [s for s in samples if s[1] == lt]
            if len(ss) < 4:
                continue
            t_a, t_b = ss[0][0], ss[-1][0]
            mid = (t_a + t_b) / 2
            h1 = [s for s in ss if s[0] < mid]
            h2 = [s for s in ss if s[0] >= mid]
            slope = _slope([s[0] for s in h2], [s[3] for s in h2]) * 60 if len(h2) > 2 else 0.0
            rss2 = sum(s[3] for s in h2) / len(h2)
            cpu1 = sum(s[2] for s in h1) / len(h1) if h1 else None
            cpu2 = sum(s[2] for s in h2) / len(h2)
            minutes = (t_b - t_a) / 60
            # Flat: the second half's slope, held for the whole lifetime, stays under
            # max(1 MiB, 2% of the RSS); the second half's mean CPU is not above the first
            # half's by more than a quarter plus 2 points (the first half after the restart
            # holds the re-sign-ins, so it is the higher one).
            rss_flat = abs(slope) * minutes <= max(1024, 0.02 * rss2)
            cpu_flat = cpu1 is None or cpu2 <= cpu1 * 1.25 + 2
            flat = flat and rss_flat and cpu_flat
            lifetimes[str(lt)] = {
                "from_s": t_a, "to_s": t_b, "samples": len(ss),
                "rss_kb_first": ss[0][3], "rss_kb_last": ss[-1][3], "rss_kb_max": max(s[3] for s in ss),
                "rss_slope_kb_per_min_2nd_half": _r(slope), "rss_flat": rss_flat,
                # the main process alone (the rest: the sylvite-render workers)
                "main_rss_kb_first": ss[0][6], "main_rss_kb_last": ss[-1][6],
                "main_rss_slope_kb_per_min_2nd_half": _r(_slope([s[0] for s in h2], [s[6] for s in h2]) * 60)
                if len(h2) > 2 else None,
                "cpu_pct_mean_1st_half": _r(cpu1), "cpu_pct_mean_2nd_half": _r(cpu2),
                "cpu_pct_max": max(s[2] for s in ss), "cpu_flat": cpu_flat,
                "processes": ss[-1][4]}
        if len(lifetimes) == 2:
            c0, c1 = lifetimes["0"]["cpu_pct_mean_2nd_half"], lifetimes["1"]["cpu_pct_mean_2nd_half"]
            across = c1 <= c0 * 1.25 + 2
            lifetimes["cpu_2nd_halves_comparable"] = across
            flat = flat and across
        st = getattr(self, "final_status", None) or {}
        pillar_jobs = [j for j in done if j["kind"] == "pillar"]
        doc = {
            "bench": "soak",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "interrupted": interrupted,
            "params": {"minions": n, "seconds": a.seconds, "transport": a.transport, "job_interval": a.job_interval,
                       "pillar_interval": a.pillar_interval, "api_interval": a.api_interval,
                       "api_tgt": a.api_tgt or self.tgt, "restart_at": None if a.no_restart else
                       (a.restart_at if a.restart_at is not None else a.seconds / 2),
                       "sample_interval": a.sample_interval, "restart_pause": a.restart_pause,
                       "restart_job_sleep": a.restart_job_sleep, "drop_session_keys": a.drop_session_keys,
                       "job_timeout": a.job_timeout,
                       "keep_jobs_seconds": a.keep_jobs, "swarm_threads": a.swarm_threads,
                       "master_opts": {k: v for k, v in self.master_opts.items()
                                       if k not in ("external_auth", "rest_cherrypy")} if hasattr(self, "master_opts") else None,
                       "sylvite_bin": a.sylvite_bin, "swarm": a.swarm},
            "cpus": os.cpu_count(),
            "loadavg_end": loadavg(),
            "onboard": getattr(self, "onboard", None),
            "summary": {
                "jobs": len(done),
                "jobs_unfinished": len(jobs) - len(done),
                "returns_expected": sum(j["expected"] for j in done),
                "returns_acked": sum(j["acked"] for j in done),
                "lost": lost,
                "publish_failed": len(self.publish_failed),
                "restart_window_jobs": len(window_jobs),
                "restart_window_not_received": sum(j["targets"] - j["received"] for j in window_jobs),
                "pillar_refresh_jobs": len(pillar_jobs),
                "pillar_ok": st.get("pillar_ok"), "pillar_failed": st.get("pillar_failed"),
                "pillar_mean_top_keys": _r(st["pillar_keys"] / st["pillar_ok"]) if st.get("pillar_ok") else None,
                "api_ok": api.get("total", {}).get("ok"), "api_errors": api.get("total", {}).get("errors"),
                "api_errors_while_master_down": api.get("total", {}).get("errors_while_master_down"),
                "api_p50_ms": api.get("total", {}).get("p50_ms"), "api_p99_ms": api.get("total", {}).get("p99_ms"),
                "restart_all_back_after_up_s": self.restart.get("all_back_after_up_s"),
                "flat": flat if lifetimes else None,
            },
            "jobs_by_kind": by_kind,
            "restart": self.restart,
            "publish_failed": self.publish_failed,
            "api": api,
            "flat": lifetimes,
            "swarm_status": st,
            "master_log": self.master_log(),
            "notes": self.notes,
            "jobs": [{k: j.get(k) for k in ("jid", "fun", "kind", "t", "expected", "received", "acked", "failed",
                                             "lost", "p50_ms", "p99_ms", "last_ms", "restart_window")} for j in jobs],
            "samples_fields": ["t_s", "lifetime", "master_cpu_pct", "master_rss_kb", "master_processes",
                               "swarm_cpu_pct", "master_main_process_rss_kb"],
            "samples": samples,
        }
        return doc

    def master_log(self) -> dict:
        """Warnings and errors the master logged (log level warning), by message."""
        out = {"warning": 0, "error": 0, "critical": 0, "top": []}
        if not self.master:
            return out
        counts: dict[str, int] = {}
        for name in ("master.log", "master.out"):
            p = self.master.root / name
            if not p.exists():
                continue
            for line in p.read_text(errors="replace").splitlines():
                low = line.lower()
                lvl = next((x for x in ("critical", "error", "warning") if f"[{x}" in low), None)
                if lvl is None:
                    continue
                out[lvl] += 1
                # the message without its timestamp
                msg = line.split("]", 3)[-1].strip()[:160] if "]" in line else line[:160]
                counts[f"{lvl}: {msg}"] = counts.get(f"{lvl}: {msg}", 0) + 1
        out["top"] = [{"n": v, "line": k} for k, v in sorted(counts.items(), key=lambda x: -x[1])[:15]]
        return out

    def close(self):
        try:
            if self.api:
                self.api.stop()
            if self.sampler:
                self.sampler.stop()
        finally:
            try:
                if self.swarm:
                    self.swarm.close()
            finally:
                if self.master:
                    self.master.stop()
                stop_all()


def print_summary(doc: dict, out: str):
    s, p = doc["summary"], doc["params"]
    print()
    print(f"soak: {p['minions']} minions, {p['seconds']:.0f} s, {p['transport']}"
          + (f"  (INTERRUPTED: {doc['interrupted']})" if doc["interrupted"] else ""))
    print(f"  jobs acknowledged     {s['jobs']} ({s['jobs_unfinished']} unfinished); returns acked "
          f"{s['returns_acked']}/{s['returns_expected']}; LOST {s['lost']}")
    for k, v in doc["jobs_by_kind"].items():
        print(f"    {k:13} {v['jobs']:5} jobs, lost {v['lost']}, p99 median {v['p99_ms_median']} ms, "
              f"max {v['p99_ms_max']} ms")
    print(f"  publish failed        {s['publish_failed']} (refused while the master was down)")
    print(f"  restart window        {s['restart_window_jobs']} jobs, {s['restart_window_not_received']} deliveries "
          f"to minions still reconnecting")
    print(f"  pillar refreshes      {s['pillar_refresh_jobs']} jobs; fetches ok {s['pillar_ok']}, failed "
          f"{s['pillar_failed']}, mean top-level keys {s['pillar_mean_top_keys']}")
    print(f"  API calls             ok {s['api_ok']}, errors {s['api_errors']} "
          f"({s['api_errors_while_master_down']} while the master was down); p50 {s['api_p50_ms']} ms, "
          f"p99 {s['api_p99_ms']} ms")
    r = doc["restart"]
    if r:
        print(f"  restart at {r['t']:.0f}s       down {r['down_s']} s; every minion back {r['all_back_after_up_s']} s "
              f"after the master listened ({r['signed_in_again']} signed in again); returns re-sent after a "
              f"re-auth {r['returns_reauth']}")
    for lt in ("0", "1"):
        f = doc["flat"].get(lt)
        if f:
            print(f"  lifetime {lt} ({f['from_s']:.0f}-{f['to_s']:.0f}s)  RSS {f['rss_kb_first']}->{f['rss_kb_last']} KB, "
                  f"slope 2nd half {f['rss_slope_kb_per_min_2nd_half']} KB/min ({'flat' if f['rss_flat'] else 'GROWING'}); "
                  f"CPU mean {f['cpu_pct_mean_1st_half']}% / {f['cpu_pct_mean_2nd_half']}% "
                  f"({'flat' if f['cpu_flat'] else 'RISING'})")
    ml = doc["master_log"]
    print(f"  master log            {ml['critical']} critical, {ml['error']} error, {ml['warning']} warning lines")
    for t in ml["top"][:5]:
        print(f"    {t['n']:6}x {t['line']}")
    print(f"  verdict               flat: {s['flat']}, lost: {s['lost']}")
    print(f"written {out}")


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    atexit.register(stop_all)
    ap = argparse.ArgumentParser(description=Path(__file__).read_text().split('"""')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minions", type=int, default=1000, help="swarm minions (default 1000)")
    ap.add_argument("--seconds", type=float, default=3600.0, help="soak duration (default 3600)")
    ap.add_argument("--transport", choices=["zeromq", "tcp"], default="zeromq")
    ap.add_argument("--job-interval", type=float, default=10.0,
                    help="seconds between fan-out jobs (test.ping / cmd.run by turns; default 10)")
    ap.add_argument("--pillar-interval", type=float, default=120.0,
                    help="seconds between saltutil.refresh_pillar jobs (default 120)")
    ap.add_argument("--api-interval", type=float, default=2.0,
                    help="seconds between REST API rounds (0: no API load; default 2)")
    ap.add_argument("--api-tgt", default=None, help="local_async target of the API rounds (default: every minion)")
    ap.add_argument("--restart-at", type=float, default=None, help="seconds into the soak (default: half way)")
    ap.add_argument("--no-restart", action="store_true", help="no master restart")
    ap.add_argument("--restart-pause", type=float, default=2.0,
                    help="seconds the master stays stopped before it starts again (default 2)")
    ap.add_argument("--drop-session-keys", action="store_true",
                    help="remove the master's cachedir/sessions while it is down (the returns in flight then "
                         "need a re-authentication)")
    ap.add_argument("--restart-job-sleep", type=float, default=1.0,
                    help="the job published just before the restart is test.sleep of this many seconds, so its "
                         "returns come while the master is down (default 1)")
    ap.add_argument("--sample-interval", type=float, default=5.0, help="CPU/RSS sampling period (default 5)")
    ap.add_argument("--job-timeout", type=float, default=150.0,
                    help="seconds a job's returns get before it is closed (default 150)")
    ap.add_argument("--restart-timeout", type=float, default=300.0,
                    help="bound on the wait for every minion to sign in again after the restart")
    ap.add_argument("--onboard-timeout", type=float, default=600.0)
    ap.add_argument("--keep-jobs", type=int, default=None,
                    help="master keep_jobs_seconds (default: the master's, 24 h, so the job cache only grows)")
    ap.add_argument("--id-prefix", default="soak-")
    ap.add_argument("--pool", type=int, default=0, help="swarm request connections (default as bench/run)")
    ap.add_argument("--swarm-threads", type=int, default=2)
    ap.add_argument("--master-opt", action="append", metavar="KEY=JSON", help="extra master option (recorded)")
    ap.add_argument("--sylvite-bin", default=os.environ.get("SYLVITE_BIN", str(REPO / "build" / "bin")))
    ap.add_argument("--swarm", default=None, help="sylvite-swarm executable (default <sylvite-bin>/sylvite-swarm)")
    ap.add_argument("--keys-dir", default=str(REPO / "build" / "bench-keys"),
                    help="swarm RSA keys, <index>.pem (generated once when missing)")
    ap.add_argument("--tmp-dir", default=None, help="parent of the run's temp dir")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "soak-latest.json"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, master log, swarm report)")
    a = ap.parse_args()
    a.swarm = a.swarm or str(Path(a.sylvite_bin) / "sylvite-swarm")
    Path(a.keys_dir).mkdir(parents=True, exist_ok=True)
    soak = Soak(a)
    interrupted = None
    rc = 0
    try:
        soak.run()
    except KeyboardInterrupt as e:
        interrupted = str(e) or "interrupted"
        rc = 130
    except Exception as e:  # noqa: BLE001 - recorded, then everything stopped
        traceback.print_exc()
        interrupted = f"{type(e).__name__}: {e}"[:500]
        rc = 1
    doc = None
    try:
        for t in (soak.api, soak.sampler):  # their threads stopped before their figures are read
            if t is not None:
                t.stop()
        if getattr(soak, "t0", None) is not None and soak.sampler is not None:
            doc = soak.report(interrupted)
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    finally:
        soak.close()
        if a.keep:
            print("kept", soak.tmp)
        else:
            log(f"removing {soak.tmp}")
            rmtree(soak.tmp)
    if doc is not None:
        print_summary(doc, a.out)
        if rc == 0 and (doc["summary"]["lost"] or doc["summary"]["jobs_unfinished"]):
            rc = 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
