"""bench/benchlib/ports.py: ports below the kernel's ephemeral range, never handed out twice
while the process that took one lives, never one that something already listens on."""

import os
import socket
import subprocess
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from benchlib import ports  # noqa: E402

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from benchlib import ports
print(" ".join(str(ports.pick()) for _ in range(int(sys.argv[2]))), flush=True)
sys.stdin.read()  # hold the locks until the parent has read every child's picks
"""


class Ports(unittest.TestCase):
    def test_below_the_ephemeral_range_and_bindable(self):
        low = ports._ephemeral_low()
        for _ in range(50):
            p = ports.pick()
            self.assertGreaterEqual(p, ports.LOW)
            self.assertLess(p, low)
            with socket.socket() as s:  # free on every address
                s.bind(("0.0.0.0", p))

    def test_no_port_twice_across_processes(self):
        bench = str(Path(ports.__file__).resolve().parents[1])
        kids = [subprocess.Popen([sys.executable, "-c", CHILD, bench, "200"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(4)]
        try:
            got = [int(x) for k in kids for x in k.stdout.readline().split()]
            mine = [ports.pick() for _ in range(200)]
        finally:
            for k in kids:
                k.stdin.close()
                k.stdout.close()
                k.wait(timeout=30)
        self.assertEqual(len(got), 800)
        every = got + mine
        self.assertEqual(len(every), len(set(every)), "a port was handed out twice")

    def test_a_listening_port_is_skipped(self):
        busy = ports.pick()
        with socket.socket() as taken:  # taken outside the picker's locks
            taken.bind(("127.0.0.1", busy))
            taken.listen()
            ports._mine.discard(busy)  # as if another process had picked and released it
            saved = ports.random.randrange
            try:
                ports.random.randrange = lambda span: busy - ports.LOW
                self.assertNotEqual(ports.pick(), busy)
            finally:
                ports.random.randrange = saved

    def test_a_forked_child_takes_its_own_locks(self):
        before = ports.pick()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            p = ports.pick()
            os.write(w, str(p).encode())
            os._exit(0)
        os.close(w)
        child = int(os.read(r, 32))
        os.close(r)
        os.waitpid(pid, 0)
        self.assertNotEqual(child, before, "the child was handed a port its parent holds")


if __name__ == "__main__":
    unittest.main()
