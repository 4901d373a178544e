"""Issue 7 in network namespaces: three masters (m1..m3) on a real GlusterFS replica-3
volume behind a real HAProxy, six minions through the load balancer. A fourth master
(m4, its own namespace, a client mount of the volume) joins with cluster_id,
cluster_secret and one peer through the discover/join handshake; the accepting master adds it to HAProxy live
through the runtime API (cluster_lb_admin); new minions land on it; its
jobs reach every minion and jobs.lookup_jid agrees on all four masters.

Then the documented removal, without restarting anyone: HAProxy drops it
(--remove-server), it stops, `cluster_pki_dir/peers/m4.pub` is deleted -> the three
drop it; the deletion rotates the cluster AES key -> a publish captured on the
wire no longer decrypts with the key m4 held, and does with the new one. Then the
one-step removal: m5 joins, `salt-run cluster.remove m5` takes it out of HAProxy (runtime
API), deletes its key (the others drop it) and rotates the AES key.

test_refusals_across_hosts: wrong, empty secret, wrong cluster_pub_fingerprint and a "../"
id from a joiner in its own namespace, each logged with its reason and leaving no file
(crafted messages: test_cluster_join_refusals.py, on loopback).
"""
import hashlib
import json
import re
import subprocess
import sys
import time

import pytest

from clusterlab import master_logs as logs, peer_states as peers_of
from glusterlab import gluster_available
from multihostlab import MultiHostCluster, onboard, shared_opts, wait_ping
from netlab import NetLab
from sylvite_harness import BIN, wait_for

why_skip = gluster_available()
pytestmark = pytest.mark.skipif(why_skip is not None, reason=why_skip or "")

SECRET = "gj-join-secret"
MINIONS = [f"gj{i}" for i in range(1, 7)]
LATE = ["gj7", "gj8"]
HAPCFG = BIN / "sylvite-haproxy-cfg"


@pytest.fixture
def mh(env):
    with NetLab() as lab:
        j, j5 = lab.host("m4"), lab.host("m5")
        c = MultiHostCluster(env, lab, cluster_id="gj", clients=[j, j5], lb_admin_port=9999, cluster_secret=SECRET)
        c.jhost, c.j5host = j, j5
        try:
            yield c
        finally:
            c.close()


def lookup(m, jid) -> dict:
    r = m.salt_run("jobs.lookup_jid", jid, "--out", "json", timeout=60)
    try:
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
    except json.JSONDecodeError:
        return {}


def hapcfg(mh, *args):
    r = subprocess.run([str(HAPCFG), "--stats-socket", str(mh.stats), "--publish-backend", mh.PUBLISH_BACKEND,
                        "--request-backend", mh.REQUEST_BACKEND, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


# Subscribes to the load balancer's publish port as an unidentified connection (it gets
# broadcast publishes, e.g. grain targets) and tries each AES key on every frame.
SUBSCRIBER = r"""
import json, socket, sys, msgpack, salt.crypt
host, port, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port), timeout=60)
print("connected", flush=True)
u = msgpack.Unpacker(raw=False)
while True:
    data = s.recv(65536)
    if not data:
        break
    u.feed(data)
    for frame in u:
        body = msgpack.unpackb(frame["body"], raw=True)  # Salt packs "load" as a raw str
        out = {}
        for name, key in (("old", old), ("new", new)):
            try:
                load = salt.crypt.Crypticle({}, key).loads(body[b"load"])
                out[name] = {"jid": load.get("jid"), "fun": load.get("fun")}
            except Exception as e:
                out[name] = "refused: " + type(e).__name__
        print(json.dumps(out), flush=True)
"""


def test_join_serve_then_leave(env, mh):
    onboard(mh, MINIONS, pattern="gj*")
    m1, m2, m3 = mh.masters
    pki = mh.gl.mounts["m1"] / "pki" / "cluster"
    assert not (pki / "peers" / "m4.pub").exists()

    # --- join: the minimal config (id, cluster_id, one peer, cluster_pki_dir, cluster_secret, cachedir)
    mnt = mh.gl.mount_client(mh.jhost)
    j = env.master("m4", host=mh.jhost, root_dir="/", cluster_id="gj", cluster_peers=[m2.host.ip],
                   cluster_secret=SECRET, **shared_opts(mnt))
    t0 = time.monotonic()
    j.start()
    j.wait_ready(timeout=60)
    m = re.search(r"cluster join took (\d+) ms", logs(j))
    assert m, logs(j)
    print(f"\nm4 joined in {m.group(1)} ms (process start to ready {time.monotonic() - t0:.2f} s)")
    assert re.search(r"master m4 \(.*\) joined the cluster through this master", logs(m2)), logs(m2)
    assert (pki / "peers" / "m4.pub").read_text() == (j.pki_dir / "master.pub").read_text()
    for x in mh.masters:
        wait_for(lambda: peers_of(x).get("m4") == "up", 30, f"{x.name} to link to m4")
    wait_for(lambda: all(peers_of(j).get(x.name) == "up" for x in mh.masters), 30, "m4 to link to every master")

    # its jobs reach every minion at once (forwarded to the masters they are connected to)
    wait_ping(j, MINIONS, pattern="gj*")

    # --- the accepting master (cluster_lb_admin) added m4 to HAProxy through its runtime API;
    # new minions land on it (leastconn: it has none)
    srv = mh.jhost.ip  # servers are named by address, as sylvite-haproxy-cfg names them
    wait_for(lambda: mh.server_status(mh.PUBLISH_BACKEND).get(srv, {}).get("status") == "UP", 30,
             "HAProxy to mark m4 up")
    assert mh.server_status(mh.REQUEST_BACKEND).get(srv, {}).get("status") == "UP"
    assert re.search(r"master m4 \(\S+\) added to the load balancer", logs(m2)), logs(m2)
    mh.minions(LATE)
    wait_for(lambda: set(LATE) <= set(j.keys().get("minions_pre", [])), 90, "late minion keys pending on m4")
    assert j.salt_key("-A", "-y").returncode == 0
    wait_for(lambda: int(mh.server_status(mh.PUBLISH_BACKEND)[srv]["scur"]) >= 1, 60,
             "a minion's publish connection on m4")
    everyone = MINIONS + LATE
    for x in [j] + mh.masters:
        wait_ping(x, everyone, pattern="gj*")

    # a job from m4: every return in the shared job cache, the same answer on all four
    r = j.salt("--async", "gj*", "test.echo", "joined")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"\b(\d{20})\b", r.stdout).group(1)
    want = {n: "joined" for n in everyone}
    for x in [j] + mh.masters:
        wait_for(lambda: lookup(x, jid) == want, 60, f"jobs.lookup_jid {jid} on {x.name}", interval=1)

    # --- leave (documented steps, no restart): load balancer, stop, delete peers/m4.pub
    old_aes = (pki / ".aes").read_text().strip()
    hapcfg(mh, "--remove-server", srv)
    assert srv not in mh.server_status(mh.PUBLISH_BACKEND)
    j.stop()
    (pki / "peers" / "m4.pub").unlink()
    for x in mh.masters:
        wait_for(lambda: peers_of(x).get("m4") in (None, "removed"), 15, f"{x.name} to drop m4")
    # the minions that were on m4 come back through the load balancer
    for x in mh.masters:
        wait_ping(x, everyone, pattern="gj*")

    # --- the deletion rotated the cluster AES key (once, issue 14 item 6; no drop file
    # needed) -> m4's key no longer decrypts publishes
    wait_for(lambda: (pki / ".aes").read_text().strip() != old_aes, 30, "the cluster AES key to rotate")
    new_aes = (pki / ".aes").read_text().strip()
    wait_ping(m1, everyone, pattern="gj*", timeout=120)  # minions re-authenticated
    sub = mh.mhost.popen([sys.executable, "-c", SUBSCRIBER, mh.lb_host.ip, "4505", old_aes, new_aes],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sub.stdout.readline().strip() == "connected"
        time.sleep(1)
        r = m1.salt("--async", "-G", "id:gj*", "test.ping")  # grain target: broadcast
        assert r.returncode == 0, r.stdout + r.stderr
        jid = re.search(r"\b(\d{20})\b", r.stdout).group(1)
        seen = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and seen is None:
            line = sub.stdout.readline()
            if not line:
                break
            out = json.loads(line)
            if isinstance(out["new"], dict) and out["new"].get("jid") == jid:
                seen = out
        assert seen is not None, f"the publish of {jid} was not seen on the wire; stderr: {sub.stderr.read()}"
        assert seen["new"]["fun"] == "test.ping"
        assert seen["old"] == "refused: AuthenticationError", seen
    finally:
        sub.kill()
        sub.wait(timeout=10)

    # --- the one-step removal: a fifth master joins, then `salt-run cluster.remove m5`
    # takes it out of HAProxy, tells the peers, deletes peers/m5.pub, rotates the AES key
    mnt5 = mh.gl.mount_client(mh.j5host)
    j5 = env.master("m5", host=mh.j5host, root_dir="/", cluster_id="gj", cluster_peers=[m3.host.ip],
                    cluster_secret=SECRET, **shared_opts(mnt5))
    j5.start()
    j5.wait_ready(timeout=60)
    srv5 = mh.j5host.ip
    wait_for(lambda: mh.server_status(mh.PUBLISH_BACKEND).get(srv5, {}).get("status") == "UP", 30,
             "HAProxy to mark m5 up")
    for x in mh.masters:
        wait_for(lambda: peers_of(x).get("m5") == "up", 30, f"{x.name} to link to m5")
    aes_before = (pki / ".aes").read_text().strip()
    r = m1.salt_run("cluster.remove", "m5", "--out", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out == {"removed": "m5", "aes_rotated": True, "load_balancer": "removed"}, out
    assert srv5 not in mh.server_status(mh.PUBLISH_BACKEND)
    assert srv5 not in mh.server_status(mh.REQUEST_BACKEND)
    assert not (pki / "peers" / "m5.pub").exists()
    assert (pki / ".aes").read_text().strip() != aes_before
    for x in mh.masters:
        wait_for(lambda: peers_of(x).get("m5") in (None, "removed"), 15, f"{x.name} to drop m5")
    j5.stop()
    wait_ping(m2, everyone, pattern="gj*", timeout=120)


def test_refusals_across_hosts(env, mh):
    """The refusals of issue 7 between hosts: a joiner in its own namespace (its own local
    cluster_pki_dir, the volume mounted for cachedir) asks m2 over the lab network. Each
    refusal is logged with its reason, the joiner does not start, and nothing is left in
    its cluster_pki_dir or in the share."""
    m1, m2, m3 = mh.masters
    pki = mh.gl.mounts["m1"] / "pki" / "cluster"
    fp = hashlib.sha256((pki / "cluster.pub").read_bytes()).hexdigest()
    mnt = mh.gl.mount_client(mh.jhost)
    peers_before = sorted(p.name for p in (pki / "peers").iterdir())

    def attempt(name, reason_on_m2=None, **opts):
        o = dict(cluster_id="gj", cluster_peers=[m2.host.ip], cluster_secret=SECRET,
                 cluster_pub_fingerprint=fp, cluster_pki_dir=str(env.root / name / "cpki"),
                 cachedir=str(mnt / "cache"))
        o.update(opts)
        other_id = o.pop("id", None)
        j = env.master(name, host=mh.jhost, root_dir="/", **o)
        if other_id:  # a peer id that would escape peers/
            j.opts["id"] = other_id
            j.write_config()
        j.start()
        wait_for(lambda: not j.proc.alive(), 30, f"{name} to give up")
        assert j.proc.p.returncode != 0, logs(j)
        if reason_on_m2:
            wait_for(lambda: re.search(r"cluster join from .* refused: " + re.escape(reason_on_m2), logs(m2)), 10,
                     f"m2 to log the refusal '{reason_on_m2}'")
        cpki = env.root / name / "cpki"
        left = [p for p in cpki.rglob("*") if p.is_file()] if cpki.exists() else []
        assert left == [], left
        assert sorted(p.name for p in (pki / "peers").iterdir()) == peers_before
        return logs(j)

    attempt("r1", "wrong cluster_secret", cluster_secret="not-the-secret")
    assert "empty or unset cluster_secret" in attempt("r2", "empty or unset cluster_secret", cluster_secret="")
    assert "the cluster key does not match cluster_pub_fingerprint" in attempt("r3", cluster_pub_fingerprint="00" * 32)
    attempt("r4", id="../evil")
    assert not list(pki.glob("evil*")) and not list((pki / "peers").glob("*evil*"))
    # the cluster still serves: every master links to every other (a link the load broke
    # meanwhile is given the reconnect time)
    for x in mh.masters:
        wait_for(lambda x=x: all(peers_of(x).get(o.name) == "up" for o in mh.masters if o is not x), 30,
                 f"{x.name} to link to every other master")
