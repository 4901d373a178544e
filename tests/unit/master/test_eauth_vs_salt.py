#!/usr/bin/env python3
"""Differential test: sylvite's eauth (master/api/eauth*.cpp, through tests/eauth_probe)
against Salt 3008.5's own code on the same questions:

  - CkMinions.fill_auth_list, auth_check (with check_minions over a real pki_dir), the
    runner/wheel spec_check, salt.utils.master.get_values_of_matching_keys (publisher_acl),
    salt.acl.PublisherACL, salt.netapi.sum_permissions + sorted_permissions;
  - the file eauth backend (salt.loader.auth(opts)["file.auth"]) on text files in every
    hash type and field layout;
  - a lowstate chunk end to end: LoadAuth.get_auth_list + the master's check for the
    chunk's client (ClearFuncs.publish / runner / wheel) vs eauth_service::check;
  - tokens both ways: LoadAuth.mk_token -> eauth_service::get_token, and
    eauth_service::mint_token -> LoadAuth.get_tok, in one shared cachedir.

    test_eauth_vs_salt.py --probe build/tests/eauth_probe     (Salt's venv python)

Exit 0 when every answer agrees; otherwise prints each disagreement and exits 1.
"""

import argparse
import copy
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import salt.acl
import salt.auth
import salt.config
import salt.loader
import salt.netapi
import salt.runner
import salt.utils.args
import salt.utils.master
import salt.utils.minions

IDS = ["web1", "web2", "db1", "dev-web1", "web10"]

ACLS = [
    [".*"],
    ["test.*", "network.*"],
    [{"web*": ["test.*", "network.*"]}, "test.ping"],
    [
        {
            "*": [
                {"test.echo": {"args": ["hello.*"]}},
                {"cmd.run": [{"args": ["ls", None], "kwargs": {"cwd": "/tmp.*"}}]},
                {"pkg.install": {"kwargs": {"name": None}}},
            ]
        }
    ],
    ["@runner", "@wheel", "@jobs"],
    [
        {"@wheel": ["key.list.*"]},
        {"@key": ["finger"]},
        {"@runner": [{"jobs.lookup_jid": {"kwargs": {"jid": "2026.*"}}}]},
        {"@jobs": ["list_.*"]},
    ],
    [{"E@web[0-9]": ["disk.*"]}, {"L@db1,web1": ["grains.*"]}, {"web* and not web2": ["pkg.*"]}],
    ["", "test.ping"],
    [{"web*": ["test.*"], "db*": ["x"]}],
    [{"@runners": [".*"]}, "@wheels"],
    [{"*": ["state.apply", {"state.sls": {"args": ["web.*"]}}]}],
    [{"web1": [{"cmd.run": {"args": [None, "-l"]}}]}, {"db*": "test.ping"}],
    [{"web*": [{"test.arg": {"args": ["5", "True", "None"], "kwargs": {"x": "1.5"}}}]}],
    [],
]

FUNS = [
    "test.ping",
    "test.echo",
    "cmd.run",
    "pkg.install",
    "network.ip_addrs",
    "disk.usage",
    "grains.items",
    "saltutil.find_job",
    "state.sls",
    "test.arg",
    ["test.ping", "cmd.run"],
    ["cmd.run", "pkg.install"],
]

ARGS = [
    [],
    ["hello world"],
    ["bye"],
    ["ls", "-l", {"__kwarg__": True, "cwd": "/tmp/x"}],
    ["ls", "-l"],
    ["ls"],
    [{"__kwarg__": True, "name": "vim"}],
    ["web.nginx"],
    [5, True, None, {"__kwarg__": True, "x": 1.5}],
]

TARGETS = [
    ("*", "glob"),
    ("web*", "glob"),
    ("web1", "glob"),
    ("db1", "glob"),
    ("nomatch", "glob"),
    (["web1", "web2"], "list"),
    ("web1,db1", "list"),
    ("web[0-9]$", "pcre"),
    ("web* and not web2", "compound"),
    ("L@web1,web2 or db1", "compound"),
]

PROVIDER = {
    "thatch": [".*"],
    "steve": [".*", "@runner"],
    "admins%": ["@wheel", "@runner"],
    "ops%": [{"web*": ["pkg.*"]}],
    "*": ["test.ping"],
    "web*": ["disk.usage"],
    "a.*": ["grains.*"],
}


class Probe:
    def __init__(self, path):
        self.p = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("probe died on " + json.dumps(req))
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def salt_safe(fn, *a, **kw):
    """Salt raising inside the master is a refusal for the client."""
    try:
        return fn(*a, **kw)
    except Exception:  # pylint: disable=broad-except
        return "raised"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--seed", type=int, default=19)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    top = tempfile.mkdtemp(prefix="sylvite-eauth-diff-")
    failures = []
    counts = {}
    allowed = {}
    probe = Probe(args.probe)
    try:
        pki = os.path.join(top, "pki")
        os.makedirs(os.path.join(pki, "minions"))
        for m in IDS:
            open(os.path.join(pki, "minions", m), "w").close()
        cache = os.path.join(top, "cache")
        users = os.path.join(top, "users.txt")
        with open(users, "w") as f:
            f.write("dean:goneFishing\ngene:OceanMan\nthatch:pw\n")
        opts = salt.config.master_config(None)
        opts.update(
            {
                "pki_dir": pki,
                "cachedir": cache,
                "sock_dir": os.path.join(top, "sock"),
                "token_dir": os.path.join(cache, "tokens"),
                "minion_data_cache": True,
                "key_cache": "",
                "external_auth": {"file": {"^filename": users}},
            }
        )
        ck = salt.utils.minions.CkMinions(opts)

        def record(kind, req, ours, theirs):
            counts[kind] = counts.get(kind, 0) + 1
            if theirs is True or theirs == "allow":
                allowed[kind] = allowed.get(kind, 0) + 1
            if ours != theirs:
                failures.append((kind, req, ours, theirs))

        # ---- check_minions (the expander both sides use) -----------------------------
        for tgt, tt in TARGETS + [("web1", "compound"), ("E@db.*", "compound")]:
            theirs = sorted(ck.check_minions(tgt, tt)["minions"])
            ours = sorted(probe.ask({"op": "check_minions", "ids": IDS, "tgt": tgt, "tgt_type": tt}))
            record("check_minions", [tgt, tt], ours, theirs)

        # ---- fill_auth_list ------------------------------------------------------------
        for name, groups, perm in itertools.product(
            ["thatch", "steve", "mallory", "web1", "st.*", ".*", "admin", "a.b", "*"],
            [[], ["admins"], ["admins", "ops"], ["ops%"]],
            [False, True],
        ):
            theirs = ck.fill_auth_list(copy.deepcopy(PROVIDER), name, groups, permissive=perm)
            ours = probe.ask({"op": "fill", "provider": PROVIDER, "name": name, "groups": groups, "permissive": perm})
            record("fill_auth_list", [name, groups, perm], ours, theirs)

        # ---- login perms (salt-api /login) --------------------------------------------
        for name, groups in itertools.product(["thatch", "steve", "mallory"], [[], ["admins", "ops"]]):
            token = {"name": name, "groups": groups}
            theirs = salt.netapi.sorted_permissions(salt.netapi.sum_permissions(token, copy.deepcopy(PROVIDER)))
            ours = probe.ask({"op": "login_perms", "eauth": PROVIDER, "name": name, "groups": groups})
            record("login_perms", [name, groups], ours, theirs)

        # ---- auth_check (publish) ------------------------------------------------------
        cases = list(itertools.product(range(len(ACLS)), range(len(FUNS)), range(len(ARGS)), range(len(TARGETS))))
        rng.shuffle(cases)
        for ai, fi, gi, ti in cases[:5000]:  # of 15120, seeded sample (the full product passes too)
            acl, funs, a = ACLS[ai], FUNS[fi], ARGS[gi]
            tgt, tt = TARGETS[ti]
            if isinstance(funs, list):
                a = [a, []]
            minions = ck.check_minions(tgt, tt)["minions"]
            theirs = salt_safe(
                ck.auth_check, copy.deepcopy(acl), funs, copy.deepcopy(a), tgt, tt,
                minions=minions, whitelist=["saltutil.find_job"],
            )
            theirs = theirs is True
            ours = probe.ask(
                {"op": "auth_check", "ids": IDS, "auth_list": acl, "funs": funs, "args": a, "tgt": tgt,
                 "tgt_type": tt, "whitelist": ["saltutil.find_job"]}
            )
            record("auth_check", [acl, funs, a, tgt, tt], ours, theirs)

        # ---- spec_check (runner / wheel) -----------------------------------------------
        spec_funs = ["jobs.list_jobs", "jobs.lookup_jid", "manage.up", "key.list_all", "key.finger",
                     "key.delete", "keylist", "a.b.c"]
        spec_args = [{"arg": [], "kwarg": {}}, {"arg": [], "kwarg": {"jid": "20261127"}},
                     {"arg": ["x"], "kwarg": {"jid": "19"}}, {}, {"arg": None}]
        for acl, fun, sa, form in itertools.product(ACLS, spec_funs, spec_args, ["runner", "wheel"]):
            r = salt_safe(ck.spec_check, copy.deepcopy(acl), fun, copy.deepcopy(sa), form)
            theirs = "syntax" if isinstance(r, dict) else ("allow" if r is True else "deny")
            ours = probe.ask({"op": "spec", "auth_list": acl, "fun": fun, "args": sa, "form": form})
            record("spec_check", [acl, fun, sa, form], ours, theirs)

        # ---- publisher_acl / blacklist -------------------------------------------------
        pacl = {"fred": ["test.ping", "network.*"], "web.*": ["test.*"], "bob": [{"web*": ["pkg.*"]}], "a|b": ["x.*"]}
        for user in ["fred", "webadmin", "web", "bob", "mallory", "a", "b", "ab", "root"]:
            theirs = salt.utils.master.get_values_of_matching_keys(pacl, user)
            ours = probe.ask({"op": "publisher", "acl": pacl, "user": user})
            record("publisher_acl", [user], ours, theirs)
        blacklists = [
            {"users": ["root", "^.*_prod$"], "modules": ["cmd.*", "test.echo"]},
            {"users": "mallory", "modules": "cmd.run"},
            {},
            {"users": [], "modules": []},
        ]
        for bl, user, cmd in itertools.product(
            blacklists, ["root", "app_prod", "mallory", "fred"], ["cmd.run", "test.echo", "test.ping", ["test.ping", "cmd.run"]]
        ):
            p = salt.acl.PublisherACL(bl)
            theirs = [p.user_is_blacklisted(user), p.cmd_is_blacklisted(cmd)]
            ours = probe.ask({"op": "blacklist", "blacklist": bl, "user": user, "cmd": cmd})
            record("publisher_acl_blacklist", [bl, user, cmd], ours, theirs)

        # ---- file backend --------------------------------------------------------------
        import hashlib

        def h(kind, s):
            return getattr(hashlib, kind)(s.encode()).hexdigest()

        files = {
            "plain": ("dean:goneFishing\ngene:OceanMan\n", {}),
            "md5": ("46|trey|%s\n555|mike|%s\n" % (h("md5", "phish"), h("md5", "gordon")),
                    {"^hashtype": "md5", "^username_field": 2, "^password_field": "3", "^field_separator": "|"}),
            "sha256": ("ann:%s\n" % h("sha256", "pw1"), {"^hashtype": "sha256"}),
            "sha512": ("ann:%s\n" % h("sha512", "pw1"), {"^hashtype": "sha512"}),
            "sha1": ("ann:%s\n" % h("sha1", "pw1"), {"^hashtype": "sha1"}),
            "blank_first": ("\ndean:goneFishing\n", {}),
            "crlf": ("dean:goneFishing\r\ngene:OceanMan\r\n", {}),
            "multisep": ("dean::goneFishing\n", {"^field_separator": "::"}),
            "neg_field": ("x:dean:goneFishing\n", {"^username_field": 2, "^password_field": 0}),
            "unknown_type": ("dean:goneFishing\n", {"^filetype": "csv"}),
        }
        creds = [("dean", "goneFishing"), ("dean", "wrong"), ("gene", "OceanMan"), ("trey", "phish"),
                 ("mike", "phish"), ("ann", "pw1"), ("ann", "pw2"), ("nobody", "x"), ("dean", "")]
        for key, (content, extra) in files.items():
            path = os.path.join(top, "file_" + key)
            with open(path, "w", newline="") as f:
                f.write(content)
            conf = {"^filename": path, **extra}
            fopts = dict(opts)
            fopts["external_auth"] = {"file": conf}
            auth = salt.loader.auth(fopts)
            for user, pw in creds:
                theirs = salt_safe(auth["file.auth"], user, pw) is True
                ours = probe.ask({"op": "file_auth", "config": conf, "user": user, "password": pw})
                record("file_auth", [key, user, pw], ours, theirs)

        # ---- a lowstate chunk end to end -----------------------------------------------
        table = {
            "^filename": users,
            "dean": ["test.*", {"web*": ["pkg.*", {"cmd.run": {"args": ["ls.*"]}}]}, "@jobs", {"@wheel": ["key.list.*"]}],
            "gene": ["@runner", "@wheel"],
            "thatch": [{"@runner": [{"test.arg": {"args": ["a.*"], "kwargs": {"n": "5"}}}]}],
        }
        eopts = dict(opts)
        eopts["external_auth"] = {"file": table}
        la = salt.auth.LoadAuth(eopts, ck)
        runner = salt.runner.RunnerClient(eopts)
        chunks = [
            {"client": "local", "tgt": "*", "fun": "test.ping"},
            {"client": "local_async", "tgt": "web*", "fun": "pkg.install", "arg": ["vim"]},
            {"client": "local", "tgt": "*", "fun": "pkg.install"},
            {"client": "local", "tgt": ["web1", "web2"], "tgt_type": "list", "fun": "pkg.version"},
            {"client": "local", "tgt": "web1", "fun": "cmd.run", "arg": ["ls -l"]},
            {"client": "local", "tgt": "web1", "fun": "cmd.run", "arg": ["rm -rf /"]},
            {"client": "local", "tgt": "web1", "fun": "cmd.run", "kwarg": {"cmd": "ls"}},
            {"client": "local", "tgt": "db1", "fun": "saltutil.find_job", "arg": ["123"]},
            {"client": "runner", "fun": "jobs.list_jobs"},
            {"client": "runner", "fun": "manage.up"},
            {"client": "runner_async", "fun": "jobs.lookup_jid", "kwarg": {"jid": "123"}},
            {"client": "runner", "fun": "test.arg", "arg": ["abc", "n=5"]},
            {"client": "runner", "fun": "test.arg", "arg": ["xbc", "n=5"]},
            {"client": "runner", "fun": "test.arg", "arg": ["abc"], "kwarg": {"n": 5}},
            {"client": "runner", "fun": "test.arg", "arg": ["abc"], "n": "5"},
            {"client": "wheel", "fun": "key.list_all"},
            {"client": "wheel", "fun": "key.delete", "match": "web1"},
            {"client": "wheel_async", "fun": "key.accept", "match": "web1"},
        ]
        users_pw = [("dean", "goneFishing"), ("gene", "OceanMan"), ("thatch", "pw")]
        for (user, pw), chunk in itertools.product(users_pw, chunks):
            load = {"eauth": "file", "username": user, "password": pw}
            auth_list = la.get_auth_list(dict(load))
            cl = chunk["client"]
            if cl.startswith("local"):
                a = salt.utils.args.condition_input(chunk.get("arg", []), chunk.get("kwarg"))
                tt = chunk.get("tgt_type", "glob")
                minions = ck.check_minions(chunk["tgt"], tt)["minions"]
                r = salt_safe(ck.auth_check, auth_list, chunk["fun"], a, chunk["tgt"], tt,
                              minions=minions, whitelist=["saltutil.find_job"])
            elif cl.startswith("runner"):
                low = {k: v for k, v in chunk.items() if k != "client"}
                reformatted = runner._reformat_low(copy.deepcopy(low))
                r = salt_safe(ck.runner_check, auth_list, reformatted["fun"], reformatted.get("kwarg", {}))
            else:
                r = salt_safe(ck.wheel_check, auth_list, chunk["fun"], chunk.get("kwarg", {}))
            theirs = r is True
            ours = probe.ask({"op": "check", "cachedir": cache, "external_auth": {"file": table}, "ids": IDS,
                              "eauth": "file", "user": user, "password": pw, "chunk": chunk})
            record("check_chunk", [user, chunk], ours is True, theirs)

        # ---- tokens both ways ----------------------------------------------------------
        tok = la.mk_token({"eauth": "file", "username": "dean", "password": "goneFishing"})
        ours = probe.ask({"op": "get_token", "cachedir": cache, "external_auth": {"file": table}, "token": tok["token"]})
        record("token_salt_to_sylvite", tok["token"],
               ours and [ours["name"], ours["eauth"], round(ours["expire"], 3)],
               ["dean", "file", round(tok["expire"], 3)])
        mine = probe.ask({"op": "mint", "cachedir": cache, "external_auth": {"file": table}, "ids": IDS,
                          "eauth": "file", "user": "gene", "password": "OceanMan"})
        got = la.get_tok(mine) if mine else {}
        record("token_sylvite_to_salt", mine, [got.get("name"), got.get("eauth"), got.get("token")],
               ["gene", "file", mine])
        la.rm_token(mine)
        gone = probe.ask({"op": "get_token", "cachedir": cache, "external_auth": {"file": table}, "token": mine})
        record("token_removed_by_salt", mine, gone, None)
    finally:
        probe.close()
        shutil.rmtree(top, ignore_errors=True)

    for kind, req, ours, theirs in failures[:50]:
        print(f"DIFF {kind}: {json.dumps(req, default=str)}\n  sylvite: {ours}\n  salt:    {theirs}")
    # A matrix where Salt denies (or allows) everything would prove nothing.
    for kind in ("auth_check", "spec_check", "file_auth", "check_chunk"):
        if not 0 < allowed.get(kind, 0) < counts.get(kind, 0):
            failures.append((kind, "degenerate matrix", allowed.get(kind, 0), counts.get(kind, 0)))
            print(f"DEGENERATE {kind}: {allowed.get(kind, 0)} of {counts.get(kind, 0)} allowed")
    total = sum(counts.values())
    print(f"eauth vs salt: {total} cases ({', '.join(f'{k} {v}' for k, v in counts.items())}), "
          f"{len(failures)} disagreements; allowed by Salt: {allowed}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
