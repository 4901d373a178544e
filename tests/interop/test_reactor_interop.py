"""Issue 18, reactor: the same reactor config and SLS files on a real salt-master 3008.5 and
on sylvite; a real salt-minion 3008.5 fires events with `salt-call event.send` and the
reactions happen on both:
  - local.cmd.run with the old argument form (arg) and the new one (args) writes marker
    files, with the minion id and the event's data rendered by Jinja (data['id'],
    data['data'][...]: Salt's payload of a minion event);
  - local.test.ping whose job (with the reaction's metadata) appears in jobs.list_jobs;
  - a reactor SLS with a Jinja error is logged and the master keeps serving (the next
    event still reacts, salt still answers)."""
import json
import time

import pytest

from conftest import SALT3008
from sylvite_harness import BIN, wait_for

REACT_SLS = """\
touch_old_style:
  local.cmd.run:
    - tgt: {{ data['id'] }}
    - arg:
      - touch {{ data['data']['dir'] }}/old-{{ data['data']['n'] }}
touch_new_style:
  local.cmd.run:
    - tgt: {{ data['id'] }}
    - args:
      - cmd: touch {{ data['data']['dir'] }}/new-{{ data['data']['n'] }}
"""

PING_SLS = """\
ping_back:
  local.test.ping:
    - tgt: {{ data['id'] }}
    - tgt_type: glob
    - metadata:
        reactor: ping
"""

BROKEN_SLS = """\
broken:
  local.cmd.run:
    - tgt: {{ data['id'] }
    - arg: [touch /nonexistent]
"""


def start_master(env, name, binary):
    m = env.master(name=name)
    m.opts.pop("transport", None)  # zeromq, Salt's default, on both
    rdir = m.root / "reactor"
    rdir.mkdir()
    (rdir / "react.sls").write_text(REACT_SLS)
    (rdir / "ping.sls").write_text(PING_SLS)
    (rdir / "broken.sls").write_text(BROKEN_SLS)
    m.opts["reactor"] = [
        {"test/react/*": [str(rdir / "react.sls")]},
        {"test/ping": str(rdir / "ping.sls")},
        {"test/broken": [str(rdir / "broken.sls")]},
    ]
    m.write_config()
    m.start(binary=str(binary))
    wait_for(lambda: (m.proc.alive() or pytest.fail(f"{name} exited:\n{m.log_text()}")) and m.listening(), 90,
             f"{name} to listen")
    return m


def cli(master, real, *args, timeout=120):
    return master.cli(*args, timeout=timeout, binary_dir=SALT3008 if real else BIN)


def start_minion(env, master, real, name):
    mn = env.minion(name, master)
    mn.opts.pop("transport", None)
    mn.write_config(multiprocessing=False)
    mn.start(binary=str(SALT3008 / "salt-minion"))

    def pending():
        r = cli(master, real, "salt-key", "-L", "--out", "json")
        return r.returncode == 0 and name in json.loads(r.stdout).get("minions_pre", [])
    wait_for(pending, 120, f"{name} pending on {master.name}")
    r = cli(master, real, "salt-key", "-a", name, "-y")
    assert r.returncode == 0, r.stdout + r.stderr

    def pings():
        r = cli(master, real, "salt", "--out", "json", "--static", name, "test.ping", "-t", "10")
        return r.stdout.strip() and json.loads(r.stdout).get(name) is True
    wait_for(pings, 120, f"{name} to answer on {master.name}", interval=1)
    return mn


def send(minion, tag, data):
    r = minion.salt_call("event.send", tag, json.dumps(data), "--out", "json", binary_dir=SALT3008)
    assert r.returncode == 0 and json.loads(r.stdout) == {"local": True}, r.stdout + r.stderr


@pytest.mark.parametrize("kind", ["salt", "sylvite"])
def test_reactor_same_config_same_reactions(env, kind):
    real = kind == "salt"
    master = start_master(env, f"{kind}-master", SALT3008 / "salt-master" if real else BIN / "salt-master")
    name = f"{kind}-min"
    minion = start_minion(env, master, real, name)
    out = env.root / f"{kind}-markers"
    out.mkdir()

    # 1. local.cmd.run, both argument forms, rendered from the event
    send(minion, "test/react/go", {"dir": str(out), "n": 1})
    wait_for(lambda: (out / "old-1").exists() and (out / "new-1").exists(), 90, f"{kind}: reaction markers")

    # 2. local.test.ping: the job is in the job cache
    send(minion, "test/ping", {})

    def ping_job():
        r = cli(master, real, "salt-run", "jobs.list_jobs", "search_function=test.ping", "--out", "json")
        jobs = json.loads(r.stdout or "{}")
        return any(j.get("Target") == name and j.get("Function") == "test.ping"
                   and j.get("Metadata") == {"reactor": "ping"} for j in jobs.values())
    before = time.time()
    wait_for(ping_job, 60, f"{kind}: the reactor's test.ping job")

    # 3. a Jinja error: logged, the master keeps serving and reacting
    send(minion, "test/broken", {})
    send(minion, "test/react/again", {"dir": str(out), "n": 2})
    wait_for(lambda: (out / "old-2").exists() and (out / "new-2").exists(), 90, f"{kind}: reaction after the error")
    assert master.proc.alive()
    r = cli(master, real, "salt", "--out", "json", "--static", name, "test.ping", "-t", "20")
    assert json.loads(r.stdout) == {name: True}, r.stdout + r.stderr
    log = (master.root / "master.log").read_text(errors="replace") + master.log_text()
    assert "broken.sls" in log, f"{kind}: the broken SLS is not in the master's log"
    assert time.time() - before < 300
