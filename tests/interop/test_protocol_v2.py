"""Issue 3, test 3: a Salt 3007.3 minion (request protocol v2) against sylvite."""
import time

from conftest import SALT3007, SALT3008
from sylvite_harness import wait_for


def v2_minion(env, master, name):
    m = env.minion(name, master)
    m.write_config(multiprocessing=False)
    return m.start(binary=str(SALT3007 / "salt-minion"))


def all_keys(master, cli_dir=None):
    import json
    r = master.cli("salt-key", "-L", "--out", "json", binary_dir=cli_dir)
    return {k for ids in json.loads(r.stdout).values() for k in ids} if r.returncode == 0 else set()


def test_v2_minion_served_when_allowed(env):
    master = env.master(minimum_auth_version=2).start().wait_ready()
    v2_minion(env, master, "old1")
    wait_for(lambda: "old1" in master.keys().get("minions_pre", []), 90, "old1 pending")
    assert master.salt_key("-a", "old1", "-y").returncode == 0
    wait_for(lambda: master.salt_json("old1", "test.ping", "-t", "10").get("old1") is True, 90,
             "v2 minion to answer", interval=1)
    assert master.salt_json("old1", "cmd.run", "echo v2") == {"old1": "v2"}
    assert master.salt_json("old1", "test.echo", "é") == {"old1": "é"}


def test_v2_minion_refused_by_default_like_salt_3008(env):
    # Salt 3008.5's own master (minimum_auth_version 3 by default) never records the key.
    real = env.master(name="realmaster")
    real.start(binary=str(SALT3008 / "salt-master"))
    wait_for(lambda: real.cli("salt-key", "-L", binary_dir=SALT3008).returncode == 0, 60, "real master")
    v2_minion(env, real, "old0")
    master = env.master().start().wait_ready()
    minion = v2_minion(env, master, "old1")
    time.sleep(20)  # several auth attempts (acceptance_wait_time 1 s)
    assert "old0" not in all_keys(real, SALT3008)
    assert "old1" not in all_keys(master)
    assert minion.proc.alive()
    master_log = (master.root / "master.log").read_text(errors="replace")
    assert "old1" in master_log and "version" in master_log.lower()
