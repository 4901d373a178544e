#!/usr/bin/env python3
"""Differential vectors for the highstate outputter: every (return, options) pair below is
printed by Salt 3008.5's own salt.output.display_output(ret, out="highstate", opts) (the
call the salt CLI makes for one minion's return, in the Salt venv this script runs in) and
by sylvite's output::display (tests/unit/output/highstate_probe.cpp), and the bytes must be
equal, colours on and off. Nothing is skipped: a missing probe or Salt fails the test.

Run: <venv>/bin/python test_highstate_vs_salt.py --probe build/tests/highstate_probe
"""
import argparse
import contextlib
import copy
import io
import itertools
import json
import logging
import random
import subprocess
import sys

import salt.config
import salt.output

logging.disable(logging.CRITICAL)

ESC = "\x1b"


def st(fun, sid, name, result, comment="", changes=None, run=0, dur=1.234, start="10:00:00.000001",
       sls="web", **extra):
    """One state return entry: (key, value) as salt.state builds it."""
    mod, func = fun.split(".")
    key = f"{mod}_|-{sid}_|-{name}_|-{func}"
    v = {"name": name, "changes": {} if changes is None else changes, "result": result, "comment": comment,
         "__sls__": sls, "__run_num__": run, "__id__": sid}
    if start is not None:
        v["start_time"] = start
    if dur is not None:
        v["duration"] = dur
    v.update(extra)
    return key, v


def states(*entries):
    return dict(entries)


DIFF = "--- \n+++ \n@@ -1,3 +1,3 @@\n line one\n-old value\n+new value\n line three\n"

BASIC = states(
    st("file.managed", "/etc/motd", "/etc/motd", True, "File /etc/motd updated", {"diff": DIFF, "mode": "0644"}, 0,
       12.5, "12:01:02.123456"),
    st("cmd.run", "say hi", "echo hi", True, 'Command "echo hi" run',
       {"pid": 1234, "retcode": 0, "stderr": "", "stdout": "hi"}, 1, 8.901),
    st("test.succeed_without_changes", "quiet", "quiet", True, "Success!", None, 2, 0.4),
    st("test.fail_without_changes", "broken", "broken", False, "Failure!", None, 3, 0.3),
    st("test.succeed_with_changes", "changer", "changer", True, "Success!",
       {"testing": {"old": "Unchanged", "new": "Something pretended to change"}}, 4, 0.512),
)

CASES = {
    "basic": {"m1": BASIC},
    "all_clean": {"m1": states(st("test.succeed_without_changes", "a", "a", True, "Success!", None, 0),
                               st("pkg.installed", "vim", "vim", True, "All specified packages are already installed", None, 1, 345.25))},
    "test_true": {"m1": states(
        st("file.managed", "/tmp/x", "/tmp/x", None, "The file /tmp/x is set to be changed\nNote: No changes made, actual changes may\nbe different due to other states.",
           {"newfile": "/tmp/x"}, 0),
        st("service.running", "nginx", "nginx", None, "Service nginx is set to start", {}, 1),
        st("test.succeed_without_changes", "ok", "ok", True, "Success!", None, 2))},
    "run_num_order": {"m1": states(
        st("test.nop", "third", "third", True, "3", None, 2),
        st("test.nop", "first", "first", True, "1", None, 0),
        st("test.nop", "second", "second", False, "2", None, 1),
        st("test.nop", "tie_a", "tie_a", True, "t", None, 5),
        st("test.nop", "tie_b", "tie_b", True, "t", None, 5))},
    "durations": {"m1": states(
        st("test.nop", "int_dur", "int_dur", True, "", None, 0, 700),
        st("test.nop", "str_dur", "str_dur", True, "", None, 1, "250.5 ms"),
        st("test.nop", "bad_dur", "bad_dur", True, "", None, 2, "fast"),
        st("test.nop", "plain_str", "plain_str", True, "", None, 3, "99.25"),
        st("test.nop", "no_dur", "no_dur", True, "", None, 4, None, None),
        st("test.nop", "par1", "par1", True, "", {"x": 1}, 5, 40.0, __parallel__=True),
        st("test.nop", "par2", "par2", True, "", None, 6, 80.25, __parallel__=True))},
    "int_durations_small": {"m1": states(st("test.nop", "a", "a", True, "c", None, 0, 3), st("test.nop", "b", "b", True, "c", None, 1, 4))},
    "comments": {"m1": states(
        st("cmd.run", "multi", "multi", False, "  line one\nline two\r\n\tline three  \n\n", None, 0),
        st("test.nop", "list_comment", "list_comment", True, ["a", "b"], {"x": 1}, 1),
        st("test.nop", "dict_comment", "dict_comment", False, {"k": "v", "n": 2}, None, 2),
        st("test.nop", "int_comment", "int_comment", False, 42, None, 3),
        st("test.nop", "none_comment", "none_comment", False, None, None, 4),
        st("test.nop", "unicode", "unicode", False, "caf\u00e9 \u2603 \u00a0trailing\u00a0", None, 5),
        st("test.nop", "braces", "braces", False, "format {0} {x} }{", None, 6))},
    "data_key": {"m1": states(
        st("test.nop", "dl", "dl", False, "with list", None, 0, data=["one", 2, None]),
        st("test.nop", "dd", "dd", False, "with dict", None, 1, data={"k": "v", "n": [1, 2]}),
        st("test.nop", "ds", "ds", False, "with str", None, 2, data="extra"))},
    "name_differs": {"m1": states(
        st("pkg.installed", "packages", "nginx", True, "installed", {"nginx": {"old": "", "new": "1.24"}}, 0),
        st("file.directory", "dirs", "/srv/a", False, "Failed", None, 1))},
    "nested_changes": {"m1": states(
        st("test.nop", "deep", "deep", True, "deep", {
            "a": {"b": {"c": [1, 2.5, {"d": None, "e": True}], "f": "multi\nline\nvalue"}},
            "list": [[1, 2], "x", {}], "empty": {}, "emptylist": [], "zero": 0, "neg": -3,
            "big": 12345678901234567890, "float": 1e16, "small": 1.5e-05,
            "esc": "bad" + ESC + "[31mred", ESC + "key": "v", "Upper": 1, "_u": 2, "10": 3, "9": 4}, 0))},
    "changes_not_dict": {"m1": states(
        st("test.nop", "strch", "strch", True, "", "just a string", 0),
        st("test.nop", "listch", "listch", True, "", ["a", "b"], 1),
        st("test.nop", "intch", "intch", True, "", 5, 2),
        st("test.nop", "falsy", "falsy", True, "", 0, 3))},
    "pchanges": {"m1": states(
        st("file.managed", "/etc/a", "/etc/a", None, "would change", {}, 0, pchanges={"diff": DIFF}))},
    "requisites": {"m1": states(
        st("cmd.run", "build", "make", False, "Command \"make\" run", {"retcode": 2, "stdout": "", "stderr": "make: *** No targets.  Stop.", "pid": 9}, 0),
        st("service.running", "app", "app", False, "One or more requisite failed: web.build", None, 1, 0, "10:00:01.000000"),
        st("file.managed", "conf", "/etc/app.conf", False, "One or more requisite failed: web.build", None, 2,
           __state_ran__=False))},
    "warnings": {"m1": states(
        st("test.nop", "warned", "warned", True, "ok", {"x": 1}, 0, warnings=[
            "The 'foo' argument is deprecated and will be removed in Salt 3009. Use 'bar' instead of it, long-winded explanation follows here.",
            "second-warning: a well-known re-entrant thing--with em--dashes and supercalifragilisticexpialidocious_supercalifragilisticexpialidocious_word_that_is_very_long"]),
        st("test.nop", "warned2", "warned2", False, "bad", None, 1, warnings=["short"]))},
    "warnings_string": {"m1": states(st("test.nop", "w", "w", True, "ok", {"x": 1}, 0, warnings="abc"))},
    "many_states": {"m1": states(*[
        st("test.nop", f"s{i:03d}", f"s{i:03d}", [True, False, None][i % 3] if i % 7 else True, f"c{i}",
           {"i": i} if i % 4 == 0 else None, i, round(1.1 * i + 0.37, 3))
        for i in range(120)])},
    "long_run": {"m1": states(st("cmd.run", "slow", "sleep 2", True, "done", {"retcode": 0}, 0, 2001.5),
                              st("cmd.run", "slow2", "sleep 1", True, "done", {"retcode": 0}, 1, 999.9))},
    "error_list": {"m1": ["Rendering SLS 'base:web' failed: Jinja variable 'foo' is undefined",
                          "No matching sls found for 'nope' in env 'base'", "esc " + ESC + "[0m here",
                          {"not": "a string"}]},
    "error_list_empty": {"m1": []},
    "string_return": {"m1": "The function \"state.apply\" is running as PID 4242 and was started at 2026, Nov 27 10:00:00.000000 with jid 20261127100000000000\nsecond line"},
    "int_return": {"m1": 7},
    "bool_return": {"m1": True},
    "none_return": {"m1": None},
    "float_return": {"m1": 1.5},
    "empty_dict": {"m1": {}},
    "non_state_flat": {"m1": {"os": "Debian", "num_cpus": 2, "ipv4": ["127.0.0.1"]}},
    "non_state_nested": {"m1": {"role": {"name": "web", "ports": [80, 443]},
                                "big": {f"key{i}": {"value": "x" * 20, "n": i} for i in range(6)},
                                "longstr": {"s": "word " * 40 + "\nsecond line " * 3}}},
    "missing_run_num": {"m1": {"test_|-a_|-a_|-nop": {"result": True, "changes": {}, "comment": "c", "name": "a"},
                               "test_|-b_|-b_|-nop": {"result": False, "changes": {}, "comment": "d", "name": "b",
                                                      "__run_num__": 0}}},
    "many_minions": {"web1": BASIC, "web2": states(st("test.nop", "x", "x", True, "fine", None, 0)),
                     "db1": ["error one"], "db2": "text reply"},
    "esc_host": {"bad" + ESC + "[31mhost": states(st("test.nop", "x", "x", False, "c" + ESC + "[1m", None, 0))},
    "unicode_host": {"h\u00f4te-\u2603": states(st("test.nop", "id\u00e9", "nom\u00e9", True, "\u00e9", {"\u00e9": "\u00e8"}, 0))},
    "result_types": {"m1": states(
        st("test.nop", "one", "one", 1, "int one", None, 0),
        st("test.nop", "zero", "zero", 0, "int zero", None, 1),
        st("test.nop", "strres", "strres", "maybe", "string result", {"a": 1}, 2),
        st("test.nop", "emptystr", "emptystr", "", "empty string result", None, 3))},
    "nested_highstate_changes": {"m1": states(
        st("salt.state", "deploy", "deploy", False, "Run failed on minions: sub1", {
            "out": "highstate", "ret": {"sub1": BASIC, "sub2": states(st("test.nop", "y", "y", True, "ok", {"z": 1}, 0))}}, 0))},
    "orchestrate": {"master_master": states(
        st("salt.state", "state.sls", "state.sls", True, "States ran successfully.", {
            "sub1": BASIC}, 0),
        st("salt.function", "state.orch", "state.orch", True, "Function ran successfully.", "a string change", 1)),
        "retcode": 0},
    "orch_envelope": {"return": {"m1": BASIC}},
    "data_envelope": {"data": {"m1": BASIC}},
    "lookup_jid_envelope": {"m1": {"jid": "20261127100000000000", "fun": "state.apply", "return": {"data": {"m9": BASIC}}}},
    "compress": {"m1": states(
        st("cmd.run", "mix", "true", True, "ran", {"retcode": 0}, 0, 1.5, "10:00:00.000002"),
        st("cmd.run", "mix", "false", False, "ran", {"retcode": 1}, 1, 2.25, "10:00:00.000001"),
        st("cmd.run", "mix", "/bin/true", True, "ran", {"retcode": 0}, 2, 3.125, "10:00:00.000000"),
        st("cmd.run", "mix", "/bin/false", False, "ran", {"retcode": 1}, 3, 4, "10:00:00.000003"),
        st("file.absent", "gone", "/a", True, "removed", None, 4, 1),
        st("file.absent", "gone", "/b", True, "removed", None, 5, 2))},
    # Where highstate.py raises (KeyError, TypeError), try_printout prints nested.
    "fallback_missing_changes": {"m1": {"test_|-a_|-a_|-nop": {"result": True, "comment": "c", "__run_num__": 0}}},
    "fallback_unhashable_result": {"m1": states(st("test.nop", "a", "a", [True], "c", None, 0))},
    "fallback_none_duration": {"m1": {"test_|-a_|-a_|-nop": {"result": True, "changes": {}, "comment": "c",
                                                             "__run_num__": 0, "duration": None, "name": "a"}}},
    "fallback_missing_comment_full": {"m1": {"test_|-a_|-a_|-nop": {"result": False, "changes": {}, "__run_num__": 0, "name": "a"}}},
    "fallback_top_list": [1, 2],
    "filter_kwargs": {"m1": BASIC},
}


def random_cases(rng, count):
    """Random state returns: words with hyphens, em-dashes, tabs and unicode; changes of
    every shape; results of every kind; warnings long enough to wrap."""
    words = ["alpha", "be-ta", "long-winded", "x--y", "a-b-c", "\u00e9t\u00e9", "tab\there", "  ", "\n", "{}",
             "word" * 6, "re-entrant-thing", "-lead", "trail-", "12-34", "ok.", "--", "\u2603-snow", "A_B-c"]

    def text(n, pool=words):
        return " ".join(rng.choice(pool) for _ in range(n))

    # Braces in a warning make Salt's terse format string raise ValueError (the salt CLI
    # crashes; sylvite prints nested): not a vector.
    warn_words = [w for w in words if "{" not in w]

    def change(depth=0):
        kind = rng.randrange(6 if depth < 2 else 4)
        if kind == 0:
            return text(rng.randrange(1, 6))
        if kind == 1:
            return rng.choice([0, 1, -5, 2.5, None, True, False, 2 ** 64 - 1])
        if kind == 2:
            return DIFF
        if kind == 3:
            return ""
        if kind == 4:
            return [change(depth + 1) for _ in range(rng.randrange(3))]
        return {text(1).strip() or "k": change(depth + 1) for _ in range(rng.randrange(4))}

    out = {}
    for c in range(count):
        hosts = {}
        for h in range(rng.randrange(1, 3)):
            entries = []
            for i in range(rng.randrange(0, 8)):
                fun = rng.choice(["file.managed", "cmd.run", "test.nop", "pkg.installed"])
                sid = rng.choice(["id-" + str(i), "same", "x" * rng.randrange(1, 30)])
                name = sid if rng.random() < 0.6 else text(2)
                extra = {}
                if rng.random() < 0.2:
                    extra["warnings"] = [text(rng.randrange(1, 30), warn_words) for _ in range(rng.randrange(1, 3))]
                if rng.random() < 0.1:
                    extra["__parallel__"] = True
                ch = change() if rng.random() < 0.5 else {}
                entries.append(st(fun, sid, name, rng.choice([True, True, False, None]), text(rng.randrange(0, 25)),
                                  ch, rng.randrange(10), rng.choice([0, 1.5, 12.345, 1000.25, 3, "7 ms"]),
                                  rng.choice([None, "10:00:00.%06d" % i]), **extra))
            hosts[f"minion{c}-{h}"] = states(*entries)
        out[f"random{c}"] = hosts
    return out


CASES.update(random_cases(random.Random(1818), 40))

# Per-case extra options always applied (and combined with the matrix).
CASE_OPTS = {
    "compress": [{"state_compress_ids": True}],
    "filter_kwargs": [{"state_output": "filter", "arg": ["web", {"__kwarg__": True, "exclude": "True,", "terse": "False"}]},
                      {"state_output": "filter", "state_output_exclude": ["None"], "state_output_terse": "True,False"},
                      {"state_output": "filter_id", "state_output_terse": ["True"]},
                      {"state_output": "filter", "arg": [{"__kwarg__": True, "exclude": ["True"]}]}],
}

MODES = ["full", "terse", "mixed", "changes", "full_id", "terse_id", "mixed_id", "changes_id", "Terse"]


def option_sets(name, rng):
    sets = []
    if name.startswith("random"):
        for _ in range(8):
            sets.append({"state_output": rng.choice(MODES), "state_verbose": rng.random() < 0.6,
                         "color": rng.random() < 0.5, "state_output_diff": rng.random() < 0.2,
                         "state_output_profile": rng.random() < 0.7, "state_output_pct": rng.random() < 0.4,
                         "state_tabular": rng.random() < 0.3, "state_compress_ids": rng.random() < 0.3})
        return sets
    for mode, verbose, color in itertools.product(MODES, (True, False), (False, True)):
        o = {"state_output": mode, "state_verbose": verbose, "color": color}
        # one random draw of the other knobs per combination
        o.update({
            "state_output_diff": rng.random() < 0.2,
            "state_output_profile": rng.random() < 0.7,
            "state_output_pct": rng.random() < 0.4,
            "state_tabular": rng.random() < 0.3,
            "state_compress_ids": rng.random() < 0.2,
        })
        sets.append(o)
    for extra in CASE_OPTS.get(name, []):
        for color in (False, True):
            for profile in (False, True):
                o = {"color": color, "state_output_profile": profile}
                o.update(extra)
                sets.append(o)
    return sets


def salt_print(data, o, base):
    opts = copy.deepcopy(base)
    opts["color"] = o.get("color", False)
    for k in ("state_output", "state_verbose", "state_output_diff", "state_output_profile", "state_output_pct",
              "state_tabular", "state_compress_ids", "state_output_exclude", "state_output_terse", "arg"):
        if k in o:
            opts[k] = o[k]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        salt.output.display_output(copy.deepcopy(data), out="highstate", opts=opts, _retcode=o.get("retcode", 0))
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    base = copy.deepcopy(salt.config.DEFAULT_MASTER_OPTS)
    base.pop("output", None)
    rng = random.Random(18)
    vectors = []
    for name, data in CASES.items():
        for o in option_sets(name, rng):
            for rc in ((0, 2) if name.startswith("fallback") else (0,)):
                oo = dict(o, retcode=rc)
                vectors.append((name, oo, data))
    lines = "".join(json.dumps({"out": "highstate", "data": d, "opts": o}) + "\n" for _, o, d in vectors)
    proc = subprocess.run([args.probe], input=lines.encode(), stdout=subprocess.PIPE, check=True)
    got = []
    buf = proc.stdout
    pos = 0
    while pos < len(buf):
        nl = buf.index(b"\n", pos)
        n = int(buf[pos:nl])
        got.append(buf[nl + 1:nl + 1 + n].decode())
        pos = nl + 1 + n
    if len(got) != len(vectors):
        print(f"probe answered {len(got)} of {len(vectors)} vectors")
        return 1
    failures = 0
    for (name, o, data), mine in zip(vectors, got):
        want = salt_print(json.loads(json.dumps(data)), o, base)
        if want != mine:
            failures += 1
            if failures <= 5:
                print(f"MISMATCH {name} {json.dumps(o)}\n--- salt\n{want!r}\n--- sylvite\n{mine!r}\n")
                if args.v:
                    import difflib
                    for l in difflib.unified_diff(want.splitlines(), mine.splitlines(), lineterm=""):
                        print(repr(l))
    print(f"highstate_vs_salt: {len(vectors)} vectors ({len(CASES)} returns), {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
