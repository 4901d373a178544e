"""A throwaway PostgreSQL server for tests (Debian's postgresql 15).

    pg = PgLab(env.root / "pg").start()       # initdb + pg_ctl start, free loopback port
    pg.create_db("salt", owner="salt", password="salt")
    pg.master_opts("salt")                      # returner.pgjsonb.* for a master config
    pg.query("salt", "SELECT count(*) FROM salt_returns")
    pg.stop() / pg.start() / pg.restart() / pg.kill()
    pg.close()                                  # stop by PID (also after a failure)

    tls = PgLab(root, ssl=True, client_cert=True).start()   # ssl = on, a test CA (tls/)
    tls.master_opts("salt", tls=True)           # + sslmode verify-full, sslrootcert, sslcert, sslkey
    rep = pg.replica(root2, host="127.0.0.2")   # pg_basebackup -R, same port, another address
    rep.promote()                               # pg_ctl promote

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


def openssl(*args, cwd=None):
    r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=60,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise AssertionError(f"openssl {' '.join(map(str, args))} failed: {r.stderr}")
    return r.stdout


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """A test CA (RSA 2048, 1 day): (cert, key) in d."""
    d.mkdir(parents=True, exist_ok=True)
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt, "-days", "1",
            "-subj", f"/CN=sylvite test CA {name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    os.chmod(key, 0o600)
    return crt, key


def make_cert(d: Path, name: str, ca: tuple[Path, Path], cn: str, san: str | None = None) -> tuple[Path, Path]:
    """A certificate signed by ca: (cert, key) in d; san e.g. "IP:127.0.0.1,DNS:localhost"."""
    key, csr, crt = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
    ext = d / f"{name}.ext"
    ext.write_text("basicConstraints=CA:FALSE\n" + (f"subjectAltName={san}\n" if san else ""))
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", crt,
            "-days", "1", "-extfile", ext)
    os.chmod(key, 0o600)
    return crt, key

PG_BIN = Path(os.environ.get("SYLVITE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available() -> bool:
    return (PG_BIN / "initdb").exists() and (PG_BIN / "pg_ctl").exists()


class PgLab:
    def __init__(self, root: Path, port: int | None = None, host: str = "127.0.0.1", ssl: bool = False,
                 client_cert: bool = False):
        self.root = Path(root)
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.log = self.root / "postgres.log"
        self.port = port or free_port()
        self.host = host
        self.as_root = os.geteuid() == 0
        self.pid: int | None = None
        self._inited = False
        # TLS: a CA, the server's certificate (IP:host, DNS:localhost) and, with
        # client_cert, a client certificate for the role "salt" that the server requires
        # (pg_hba: hostssl ... clientcert=verify-full).
        self.ssl = ssl or client_cert
        self.client_cert = client_cert
        self.tls = self.root / "tls"

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
            f.write(f"\nport = {self.port}\nlisten_addresses = '{self.host}'\n"
                    f"unix_socket_directories = '{self.sock}'\nmax_connections = 200\n"
                    "shared_buffers = 32MB\nfsync = on\nlogging_collector = off\n")
        if self.ssl:
            self._make_tls()
        self._inited = True
        return self

    def _make_tls(self):
        self.tls.mkdir(parents=True, exist_ok=True)
        self.ca = make_ca(self.tls, "ca")
        self.server_cert = make_cert(self.tls, "server", self.ca, "localhost", f"IP:{self.host},DNS:localhost")
        self.client = make_cert(self.tls, "client", self.ca, "salt")
        self.wrong_ca = make_ca(self.tls, "wrong-ca")  # signs nothing the server has
        if self.as_root:
            # The server's key must belong to the server's user, 0600.
            pw = pwd.getpwnam("postgres")
            for f in (self.tls, *self.tls.iterdir()):
                os.chown(f, pw.pw_uid, pw.pw_gid)
            os.chmod(self.tls, 0o755)
            for f in self.tls.iterdir():
                if not f.name.endswith(".key"):
                    os.chmod(f, 0o644)
            # The master (root) reads the client key: root's copy, 0600.
            ck = self.tls / "client-root.key"
            shutil.copy(self.client[1], ck)
            os.chown(ck, 0, 0)
            os.chmod(ck, 0o600)
            self.client = (self.client[0], ck)
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"ssl = on\nssl_cert_file = '{self.server_cert[0]}'\nssl_key_file = '{self.server_cert[1]}'\n"
                    f"ssl_ca_file = '{self.ca[0]}'\n")
        if self.client_cert:
            hba = self.data / "pg_hba.conf"
            text = hba.read_text()
            rule = f"hostssl all salt {self.host}/32 scram-sha-256 clientcert=verify-full\n"
            hba.write_text(rule + text)  # first match wins: the role "salt" needs a client cert

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

    def master_opts(self, db: str, user: str = "salt", password: str = "salt", tls: bool = False,
                    **extra) -> dict:
        """The returner.pgjsonb.* keys (and master_job_cache) for a master config; tls:
        sslmode verify-full with this lab's CA (and its client certificate)."""
        opts = {
            "master_job_cache": "pgjsonb",
            "returner.pgjsonb.host": self.host,
            "returner.pgjsonb.port": self.port,
            "returner.pgjsonb.db": db,
            "returner.pgjsonb.user": user,
            "returner.pgjsonb.pass": password,
        }
        if tls:
            opts["returner.pgjsonb.sslmode"] = "verify-full"
            opts["returner.pgjsonb.sslrootcert"] = str(self.ca[0])
            if self.client_cert:
                opts["returner.pgjsonb.sslcert"] = str(self.client[0])
                opts["returner.pgjsonb.sslkey"] = str(self.client[1])
        opts.update(extra)
        return opts

    # ---------------------------------------------------------------- replication
    def replica(self, root: Path, host: str = "127.0.0.2") -> "PgLab":
        """A streaming replica of this (running) server: pg_basebackup -R into root/data,
        listening on the same port at another loopback address (so one libpq
        `host: "a,b"` with one port reaches both, as Salt's int port needs), started."""
        rep = PgLab(root, port=self.port, host=host)
        rep._prepare_dirs()
        self._cmd([str(PG_BIN / "pg_basebackup"), "-h", str(self.sock), "-p", str(self.port), "-U", "postgres",
                   "-D", str(rep.data), "-R", "-X", "stream", "-c", "fast"], timeout=300)
        with open(rep.data / "postgresql.conf", "a") as f:
            f.write(f"\nlisten_addresses = '{host}'\nunix_socket_directories = '{rep.sock}'\n")
        rep._inited = True
        return rep.start()

    def promote(self, timeout=60):
        self._cmd([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(timeout), "promote"],
                  timeout=timeout + 10)
        return self

    def in_recovery(self) -> bool:
        return self.psql("postgres", "SELECT pg_is_in_recovery()").strip() == "t"


def remove_tree(p: Path):
    shutil.rmtree(p, ignore_errors=True)
