#!/usr/bin/env python3
"""Generate golden outputs for tests/unit/output from the real Salt outputters.

Run with the Salt venv (build/venv or /tmp/saltvenv/3008):
    /tmp/saltvenv/3008/bin/python tests/unit/output/gen_golden.py > tests/unit/output/golden.json
Each case: {"name", "outputter", "opts", "data", "expected"}; expected is what Salt's
display_output prints (printout.rstrip() + "\\n", or "" when empty).
"""
import json
import sys

import salt.output.json_out as json_out
import salt.output.nested as nested
import salt.output.no_return as no_return
import salt.output.raw as raw
import salt.output.txt as txt
import salt.output.yaml_out as yaml_out

DATA = {
    "ping": {"m1": True},
    "ping_many": {"web2": True, "web1": False, "db": None},
    "string": {"m1": "hello world"},
    "multiline": {"m1": "line one\nline two\r\nline three\n"},
    "empty_string": {"m1": ""},
    "empty_containers": {"m1": {"d": {}, "l": [], "s": ""}},
    "numbers": {"m1": {"i": 42, "neg": -7, "big": 18446744073709551615, "f1": 1.0, "f2": 0.1,
                       "f3": 1e16, "f4": 1.5e-05, "f5": 123.456, "f6": 1e15, "f7": 0.0001,
                       "f8": -2.5, "zero": 0}},
    "nested_doc": {"myminion": {"foo": {"bar": "baz", "dictionary": {"abc": 123, "def": 456},
                                        "list": ["Hello", "World"]}}},
    "list_of_maps": {"m1": [{"a": 1, "b": [1, 2]}, "x", [1, [2, 3]], {"z": {}}]},
    "list_top": ["a", 1, None, {"k": "v"}],
    "scalar_top": "just a string",
    "unicode": {"m1": {"name": "caf\u00e9 \u2603", "quote": "it's", "dq": "say \"hi\"",
                       "both": "it's \"x\"", "tab": "a\tb", "esc": "\u001b[31mred"}},
    "key_order": {"m1": {"zeta": 1, "alpha": 2, "Mid": 3, "_u": 4, "10": 5, "9": 6}},
    "grains_like": {"m1": {"os": "Debian", "osrelease": "12", "cpu_flags": ["fpu", "vme"],
                           "ip4_interfaces": {"lo": ["127.0.0.1"], "eth0": []},
                           "mem_total": 2048, "virtual": "physical"}},
    "two_minions": {"m2": {"retcode": 0, "stdout": "ok"}, "m1": "text"},
}

NO_RETURN = {
    "m9": "Minion did not return. [No response]\nThe minions may not have all finished running "
          "and any remaining minions will return upon completion. To look up the return data for "
          "this job later, run the following command:\n\nsalt-run jobs.lookup_jid 20240101000000000000",
}


def run(mod, data, opts, **kwargs):
    mod.__opts__ = opts
    out = mod.output(data, **kwargs)
    if out is None:
        return ""
    out = out.rstrip()
    return out + "\n" if out else ""


def main():
    cases = []
    for name, data in DATA.items():
        cases.append({"name": name, "outputter": "nested", "opts": {}, "data": data,
                      "expected": run(nested, data, {"color": False})})
        cases.append({"name": name + "_retcode", "outputter": "nested", "opts": {"retcode": 1},
                      "data": data, "expected": run(nested, data, {"color": False}, _retcode=1)})
        cases.append({"name": name, "outputter": "json", "opts": {}, "data": data,
                      "expected": run(json_out, data, {})})
        for ind in (2, 0, -1):
            cases.append({"name": f"{name}_indent{ind}", "outputter": "json",
                          "opts": {"indent": ind}, "data": data,
                          "expected": run(json_out, data, {"output_indent": ind})})
        cases.append({"name": name, "outputter": "txt", "opts": {}, "data": data,
                      "expected": run(txt, data, {})})
        cases.append({"name": name, "outputter": "raw", "opts": {}, "data": data,
                      "expected": run(raw, data, {})})
        cases.append({"name": name, "outputter": "yaml", "opts": {}, "data": data,
                      "expected": run(yaml_out, data, {})})
    for name in ("ping_many", "nested_doc", "list_of_maps"):
        data = DATA[name]
        cases.append({"name": name + "_color", "outputter": "nested", "opts": {"color": True},
                      "data": data, "expected": run(nested, data, {"color": True})})
        cases.append({"name": name + "_color_retcode", "outputter": "nested",
                      "opts": {"color": True, "retcode": 2}, "data": data,
                      "expected": run(nested, data, {"color": True}, _retcode=2)})
    cases.append({"name": "no_return", "outputter": "no_return", "opts": {}, "data": NO_RETURN,
                  "expected": run(no_return, NO_RETURN, {"color": False})})
    cases.append({"name": "no_return_color", "outputter": "no_return", "opts": {"color": True},
                  "data": NO_RETURN, "expected": run(no_return, NO_RETURN, {"color": True})})
    json.dump(cases, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
