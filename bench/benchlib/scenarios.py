"""Benchmark scenarios and their registry.

A scenario is a function (session, ctx) -> dict of metrics, registered with @scenario.
A *session* is what a scenario runs against: today "single" = one master (sylvite or Salt)
plus one swarm of N minions, already onboarded (pending -> salt-key -A -> accepted, publish
connections up). Future failover/cluster scenarios register their own session kind in
SESSIONS (e.g. "cluster": several masters behind HAProxy on a shared filesystem) and name
it in @scenario(session="cluster"); the runner groups scenarios by session kind and size.
"""
from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from .core import (Swarm, SwarmGroup, SaltMaster, SylviteMaster, jid_epoch, loadavg, pct, preseed_accepted,
                   tcp_established_to)

# Master private-key operations per accepted sign-in, derived from the code (see
# docs/benchmarks.md): minions that already know the master send `token`.
#   sylvite (master/auth.cpp build_accept + request_router.cpp): OAEP-decrypt the token (1) +
#     PKCS#1 v1.5 signature of the clear-signed reply (1); the X9.31 signature of the
#     AES key digest is computed once per AES key (aes_state.sig), not per sign-in.
#   Salt 3008.5 (salt/master.py AuthFuncs._auth_impl + _clear_signed): token decrypt (1)
#     + master_key.encrypt(digest) X9.31 per sign-in (1) + reply signature (1).
PRIVATE_OPS_PER_AUTH = {"sylvite": 2, "salt": 3}
PRIVATE_OPS_PER_AUTH_NO_TOKEN = {"sylvite": 1, "salt": 2}
RSA_PRIVATE_OPS_PER_CORE_S = 4000.0  # lab notes: RSA-2048 sign/OAEP-decrypt per core (a fallback)


def measure_rsa_private_ops_per_core_s(seconds: int = 2):
    """RSA-2048 private operations (signatures: CRT, the cost of an OAEP decrypt too) one core
    does right now, with the system libcrypto the master links: `openssl speed rsa2048`. The
    machine's speed varies from day to day (the same VM measured 4,000/s and 1,250/s), so the
    ceiling is measured in the run that uses it. None if openssl cannot tell."""
    try:
        r = subprocess.run(["openssl", "speed", "-seconds", str(seconds), "rsa2048"], capture_output=True,
                           text=True, timeout=seconds * 8 + 30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        parts = line.split()
        # "rsa 2048 bits 0.000798s 0.000024s   1252.5  41485.0"
        if len(parts) >= 7 and parts[0] == "rsa" and parts[1] == "2048":
            try:
                return float(parts[5])
            except ValueError:
                return None
    return None


@dataclasses.dataclass
class Scenario:
    name: str
    fn: Callable
    order: int
    session: str = "single"
    sizes: str = "all"          # "all": every --sizes entry; "longrun": only the --longrun-size
    restarts_master: bool = False
    help: str = ""


SCENARIOS: dict[str, Scenario] = {}


def scenario(name, order, session="single", sizes="all", restarts_master=False, help=""):
    def deco(fn):
        SCENARIOS[name] = Scenario(name, fn, order, session, sizes, restarts_master, help)
        return fn
    return deco


# ----------------------------------------------------------------------------- sessions
class SingleMasterSession:
    """One master of `kind` + one swarm of `size` minions, onboarded."""

    def __init__(self, ctx, kind: str, size: int):
        self.ctx = ctx
        self.kind = kind
        self.size = size
        self.transport = ctx.transport
        self.root: Path = ctx.tmp / f"{kind}-{size}"
        self.notes: list[str] = []
        cls = SylviteMaster if kind == "sylvite" else SaltMaster
        bin_dir = ctx.sylvite_bin if kind == "sylvite" else ctx.salt_bin
        self.master = cls(self.root / "master", bin_dir, ctx.master_opts.get(kind), transport=ctx.transport)
        self.swarm: Swarm | None = None
        self.expected = 0
        if ctx.args.preseed:
            secs = preseed_accepted(ctx.keys_dir, Path(self.master.opts["pki_dir"]), size)
            ctx.log(f"[{kind} {size}] pre-seeded {size} accepted keys in {secs:.1f}s")
        try:
            self.master.start()
            self.master.wait_ready(timeout=120)
            time.sleep(ctx.settle)
            self.baseline = {"rss_kb": self.master.rss_kb(), "pss_kb": self.master.pss_kb(),
                             "cpu_s": self.master.cpu_seconds(), "procs": len(self.master.pids())}
            ctx.log(f"[{kind} {size}] master up (pid {self.master.proc.pid}, {self.baseline['procs']} processes, "
                    f"RSS {self.baseline['rss_kb']} KB)")
            if ctx.args.swarm_procs > 1:
                self.swarm = SwarmGroup(ctx.swarm_exe, self.root / "swarm", self.master, size, ctx.keys_dir,
                                        ctx.pool(size), ctx.args.swarm_threads, ctx.args.swarm_procs,
                                        accept_wait=ctx.args.accept_wait, start_rate=ctx.args.onboard_rate,
                                        transport=ctx.transport, extra=ctx.swarm_extra)
            else:
                self.swarm = Swarm(ctx.swarm_exe, self.root / "swarm", self.master, size, ctx.keys_dir,
                                   ctx.pool(size), ctx.args.swarm_threads, accept_wait=ctx.args.accept_wait,
                                   start_rate=ctx.args.onboard_rate, transport=ctx.transport,
                                   extra=ctx.swarm_extra)
            ke = self.swarm.keys_event
            ctx.log(f"[{kind} {size}] swarm keys: {ke['loaded']} loaded, {ke['generated']} generated "
                    f"in {ke['seconds']:.1f}s")
            self.onboard = self._onboard()
        except BaseException:
            self.close()  # the master (and a swarm) started here must not outlive a failed start
            raise

    def _onboard(self) -> dict:
        ctx, n = self.ctx, self.size
        t0 = time.time()
        deadline = time.monotonic() + ctx.args.onboard_timeout
        accepted_rounds = 0
        last_accept_pending, last_accept_t = -1, 0.0
        st = self.swarm.status()
        # salt-key -A once every minion has been answered "pending" (then again for
        # stragglers whose sign-in timed out, at most every 3 s).
        while time.monotonic() < deadline and st["ready"] < n:
            all_pending = st["pending_seen"] >= n
            # Stragglers: minions still answered "pending" after an accept (their sign-in
            # was in flight while salt-key ran; Salt can even re-file an accepted key as
            # pending in that race).
            stragglers = accepted_rounds > 0 and (st["pending_seen"] > last_accept_pending or st["pending"] > 0)
            if (all_pending and accepted_rounds == 0) or (stragglers and time.time() - last_accept_t > 5) or (
                    accepted_rounds == 0 and time.time() - t0 > ctx.args.onboard_timeout / 2):
                last_accept_pending = st["pending_seen"]
                self.master.accept_all()
                accepted_rounds += 1
                last_accept_t = time.time()
            time.sleep(0.25)
            st = self.swarm.status()
        t1 = time.time()
        self.expected = st["ready"]
        res = {"seconds": round(t1 - t0, 2), "ready": st["ready"], "auth_attempts": st["auth_attempts"],
               "auth_timeouts": st["auth_timeouts"], "salt_key_rounds": accepted_rounds}
        if st["ready"] < n:
            self.notes.append(f"onboarding: only {st['ready']} of {n} minions ready within "
                              f"{ctx.args.onboard_timeout:.0f}s")
        ctx.log(f"[{self.kind} {n}] onboarded {st['ready']}/{n} in {t1 - t0:.1f}s "
                f"(auth attempts {st['auth_attempts']}, timeouts {st['auth_timeouts']})")
        return res

    def wait_idle(self, max_s: float = 60.0, below_cores: float = 0.25) -> float:
        """Wait until the master has drained earlier work (CPU below `below_cores` over 1 s),
        so one scenario's backlog does not land in the next; returns the seconds waited."""
        t0 = time.time()
        while time.time() - t0 < max_s:
            c0 = self.master.cpu_seconds()
            time.sleep(1.0)
            if self.master.cpu_seconds() - c0 < below_cores:
                break
        return round(time.time() - t0, 1)

    def alive(self) -> bool:
        return self.master.proc is not None and self.master.proc.poll() is None

    def close(self):
        try:
            if self.swarm:
                self.swarm.close()
        finally:
            self.master.stop()


SESSIONS = {"single": SingleMasterSession}


# ----------------------------------------------------------------------------- helpers
def run_job(s: SingleMasterSession, fun: str, *args, timeout: float, tgt: str = "bench-*") -> dict:
    """Publish fun to every swarm minion and wait for the returns; latencies from the jid."""
    jid, t_cli0, t_cli1 = s.master.publish(tgt, fun, *args)
    t_pub = jid_epoch(jid)
    if not (t_cli0 - 2 <= t_pub <= t_cli1 + 2):
        s.notes.append(f"jid {jid} time {t_pub:.3f} outside the CLI call [{t_cli0:.3f}, {t_cli1:.3f}]")
    j = s.swarm.wait_job(jid, s.expected, timeout)
    lat = [(e[2] / 1e9 - t_pub) * 1000 for e in j["entries"] if e[2]]
    recv = [(e[1] / 1e9 - t_pub) * 1000 for e in j["entries"]]
    acked = j["acked"]
    res = {
        "jid": jid,
        "expected": s.expected,
        "received": j["received"],
        "returned": acked,
        "lost": s.expected - acked,
        "p50_ms": _r(pct(lat, 50)),
        "p99_ms": _r(pct(lat, 99)),
        "total_ms": _r(max(lat)) if lat else None,
        "recv_first_ms": _r(min(recv)) if recv else None,  # the jid's time to the first minion's receipt
        "recv_p50_ms": _r(pct(recv, 50)),
        "recv_p99_ms": _r(pct(recv, 99)),
        "recv_last_ms": _r(max(recv)) if recv else None,
        "cli_seconds": round(t_cli1 - t_cli0, 3),
    }
    if acked < s.expected:
        res["note"] = f"{acked} of {s.expected} returned within {timeout:.0f}s"
    return res


def cache_count(s: SingleMasterSession, jids: list[str], want: int, timeout=30.0) -> int:
    """Returns written to the job cache for jids (polls: writes may trail the acks)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n = sum(s.master.returns_written(j) for j in jids)
        if n >= want:
            break
        time.sleep(0.2)
    return n


def _r(x, nd=2):
    return None if x is None else round(x, nd)


# ----------------------------------------------------------------------------- scenarios
@scenario("memory", order=10, help="master RSS per connected, authenticated minion")
def sc_memory(s: SingleMasterSession, ctx) -> dict:
    time.sleep(ctx.settle)
    rss, pss = s.master.rss_kb(), s.master.pss_kb()
    n = max(1, s.expected)
    return {
        "minions": s.expected,
        "baseline_rss_kb": s.baseline["rss_kb"],
        "rss_kb": rss,
        "kb_per_minion": round((rss - s.baseline["rss_kb"]) / n, 2),
        "baseline_pss_kb": s.baseline["pss_kb"],
        "pss_kb": pss,
        "pss_kb_per_minion": round((pss - s.baseline["pss_kb"]) / n, 2),
        "processes": len(s.master.pids()),
    }


@scenario("fanout", order=20, help="test.ping to every minion: publish -> last return")
def sc_fanout(s: SingleMasterSession, ctx) -> dict:
    rounds = []
    m0, w0 = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    for i in range(ctx.args.fanout_rounds):
        try:
            rounds.append(run_job(s, "test.ping", timeout=ctx.args.job_timeout))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            s.notes.append(f"fan-out round {i}: publish failed: {str(e).strip().splitlines()[-1][:200]}")
            rounds.append({"jid": None, "expected": s.expected, "received": 0, "returned": 0,
                           "lost": s.expected, "p50_ms": None, "p99_ms": None, "total_ms": None,
                           "recv_p99_ms": None, "recv_last_ms": None})
        time.sleep(0.5)
    m1, w1 = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    cached = cache_count(s, [r["jid"] for r in rounds if r["jid"]], sum(r["returned"] for r in rounds), timeout=15)
    # Summary: the median round by total time (all rounds are kept in "rounds").
    ok = [r for r in rounds if r["total_ms"] is not None]
    med = sorted(ok, key=lambda r: r["total_ms"])[len(ok) // 2] if ok else rounds[0]
    out = {k: med[k] for k in ("p50_ms", "p99_ms", "total_ms", "recv_p99_ms", "recv_last_ms")}
    out.update({"minions": s.expected, "lost": sum(r["lost"] for r in rounds), "rounds": rounds,
                "cache_written": cached, "cache_expected": sum(r["returned"] for r in rounds),
                "master_cpu_ms_per_return": _r((m1 - m0) * 1000 / max(1, sum(r["returned"] for r in rounds)), 3),
                "swarm_cpu_ms_per_return": _r((w1 - w0) * 1000 / max(1, sum(r["returned"] for r in rounds)), 3),
                "loadavg": loadavg()})
    return out


@scenario("ingest", order=30, help="returns/s accepted and written to the job cache")
def sc_ingest(s: SingleMasterSession, ctx) -> dict:
    jids = []
    for _ in range(ctx.args.ingest_jobs):
        jid, _, _ = s.master.publish("bench-*", "bench.hold")
        jids.append(jid)
    # Every minion must have received every job (the jid dirs exist) before the storm.
    deadline = time.monotonic() + ctx.args.job_timeout
    for jid in jids:
        while time.monotonic() < deadline and s.swarm.job(jid)["received"] < s.expected:
            time.sleep(0.1)
    c0, w0 = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    r = s.swarm.ingest(ctx.args.ingest_window, jids, timeout=ctx.args.ingest_timeout)
    c1, w1 = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    want = r["ok"]
    written = cache_count(s, jids, want, timeout=30)
    return {
        "returns": r["total"],
        "acked": r["ok"],
        "failed": r["failed"],
        "seconds": round(r["seconds"], 3),
        "returns_per_s": round(r["returns_per_s"], 1),
        "ack_p50_ms": _r(r["ack_p50_ms"]),
        "ack_p99_ms": _r(r["ack_p99_ms"]),
        "ack_max_ms": _r(r["ack_max_ms"]),
        "window": r["window"],
        "cache_written": written,
        "master_cpu_ms_per_return": _r((c1 - c0) * 1000 / max(1, r["ok"]), 3),
        "swarm_cpu_ms_per_return": _r((w1 - w0) * 1000 / max(1, r["ok"]), 3),
        "loadavg": loadavg(),
    }


@scenario("longrun", order=40, sizes="longrun", help="steady load: a job every few seconds, CPU/RSS sampled")
def sc_longrun(s: SingleMasterSession, ctx) -> dict:
    dur, every = ctx.args.longrun_seconds, ctx.args.longrun_interval
    samples = []  # (t, cpu_pct, rss_kb)
    jobs = []
    t_start = time.time()
    last_t, last_c = t_start, s.master.cpu_seconds()
    next_job = t_start
    k = 0
    publish_failed = 0
    while time.time() - t_start < dur:
        now = time.time()
        if now >= next_job:
            fun = ("test.ping",) if k % 2 == 0 else ("cmd.run", "uptime")
            try:
                jid, _, _ = s.master.publish("bench-*", *fun)
                jobs.append((jid, fun[0]))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                publish_failed += 1
                s.notes.append(f"long run: publish {k} failed: {str(e).strip().splitlines()[-1][:200]}")
            k += 1
            next_job = max(next_job + every, time.time())
        time.sleep(max(0.0, min(1.0, next_job - time.time(), t_start + dur - time.time())))
        t, c = time.time(), s.master.cpu_seconds()
        if t - last_t >= 0.9:
            samples.append((round(t - t_start, 2), round(100 * (c - last_c) / (t - last_t), 1), s.master.rss_kb()))
            last_t, last_c = t, c
    lost, p99s = 0, []
    for jid, fun in jobs:
        j = s.swarm.wait_job(jid, s.expected, ctx.args.job_timeout)
        lost += s.expected - j["acked"]
        t_pub = jid_epoch(jid)
        lat = [(e[2] / 1e9 - t_pub) * 1000 for e in j["entries"] if e[2]]
        if lat:
            p99s.append(pct(lat, 99))
    rss = [x[2] for x in samples]
    half = samples[len(samples) // 2:]
    slope = _slope([x[0] for x in half], [x[2] for x in half]) * 60 if len(half) > 2 else 0.0
    cpu = [x[1] for x in samples]
    growth = (rss[-1] - rss[0]) if rss else 0
    flat = abs(slope) * dur / 60 < max(1024, 0.02 * (rss[0] if rss else 0))
    return {
        "minions": s.expected,
        "seconds": dur,
        "jobs": len(jobs),
        "publish_failed": publish_failed,
        "lost": lost + publish_failed * s.expected,
        "job_p99_ms_median": _r(pct(p99s, 50)),
        "job_p99_ms_max": _r(max(p99s)) if p99s else None,
        "cpu_pct_mean": _r(sum(cpu) / len(cpu)) if cpu else None,
        "cpu_pct_max": _r(max(cpu)) if cpu else None,
        "rss_kb_start": rss[0] if rss else None,
        "rss_kb_end": rss[-1] if rss else None,
        "rss_growth_kb": growth,
        "rss_slope_kb_per_min_2nd_half": _r(slope),
        "rss_flat": flat,
        "samples": samples,
    }


class _StormTrigger:
    """zeromq: a minion does not see the master restart (libzmq reconnects its SUB socket
    silently); the first publish it cannot decrypt (new AES key) makes it sign in again,
    as Salt's minion does. Publishes `bench.hold` (received, never answered) every
    `every` seconds in a thread until stopped, so that minions whose socket came back
    after a publish still get one."""

    def __init__(self, s: SingleMasterSession, every: float = 2.0):
        self.s, self.every = s, every
        self.jids: list[str] = []
        self.errors: list[str] = []
        self.first_at: float | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            t0 = time.time()
            try:
                jid, _, _ = self.s.master.publish("bench-*", "bench.hold")
                self.jids.append(jid)
                if self.first_at is None:
                    self.first_at = jid_epoch(jid)
            except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                self.errors.append(str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__)
            self._stop.wait(max(0.0, self.every - (time.time() - t0)))

    def stop(self):
        self._stop.set()
        self._t.join(timeout=5)  # a publish still running in the CLI is left to finish


@scenario("auth_storm", order=90, restarts_master=True,
          help="master restart: every minion signs in again at once (zeromq: at the first publish after it)")
def sc_auth_storm(s: SingleMasterSession, ctx) -> dict:
    n = s.expected
    st0 = s.swarm.status()
    t_stop = time.time()
    s.master.stop()
    s.master.start()
    t_up = s.master.wait_ready(timeout=120)
    c_up, w_up = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    if ctx.rsa is not None:
        ctx.rsa.start(s.kind, s.master.pids())
    since_ns = int(t_stop * 1e9)
    zmq_extra = {}
    trigger = None
    if s.transport == "zeromq":
        # Wait (bounded) until the SUB sockets are back, then publish the trigger.
        port = s.master.publish_port
        deadline = time.monotonic() + min(30.0, ctx.args.storm_timeout / 2)
        conns = tcp_established_to(port)
        while conns < n and time.monotonic() < deadline:
            time.sleep(0.05)
            conns = tcp_established_to(port)
        zmq_extra = {"storm_trigger": "publish (bench.hold every 2 s until all signed in)",
                     "pub_reconnected": conns, "pub_reconnected_s": round(time.time() - t_up, 3)}
        trigger = _StormTrigger(s)
    try:
        ok, st = s.swarm.wait_status(lambda x: x["ready_since"] >= n, ctx.args.storm_timeout, interval=0.05,
                                      since_ns=since_ns)
    finally:
        if trigger is not None:
            trigger.stop()
    t_all = time.time()
    if trigger is not None:
        zmq_extra.update({"trigger_publishes": len(trigger.jids),
                          "first_trigger_after_up_s": _r(trigger.first_at - t_up, 3) if trigger.first_at else None})
        if trigger.errors:
            zmq_extra["notes"] = [f"storm trigger publish failed: {e}" for e in trigger.errors[:5]]
    c_all, w_all = s.master.cpu_seconds(), s.swarm.cpu_seconds()
    measured_ops = ctx.rsa.stop() if ctx.rsa is not None else None
    a = [m for m in s.swarm.auth()["minions"] if m[1] / 1e9 >= t_stop]
    ready_t = sorted(m[1] / 1e9 - t_up for m in a)
    n_ready = len(ready_t)
    # The storm window: first successful-cycle attempt -> last minion ready (the swarm's
    # reconnect delay before the first attempt is not the master's time).
    first_try = min((m[5] / 1e9 for m in a), default=t_up)
    window = (max(m[1] for m in a) / 1e9 - first_try) if a else 0
    res = {
        "minions": n,
        "signed_in": n_ready,
        "all_signed_in": ok,
        "master_start_s": round(t_up - t_stop, 2),
        "auth_seconds": _r(ready_t[-1]) if ready_t else None,
        "storm_window_s": round(window, 3),
        "auths_per_s": round(n_ready / window, 1) if window > 0 else None,
        "first_attempt_after_up_s": round(first_try - t_up, 3),
        # accepted = the sign-in reply verified by the minion; ready = publish connected + hello
        "accepted_p50_s": _r(pct([m[6] / 1e9 - t_up for m in a if len(m) > 6 and m[6]], 50)),
        "accepted_last_s": _r(max([m[6] / 1e9 - t_up for m in a if len(m) > 6 and m[6]], default=None)),
        "ready_p50_s": _r(pct(ready_t, 50)),
        "ready_p99_s": _r(pct(ready_t, 99)),
        "auth_attempts": st["auth_attempts"] - st0["auth_attempts"],
        "auth_timeouts": st["auth_timeouts"] - st0["auth_timeouts"],
        "auth_conn_errors": st["auth_conn_errors"] - st0["auth_conn_errors"],
        "master_cpu_s": round(c_all - c_up, 3),
        "master_cpu_ms_per_auth": _r((c_all - c_up) * 1000 / max(1, n_ready), 3),
        # CPU the two processes got during the storm window: the rest of the 2 cores went
        # to other work on the machine (see loadavg)
        "swarm_cpu_s": round(w_all - w_up, 3),
        "cores_used_master_plus_swarm": round(((c_all - c_up) + (w_all - w_up)) / max(1e-3, t_all - t_up), 2),
        "loadavg": loadavg(),
        "private_ops_per_auth": PRIVATE_OPS_PER_AUTH[s.kind],
        # uprobes on OpenSSL's private-key entry points of the master's processes (perf
        # attaches ~0.3 s after the master listens: a few early sign-ins may be missed)
        "measured_private_ops": measured_ops,
        "measured_private_ops_per_auth": round(measured_ops / n_ready, 2) if measured_ops and n_ready else None,
    }
    res.update(zmq_extra)
    ops = PRIVATE_OPS_PER_AUTH[s.kind]
    if res["auths_per_s"]:
        res["master_private_ops_per_s"] = round(res["auths_per_s"] * ops, 1)
    if res["master_cpu_ms_per_auth"]:
        # What one master core sustains if it did nothing else, against the RSA-only ceiling
        # (ops private operations per sign-in at the speed measured right after the storm).
        res["auths_per_core_s"] = round(1000 / res["master_cpu_ms_per_auth"], 1)
        measured = measure_rsa_private_ops_per_core_s()
        per_core = measured or RSA_PRIVATE_OPS_PER_CORE_S
        res["rsa_private_ops_per_core_s"] = round(per_core, 1)
        res["rsa_private_ops_per_core_s_source"] = "openssl speed rsa2048, this run" if measured else "lab notes"
        res["rsa_ceiling_auths_per_core_s"] = round(per_core / ops, 1)
        res["rsa_ceiling_fraction"] = round(res["auths_per_core_s"] / res["rsa_ceiling_auths_per_core_s"], 3)
    if not ok:
        res["note"] = f"{n_ready} of {n} signed in again within {ctx.args.storm_timeout:.0f}s"
    # Time until everyone answers a ping (measured from the master listening again).
    try:
        ping = run_job(s, "test.ping", timeout=ctx.args.job_timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        res["ping_after_storm"] = {"error": str(e).strip().splitlines()[-1][:200]}
        res.setdefault("notes", []).append("the ping after the storm could not be published (CLI timed out)")
        return res
    if ping["total_ms"] is not None:
        res["all_answer_ping_s"] = round(jid_epoch(ping["jid"]) + ping["total_ms"] / 1000 - t_up, 2)
    res["ping_after_storm"] = {k: ping[k] for k in ("returned", "lost", "p99_ms", "total_ms")}
    return res


def _slope(xs, ys) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0
