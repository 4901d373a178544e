"""Issue 18 item 5: the highstate outputter, sylvite's salt CLI against real Salt's.

A real salt-minion 3008.5 (id hs1) applies the same small SLS (file.managed with a diff,
cmd.run, test.succeed_with_changes, test.fail_without_changes and a state whose requisite
failed) served from file_roots, once under a sylvite master (sylvite's `salt`) and once
under a real salt-master 3008.5 (Salt's `salt`). For each set of CLI options the two
stdouts must be equal once durations, start times and the cmd.run pid are normalised, and
the exit codes equal (1: a state failed, the minion's retcode 2)."""
import difflib
import re
import shutil
import tempfile
from pathlib import Path

from conftest import SALT3008
from sylvite_harness import Env, wait_for

REAL = SALT3008

SLS = """\
motd:
  file.managed:
    - name: {dest}
    - source: salt://motd.txt
hello:
  cmd.run:
    - name: echo state-ran; echo second line
pretend:
  test.succeed_with_changes: []
quiet:
  test.succeed_without_changes: []
broken:
  test.fail_without_changes:
    - comment: "failed on purpose\\nwith a second line"
after_broken:
  test.succeed_without_changes:
    - require:
      - test: broken
"""

# Each entry: extra salt CLI options (state.apply web is appended).
RUNS = [
    [],
    ["--out", "highstate"],
    ["--force-color"],
    ["--state-output", "terse"],
    ["--state-output", "mixed", "--state-verbose", "False"],
    ["--state-output", "changes_id", "--force-color"],
    ["--state-verbose", "false", "--output-diff"],
    ["--out", "nested"],
]


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def normalise(text):
    text = re.sub(r"(Started: ?(?:\x1b\[[0-9;]*m)?)\d\d:\d\d:\d\d\.\d+", r"\1T", text)
    text = re.sub(r"(Duration: ?(?:\x1b\[[0-9;]*m)?)[0-9.]+ ms", r"\1D ms", text)
    text = re.sub(r"Total run time: *[0-9.]+ m?s", "Total run time: R", text)
    lines = text.split("\n")
    for i in range(1, len(lines)):
        # cmd.run's pid, and the timings when printed by nested: the value line that follows
        if ANSI.sub("", lines[i - 1]).strip() in ("pid:", "duration:", "start_time:"):
            lines[i] = "VALUE"
    return "\n".join(lines)


def start_real_minion(env, master, node_name):
    m = env.minion(node_name, master, id="hs1")
    m.write_config(multiprocessing=False, log_level_logfile="debug")
    return m.start(binary=str(REAL / "salt-minion"))


def outputs(master, dest, binary_dir=None):
    res = []
    for extra in RUNS:
        dest.write_text("old content\n")
        r = master.cli("salt", *extra, "hs1", "state.apply", "web", "-t", "120", timeout=180,
                       binary_dir=binary_dir)
        res.append((extra, r.returncode, normalise(r.stdout), r.stderr))
    return res


def setup_master(master, dest):
    (master.file_root / "motd.txt").write_text("managed content\nline two\n")
    (master.file_root / "web.sls").write_text(SLS.format(dest=dest))


def test_highstate_output_matches_real_salt(env):
    shared = Path(tempfile.mkdtemp(prefix="sylvite-hs-"))
    dest = shared / "motd"
    try:
        # sylvite master + real minion
        master = env.master()
        setup_master(master, dest)
        master.start().wait_ready()
        start_real_minion(env, master, "hs1_sylvite")
        wait_for(lambda: "hs1" in master.keys().get("minions_pre", []), 90, "hs1 pending on sylvite")
        assert master.salt_key("-a", "hs1", "-y").returncode == 0
        wait_for(lambda: master.salt_json("hs1", "test.ping", "-t", "10").get("hs1") is True, 90,
                 "hs1 to answer sylvite", interval=1)
        ours = outputs(master, dest)

        # real master + real minion (another env: its own ports and dirs)
        env2 = Env()
        try:
            real = env2.master(name="realmaster")
            setup_master(real, dest)
            real.start(binary=str(REAL / "salt-master"))
            wait_for(lambda: real.cli("salt-key", "-L", "--out", "json", binary_dir=REAL).returncode == 0, 60,
                     "real salt-master to start")
            start_real_minion(env2, real, "hs1_real")

            def pending():
                r = real.cli("salt-key", "-L", binary_dir=REAL)
                return r.returncode == 0 and "hs1" in r.stdout
            wait_for(pending, 90, "hs1 pending on the real master")
            assert real.cli("salt-key", "-a", "hs1", "-y", binary_dir=REAL).returncode == 0
            wait_for(lambda: real.salt_json("hs1", "test.ping", "-t", "10", binary_dir=REAL).get("hs1") is True,
                     90, "hs1 to answer the real master", interval=1)
            theirs = outputs(real, dest, binary_dir=REAL)
        finally:
            env2.close()
    finally:
        shutil.rmtree(shared, ignore_errors=True)

    for (extra, rc_ours, out_ours, err_ours), (_, rc_real, out_real, err_real) in zip(ours, theirs):
        assert "Summary for hs1" in out_real or extra == ["--out", "nested"], (extra, out_real, err_real)
        diff = "\n".join(difflib.unified_diff([repr(x) for x in out_real.split("\n")],
                                             [repr(x) for x in out_ours.split("\n")], "salt", "sylvite", lineterm=""))
        assert out_ours == out_real, f"{extra}\n{diff}\n{err_ours}"
        assert rc_ours == rc_real == 1, (extra, rc_ours, rc_real, err_ours, err_real)
        assert "ERROR: Minions returned with non-zero exit code" in err_ours
