#!/usr/bin/env python3
"""Golden argument typing from Salt itself (salt.utils.args.yamlify_arg / parse_input).

    /tmp/saltvenv/3008/bin/python tests/unit/cli/gen_golden.py > tests/unit/cli/golden_args.json
"""
import json
import sys

import salt.utils.args as a

SINGLE = [
    "1", "-7", "+5", "0", "017", "0x1f", "0b101", "1_000", "12_34", "1:30", "3.14", "1.", ".5", "1e3",
    "1.5e+3", "-2.5", "true", "True", "yes", "no", "on", "OFF", "y", "n", "null", "~", "None", "none",
    "hello", "hello world", " padded ", "", "   ", "---", "...", "|", "!", "#", "# comment", "a#b",
    "a #b", "{a: 1}", "{a: 1, b: [1, 2]}", "[1, 2, three]", "[]", "{}", "a: 1", "- a", "-", "'quoted'",
    "\"double\"", "a,b", "x=y", "multi\nline", "tab\there", "2024-01-01", "12345678901234567890",
    "99999999999999999999999", "{a: yes, b: '1'}", "[1, [2, {c: d}]]", "foo: bar baz", "@at", "%pct",
    "`tick", "*alias", "&anchor x", "ls -l /tmp", "echo 'hi'", "C:\\path", "http://x.y/z?a=1",
    "1.2.3", "v1", "-1", "0o17", "1e+3", "1:30:00", "1:60", "0b1_0", ".5e+1", "1_0.5", "-0", "0x_1",
    "-017", "00", "0.", "1:30.5", "1e", "1.5E-2", "0b", "0x", "+", "1__2", "TRUE", "tRue",
]

INPUTS = [
    ["1", "true", "{a: 1}", "x=2"],
    ["ls -l", "cwd=/tmp", "runas=root"],
    ["a=b=c", "x==y", "1a=2", "_k=v", "k.v-w=1", "k=", "k= 1 "],
    ["name=multi\nline"],
    ["20240101000000000000", "123"],
    ["arg", "kw={a: [1, 2]}", "other=None", "t=yes"],
]


def main():
    out = {"yamlify": [], "parse_input": []}
    for s in SINGLE:
        out["yamlify"].append({"in": s, "out": a.yamlify_arg(s)})
    for inp in INPUTS:
        out["parse_input"].append({"in": inp, "out": a.parse_input(list(inp))})
        out["parse_input"].append({"in": inp, "no_parse": ["kw", "runas"],
                                   "out": a.parse_input(list(inp), no_parse=["kw", "runas"])})
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False, default=repr)
    sys.stdout.write("\n")


main()
