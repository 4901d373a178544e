"""Issue 3, test 2: a sylvite minion under an unmodified Salt 3008 salt-master."""
import json

from conftest import SALT3008
from sylvite_harness import wait_for

REAL = SALT3008


def test_sylvite_minion_under_real_master(env):
    master = env.master(name="realmaster")
    master.start(binary=str(REAL / "salt-master"))
    wait_for(lambda: master.cli("salt-key", "-L", "--out", "json", binary_dir=REAL).returncode == 0, 60,
             "real salt-master to start")
    minion = env.minion("sylv1", master, grains={"role": "db"}).start()

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
