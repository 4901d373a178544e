"""sylvite-swarm (bench/swarm) for end-to-end tests: bench/benchlib's Swarm driver, with the
swarm's RSA keys generated once into a cache shared by runs (SYLVITE_SWARM_KEYS, default
~/.cache/sylvite/swarm-keys-2048) and pointed at any address pair (e.g. a load balancer).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

from sylvite_harness import BIN

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from benchlib.core import Swarm as _Swarm  # noqa: E402

SWARM = BIN / "sylvite-swarm"
KEYS = Path(os.environ.get("SYLVITE_SWARM_KEYS", Path.home() / ".cache" / "sylvite" / "swarm-keys-2048"))


class Swarm(_Swarm):
    def __init__(self, root: Path, count: int, ret_port: int, pub_port: int, prefix: str = "sw-",
                 pool: int = 20, threads: int = 2):
        KEYS.mkdir(parents=True, exist_ok=True)
        super().__init__(SWARM, root / f"swarm-{prefix.strip('-')}", SimpleNamespace(ret_port=ret_port,
                         publish_port=pub_port), count, KEYS, pool, threads, id_prefix=prefix, accept_wait=1.0,
                         extra=("--return-timeout", "30", "--return-tries", "5"))

    def wait_ready(self, timeout: float) -> dict:
        ok, st = self.wait_status(lambda s: s["ready"] >= self.count, timeout, interval=1)
        if not ok:
            raise AssertionError(f"only {st['ready']} of {self.count} swarm minions signed in: {st}")
        return st
