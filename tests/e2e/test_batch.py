"""Issue 18 item 4: `salt -b` (master/cli/batch.cpp) with sylvite minions, on one master
and on the three-master cluster (tests/e2e/clusterlab.py): rolling windows of at most the
batch size under one jid, Salt's lines and exit codes, an unanswering minion reported,
--failhard, --static; in the cluster a batch of 10% over 20 minions started on master 2
gets all 20 returns, and every master's job cache shows them.
"""
import json
import re

import pytest

from batch_parse import parse
from clusterlab import LocalCluster
from sylvite_harness import preaccept, wait_for

MINIONS = [f"bx{i}" for i in range(1, 6)]


def start_minions(make, names, accept_on):
    """make(name) -> a Minion (not started); its key is accepted on accept_on."""
    out = [make(n).start() for n in names]
    wait_for(lambda: set(names) <= set(accept_on.keys().get("minions_pre", [])), 90, "minion keys pending")
    r = accept_on.salt_key("-A", "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def all_answer(master, tgt, names):
    out = master.salt_json(tgt, "test.ping", "-t", "5")
    return all(out.get(n) is True for n in names)


def check_windows(res, names, size):
    assert sorted(x for w in res["windows"] for x in w) == sorted(names), res
    assert all(len(w) <= size for w in res["windows"]), res
    assert len(res["windows"][0]) == min(size, len(names)), res


def test_batch_one_master(env):
    master = env.master()
    master.start()
    master.wait_ready()
    start_minions(lambda n: env.minion(n, master, acceptance_wait_time=1), MINIONS, master)
    preaccept([master], "bz9", env.root / "bz9-keys")  # accepted, never running
    wait_for(lambda: all_answer(master, "bx*", MINIONS), 90, "minions to answer", interval=0.5)

    r = master.salt("-b", "2", "bx*", "test.ping")
    assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    res = parse(r.stdout)
    check_windows(res, MINIONS, 2)
    assert sorted(res["ids"]) == MINIONS
    jids = set(re.findall(r"\b\d{20}\b", r.stdout))
    assert len(jids) == 1, r.stdout  # one batch jid for every window
    assert res["returns"][0].endswith("\n    True\njid:\n    <JID>\nretcode:\n    0"), res

    # failures: the exit code is the highest retcode, no "non-zero exit code" line
    r = master.salt("--batch-size", "40%", "--out", "json", "bx*", "cmd.run", "exit 3")
    assert r.returncode == 3 and r.stderr == "", r.stdout + r.stderr
    res = parse(r.stdout, "json")
    check_windows(res, MINIONS, 2)
    assert sorted(res["ids"]) == MINIONS
    assert all(json.loads(x)["retcode"] == 3 for x in res["returns"]), res

    # --failhard: the first bad return stops the batch
    r = master.salt("-b", "1", "--failhard", "bx*", "cmd.run", "exit 3")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr == "[ERROR   ] Batch run stopped due to failhard\n", r.stderr
    res = parse(r.stdout)
    assert res["windows"] == [["bx1"]] and res["ids"] == ["bx1"], r.stdout

    # an unanswering minion is reported and gets no job
    r = master.salt("-b", "3", "-t", "2", "b*", "test.ping")
    assert r.returncode == 0, r.stdout + r.stderr
    res = parse(r.stdout)
    assert res["messages"] == ["Minion bz9 did not respond. No job will be sent."], r.stdout
    check_windows(res, MINIONS, 3)

    # --static: one merged output
    r = master.salt("-b", "2", "--static", "--out", "json", "bx*", "test.echo", "hi")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout) == {n: "hi" for n in MINIONS}

    # --batch-safe-limit switches to batch mode at the limit only
    r = master.salt("--batch-safe-limit", "5", "--batch-safe-size", "2", "bx*", "test.ping")
    assert r.returncode == 0, r.stdout + r.stderr
    assert parse(r.stdout)["messages"] == ["NOTICE: Too many minions targeted, switching to batch execution."]
    r = master.salt("--batch-safe-limit", "6", "bx*", "test.ping")
    assert r.returncode == 0 and "Executing run on" not in r.stdout, r.stdout + r.stderr

    # nothing matched / nothing answered
    r = master.salt("-b", "2", "nobody", "test.ping")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ("No minions matched the target. No command was sent, no jid was assigned.\n"
                        "No minions matched the target.\n")
    assert r.stderr == "ERROR: No return received\n"
    r = master.salt("-b", "2", "-t", "2", "bz9", "test.ping")
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "ERROR: No return received\n")


@pytest.fixture
def cluster(env):
    c = LocalCluster(env)
    yield c
    c.close()


def test_batch_ten_percent_of_twenty_from_master_two(env, cluster):
    names = [f"cb{i:02d}" for i in range(1, 21)]
    start_minions(lambda n: cluster.minion(n, acceptance_wait_time=1, random_reauth_delay=1), names,
                  cluster.masters[0])
    m2 = cluster.masters[1]
    wait_for(lambda: all_answer(m2, "cb*", names), 120, "20 minions to answer master 2", interval=1)

    r = m2.salt("-b", "10%", "--out", "json", "cb*", "test.ping", timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    res = parse(r.stdout, "json")
    check_windows(res, names, 2)
    assert sorted(res["ids"]) == names, r.stdout
    assert all(json.loads(x)[i] is True for x, i in zip(res["returns"], res["ids"])), r.stdout
    jids = set(re.findall(r"\b\d{20}\b", r.stdout))
    assert len(jids) == 1, jids
    jid = jids.pop()
    # the shared job cache: every master shows the batch's 20 returns
    for m in cluster.masters:
        out = json.loads(m.salt_run("jobs.lookup_jid", jid, "--out", "json").stdout)
        assert out == {n: True for n in names}, (m.name, out)

    # and from master 3, failures with their exit code
    m3 = cluster.masters[2]
    r = m3.salt("-b", "10%", "--out", "json", "cb*", "cmd.run", "exit 4", timeout=300)
    assert r.returncode == 4, r.stdout + r.stderr
    res = parse(r.stdout, "json")
    assert sorted(res["ids"]) == names
