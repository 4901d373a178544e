#!/bin/sh
# -*- mode: python -*-
# Re-exec with the project venv's Python (Salt 3008.5 and CherryPy live there); the rest is Python.
''''exec "${SYLVITE_VENV:-$(dirname "$0")/../build/venv}/bin/python" "$0" "$@" # '''
"""bench/api.py (issue 19): REST API throughput of salt-api's rest_cherrypy interface, on a
sylvite master (served by salt-master itself) and on real salt-api 3008.5 in front of a real
salt-master 3008.5, one after the other in the same run, same machine, same config:
`rest_cherrypy: {port, host: 127.0.0.1, disable_ssl: True}` and the `file` eauth backend.

Two figures per master:
  local_async  P client processes, each with one keep-alive HTTP connection, send
               `POST /` [{client: local_async, tgt: benchmin, tgt_type: list, fun: test.ping}]
               with an X-Auth-Token for --seconds; requests/s answered 200 with a jid.
               benchmin is an accepted key with no minion process, so what is measured is
               the API, the ACL check and the publish (job saved in the job cache), not
               minions.
  sse          one `GET /events` stream open while P clients `POST /hook/bench` for
               --seconds; events/s that reach the stream (tag salt/netapi/hook/bench), and
               how many of the hooks answered 200 never arrived (lost).
Plus the master-side CPU seconds (salt-master, and salt-api for Salt: every process of
both trees) and CPU ms per request.

  bench/api.py                       # both, 4 clients, 10 s per figure
  bench/api.py --only sylvite --procs 8 --seconds 20
Writes bench/results/api-latest.json (or --out).
"""

import argparse
import http.client
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.core import (REPO, SaltMaster, SylviteMaster, free_port, process_tree,  # noqa: E402
                           proc_cpu_seconds, rmtree, stop_all, track)

MINION = "benchmin"
USER, PASSWORD = "bench", "benchpw"


def gen_minion_key(pki: Path):
    d = pki / "minions"
    d.mkdir(parents=True, exist_ok=True)
    key = subprocess.run(["openssl", "genrsa", "-traditional", "2048"], capture_output=True, check=True).stdout
    pub = subprocess.run(["openssl", "rsa", "-pubout"], input=key, capture_output=True, check=True).stdout
    (d / MINION).write_bytes(pub)


def request(conn: http.client.HTTPConnection, method: str, path: str, body=None, token=None):
    h = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body)
        h["Content-Type"] = "application/json"
    if token:
        h["X-Auth-Token"] = token
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    return r.status, r.read()


def login(port: int) -> str:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    st, data = request(c, "POST", "/login", {"username": USER, "password": PASSWORD, "eauth": "file"})
    c.close()
    if st != 200:
        raise RuntimeError(f"login refused: {st} {data[:300]!r}")
    return json.loads(data)["return"][0]["token"]


def client_proc(port: int, token: str, kind: str, seconds: float, start_at: float, q):
    """One client: sequential requests on one keep-alive connection until the deadline."""
    while time.time() < start_at:
        time.sleep(0.005)
    deadline = time.time() + seconds
    ok = bad = 0
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    i = 0
    while time.time() < deadline:
        i += 1
        try:
            if kind == "local_async":
                st, data = request(c, "POST", "/", [{"client": "local_async", "tgt": MINION, "tgt_type": "list",
                                                    "fun": "test.ping"}], token)
                good = st == 200 and b'"jid"' in data
            else:
                st, data = request(c, "POST", "/hook/bench", {"n": i, "pid": os.getpid()}, token)
                good = st == 200
        except (OSError, http.client.HTTPException):
            good = False
            c.close()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        if good:
            ok += 1
        else:
            bad += 1
    c.close()
    q.put((ok, bad))


class SseCounter:
    def __init__(self, port: int, token: str):
        self.count = 0
        # The session cookie from /login (salt-api 3008.5 takes no query parameter on
        # /events; both take the cookie), plus the token header.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/login", body=json.dumps({"username": USER, "password": PASSWORD, "eauth": "file"}),
                  headers={"Accept": "application/json", "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        cookie = (r.getheader("Set-Cookie") or "").split(";")[0]
        c.close()
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.conn.request("GET", "/events", headers={"Accept": "text/event-stream", "Cookie": cookie,
                                                     "X-Auth-Token": token})
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise RuntimeError(f"/events refused: {self.resp.status}")
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    return
                if line.startswith(b"tag: salt/netapi/hook/bench"):
                    self.count += 1
        except Exception:
            return

    def close(self):
        try:
            self.conn.sock.close()
        except Exception:
            pass


def master_cpu(pids_fn) -> float:
    return sum(proc_cpu_seconds(p) for p in pids_fn())


def run_one(kind: str, args, root: Path) -> dict:
    api_port = free_port()
    users = root / "users.txt"
    root.mkdir(parents=True, exist_ok=True)
    users.write_text(f"{USER}:{PASSWORD}\n")
    opts = {
        "rest_cherrypy": {"port": api_port, "host": "127.0.0.1", "disable_ssl": True},
        "external_auth": {"file": {"^filename": str(users), "^filetype": "text",
                                   USER: [".*", "@runner", "@wheel", "@jobs"]}},
        "api_logfile": str(root / "api.log"),
        "api_pidfile": str(root / "api.pid"),
        "netapi_enable_clients": ["local", "local_async", "runner", "wheel"],
        "keep_jobs_seconds": 3600,
    }
    bin_dir = Path(args.sylvite_bin) if kind == "sylvite" else Path(args.salt_bin)
    cls = SylviteMaster if kind == "sylvite" else SaltMaster
    m = cls(root, bin_dir, opts, transport=args.transport)
    gen_minion_key(Path(m.opts["pki_dir"]))
    m.start()
    m.wait_ready(120)
    api = None
    if kind == "salt":
        alog = open(root / "api.out", "ab")
        api = track(subprocess.Popen([str(bin_dir / "salt-api"), "-c", str(m.conf_dir)], stdout=alog,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))

    def pids():
        out = list(m.pids())
        if api and api.poll() is None:
            out += process_tree(api.pid)
        return out

    # Wait for the API.
    deadline = time.monotonic() + 120
    token = None
    while time.monotonic() < deadline:
        try:
            token = login(api_port)
            break
        except (OSError, RuntimeError, http.client.HTTPException):
            time.sleep(0.25)
    if not token:
        raise RuntimeError(f"{kind}: API not answering on {api_port}\n{m.log_tail()}")
    # Warm-up: one of each.
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=60)
    st, data = request(c, "POST", "/", [{"client": "local_async", "tgt": MINION, "tgt_type": "list",
                                         "fun": "test.ping"}], token)
    c.close()
    if st != 200 or b'"jid"' not in data:
        raise RuntimeError(f"{kind}: local_async warm-up refused: {st} {data[:300]!r}")

    res = {"kind": kind, "procs": args.procs, "seconds": args.seconds}
    for figure in ("local_async", "sse"):
        sse = SseCounter(api_port, token) if figure == "sse" else None
        time.sleep(0.5)
        q = mp.Queue()
        start_at = time.time() + 1.0
        ps = [mp.Process(target=client_proc, args=(api_port, token, figure, args.seconds, start_at, q))
              for _ in range(args.procs)]
        for p in ps:
            p.start()
        while time.time() < start_at:
            time.sleep(0.005)
        cpu0 = master_cpu(pids)
        t0 = time.time()
        ok = bad = 0
        for _ in ps:
            a, b = q.get(timeout=args.seconds + 120)
            ok += a
            bad += b
        for p in ps:
            p.join()
        wall = time.time() - t0
        cpu = master_cpu(pids) - cpu0
        fig = {"ok": ok, "refused_or_failed": bad, "wall_s": round(wall, 2), "per_s": round(ok / wall, 1),
               "master_cpu_s": round(cpu, 2), "cpu_ms_per_request": round(1000 * cpu / max(ok, 1), 3)}
        if sse:
            # Let the stream drain, then count.
            last, stable_since = -1, time.time()
            while time.time() - stable_since < 3 and time.time() - t0 < wall + 60:
                if sse.count != last:
                    last, stable_since = sse.count, time.time()
                time.sleep(0.2)
            fig["events_delivered"] = sse.count
            fig["events_per_s"] = round(sse.count / wall, 1)
            fig["lost"] = max(ok - sse.count, 0)
            sse.close()
        res[figure] = fig
        print(f"[{time.strftime('%H:%M:%S')}] {kind} {figure}: {json.dumps(fig)}", flush=True)
    res["rss_kb"] = sum(int(Path(f"/proc/{p}/status").read_text().split("VmRSS:")[1].split()[0])
                        for p in pids() if Path(f"/proc/{p}/status").exists())
    if api and api.poll() is None:
        api.terminate()
        try:
            api.wait(timeout=20)
        except subprocess.TimeoutExpired:
            api.kill()
    m.stop()
    return res


def main():
    ap = argparse.ArgumentParser(description=Path(__file__).read_text().split('"""')[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=4, help="client processes")
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each figure")
    ap.add_argument("--only", choices=["sylvite", "salt"])
    ap.add_argument("--transport", default="zeromq", choices=["zeromq", "tcp"])
    ap.add_argument("--sylvite-bin", default=os.environ.get("SYLVITE_BIN", str(REPO / "build" / "bin")))
    ap.add_argument("--salt-bin", default=str(Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "api-latest.json"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["sylvite", "salt"]
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": os.getloadavg(), "results": {}}
    base = Path(tempfile.mkdtemp(prefix="sylvite-bench-api-"))
    try:
        for k in kinds:
            out["results"][k] = run_one(k, args, base / k)
    finally:
        stop_all()
        if not args.keep:
            rmtree(base)
    r = out["results"]
    if "sylvite" in r and "salt" in r:
        out["ratios"] = {
            "local_async_per_s": round(r["sylvite"]["local_async"]["per_s"] / max(r["salt"]["local_async"]["per_s"], 0.1), 2),
            "sse_events_per_s": round(r["sylvite"]["sse"]["events_per_s"] / max(r["salt"]["sse"]["events_per_s"], 0.1), 2),
            "cpu_ms_per_local_async": round(r["salt"]["local_async"]["cpu_ms_per_request"]
                                            / max(r["sylvite"]["local_async"]["cpu_ms_per_request"], 0.001), 2),
        }
    out["load_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out.get("ratios", {}), indent=1))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
