"""Ports for test and benchmark daemons that nothing else on the machine takes meanwhile.

Binding port 0 and closing the socket hands back a number from the kernel's ephemeral range
(net.ipv4.ip_local_port_range, 32768-60999 on Debian). Between that close and the daemon's own
bind, any outgoing connection on the machine may take the same number as its source port, and a
second caller may be handed it too. Under `pytest -n 2` a cluster master then failed with
"Address already in use".

pick() hands out ports below the ephemeral range instead, so no source port can land on them.
It holds a one-byte POSIX lock per port in /tmp/sylvite-ports.lock for the life of the calling
process, so two processes (pytest workers, a bench run started by a test, two test runs side by
side) never hand out the same number. The locks go when the process exits.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import threading

LOCK_FILE = "/tmp/sylvite-ports.lock"
LOW = 20000

_lock = threading.Lock()
_fd: int | None = None
_fd_pid = 0
_mine: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _open_lock_file() -> int:
    # Open an existing file without O_CREAT: with fs.protected_regular, O_CREAT on a file
    # another user owns in sticky /tmp is refused, even for root. Such a refusal falls back
    # to a lock file of this user's own (no coordination with the other user's runs).
    for path in (LOCK_FILE, f"/tmp/sylvite-ports-{os.getuid()}.lock"):
        try:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            old = os.umask(0)
            try:
                return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except PermissionError:
                continue
            finally:
                os.umask(old)
        except PermissionError:
            continue
    raise RuntimeError(f"cannot open a port lock file ({LOCK_FILE})")


def _lock_fd() -> int:
    global _fd, _fd_pid
    if _fd is None or _fd_pid != os.getpid():
        # A forked child holds none of its parent's locks: it takes its own.
        _fd = _open_lock_file()
        _fd_pid = os.getpid()
        _mine.clear()
    return _fd


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port still in TIME_WAIT counts as taken. 0.0.0.0 conflicts with a
    # listener on any local address.
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pick() -> int:
    """A TCP port free on every local address, reserved for this process."""
    high = _ephemeral_low() - 1
    if high - LOW < 1000:  # an unusual ip_local_port_range: no room below it
        return _kernel_port()
    with _lock:
        fd = _lock_fd()
        span = high - LOW + 1
        start = random.randrange(span)
        for i in range(span):
            port = LOW + (start + i) % span
            if port in _mine:
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    continue  # another process has it
                raise
            _mine.add(port)
            if _bindable(port):
                return port
            # Taken by something outside this scheme: keep the lock so we skip it next time.
        raise RuntimeError(f"no free port in {LOW}-{high}")
