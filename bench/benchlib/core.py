"""Processes for the benchmarks: a master under test (sylvite or real Salt 3008.5), the
sylvite-swarm controller, /proc sampling and small statistics helpers.

Only processes started here are stopped, by PID (the master's descendants are collected
from /proc before it is told to stop). Every process started here is also recorded in a
registry (`track`), and `stop_all()` (called by bench/run on every exit path: normal end,
exception, SIGINT/SIGTERM/SIGHUP, and atexit) stops each one that is still alive by its
process group (each is started in its own session, so its group id is its PID).
"""
from __future__ import annotations

import calendar
import concurrent.futures
import hashlib
import json
import os
import queue
import shlex
import re
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from . import ports

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# ----------------------------------------------------------------------------- process registry
_STARTED: list[subprocess.Popen] = []
_STARTED_LOCK = threading.Lock()


def track(p: subprocess.Popen, own_group: bool = True) -> subprocess.Popen:
    """Record a process this harness started (own_group: started with start_new_session,
    so its whole process group is ours)."""
    p._bench_own_group = own_group  # type: ignore[attr-defined]
    with _STARTED_LOCK:
        _STARTED.append(p)
    return p


def _signal_group(p: subprocess.Popen, sig: int):
    try:
        if getattr(p, "_bench_own_group", False):
            os.killpg(p.pid, sig)  # pgid == pid (start_new_session); only our own group
        elif p.poll() is None:
            os.kill(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(p: subprocess.Popen) -> bool:
    if p.poll() is None:
        return True
    if not getattr(p, "_bench_own_group", False):
        return False
    try:
        os.killpg(p.pid, 0)  # a leftover child of ours still in the group
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_all(timeout: float = 10.0) -> list[int]:
    """Stop every tracked process (and its group) still running: SIGTERM, then SIGKILL
    after `timeout`. Returns the PIDs that had to be stopped."""
    with _STARTED_LOCK:
        procs = list(_STARTED)
    alive = [p for p in procs if _group_alive(p)]
    for p in alive:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_group_alive(p) for p in alive):
        time.sleep(0.05)
    for p in alive:
        if _group_alive(p):
            _signal_group(p, signal.SIGKILL)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    with _STARTED_LOCK:
        _STARTED[:] = [p for p in _STARTED if _group_alive(p)]
    return [p.pid for p in alive]


# ----------------------------------------------------------------------------- helpers
def free_port() -> int:
    return ports.pick()


def yaml_dump(d: dict) -> str:
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in d.items()) + "\n"


def pct(values, p: float):
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def jid_epoch(jid: str) -> float:
    """Publish time encoded in a Salt jid (%Y%m%d%H%M%S%f, UTC on this machine)."""
    m = re.match(r"^(\d{14})(\d{6})", jid)
    if not m:
        raise ValueError(f"not a jid: {jid}")
    t = time.strptime(m.group(1), "%Y%m%d%H%M%S")
    return calendar.timegm(t) + int(m.group(2)) / 1e6


def tcp_established_to(port: int) -> int:
    """Established TCP connections accepted on local `port` (/proc/net/tcp and tcp6; this
    network namespace): e.g. the swarm's publish sockets a master has taken back after a
    restart, whatever the master's transport."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# ----------------------------------------------------------------------------- /proc
def _children_map():
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def process_tree(pid: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def proc_cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    f = stat[stat.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK  # utime + stime


def proc_rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ----------------------------------------------------------------------------- masters
class MasterBase:
    """A master on 127.0.0.1 with free ports and a private root. Subclasses give the
    binaries and the extra config."""

    kind = ""

    def __init__(self, root: Path, bin_dir: Path, extra_opts: dict | None = None, transport: str = "tcp"):
        self.root = root
        self.bin_dir = bin_dir
        self.conf_dir = root / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.ret_port = free_port()
        self.publish_port = free_port()
        for d in ("salt", "pillar"):
            (root / "srv" / d).mkdir(parents=True, exist_ok=True)
        self.opts = {
            "id": f"bench-{self.kind}",
            "interface": "127.0.0.1",
            "ret_port": self.ret_port,
            "publish_port": self.publish_port,
            "root_dir": str(root),
            "pki_dir": str(root / "pki"),
            "cachedir": str(root / "cache"),
            "sock_dir": str(root / "sock"),
            "log_file": str(root / "master.log"),
            "log_level": "warning",
            "log_level_logfile": "warning",
            "file_roots": {"base": [str(root / "srv" / "salt")]},
            "pillar_roots": {"base": [str(root / "srv" / "pillar")]},
            "user": "root",
            "transport": transport,
        }
        self.opts.update(extra_opts or {})
        (self.conf_dir / "master").write_text(yaml_dump(self.opts))
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.started_at = 0.0

    # -- process
    def start(self):
        self.log = open(self.root / "master.out", "ab")
        self.proc = track(subprocess.Popen([str(self.bin_dir / "salt-master"), "-c", str(self.conf_dir)],
                                           stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, preexec_fn=raise_nofile))
        self.started_at = time.time()
        return self

    def wait_ready(self, timeout=60.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} master exited early:\n{self.log_tail()}")
            ok = True
            for port in (self.ret_port, self.publish_port):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                except OSError:
                    ok = False
                    break
            if ok and self.extra_ready():
                return time.time()
            time.sleep(0.05)
        raise RuntimeError(f"{self.kind} master not ready after {timeout}s:\n{self.log_tail()}")

    def extra_ready(self) -> bool:
        return True

    def pids(self) -> list[int]:
        if not self.proc or self.proc.poll() is not None:
            return []
        return process_tree(self.proc.pid)

    def stop(self, timeout=30.0):
        if not self.proc:
            return
        tree = self.pids()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Children the master started (Salt's process manager) that outlived it.
        deadline = time.monotonic() + 10
        for p in tree:
            if p == self.proc.pid:
                continue
            while time.monotonic() < deadline and Path(f"/proc/{p}").exists():
                time.sleep(0.05)
            if Path(f"/proc/{p}").exists():
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        # Anything else left in the master's own process group (its session is ours).
        if _group_alive(self.proc):
            _signal_group(self.proc, signal.SIGKILL)
        if self.log:
            self.log.close()
            self.log = None
        self.proc = None

    def log_tail(self, n=4000) -> str:
        out = ""
        for name in ("master.out", "master.log"):
            p = self.root / name
            if p.exists():
                out += f"--- {name}\n" + p.read_text(errors="replace")[-n:]
        return out

    # -- measurements
    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(p) for p in self.pids())

    def rss_kb(self) -> int:
        return sum(proc_rss_kb(p) for p in self.pids())

    def pss_kb(self) -> int:
        return sum(proc_pss_kb(p) for p in self.pids())

    # -- CLIs
    def cli(self, tool: str, *args, timeout=120):
        return subprocess.run([str(self.bin_dir / tool), "-c", str(self.conf_dir), *args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def accept_all(self):
        r = self.cli("salt-key", "-A", "-y", timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"salt-key -A failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")
        return r

    def publish(self, tgt: str, fun: str, *args) -> tuple[str, float, float]:
        """Publish without waiting for returns; (jid, wall time before, wall time after)."""
        t0 = time.time()
        r = self.cli("salt", "--async", tgt, fun, *args, timeout=300)
        t1 = time.time()
        m = re.search(r"\b(\d{20})\b", r.stdout + r.stderr)
        if not m:
            raise RuntimeError(f"no jid from salt --async ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
        return m.group(1), t0, t1

    def job_dir(self, jid: str) -> Path:
        h = hashlib.sha256(jid.encode()).hexdigest()
        return Path(self.opts["cachedir"]) / "jobs" / h[:2] / h[2:]

    def returns_written(self, jid: str) -> int:
        if self.opts.get("master_job_cache") == "pgjsonb":  # bench/pg_jobcache.py: rows, not files
            return pg_returns_written(self.opts, jid)
        d = self.job_dir(jid)
        if not d.is_dir():
            return 0
        return sum(1 for e in os.scandir(d) if e.is_dir() and os.path.exists(os.path.join(e.path, "return.p")))


def pg_returns_written(opts: dict, jid: str) -> int:
    """Rows of jid in salt_returns of the master's returner.pgjsonb database."""
    import psycopg2
    try:
        c = psycopg2.connect(host=opts.get("returner.pgjsonb.host", "localhost"),
                             port=int(opts.get("returner.pgjsonb.port", 5432)),
                             dbname=opts.get("returner.pgjsonb.db", "salt"),
                             user=opts.get("returner.pgjsonb.user", "salt"),
                             password=opts.get("returner.pgjsonb.pass", "salt"))
    except psycopg2.OperationalError:
        return 0
    try:
        with c.cursor() as cur:
            cur.execute("SELECT count(DISTINCT id) FROM salt_returns WHERE jid = %s", (jid,))
            return int(cur.fetchone()[0])
    finally:
        c.close()


class SylviteMaster(MasterBase):
    kind = "sylvite"

    def extra_ready(self) -> bool:
        return (self.root / "sock" / "master_cli.ipc").exists()


class SaltMaster(MasterBase):
    kind = "salt"

    def extra_ready(self) -> bool:
        # The publisher and request server are up; the event bus is what the CLI needs.
        sock = self.root / "sock"
        return sock.exists() and any(p.name.startswith("master_event_pub") for p in sock.iterdir())


# ----------------------------------------------------------------------------- swarm
class Swarm:
    """A sylvite-swarm process driven over its stdin/stdout JSON-lines protocol."""

    def __init__(self, exe: Path, root: Path, master: MasterBase, count: int, keys_dir: Path, pool: int,
                 threads: int, id_prefix="bench-", accept_wait=2.0, start_rate=0.0, transport="tcp", extra=()):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.count = count
        self.argv = [str(exe), "--master", "127.0.0.1", "--ret-port", str(master.ret_port),
                     "--pub-port", str(master.publish_port), "--count", str(count), "--id-prefix", id_prefix,
                     "--keys-dir", str(keys_dir), "--state-dir", str(root / "pki"), "--pool", str(pool),
                     "--threads", str(threads), "--accept-wait", str(accept_wait), "--start-rate", str(start_rate),
                     "--report", str(root / "swarm-report.json"), "--transport", transport, *extra,
                     # extra swarm flags for an experiment, e.g. "--zmq-auth-own-socket"
                     *shlex.split(os.environ.get("SYLVITE_SWARM_ARGS", ""))]
        self.err = open(root / "swarm.err", "ab")
        self.p = track(subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                        text=True, bufsize=1, start_new_session=True, preexec_fn=raise_nofile))
        self.q: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            self.keys_event = self.expect("keys", timeout=3600)
            self.expect("started", timeout=60)
        except BaseException:
            self.close()  # a swarm that died (or hung) while starting is not left behind
            raise

    def _read(self):
        for line in self.p.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                self.q.put(json.loads(line))
            except json.JSONDecodeError:
                self.q.put({"event": "garbage", "line": line})
        self.q.put({"event": "eof"})

    def expect(self, event: str, timeout=60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"swarm: no '{event}' within {timeout}s")
            try:
                j = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if j.get("event") == event:
                return j
            if j.get("event") == "eof":
                raise RuntimeError(f"swarm exited (rc={self.p.poll()}): {self.err_tail()}")

    def cmd(self, line: str, event: str, timeout=60.0) -> dict:
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise RuntimeError(f"swarm is gone (rc={self.p.poll()}): {e}: {self.err_tail()}") from e
        return self.expect(event, timeout)

    def status(self, since_ns: int = 0) -> dict:
        return self.cmd(f"status {since_ns}", "status")

    def wait_job(self, jid: str, count: int, timeout: float) -> dict:
        return self.cmd(f"wait {jid} {count} {timeout}", "job", timeout + 30)

    def job(self, jid: str) -> dict:
        return self.cmd(f"job {jid}", "job")

    def auth(self) -> dict:
        return self.cmd("auth", "auth")

    def ingest(self, window: int, jids: list[str], timeout=900.0) -> dict:
        return self.cmd(f"ingest {window} {','.join(jids)}", "ingest", timeout)

    def wait_status(self, pred, timeout: float, interval=0.05, since_ns: int = 0) -> tuple[bool, dict]:
        deadline = time.monotonic() + timeout
        st = self.status(since_ns)
        while not pred(st):
            if time.monotonic() > deadline:
                return False, st
            time.sleep(interval)
            st = self.status(since_ns)
        return True, st

    def err_tail(self, n=3000) -> str:
        p = self.root / "swarm.err"
        return p.read_text(errors="replace")[-n:] if p.exists() else ""

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.p.pid)

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=30)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if _group_alive(self.p):
            _signal_group(self.p, signal.SIGKILL)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if not self.err.closed:
            self.err.close()


def rmtree(p: Path):
    shutil.rmtree(p, ignore_errors=True)


# ----------------------------------------------------------------------------- RSA counter
class RsaOpCounter:
    """Counts RSA private-key operations of given processes with uprobes (root, tracefs,
    perf): OpenSSL's RSA_private_encrypt/RSA_private_decrypt in the system libcrypto
    (sylvite; Salt's X9.31 via ctypes) and rsa_ossl_private_encrypt/decrypt in the OpenSSL
    that the Python `cryptography` wheel links statically (Salt). Every sign (PKCS#1 v1.5, X9.31) and
    every OAEP decrypt goes through exactly one of them. Unavailable -> counts are None."""

    TRACEFS = Path("/sys/kernel/tracing")
    GROUP = "sylbench"

    def __init__(self, salt_bin: Path):
        self.events: dict[str, list[str]] = {}
        self.ok = False
        self.p = None
        self.out = None
        try:
            if not shutil.which("perf") or not (self.TRACEFS / "uprobe_events").exists():
                return
            libcrypto = Path("/usr/lib/x86_64-linux-gnu/libcrypto.so.3")
            rust = next(iter((salt_bin.parent / "lib").glob(
                "python3*/site-packages/cryptography/hazmat/bindings/_rust.abi3.so")), None)
            self._add("sylvite", libcrypto, ["RSA_private_encrypt", "RSA_private_decrypt"])
            if rust:
                self._add("salt", rust, ["rsa_ossl_private_encrypt", "rsa_ossl_private_decrypt"])
                # Salt signs X9.31 through ctypes on the system libcrypto (salt/utils/rsax931.py)
                self.events["salt"] += self.events.get("sylvite", [])
            self.ok = bool(self.events)
        except (OSError, subprocess.SubprocessError, ValueError):
            self.ok = False

    @staticmethod
    def _file_offset(lib: Path, sym: str) -> int | None:
        syms = subprocess.run(["readelf", "-Ws", str(lib)], capture_output=True, text=True).stdout
        vaddr = None
        for line in syms.splitlines():
            f = line.split()
            if len(f) >= 8 and f[3] == "FUNC" and f[7].split("@")[0] == sym and int(f[2]) > 0:
                vaddr = int(f[1], 16)
                break
        if vaddr is None:
            return None
        segs = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True).stdout
        for line in segs.splitlines():
            f = line.split()
            if f and f[0] == "LOAD":
                off, va, fsz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
                if va <= vaddr < va + fsz:
                    return vaddr - va + off
        return None

    def _add(self, kind: str, lib: Path, syms: list[str]):
        existing = (self.TRACEFS / "uprobe_events").read_text()
        names = []
        for sym in syms:
            off = self._file_offset(lib, sym)
            if off is None:
                continue
            name = f"{kind}_{sym}"[:60]
            if f"{self.GROUP}/{name} " not in existing:
                self._write(f"p:{self.GROUP}/{name} {lib}:{off:#x}\n")
            names.append(f"{self.GROUP}:{name}")
        if names:
            self.events[kind] = names

    def start(self, kind: str, pids: list[int]):
        if not self.ok or kind not in self.events or not pids:
            return
        self.out = Path(f"/tmp/sylbench-perfstat-{os.getpid()}.txt")
        argv = ["perf", "stat", "-x", ",", "-o", str(self.out), "-p", ",".join(map(str, pids))]
        for e in self.events[kind]:
            argv += ["-e", e]
        self.p = track(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                       own_group=False)
        time.sleep(0.3)  # let perf attach

    def stop(self) -> int | None:
        if not self.p:
            return None
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.p = None
        total = 0
        try:
            for line in self.out.read_text().splitlines():
                f = line.split(",")
                if len(f) > 2 and f[2].startswith(self.GROUP) and f[0].strip().isdigit():
                    total += int(f[0])
            self.out.unlink()
        except OSError:
            return None
        return total

    def close(self):
        if not self.events:
            return
        for names in self.events.values():
            for n in names:
                try:
                    self._write(f"-:{n.replace(':', '/')}\n")
                except OSError:
                    pass

    def _write(self, line: str):
        # tracefs wants one write() on an O_APPEND descriptor (Python's "a" mode seeks: EINVAL)
        fd = os.open(self.TRACEFS / "uprobe_events", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def preseed_accepted(keys_dir: Path, pki_dir: Path, count: int, id_prefix="bench-", id_width=5) -> float:
    """Write the public keys of minions 0..count-1 as accepted keys (an operator who
    pre-seeds keys: no pending round). Returns the seconds it took."""
    from cryptography.hazmat.primitives import serialization
    t0 = time.time()
    d = pki_dir / "minions"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        key = serialization.load_pem_private_key((keys_dir / f"{i}.pem").read_bytes(), password=None,
                                                 unsafe_skip_rsa_key_validation=True)
        pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
        (d / f"{id_prefix}{i:0{id_width}d}").write_bytes(pub)
    return time.time() - t0


class SwarmGroup:
    """Several sylvite-swarm processes (--first-index) seen as one swarm of `count` minions:
    a process may hold only as many sockets as its open-files limit (20,000 here), so
    20,000 minions need two. The same calls as Swarm; results are merged (ingest ack
    percentiles: the largest of the processes', an upper bound)."""

    def __init__(self, exe: Path, root: Path, master: MasterBase, count: int, keys_dir: Path, pool: int,
                 threads: int, procs: int, id_prefix="bench-", accept_wait=2.0, start_rate=0.0, transport="tcp",
                 extra=()):
        self.count = count
        self.swarms: list[Swarm] = []
        share = -(-count // procs)
        try:
            for i in range(procs):
                first, n = i * share, min(share, count - i * share)
                if n <= 0:
                    break
                self.swarms.append(Swarm(exe, root / f"part{i}", master, n, keys_dir, max(2, pool // procs), threads,
                                         id_prefix=id_prefix, accept_wait=accept_wait,
                                         start_rate=start_rate / procs, transport=transport,
                                         extra=("--first-index", str(first), *extra)))
        except BaseException:
            self.close()
            raise
        evs = [s.keys_event for s in self.swarms]
        self.keys_event = {"loaded": sum(e["loaded"] for e in evs), "generated": sum(e["generated"] for e in evs),
                           "seconds": max(e["seconds"] for e in evs)}

    def _each(self, fn):
        with concurrent.futures.ThreadPoolExecutor(len(self.swarms)) as ex:
            return list(ex.map(fn, self.swarms))

    def status(self, since_ns: int = 0) -> dict:
        out: dict = {}
        for st in self._each(lambda s: s.status(since_ns)):
            for k, v in st.items():
                if k.endswith("_ns") and isinstance(v, int):
                    pick = min if k.startswith("first") else max
                    out[k] = pick(out[k], v) if k in out and out[k] else v
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
                else:
                    out.setdefault(k, v)
        return out

    @staticmethod
    def _merge_jobs(jobs: list[dict]) -> dict:
        out = dict(jobs[0])
        out["entries"] = [e for j in jobs for e in j.get("entries", [])]
        for k in ("received", "acked"):
            out[k] = sum(j.get(k, 0) for j in jobs)
        return out

    def wait_job(self, jid: str, count: int, timeout: float) -> dict:
        shares = self._shares(count)
        return self._merge_jobs(self._each(lambda s: s.wait_job(jid, shares[id(s)], timeout)))

    def _shares(self, count: int) -> dict:
        # Minions expected per process: in proportion to its size (all of them when count is everyone).
        return {id(s): (s.count if count >= self.count else max(0, round(count * s.count / self.count)))
                for s in self.swarms}

    def job(self, jid: str) -> dict:
        return self._merge_jobs(self._each(lambda s: s.job(jid)))

    def ingest(self, window: int, jids: list[str], timeout=900.0) -> dict:
        rs = self._each(lambda s: s.ingest(max(1, window // len(self.swarms)), jids, timeout))
        secs = max(r["seconds"] for r in rs)
        ok = sum(r["ok"] for r in rs)
        return {"total": sum(r["total"] for r in rs), "ok": ok, "failed": sum(r["failed"] for r in rs),
                "seconds": secs, "returns_per_s": ok / secs if secs else 0.0,
                "ack_p50_ms": max(r["ack_p50_ms"] for r in rs), "ack_p99_ms": max(r["ack_p99_ms"] for r in rs),
                "ack_max_ms": max(r["ack_max_ms"] for r in rs), "window": sum(r["window"] for r in rs)}

    def auth(self) -> dict:
        raise NotImplementedError("the auth storm runs with one swarm process (--swarm-procs 1)")

    wait_status = Swarm.wait_status  # polls self.status(): the merged one here

    def err_tail(self, n=3000) -> str:
        return "".join(s.err_tail(n // max(1, len(self.swarms))) for s in self.swarms)

    def cpu_seconds(self) -> float:
        return sum(s.cpu_seconds() for s in self.swarms)

    def close(self):
        for s in self.swarms:
            s.close()
