"""Network-namespace lab for multi-host tests (needs root, iproute2 and iptables).

    with NetLab() as lab:              # subnet 10.251.<index>.0/24
        a = lab.host("m1")             # netns syl<index>-m1, address 10.251.<index>.1
        b = lab.host("minion")         # 10.251.<index>.2
        assert b.can_connect(a.ip, 4506)
        a.blackhole()                  # silent death: DROP in/out, no RST
        a.link(False)                  # or: cable pulled

Layout: one bridge namespace syl<index>-br holding br0; every host is its own namespace
with eth0, one end of a veth pair whose other end is a port of br0. The root namespace
gets no address in the lab.

Safety (docs/architecture.md, "Network namespaces in tests: the safety rule"): before any
namespace exists, `ip route add blackhole 10.251.<index>.0/24` goes into the root
namespace, so nothing sent to a lab address from the root namespace can leave the machine.
Clients run inside a namespace (Host.wrap(), Host.run(), Host.can_connect()). close() —
also from __exit__ on an exception and from atexit — kills the processes started through
the lab (their process groups) and anything still running inside its namespaces, deletes
the namespaces, removes the blackhole route only if this lab added it, and removes its
lock file. Index choice: /run/sylvite-netlab/<index>.lock held with flock, so parallel
pytest-xdist workers get different subnets; a lock that is free proves a previous owner
died, and its leftover namespaces are removed before reuse.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LOCK_DIR = Path("/run/sylvite-netlab")
PREFIX = "10.251"
BRIDGE = "br0"


def _ip(*args, check=True, ns: str | None = None) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", ns] if ns else []) + list(args)
    r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _netns_list() -> list[str]:
    r = _ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _route_exists(subnet: str) -> bool:
    r = _ip("route", "show", "exact", subnet, check=False)
    return bool(r.stdout.strip())


def _blackhole_route_exists(subnet: str) -> bool:
    r = _ip("route", "show", "exact", subnet, check=False)
    return any(line.split()[:1] == ["blackhole"] for line in r.stdout.splitlines())


class Host:
    """One lab host: its own network namespace with eth0 on the lab bridge."""

    def __init__(self, lab: "NetLab", name: str, ns: str, ip: str, n: int):
        self.lab = lab
        self.name = name
        self.ns = ns
        self.ip = ip
        self.n = n
        self._blackholed = False

    def __repr__(self):
        return f"Host({self.name!r}, ns={self.ns!r}, ip={self.ip!r})"

    def wrap(self) -> list[str]:
        """argv prefix that runs a command inside this host's namespace. `ip netns exec`
        execs the command, so the PID of a Popen on wrap() + argv is the command's own."""
        return ["ip", "netns", "exec", self.ns]

    def run(self, argv, **kw) -> subprocess.CompletedProcess:
        """subprocess.run(argv) inside the namespace (capture_output/text default on,
        stdin from /dev/null, timeout 60 s unless given)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.wrap() + list(argv), **kw)

    def popen(self, argv, **kw) -> subprocess.Popen:
        """Start a long-running process inside the namespace in its own session; the lab
        kills its process group on close()."""
        kw["start_new_session"] = True
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(self.wrap() + list(argv), **kw)
        self.lab._procs.append(p)
        return p

    def can_connect(self, ip: str, port: int, timeout: float = 0.5) -> bool:
        """TCP connect from inside this namespace; True if the handshake completed within
        timeout."""
        code = ("import socket,sys\n"
                "try:\n"
                f"    socket.create_connection(({ip!r}, {int(port)}), timeout={float(timeout)}).close()\n"
                "except OSError:\n"
                "    sys.exit(1)\n")
        try:
            r = self.run([sys.executable, "-c", code], timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0

    def _iptables(self, *args) -> subprocess.CompletedProcess:
        return self.run(["iptables", "-w", "5", *args], timeout=30)

    _RULES = (("INPUT", "-i"), ("OUTPUT", "-o"))

    def blackhole(self, on: bool = True):
        """DROP every packet in and out of this host except on lo: peers see silence (no
        RST, no ICMP), as with a host that died or a cut cable behind a switch. off removes
        the rules again."""
        if on == self._blackholed:
            return
        for chain, flag in self._RULES:
            rule = [chain, "!", flag, "lo", "-m", "comment", "--comment", "sylvite-netlab", "-j", "DROP"]
            r = self._iptables("-I" if on else "-D", *rule)
            if r.returncode != 0:
                raise RuntimeError(f"iptables in {self.ns} failed: {r.stderr.strip()}")
        self._blackholed = on

    def link(self, up: bool):
        """eth0 up/down inside the namespace (down: this host gets ENETUNREACH at once,
        its peers see silence)."""
        _ip("link", "set", "eth0", "up" if up else "down", ns=self.ns)


class NetLab:
    """A lab subnet 10.251.<index>.0/24 with a bridge and hosts; see the module doc."""

    def __init__(self, index: int | None = None):
        self.index: int | None = None
        self.hosts: dict[str, Host] = {}
        self._procs: list[subprocess.Popen] = []
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None
        self._route_added = False
        self._closed = False
        self._namespaces: list[str] = []
        atexit.register(self.close)
        try:
            self._acquire(index)
            self.subnet = f"{PREFIX}.{self.index}.0/24"
            self.bridge_ns = f"syl{self.index}-br"
            self._cleanup_stale()
            # Safety first: nothing aimed at the lab subnet may leave the root namespace.
            if not _blackhole_route_exists(self.subnet):
                if _route_exists(self.subnet):
                    raise RuntimeError(f"the root namespace already routes {self.subnet}; refusing to use it")
                _ip("route", "add", "blackhole", self.subnet)
                self._route_added = True
            if not _blackhole_route_exists(self.subnet):
                raise RuntimeError(f"blackhole route for {self.subnet} is missing")
            self._add_ns(self.bridge_ns)
            _ip("link", "add", BRIDGE, "type", "bridge", ns=self.bridge_ns)
            _ip("link", "set", BRIDGE, "up", ns=self.bridge_ns)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- index + lock
    def _try_lock(self, index: int) -> bool:
        LOCK_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        path = LOCK_DIR / f"{index}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        # The previous holder may have unlinked the file between our open and flock.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd, self._lock_path, self.index = fd, path, index
        return True

    def _acquire(self, index: int | None):
        if index is not None:
            if not 0 <= index <= 255:
                raise ValueError("index must be 0..255")
            deadline = time.monotonic() + 30
            while not self._try_lock(index):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"netlab index {index} is in use ({LOCK_DIR}/{index}.lock)")
                time.sleep(0.2)
            return
        for i in range(1, 255):
            # Skip subnets the root namespace routes for someone else (not our blackhole).
            subnet = f"{PREFIX}.{i}.0/24"
            if _route_exists(subnet) and not _blackhole_route_exists(subnet):
                continue
            if self._try_lock(i):
                return
        raise RuntimeError("no free netlab index")

    def _cleanup_stale(self):
        """Our lock is held, so namespaces with our prefix are leftovers of a lab whose
        process died before close(): remove them (and whatever still runs in them)."""
        prefix = f"syl{self.index}-"
        for ns in _netns_list():
            if ns.startswith(prefix):
                self._kill_ns_pids(ns)
                _ip("netns", "delete", ns, check=False)

    # ---------------------------------------------------------------- hosts
    def _add_ns(self, ns: str):
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("link", "set", "lo", "up", ns=ns)

    def host(self, name: str) -> Host:
        if self._closed:
            raise RuntimeError("lab is closed")
        if name in self.hosts or name == "br":
            raise ValueError(f"host name {name!r} is taken")
        n = len(self.hosts) + 1
        if n > 250:
            raise RuntimeError("too many hosts")
        ns = f"syl{self.index}-{name}"
        ip = f"{PREFIX}.{self.index}.{n}"
        self._add_ns(ns)
        port = f"vp{n}"
        # Create the pair inside the host namespace, move the peer into the bridge one.
        _ip("link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", self.bridge_ns, ns=ns)
        _ip("link", "set", port, "master", BRIDGE, ns=self.bridge_ns)
        _ip("link", "set", port, "up", ns=self.bridge_ns)
        _ip("addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
        _ip("link", "set", "eth0", "up", ns=ns)
        h = Host(self, name, ns, ip, n)
        self.hosts[name] = h
        return h

    # ---------------------------------------------------------------- teardown
    @staticmethod
    def _kill_ns_pids(ns: str):
        r = _ip("netns", "pids", ns, check=False)
        for tok in r.stdout.split():
            try:
                os.kill(int(tok), signal.SIGKILL)
            except (ValueError, ProcessLookupError, PermissionError):
                pass

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        for p in self._procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except Exception:
                pass
        # Hosts first, the bridge last; anything still inside (e.g. daemons a harness
        # started through wrap()) dies with its namespace.
        for ns in reversed(self._namespaces):
            self._kill_ns_pids(ns)
        for ns in reversed(self._namespaces):
            for _ in range(20):
                r = _ip("netns", "delete", ns, check=False)
                if r.returncode == 0 or ns not in _netns_list():
                    break
                time.sleep(0.1)
        self._namespaces.clear()
        if self._route_added:
            _ip("route", "del", "blackhole", self.subnet, check=False)
            self._route_added = False
        if self._lock_fd is not None:
            try:
                if self._lock_path is not None:
                    self._lock_path.unlink(missing_ok=True)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> "NetLab":
        return self

    def __exit__(self, *exc):
        self.close()
        return False
