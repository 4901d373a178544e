"""The browser tests' world (issue 19, the web console): a master with its REST API
(rest_cherrypy), minions, and headless Chromium driven by Selenium (tests/browser).

Two backends, same test:
  - "sylvite": a sylvite salt-master serving the API and the console (/console/) itself,
    with sylvite minions (tests/e2e/sylvite_harness.py).
  - "salt": real Salt 3008.5 from the venv (salt-master + salt-api with rest_cherrypy,
    its `static` option serving master/api/console/ under /console/, real salt-minions):
    the console is a pure client of salt-api's API and must work against the original.
Both use the `file` external_auth backend with a throwaway user. Everything listens on
127.0.0.1 only; every process is started here and stopped by PID (process group), also
when a test fails.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "e2e"))
from sylvite_harness import BIN, REPO, Env, Proc, free_port, wait_for  # noqa: E402

SALT3008 = Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"
CONSOLE_DIR = REPO / "master" / "api" / "console"
CHROMIUM = os.environ.get("SYLVITE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SYLVITE_CHROMEDRIVER", "/usr/bin/chromedriver")
USER, PASSWORD = "console", "console-pass-1"
# A user whose eauth ACL allows only test.ping on web*: the console must show refusals
# and keep the session.
LIMITED, LIMITED_PASSWORD = "helpdesk", "helpdesk-pass-1"


def BACKEND_OPTS(root: Path) -> dict:
    """Master options of every console test: the `file` eauth backend with one user
    (a text file in root) allowed everything, and the netapi clients the console uses."""
    users = Path(root) / "console-users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n{LIMITED}:{LIMITED_PASSWORD}\n")
    os.chmod(users, 0o600)
    return {
        "external_auth": {"file": {"^filename": str(users), "^filetype": "text", "^hashtype": "plaintext",
                                   USER: [".*", "@runner", "@wheel", "@jobs"],
                                   LIMITED: [{"web*": ["test.ping"]}]}},
        "netapi_enable_clients": ["local", "local_async", "local_batch", "runner", "runner_async", "wheel"],
        # A loaded CI machine: a Python salt-minion may take seconds to fork a job, and
        # manage.status / GET /minions wait this long for the slowest minion.
        "timeout": 20,
        "gather_job_timeout": 20,
    }


def rest_opts(port: int) -> dict:
    """The rest_cherrypy block: plain HTTP on loopback (tests only)."""
    return {"host": "127.0.0.1", "port": port, "disable_ssl": True}


class Api:
    """A tiny salt-api client for the test's own calls (not the browser's)."""

    def __init__(self, base: str):
        self.base = base
        self.token = None

    def call(self, method, path, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("X-Auth-Token", self.token)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")

    def login(self):
        r = self.call("POST", "/login", {"eauth": "file", "username": USER, "password": PASSWORD})
        self.token = r["return"][0]["token"]
        return self

    def lowstate(self, chunk, timeout=60):
        return self.call("POST", "/", [chunk], timeout=timeout)["return"]

    def keys(self):
        return self.call("GET", "/keys")["return"]


class Stack:
    """A master + API + minions for one backend."""

    def __init__(self, backend: str):
        self.backend = backend
        self.env = Env()
        self.api_proc: Proc | None = None
        self.port = free_port()
        self.minions = {}
        real = backend == "salt"
        self.bindir = SALT3008 if real else BIN
        rest = rest_opts(self.port)
        if real:
            # salt-api serves our static files itself: same origin, no CORS needed.
            rest.update({"static": str(CONSOLE_DIR), "static_path": "/console"})
        self.master = self.env.master(name="saltmaster" if real else "master", rest_cherrypy=rest,
                                      keep_jobs_seconds=3600, **BACKEND_OPTS(self.env.root))
        self.state_dir = self.env.root / "state-out"
        self.state_dir.mkdir()
        (self.master.file_root / "top.sls").write_text("base:\n  '*':\n    - demo\n")
        (self.master.file_root / "demo.sls").write_text(
            f"{self.state_dir}/{{{{ grains['id'] }}}}.txt:\n  file.managed:\n    - contents: written by the console test\n"
            "demo-changes:\n  test.succeed_with_changes: []\n"
            "demo-noop:\n  test.succeed_without_changes: []\n")

    # -- lifecycle -----------------------------------------------------------------------
    def start(self):
        real = self.backend == "salt"
        # sylvite minions have no state module yet (README): on the sylvite backend a real
        # Salt 3008.5 minion joins them, so the highstate view is shown from a real run.
        self.names = ["web1", "web2"] if real else ["web1", "web2", "salt1"]
        self.state_target = "*" if real else "salt1"
        self.state_minions = ["web1", "web2"] if real else ["salt1"]
        minions = self.names
        if real:
            self.master.start(binary=str(SALT3008 / "salt-master"))
            wait_for(lambda: self.cli("salt-key", "-L", "--out", "json").returncode == 0, 180, "salt-master to start")
            self.api_proc = Proc([str(SALT3008 / "salt-api"), "-c", str(self.master.conf_dir)],
                                 self.master.root / "api.out")
        else:
            self.master.start()
            self.master.wait_ready(timeout=120)  # key generation on a loaded machine
        wait_for(self._api_up, 180, "the REST API to answer")
        for n in minions:
            self.start_minion(n, real=(n == "salt1"))
        wait_for(lambda: set(minions) <= set(self.keys().get("minions_pre", [])), 240, "minion keys pending")
        r = self.cli("salt-key", "-A", "-y")
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(lambda: self.ping(minions), 240, "the minions to answer test.ping", interval=1)
        self.url = f"http://127.0.0.1:{self.port}/console/" + ("index.html" if real else "")
        return self

    def _api_up(self):
        if self.api_proc is not None and not self.api_proc.alive():
            raise AssertionError("salt-api exited:\n" + (self.master.root / "api.out").read_text(errors="replace"))
        if self.master.proc and not self.master.proc.alive():
            raise AssertionError("the master exited:\n" + self.master.log_text())
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2).read()
            return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer: the server is up
        except OSError:
            return False

    def start_minion(self, name, real=False):
        m = self.env.minion(name, self.master, random_reauth_delay=1)
        m.start(binary=str((SALT3008 if real else self.bindir) / "salt-minion"))
        self.minions[name] = m
        return m

    def close(self, failed=False):
        if failed:
            print(self.env.dump_logs())
            api_out = self.master.root / "api.out"
            if api_out.exists():
                print("===== salt-api\n" + api_out.read_text(errors="replace")[-6000:])
        if self.api_proc is not None:
            self.api_proc.kill()
        self.env.close()

    # -- helpers -------------------------------------------------------------------------
    def cli(self, tool, *args, timeout=120):
        return self.master.cli(tool, *args, timeout=timeout, binary_dir=self.bindir)

    def keys(self):
        r = self.cli("salt-key", "-L", "--out", "json")
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}

    def ping(self, minions):
        r = self.cli("salt", "--out", "json", "--static", "*", "test.ping", "-t", "10")
        try:
            got = json.loads(r.stdout) if r.stdout.strip() else {}
        except json.JSONDecodeError:
            return False
        return all(got.get(n) is True for n in minions)

    def api(self):
        return Api(f"http://127.0.0.1:{self.port}").login()


def make_driver(width, height, mobile=False):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-extensions", "--disable-background-networking", f"--window-size={width},{height}",
              "--lang=en-US"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves its singleton directory (/tmp/org.chromium.Chromium.*) behind after
    # quit(): its temporary files go to a directory of this driver's own, removed by quit().
    tmp = tempfile.mkdtemp(prefix="sylvite-chromium-")
    try:
        d = webdriver.Chrome(service=Service(CHROMEDRIVER, env=dict(os.environ, TMPDIR=tmp)), options=opts)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    quit_driver = d.quit

    def quit_and_clean():
        try:
            quit_driver()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    d.quit = quit_and_clean
    # The exact viewport (a phone: 390x844 CSS pixels, touch, mobile layout).
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 2 if mobile else 1, "mobile": mobile})
    d.set_page_load_timeout(60)
    return d


