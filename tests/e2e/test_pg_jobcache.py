"""Issue 20: the job cache and event history on PostgreSQL (master_job_cache: pgjsonb,
event_return: pgjsonb), in Salt's pgjsonb tables, with a real PostgreSQL server
(tests/e2e/pglab.py) and real sylvite masters and minions.

- jobs and returns land in jids / salt_returns with Salt's shapes; jobs.lookup_jid,
  jobs.list_jobs, jobs.print_job read them back; events land in salt_events;
- a differential test: real salt-master 3008.5 with its pgjsonb returner writes the same
  job into another database; the rows' shapes are compared, and salt_events holds the
  same tags (salt/job/<jid>/new, /publish, /ret/<id>) with the same keys;
- durability: a PostgreSQL restart during a fan-out, a cut (server stopped) then back,
  and a master SIGKILL during a fan-out lose no acknowledged return, and store none twice;
  during the cut jobs.lookup_jid / print_job / list_jobs answer from the spool;
- keep_jobs_seconds removes old rows;
- a 3-master cluster reads every job through any master; each job's publish event is
  stored once, by the master that published it.
TLS: test_pg_tls.py; a replica promoted during a fan-out: test_pg_failover.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import pglab
from sylvite_harness import wait_for

MINIONS = ("alpha", "beta", "gamma")


@pytest.fixture
def pg(env):
    lab = pglab.PgLab(env.root / "pg")
    try:
        lab.start()
        lab.create_db("salt")
        yield lab
    finally:
        lab.close()


def start(env, pg, minions=MINIONS, db="salt", **opts):
    mopts = pg.master_opts(db)
    mopts.update(opts)
    master = env.master(**mopts).start().wait_ready()
    ms = [env.minion(name, master).start() for name in minions]
    wait_for(lambda: sorted(master.keys().get("minions_pre", [])) == sorted(minions), 60, "minion keys")
    r = master.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    return master, ms


def ping_all(master, expect, timeout=60):
    def ok():
        out = master.salt_json("*", "test.ping", "-t", "5")
        return out if all(out.get(m) is True for m in expect) else None
    return wait_for(ok, timeout, "minions to answer", interval=0.5)


def run_json(master, *args):
    r = master.salt_run("--out", "json", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_jobs_land_in_salts_tables_and_runners_read_them(env, pg):
    master, _ = start(env, pg, event_return="pgjsonb")
    ping_all(master, MINIONS)
    r = master.salt("--out", "json", "--static", "--show-jid", "*", "cmd.run", "echo hi")
    assert r.returncode == 0, r.stderr
    jid = next(line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.startswith("jid:"))
    # Acknowledged once spooled: wait for the writer thread to commit the batch.
    wait_for(lambda: pg.query("salt", "SELECT count(*) FROM salt_returns WHERE jid = %s", (jid,))[0][0]
             >= len(MINIONS), 20, "the job's returns committed")

    # jids: the publish load (Salt's clear_load) as jsonb.
    rows = pg.query("salt", "SELECT load FROM jids WHERE jid = %s", (jid,))
    assert len(rows) == 1
    load = rows[0][0]
    assert load["fun"] == "cmd.run" and load["arg"] == ["echo hi"] and load["tgt"] == "*"
    assert load["jid"] == jid and load["tgt_type"] == "glob" and load["user"] == "root"

    # salt_returns: one row per minion, Salt's columns.
    rows = pg.query("salt", "SELECT fun, jid, return, id, success, full_ret, alter_time FROM salt_returns "
                    "WHERE jid = %s ORDER BY id", (jid,))
    assert [r[3] for r in rows] == sorted(MINIONS)
    for fun, j, ret, mid, success, full, at in rows:
        assert fun == "cmd.run" and j == jid and ret == "hi" and success == "true"
        assert full["id"] == mid and full["jid"] == jid and full["return"] == "hi" and full["retcode"] == 0
        assert full["fun"] == "cmd.run" and at is not None

    # The runners read PostgreSQL.
    assert run_json(master, "jobs.lookup_jid", jid) == {m: "hi" for m in MINIONS}
    listed = run_json(master, "jobs.list_jobs")
    assert jid in listed and listed[jid]["Function"] == "cmd.run" and listed[jid]["Target"] == "*"
    job = run_json(master, "jobs.print_job", jid)[jid]
    assert job["Function"] == "cmd.run" and sorted(job["Minions"]) == sorted(MINIONS)
    assert {m: v["return"] for m, v in job["Result"].items()} == {m: "hi" for m in MINIONS}
    missing = run_json(master, "jobs.lookup_jid", jid, "missing=True")
    assert missing == {m: "hi" for m in MINIONS}

    # event_return: the job's events are in salt_events under this master's id.
    def events():
        rows = pg.query("salt", "SELECT tag, data, master_id FROM salt_events WHERE tag LIKE %s", (f"salt/job/{jid}/%",))
        return rows if len(rows) >= 4 else None
    rows = wait_for(events, 20, "the job's events in salt_events")
    tags = {r[0] for r in rows}
    assert f"salt/job/{jid}/new" in tags and f"salt/job/{jid}/ret/alpha" in tags
    assert all(r[2] == "master" for r in rows)
    new = next(r[1] for r in rows if r[0].endswith("/new"))
    assert new["fun"] == "cmd.run" and sorted(new["minions"]) == sorted(MINIONS) and "_stamp" in new

    # Salt's schema: the indexes its docs make are there.
    idx = {r[0] for r in pg.query("salt", "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    for name in ("idx_jids_jsonb", "idx_salt_returns_id", "idx_salt_returns_jid", "idx_salt_returns_fun",
                 "idx_salt_returns_return", "idx_salt_returns_full_ret", "idx_salt_events_tag",
                 "idx_salt_events_data"):
        assert name in idx


def test_keep_jobs_seconds_cleans_old_rows(env, pg):
    # keep_jobs_seconds leaves the row long enough to be seen on a loaded machine (with 3
    # the cleaner once removed it before the first query ran).
    master, _ = start(env, pg, minions=("alpha",), keep_jobs_seconds=10, pgjsonb_clean_interval=1)
    ping_all(master, ["alpha"])
    wait_for(lambda: pg.query("salt", "SELECT count(*) FROM salt_returns")[0][0] >= 1, 5, "the return committed")
    wait_for(lambda: pg.query("salt", "SELECT count(*) FROM salt_returns")[0][0] == 0, 30,
             "old returns to be removed")
    wait_for(lambda: pg.query("salt", "SELECT count(*) FROM jids j WHERE EXISTS (SELECT 1 FROM salt_returns r "
                              "WHERE r.jid = j.jid)")[0][0] == 0, 10, "their jobs too")


# ---------------------------------------------------------------- durability

def fanout(master, n_jobs, fun="test.ping", args=()):
    """Publishes n_jobs jobs to every minion without waiting (salt --async); jids."""
    jids = []
    for _ in range(n_jobs):
        r = master.salt("--async", "*", fun, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        jids.append(r.stdout.strip().rsplit(" ", 1)[-1])
    return jids


def acked_returns(minions):
    """(jid, id) of every return a sylvite minion logged as acknowledged by the master."""
    acked = set()
    for m in minions:
        text = (m.root / "minion.log").read_text(errors="replace") if (m.root / "minion.log").exists() else ""
        for line in text.splitlines():
            if "return acknowledged" in line and "jid " in line:
                jid = line.split("jid ", 1)[1].split()[0].strip(",")
                acked.add((jid, m.name))
    return acked


def stored(pg, jids):
    rows = pg.query("salt", "SELECT jid, id, count(*) FROM salt_returns WHERE jid = ANY(%s) GROUP BY jid, id",
                    (list(jids),))
    return {(j, i): n for j, i, n in rows}


def check_no_loss(pg, minions, jids, expect_all=True, timeout=60, want=None):
    """want: the (jid, minion) returns to wait for; default every minion for every jid."""
    want = want if want is not None else {(j, m.name) for j in jids for m in minions}

    def done():
        got = stored(pg, jids)
        return got if set(got) >= want else None
    got = wait_for(done, timeout, "every return in salt_returns") if expect_all else stored(pg, jids)
    dup = {k: n for k, n in got.items() if n != 1}
    assert not dup, f"returns stored more than once: {dup}"
    return got


def test_postgres_restart_during_fanout_loses_nothing(env, pg):
    names = [f"m{i}" for i in range(6)]
    master, ms = start(env, pg, minions=names)
    ping_all(master, names)
    stop = threading.Event()
    jids = []

    def publisher():
        while not stop.is_set():
            jids.extend(fanout(master, 1, "test.sleep", ("0.2",)))
            time.sleep(0.05)
    t = threading.Thread(target=publisher)
    t.start()
    try:
        time.sleep(1.0)
        pg.restart()  # fast shutdown + start, mid fan-out
        time.sleep(1.0)
    finally:
        stop.set()
        t.join()
    assert len(jids) >= 5
    check_no_loss(pg, ms, jids)
    log = Path(master.opts["log_file"]).read_text(errors="replace")
    assert "pgjsonb: PostgreSQL unavailable" in log or "pgjsonb: COPY" in log or "failed:" in log


def test_reads_right_after_a_postgres_restart_answer(env, pg):
    """Every pooled read connection dies with the server: the first read after the restart
    must connect anew, not try a second dead connection and answer nothing."""
    names = [f"m{i}" for i in range(4)]
    master, ms = start(env, pg, minions=names, pgjsonb_pool_size=6)
    ping_all(master, names)
    jid, = fanout(master, 1, "test.echo", ("kept",))
    want = {n: "kept" for n in names}
    wait_for(lambda: run_json(master, "jobs.lookup_jid", jid) == want, 30, "the returns to be readable")

    def read(_):
        return run_json(master, "jobs.lookup_jid", jid)
    # Concurrent reads leave several connections idle in the pool.
    with ThreadPoolExecutor(8) as ex:
        assert all(r == want for r in ex.map(read, range(16)))
    pg.restart()
    assert run_json(master, "jobs.lookup_jid", jid) == want
    assert run_json(master, "jobs.lookup_jid", jid) == want


def test_cut_then_back_replays_the_spool_in_order_once(env, pg):
    names = [f"m{i}" for i in range(4)]
    master, ms = start(env, pg, minions=names)
    ping_all(master, names)
    pg.stop()  # the database is gone: returns go to the spool only
    jids = fanout(master, 4, "test.echo", ("cut",))
    # Every minion answered (and was acknowledged) while the database was away.
    spool = Path(master.opts["cachedir"]) / "pgjsonb_spool" / "master"
    wait_for(lambda: sum(f.stat().st_size for f in spool.glob("*.spool")) > 0, 20, "the spool to fill")
    # Acknowledged returns are read back from the spool while the database is away.
    for jid in jids:
        wait_for(lambda jid=jid: run_json(master, "jobs.lookup_jid", jid) == {n: "cut" for n in names}, 30,
                 f"the returns of {jid} from the spool")
    job = run_json(master, "jobs.print_job", jids[0])[jids[0]]
    assert job["Function"] == "test.echo" and sorted(job["Minions"]) == sorted(names)
    assert {m: v["return"] for m, v in job["Result"].items()} == {n: "cut" for n in names}
    listed = run_json(master, "jobs.list_jobs", "search_function=test.echo")
    assert set(jids) <= set(listed)
    pg.start()
    check_no_loss(pg, ms, jids)
    # Replayed exactly once: one row per (job, minion), one jids row per job.
    (n_ret,), = pg.query("salt", "SELECT count(*) FROM salt_returns WHERE jid = ANY(%s)", (jids,))
    (n_jobs,), = pg.query("salt", "SELECT count(*) FROM jids WHERE jid = ANY(%s)", (jids,))
    assert (n_ret, n_jobs) == (len(jids) * len(names), len(jids))
    # The master said once why it could not write, not on every retry.
    log = Path(master.opts["log_file"]).read_text(errors="replace")
    assert 1 <= log.count("PostgreSQL unavailable") <= 6, log.count("PostgreSQL unavailable")
    # In order: the spool's records were committed in sequence (alter_time follows jid order).
    rows = pg.query("salt", "SELECT jid FROM salt_returns WHERE jid = ANY(%s) ORDER BY alter_time, jid",
                    (jids,))
    seen = [r[0] for r in rows]
    assert seen == sorted(seen)
    assert sorted(run_json(master, "jobs.lookup_jid", jids[-1])) == sorted(names)


@pytest.mark.parametrize("database", ["down", "up"])
def test_master_sigkill_during_fanout_loses_no_acked_return(env, pg, database):
    """SIGKILL with returns only in the spool (database down), or in the middle of a
    fan-out that is being written (database up): after the restart every return is in
    salt_returns exactly once (acknowledged ones from the spool; the others resent by the
    minions, and a resent one that was stored already is not stored again). With the
    database up, the last job the CLI printed may have reached only some minions before
    the kill (its publish is on its way to the sockets when the CLI gets the jid, as with
    Salt): its returns are those of the minions that ran it; every earlier job reached all."""
    names = [f"m{i}" for i in range(6)]
    master, ms = start(env, pg, minions=names)
    ping_all(master, names)
    if database == "down":
        pg.stop()  # returns wait in the spool: the kill happens with records not yet sent
        jids = fanout(master, 3, "test.echo", ("kill",))
        time.sleep(3)
        master.kill()
        pg.start()
    else:
        jids = []
        stop = threading.Event()

        def publisher():
            while not stop.is_set():
                r = master.salt("--async", "*", "test.echo", "kill")
                if r.returncode == 0 and r.stdout.strip():
                    jids.append(r.stdout.strip().rsplit(" ", 1)[-1])
        t = threading.Thread(target=publisher)
        t.start()
        time.sleep(2.5)
        master.kill()  # returns of the last jobs are in flight, in the spool, or being sent
        stop.set()
        t.join()
        jids = [j for j in jids if j.isdigit()]
        assert len(jids) >= 3
    master.start().wait_ready()
    if database == "up":
        # The spool is replayed first (a read waits for it); only jobs the master saved
        # before it died count (it saves the load before it publishes).
        run_json(master, "jobs.list_jobs")
        stored_jobs = {r[0] for r in pg.query("salt", "SELECT jid FROM jids WHERE jid = ANY(%s)", (jids,))}
        assert len(stored_jobs) >= 3
        jids = [j for j in jids if j in stored_jobs]
        want = set()
        for k, j in enumerate(jids):
            ran = {m.name for m in ms if m.ran_job(j)}
            if k < len(jids) - 1:
                assert ran == set(names), (j, sorted(ran))
            want |= {(j, n) for n in ran}
        check_no_loss(pg, ms, jids, timeout=120, want=want)
        return
    check_no_loss(pg, ms, jids, timeout=120)


# ---------------------------------------------------------------- differential

SALT_BIN = Path(os.environ.get("SYLVITE_VENV", Path(__file__).resolve().parents[2] / "build" / "venv")) / "bin"


def shape(v):
    """The JSON shape of a value: maps by their keys, lists by their items' shapes."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items() if k != "_stamp"}
    if isinstance(v, list):
        return [shape(x) for x in v]
    return type(v).__name__


def one_job(master, db, pg, binary_dir=None):
    """Publishes cmd.run 'echo diff' to sylv1 and waits until its return is in db."""
    r = master.cli("salt", "--async", "sylv1", "cmd.run", "echo diff", binary_dir=binary_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = r.stdout.strip().split()[-1]
    wait_for(lambda: pg.query(db, "SELECT 1 FROM salt_returns WHERE jid = %s", (jid,)), 60,
             f"the return in {db}")
    return jid


def test_differential_rows_match_salt_pgjsonb(env, pg):
    """Real salt-master 3008.5 (master_job_cache: pgjsonb, event_return: pgjsonb) and
    sylvite write the same job into two databases; the rows have the same shapes."""
    pg.create_db("saltref")
    # Salt's returner expects the schema (its docs' DDL): sylvite makes it in both
    # databases (starting a sylvite master on saltref first), so Salt writes into the very
    # tables sylvite creates.
    sylv = env.master(name="sylv", **pg.master_opts("salt", event_return="pgjsonb")).start().wait_ready()
    real = env.master(name="real", **pg.master_opts("saltref", event_return="pgjsonb"))
    pre = env.master(name="pre", **pg.master_opts("saltref")).start().wait_ready()
    pre.stop()
    real.start(binary=str(SALT_BIN / "salt-master"))
    wait_for(lambda: real.cli("salt-key", "-L", "--out", "json", binary_dir=SALT_BIN).returncode == 0, 90,
             "real salt-master to start")
    m_sylv = env.minion("sylv1", sylv).start()
    m_real = env.minion("sylv1real", real, id="sylv1").start()
    wait_for(lambda: "sylv1" in sylv.keys().get("minions_pre", []), 60, "pending on sylvite")
    assert sylv.salt_key("-A", "-y").returncode == 0

    def pending_real():
        r = real.cli("salt-key", "-L", "--out", "json", binary_dir=SALT_BIN)
        return r.returncode == 0 and "sylv1" in json.loads(r.stdout).get("minions_pre", [])
    wait_for(pending_real, 90, "pending on the real master")
    assert real.cli("salt-key", "-A", "-y", binary_dir=SALT_BIN).returncode == 0
    wait_for(lambda: sylv.salt_json("sylv1", "test.ping", "-t", "10").get("sylv1") is True, 90, "sylvite ping")

    def real_ping():
        r = real.cli("salt", "--out", "json", "--static", "sylv1", "test.ping", "-t", "10", binary_dir=SALT_BIN)
        return r.stdout.strip() and json.loads(r.stdout).get("sylv1") is True
    wait_for(real_ping, 90, "real ping")

    jid_s = one_job(sylv, "salt", pg)
    jid_r = one_job(real, "saltref", pg, binary_dir=SALT_BIN)

    q = ("SELECT fun, jid, return, id, success, full_ret FROM salt_returns WHERE jid = %s")
    (fs, js, rs, ids, ss, full_s), = pg.query("salt", q, (jid_s,))
    (fr, jr, rr, idr, sr, full_r), = pg.query("saltref", q, (jid_r,))
    print("sylvite full_ret:", full_s)
    print("salt full_ret:", full_r)
    assert (fs, rs, ids, ss) == (fr, rr, idr, sr) == ("cmd.run", "diff", "sylv1", "true")
    assert shape(full_s) == shape(full_r)
    assert set(full_s) == set(full_r)  # _stamp included: Salt's event stamps the load first

    def same(full):
        return {k: v for k, v in full.items() if k not in ("jid", "ts", "_stamp")}
    assert same(full_s) == same(full_r)

    # The table definitions are the same (sylvite made both; Salt wrote into them).
    cols = ("SELECT table_name, column_name, data_type, character_maximum_length FROM information_schema.columns "
            "WHERE table_name IN ('jids', 'salt_returns', 'salt_events') ORDER BY 1, 2")
    assert pg.query("salt", cols) == pg.query("saltref", cols)

    # jids: both hold the job. Salt's store_job calls save_load again with each return's
    # load (pgjsonb's ON CONFLICT DO UPDATE), so its row ends as the last return's load;
    # sylvite keeps the publish load (what jobs.list_jobs needs). Both carry the jid.
    (load_s,), = pg.query("salt", "SELECT load FROM jids WHERE jid = %s", (jid_s,))
    (load_r,), = pg.query("saltref", "SELECT load FROM jids WHERE jid = %s", (jid_r,))
    print("sylvite jids.load:", load_s)
    print("salt jids.load:", load_r)
    assert load_s["jid"] == jid_s and load_r["jid"] == jid_r
    assert load_s["fun"] == load_r["fun"] == "cmd.run"

    # salt_events: the job's events, same tags and data shapes.
    def events(db, jid):
        rows = pg.query(db, "SELECT tag, data FROM salt_events WHERE tag LIKE %s ORDER BY id", (f"salt/job/{jid}/%",))
        return {t.replace(jid, "JID"): shape(d) for t, d in rows}
    ev_s = wait_for(lambda: events("salt", jid_s) if len(events("salt", jid_s)) >= 3 else None, 30, "sylvite events")
    ev_r = wait_for(lambda: events("saltref", jid_r) if len(events("saltref", jid_r)) >= 3 else None, 60,
                    "salt events")
    print("sylvite events:", ev_s)
    print("salt events:", ev_r)
    # Salt 3008's ClearFuncs.publish also fires salt/job/<jid>/publish (the publish load
    # of _prep_pub); sylvite fires it too, with the same keys.
    assert set(ev_s) == set(ev_r)
    assert "salt/job/JID/publish" in ev_s
    assert ev_s["salt/job/JID/publish"] == ev_r["salt/job/JID/publish"]
    assert ev_s["salt/job/JID/new"] == ev_r["salt/job/JID/new"]
    assert ev_s["salt/job/JID/ret/sylv1"] == ev_r["salt/job/JID/ret/sylv1"]
    (mid,), = pg.query("saltref", "SELECT DISTINCT master_id FROM salt_events")
    assert mid == "real"


# ---------------------------------------------------------------- cluster

def test_cluster_every_master_reads_every_job_from_postgres(env, pg):
    from clusterlab import LocalCluster
    names = ["cx1", "cx2", "cx3", "cx4"]
    cluster = LocalCluster(env, **pg.master_opts("salt", event_return="pgjsonb"))
    try:
        for n in names:
            cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1).start()
        m1, m2, m3 = cluster.masters
        wait_for(lambda: set(names) <= set(m1.keys().get("minions_pre", [])), 60, "keys pending")
        assert m1.salt_key("-A", "-y").returncode == 0
        for m in cluster.masters:
            wait_for(lambda m=m: m.salt_json("cx*", "test.ping", "-t", "5") == {n: True for n in names}, 90,
                     f"ping from {m.name}", interval=0.5)
        published = []
        for pub in cluster.masters:
            r = pub.salt("--out", "json", "--static", "--show-jid", "cx*", "test.echo", f"from-{pub.name}")
            assert r.returncode == 0, r.stdout + r.stderr
            jid = next(line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.startswith("jid:"))
            published.append((pub, jid))
            # A return another master took is committed by that master's writer within a
            # batch (milliseconds): the first read may wait that long, the others do not.
            want = {n: f"from-{pub.name}" for n in names}
            t0 = time.time()
            wait_for(lambda: run_json(m2, "jobs.lookup_jid", jid) == want, 5, "the returns in PostgreSQL",
                     interval=0.05)
            assert time.time() - t0 < 2
            for m in cluster.masters:
                assert run_json(m, "jobs.lookup_jid", jid) == {n: f"from-{pub.name}" for n in names}, m.name
                job = run_json(m, "jobs.print_job", jid)[jid]
                assert sorted(job["Minions"]) == names and job["Function"] == "test.echo", m.name
                assert jid in run_json(m, "jobs.list_jobs", "search_function=test.echo"), m.name
            rows = pg.query("salt", "SELECT id, count(*) FROM salt_returns WHERE jid = %s GROUP BY id", (jid,))
            assert sorted(rows) == [(n, 1) for n in names]
        # The shared cachedir holds no job: the index is PostgreSQL's.
        jobs_dir = cluster.shared / "cache" / "jobs"
        assert not [p for p in jobs_dir.glob("*/*") if p.is_dir()] if jobs_dir.exists() else True
        # Each event once in the cluster (subscribe_local): one ret event per minion and job.
        (n_ret,), = pg.query("salt", "SELECT count(*) FROM salt_events WHERE tag LIKE 'salt/job/%%/ret/cx1' "
                             "AND data->>'fun' = 'test.echo'")
        wait_for(lambda: pg.query("salt", "SELECT count(*) FROM salt_events WHERE tag LIKE 'salt/job/%%/ret/cx1' "
                                  "AND data->>'fun' = 'test.echo'")[0][0] == 3, 20, "one ret event per job")
        # salt/job/<jid>/publish: one row per job, by the master that published it (the
        # peers get it forwarded as a peer event and neither store nor act on it).
        for pub, jid in published:
            rows = pg.query("salt", "SELECT master_id, data->>'fun' FROM salt_events WHERE tag = %s",
                            (f"salt/job/{jid}/publish",))
            assert rows == [(pub.name, "test.echo")], (pub.name, rows)
        masters_seen = {r[0] for r in pg.query("salt", "SELECT DISTINCT master_id FROM salt_events")}
        assert masters_seen <= {"cm1", "cm2", "cm3"} and masters_seen
    finally:
        cluster.close()
