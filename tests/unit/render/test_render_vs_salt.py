#!/usr/bin/python3
"""Differential vectors for the render engine: every case of the corpus below is rendered by
sylvite-render (framed JSON over its stdin/stdout) and by Salt 3008.5's own
salt.template.compile_template (salt_render_helper.py in the Salt venv), and the results
must be equal: the same data (key order included), or the same error text (for Salt's
"Jinja error:" class, whose text carries a Python traceback, the first line). Nothing is
skipped: a missing worker, Salt venv or gpg fails the test."""
import argparse
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def files(root, root2):
    """The trees: root is the first pillar root, root2 the second (lookup order)."""
    return {
        root: {
            "map.jinja": '{% set m = {"v": grains["os"] ~ "!", "tpl": tpldir} %}\n{% macro hello(n) %}hi {{ n }}{% endmacro %}\n',
            "defaults.yaml": "p: 1\nq: [a, b]\nr:\n  s: yes\n",
            "defaults.json": '{"j": [1, 2, {"k": null}], "l": true}\n',
            "notes.txt": "line one\nline two\n",
            "both.jinja": "{% set where = 'first root' %}\n",
            "bad_inner.jinja": "x: 1\n{{ undefined_in_include }}\n",
            "bad_macro.jinja": "{% macro boom() %}\n{{ still.undefined }}\n{% endmacro %}\n",
            "apps/web/init.sls": '{% from "./vars.jinja" import port with context %}\n{% import_yaml "../common.yaml" as c %}\nweb:\n  port: {{ port }}\n  common: {{ c.name }}\n  slspath: {{ slspath }}\n  tpldir: {{ tpldir }}\n  tplfile: {{ tplfile }}\n  sls_path: {{ sls_path }}\n  slsdotpath: {{ slsdotpath }}\n  slscolonpath: {{ slscolonpath }}\n',
            "apps/web/vars.jinja": "{% set port = 8000 + grains['num'] %}\n",
            "apps/common.yaml": "name: shared\n",
            "formula/defaults.yaml": "formula:\n  pkg: nginx\n  service: nginx\n  config:\n    worker_processes: auto\n    ports: [80]\n",
            "formula/osfamilymap.yaml": "Debian:\n  pkg: nginx-full\nRedHat:\n  pkg: nginx\n  user: nginx\n",
            "formula/map.jinja": '{% import_yaml "formula/defaults.yaml" as defaults %}\n{% import_yaml "formula/osfamilymap.yaml" as osfamilymap %}\n{% set osfam = salt["grains.filter_by"](osfamilymap, grain="os_family") or {} %}\n{% do defaults.formula.update(osfam) %}\n{% set formula = salt["pillar.get"]("formula", default=defaults.formula, merge=True) %}\n',
            "formula/init.sls": '{% from "formula/map.jinja" import formula with context %}\n{% set out = {} %}\n{% for k, v in formula|dictsort %}{% do out.update({k|upper: v}) %}{% endfor %}\nnginx:\n  {{ out|yaml(False)|indent(2) }}\n  names: {{ formula.config.ports|map("string")|join(",") }}\n  title: {{ "hello world".title() }}\n  keys: {{ formula.keys()|list|sort }}\n{% include "formula/extra.sls" %}\n',
            "formula/extra.sls": "extra:\n  from_include: {{ grains.os_family }}\n",
            "apps/db.sls": "db:\n  tpldir: {{ tpldir }}\n  tplfile: {{ tplfile }}\n  tpldot: {{ tpldot }}\n  sls: {{ sls }}\n",
        },
        root2: {
            "both.jinja": "{% set where = 'second root' %}\n",
            "only2.jinja": "{% set only2 = 'from root2' %}\n",
        },
    }


# name -> (file text, options). Options: sls, default_pipe, blacklist, whitelist, opts (extra opts),
# compare ("first_line" for errors carrying a traceback).
CASES = {
    "yaml_scalars": ("#!yaml\na: yes\nb: off\nc: 012\nd: 0x1f\ne: 1.5e3\nf: ~\ng: 2024-01-02\nh: '{{ not jinja }}'\ni: !!binary aGVsbG8=\nj: 1_000\nk: .inf\nl: 0o17\n", {}),
    "yaml_anchors_merge": ("base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 3\n", {}),
    "yaml_duplicate_key": ("a: 1\nb: 2\na: 3\n", {}),
    "yaml_tab": ("a:\n\tb: 1\n", {}),
    "yaml_parse_error": ("a: [1, 2\nb: 3\n", {}),
    "yaml_double_curly": ("a: {{ '{{' }} x }}\n", {}),
    "yaml_list_top": ("- a\n- b\n", {}),
    "empty": ("", {}),
    "whitespace": ("   \n\n", {}),
    "context_vars": ("g: {{ grains.os }}\np: {{ pillar.k.n }}\ni: {{ opts.id }}\ne: {{ saltenv }}\ns: {{ sls }}\nt: {{ tplfile }}\nr: {{ _pillar_rend }}\n", {"sls": "ctx"}),
    "grains_get": ("a: {{ salt['grains.get']('os') }}\nb: {{ salt['grains.get']('deep:x:y') }}\nc: {{ salt['grains.get']('nope', 'dflt') }}\nd: {{ salt.grains.get('deep|x|y', delimiter='|') }}\ne: {{ salt['grains.get']('lst:1') }}\nf: {{ salt['grains.item']('os', 'num') }}\ng: {{ salt['grains.get']('nope') }}\n", {}),
    "grains_filter_by": ("{% set m = salt['grains.filter_by']({'Debian': {'pkg': 'apache2', 'x': 1}, 'RedHat': {'pkg': 'httpd'}, 'default': {'pkg': 'web'}, 'common': {'z': 9}}, merge={'x': 2}, base='common') %}\na: {{ m|json }}\n{% set n = salt['grains.filter_by']({'Foo': 1, 'default': 'd'}, grain='os') %}\nb: {{ n }}\n{% set o = salt['grains.filter_by']({'Foo': 1, 'bar': 'd'}, grain='os', default='bar') %}\nc: {{ o }}\n", {}),
    "pillar_get": ("a: {{ salt['pillar.get']('k:n') }}\nb: {{ salt['pillar.get']('k:missing', 'dflt') }}\nc: {{ salt['pillar.get']('k', {'extra': 1, 'n': 0}, merge=True)|json }}\nd: {{ salt['pillar.get']('lst', ['z'], merge=True)|json }}\ne: {{ salt.pillar.get('nothing') }}\nf: {{ salt['pillar.item']('k', 'lst')|json }}\n", {}),
    "config_get": ("a: {{ salt['config.get']('id') }}\nb: {{ salt['config.get']('os') }}\nc: {{ salt['config.get']('k:n') }}\nd: {{ salt['config.get']('test.foo') }}\ne: {{ salt['config.get']('nope', 'dflt') }}\nf: {{ salt['config.option']('os') }}\ng: {{ salt['config.get']('renderer') }}\n", {}),
    "file_funcs": ("a: {{ salt['file.file_exists']('@ROOT@/notes.txt') }}\nb: {{ salt['file.file_exists']('@ROOT@') }}\nc: {{ salt['file.directory_exists']('@ROOT@/apps') }}\nd: {{ salt['file.read']('@ROOT@/notes.txt')|json }}\n", {}),
    "cmd_run": ("a: {{ salt['cmd.run']('echo hello') }}\nb: {{ salt['cmd.run']('echo one; echo two')|json }}\nc: {{ salt['cmd.shell']('echo x | tr x y') }}\nd: {{ salt['cmd.run']('sh -c \"echo err 1>&2\"') }}\ne: {{ salt['cmd.run_stdout']('sh -c \"echo out; echo err 1>&2\"') }}\nf: {{ salt.cmd.run('printf \"a  \\n\\n\"')|json }}\n", {}),
    "serializer_tags": ('{% import_yaml "defaults.yaml" as y %}\n{% import_json "defaults.json" as j %}\n{% import_text "notes.txt" as t %}\n{% load_yaml as ly %}\nk: [1, 2]\n{% endload %}\n{% load_json as lj %}\n{"m": "n"}\n{% endload %}\n{% load_text as lt %}\nfree text\n{% endload %}\ny: {{ y|json }}\nj: {{ j|json }}\nt: {{ t|json }}\nly: {{ ly|json }}\nlj: {{ lj|json }}\nlt: {{ lt|json }}\n', {}),
    "serializer_filters": ("{% set d = {'b': [1, 2], 'a': {'c': True}} %}\ny: {{ d|yaml }}\nyb: {{ d|yaml(False)|json }}\nj: {{ d|json|json }}\npy: {{ d|python|json }}\nly: {{ '{x: [1, 2]}'|load_yaml|json }}\nlj: {{ '{\"x\": 1}'|load_json|json }}\ntj: {{ d|tojson|json }}\nsp: {{ {'name': 'x', 'v': 1}|dict_to_sls_yaml_params|json }}\n", {}),
    "include_import_from": ('{% from "map.jinja" import m, hello with context %}\n{% import "map.jinja" as mp with context %}\na: {{ m.v }}\nb: {{ hello(3) }}\nc: {{ mp.m.tpl }}\n{% include "both.jinja" %}\n', {}),
    "roots_order": ('{% from "both.jinja" import where %}\n{% from "only2.jinja" import only2 %}\na: {{ where }}\nb: {{ only2 }}\n', {}),
    "relative_imports": (None, {"path": "apps/web/init.sls", "sls": "apps.web"}),
    "sls_context_plain": (None, {"path": "apps/db.sls", "sls": "apps.db"}),
    "top_file": ("base:\n  '*':\n    - common\n  {{ grains.id }}:\n    - {{ tpldir }}.x\n    - {{ tplfile }}\n", {"sls": ""}),
    "nested_include_error": ('{% include "bad_inner.jinja" %}\n', {}),
    "macro_undefined": ('{% from "bad_macro.jinja" import boom %}\na: {{ boom() }}\n', {}),
    "yaml_keys": ("1: int key\n2.5: float key\nfalse: bool key\n~: null key\nk: on\n'quoted': x\n", {}),
    "printable_dicts": ("a: {{ pillar.k }}\nb: {{ pillar.lst }}\nc: {{ grains.deep }}\nd: {{ {'s': 'multi\\nline'} }}\n", {}),
    "indent_tojson": ("a: |\n  {{ 'x\\ny'|indent(2) }}\nb: {{ {'k': '<&>'}|tojson }}\nc: {{ pillar.lst|join(',') }}\n", {}),
    "include_ignore_missing": ('{% include "nope.jinja" ignore missing %}\na: 1\n', {}),
    "import_with_context_macro": ('{% import "map.jinja" as mp %}\na: {{ mp.hello(grains.num) }}\n', {}),
    "salt_attr_missing_module": ("a: {{ salt.nosuch.thing() }}\n", {}),
    "salt_item_missing_module": ("a: {{ salt['nosuch.thing']() }}\n", {}),
    "pillar_raise_on_missing": ("a: {{ salt['pillar.get']('nope') }}\n", {"opts": {"pillar_raise_on_missing": True}, "compare": "first_line"}),
    "config_get_merge": ("a: {{ salt['config.get']('k', merge='recurse')|json }}\n", {}),
    "grains_get_list_index_default": ("a: {{ salt['grains.get']('lst:5', 'none') }}\n", {}),
    "jinja_json_dump_filters": ("a: {{ {'b': 1, 'a': [1, 2]}|json(sort_keys=False) }}\nb: {{ [1, {'x': None}]|yaml }}\nc: {{ 'text'|yaml }}\n", {}),
    "formula_style": (None, {"path": "formula/init.sls", "sls": "formula"}),
    "missing_template": ('{% include "nope.jinja" %}\n', {}),
    "filters_strings": ("a: {{ 'yes'|to_bool }}\nb: {{ 'off'|to_bool }}\nc: {{ 1|to_bool }}\nd: {{ 'foo123'|regex_search('o+(\\\\d+)') }}\ne: {{ 'foo123'|regex_match('f(o+)') }}\nf: {{ 'a-b-c'|regex_replace('-', '+') }}\ng: {{ 'a.b*'|regex_escape }}\nh: {{ 'it''s'|yaml_squote }}\ni: {{ 'say \"x\"'|yaml_dquote }}\nj: {{ 'str'|yaml_encode }}\nk: {{ 5|yaml_encode }}\nl: {{ 'a b'|quote }}\nm: {{ '1G'|human_to_bytes }}\nn: {{ 'ab12'|is_hex }}\no: {{ 'a b'|contains_whitespace }}\np: {{ '42'|to_num }}\nq: {{ 'camelCase'|to_snake_case }}\nr: {{ 'snake_case'|to_camelcase }}\ns: {{ 'x'|to_bytes }}\n", {}),
    "filters_hash": ("a: {{ 'x'|md5 }}\nb: {{ 'x'|sha1 }}\nc: {{ 'x'|sha256 }}\nd: {{ 'x'|sha512 }}\ne: {{ 'x'|base64_encode }}\nf: {{ 'eA=='|base64_decode }}\ng: {{ 'x'|hmac('key', 'xxx') }}\nh: {{ 'x'|hmac_compute('key') }}\ni: {{ 'x'|uuid }}\n", {}),
    "filters_lists": ("a: {{ [1, 1, 2]|unique }}\nb: {{ 'x'|sequence }}\nc: {{ [1, 2]|union([2, 3]) }}\nd: {{ [1, 2]|intersect([2, 3]) }}\ne: {{ [1, 2]|difference([2, 3]) }}\nf: {{ [1, 2]|symmetric_difference([2, 3]) }}\ng: {{ [1, [2, [3]]]|flatten }}\nh: {{ [True, False, True]|exactly_n_true(2) }}\ni: {{ [True, False]|exactly_one_true }}\nj: {{ [1, 5, 3]|min }} {{ [1, 5, 3]|max }} {{ [1, 5, 3]|avg }}\nk: {{ [1]|is_list }} {{ 'x'|is_list }} {{ [1]|is_iter }}\nl: {{ ['B', 'a']|sorted_ignorecase }}\nm: {{ {'a': 1}|to_entries }}\nn: {{ [{'key': 'a', 'value': 1}]|from_entries }}\no: {{ 'b'|substring_in_list(['abc', 'x']) }}\np: {{ [1, 2]|compare_lists([2, 3]) }}\nq: {{ {'a': 1}|compare_dicts({'a': 2}) }}\nr: {{ {'a': {'b': 1}}|traverse('a:b') }}\ns: {{ [1, 2]|product(['x'])|list|json }}\nt: {{ [1, 2, 3]|combinations(2)|list|json }}\nu: {{ [1, 2]|zip(['a', 'b'])|list|json }}\nv: {{ {'a': {'b': 1}}|set_dict_key_value('a:c', 2) }}\nw: {{ {'a': [1]}|append_dict_key_value('a', 2) }}\nx: {{ ['a', 'b']|skip }}\njq: {{ {'a': [{'b': 1}, {'b': 2}]}|json_query('a[].b') }}\ny: {{ [1, 2]|json_encode_list }}\nz: {{ 'x'|method_call('upper') }}\n", {}),
    "filters_network": ("a: {{ '10.0.0.1'|is_ip }}\nb: {{ 'x'|is_ip }}\nc: {{ ['10.0.0.1', 'fe80::1', 'x']|ipaddr }}\nd: {{ ['10.0.0.1', 'fe80::1']|ipv4 }}\ne: {{ ['10.0.0.1', 'fe80::1']|ipv6 }}\nf: {{ '192.168.0.0/30'|network_hosts }}\ng: {{ '192.168.0.0/24'|network_size }}\nh: {{ 'fe80::1'|ipwrap }}\ni: {{ '10.0.0.1'|is_ipv4 }} {{ '10.0.0.1'|is_ipv6 }}\n", {}),
    "tests_and_ext": ("{% set l = [] %}\n{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{% do l.append(i) %}{% endfor %}\na: {{ l }}\nb: {{ 'abc' is match('a.c') }}\nc: {{ 1 is equalto 1 }}\nd: {{ [1] is list }}\ne: {{ 'x' is list }}\n{% with w = 5 %}f: {{ w }}{% endwith %}\n", {}),
    "strftime": ("a: {{ '2002-12-25'|strftime('%Y') }}\nb: {{ 1040814000|strftime('%Y-%m-%d') }}\n", {}),
    "odict_and_printing": ("{% set d = odict([('z', 1), ('a', 'x\\ny')]) %}\na: {{ d }}\nb: {{ {'k': 'v', 'n': None} }}\nc: {{ [1, 'two'] }}\n", {}),
    "raise_global": ("{{ raise('custom failure') }}\n", {"compare": "first_line"}),
    "undefined_var": ("a: 1\nb: {{ nope }}\n", {}),
    "undefined_attr": ("a: 1\nb: {{ grains.nope.deeper }}\n", {}),
    "syntax_error": ("a: 1\n{% if %}\nb: 2\n", {}),
    "unclosed_block": ("{% for x in [1] %}\na: 1\n", {}),
    "sandbox_range": ("{% for i in range(10**7) %}{% endfor %}\n", {}),
    "jinja_error_python": ("a: {{ 1 / 0 }}\n", {"compare": "first_line"}),
    "json_renderer": ('#!json\n{"a": [1, 2], "b": {"c": null}}\n', {}),
    "jinja_json": ('#!jinja|json\n{"a": "{{ grains.os }}", "n": {{ grains.num }}}\n', {}),
    "json_error": ('#!json\n{"a": 1,}\n', {}),
    "yaml_only_shebang": ("#!yaml\na: '{{ x }}'\nb: '{% raw %}'\n", {}),
    "old_style_shebang": ("#!yaml_jinja\na: {{ 1 + 1 }}\n", {}),
    "unknown_renderer": ("#!nosuchrenderer\na: 1\n", {}),
    "jinja_argline_bad": ("#!jinja -x|yaml\na: 1\n", {}),
    "default_pipe_json": ('{"a": 1}\n', {"default_pipe": "json"}),
    "blacklisted_jinja": ("a: '{{ 1 }}'\n", {"blacklist": ["jinja"]}),
    "not_whitelisted": ("a: {{ 1 }}\n", {"whitelist": ["yaml"]}),
    "trim_lstrip_opts": ("l:\n  {% for i in [1, 2] %}\n  - {{ i }}\n  {% endfor %}\nraw: {{ 'x\n' }}\n", {"opts": {"jinja_trim_blocks": True, "jinja_lstrip_blocks": True}}),
    "jinja_sls_env": ("l: [\n{%- for i in [1, 2] %}\n{{ i }},\n{%- endfor %}\n]\n", {"opts": {"jinja_sls_env": {"trim_blocks": True, "keep_trailing_newline": True}}}),
    "jinja2_header": ('#!jinja|yaml\n#jinja2: {"trim_blocks": true}\nl:\n{% for i in [1] %}\n  - {{ i }}\n{% endfor %}\n', {}),
    "allow_undefined": ("a: '{{ nope }}'\n", {"opts": {"allow_undefined": True}}),
    "windows_newlines": ("a: {{ 'x' }}\r\nb: |\r\n  two\r\n  lines\r\n", {}),
    "unicode": ("a: {{ 'héllo ✓' }}\nb: {{ 'ü'|yaml_dquote }}\nc: {{ {'k': 'é'}|json }}\n", {}),
    "gpg_yaml": ("#!yaml|gpg\nsecret: |\n@CIPHER@\nplain: text\nnested:\n  - |\n@CIPHER4@\n", {}),
    "gpg_jinja_yaml": ("#!jinja|yaml|gpg\nsecret: |\n@CIPHER@\nwho: {{ grains.os }}\n", {}),
}

CONTEXT = {
    "grains": {"os": "Debian", "os_family": "Debian", "num": 3, "deep": {"x": {"y": "z"}}, "lst": ["l0", "l1"], "id": "m1"},
    "pillar": {"k": {"n": 7, "o": "p"}, "lst": ["a", "b"], "formula": {"config": {"ports": [80, 443]}}},
    "opts": {"id": "m1", "renderer": "jinja|yaml"},
}


def gpg_setup(tmp):
    gpg = shutil.which("gpg")
    if not gpg:
        sys.exit("FAIL: gpg is not installed (scripts/setup.sh installs gnupg)")
    home = os.path.join(tmp, "gpgkeys")
    os.makedirs(home, mode=0o700)
    env = dict(os.environ, GNUPGHOME=home)
    subprocess.run([gpg, "--batch", "--passphrase", "", "--quick-gen-key", "sylvite-test@example.invalid",
                    "ed25519", "default", "never"], env=env, check=True, capture_output=True)
    subprocess.run([gpg, "--batch", "--passphrase", "", "--quick-add-key",
                    subprocess.run([gpg, "--list-keys", "--with-colons"], env=env, capture_output=True,
                                   text=True, check=True).stdout.split("fpr:::::::::")[1].split(":")[0],
                    "cv25519", "encr", "never"], env=env, check=True, capture_output=True)
    enc = subprocess.run([gpg, "--batch", "--armor", "--trust-model", "always", "--encrypt", "-r",
                          "sylvite-test@example.invalid"], input=b"top secret value", env=env,
                         check=True, capture_output=True).stdout.decode()
    return home, "\n".join("  " + line for line in enc.strip().splitlines())


def untag(v):
    """sylvite's wire tags back to Python values (JSON has no inf/nan)."""
    if isinstance(v, dict):
        if len(v) == 1 and "__sylvite_float__" in v:
            return float(v["__sylvite_float__"])
        return {k: untag(x) for k, x in v.items()}
    if isinstance(v, list):
        return [untag(x) for x in v]
    return v


def without_tracebacks(msg):
    """Salt's "Jinja error" text embeds a Python traceback (file paths, source lines of
    Salt's own code): compare everything else."""
    keep, in_tb = [], False
    for line in msg.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            in_tb = True
            continue
        if in_tb:
            if line.startswith(" ") or not line.strip():
                continue
            in_tb = False
            if line != "[...]":
                keep.append(line)
            continue
        keep.append(line)
    return "\n".join(keep)


def render_sylvite(worker, reqs):
    """Every case twice through one worker: the second pass runs from its compiled-template
    cache and must give the same answer."""
    proc = subprocess.Popen([worker], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    first = render_pass(proc, reqs)
    second = render_pass(proc, reqs)
    proc.stdin.close()
    proc.wait(timeout=30)
    for name in reqs:
        if json.dumps(first[name]) != json.dumps(second[name]):
            sys.exit(f"FAIL: case {name} rendered differently the second time (template cache):\n"
                     f"  first:  {first[name]}\n  second: {second[name]}")
    return first


def render_pass(proc, reqs):
    out = {}
    for name, req in reqs.items():
        body = json.dumps(req).encode()
        proc.stdin.write(struct.pack(">I", len(body)) + body)
        proc.stdin.flush()
        hdr = proc.stdout.read(4)
        if len(hdr) != 4:
            sys.exit(f"FAIL: sylvite-render died on case {name}")
        reply = json.loads(proc.stdout.read(struct.unpack(">I", hdr)[0]))
        if reply["status"] == "ok":
            out[name] = {"ok": untag(reply["data"])}
        else:
            out[name] = {"error": reply["error"], "status": reply["status"]}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--salt-python", required=True)
    ap.add_argument("-k", help="only cases whose name contains this")
    args = ap.parse_args()
    # scripts/test.sh exports SYLVITE_PYTHON (the Salt venv's python) too.
    salt_python = os.environ.get("SYLVITE_RENDER_SALT_PYTHON") or args.salt_python
    if not os.access(salt_python, os.X_OK) and os.environ.get("SYLVITE_PYTHON"):
        salt_python = os.environ["SYLVITE_PYTHON"]
    for what, path in (("sylvite-render", args.worker), ("the Salt venv python", salt_python)):
        if not os.access(path, os.X_OK):
            sys.exit(f"FAIL: {what} not found at {path} (build sylvite-render; scripts/setup.sh makes the venv)")
    tmp = tempfile.mkdtemp(prefix="sylvite-render-diff-")
    try:
        root, root2 = os.path.join(tmp, "r1"), os.path.join(tmp, "r2")
        keydir, cipher = gpg_setup(tmp)
        for base, tree in files(root, root2).items():
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
                with open(os.path.join(base, rel), "w") as fh:
                    fh.write(text)
        cases, ours = [], {}
        for name, (text, o) in CASES.items():
            if args.k and args.k not in name:
                continue
            if text is None:
                path = os.path.join(root, o["path"])
            else:
                path = os.path.join(root, "cases", name + ".sls")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", newline="") as fh:
                    fh.write(text.replace("@ROOT@", root).replace("@CIPHER@", cipher)
                             .replace("@CIPHER4@", cipher.replace("\n", "\n  ").replace("  -----BEGIN", "    -----BEGIN", 1)))
            ctx = json.loads(json.dumps(CONTEXT))
            ctx["opts"]["gpg_keydir"] = keydir
            ctx["opts"].update(o.get("opts", {}))
            sls = o.get("sls", "cases." + name)
            pipe = o.get("default_pipe", "jinja|yaml")
            cases.append(dict(name=name, path=path, sls=sls, context=ctx, default_pipe=pipe,
                              blacklist=o.get("blacklist", []), whitelist=o.get("whitelist", [])))
            our_ctx = dict(ctx, _pillar_rend=True)
            ours[name] = dict(path=path, sls=sls, saltenv="base", roots=[root, root2], default_pipe=pipe,
                              blacklist=o.get("blacklist", []), whitelist=o.get("whitelist", []),
                              context=our_ctx, max_output_bytes=1 << 24)
        mine = render_sylvite(args.worker, ours)
        helper = subprocess.run([salt_python, os.path.join(HERE, "salt_render_helper.py")],
                                input=json.dumps({"roots": [root, root2], "cachedir": os.path.join(tmp, "cache"),
                                                  "cases": cases}).encode(), capture_output=True)
        if helper.returncode != 0:
            sys.exit("FAIL: the Salt helper failed:\n" + helper.stderr.decode()[-4000:])
        theirs = json.loads(helper.stdout)
        failed = 0
        for name in ours:
            a, b = mine[name], theirs[name]
            a_cmp, b_cmp = dict(a), dict(b)
            a_cmp.pop("status", None)
            for d in (a_cmp, b_cmp):
                if "error" in d:
                    if CASES[name][1].get("compare") == "first_line":
                        d["error"] = d["error"].splitlines()[0]
                    else:
                        d["error"] = without_tracebacks(d["error"])
            if os.environ.get("RENDER_DIFF_SHOW"):  # debugging aid: print both sides
                print(f"show {name}\n  sylvite: {json.dumps(a, ensure_ascii=False)}\n  salt:    "
                      f"{json.dumps(b, ensure_ascii=False)}")
            if json.dumps(a_cmp, ensure_ascii=False) != json.dumps(b_cmp, ensure_ascii=False):
                failed += 1
                print(f"DIFF {name}\n  sylvite: {json.dumps(a, ensure_ascii=False)}\n  salt:    "
                      f"{json.dumps(b, ensure_ascii=False)}")
            else:
                print(f"ok   {name}" + (" (error on both sides)" if "error" in a else ""))
        print(f"{len(ours) - failed}/{len(ours)} cases equal to Salt 3008.5")
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
