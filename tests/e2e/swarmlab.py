"""sylvite-swarm (bench/swarm) as a test fixture: N simulated Salt minions in one process,
driven over its stdin/stdout control protocol (docs/benchmarks.md, "The swarm"). RSA keys
are generated once into a cache shared by runs (SYLVITE_SWARM_KEYS, default
~/.cache/sylvite/swarm-keys-2048).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from sylvite_harness import BIN

SWARM = BIN / "sylvite-swarm"
KEYS = Path(os.environ.get("SYLVITE_SWARM_KEYS", Path.home() / ".cache" / "sylvite" / "swarm-keys-2048"))


class Swarm:
    def __init__(self, root: Path, count: int, master: str, ret_port: int, pub_port: int = 0,
                 prefix: str = "sw-", pool: int = 20, threads: int = 2, extra=()):
        KEYS.mkdir(parents=True, exist_ok=True)
        self.count = count
        self.prefix = prefix
        self.err = open(root / f"swarm-{prefix.strip('-')}.err", "ab")
        argv = [str(SWARM), "--master", master, "--ret-port", str(ret_port), "--pub-port", str(pub_port),
                "-n", str(count), "--id-prefix", prefix, "--keys-dir", str(KEYS), "--pool", str(pool),
                "--threads", str(threads), "--accept-wait", "1", "--return-timeout", "30", "--return-tries", "5",
                "--state-dir", str(root / f"swarm-{prefix.strip('-')}-state"), *extra]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  text=True, bufsize=1, start_new_session=True)

    def ids(self) -> list[str]:
        return [f"{self.prefix}{i:05d}" for i in range(self.count)]

    def cmd(self, line: str, event: str) -> dict:
        """Sends a command; returns its answer (the next line whose "event" is `event`;
        unsolicited lines, e.g. the start-up event, are skipped)."""
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        while True:
            out = self.p.stdout.readline()
            if not out:
                raise RuntimeError(f"sylvite-swarm exited ({self.p.poll()}) on '{line}'")
            j = json.loads(out)
            if j.get("event") == event:
                return j

    def status(self) -> dict:
        return self.cmd("status", "status")

    def wait_ready(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        st = self.status()
        while st["ready"] < self.count and time.monotonic() < deadline:
            time.sleep(1)
            st = self.status()
        if st["ready"] < self.count:
            raise AssertionError(f"only {st['ready']} of {self.count} swarm minions signed in: {st}")
        return st

    def wait_job(self, jid: str, count: int, timeout: float) -> dict:
        return self.cmd(f"wait {jid} {count} {timeout}", "job")

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        if self.p.poll() is None:
            os.killpg(self.p.pid, 9)
            self.p.wait(timeout=10)
        self.err.close()
