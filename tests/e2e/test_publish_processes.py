"""publish_processes: the publish port served by sylvite-publisher child processes (TCP).

A master with publish_processes: 2, two salt-minions (sylvite's) and 300 swarm minions:
every minion gets its jobs; the publish connections live in the two children, about half
each, not in the master; targeted publishes reach only their targets; manage.present sees every minion; a
deleted key's publish connection is closed; a child killed with SIGKILL is started again
and its minions come back; a child that stops answering (SIGSTOP) is found by the master's
liveness check, killed and started again; stopping the master stops the children. With transport zeromq
the option is refused at start.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from swarmlab import SWARM, Swarm
from sylvite_harness import wait_for

N = 300

pytestmark = pytest.mark.skipif(not SWARM.exists(), reason=f"{SWARM} is not built")


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == pid and comm.startswith("sylvite-publish"):
            out.append(int(d.name))
    return sorted(out)


def tcp_sockets(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def present(master) -> list[str]:
    r = master.salt_run("manage.present", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def jid_of(r) -> str:
    assert r.returncode == 0, r.stdout + r.stderr
    return re.search(r"\b(\d{20})\b", r.stdout).group(1)


def log(master) -> str:
    return Path(master.opts["log_file"]).read_text(errors="replace")


def test_publish_processes_spread_target_and_recover(env):
    master = env.master(publish_processes=2, auto_accept=True, log_level_logfile="debug").start().wait_ready()
    mpid = master.proc.pid
    wait_for(lambda: len(children(mpid)) == 2, 30, "two publish processes")
    wait_for(lambda: log(master).count("is accepting on port") >= 2, 30, "both publish processes accepting")
    sw = None
    hung = None
    try:
        sw = Swarm(env.root, N, master.ret_port, master.publish_port, prefix="pp-")
        minions = [env.minion(n, master).start() for n in ("ppa", "ppb")]
        sw.wait_ready(240)
        names = ["ppa", "ppb"]
        wait_for(lambda: master.salt_json("-L", "ppa,ppb", "test.ping", "-t", "5") == {n: True for n in names}, 90,
                 "the two minions to answer")

        # Every minion gets a broadcast publish.
        jid = jid_of(master.salt("--async", "pp-*", "test.ping"))
        assert sw.wait_job(jid, N, 60)["received"] == N

        # The connections live in the children: the master holds no publish connection.
        kids = children(mpid)
        per_child = [tcp_sockets(k) for k in kids]
        assert sum(per_child) >= N + 2, per_child
        assert min(per_child) >= N // 4, per_child  # spread by the kernel (SO_REUSEPORT), about half each
        assert tcp_sockets(mpid) < 150, tcp_sockets(mpid)  # its listeners, request pool, CLI, files
        assert set(names) <= set(present(master))
        assert len([i for i in present(master) if i.startswith("pp-")]) == N

        # A targeted publish reaches its target only.
        out = master.salt_json("-L", "ppa", "test.ping", "-t", "10")
        assert out == {"ppa": True}
        jid = jid_of(master.salt("--async", "-L", "pp-00003,pp-00004", "test.ping"))
        job = sw.wait_job(jid, 2, 30)
        assert job["received"] == 2, job
        time.sleep(1)
        assert sw.job(jid)["received"] == 2

        # A child killed: logged, started again, its minions come back.
        victim = kids[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: "was killed by signal 9" in log(master), 30, "the master to see the child die")
        wait_for(lambda: len(children(mpid)) == 2 and victim not in children(mpid), 30, "a new publish process")
        wait_for(lambda: master.salt_json("-L", "ppa", "test.ping", "-t", "5") == {"ppa": True}, 90,
                 "ppa to answer after the restart")

        def all_back():
            j = jid_of(master.salt("--async", "pp-*", "test.ping"))
            return sw.wait_job(j, N, 15)["received"] == N

        wait_for(all_back, 180, "every swarm minion to get jobs again", interval=2)
        assert master.proc.alive()

        # A child that hangs (stopped: its link and connections stay open, it answers
        # nothing): the master's ping goes unanswered for 30 s, it kills the child and
        # starts another; the minions come back.
        hung = children(mpid)[0]
        t_stop = time.monotonic()
        os.kill(hung, signal.SIGSTOP)
        wait_for(lambda: re.search(rf"publish process \d \(pid {hung}\) has not answered the master for 30 s",
                                   log(master)), 60, "the master to find the stopped child")
        assert time.monotonic() - t_stop >= 29, "killed before its 30 s were up"
        wait_for(lambda: len(children(mpid)) == 2 and hung not in children(mpid), 30, "a new publish process")
        assert not Path(f"/proc/{hung}").exists() or "zombie" in Path(f"/proc/{hung}/status").read_text()
        wait_for(all_back, 180, "every swarm minion to get jobs after the hung child", interval=2)
        assert master.salt_json("-L", "ppa,ppb", "test.ping", "-t", "10") == {n: True for n in names}
        # Only the stopped child was taken for hung: the working ones answer every ping.
        assert len(re.findall(r"has not answered the master", log(master))) == 1

        # A deleted key: its publish connection is closed by the child that holds it. (Last:
        # the delete rotates the AES key, and a TCP swarm minion does not sign in again for a
        # publish it cannot read.)
        assert master.salt_key("-d", "ppb", "-y").returncode == 0
        wait_for(lambda: "ppb" not in present(master), 30, "ppb's publish connection to close")
        assert re.search(r"\[sylvite-publisher\].*closed 1 publish connection\(s\) of ppb", log(master))

        # Stopping the master stops its publish processes.
        kids = children(mpid)
        master.stop()
        wait_for(lambda: not any(Path(f"/proc/{k}").exists() for k in kids), 15, "the publish processes to exit")
        for m in minions:
            m.stop()
    finally:
        if sw:
            sw.close()
        # A stopped child outlives its master's SIGTERM (PDEATHSIG waits for SIGCONT): the
        # test ends it itself if it failed before the master took it for hung.
        try:
            if hung is not None and b"sylvite-publisher" in Path(f"/proc/{hung}/cmdline").read_bytes():
                os.kill(hung, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def test_publish_processes_refused_on_zeromq(env):
    master = env.master(publish_processes=2, transport="zeromq").start()
    wait_for(lambda: not master.proc.alive(), 30, "the master to refuse")
    assert "publish_processes needs transport: tcp" in master.log_text() + log(master)
