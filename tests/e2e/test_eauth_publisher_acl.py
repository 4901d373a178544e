"""publisher_acl / publisher_acl_blacklist for the salt CLI (issue 19, eauth part), real
processes: a sylvite master and minion, the `salt` CLI run as root and as throwaway system
users. The caller is identified by the CLI socket's peer credentials (SO_PEERCRED), so a
user claiming to be root (SUDO_USER=root) is still themselves.

The master's sock_dir is 0700 and its CLI socket 0600 (only root and the master's user can
connect, as Salt's 0750 root-owned sock_dir by default); this test opens its own temp
master's socket to everyone to exercise the ACL. Needs root (useradd); CI runs as root.
"""
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from sylvite_harness import BIN, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates throwaway system users")


class ThrowawayUser:
    def __init__(self):
        self.name = "sylvpa" + uuid.uuid4().hex[:8]
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", self.name], check=True)

    def remove(self):
        subprocess.run(["userdel", self.name], check=False)


def open_up(path: Path):
    """a+rx on path and every parent up to /tmp (the test's own temp tree only)."""
    p = path
    while str(p).startswith("/tmp/") and p != Path("/tmp"):
        mode = p.stat().st_mode
        p.chmod(stat.S_IMODE(mode) | 0o055 | (0o011 if p.is_dir() else 0))
        p = p.parent


def salt_as(master, user, *args, env_extra=None):
    # The CLI is copied into the test's own (opened) tree: the build folder may sit under
    # a directory other users cannot enter (a clone in `mktemp -d`, mode 0700).
    exe = master.root / "bin" / "salt"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(BIN / "salt", exe)
        open_up(exe)
    env = dict(os.environ, HOME="/tmp", **(env_extra or {}))
    env.pop("SUDO_USER", None)
    env.update(env_extra or {})
    cmd = ["runuser", "-u", user, "--", str(exe), "-c", str(master.conf_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)


def test_publisher_acl_by_peer_uid(env):
    fred = ThrowawayUser()
    eve = ThrowawayUser()
    try:
        master = env.master(
            publisher_acl={fred.name: ["test.*", {"alpha": ["grains.item"]}]},
            publisher_acl_blacklist={"users": [eve.name + "x"], "modules": ["cmd.*"]},
            log_level="info",
        ).start().wait_ready()
        minion = env.minion("alpha", master).start()
        wait_for(lambda: "alpha" in master.keys().get("minions_pre", []), 60, "alpha's key")
        assert master.salt_key("-A", "-y").returncode == 0
        wait_for(lambda: master.salt_json("alpha", "test.ping", "-t", "5").get("alpha") is True, 60, "alpha to answer")

        sock_dir = Path(master.opts["sock_dir"])
        sock = sock_dir / "master_cli.ipc"
        # As shipped: only the owner.
        assert stat.S_IMODE(sock_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        r = salt_as(master, fred.name, "alpha", "test.ping")
        assert r.returncode != 0, r.stdout + r.stderr  # cannot even connect
        assert "failed to execute" not in r.stderr, r.stderr  # refused by the socket, not by exec

        # Open this test master's socket to everyone to exercise publisher_acl.
        open_up(master.conf_dir / "master")
        open_up(sock_dir)
        sock.chmod(0o666)

        r = salt_as(master, fred.name, "alpha", "test.ping", "--out", "json", "--static")
        assert r.returncode == 0, r.stdout + r.stderr
        assert '"alpha": true' in r.stdout

        # Allowed on alpha only: grains.item; on '*' no (every targeted minion must match).
        r = salt_as(master, fred.name, "alpha", "grains.item", "id", "--out", "json", "--static")
        assert r.returncode == 0 and '"alpha"' in r.stdout, r.stdout + r.stderr
        r = salt_as(master, fred.name, "alpha", "grains.get", "id")
        # As Salt 3008.5's salt CLI: the message alone on stdout, exit status 0.
        assert r.stdout == "Authorization error occurred.\n" and r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        r = salt_as(master, fred.name, "alpha", "grains.get", "id", "--async")
        assert r.stdout == "Authorization error occurred.\n" and r.returncode == 0, (r.returncode, r.stdout, r.stderr)

        # Blacklisted module: refused for fred and for root alike (Salt checks the blacklist first).
        r = salt_as(master, fred.name, "alpha", "cmd.run", "id")
        assert "Authorization error occurred." in r.stdout, r.stdout + r.stderr
        r = master.salt("alpha", "cmd.run", "id")
        assert "Authorization error occurred." in r.stdout, r.stdout + r.stderr
        # root otherwise passes publisher_acl.
        out = master.salt_json("alpha", "grains.get", "id")
        assert out.get("alpha") == "alpha", out

        # Not in publisher_acl: authentication error, also when claiming to be root.
        r = salt_as(master, eve.name, "alpha", "test.ping")
        assert "Authentication error occurred." in r.stdout, r.stdout + r.stderr
        r = salt_as(master, eve.name, "alpha", "test.ping", env_extra={"SUDO_USER": "root"})
        assert "Authentication error occurred." in r.stdout, r.stdout + r.stderr
        r = salt_as(master, fred.name, "alpha", "grains.get", "id", env_extra={"SUDO_USER": "root"})
        assert "Authorization error occurred." in r.stdout, r.stdout + r.stderr

        # Every refusal is logged with the real user.
        log = (Path(master.opts["log_file"])).read_text(errors="replace") + master.log_text()
        assert f"by {fred.name} refused" in log
        assert f"by {eve.name} refused" in log

        # The job record names the real caller, not the claimed one.
        r = salt_as(master, fred.name, "alpha", "test.echo", "hi-from-fred", env_extra={"SUDO_USER": "root"})
        assert r.returncode == 0, r.stdout + r.stderr
        jobs = master.salt_run("jobs.list_jobs", "--out", "json")
        assert jobs.returncode == 0, jobs.stderr
        import json

        listed = json.loads(jobs.stdout)
        echo = [j for j in listed.values() if j.get("Function") == "test.echo"]
        assert echo and echo[-1]["User"] == fred.name, echo
        minion.stop()
    finally:
        fred.remove()
        eve.remove()
