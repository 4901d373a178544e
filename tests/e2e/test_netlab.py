"""The network-namespace lab (tests/e2e/netlab.py): reachability, the root blackhole
route, silent blackholing, link down, and teardown also after an exception."""
import os
import subprocess
import sys

import pytest

from netlab import LOCK_DIR, NetLab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def netns_names() -> set[str]:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def root_route(subnet: str) -> str:
    return subprocess.run(["ip", "route", "show", "exact", subnet], capture_output=True, text=True,
                          check=True).stdout.strip()


def listener(host, port):
    """A TCP listener inside host's namespace (killed by the lab on close)."""
    code = ("import socket,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('0.0.0.0', {port})); s.listen(64)\n"
            "while True:\n"
            "    c,_=s.accept(); c.close()\n")
    p = host.popen([sys.executable, "-c", code])
    from sylvite_harness import wait_for
    wait_for(lambda: host.can_connect("127.0.0.1", port), 15, "listener in the namespace")
    return p


def test_hosts_reach_each_other_and_route_lifecycle():
    with NetLab() as lab:
        a, b = lab.host("a"), lab.host("b")
        assert a.ip == f"10.251.{lab.index}.1" and b.ip == f"10.251.{lab.index}.2"
        assert a.ns == f"syl{lab.index}-a" and {a.ns, b.ns, f"syl{lab.index}-br"} <= netns_names()
        assert root_route(lab.subnet).startswith("blackhole"), "no root blackhole route while open"
        assert (LOCK_DIR / f"{lab.index}.lock").exists()
        assert not b.can_connect(a.ip, 4506)  # nothing listens yet: refused at once
        listener(a, 4506)
        assert b.can_connect(a.ip, 4506)
        assert not b.can_connect(a.ip, 4507)
        assert a.can_connect(b.ip, 4506) is False and lab.host("c").ip == f"10.251.{lab.index}.3"
        # The root namespace has no lab address: the route swallows what it would send.
        r = subprocess.run(["ip", "route", "get", a.ip], capture_output=True, text=True)
        assert "blackhole" in r.stdout or r.returncode != 0, r.stdout
        index, names = lab.index, {a.ns, b.ns, lab.bridge_ns}
    assert root_route(f"10.251.{index}.0/24") == "", "blackhole route left behind"
    assert not names & netns_names(), "namespaces left behind"
    assert not (LOCK_DIR / f"{index}.lock").exists()


def test_blackhole_is_silent_and_reversible():
    with NetLab() as lab:
        a, b = lab.host("a"), lab.host("b")
        listener(a, 4505)
        assert b.can_connect(a.ip, 4505)
        a.blackhole()
        # No RST, no ICMP: the connect times out (it would fail fast if refused).
        code = ("import socket,time,sys\n"
                "t=time.monotonic()\n"
                "try:\n"
                f"    socket.create_connection(({a.ip!r}, 4505), timeout=1.5); sys.exit(3)\n"
                "except socket.timeout:\n"
                "    sys.exit(0)\n"
                "except OSError as e:\n"
                "    print(e); sys.exit(4)\n")
        r = b.run([sys.executable, "-c", code])
        assert r.returncode == 0, f"connect to a blackholed host did not time out: rc={r.returncode} {r.stdout}"
        assert not b.can_connect(a.ip, 4505)
        assert a.can_connect("127.0.0.1", 4505), "lo must stay open inside the blackholed host"
        a.blackhole(False)
        assert b.can_connect(a.ip, 4505)
        a.link(False)
        assert not b.can_connect(a.ip, 4505)
        a.link(True)
        from sylvite_harness import wait_for
        wait_for(lambda: b.can_connect(a.ip, 4505), 15, "reconnect after link up")


def test_teardown_after_exception_and_close_twice():
    names = set()
    with pytest.raises(RuntimeError, match="boom"):
        with NetLab() as lab:
            h = lab.host("x")
            p = h.popen(["sleep", "300"])
            names = {h.ns, lab.bridge_ns}
            index = lab.index
            assert names <= netns_names()
            raise RuntimeError("boom")
    assert not names & netns_names()
    assert root_route(f"10.251.{index}.0/24") == ""
    assert p.poll() is not None, "process started in the lab survived close()"
    lab.close()  # second close is a no-op


def test_parallel_labs_get_different_subnets():
    with NetLab() as one, NetLab() as two:
        assert one.index != two.index
        a, b = one.host("a"), two.host("a")
        assert a.ns != b.ns and a.ip != b.ip
