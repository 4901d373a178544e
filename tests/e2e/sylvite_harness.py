"""Real-process harness for sylvite end-to-end tests.

Starts salt-master / salt-minion binaries from SYLVITE_BIN (default build/bin) on
127.0.0.1 with free ports and a private temp root, runs the CLIs against them, and
stops only the processes it started, by PID. Used by tests/e2e and tests/interop.

Multi-host: pass `host=` (a tests/e2e/netlab.py Host) to Env.master()/Env.minion() (or
Master/Minion). The daemon then runs inside that network namespace (argv prefixed with
host.wrap(); `ip netns exec` execs, so the PID and process group are the daemon's), a
master listens on host.ip with Salt's default ports 4505/4506, wait_ready() probes the
ports from inside the namespace, and a minion is given `master: <ip>` (or the list of
its masters' ips) and `master_port`. The CLIs talk to a master over its Unix socket, so
they run in the root namespace as before.

Shared-key setups (hot multi-master, failover): gen_key_pair() / copy_key_pair() /
share_master_key() put one master.pem/master.pub (or a master_sign pair) into several
masters' pki_dir before their first start.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SYLVITE_BIN", REPO / "build" / "bin"))

sys.path.insert(0, str(REPO / "bench"))
from benchlib import ports as _ports  # noqa: E402


def free_port() -> int:
    """A port below the kernel's ephemeral range, reserved for this process (bench/benchlib/ports.py)."""
    return _ports.pick()


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    """Poll pred() until truthy; raise AssertionError naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def yaml_dump(d: dict) -> str:
    # JSON is valid YAML; keeps the harness free of a YAML dependency.
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in d.items()) + "\n"


class Proc:
    def __init__(self, argv, log_path: Path, env=None):
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True, env=env)

    @property
    def pid(self):
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def _signal_group(self, sig):
        # The process was started in its own session, so its process group id is its
        # PID: signalling the group reaches the children it forked (real Salt daemons
        # run several processes) and nothing we did not start.
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self._signal_group(sig)
        try:
            self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.p.wait(timeout=5)
        # leftovers of the group (children of a daemon that exited first)
        self._signal_group(signal.SIGKILL)
        self.log.close()

    def stop(self):
        self.kill(signal.SIGTERM)


class Node:
    """Common parts of a master or minion: a config dir and a process."""

    kind = ""

    def __init__(self, root: Path, name: str, host=None):
        self.name = name
        self.host = host  # netlab.Host or None (root namespace, 127.0.0.1)
        self.root = root / name
        self.conf_dir = self.root / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.proc: Proc | None = None
        self.opts: dict = {}

    def write_config(self, **overrides):
        self.opts.update(overrides)
        (self.conf_dir / self.kind).write_text(yaml_dump(self.opts))

    def log_text(self) -> str:
        p = self.root / f"{self.kind}.out"
        return p.read_text(errors="replace") if p.exists() else ""

    def start(self, binary: str | None = None, extra=()):
        binary = binary or str(BIN / f"salt-{self.kind}")
        prefix = self.host.wrap() if self.host is not None else []
        self.proc = Proc([*prefix, binary, "-c", str(self.conf_dir), *extra], self.root / f"{self.kind}.out")
        return self

    def stop(self):
        if self.proc:
            self.proc.stop()

    def kill(self):
        if self.proc:
            self.proc.kill()


class Master(Node):
    kind = "master"

    def __init__(self, root: Path, name="master", host=None, **opts):
        super().__init__(root, name, host)
        # In a namespace the host has its own address: Salt's default ports.
        self.ret_port = int(opts.get("ret_port", 4506 if host is not None else free_port()))
        self.publish_port = int(opts.get("publish_port", 4505 if host is not None else free_port()))
        base = self.root
        for d in ("salt", "pillar"):
            (base / "srv" / d).mkdir(parents=True, exist_ok=True)
        self.opts = {
            "id": name,
            "interface": host.ip if host is not None else "127.0.0.1",
            "ret_port": self.ret_port,
            "publish_port": self.publish_port,
            "root_dir": str(base),
            "pki_dir": str(base / "pki"),
            "cachedir": str(base / "cache"),
            "sock_dir": str(base / "sock"),
            "log_file": str(base / "master.log"),
            "log_level_logfile": "debug",
            "file_roots": {"base": [str(base / "srv" / "salt")]},
            "pillar_roots": {"base": [str(base / "srv" / "pillar")]},
            "worker_threads": 2,
            "user": "root",
            "transport": "tcp",
        }
        self.opts.update(opts)
        self.write_config()

    @property
    def pki_dir(self) -> Path:
        return Path(self.opts["pki_dir"])

    @property
    def address(self) -> str:
        return self.opts["interface"]

    @property
    def file_root(self) -> Path:
        return Path(self.opts["file_roots"]["base"][0])

    @property
    def pillar_root(self) -> Path:
        return Path(self.opts["pillar_roots"]["base"][0])

    def cli(self, tool: str, *args, timeout=60, binary_dir: Path | None = None):
        exe = str((binary_dir or BIN) / tool)
        return subprocess.run([exe, "-c", str(self.conf_dir), *args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def salt(self, *args, **kw):
        return self.cli("salt", *args, **kw)

    def salt_json(self, *args, **kw) -> dict:
        r = self.salt("--out", "json", "--static", *args, **kw)
        try:
            return json.loads(r.stdout) if r.stdout.strip() else {}
        except json.JSONDecodeError as e:
            raise AssertionError(f"salt printed non-JSON (rc={r.returncode}):\n{r.stdout}\n{r.stderr}") from e

    def salt_key(self, *args, **kw):
        return self.cli("salt-key", *args, **kw)

    def salt_run(self, *args, **kw):
        return self.cli("salt-run", *args, **kw)

    def keys(self) -> dict:
        r = self.salt_key("-L", "--out", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def listening(self) -> bool:
        """Both ports accept connections (probed from inside the namespace for a netlab
        host: a lab address is never dialled from the root namespace)."""
        for port in (self.ret_port, self.publish_port):
            if self.host is not None:
                if not self.host.can_connect(self.host.ip, port):
                    return False
                continue
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                return False
        return True

    def wait_ready(self, timeout=30):
        def up():
            if self.proc and not self.proc.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.log_text()}")
            if not self.listening():
                return False
            return (Path(self.opts["sock_dir"]) / "master_cli.ipc").exists()
        wait_for(up, timeout, f"{self.name} to listen")
        return self


class Minion(Node):
    kind = "minion"

    def __init__(self, root: Path, name: str, master: Master | list, host=None, **opts):
        super().__init__(root, name, host)
        masters = master if isinstance(master, list) else [master]
        base = self.root
        self.opts = {
            "id": name,
            "master": masters[0].opts["interface"] if len(masters) == 1 else [m.opts["interface"] for m in masters],
            "master_port": masters[0].ret_port,
            "root_dir": str(base),
            "pki_dir": str(base / "pki"),
            "cachedir": str(base / "cache"),
            "sock_dir": str(base / "sock"),
            "log_file": str(base / "minion.log"),
            "log_level_logfile": "debug",
            "acceptance_wait_time": 1,
            "user": "root",
            "transport": "tcp",
        }
        self.opts.update(opts)
        self.write_config()

    def ran_job(self, jid: str) -> bool:
        """Whether this minion executed job jid (its log names the jid when it starts it)."""
        log = Path(self.opts["log_file"])
        return log.exists() and f"with jid {jid}" in log.read_text(errors="replace")

    def salt_call(self, *args, timeout=60, binary_dir: Path | None = None):
        exe = str((binary_dir or BIN) / "salt-call")
        prefix = self.host.wrap() if self.host is not None else []
        return subprocess.run([*prefix, exe, "-c", str(self.conf_dir), *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)


class Env:
    """A temp directory holding masters and minions; stops everything on close."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="sylvite-e2e-"))
        self.nodes: list[Node] = []

    def master(self, name="master", host=None, **opts) -> Master:
        m = Master(self.root, name, host=host, **opts)
        self.nodes.append(m)
        return m

    def minion(self, name, master, host=None, **opts) -> Minion:
        m = Minion(self.root, name, master, host=host, **opts)
        self.nodes.append(m)
        return m

    def close(self, keep=False):
        for n in reversed(self.nodes):
            try:
                n.kill()
            except Exception:
                pass
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def dump_logs(self) -> str:
        out = []
        for n in self.nodes:
            for f in sorted(n.root.glob("*.out")) + sorted(n.root.glob("*.log")):
                text = f.read_text(errors="replace")[-6000:]
                out.append(f"===== {n.name}/{f.name}\n{text}")
        return "\n".join(out)


# ---------------------------------------------------------------- shared keys
def gen_key_pair(pki_dir: Path, name: str = "master", bits: int = 2048) -> tuple[Path, Path]:
    """Write <pki_dir>/<name>.pem (0400) and <name>.pub (0644) with openssl, the layout
    Salt and sylvite read (PKCS#1 private key, SubjectPublicKeyInfo public key)."""
    pki_dir = Path(pki_dir)
    pki_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(pki_dir, 0o700)
    pem, pub = pki_dir / f"{name}.pem", pki_dir / f"{name}.pub"
    key = subprocess.run(["openssl", "genrsa", "-traditional", str(bits)], capture_output=True, check=True).stdout
    pubtext = subprocess.run(["openssl", "rsa", "-pubout"], input=key, capture_output=True, check=True).stdout
    for path, data, mode in ((pem, key, 0o400), (pub, pubtext, 0o644)):
        if path.exists():
            os.chmod(path, 0o600)
        path.write_bytes(data)
        os.chmod(path, mode)
    return pem, pub


def copy_key_pair(src_pki: Path, dst_pki: Path, name: str = "master", private: bool = True):
    """Copy <name>.pem (mode 0400; skipped when private=False) and <name>.pub (0644) from
    one pki_dir to another. Call before the destination daemon's first start (a master
    generates its own pair when none is there)."""
    src_pki, dst_pki = Path(src_pki), Path(dst_pki)
    dst_pki.mkdir(parents=True, exist_ok=True)
    os.chmod(dst_pki, 0o700)
    files = ((f"{name}.pem", 0o400), (f"{name}.pub", 0o644)) if private else ((f"{name}.pub", 0o644),)
    for fname, mode in files:
        dst = dst_pki / fname
        if dst.exists():
            os.chmod(dst, 0o600)
        shutil.copyfile(src_pki / fname, dst)
        os.chmod(dst, mode)


def preaccept(masters, name: str, minion_pki_dir: Path):
    """What `salt-key -a` on each master would leave: the minion's public key in every
    master's minions/<name> (its key pair is made first in minion_pki_dir, minion.pem/.pub)."""
    minion_pki_dir = Path(minion_pki_dir)
    gen_key_pair(minion_pki_dir, "minion")
    for m in masters:
        d = m.pki_dir / "minions"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(minion_pki_dir / "minion.pub", d / name)


def share_master_key(src: Master, *dsts: Master):
    """Give every master in dsts the master.pem/master.pub of src (hot multi-master and
    failover with one shared key). src's pair is generated first if it has none yet."""
    if not (src.pki_dir / "master.pem").exists():
        gen_key_pair(src.pki_dir, "master")
    for d in dsts:
        copy_key_pair(src.pki_dir, d.pki_dir, "master")
