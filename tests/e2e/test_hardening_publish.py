"""Issue 14 item 7: a captured publish replayed to a sylvite minion does not run twice,
and an unsigned or wrongly signed publish is refused by default (single master and a
loopback cluster).

The tests sit a TCP proxy between the minion and the master's publish port (the minion's
`publish_port` points at it): the proxy passes every frame on, keeps a copy of what the
master sent, and can inject a frame into the minion's stream between two real ones, as
an attacker on the path could. A job appends a line to a file, so "ran twice" is a
second line; every refusal is awaited in the minion's log (bounded waits, no sleeps).
"""
from __future__ import annotations

import socket
import threading
import time

import msgpack

from clusterlab import LocalCluster
from sylvite_harness import wait_for


class PubProxy:
    """minion <-> master publish port; records master->minion frames; injects frames."""

    def __init__(self, upstream_port: int):
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.mu = threading.Lock()
        self.frames: list[bytes] = []     # raw master->minion frames, every connection
        self.clients: list[tuple[socket.socket, threading.Lock]] = []
        self.socks: list[socket.socket] = []
        self.dead: set[int] = set()       # id() of client sockets whose connection ended
        self.closed = False
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            wlock = threading.Lock()
            with self.mu:
                self.clients.append((c, wlock))
                self.socks += [c, u]
            for fn, args in ((self._up, (c, u)), (self._down, (u, c, wlock))):
                t = threading.Thread(target=fn, args=args, daemon=True)
                t.start()
                self.threads.append(t)

    def _up(self, c, u):
        try:
            while data := c.recv(65536):
                u.sendall(data)
        except OSError:
            pass
        self._end(c, u)

    def _end(self, c, u):
        with self.mu:
            self.dead.add(id(c))
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _down(self, u, c, wlock):
        # Forward whole frames only, so an injected frame never lands inside a real one.
        unp = msgpack.Unpacker(raw=False, max_buffer_size=200 << 20)
        buf = b""
        start = 0
        try:
            while data := u.recv(65536):
                unp.feed(data)
                buf += data
                for _ in unp:
                    end = unp.tell()  # buf holds the stream from offset `start` on
                    raw = buf[: end - start]
                    buf = buf[end - start:]
                    start = end
                    with self.mu:
                        self.frames.append(raw)
                    with wlock:
                        c.sendall(raw)
        except (OSError, ValueError):
            pass
        self._end(c, u)

    def live_clients(self):
        with self.mu:
            return [(c, lk) for c, lk in self.clients if id(c) not in self.dead]

    def inject(self, frame: bytes):
        """Send frame to every minion connection open now (the newest last)."""
        n = 0
        for c, wlock in self.live_clients():
            try:
                with wlock:
                    c.sendall(frame)
                n += 1
            except OSError:
                pass
        assert n, "no minion connection to inject into"

    def close(self):
        self.closed = True
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.mu:
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def frame_body(frame: bytes) -> dict:
    """The payload of a publish frame, decoded as a Salt minion does (salt.payload)."""
    import salt.payload
    f = msgpack.unpackb(frame, raw=False)
    return salt.payload.loads(f["body"])


def make_frame(payload: dict) -> bytes:
    """A publish frame as a master makes it: salt.payload body inside a {head, body} frame."""
    import salt.payload
    body = salt.payload.dumps(payload)
    return msgpack.packb({"head": {}, "body": body}, use_bin_type=True)


def lines(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def log_count(minion, text: str) -> int:
    return minion.log_text().count(text) + _logfile(minion).count(text)


def _logfile(minion) -> str:
    p = minion.root / "minion.log"
    return p.read_text(errors="replace") if p.exists() else ""


def wait_log(minion, text: str, before: int, timeout=30):
    wait_for(lambda: log_count(minion, text) > before, timeout, f"{minion.name} to log {text!r}")


def accept_and_ping(master, names, timeout=60):
    wait_for(lambda: set(names) <= set(master.keys().get("minions_pre", []) + master.keys().get("minions", [])),
             60, f"{names} pending")
    r = master.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    for n in names:
        wait_for(lambda: master.salt_json(n, "test.ping", "-t", "5").get(n) is True, timeout,
                 f"{n} to answer test.ping", interval=0.5)


def run_counted_job(master, proxy, minion_name, counter):
    """Publish a job that appends a line to counter; return the publish frame it sent."""
    n0 = len(proxy.frames)
    out = master.salt_json(minion_name, "cmd.run", f"echo ran >> {counter}", "-t", "20")
    assert minion_name in out, out
    assert lines(counter) == 1
    frames = proxy.frames[n0:]
    assert frames, "the proxy saw no publish"
    return frames[-1]


def replay_after_restart(minion, proxy, frame, counter, master, name):
    """Restart the minion (its jid memory and serial are gone) and replay frame."""
    ready = log_count(minion, "Minion is ready to receive requests")
    minion.stop()
    wait_for(lambda: not minion.proc.alive(), 30, "minion to stop")
    n_clients = len(proxy.clients)
    minion.start()
    # Inject before any live publish reaches the new process: its serial counter starts
    # again and it remembers no jid, so only the date in the serial can tell the replay.
    wait_log(minion, "Minion is ready to receive requests", ready, timeout=60)
    wait_for(lambda: len(proxy.clients) > n_clients, 30, "the new publish connection")
    before = log_count(minion, "before this minion started")
    proxy.inject(frame)
    wait_log(minion, "before this minion started", before)
    assert lines(counter) == 1, "the replayed job ran again after the minion restarted"
    wait_for(lambda: master.salt_json(name, "test.ping", "-t", "5").get(name) is True, 60,
             f"{name} back after restart", interval=0.5)


def check_replays(env, master, minion, proxy, name):
    counter = env.root / f"{name}.count"
    frame = run_counted_job(master, proxy, name, counter)
    assert "sig" in frame_body(frame), "publishes are signed by default"

    # 1. Same connection: the serial (Salt's check, per connection) refuses it.
    before = log_count(minion, "invalid serial")
    proxy.inject(frame)
    wait_log(minion, "invalid serial", before)
    assert lines(counter) == 1

    # 2. Restarted minion: only the time in the serial can tell the replay.
    replay_after_restart(minion, proxy, frame, counter, master, name)

    # 3. A live job still runs (and only once) after all this.
    out = master.salt_json(name, "cmd.run", f"echo ran >> {counter}", "-t", "20")
    assert name in out, out
    assert lines(counter) == 2


def test_replayed_publish_runs_once_single_master(env):
    master = env.master().start().wait_ready()
    proxy = PubProxy(master.publish_port)
    try:
        minion = env.minion("m1", master, publish_port=proxy.port).start()
        accept_and_ping(master, ["m1"])
        check_replays(env, master, minion, proxy, "m1")
    finally:
        proxy.close()


def test_unsigned_and_forged_publishes_refused_by_default(env):
    """A holder of the publish AES key (every accepted minion has it) cannot make other
    minions run anything: the signature is required by default. A minion with
    sign_pub_messages: False (the control) runs the same forged publish."""
    cl = LocalCluster(env, n=2, start=False)
    cl.start_masters()
    master = cl.masters[0]
    proxy = PubProxy(master.publish_port)
    try:
        strict = env.minion("strict", master, publish_port=proxy.port).start()
        lax = env.minion("lax", master, publish_port=proxy.port, sign_pub_messages=False).start()
        accept_and_ping(master, ["strict", "lax"])
        import salt.crypt  # the venv's Salt: its Crypticle is the reference
        key = (cl.shared / "pki" / ".aes").read_text().strip()
        crypt = salt.crypt.Crypticle({}, key)
        target = env.root / "forged.out"
        load = {"fun": "cmd.run", "arg": [f"echo forged-$(hostname) >> {target}"], "tgt": "*",
                "jid": "20990101000000000777", "ret": "", "tgt_type": "glob", "user": "root",
                "serial": int(time.time() * 1e6)}
        payload = {"enc": "aes", "load": crypt.dumps(load)}
        b_strict = log_count(strict, "has no signature")
        proxy.inject(make_frame(payload))
        wait_log(strict, "has no signature", b_strict)
        # The control ran it (so the forged publish was well formed and reached both).
        wait_for(lambda: lines(target) == 1, 30, "the lax minion to run the forged publish")

        assert lines(target) == 1, "the strict minion ran an unsigned publish"

        # Signed with a key that is not the master's: refused too.
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.hazmat.primitives import serialization
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = env.root / "other.pem"
        pem.write_bytes(other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                            serialization.NoEncryption()))
        load["jid"] = "20990101000000000778"
        load["tgt"] = "strict"
        load["serial"] = int(time.time() * 1e6)
        payload = {"enc": "aes", "load": crypt.dumps(load), "sig_algo": "PKCS1v15-SHA1"}
        payload["sig"] = salt.crypt.PrivateKey(pem.read_bytes()).sign(payload["load"], "PKCS1v15-SHA1")
        b_strict = log_count(strict, "signature failed to validate")
        proxy.inject(make_frame(payload))
        wait_log(strict, "signature failed to validate", b_strict)
        assert lines(target) == 1, "the strict minion ran a publish signed with another key"
    finally:
        proxy.close()
        cl.close()


def test_replayed_publish_runs_once_in_a_cluster(env):
    """Two masters on loopback (shared directory, peer bus, no load balancer): the job is
    published on cm1 and reaches the minion through cm2 (relayed over the bus, given a
    serial of cm2); its replay is refused as in the single-master case."""
    cl = LocalCluster(env, n=2, start=False)
    cl.start_masters()
    cm1, cm2 = cl.masters
    proxy = PubProxy(cm2.publish_port)
    try:
        minion = env.minion("c1", cm2, publish_port=proxy.port).start()
        accept_and_ping(cm1, ["c1"])
        counter = env.root / "c1.count"
        frame = run_counted_job(cm1, proxy, "c1", counter)
        body = frame_body(frame)
        assert "sig" in body
        before = log_count(minion, "invalid serial")
        proxy.inject(frame)
        wait_log(minion, "invalid serial", before)
        assert lines(counter) == 1
        replay_after_restart(minion, proxy, frame, counter, cm1, "c1")
        # Jobs from either master still run, once each.
        assert "c1" in cm2.salt_json("c1", "cmd.run", f"echo ran >> {counter}", "-t", "20")
        assert "c1" in cm1.salt_json("c1", "cmd.run", f"echo ran >> {counter}", "-t", "20")
        assert lines(counter) == 3
    finally:
        proxy.close()
        cl.close()
