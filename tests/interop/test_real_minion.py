"""Issue 3, test 1: an unmodified Salt 3008 salt-minion against a sylvite master."""
import json
import os

from conftest import SALT3008
from sylvite_harness import wait_for

REAL_MINION = str(SALT3008 / "salt-minion")
REAL_CALL = SALT3008


def real_minion(env, master, name="real1", **opts):
    m = env.minion(name, master, **opts)
    m.write_config(multiprocessing=False, log_level_logfile="debug")
    return m.start(binary=REAL_MINION)


def accept(master, name):
    wait_for(lambda: name in master.keys().get("minions_pre", []), 90, f"{name} pending")
    r = master.salt_key("-a", name, "-y")
    assert r.returncode == 0, r.stdout + r.stderr


def ping(master, tgt, timeout=90):
    return wait_for(lambda: master.salt_json(tgt, "test.ping", "-t", "10").get(tgt) is True, timeout,
                    f"{tgt} to answer test.ping", interval=1)


def test_real_minion_full_surface(env):
    master = env.master().start().wait_ready()
    (master.pillar_root / "top.sls").write_text("base:\n  '*':\n    - data\n")
    (master.pillar_root / "data.sls").write_text("app:\n  name: demo\n  ports: [80, 443]\n  tls: {enabled: true}\n")
    big = os.urandom(5 * 1024 * 1024)
    (master.file_root / "big.bin").write_bytes(big)
    (master.file_root / "motd.txt").write_text("managed by sylvite\n")
    (master.file_root / "web.sls").write_text(
        "motd:\n  file.managed:\n    - name: {dest}\n    - source: salt://motd.txt\n"
        "hello:\n  cmd.run:\n    - name: echo state-ran\n".format(dest=env.root / "motd"))
    minion = real_minion(env, master)
    accept(master, "real1")
    ping(master, "real1")

    assert master.salt_json("real1", "cmd.run", "echo hi") == {"real1": "hi"}
    assert master.salt_json("real1", "cmd.run", "echo héllo wörld ✓") == {"real1": "héllo wörld ✓"}
    grains = master.salt_json("real1", "grains.items")["real1"]
    assert grains["id"] == "real1" and grains["kernel"] == "Linux"
    os_name = master.salt_json("real1", "grains.get", "os")["real1"]
    assert os_name == grains["os"]
    assert master.salt_json("-G", f"os:{os_name}", "test.ping") == {"real1": True}
    assert master.salt_json("-C", f"G@kernel:Linux and real*", "test.ping") == {"real1": True}
    assert master.salt_json("real1", "pillar.items", "unmask=True")["real1"] == {
        "app": {"name": "demo", "ports": [80, 443], "tls": {"enabled": True}}}

    dest = env.root / "big.copy"
    out = master.salt_json("real1", "cp.get_file", "salt://big.bin", str(dest), "-t", "60")
    assert out == {"real1": str(dest)} and dest.read_bytes() == big

    out = master.salt_json("real1", "state.apply", "web", "-t", "120")
    results = out["real1"]
    assert isinstance(results, dict) and results, out
    assert all(r["result"] is True for r in results.values()), results
    assert (env.root / "motd").read_text() == "managed by sylvite\n"

    out = master.salt_json("real1", "saltutil.sync_all", "-t", "60")
    assert isinstance(out["real1"], dict)

    r = minion.salt_call("test.ping", "--out", "json", binary_dir=REAL_CALL)
    assert r.returncode == 0 and json.loads(r.stdout) == {"local": True}, r.stdout + r.stderr
    r = minion.salt_call("pillar.items", "unmask=True", "--out", "json", binary_dir=REAL_CALL)
    assert json.loads(r.stdout)["local"]["app"]["name"] == "demo", r.stdout + r.stderr

    r = master.salt("--async", "real1", "test.echo", "lookup-me")
    jid = r.stdout.strip().split()[-1]
    wait_for(lambda: json.loads(master.salt_run("jobs.lookup_jid", jid, "--out", "json").stdout or "{}")
             == {"real1": "lookup-me"}, 60, "lookup_jid to show the real minion's return")


def rejected_exit(env, master, name, key_cli_dir=None):
    """Start a real minion, reject its key, return (exit code, rejection logged)."""
    minion = real_minion(env, master, name=name)

    def pending():
        r = master.cli("salt-key", "-L", "--out", "json", binary_dir=key_cli_dir)
        return r.returncode == 0 and name in json.loads(r.stdout).get("minions_pre", [])
    wait_for(pending, 90, f"{name} pending")
    r = master.cli("salt-key", "-r", name, "-y", binary_dir=key_cli_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: not minion.proc.alive(), 120, f"rejected {name} to exit", interval=1)
    log = (minion.root / "minion.log").read_text(errors="replace")
    return minion.proc.p.returncode, "rejected" in log.lower()


def test_real_minion_rejected_exits_as_under_real_master(env):
    # What Salt's own master makes a rejected Salt minion do ...
    real = env.master(name="realmaster")
    real.start(binary=str(SALT3008 / "salt-master"))
    wait_for(lambda: real.cli("salt-key", "-L", binary_dir=SALT3008).returncode == 0, 60, "real master")
    expected = rejected_exit(env, real, "bad0", key_cli_dir=SALT3008)
    real.kill()
    # ... and the same against sylvite.
    master = env.master().start().wait_ready()
    got = rejected_exit(env, master, "bad1")
    assert got == expected
    assert got[1], "the minion logged no rejection"


def test_real_minion_survives_aes_rotation(env):
    master = env.master().start().wait_ready()
    minion = real_minion(env, master)
    other = env.minion("other", master).start()
    accept(master, "real1")
    accept(master, "other")
    ping(master, "real1")
    assert master.salt_key("-d", "other", "-y").returncode == 0
    ping(master, "real1")
    assert master.salt_json("real1", "test.echo", "after-rotation") == {"real1": "after-rotation"}


def test_real_minions_with_publish_processes(env):
    """Two unmodified salt-minions (TCP) on a master whose publish port is served by two
    publish processes (publish_processes: 2): every publish, broadcast or targeted,
    reaches exactly its targets and manage.present sees both."""
    master = env.master(publish_processes=2).start().wait_ready()
    names = ["pp-real1", "pp-real2"]
    for n in names:
        real_minion(env, master, name=n)
    for n in names:
        accept(master, n)
    for n in names:
        ping(master, n)
    assert master.salt_json("pp-real*", "test.ping", "-t", "20") == {n: True for n in names}
    assert master.salt_json("-L", "pp-real2", "cmd.run", "echo only-2", "-t", "20") == {"pp-real2": "only-2"}
    r = master.salt_run("manage.present", "--out", "json")
    assert sorted(json.loads(r.stdout)) == names, r.stdout + r.stderr
    log = (master.root / "master.log").read_text(errors="replace")
    assert log.count("is accepting on port") == 2, log[-3000:]
