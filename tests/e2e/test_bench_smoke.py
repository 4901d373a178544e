"""Smoke test of the benchmark harness: `bench/run --quick --only sylvite` (20 simulated
minions, every scenario), over each transport (zeromq, the default, and tcp), must produce
the results JSON with the expected keys and lose no return. No timing assertions: timing
belongs to the benchmark itself."""
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


@pytest.mark.parametrize("transport", ["zeromq", "tcp"])
def test_bench_quick_sylvite(tmp_path, transport):
    bin_dir = _bin_dir()
    out = tmp_path / "latest.json"
    cmd = [str(REPO / "bench" / "run"), "--quick", "--only", "sylvite", "--transport", transport, "--out", str(out),
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
    assert doc["transport"] == doc["config"]["transport"] == transport
    assert f"transport: {transport}" in r.stdout
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
    if transport == "zeromq":  # the storm starts at the first publish after the restart
        assert storm["trigger_publishes"] >= 1 and storm["pub_reconnected"] >= 20

    lr = res["longrun"]["20"]["sylvite"]
    assert lr["lost"] == 0 and lr["jobs"] >= 1
    assert {"cpu_pct_mean", "rss_kb_start", "rss_kb_end", "rss_flat"} <= set(lr)


def test_bench_quick_two_swarm_processes_and_publish_processes(tmp_path):
    """Goal 4's setup in small: the swarm split over two processes (--swarm-procs 2) and a
    master serving its publish port from two publish processes (publish_processes: 2)."""
    bin_dir = _bin_dir()
    out = tmp_path / "latest.json"
    cmd = [str(REPO / "bench" / "run"), "--quick", "--only", "sylvite", "--transport", "tcp", "--out", str(out),
           "--scenarios", "memory,fanout,ingest", "--swarm-procs", "2", "--master-opt", "publish_processes=2",
           "--sylvite-bin", str(bin_dir), "--swarm", str(bin_dir / "sylvite-swarm"), "--keys-dir", str(tmp_path / "keys")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, f"bench/run failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    res = json.loads(out.read_text())["results"]
    assert res["onboarding"]["20"]["sylvite"]["ready"] == 20
    fan = res["fanout"]["20"]["sylvite"]
    assert fan["lost"] == 0 and all(rd["returned"] == rd["received"] == 20 for rd in fan["rounds"])
    assert fan["cache_written"] == fan["cache_expected"]
    ing = res["ingest"]["20"]["sylvite"]
    assert ing["failed"] == 0 and ing["acked"] == ing["returns"] == 20
    # the master's processes: itself, its two publish processes (and render workers, if started)
    assert res["memory"]["20"]["sylvite"]["processes"] >= 3


def _procs_mentioning(text: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(d))
    return pids


@pytest.mark.parametrize("swarm_body", [
    "exit 3",  # dies before it reports its keys
    # reports a normal start, then dies: the runner's next command hits a broken pipe
    'echo \'{"event": "keys", "loaded": 0, "generated": 0, "seconds": 0}\'; echo \'{"event": "started"}\'; '
    "sleep 0.5; exit 4",
], ids=["dies-at-start", "dies-after-start"])
def test_bench_stops_its_master_when_the_swarm_dies(tmp_path, swarm_body):
    """bench/run must stop every process it started (by PID / process group) on every exit
    path: here the swarm dies, the session fails, and the master must not be left running."""
    import tempfile
    bin_dir = _bin_dir()
    fake = tmp_path / "fake-swarm"
    fake.write_text("#!/bin/sh\n" + swarm_body + "\n")
    fake.chmod(0o755)
    run_tmp = Path(tempfile.mkdtemp(prefix="sbt-", dir="/tmp"))  # short: Unix socket paths
    try:
        cmd = [str(REPO / "bench" / "run"), "--quick", "--only", "sylvite", "--scenarios", "fanout",
               "--out", str(tmp_path / "out.json"), "--sylvite-bin", str(bin_dir), "--swarm", str(fake),
               "--keys-dir", str(tmp_path / "keys"), "--tmp-dir", str(run_tmp), "--keep", "--no-rsa-count"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        doc = json.loads((tmp_path / "out.json").read_text())
        assert "error" in doc["results"]["fanout"]["20"]["sylvite"], doc["results"]
        assert (run_tmp / next(iter(os.listdir(run_tmp))) / "sylvite-20" / "master" / "conf").is_dir(), \
            "the master was not even started: the test proves nothing"
        left = _procs_mentioning(str(run_tmp))
        assert not left, f"processes left running: {left}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    finally:
        for pid in _procs_mentioning(str(run_tmp)):  # never leave our own leftovers
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        subprocess.run(["rm", "-rf", str(run_tmp)])
