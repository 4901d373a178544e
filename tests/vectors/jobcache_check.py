#!/usr/bin/env python3
"""Cross-check a job cache directory written by sylvite's C++ job_cache (unit test
JobCache.PythonSaltReadsIt) with an independent implementation: Salt's own
salt.returners.local_cache when importable (real 3008 code reading our files), plus
plain Python msgpack for the exact on-disk structure.

usage: jobcache_check.py CACHEDIR JID     exit 0 if everything matches
"""
import hashlib
import os
import sys

import msgpack


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    cachedir, jid = sys.argv[1], sys.argv[2]
    h = hashlib.sha256(jid.encode()).hexdigest()
    jdir = os.path.join(cachedir, "jobs", h[:2], h[2:])
    if not os.path.isdir(jdir):
        fail(f"job dir {jdir} missing")
    with open(os.path.join(jdir, "jid"), "rb") as f:
        if f.read() != jid.encode():
            fail("jid file content")

    def load(path):
        with open(path, "rb") as f:
            # salt.payload.load: raw=False is what use_bin_type=True data decodes to
            return msgpack.unpackb(f.read(), raw=False, strict_map_key=False)

    l = load(os.path.join(jdir, ".load.p"))
    if l.get("fun") != "test.ping" or l.get("jid") != jid or l.get("arg") != ["a", 1]:
        fail(f"load {l!r}")
    if load(os.path.join(jdir, ".minions.p")) != ["m1", "m2", "m3"]:
        fail(".minions.p")
    r1 = load(os.path.join(jdir, "m1", "return.p"))
    if r1 != {"return": True, "retcode": 0, "success": True}:
        fail(f"m1 return.p {r1!r}")
    if list(r1) != ["return", "retcode", "success"]:
        fail("m1 key order")
    if load(os.path.join(jdir, "m1", "out.p")) != "nested":
        fail("m1 out.p")
    r2 = load(os.path.join(jdir, "m2", "return.p"))
    want = {"list": [1, -2, 3.5, None, "x"], "bytes": b"\x01\x02"}
    if r2 != {"return": want, "retcode": 2, "success": False}:
        fail(f"m2 return.p {r2!r}")

    try:
        import salt.returners.local_cache as lc
    except ImportError:
        print("salt not importable: msgpack checks only")
        return
    lc.__opts__ = {"cachedir": cachedir, "hash_type": "sha256", "job_cache_store_endtime": False}
    got = lc.get_load(jid)
    if got.get("Minions") != ["m1", "m2", "m3"] or got.get("fun") != "test.ping":
        fail(f"salt get_load {got!r}")
    rets = lc.get_jid(jid)
    if set(rets) != {"m1", "m2"}:
        fail(f"salt get_jid ids {sorted(rets)!r}")
    if rets["m1"] != {"return": True, "retcode": 0, "success": True, "out": "nested"}:
        fail(f"salt get_jid m1 {rets['m1']!r}")
    if rets["m2"]["return"]["bytes"] != b"\x01\x02" or rets["m2"]["retcode"] != 2:
        fail(f"salt get_jid m2 {rets['m2']!r}")
    jids = lc.get_jids()
    if jid not in jids or jids[jid]["Function"] != "test.ping":
        fail(f"salt get_jids {jids!r}")
    print("ok: salt local_cache reads the sylvite job cache")


if __name__ == "__main__":
    main()
