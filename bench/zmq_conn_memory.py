#!/usr/bin/env python3
"""libzmq's own memory per TCP connection, without sylvite or Salt: a server process binds
one socket (XPUB as a master's publish port, or ROUTER as its request port), a client
process opens N connections (SUB, or REQ sending one 100-byte request each), and the
server's RSS growth per connection is printed. This is the floor any master on ZeroMQ
pays per minion (one publish and one request connection each).

  build/venv/bin/python bench/zmq_conn_memory.py [--n 2000]

Uses the venv's pyzmq (its bundled libzmq); sylvite links Debian's libzmq 4.3.4, which
shares the same pipe and buffer sizes (message_pipe_granularity 256 x 64-byte msg_t per
pipe chunk, 8 KiB batch buffers; the batch sizes are settable only in draft builds).
"""
import argparse
import subprocess
import sys
import time

import zmq


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def serve(kind, port):
    ctx = zmq.Context(1)
    s = ctx.socket(zmq.XPUB if kind == "pub" else zmq.ROUTER)
    s.bind(f"tcp://127.0.0.1:{port}")
    while True:
        try:
            while True:
                s.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            time.sleep(0.05)


def measure(kind, n, port):
    srv = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)])
    try:
        time.sleep(1.0)
        before = rss_kb(srv.pid)
        ctx = zmq.Context(1)
        ctx.set(zmq.MAX_SOCKETS, n + 100)
        socks = []
        for _ in range(n):
            t = ctx.socket(zmq.SUB if kind == "pub" else zmq.REQ)
            t.setsockopt(zmq.LINGER, 0)
            if kind == "pub":
                t.setsockopt(zmq.SUBSCRIBE, b"")
            t.connect(f"tcp://127.0.0.1:{port}")
            socks.append(t)
        if kind != "pub":
            for t in socks:
                t.send(b"x" * 100)
        time.sleep(4.0)
        per = (rss_kb(srv.pid) - before) / n
        for t in socks:
            t.close()
        ctx.term()
        return per
    finally:
        srv.kill()
        srv.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--port", type=int, default=5599)
    p.add_argument("--serve", choices=["pub", "router"])
    a = p.parse_args()
    if a.serve:
        return serve(a.serve, a.port)
    print(f"libzmq {zmq.zmq_version()}, {a.n} connections")
    for kind, what in (("pub", "XPUB (publish port)"), ("router", "ROUTER (request port)")):
        print(f"  {what}: {measure(kind, a.n, a.port):.1f} KB RSS per connection")


if __name__ == "__main__":
    main()
