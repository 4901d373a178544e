"""Plumbing shared by the benchmarks that run one workload on a sylvite master and then on
a real salt-master 3008.5 (bench/reactor.py, bench/pillar_refresh.py): the minion key,
Salt minion opts for client code speaking as minions, a master started with accepted
ids, the common command line, the run loop over both masters and the result file."""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib.core import REPO, SaltMaster, SylviteMaster, rmtree, stop_all


def gen_minion_key(d: Path):
    """One RSA key pair (minion.pem / minion.pub) in d, shared by every benchmark minion id."""
    d.mkdir(parents=True, exist_ok=True)
    key = subprocess.run(["openssl", "genrsa", "-traditional", "2048"], capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "rsa", "-pubout"], input=key, capture_output=True, check=True).stdout
    (d / "minion.pem").write_bytes(key)
    os.chmod(d / "minion.pem", 0o400)
    (d / "minion.pub").write_bytes(pub)


def minion_opts(workdir: Path, keydir: Path, port: int, **extra) -> dict:
    """Salt minion opts for client code talking to the master's ret port over zeromq as a
    minion (the key copied into workdir/pki); extra entries override."""
    import salt.config

    pki = Path(workdir) / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    for f in ("minion.pem", "minion.pub"):
        shutil.copyfile(Path(keydir) / f, pki / f)
    os.chmod(pki / "minion.pem", 0o400)
    opts = salt.config.minion_config(None)
    opts.update({"master": "127.0.0.1", "master_port": port, "master_ip": "127.0.0.1",
                 "master_uri": f"tcp://127.0.0.1:{port}", "pki_dir": str(pki),
                 "cachedir": str(Path(workdir) / "cache"), "sock_dir": str(Path(workdir) / "sock"),
                 "transport": "zeromq", "acceptance_wait_time": 1, "auth_timeout": 60, "auth_tries": 10})
    opts.update(extra)
    return opts


def start_master(kind: str, a, root: Path, opts: dict, keydir: Path, ids):
    """A sylvite or Salt master (kind) in root with opts (plus --master-opts), every id in
    ids accepted with the benchmark key, started and ready (plus 1 s to settle)."""
    opts = dict(opts)
    opts.update(json.loads(a.master_opts or "{}"))
    cls, bin_dir = (SylviteMaster, Path(a.sylvite_bin)) if kind == "sylvite" else (SaltMaster, Path(a.salt_bin))
    m = cls(root, bin_dir, opts, transport="zeromq")
    acc = Path(m.opts["pki_dir"]) / "minions"
    acc.mkdir(parents=True, exist_ok=True)
    pub = (keydir / "minion.pub").read_bytes()
    for mid in ids:
        (acc / mid).write_bytes(pub)
    m.start()
    m.wait_ready(timeout=120)
    time.sleep(1.0)
    return m


def add_common_args(ap: argparse.ArgumentParser):
    """--only, --sylvite-bin, --salt-bin, --master-opts."""
    ap.add_argument("--only", choices=["sylvite", "salt"], help="one master only")
    ap.add_argument("--sylvite-bin", default=os.environ.get("SYLVITE_BIN", str(REPO / "build" / "bin")))
    ap.add_argument("--salt-bin", default=str(Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"))
    ap.add_argument("--master-opts", help="JSON dict of extra options for both masters")


def add_output_args(ap: argparse.ArgumentParser, out_name: str):
    """--out (default bench/results/<out_name>), --keep."""
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / out_name))
    ap.add_argument("--keep", action="store_true")


def run_masters(a, tmp_prefix: str, prepare, run_one, banner) -> list:
    """For each master (sylvite then salt, or --only): print banner(kind), r = run_one(kind,
    tmp, prepared), print r as JSON. prepare(tmp) runs once first (trees, keys). The
    temp dir is removed (unless --keep) and every tracked process stopped, also on error."""
    tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix))
    results = []
    try:
        prepared = prepare(tmp)
        for kind in ([a.only] if a.only else ["sylvite", "salt"]):
            print(f"[{time.strftime('%H:%M:%S')}] {kind}: {banner}", flush=True)
            r = run_one(kind, tmp, prepared)
            results.append(r)
            print(json.dumps(r, indent=2), flush=True)
    finally:
        stop_all()
        if a.keep:
            print("kept", tmp)
        else:
            rmtree(tmp)
    return results


def write_doc(out: str, bench: str, results: list, **fields):
    """bench/results JSON: bench, time, loadavg, cpus, the given fields, results."""
    doc = {"bench": bench, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "loadavg": os.getloadavg(),
           "cpus": os.cpu_count(), **fields, "results": results}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def print_comparison(results: list, keys, width: int, ratio: bool):
    """sylvite vs salt side by side (only when both ran); ratio = sylvite / salt."""
    if len(results) != 2:
        return
    s, r = results
    print(f"\n{'':{width}}{'sylvite':>12}{'salt':>12}" + (f"{'ratio':>10}" if ratio else ""))
    for k in keys:
        line = f"{k:{width}}{str(s[k]):>12}{str(r[k]):>12}"
        if ratio:
            q = ""
            if isinstance(s[k], (int, float)) and isinstance(r[k], (int, float)) and r[k]:
                q = f"{s[k] / r[k]:.2f}"
            line += f"{q:>10}"
        print(line)
