#!/usr/bin/env python3
"""libzmq's own memory per TCP connection, without sylvite or Salt: a server process binds
one socket (XPUB as a master's publish port, or ROUTER as its request port), a client
process opens N connections (SUB, or REQ sending one 100-byte request each), and the
server's RSS growth per connection is printed. This is the floor any master on ZeroMQ
pays per minion (one publish and one request connection each).

  build/venv/bin/python bench/zmq_conn_memory.py [--n 2000] [--server-lib system|pyzmq]

The server uses Debian's libzmq (libzmq.so.5, the one sylvite links) through ctypes by
default, or the venv's pyzmq and its bundled libzmq; the clients always use pyzmq. Both
libzmq builds share the same pipe and buffer sizes (message_pipe_granularity 256 x 64-byte
msg_t per pipe chunk, 8 KiB batch buffers; the batch sizes are settable only in draft
builds, and Debian's libzmq5 is not one: it exports no zmq_poller_* symbols).
"""
import ctypes
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


def serve_system(kind, port):
    """The server on Debian's libzmq: XPUB or ROUTER, drained like a master would."""
    z = ctypes.CDLL("libzmq.so.5", use_errno=True)
    z.zmq_ctx_new.restype = ctypes.c_void_p
    z.zmq_socket.restype = ctypes.c_void_p
    z.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
    z.zmq_bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    z.zmq_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    z.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    z.zmq_ctx_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    ctx = z.zmq_ctx_new()
    z.zmq_ctx_set(ctx, 2, 100000)  # ZMQ_MAX_SOCKETS
    s = z.zmq_socket(ctx, 9 if kind == "pub" else 6)  # ZMQ_XPUB, ZMQ_ROUTER
    if z.zmq_bind(s, f"tcp://127.0.0.1:{port}".encode()) != 0:
        raise SystemExit(f"bind: errno {ctypes.get_errno()}")
    buf = ctypes.create_string_buffer(65536)
    while True:
        while z.zmq_recv(s, buf, len(buf), 1) >= 0:  # ZMQ_DONTWAIT
            pass
        time.sleep(0.05)


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


def measure(kind, n, port, lib):
    srv = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port),
                            "--server-lib", lib])
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
    p.add_argument("--server-lib", choices=["system", "pyzmq"], default="system")
    a = p.parse_args()
    if a.serve:
        return (serve_system if a.server_lib == "system" else serve)(a.serve, a.port)
    lib = "Debian libzmq.so.5" if a.server_lib == "system" else f"pyzmq's libzmq {zmq.zmq_version()}"
    print(f"server on {lib}, {a.n} connections")
    for kind, what in (("pub", "XPUB (publish port)"), ("router", "ROUTER (request port)")):
        print(f"  {what}: {measure(kind, a.n, a.port, a.server_lib):.1f} KB RSS per connection")


if __name__ == "__main__":
    main()
