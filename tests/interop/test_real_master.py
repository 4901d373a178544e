"""Issue 3, test 2: a sylvite minion under an unmodified Salt 3008 salt-master; issue 16:
on both transports (zeromq is Salt's default: the real master runs with transport unset);
issue 21: zeromq also with the minion's native ZMTP clients (zmq_engine: native) against
the real master's libzmq sockets."""
import json

import pytest

from conftest import SALT3008
from sylvite_harness import wait_for

REAL = SALT3008


@pytest.mark.parametrize("transport", ["tcp", "zeromq", "zeromq-native"])
def test_sylvite_minion_under_real_master(env, transport):
    master = env.master(name="realmaster")
    extra = {}
    if transport == "zeromq-native":
        transport, extra = "zeromq", {"zmq_engine": "native"}
    if transport == "zeromq":
        master.opts.pop("transport", None)  # the real master's default
        master.write_config()
    (master.pillar_root / "top.sls").write_text("base:\n  '*':\n    - data\n")
    (master.pillar_root / "data.sls").write_text("app:\n  name: demo\n")
    (master.file_root / "motd.txt").write_text("from the real master\n")
    master.start(binary=str(REAL / "salt-master"))
    wait_for(lambda: master.cli("salt-key", "-L", "--out", "json", binary_dir=REAL).returncode == 0, 60,
             "real salt-master to start")
    minion = env.minion("sylv1", master, grains={"role": "db"}, transport=transport, **extra).start()

    def pending():
        r = master.cli("salt-key", "-L", "--out", "json", binary_dir=REAL)
        return r.returncode == 0 and "sylv1" in json.loads(r.stdout).get("minions_pre", [])
    wait_for(pending, 90, "sylv1 pending on the real master")
    r = master.cli("salt-key", "-a", "sylv1", "-y", binary_dir=REAL)
    assert r.returncode == 0, r.stdout + r.stderr

    def salt(*args):
        r = master.cli("salt", "--out", "json", "--static", *args, binary_dir=REAL, timeout=120)
        return json.loads(r.stdout) if r.stdout.strip() else {}

    wait_for(lambda: salt("sylv1", "test.ping", "-t", "10").get("sylv1") is True, 90, "test.ping via real salt")
    assert salt("sylv1", "cmd.run", "echo hi") == {"sylv1": "hi"}
    assert salt("sylv1", "grains.get", "role") == {"sylv1": "db"}
    assert salt("sylv1", "test.echo", "x y") == {"sylv1": "x y"}
    assert salt("-L", "other,sylv1", "test.ping") == {"sylv1": True}
    assert salt("sylv*", "test.ping") == {"sylv1": True}
    assert salt("-G", "role:db", "test.ping") == {"sylv1": True}
    r = master.cli("salt", "-G", "role:web", "test.ping", binary_dir=REAL, timeout=120)
    assert "No minions matched the target" in r.stdout + r.stderr
    assert salt("sylv1", "pillar.items", "unmask=True") == {"sylv1": {"app": {"name": "demo"}}}
    dest = env.root / "motd.copy"
    assert salt("sylv1", "cp.get_file", "salt://motd.txt", str(dest)) == {"sylv1": str(dest)}
    assert dest.read_text() == "from the real master\n"
    r = minion.salt_call("test.ping", "--out", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"local": True}, r.stdout + r.stderr
    r = master.cli("salt", "--async", "sylv1", "test.echo", "in-the-cache", binary_dir=REAL)
    jid = r.stdout.strip().split()[-1]
    wait_for(lambda: json.loads(master.cli("salt-run", "jobs.lookup_jid", jid, "--out", "json",
                                           binary_dir=REAL).stdout or "{}") == {"sylv1": "in-the-cache"},
             60, "the real master's job cache to hold the return")
