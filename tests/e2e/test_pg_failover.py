"""Issue 20: the PostgreSQL job cache through a database failover. A primary and a
streaming replica (pglab: pg_basebackup -R), the replica on the same port at another
loopback address, so the master's configuration is Salt's own shape:
`returner.pgjsonb.host: "127.0.0.1,127.0.0.2"` with one integer `port` (Salt's
_get_options makes the port an int; psycopg2 and libpq take the host list). sylvite asks
libpq for target_session_attrs=read-write, so it writes only to the primary.

During a fan-out the primary is stopped and the replica promoted: the master reconnects
to the new primary, no acknowledged return is lost, none is stored twice.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pglab
from sylvite_harness import wait_for
from test_pg_jobcache import acked_returns, check_no_loss, ping_all, run_json, start


def test_primary_stopped_replica_promoted_during_fanout(env):
    primary = pglab.PgLab(env.root / "pg1")
    replica = None
    try:
        primary.start()
        primary.create_db("salt")
        replica = primary.replica(env.root / "pg2", host="127.0.0.2")
        assert replica.in_recovery()
        names = [f"f{i}" for i in range(6)]
        opts = primary.master_opts("salt", **{"returner.pgjsonb.host": "127.0.0.1,127.0.0.2",
                                              "returner.pgjsonb.connect_timeout": 3})
        master, ms = start(env, primary, minions=names, **opts)
        ping_all(master, names)
        # The schema and the first rows reach the replica.
        wait_for(lambda: replica.psql("salt", "SELECT to_regclass('salt_returns') IS NOT NULL").strip() == "t", 30,
                 "the schema on the replica")

        stop = threading.Event()
        jids = []

        def publisher():
            while not stop.is_set():
                r = master.salt("--async", "*", "test.echo", "failover")
                if r.returncode == 0 and r.stdout.strip():
                    jids.append(r.stdout.strip().rsplit(" ", 1)[-1])
                time.sleep(0.05)
        t = threading.Thread(target=publisher)
        t.start()
        try:
            time.sleep(1.5)
            primary.stop()  # fast shutdown: the replica has every committed transaction
            time.sleep(1.0)  # returns meanwhile wait in the spool
            replica.promote()
            wait_for(lambda: not replica.in_recovery(), 30, "the promotion")
            time.sleep(2.0)
        finally:
            stop.set()
            t.join()
        jids = [j for j in jids if j.isdigit()]
        assert len(jids) >= 5, jids
        got = check_no_loss(replica, ms, jids, timeout=90)
        # Every acknowledged return is there, once; one jids row per job.
        acked = {k for k in acked_returns(ms) if k[0] in set(jids)}
        assert acked <= set(got), sorted(acked - set(got))[:10]
        (n_jobs,), = replica.query("salt", "SELECT count(*) FROM jids WHERE jid = ANY(%s)", (jids,))
        (n_ret,), = replica.query("salt", "SELECT count(*) FROM salt_returns WHERE jid = ANY(%s)", (jids,))
        assert (n_jobs, n_ret) == (len(jids), len(jids) * len(names))
        # The master reads through the new primary, and says it reconnected.
        assert run_json(master, "jobs.lookup_jid", jids[-1]) == {n: "failover" for n in names}
        log = Path(master.opts["log_file"]).read_text(errors="replace")
        assert "pgjsonb: connected to PostgreSQL" in log
        conns = replica.query("salt", "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                              "'sylvite-master'")
        assert conns[0][0] >= 1
    finally:
        if replica is not None:
            replica.close()
        primary.close()
