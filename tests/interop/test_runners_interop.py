"""Issue 18, item 6: the runners operators reach for, differential against real Salt 3008.5.

One real salt-master 3008.5 and one sylvite master, each with its own pair of real
salt-minions 3008.5 of the same ids (r1, r2) and one accepted key without a minion
(ghost), the same file_roots. The same jobs are published on both sides (salt --async,
the same order), then every runner below is run with real salt-run against the real master
and with sylvite's salt-run against the sylvite master, in lockstep:

  jobs.list_jobs (start_time, end_time, search_function, search_target, search_metadata),
  jobs.list_job, jobs.lookup_jid, jobs.print_job, jobs.exit_success, jobs.active,
  manage.versions, manage.present/not_present/alived/not_alived/allowed/not_allowed/
  joined/not_joined (also show_ip=True), fileserver.envs/file_list/dir_list/
  empty_dir_list/update (backend=roots, backend=gitfs), saltutil.sync_all/sync_modules,
  and runners that do not exist ('foo.bar', 'jobs.nope').

Both outputs (the default outputter and --out json) must be equal after normalising jids
(numbered in order), StartTimes and pids, and so must the exit codes.

Plus salt-key: --gen-keys files read by Salt's own salt.crypt; --gen-signature's file is
verified by salt.crypt.verify_signature and is byte-identical to the one real salt-key
writes from the same keys.
"""
import datetime
import hashlib
import json
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import SALT3008
from sylvite_harness import BIN, wait_for

REAL = SALT3008
REAL_PYTHON = str(SALT3008 / "python")

JID = re.compile(r"\b\d{20}\b")
START = re.compile(r"\d{4}, [A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2}\.\d{6}")


def normalise(text: str) -> str:
    jids = sorted(set(JID.findall(text)))
    for i, j in enumerate(jids):
        text = text.replace(j, f"JID{i}")
    return START.sub("<StartTime>", text)


def norm_json(text: str):
    data = json.loads(normalise(text)) if text.strip() else None
    return _strip_pids(data)


def _strip_pids(v):
    """jobs.active: Running [{id: pid}] -> sorted [{id: "<pid>"}]."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "Running" and isinstance(x, list):
                out[k] = sorted(({m: "<pid>" for m in e} for e in x), key=lambda e: sorted(e))
            elif k == "Returned" and isinstance(x, list):
                out[k] = sorted(x)
            else:
                out[k] = _strip_pids(x)
        return out
    if isinstance(v, list):
        return [_strip_pids(x) for x in v]
    return v


def strip_pid_text(text: str) -> str:
    # nested outputter: "r1:\n    12345" under Running
    return re.sub(r"(\n\s+r\d:\n\s+)\d+", r"\1<pid>", text)


class Side:
    def __init__(self, master, bindir, name):
        self.master, self.bindir, self.name = master, bindir, name

    def run(self, *args, timeout=120):
        return self.master.cli("salt-run", *args, binary_dir=self.bindir, timeout=timeout)

    def salt(self, *args, timeout=120):
        return self.master.cli("salt", *args, binary_dir=self.bindir, timeout=timeout)

    def key(self, *args):
        return self.master.cli("salt-key", *args, binary_dir=self.bindir)

    def publish_async(self, *args) -> str:
        r = self.salt("--async", *args)
        assert r.returncode == 0, (self.name, r.stdout, r.stderr)
        return r.stdout.strip().split()[-1]

    def wait_returns(self, jid, ids):
        """Watch the job cache itself (local_cache layout on both): polling with salt-run
        would add runner jobs, a different number on each side."""
        h = hashlib.sha256(jid.encode()).hexdigest()
        d = Path(self.master.opts["cachedir"]) / "jobs" / h[:2] / h[2:]
        wait_for(lambda: all((d / i / "return.p").exists() for i in ids), 60, f"{self.name}: returns of {jid}",
                 interval=0.2)
        time.sleep(0.3)


# Runners that change the master's state (its cachedir, running jobs) or may list each
# other's runner jobs: their calls on one master do not overlap. The fileserver runners
# are here because real Salt's roots backend creates cachedir/file_lists/roots on first
# use, and of two salt-run processes racing to create it one logs "Unable to make
# cachedir" and lists nothing (salt/fileserver/roots.py, file_list).
SERIAL = ("saltutil.sync_", "fileserver.", "jobs.active", "jobs.list_jobs")


def run4(real: Side, sylv: Side, real_args, sylv_args, text: bool):
    """The JSON (and text) runs of both sides: four independent CLI processes, at once for
    read-only runners (real salt-run's start-up dominates this test's time). For SERIAL
    runners each master's calls run one after the other; the two masters still run side
    by side (they share nothing)."""
    calls = [(real, (*real_args, "--out", "json")), (sylv, (*sylv_args, "--out", "json"))]
    if text:
        calls += [(real, tuple(real_args)), (sylv, tuple(sylv_args))]
    if str(real_args[0]).startswith(SERIAL):
        def in_turn(side):
            return {i: side.run(*a) for i, (s, a) in enumerate(calls) if s is side}
        with ThreadPoolExecutor(2) as ex:
            done = {}
            for f in [ex.submit(in_turn, real), ex.submit(in_turn, sylv)]:
                done.update(f.result())
        return [done[i] for i in range(len(calls))]
    with ThreadPoolExecutor(len(calls)) as ex:
        return [f.result() for f in [ex.submit(side.run, *a) for side, a in calls]]


def compare(real: Side, sylv: Side, *args, text=True, extra_norm=None, any_order=False):
    """Run the runner on both sides: the same exit code, the same JSON and nested text."""
    runs = run4(real, sylv, args, args, text)
    rj, sj = runs[0], runs[1]
    assert rj.returncode == sj.returncode, (args, rj.returncode, sj.returncode, rj.stdout, sj.stdout, sj.stderr)
    jr, js = norm_json(rj.stdout), norm_json(sj.stdout)
    if extra_norm:
        jr, js = extra_norm(jr), extra_norm(js)
    assert jr == js, (args, rj.stdout, sj.stdout, sj.stderr)
    if text:
        rt, st = runs[2], runs[3]
        assert rt.returncode == st.returncode, (args, rt.returncode, st.returncode)
        a, b = strip_pid_text(normalise(rt.stdout)), strip_pid_text(normalise(st.stdout))
        if any_order:  # lists in arrival order (jobs.active's Running): the same lines
            a, b = sorted(a.splitlines()), sorted(b.splitlines())
        assert a == b, (args, rt.stdout, st.stdout, st.stderr)
    return jr


def write_tree(root):
    (root / "top.sls").write_text("base:\n  '*': []\n")
    (root / "web" / "conf").mkdir(parents=True, exist_ok=True)
    (root / "web" / "conf" / "site.conf").write_text("listen 80\n")
    (root / "web" / "init.sls").write_text("{}\n")
    (root / "empty").mkdir(exist_ok=True)


def setup_side(env, bindir, name, side_tag):
    prod = env.root / name / "srv" / "prod"
    prod.mkdir(parents=True, exist_ok=True)
    (prod / "app.sls").write_text("{}\n")
    master = env.master(name=name, id="themaster")  # runner jobs' Target: the same on both
    master.opts["file_roots"]["prod"] = [str(prod)]
    master.write_config()
    write_tree(master.file_root)
    master.start(binary=str(bindir / "salt-master"))
    if bindir == BIN:
        master.wait_ready()
    else:
        wait_for(lambda: master.cli("salt-key", "-L", "--out", "json", binary_dir=bindir).returncode == 0, 60,
                 f"{name} to start")
    for mid in ("r1", "r2"):
        m = env.minion(f"{mid}-{side_tag}", master, id=mid)
        m.write_config(multiprocessing=False)
        m.start(binary=str(REAL / "salt-minion"))
    side = Side(master, bindir, name)

    def pending():
        r = side.key("-L", "--out", "json")
        return r.returncode == 0 and {"r1", "r2"} <= set(json.loads(r.stdout).get("minions_pre", []))
    wait_for(pending, 90, f"{name}: r1, r2 pending")
    r = side.key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    return side


def test_runners_differential(env, tmp_path):
    real = setup_side(env, REAL, "realm", "real")
    sylv = setup_side(env, BIN, "sylvm", "sylv")
    # ghost: an accepted key with no minion, on both masters (the same PEM).
    ghost_pub = (env.root / "r1-real" / "pki" / "minion.pub")
    wait_for(ghost_pub.exists, 30, "r1's key")
    for side in (real, sylv):
        shutil.copy(ghost_pub, side.master.pki_dir / "minions" / "ghost")

    for side in (real, sylv):
        def both_up(side=side):
            r = side.salt("--out", "json", "--static", "*", "test.ping", "-t", "10")
            try:
                return set(json.loads(r.stdout or "{}")) >= {"r1", "r2"}
            except json.JSONDecodeError:
                return False
        wait_for(both_up, 120, f"{side.name}: r1 and r2 answer", interval=1)
    time.sleep(1.1)
    since = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    time.sleep(1.1)

    # The same jobs on both sides, in the same order.
    jobs = {}
    for side in (real, sylv):
        j = {}
        j["echo"] = side.publish_async("*", "test.echo", "hello")
        side.wait_returns(j["echo"], ["r1", "r2"])
        j["meta"] = side.publish_async("r1", "test.arg", "a", "k=v", "--metadata", '{"team": "ops"}')
        side.wait_returns(j["meta"], ["r1"])
        j["false"] = side.publish_async("-L", "r1,r2", "cmd.run", "exit 3")
        side.wait_returns(j["false"], ["r1", "r2"])
        j["ghost"] = side.publish_async("-L", "r1,ghost", "test.true")
        side.wait_returns(j["ghost"], ["r1"])
        jobs[side.name] = j
    until = (datetime.datetime.now() + datetime.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")

    # jobs.list_jobs with its filters (the readiness pings are before `since`).
    compare(real, sylv, "jobs.list_jobs", f"start_time={since}")
    compare(real, sylv, "jobs.list_jobs", f"start_time={since}", f"end_time={until}", "search_function=test.*")
    compare(real, sylv, "jobs.list_jobs", f"start_time={since}", "search_target=ghost")
    compare(real, sylv, "jobs.list_jobs", f"start_time={since}", "search_function=cmd.run,test.echo")
    compare(real, sylv, "jobs.list_jobs", 'search_metadata={"team": "ops"}')
    compare(real, sylv, "jobs.list_jobs", "end_time=2001-01-01")

    # One job: list_job, lookup_jid, print_job, exit_success (per side jids).
    def per_jid(fun, key, *extra):
        rj, sj, rt, st = run4(real, sylv, (fun, jobs["realm"][key], *extra), (fun, jobs["sylvm"][key], *extra), True)
        assert rj.returncode == sj.returncode, (fun, key, rj.stdout, sj.stdout)
        assert norm_json(rj.stdout) == norm_json(sj.stdout), (fun, key, rj.stdout, sj.stdout, sj.stderr)
        assert rt.returncode == st.returncode
        assert normalise(rt.stdout) == normalise(st.stdout), (fun, key, rt.stdout, st.stdout)

    for key in ("echo", "meta", "false", "ghost"):
        per_jid("jobs.exit_success", key)
        per_jid("jobs.list_job", key)
        per_jid("jobs.lookup_jid", key)
        per_jid("jobs.print_job", key)
    per_jid("jobs.lookup_jid", "ghost", "missing=True")
    compare(real, sylv, "jobs.exit_success", "20000101000000000000")
    compare(real, sylv, "jobs.list_job", "20000101000000000000")

    # jobs.active: a job still running on both minions.
    for side in (real, sylv):
        side.publish_async("*", "test.sleep", "90")
    time.sleep(3)
    compare(real, sylv, "jobs.active", any_order=True)

    # manage.*: versions and presence (show_ip: Salt's connected_ids address).
    compare(real, sylv, "manage.versions")
    for fun in ("present", "not_present", "alived", "not_alived", "allowed", "not_allowed", "joined",
                "not_joined"):
        compare(real, sylv, f"manage.{fun}")
    compare(real, sylv, "manage.alived", "show_ip=True")
    compare(real, sylv, "manage.present", "subset=['r2', 'ghost']")
    compare(real, sylv, "manage.not_alived", "subset=['r2', 'ghost']")

    # fileserver.*
    compare(real, sylv, "fileserver.envs")
    compare(real, sylv, "fileserver.envs", "backend=gitfs")
    compare(real, sylv, "fileserver.file_list")
    compare(real, sylv, "fileserver.file_list", "saltenv=prod")
    compare(real, sylv, "fileserver.file_list", "saltenv=nope")
    compare(real, sylv, "fileserver.file_list", "backend=roots")
    compare(real, sylv, "fileserver.file_list", "backend=gitfs")
    compare(real, sylv, "fileserver.file_list", "backend=-roots")
    compare(real, sylv, "fileserver.dir_list")
    compare(real, sylv, "fileserver.empty_dir_list")
    compare(real, sylv, "fileserver.update")
    compare(real, sylv, "fileserver.update", "backend=gitfs")

    # saltutil.sync_* (nothing custom: Salt syncs nothing, sylvite never does)
    compare(real, sylv, "saltutil.sync_all")
    compare(real, sylv, "saltutil.sync_modules")
    compare(real, sylv, "saltutil.sync_runners")

    # Runners that do not exist: Salt's message and exit code.
    compare(real, sylv, "foo.bar")
    compare(real, sylv, "jobs.nope")


def salt_py(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([REAL_PYTHON, "-c", code, *args], capture_output=True, text=True, timeout=60)


def test_salt_key_gen_keys_read_by_salt(env, tmp_path):
    master = env.master()
    out = tmp_path / "gen"
    r = master.cli("salt-key", "--gen-keys", "web1", "--gen-keys-dir", str(out), "--keysize", "3072")
    assert r.returncode == 0, r.stdout + r.stderr
    pem, pub = out / "web1.pem", out / "web1.pub"
    assert pem.exists() and pub.exists()
    assert oct(pem.stat().st_mode & 0o777) == "0o400"
    # Salt's own code reads both and they are one pair (sign with .pem, verify with .pub).
    code = ("import sys, salt.crypt\n"
            "priv = salt.crypt.PrivateKey.from_file(sys.argv[1])\n"
            "sig = salt.crypt.sign_message(sys.argv[1], 'hello')\n"
            "assert salt.crypt.PublicKey.from_file(sys.argv[2]).verify('hello', sig)\n"
            "assert salt.crypt.get_rsa_pub_key(sys.argv[2]).key_size == 3072\n"
            "assert priv.key.key_size == 3072\n"
            "print(salt.utils.crypt.pem_finger(sys.argv[2], sum_type='sha256'))\n")
    code = "import salt.utils.crypt\n" + code
    v = salt_py(code, str(pem), str(pub))
    assert v.returncode == 0, v.stdout + v.stderr
    # The fingerprint salt-key printed is Salt's pem_finger of the .pub.
    assert v.stdout.strip() in r.stdout, (r.stdout, v.stdout)
    # Real salt-key reads the pair sylvite wrote without replacing it (find_or_create_keys).
    before = pem.read_bytes()
    subprocess.run([str(REAL / "salt-key"), "-c", str(master.conf_dir), "--gen-keys", "web1", "--gen-keys-dir",
                    str(out)], capture_output=True, text=True, timeout=60)
    assert pem.read_bytes() == before


def test_salt_key_gen_signature_verified_by_salt(env, tmp_path):
    sylv = env.master(name="sylvsig", master_pubkey_signature="master_pubkey_signature")
    sylv.start().wait_ready()  # writes master.pem / master.pub
    sylv.stop()
    r = sylv.cli("salt-key", "--gen-signature", "--auto-create")
    assert r.returncode == 0, r.stdout + r.stderr
    pki = sylv.pki_dir
    sig = pki / "master_pubkey_signature"
    assert sig.exists() and (pki / "master_sign.pem").exists() and (pki / "master_sign.pub").exists()
    code = ("import sys, binascii, salt.crypt\n"
            "pub = open(sys.argv[2]).read()\n"
            "data = salt.crypt.clean_key(pub)\n"
            "sig = binascii.a2b_base64(open(sys.argv[3]).read())\n"
            "assert salt.crypt.verify_signature(sys.argv[1], data, sig), 'refused'\n"
            "print('ok')\n")
    v = salt_py(code, str(pki / "master_sign.pub"), str(pki / "master.pub"), str(sig))
    assert v.returncode == 0 and v.stdout.strip() == "ok", v.stdout + v.stderr

    # Real salt-key --gen-signature from the same keys writes the same bytes.
    real = env.master(name="realsig", master_pubkey_signature="master_pubkey_signature")
    real.pki_dir.mkdir(parents=True, exist_ok=True)
    for f in ("master.pem", "master.pub", "master_sign.pem", "master_sign.pub"):
        shutil.copy(pki / f, real.pki_dir / f)
    rr = real.cli("salt-key", "--gen-signature", binary_dir=REAL)
    assert rr.returncode == 0, rr.stdout + rr.stderr
    assert (real.pki_dir / "master_pubkey_signature").read_bytes() == sig.read_bytes()
    # A second run: both refuse to overwrite, with the same output and exit code.
    again_s = sylv.cli("salt-key", "--gen-signature")
    again_r = real.cli("salt-key", "--gen-signature", binary_dir=REAL)
    assert again_s.returncode == again_r.returncode
    assert again_s.stdout == again_r.stdout, (again_s.stdout, again_r.stdout)
    # --pub/--priv/--signature-path. Salt 3008.5 writes into pki_dir whatever
    # --signature-path says (MasterKeys.gen_signature's cache ignores the pki_dir override
    # for localfs_key); sylvite writes where it is told (docs/operations.md, Runners).
    other = tmp_path / "sigs"
    args = ("--gen-signature", "--pub", str(pki / "master.pub"), "--priv", str(pki / "master_sign.pem"))
    s2 = sylv.cli("salt-key", *args, "--signature-path", str(other))
    assert s2.returncode == 0, s2.stdout + s2.stderr
    mine = (other / "master_pubkey_signature").read_bytes()
    (real.pki_dir / "master_pubkey_signature").unlink()
    r2 = real.cli("salt-key", *args, "--signature-path", str(other / "ignored"), binary_dir=REAL)
    assert r2.returncode == 0 and s2.stdout == r2.stdout, (s2.stdout, r2.stdout, r2.stderr)
    assert (real.pki_dir / "master_pubkey_signature").read_bytes() == mine
    # Missing keys: Salt's texts.
    for extra in (("--pub", "/nonexistent.pub"), ("--priv", "/nonexistent.pem")):
        a = sylv.cli("salt-key", "--gen-signature", *extra)
        b = real.cli("salt-key", "--gen-signature", *extra, binary_dir=REAL)
        assert (a.returncode, a.stdout) == (b.returncode, b.stdout), (a.stdout, b.stdout)
