#!/bin/sh
# -*- mode: python -*-
# Re-exec with the project venv's Python (Salt 3008.5 and psycopg2 live there).
''''exec "${SYLVITE_VENV:-$(dirname "$0")/../build/venv}/bin/python" "$0" "$@" # '''
"""bench/pg_jobcache.py (issue 20): the job cache on PostgreSQL, side by side in one run:

  sylvite-file   sylvite, file job cache (the default)
  sylvite-pg     sylvite, master_job_cache: pgjsonb
  salt-pg        real salt-master 3008.5, master_job_cache: pgjsonb (its returner)

on the same machine, the same swarm, one throwaway PostgreSQL 15 (tests/e2e/pglab.py,
a database per master: the schema is Salt's documented DDL). Each is a bench/run
(scenarios fanout and ingest); the table compares fan-out p99 (publish -> return acked)
and ingest returns/s (acked), with the rows each wrote (cache_written: files, or
salt_returns rows counted in PostgreSQL).

  bench/pg_jobcache.py --sizes 50 --quick            # smoke (a minute or two)
  bench/pg_jobcache.py --sizes 1000,5000             # the issue's sizes (long: not on a busy box)
  bench/pg_jobcache.py --only sylvite-pg --sizes 1000
Writes bench/results/pg-jobcache-latest.json (or --out). Extra arguments after -- go to
bench/run (e.g. -- --transport tcp).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))
import pglab  # noqa: E402

# Salt's documented schema (salt/returners/pgjsonb.py); sylvite makes the same itself.
SALT_DDL = """
CREATE TABLE jids (jid varchar(255) NOT NULL primary key, load jsonb NOT NULL);
CREATE INDEX idx_jids_jsonb on jids USING gin (load) WITH (fastupdate=on);
CREATE TABLE salt_returns (fun varchar(50) NOT NULL, jid varchar(255) NOT NULL, return jsonb NOT NULL,
  id varchar(255) NOT NULL, success varchar(10) NOT NULL, full_ret jsonb NOT NULL,
  alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW());
CREATE INDEX idx_salt_returns_id ON salt_returns (id);
CREATE INDEX idx_salt_returns_jid ON salt_returns (jid);
CREATE INDEX idx_salt_returns_fun ON salt_returns (fun);
CREATE INDEX idx_salt_returns_return ON salt_returns USING gin (return) with (fastupdate=on);
CREATE INDEX idx_salt_returns_full_ret ON salt_returns USING gin (full_ret) with (fastupdate=on);
CREATE SEQUENCE seq_salt_events_id;
CREATE TABLE salt_events (id BIGINT NOT NULL UNIQUE DEFAULT nextval('seq_salt_events_id'),
  tag varchar(255) NOT NULL, data jsonb NOT NULL, alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
  master_id varchar(255) NOT NULL);
CREATE INDEX idx_salt_events_tag on salt_events (tag);
CREATE INDEX idx_salt_events_data ON salt_events USING gin (data) with (fastupdate=on);
"""

VARIANTS = {
    "sylvite-file": ("sylvite", None),
    "sylvite-pg": ("sylvite", "bench_sylvite"),
    "salt-pg": ("salt", "bench_salt"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=Path(__file__).read_text().split('"""')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,5000")
    p.add_argument("--only", action="append", choices=sorted(VARIANTS))
    p.add_argument("--quick", action="store_true", help="bench/run --quick (short rounds) with --sizes kept")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "pg-jobcache-latest.json"))
    p.add_argument("--tmp-dir", default=None)
    p.add_argument("rest", nargs="*", help="after --: arguments for bench/run")
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="sylvite-pgbench-", dir=a.tmp_dir))
    lab = pglab.PgLab(tmp / "pg")
    results = {}
    try:
        lab.start()
        for db in ("bench_sylvite", "bench_salt"):
            lab.create_db(db)
        # Salt's returner expects the tables; they are owned by the role it logs in as.
        lab.psql("bench_salt", "SET ROLE salt;" + SALT_DDL)
        for name in a.only or list(VARIANTS):
            kind, db = VARIANTS[name]
            out = tmp / f"{name}.json"
            cmd = [sys.executable, str(HERE / "run"), "--only", kind, "--scenarios", "fanout,ingest", "--sizes", a.sizes,
                   "--out", str(out), "--no-rsa-count"]
            if a.quick:
                cmd += ["--fanout-rounds", "2", "--ingest-jobs", "1", "--accept-wait", "0.5"]
            if db:
                for k, v in lab.master_opts(db).items():
                    cmd += ["--master-opt", f"{k}={json.dumps(v)}"]
            cmd += a.rest
            print(f"== {name}: {' '.join(cmd)}", flush=True)
            t0 = time.time()
            r = subprocess.run(cmd)
            doc = json.loads(out.read_text()) if out.exists() else {}
            results[name] = {"rc": r.returncode, "seconds": round(time.time() - t0, 1),
                             "results": doc.get("results", {}), "config": doc.get("config", {})}
    finally:
        lab.close()
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    print()
    print(f"{'variant':14s} {'size':>6s} {'fanout p99 ms':>14s} {'lost':>5s} {'ingest ret/s':>13s} "
          f"{'ack p99 ms':>11s} {'written':>9s}")
    for name, res in results.items():
        kind = VARIANTS[name][0]
        for size in sizes:
            f = res["results"].get("fanout", {}).get(size, {}).get(kind, {})
            i = res["results"].get("ingest", {}).get(size, {}).get(kind, {})
            print(f"{name:14s} {size:>6s} {str(f.get('p99_ms', f.get('error', '-'))):>14s} "
                  f"{str(f.get('lost', '-')):>5s} {str(i.get('returns_per_s', i.get('error', '-'))):>13s} "
                  f"{str(i.get('ack_p99_ms', '-')):>11s} "
                  f"{str(i.get('cache_written', '-')) + '/' + str(i.get('acked', '-')):>9s}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "command": "bench/pg_jobcache.py " + " ".join(sys.argv[1:] if argv is None else argv),
                               "variants": results}, indent=1) + "\n")
    print(f"wrote {out}")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
