#!/usr/bin/env python3
"""Generate salt_vectors.json: minion-side match results computed by real Salt's matchers
(salt.matchers.*, Salt 3008). Run with the Salt venv python:
    /tmp/saltvenv/3008/bin/python tests/unit/match/gen_salt_vectors.py > tests/unit/match/salt_vectors.json
"""
import json
import sys

from salt.matchers import (compound_match, glob_match, grain_match, grain_pcre_match, ipcidr_match,
                           list_match, nodegroup_match, pcre_match, pillar_match, pillar_pcre_match)
from salt.utils.context import func_globals_inject

MATCHERS = {
    "glob_match.match": glob_match.match,
    "pcre_match.match": pcre_match.match,
    "list_match.match": list_match.match,
    "grain_match.match": grain_match.match,
    "grain_pcre_match.match": grain_pcre_match.match,
    "pillar_match.match": pillar_match.match,
    "pillar_pcre_match.match": pillar_pcre_match.match,
    "ipcidr_match.match": ipcidr_match.match,
}

GRAINS = {
    "os": "Debian", "os_family": "Debian", "osrelease": "12", "num_cpus": 4, "virtual": "kvm",
    "roles": ["web", "db"], "ipv4": ["10.1.2.3", "127.0.0.1"], "ipv6": ["::1", "fe80::1"],
    "locale_info": {"defaultlanguage": "en_US", "timezone": "UTC"}, "selinux": {"enabled": False},
    "gpus": [{"model": "Tesla", "vendor": "nvidia"}], "biosversion": None, "mem_total": 1.5,
    "ssds": [], "empty": {}, "path": "a:b", "Upper": "MiXeD",
}
PILLAR = {"role": "web", "env": {"name": "prod", "tier": 1}, "apps": ["nginx", "redis"], "flag": True}
NODEGROUPS = {
    "webs": "web* or G@roles:web", "pair": "minion1,minion2", "plain": ["minion1", "other"],
    "regexy": "min.*1", "nested": "N@webs and not L@bad", "loop": "N@loop", "db": "G@roles:db",
}

CASES = [
    # (tgt_type, tgt, id)
    ("glob", "*", "minion1"), ("glob", "minion?", "minion1"), ("glob", "minion[0-9]", "minion1"),
    ("glob", "minion[!1]", "minion1"), ("glob", "minion[!2]", "minion1"), ("glob", "MINION1", "minion1"),
    ("glob", "min*1", "minion1"), ("glob", "minion", "minion1"), ("glob", "[m]inion1", "minion1"),
    ("glob", "[", "["), ("glob", "a[", "a["), ("glob", "[]]", "]"), ("glob", "[!]]", "a"), ("glob", "[!]]", "]"),
    ("glob", "[z-a]", "m"), ("glob", "[a-]", "-"), ("glob", "[-a]", "-"), ("glob", "web*.example.com", "web1.example.com"),
    ("glob", "*.com", "web1.example.com"), ("glob", "web1", "web1.example.com"), ("glob", "?", ""), ("glob", "", ""),
    ("glob", "*", "é"), ("glob", "?", "é"), ("glob", "[é]", "é"), ("glob", "a\\*", "a\\b"), ("glob", "[\\]", "\\"),
    ("glob", "**a", "xa"), ("glob", "*a*b*", "xaybz"), ("glob", "*a*b", "xaybz"), ("glob", "[^a]", "^"),
    ("glob", "[^a]", "b"), ("glob", "[a-c-e]", "d"), ("glob", "[a-c-e]", "-"),
    ("pcre", "min.*", "minion1"), ("pcre", "inion", "minion1"), ("pcre", ".*1$", "minion1"), ("pcre", "minion1$", "minion1x"),
    ("pcre", "(web|db)\\d+", "db12"), ("pcre", "[", "minion1"), ("pcre", "(?P<x>min)ion", "minion1"), ("pcre", "MIN", "minion1"),
    ("pcre", "\\Aminion1\\Z", "minion1"),
    ("list", "minion1,minion2", "minion1"), ("list", "minion2,minion1", "minion1"), ("list", "a,minion1,b", "minion1"),
    ("list", "minion1", "minion1"), ("list", "minion", "minion1"), ("list", "minion10,minion2", "minion1"),
    ("list", ["minion1", "x"], "minion1"), ("list", ["minion10"], "minion1"), ("list", "a, minion1", "minion1"),
    ("grain", "os:Debian", "m"), ("grain", "os:debian", "m"), ("grain", "os:Deb*", "m"), ("grain", "os:RedHat", "m"),
    ("grain", "os", "m"), ("grain", "roles:web", "m"), ("grain", "roles:w*", "m"), ("grain", "roles:mail", "m"),
    ("grain", "num_cpus:4", "m"), ("grain", "num_cpus:[0-9]", "m"), ("grain", "locale_info:timezone:UTC", "m"),
    ("grain", "locale_info:timezone", "m"), ("grain", "locale_info:time*", "m"), ("grain", "locale_info:*", "m"),
    ("grain", "locale_info:nope", "m"), ("grain", "selinux:enabled:False", "m"), ("grain", "selinux:enabled:false", "m"),
    ("grain", "gpus:vendor:nvidia", "m"), ("grain", "gpus:model:tes*", "m"), ("grain", "gpus:0:vendor:nvidia", "m"),
    ("grain", "biosversion:None", "m"), ("grain", "mem_total:1.5", "m"), ("grain", "ssds:*", "m"), ("grain", "empty:*", "m"),
    ("grain", "path:a:b", "m"), ("grain", "Upper:mixed", "m"), ("grain", "upper:mixed", "m"), ("grain", "*:Debian", "m"),
    ("grain", "*:kvm", "m"), ("grain", "roles:1:db", "m"), ("grain", "roles:-1:db", "m"), ("grain", "ipv4:10.1.*", "m"),
    ("grain", "locale_info:*:UTC", "m"), ("grain", "locale_info:*:utc", "m"), ("grain", "nope:x", "m"),
    ("grain_pcre", "os:Deb.*", "m"), ("grain_pcre", "os:deb", "m"), ("grain_pcre", "os:ian", "m"), ("grain_pcre", "os:(", "m"),
    ("grain_pcre", "roles:d.", "m"), ("grain_pcre", "num_cpus:\\d", "m"), ("grain_pcre", "locale_info:tz.*", "m"),
    ("pillar", "role:web", "m"), ("pillar", "env:name:prod", "m"), ("pillar", "env:tier:1", "m"), ("pillar", "apps:red*", "m"),
    ("pillar", "flag:true", "m"), ("pillar", "env:name", "m"), ("pillar", "env:prod", "m"), ("pillar", "missing:x", "m"),
    ("pillar_pcre", "role:w.b", "m"), ("pillar_pcre", "apps:ngi", "m"),
    ("ipcidr", "10.1.2.3", "m"), ("ipcidr", "10.1.2.4", "m"), ("ipcidr", "10.1.0.0/16", "m"), ("ipcidr", "10.2.0.0/16", "m"),
    ("ipcidr", "10.1.2.3/16", "m"), ("ipcidr", "127.0.0.0/8", "m"), ("ipcidr", "bogus", "m"), ("ipcidr", "fe80::/10", "m"),
    ("ipcidr", "::1", "m"), ("ipcidr", "2001:db8::/32", "m"), ("ipcidr", "10.1.2.3/32", "m"), ("ipcidr", "0.0.0.0/0", "m"),
    ("compound", "minion1", "minion1"), ("compound", "minion2", "minion1"), ("compound", "G@os:Debian and minion*", "minion1"),
    ("compound", "G@os:Debian and not minion*", "minion1"), ("compound", "G@os:RedHat or minion1", "minion1"),
    ("compound", "not G@os:RedHat", "minion1"), ("compound", "minion1 not G@os:Debian", "minion1"),
    ("compound", "minion1 not G@os:RedHat", "minion1"),
    ("compound", "G@os:RedHat and x or minion1", "minion1"), ("compound", "minion1 or G@os:RedHat and x", "minion1"),
    ("compound", "not minion1 or minion1", "minion1"), ("compound", "not ( minion1 or x )", "minion1"),
    ("compound", "not minion1 and x", "minion1"), ("compound", "( minion1 or x ) and not y", "minion1"),
    ("compound", "( x or y ) and minion1", "minion1"), ("compound", "x or y and minion1", "minion1"),
    ("compound", "minion1 and ( x or ( y or minion1 ) )", "minion1"), ("compound", "not not minion1", "minion1"),
    ("compound", "and minion1", "minion1"), ("compound", "minion1 and", "minion1"), ("compound", "minion1 minion1", "minion1"),
    ("compound", "( minion1", "minion1"), ("compound", "minion1 )", "minion1"), ("compound", "( and minion1 )", "minion1"),
    ("compound", "( )", "minion1"), ("compound", "( ) or minion1", "minion1"), ("compound", "", "minion1"),
    ("compound", "(minion1)", "minion1"), ("compound", "L@a,minion1,b", "minion1"), ("compound", "L@a,b", "minion1"),
    ("compound", "E@min.*", "minion1"), ("compound", "E@[", "minion1"), ("compound", "E@[ or minion1", "minion1"),
    ("compound", "P@os:Deb.*", "minion1"), ("compound", "I@role:web", "minion1"), ("compound", "J@role:w.b", "minion1"),
    ("compound", "S@10.1.0.0/16", "minion1"), ("compound", "S@bogus or minion1", "minion1"), ("compound", "not S@bogus", "minion1"),
    ("compound", "G;@locale_info;timezone;UTC", "minion1"), ("compound", "G@locale_info;timezone;UTC", "minion1"),
    ("compound", "R@%cluster", "minion1"), ("compound", "R@%cluster or minion1", "minion1"),
    ("compound", "N@webs", "web1"), ("compound", "N@webs", "db1"), ("compound", "N@db", "x"),
    ("compound", "X@foo", "X@foo"), ("compound", "L@", "L@"),
    ("compound", ["G@os:Debian", "and", "minion1"], "minion1"), ("compound", ["minion1", "and", "G@os:RedHat"], "minion1"),
    ("compound", "G@roles:web and G@roles:db and not G@roles:mail", "minion1"),
    ("compound", "true", "minion1"), ("compound", "True", "True"),
]

NODEGROUP_CASES = [
    ("webs", "web1"), ("webs", "db1"), ("webs", "x"), ("pair", "minion1"), ("pair", "minion3"), ("plain", "minion1"),
    ("plain", "minion2"), ("regexy", "minion1"), ("regexy", "minion2"), ("nested", "web1"), ("nested", "bad"),
    ("nested", "db9"), ("loop", "loop"), ("unknown", "x"), ("db", "x"),
]


def run(tgt_type, tgt, mid, grains, pillar, nodegroups):
    opts = {"id": mid, "grains": grains, "pillar": pillar, "nodegroups": nodegroups}
    ctx = {"matchers": dict(MATCHERS)}
    ctx["matchers"]["compound_match.match"] = lambda t, opts=opts, minion_id=mid: compound_match.match(
        t, opts=opts, minion_id=minion_id)
    try:
        with func_globals_inject(compound_match.match, __opts__=opts, __context__=ctx), \
                func_globals_inject(nodegroup_match.match, __opts__=opts, __context__=ctx):
            if tgt_type == "compound":
                r = compound_match.match(tgt, opts=opts, minion_id=mid)
            elif tgt_type == "nodegroup":
                r = nodegroup_match.match(tgt, nodegroups=nodegroups, opts=opts, minion_id=mid)
            elif tgt_type in ("grain", "grain_pcre", "pillar", "pillar_pcre"):
                r = MATCHERS[tgt_type + "_match.match"](tgt, opts=opts, minion_id=mid)
            else:
                r = MATCHERS[tgt_type + "_match.match"](tgt, opts=opts, minion_id=mid)
    except Exception:  # pylint: disable=broad-except
        r = False
    return bool(r)


def main():
    import logging
    logging.disable(logging.CRITICAL)
    out = {"grains": GRAINS, "pillar": PILLAR, "nodegroups": {k: (v if isinstance(v, str) else " ".join(v))
                                                               for k, v in NODEGROUPS.items()}, "cases": []}
    for tgt_type, tgt, mid in CASES:
        out["cases"].append({"tgt_type": tgt_type, "tgt": tgt, "id": mid,
                             "match": run(tgt_type, tgt, mid, GRAINS, PILLAR, NODEGROUPS)})
    for group, mid in NODEGROUP_CASES:
        out["cases"].append({"tgt_type": "nodegroup", "tgt": group, "id": mid,
                             "match": run("nodegroup", group, mid, GRAINS, PILLAR, NODEGROUPS)})
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
