"""Smoke test of the benchmark harness: `bench/run --quick --only sylvite` (20 simulated
minions, every scenario) must produce the results JSON with the expected keys and lose no
return. No timing assertions: timing belongs to the benchmark itself."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from sylvite_harness import BIN, REPO


def _bin_dir() -> Path:
    for d in (BIN, REPO / "build-bench" / "bin", REPO / "build" / "bin"):
        if (d / "sylvite-swarm").exists() and (d / "salt-master").exists():
            return d
    pytest.skip("sylvite-swarm is not built (ninja -C build-bench sylvite-swarm salt-master salt salt-key salt-run)")


def test_bench_quick_sylvite(tmp_path):
    bin_dir = _bin_dir()
    out = tmp_path / "latest.json"
    cmd = [str(REPO / "bench" / "run"), "--quick", "--only", "sylvite", "--out", str(out),
           "--sylvite-bin", str(bin_dir), "--swarm", str(bin_dir / "sylvite-swarm"),
           # a private key cache: a benchmark running beside the tests writes the shared one
           "--keys-dir", str(tmp_path / "keys")]
    # (the run's own temp dir stays under /tmp: pytest's tmp_path is too long for the
    # master's Unix socket path)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, f"bench/run failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    doc = json.loads(out.read_text())
    for key in ("generated", "command", "machine", "config", "seconds", "results", "goals"):
        assert key in doc, key
    res = doc["results"]
    for sc in ("onboarding", "memory", "fanout", "ingest", "longrun", "auth_storm"):
        assert sc in res, f"{sc} missing: {sorted(res)}"
        syl = res[sc]["20"]["sylvite"]
        assert "error" not in syl, f"{sc}: {syl}"
        assert "salt" not in res[sc]["20"]

    assert res["onboarding"]["20"]["sylvite"]["ready"] == 20
    fan = res["fanout"]["20"]["sylvite"]
    for key in ("p50_ms", "p99_ms", "total_ms", "lost", "rounds", "cache_written"):
        assert key in fan, key
    assert fan["lost"] == 0
    assert all(rd["returned"] == 20 for rd in fan["rounds"])
    assert fan["cache_written"] == fan["cache_expected"]

    ing = res["ingest"]["20"]["sylvite"]
    assert ing["failed"] == 0 and ing["acked"] == ing["returns"] == 20
    assert ing["cache_written"] == ing["acked"]
    assert "returns_per_s" in ing and "ack_p99_ms" in ing

    mem = res["memory"]["20"]["sylvite"]
    assert {"rss_kb", "baseline_rss_kb", "kb_per_minion"} <= set(mem)

    storm = res["auth_storm"]["20"]["sylvite"]
    assert storm["all_signed_in"] is True and storm["signed_in"] == 20
    assert storm["private_ops_per_auth"] == 2
    assert storm["ping_after_storm"]["lost"] == 0
    assert {"auths_per_s", "auth_timeouts", "master_cpu_ms_per_auth"} <= set(storm)

    lr = res["longrun"]["20"]["sylvite"]
    assert lr["lost"] == 0 and lr["jobs"] >= 1
    assert {"cpu_pct_mean", "rss_kb_start", "rss_kb_end", "rss_flat"} <= set(lr)
