"""A throwaway PostgreSQL server for tests (Debian's postgresql 15).

    pg = PgLab(env.root / "pg").start()       # initdb + pg_ctl start, free loopback port
    pg.create_db("salt", owner="salt", password="salt")
    pg.master_opts("salt")                      # returner.pgjsonb.* for a master config
    pg.query("salt", "SELECT count(*) FROM salt_returns")
    pg.stop() / pg.start() / pg.restart() / pg.kill()
    pg.close()                                  # stop by PID (also after a failure)

The cluster lives in the test's temp directory: data/, a Unix socket directory sock/ and
the server log. PostgreSQL refuses to run as root; when the tests run as root (CI) every
server command runs as the `postgres` user (runuser -u postgres) and the directory is
given to it (its parents get o+x, so that user can reach it). The server listens on
127.0.0.1 and on the socket only; the superuser `postgres` is trusted on the socket, a
role made by create_db logs in over TCP with its password (scram-sha-256), as a master
would. The postmaster is stopped by its PID (SIGINT: fast shutdown), then SIGKILL if it
does not go within 30 s.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

from sylvite_harness import free_port, wait_for

PG_BIN = Path(os.environ.get("SYLVITE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available() -> bool:
    return (PG_BIN / "initdb").exists() and (PG_BIN / "pg_ctl").exists()


class PgLab:
    def __init__(self, root: Path, port: int | None = None):
        self.root = Path(root)
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.port = port or free_port()
        self.as_root = os.geteuid() == 0
        self.pid: int | None = None
        self._inited = False

    # ---------------------------------------------------------------- processes
    def _cmd(self, argv, check=True, timeout=120):
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                                 f"{self.log_text()[-3000:]}")
        return r

    def _prepare_dirs(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(exist_ok=True)
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            # The postgres user must reach the directory: o+x on the parents we own.
            p = self.root.parent
            while p != p.parent:
                st = p.stat()
                if st.st_uid == 0 and not (st.st_mode & 0o001):
                    os.chmod(p, st.st_mode | 0o001)
                p = p.parent
            for d in (self.root, self.sock):
                os.chown(d, pw.pw_uid, pw.pw_gid)
            os.chmod(self.root, 0o700)

    def init(self):
        self._prepare_dirs()
        self._cmd([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-E", "UTF8", "--no-locale",
                   "--auth-local=trust", "--auth-host=scram-sha-256"])
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.sock}'\nmax_connections = 200\n"
                    "shared_buffers = 32MB\nfsync = on\nlogging_collector = off\n")
        self._inited = True
        return self

    def start(self, timeout=60):
        if not self._inited:
            self.init()
        self._cmd([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(timeout),
                   "start"], timeout=timeout + 10)
        self.pid = self._read_pid()
        wait_for(lambda: self._cmd([str(PG_BIN / "pg_isready"), "-h", str(self.sock), "-p", str(self.port)],
                                   check=False).returncode == 0, timeout, "PostgreSQL to accept connections")
        return self

    def _read_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        # A zombie is not running (the postmaster is not our child: it never is one here).
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def stop(self, sig=signal.SIGINT, timeout=30):
        """Stop the postmaster by PID: SIGINT (fast), SIGQUIT (immediate) or SIGKILL."""
        pid = self.pid or self._read_pid()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            self.pid = None
            return
        self.pid = pid
        deadline = time.time() + timeout
        while self.running() and time.time() < deadline:
            time.sleep(0.05)
        if self.running():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while self.running():
                time.sleep(0.05)
        self.pid = None
        # After SIGKILL the backends may linger a moment on the shared memory; the next
        # start waits for them (pg_ctl start fails while they hold it).

    def kill(self):
        self.stop(signal.SIGKILL)

    def restart(self):
        self.stop()
        return self.start()

    def close(self):
        try:
            self.stop()
        except Exception:
            pass

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    # ---------------------------------------------------------------- SQL
    def psql(self, db: str, sql: str, check=True):
        argv = [str(PG_BIN / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(self.sock), "-p",
                str(self.port), "-U", "postgres", "-d", db, "-c", sql]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"psql {sql!r} failed: {r.stderr}")
        return r.stdout

    def create_db(self, name: str, owner: str = "salt", password: str = "salt"):
        exists = self.psql("postgres", f"SELECT 1 FROM pg_roles WHERE rolname = '{owner}'").strip()
        if not exists:
            self.psql("postgres", f"CREATE ROLE {owner} LOGIN PASSWORD '{password}'")
        self.psql("postgres", f"CREATE DATABASE {name} OWNER {owner} ENCODING 'UTF8' TEMPLATE template0")
        return self

    def connect(self, db: str):
        """A psycopg2 connection as the superuser over the socket (autocommit)."""
        import psycopg2
        c = psycopg2.connect(host=str(self.sock), port=self.port, user="postgres", dbname=db)
        c.autocommit = True
        return c

    def query(self, db: str, sql: str, params=()):
        c = self.connect(db)
        try:
            with c.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description else []
        finally:
            c.close()

    def master_opts(self, db: str, user: str = "salt", password: str = "salt", **extra) -> dict:
        """The returner.pgjsonb.* keys (and master_job_cache) for a master config."""
        opts = {
            "master_job_cache": "pgjsonb",
            "returner.pgjsonb.host": "127.0.0.1",
            "returner.pgjsonb.port": self.port,
            "returner.pgjsonb.db": db,
            "returner.pgjsonb.user": user,
            "returner.pgjsonb.pass": password,
        }
        opts.update(extra)
        return opts


def remove_tree(p: Path):
    shutil.rmtree(p, ignore_errors=True)
