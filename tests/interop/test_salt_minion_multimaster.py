"""Issue 5 (master side), test 7: Salt 3008.5's own salt-minion against two sylvite
masters, each master and the minion on its own host of a network-namespace lab
(tests/e2e/netlab.py), so both masters use Salt's default ports on their own address.

  a. hot multi-master (`master: [m1, m2]`, one shared master.pem): the key is accepted
     with salt-key on each master, both masters' jobs are answered, and after m1 is
     killed m2's jobs still are;
  b. failover (`master_type: failover`): SIGKILL of the primary -> the minion moves to
     the secondary and answers test.ping there;
  c. failover with per-master keys: each master its own master.pem, both sign it with a
     shared master_sign key (master_sign_pubkey), the minion verifies with
     master_sign.pub (verify_master_pubkey_sign) -> the same failover works.
Plus Salt's own clear ping (status.ping_master's request: the failback probe) answered
by a sylvite master.

What Salt 3008.5 does over tcp (salt/minion.py, salt/channel/client.py): the
`__master_alive` status.master job is only scheduled when transport != tcp, so
master_alive_interval plays no part; the tcp publish client fires
`__master_disconnected` from its stream-closed path, the failover handler then runs
eval_master(failed=True) and connects to the next master. A SIGKILLed master's kernel
closes its sockets (FIN/RST), so the minion notices at once.

Over ZeroMQ (Salt's default: `transport` left unset on the masters and the minion), (a)
and (b) run too (the `transport` parameter). A 3008.5 minion notices a lost master two
ways there, and both must work against sylvite masters:
  - zmq_monitor (default True for minions in 3008.5): libzmq's DISCONNECTED on the SUB
    socket fires `__master_disconnected` at once (a SIGKILLed master's FIN/RST);
  - `__master_alive_<ip>`, scheduled only when transport != tcp: status.master every
    master_alive_interval seconds looks for an established TCP connection to the
    master's publish_port in the minion host's socket table (the SUB socket's connection
    to the sylvite master's XPUB) and fires `__master_disconnected` when there is none.
The tests check the job runs for every master and never reports a live sylvite master
as gone, and (failover with zmq_monitor off) that the job alone moves the minion to the
secondary.
"""
import datetime
import json
import os
import time

import pytest

from conftest import SALT3008
from netlab import NetLab
from sylvite_harness import copy_key_pair, gen_key_pair, preaccept, share_master_key, wait_for

REAL_MINION = str(SALT3008 / "salt-minion")
REAL_PYTHON = str(SALT3008 / "python")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def lab():
    with NetLab() as lab:
        yield lab


def ping_ok(master, tgt, timeout_s=10) -> bool:
    return master.salt_json(tgt, "test.ping", "-t", str(timeout_s)).get(tgt) is True


def wait_ping(master, tgt, timeout=120, each=10):
    return wait_for(lambda: ping_ok(master, tgt, each), timeout, f"{tgt} to answer test.ping from {master.name}",
                    interval=1)


def log_time(line: str) -> float:
    """Epoch seconds of a Salt log line ("2026-11-21 15:18:04,926 [...")."""
    stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def first_line_after(log: str, needle: str, t0: float):
    for line in log.splitlines():
        if needle in line:
            try:
                if log_time(line) >= t0 - 0.5:
                    return line
            except ValueError:
                continue
    return None


def accept_pending(master, name, timeout=90):
    wait_for(lambda: name in master.keys().get("minions_pre", []), timeout, f"{name} pending on {master.name}")
    r = master.salt_key("-a", name, "-y")
    assert r.returncode == 0, r.stdout + r.stderr
    assert name in master.keys().get("minions", []), master.keys()


TRANSPORTS = ("tcp", "zeromq")


def use_transport(node, transport: str):
    """tcp: the harness default; zeromq: the option removed (Salt's default)."""
    if transport != "tcp":
        node.opts.pop("transport", None)
        node.write_config()
    return node


def real_minion(env, name, masters, host, transport="tcp", **opts):
    m = use_transport(env.minion(name, masters, host=host, **opts), transport)
    m.write_config(multiprocessing=False, log_level_logfile="debug", retry_dns=0)
    return m


def minion_log(minion) -> str:
    p = minion.root / "minion.log"
    return p.read_text(errors="replace") if p.exists() else ""


def two_masters(env, lab, transport="tcp", **opts):
    h1, h2, hm = lab.host("m1"), lab.host("m2"), lab.host("minion")
    m1 = use_transport(env.master("m1", host=h1, **opts), transport)
    m2 = use_transport(env.master("m2", host=h2, **opts), transport)
    return m1, m2, hm


def master_alive_runs(log: str, master_ip: str) -> int:
    """How often Salt's scheduler ran the ZeroMQ liveness job for master_ip."""
    return log.count(f"Running scheduled job: __master_alive_{master_ip}")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_hot_multimaster_shared_key(env, lab, transport):
    m1, m2, hm = two_masters(env, lab, transport)
    share_master_key(m1, m2)
    m1.start()
    m2.start()
    m1.wait_ready()
    m2.wait_ready()
    assert (m1.pki_dir / "master.pub").read_bytes() == (m2.pki_dir / "master.pub").read_bytes()
    minion = real_minion(env, "hot1", [m1, m2], hm, transport, master_alive_interval=5).start(binary=REAL_MINION)
    assert minion.opts["master"] == [m1.address, m2.address]
    accept_pending(m1, "hot1")
    accept_pending(m2, "hot1")
    wait_ping(m1, "hot1")
    wait_ping(m2, "hot1")
    assert m1.salt_json("hot1", "test.echo", "from-m1") == {"hot1": "from-m1"}
    assert m2.salt_json("hot1", "test.echo", "from-m2") == {"hot1": "from-m2"}
    if transport == "zeromq":
        # Salt's ZeroMQ liveness job runs for each master and finds both connected.
        wait_for(lambda: all(master_alive_runs(minion_log(minion), m.address) >= 2 for m in (m1, m2)), 30,
                 "__master_alive to run for both masters")
        assert "Connection to master" not in minion_log(minion), minion_log(minion)[-4000:]

    killed_at = time.time()
    m1.kill()
    t0 = time.monotonic()
    wait_ping(m2, "hot1", timeout=60)
    assert m2.salt_json("hot1", "test.echo", "after-m1-died") == {"hot1": "after-m1-died"}
    print(f"[{transport}] hot: m2 answered {time.monotonic() - t0:.1f}s after m1 was killed")
    if transport == "zeromq":
        # status.master finds no connection to m1's publish port: m1 declared lost; m2 not.
        lost = wait_for(lambda: first_line_after(minion_log(minion), f"Connection to master {m1.address} lost",
                                                 killed_at), 60, "the minion to notice m1 is gone")
        print(f"[{transport}] hot: m1 declared lost {log_time(lost) - killed_at:.1f}s after the kill")
        assert f"Connection to master {m2.address} lost" not in minion_log(minion)
        assert m2.salt_json("hot1", "test.echo", "still-m2") == {"hot1": "still-m2"}
    assert minion.proc.alive()


def failover(env, lab, minion_name, sign: bool, transport="tcp", **minion_opts):
    """Shared body of (b) and (c): m1 primary, m2 secondary, SIGKILL m1."""
    if sign:
        m1, m2, hm = two_masters(env, lab, transport, master_sign_pubkey=True)
        signing = env.root / "signing"
        gen_key_pair(signing, "master_sign")
        for m in (m1, m2):
            gen_key_pair(m.pki_dir, "master")           # per-master keys ...
            copy_key_pair(signing, m.pki_dir, "master_sign")  # ... one shared signing pair
        assert (m1.pki_dir / "master.pub").read_bytes() != (m2.pki_dir / "master.pub").read_bytes()
    else:
        m1, m2, hm = two_masters(env, lab, transport)
        share_master_key(m1, m2)
    m1.start()
    m2.start()
    m1.wait_ready()
    m2.wait_ready()
    extra = dict(master_type="failover", master_alive_interval=5, master_failback=False, **minion_opts)
    minion = real_minion(env, minion_name, [m1, m2], hm, transport, **extra)
    if sign:
        minion.write_config(verify_master_pubkey_sign=True)
        copy_key_pair(env.root / "signing", minion.root / "pki", "master_sign", private=False)
    preaccept([m2], minion.name, minion.root / "pki")  # the minion meets m2 only after the failover
    minion.start(binary=REAL_MINION)
    accept_pending(m1, minion_name)
    wait_ping(m1, minion_name)
    assert not ping_ok(m2, minion_name, 3), "a failover minion must talk to one master only"
    if transport == "zeromq":
        # Salt's ZeroMQ liveness job runs and finds the sylvite primary connected.
        wait_for(lambda: master_alive_runs(minion_log(minion), m1.address) >= 2, 30, "__master_alive to run")
        assert "Connection to master" not in minion_log(minion), minion_log(minion)[-4000:]
        assert not ping_ok(m2, minion_name, 3)
    if sign:
        log = minion_log(minion)
        assert "Successfully verified signature of master public key" in log or \
            "Received signed and verified master pubkey" in log, log[-3000:]

    killed_at = time.time()
    m1.kill()  # SIGKILL: the kernel closes m1's sockets
    t0 = time.monotonic()
    # Salt documents: on losing the master the minion tries the next one in the list.
    wait_ping(m2, minion_name, timeout=180, each=3)
    took = time.monotonic() - t0
    assert m2.salt_json(minion_name, "test.echo", "on-secondary") == {minion_name: "on-secondary"}
    log = minion_log(minion)
    assert "Connection to master" in log and "lost" in log, log[-4000:]
    assert "Trying to tune in to next master from master-list" in log, log[-4000:]
    if sign:
        # m2 sent a different master key than the cached one: accepted because signed
        assert (minion.root / "pki" / "minion_master.pub").read_text().strip() == \
            (m2.pki_dir / "master.pub").read_text().strip()
    print(f"[{transport}] failover ({'per-master keys' if sign else 'shared key'}): m2 answered {took:.1f}s after SIGKILL of m1")
    lost = first_line_after(log, "Connection to master", killed_at)
    ready = first_line_after(log, "Re-initialising subsystems for new master", killed_at)
    assert lost and ready, log[-4000:]
    print(f"  minion log: lost after {log_time(lost) - killed_at:.2f}s, "
          f"re-initialised on m2 after {log_time(ready) - killed_at:.2f}s")
    if transport == "zeromq":
        # The new master's liveness job was scheduled and keeps finding it connected.
        n = master_alive_runs(minion_log(minion), m2.address)
        wait_for(lambda: master_alive_runs(minion_log(minion), m2.address) >= n + 2, 30,
                 "__master_alive to run for m2")
        assert first_line_after(minion_log(minion), f"Connection to master {m2.address} lost", killed_at) is None
        assert m2.salt_json(minion_name, "test.echo", "still-on-m2") == {minion_name: "still-on-m2"}
    assert minion.proc.alive()
    return took


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_failover_shared_key(env, lab, transport):
    failover(env, lab, "fo1", sign=False, transport=transport)


def test_failover_zeromq_master_alive_job_alone(env, lab):
    """ZeroMQ with zmq_monitor off: no disconnect callback, so only Salt's __master_alive
    job (status.master, every master_alive_interval = 5 s) can notice that the sylvite
    primary is gone; it must, and the minion must fail over to the secondary."""
    took = failover(env, lab, "fo5", sign=False, transport="zeromq", zmq_monitor=False)
    log = minion_log(env.nodes[-1])
    assert "ZeroMQ event" not in log  # the monitor was off indeed
    lost = log[:log.index("Connection to master")]
    assert "Running scheduled job: __master_alive_" in lost[lost.rfind("Running scheduled job"):], log[-4000:]
    assert took < 5 + 60


def test_failover_per_master_keys_signed_by_master_sign(env, lab):
    failover(env, lab, "fo2", sign=True)


def test_failover_refuses_unsigned_changed_key(env, lab):
    """The control for (c): per-master keys without master_sign -> the minion refuses m2
    ("master key has changed") and never answers there."""
    m1, m2, hm = two_masters(env, lab)
    for m in (m1, m2):
        gen_key_pair(m.pki_dir, "master")
    m1.start()
    m2.start()
    m1.wait_ready()
    m2.wait_ready()
    minion = real_minion(env, "fo3", [m1, m2], hm, master_type="failover", master_alive_interval=5)
    preaccept([m2], minion.name, minion.root / "pki")
    minion.start(binary=REAL_MINION)
    accept_pending(m1, "fo3")
    wait_ping(m1, "fo3")
    m1.kill()
    wait_for(lambda: "master key has changed" in minion_log(minion).lower()
             or "master's public key" in minion_log(minion).lower(), 120,
             "the minion to refuse m2's different, unsigned key")
    assert not ping_ok(m2, "fo3", 5)


def test_salt_clear_ping_is_answered(env, lab):
    """Salt's ClearFuncs.ping as status.ping_master sends it (failback probe)."""
    hm = lab.host("m")
    hc = lab.host("client")
    m = env.master("m", host=hm).start().wait_ready()
    script = (
        "import json, sys\n"
        "import salt.config, salt.channel.client\n"
        "opts = salt.config.minion_config(None)\n"
        f"opts.update(master={m.address!r}, master_ip={m.address!r}, master_port={m.ret_port},\n"
        f"            master_uri='tcp://{m.address}:{m.ret_port}', transport='tcp', id='pinger',\n"
        f"            pki_dir={str(env.root / 'pinger')!r})\n"
        "with salt.channel.client.ReqChannel.factory(opts, crypt='clear') as ch:\n"
        "    ret = ch.send({'cmd': 'ping', 'probe': 42}, tries=1, timeout=10)\n"
        "print(json.dumps(ret))\n")
    r = hc.run([REAL_PYTHON, "-c", script], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    ret = json.loads(r.stdout.strip().splitlines()[-1])
    assert ret.get("cmd") == "ping" and ret.get("probe") == 42, ret
    assert "clear command ping" not in m.log_text() + (m.root / "master.log").read_text(errors="replace")


def test_failover_silent_primary_needs_tcp_keepalive(env, lab):
    """A primary that goes silent (iptables DROP: no FIN, no RST) is noticed by Salt's tcp
    minion only through TCP keep-alive on its publish socket (master_alive_interval is not
    used with tcp). With keep-alive tuned down (3 s idle, 1 s x 3 probes) the minion fails
    over within seconds; Salt's default idle of 300 s would take minutes."""
    m1, m2, hm = two_masters(env, lab)
    share_master_key(m1, m2)
    m1.start()
    m2.start()
    m1.wait_ready()
    m2.wait_ready()
    minion = real_minion(env, "fo4", [m1, m2], hm, master_type="failover", master_alive_interval=5,
                         tcp_keepalive=True, tcp_keepalive_idle=3, tcp_keepalive_intvl=1, tcp_keepalive_cnt=3,
                         auth_timeout=5, auth_tries=1)
    preaccept([m2], minion.name, minion.root / "pki")
    minion.start(binary=REAL_MINION)
    accept_pending(m1, "fo4")
    wait_ping(m1, "fo4")
    cut_at = time.time()
    m1.host.blackhole()
    wait_ping(m2, "fo4", timeout=120, each=3)
    took = time.time() - cut_at
    log = minion_log(minion)
    lost = first_line_after(log, "Connection to master", cut_at)
    assert lost, log[-4000:]
    print(f"silent primary: lost after {log_time(lost) - cut_at:.1f}s, m2 answered after {took:.1f}s")
    # keep-alive (3 + 3 x 1 s) bounds the detection; allow generous slack, not minutes
    assert log_time(lost) - cut_at < 60
