"""Issue 20: the PostgreSQL job cache over TLS, configured with the option names of Salt's
pgjsonb returner (returner.pgjsonb.sslmode / sslrootcert / sslcert / sslkey), against a
real PostgreSQL 15 started with ssl = on, a test CA, a server certificate and a required
client certificate (pglab.PgLab(ssl=True, client_cert=True); openssl in the test's temp
directory).

- jobs land over TLS: pg_stat_ssl shows ssl for every connection of the master, with the
  client certificate's name;
- a wrong CA: the connection is refused, the master says so once (with a TLS hint), the
  returns wait in the spool and are read back from it (jobs.lookup_jid); after the
  configuration is fixed and the master restarted they are replayed exactly once.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import pglab
from sylvite_harness import wait_for
from test_pg_jobcache import check_no_loss, fanout, ping_all, run_json, start


@pytest.fixture
def tls_pg(env):
    lab = pglab.PgLab(env.root / "pg", ssl=True, client_cert=True)
    try:
        lab.start()
        lab.create_db("salt")
        yield lab
    finally:
        lab.close()


def master_connections(pg):
    return pg.query("salt", "SELECT s.ssl, s.version, s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a "
                    "USING (pid) WHERE a.application_name = 'sylvite-master' AND a.datname = 'salt'")


def test_jobs_land_over_tls_with_a_client_certificate(env, tls_pg):
    pg = tls_pg
    names = ("alpha", "beta")
    master, _ = start(env, pg, minions=names, **pg.master_opts("salt", tls=True, event_return="pgjsonb"))
    assert master.opts["returner.pgjsonb.sslmode"] == "verify-full"
    ping_all(master, names)
    r = master.salt("--out", "json", "--static", "--show-jid", "*", "test.echo", "over-tls")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = next(line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.startswith("jid:"))
    # Returns are acknowledged once spooled; the writer thread commits them in batches.
    want = [(n, "over-tls") for n in names]
    rows = []

    def committed():
        nonlocal rows
        rows = pg.query("salt", "SELECT id, return FROM salt_returns WHERE jid = %s ORDER BY id", (jid,))
        return rows == want

    wait_for(committed, 20, "the job's returns committed over TLS")
    assert rows == want
    assert run_json(master, "jobs.lookup_jid", jid) == {n: "over-tls" for n in names}
    wait_for(lambda: pg.query("salt", "SELECT 1 FROM salt_events WHERE tag = %s", (f"salt/job/{jid}/new",)), 20,
             "the job's event over TLS")
    conns = master_connections(pg)
    print("master connections:", conns)
    assert conns, "the master has no connection to the database"
    assert all(ssl is True and version and version.startswith("TLS") for ssl, version, _ in conns), conns
    assert all(dn == "/CN=salt" for _, _, dn in conns), conns


def test_wrong_ca_is_refused_logged_once_spooled_and_replayed_after_the_fix(env, tls_pg):
    pg = tls_pg
    names = ("m0", "m1", "m2")
    opts = pg.master_opts("salt", tls=True, **{"returner.pgjsonb.sslrootcert": str(pg.wrong_ca[0])})
    master, ms = start(env, pg, minions=names, **opts)
    ping_all(master, names)
    jids = fanout(master, 3, "test.echo", ("tls",))
    # Acknowledged, kept in the spool, and readable from it.
    for jid in jids:
        wait_for(lambda jid=jid: run_json(master, "jobs.lookup_jid", jid) == {n: "tls" for n in names}, 30,
                 f"the returns of {jid} from the spool")
    # Nothing reached the database (the master never got in: not even its schema).
    assert pg.query("salt", "SELECT to_regclass('salt_returns')") == [(None,)]
    log = Path(master.opts["log_file"]).read_text(errors="replace")
    lines = [ln for ln in log.splitlines() if "PostgreSQL unavailable" in ln]
    print("\n".join(lines))
    assert len(lines) == 1, lines
    assert "certificate verify failed" in lines[0] and "[TLS: check" in lines[0]
    assert "sslmode=verify-full" in lines[0] and "password=***" in lines[0]

    master.stop()
    master.write_config(**{"returner.pgjsonb.sslrootcert": str(pg.ca[0])})
    master.start().wait_ready()
    wait_for(lambda: pg.query("salt", "SELECT to_regclass('salt_returns')") != [(None,)], 60,
             "the master to get in and make the schema")
    check_no_loss(pg, ms, jids)
    (n_ret,), = pg.query("salt", "SELECT count(*) FROM salt_returns WHERE jid = ANY(%s)", (jids,))
    (n_jobs,), = pg.query("salt", "SELECT count(*) FROM jids WHERE jid = ANY(%s)", (jids,))
    assert (n_ret, n_jobs) == (len(jids) * len(names), len(jids))
    # The pings sent before the jobs were spooled too: every return of the master's life
    # is there once.
    (dups,), = pg.query("salt", "SELECT count(*) FROM (SELECT jid, id FROM salt_returns GROUP BY jid, id "
                        "HAVING count(*) > 1) d")
    assert dups == 0
    assert all(ssl for ssl, _, _ in master_connections(pg))
    log = Path(master.opts["log_file"]).read_text(errors="replace")
    assert "pgjsonb: connected; replaying" in log
