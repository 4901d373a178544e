"""A real GlusterFS replica-3 volume across three hosts of a NetLab (needs root, glusterd,
FUSE). See docs/gluster.md, "For the next engineer: glusterlab.py".

    with NetLab() as lab:
        hosts = [lab.host(f"m{i}") for i in (1, 2, 3)]
        with GlusterLab(lab, hosts) as gl:        # volume "sylvite", mounted on every host
            gl.mounts["m1"] / "pki"                # a Path in the root mount namespace
            gl.kill_node(hosts[2])                 # node loss: silent, then every process dies

How it is built (the recipe of ../shared/reference/lab-notes.md, "GlusterFS"):
- one glusterd per host, in the host's network namespace only (`nsenter --net=`), started in
  the foreground (`glusterd -N -f NODE.vol`) with its own working-directory, run-directory,
  glusterd-sockfile and transport.socket.bind-address (the host's address) in NODE.vol, all
  under one temporary state directory;
- the volume is made by the operator script deploy/gluster/create-volume.sh (peer probe by
  address, `replica 3 ... force` with bricks under the state directory, the volume options,
  start), talking to the first glusterd through its CLI socket (`--sock`): the gluster CLI
  itself needs no network, so it runs in the root namespace;
- each host mounts the volume with deploy/gluster/mount.sh run under `nsenter --net=` only, so
  the FUSE client lives in the host's network namespace while the mount is visible in the
  root mount namespace (the tests read and write it directly).

Teardown (close(), also from __exit__ on an exception and from atexit; it must run before the
NetLab closes, which the `with` nesting gives): unmount every mount (lazily if a plain umount
fails or hangs), stop the volume, then kill, by PID, the glusterd processes started here and
the gluster processes they spawned (bricks, self-heal daemon, FUSE clients): processes in a
lab namespace whose command line names this lab's state directory. Then remove the state
directory and the per-brick log files glusterd wrote under /var/log/glusterfs. Nothing else on
the machine is touched: no system glusterd, no /var/lib/glusterd, no other mount.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from netlab import Host, NetLab

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "gluster"
GLUSTERD = shutil.which("glusterd") or "/usr/sbin/glusterd"
GLUSTER = shutil.which("gluster") or "/usr/sbin/gluster"
LOG_DIR = Path("/var/log/glusterfs")


def gluster_available() -> str | None:
    """None if this machine can run a GlusterLab, else the reason it cannot."""
    if os.geteuid() != 0:
        return "GlusterFS in network namespaces needs root"
    for exe in (GLUSTERD, GLUSTER, "/sbin/mount.glusterfs"):
        if not Path(exe).exists():
            return f"{exe} is missing (apt-get install glusterfs-server glusterfs-client)"
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing"
    if shutil.which("nsenter") is None:
        return "nsenter is missing (util-linux)"
    return None


def _fuse_mounts_under(prefix: str) -> list[str]:
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                mnt = parts[1].replace("\\040", " ")
                if mnt == prefix or mnt.startswith(prefix + "/"):
                    out.append(mnt)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ns_pids(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    return [int(t) for t in r.stdout.split() if t.isdigit()]


class GlusterLab:
    """A replica-3 volume over three NetLab hosts, mounted on each; see the module doc.

    Attributes: volume, hosts, state (the temporary state directory), mounts (host name ->
    mount point), create_seconds (time from the first glusterd start to the volume started and
    mounted everywhere), dead (names of hosts given to kill_node)."""

    def __init__(self, lab: NetLab, hosts: list[Host], volume: str = "sylvite", *,
                 allow_clients: bool = True, timeout: float = 120, clients: list[Host] = ()):
        if len(hosts) != 3:
            raise ValueError("a replica-3 volume needs exactly three hosts")
        reason = gluster_available()
        if reason:
            raise RuntimeError(reason)
        self.lab = lab
        self.hosts = list(hosts)
        self.clients = list(clients)  # hosts allowed to mount the volume without a brick (mount_client)
        self.volume = volume
        self.timeout = timeout
        self.mounts: dict[str, Path] = {}
        self.dead: set[str] = set()
        self.create_seconds: float | None = None
        self.close_seconds: float | None = None
        self._glusterd: dict[str, subprocess.Popen] = {}
        self._closed = False
        self.state = Path(tempfile.mkdtemp(prefix="sylvite-gl-"))
        self._started_at = time.time()
        atexit.register(self.close)
        t0 = time.monotonic()
        try:
            for h in self.hosts:
                self._start_glusterd(h)
            for h in self.hosts:
                self._wait_glusterd(h)
            self._phase("glusterd up", t0, "open")
            self._create_volume(allow_clients)
            self._phase("volume created and started", t0, "open")
            for h in self.hosts:
                self._mount(h)
            self._phase("mounted", t0, "open")
        except BaseException:
            self.close()
            raise
        self.create_seconds = time.monotonic() - t0

    # ---------------------------------------------------------------- paths
    def node_dir(self, host: Host) -> Path:
        return self.state / host.name

    def sock(self, host: Host) -> Path:
        return self.node_dir(host) / "glusterd.socket"

    def brick(self, host: Host) -> Path:
        return self.state / "bricks" / host.ip / "brick"

    def gluster(self, host: Host, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        """The gluster CLI against host's glusterd (through its unix socket)."""
        return subprocess.run([GLUSTER, "--mode=script", f"--glusterd-sock={self.sock(host)}",
                               f"--log-file={self.node_dir(host) / 'cli.log'}", *args],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)

    # ---------------------------------------------------------------- bring-up
    def _start_glusterd(self, host: Host):
        d = self.node_dir(host)
        for sub in ("lib", "run", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # glusterd makes the brick directory itself but not its parents.
        self.brick(host).parent.mkdir(parents=True, exist_ok=True)
        vol = d / "glusterd.vol"
        # /etc/glusterfs/glusterd.vol plus the four per-node options of the lab notes.
        vol.write_text(
            "volume management\n"
            "    type mgmt/glusterd\n"
            f"    option working-directory {d / 'lib'}\n"
            f"    option run-directory {d / 'run'}\n"
            f"    option glusterd-sockfile {self.sock(host)}\n"
            f"    option transport.socket.bind-address {host.ip}\n"
            # Its logs, the brick and self-heal daemon logs and cmd_history.log go here, not
            # to /var/log/glusterfs.
            f"    option logging-directory {d / 'log'}\n"
            "    option transport-type socket\n"
            "    option transport.socket.keepalive-time 10\n"
            "    option transport.socket.keepalive-interval 2\n"
            "    option transport.socket.read-fail-log off\n"
            "    option transport.socket.listen-port 24007\n"
            "    option ping-timeout 0\n"
            "    option event-threads 1\n"
            "    option max-port 60999\n"
            "end-volume\n")
        log = open(d / "log" / "glusterd.stdout", "ab")
        # nsenter --net only (no ip netns exec: that also makes a private mount namespace, and
        # the bricks and FUSE clients glusterd spawns must share the root one).
        p = subprocess.Popen(["nsenter", f"--net=/run/netns/{host.ns}", GLUSTERD, "-N",
                              "-f", str(vol), "-l", str(d / "log" / "glusterd.log"),
                              "-p", str(d / "run" / "glusterd.pid")],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self._glusterd[host.name] = p

    def _wait_glusterd(self, host: Host):
        deadline = time.monotonic() + self.timeout
        p = self._glusterd[host.name]
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"glusterd on {host.name} exited with {p.returncode}: "
                                   f"{self._tail(self.node_dir(host) / 'log' / 'glusterd.log')}")
            if self.sock(host).exists():
                # A glusterd still initialising (slow under a loaded CI machine) can hold a CLI
                # call past its timeout: that is "not yet", like a refused one, until the deadline.
                try:
                    if self.gluster(host, "peer", "status", timeout=10).returncode == 0:
                        return
                except subprocess.TimeoutExpired:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"glusterd on {host.name} not answering on {self.sock(host)} "
                                   f"within {self.timeout:.0f} s:"
                                   f"{self._tail(self.node_dir(host) / 'log' / 'glusterd.log')}")
            time.sleep(0.1)

    def _create_volume(self, allow_clients: bool):
        first = self.hosts[0]
        argv = ["bash", str(DEPLOY / "create-volume.sh"), "--force", "--sock", str(self.sock(first))]
        if allow_clients:
            argv += ["--allow", ",".join(h.ip for h in self.hosts + self.clients)]
        argv += [self.volume, str(self.state / "bricks" / "%h" / "brick")] + [h.ip for h in self.hosts]
        # The operator script calls plain `gluster`: a wrapper keeps the CLI's log out of
        # /var/log/glusterfs.
        cli = self.state / "gluster-cli"
        cli.write_text(f"#!/bin/sh\nexec {GLUSTER} --log-file={self.state / 'cli.log'} \"$@\"\n")
        cli.chmod(0o755)
        env = dict(os.environ, GLUSTER=str(cli))
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=self.timeout, env=env)
        (self.state / "create-volume.out").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            raise RuntimeError(f"create-volume.sh failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        self.create_output = r.stdout

    def mount_client(self, host: Host) -> Path:
        """Mounts the volume on a host that has no brick (one of `clients`): a new master
        joining the cluster. Unmounted by close()."""
        if host not in self.clients:
            raise ValueError(f"{host.name} is not in clients (the volume's auth.allow)")
        self._mount(host, server=self.hosts[0])
        return self.mounts[host.name]

    def _mount(self, host: Host, server: Host | None = None):
        mnt = self.state / "mnt" / host.name
        server = server or host
        others = [h.ip for h in self.hosts if h is not server]
        log = self.node_dir(host) / "log" / "mount.log"
        r = subprocess.run(["nsenter", f"--net=/run/netns/{host.ns}", "bash", str(DEPLOY / "mount.sh"),
                            "--backup", ":".join(others), "--options", f"log-file={log}",
                            self.volume, server.ip, str(mnt)],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=self.timeout)
        if r.returncode != 0 or str(mnt) not in _fuse_mounts_under(str(mnt)):
            raise RuntimeError(f"mount on {host.name} failed ({r.returncode}): {r.stdout}{r.stderr}"
                               f"{self._tail(log)}")
        self.mounts[host.name] = mnt

    # ---------------------------------------------------------------- failures
    def node_pids(self, host: Host) -> list[int]:
        """PIDs of the gluster processes of this lab on host: its glusterd, bricks, self-heal
        daemon and FUSE client (processes in host's namespace naming our state directory)."""
        mark = str(self.state)
        pids = [pid for pid in _ns_pids(host.ns) if mark in _cmdline(pid)]
        p = self._glusterd.get(host.name)
        if p is not None and p.poll() is None and p.pid not in pids:
            pids.append(p.pid)
        return pids

    def kill_node(self, host: Host, silent: bool = True):
        """Lose host as a machine dies: first (silent=True) blackhole it, so its peers and the
        other mounts get no RST or FIN and must notice by network.ping-timeout, then SIGKILL its
        glusterd, bricks, self-heal daemon and FUSE client. Its mount point stays in mounts
        (dead: ENOTCONN) and is unmounted by close()."""
        if silent:
            host.blackhole()
        for pid in self.node_pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p = self._glusterd.get(host.name)
        if p is not None:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.dead.add(host.name)

    def restart_node(self, host: Host):
        """Bring a host lost with kill_node back: lift the blackhole, start its glusterd again
        on the same state (it restarts its brick and self-heal daemon itself), and remount its
        dead mount. The other nodes' clients reconnect to the brick by themselves; the
        self-heal daemons then copy what changed meanwhile (heal_pending())."""
        if host.name not in self.dead:
            raise ValueError(f"{host.name} was not killed")
        host.blackhole(False)
        mnt = self.mounts.get(host.name)
        if mnt is not None:
            self._umount(mnt)
        self._start_glusterd(host)
        self._wait_glusterd(host)
        deadline = time.monotonic() + self.timeout
        while not self._brick_online(host):
            if time.monotonic() > deadline:
                raise RuntimeError(f"brick on {host.name} not online after restart")
            time.sleep(0.2)
        self._mount(host)
        self.dead.discard(host.name)

    def _brick_online(self, host: Host) -> bool:
        r = self.gluster(host, "volume", "status", self.volume, f"{host.ip}:{self.brick(host)}",
                         "detail", timeout=30)
        return r.returncode == 0 and any(line.split(":", 1)[-1].strip() == "Y"
                                         for line in r.stdout.splitlines() if line.startswith("Online"))

    def heal_pending(self) -> int | None:
        """Entries waiting for self-heal, summed over the live bricks: the count of files under
        each brick's .glusterfs/indices/xattrop (what `volume heal info` reports; that command
        needs glusterd on localhost and does not work in the lab). None if unreadable."""
        total = 0
        for h in self.hosts:
            if h.name in self.dead:
                continue
            d = self.brick(h) / ".glusterfs" / "indices" / "xattrop"
            try:
                total += sum(1 for f in d.iterdir() if not f.name.startswith("xattrop-"))
            except OSError:
                return None
        return total

    # ---------------------------------------------------------------- teardown
    @staticmethod
    def _tail(path: Path, n: int = 2000) -> str:
        try:
            return "\n" + path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _umount(self, mnt: Path):
        if str(mnt) not in _fuse_mounts_under(str(mnt)):
            return
        try:
            r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=15)
            if r.returncode == 0:
                return
        except subprocess.TimeoutExpired:
            pass
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, stdin=subprocess.DEVNULL, timeout=15)

    @staticmethod
    def _phase(what, t0, stage="close"):
        if os.environ.get("GLUSTERLAB_DEBUG"):
            print(f"[glusterlab] {stage}: {what} at {time.monotonic() - t0:.2f} s", flush=True)

    def _print_log_errors(self, n: int = 30):
        """The last error/warning lines of every mount and brick log, printed before the state
        directory goes: pytest shows them with a failing test (captured otherwise)."""
        logs = sorted(self.state.glob("*/log/mount.log")) + sorted(self.state.glob("*/log/bricks/*.log"))
        for log in logs:
            try:
                lines = [ln for ln in log.read_text(errors="replace").splitlines() if "] E [" in ln or "] W [" in ln]
            except OSError:
                continue
            if lines:
                print(f"[glusterlab] {log.relative_to(self.state)}: last {min(n, len(lines))} of {len(lines)} E/W lines")
                print("\n".join(lines[-n:]))

    def close(self):
        if self._closed:
            return
        self._closed = True
        t0 = time.monotonic()
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        self._print_log_errors()
        # 1. Mounts (a mount on a dead node: its client is gone or hung; umount -l still works).
        for mnt in list(self.mounts.values()) + sorted(Path(m) for m in _fuse_mounts_under(str(self.state))):
            try:
                self._umount(mnt)
            except Exception:
                pass
        self._phase('unmounted', t0)
        # 2. Our processes, by PID: the glusterd processes started here and what they spawned
        # (bricks, self-heal daemons, FUSE clients). SIGTERM ends them cleanly (bricks need no
        # `volume stop`, which would wait 30 s for a dead peer); SIGKILL whatever is left.
        deadline = time.monotonic() + 5
        sig = signal.SIGTERM
        while True:
            left = []
            for h in self.hosts + self.clients:
                try:
                    left += self.node_pids(h)
                except Exception:
                    pass
            if not left:
                break
            if time.monotonic() > deadline:
                if sig == signal.SIGKILL and time.monotonic() > deadline + 5:
                    break
                sig = signal.SIGKILL
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for p in self._glusterd.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._phase('processes ended', t0)
        # A mount whose client just died: unmount lazily.
        for m in _fuse_mounts_under(str(self.state)):
            subprocess.run(["umount", "-l", m], capture_output=True, stdin=subprocess.DEVNULL, timeout=15)
        self._phase('lazy unmounts done', t0)
        # A gluster process makes /tmp/glfs-bt-XXXXXX (a hard-coded path) for a backtrace and
        # unlinks it at once; one killed in between (kill_node, SIGKILL above) leaves it.
        for f in Path("/tmp").glob("glfs-bt-*"):
            try:
                st = f.stat()
                if f.is_file() and st.st_size == 0 and st.st_mtime >= self._started_at - 1:
                    f.unlink(missing_ok=True)
            except OSError:
                pass
        # 3. Files: the state directory (bricks included) and the brick logs glusterd names after
        # the brick path (/var/log/glusterfs/bricks/<path with - for />.log).
        if not _fuse_mounts_under(str(self.state)):
            shutil.rmtree(self.state, ignore_errors=True)
        tag = str(self.state).strip("/").replace("/", "-")
        for d in (LOG_DIR / "bricks", LOG_DIR):
            try:
                for f in d.iterdir():
                    if tag in f.name and f.is_file():
                        f.unlink(missing_ok=True)
            except OSError:
                pass
        self.close_seconds = time.monotonic() - t0

    def __enter__(self) -> "GlusterLab":
        return self

    def __exit__(self, *exc):
        self.close()
        return False
