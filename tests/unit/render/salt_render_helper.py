"""Renders test cases with Salt 3008.5's own salt.template.compile_template (run with the
Salt venv's python by test_render_vs_salt.py). stdin: {"root", "roots", "cachedir", "cases"};
stdout: {name: {"ok": data} | {"error": str}} as JSON (bytes as {"__sylvite_bytes__": b64})."""
import base64
import json
import logging
import sys
from collections.abc import Mapping

import salt.config
import salt.loader
import salt.template

logging.basicConfig(level=logging.CRITICAL)


def to_wire(v):
    if isinstance(v, Mapping):
        return {str(k) if not isinstance(k, str) else k: to_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [to_wire(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"__sylvite_bytes__": base64.b64encode(bytes(v)).decode("ascii")}
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def main():
    req = json.load(sys.stdin)
    out = {}
    loaders = {}
    for case in req["cases"]:
        opts = salt.config.minion_config(None)
        opts.update(
            file_client="local",
            file_roots={"base": req["roots"]},
            pillar_roots={"base": req["roots"]},
            cachedir=req["cachedir"],
            extension_modules=req["cachedir"] + "/extmods",
            id=case["context"]["opts"]["id"],
            grains=case["context"]["grains"],
            pillar=case["context"]["pillar"],
        )
        for k, v in case["context"]["opts"].items():
            opts[k] = v
        key = json.dumps(case["context"], sort_keys=True)
        if key not in loaders:
            funcs = salt.loader.minion_mods(opts)
            loaders[key] = salt.loader.render(opts, funcs)
        rend = loaders[key]
        try:
            data = salt.template.compile_template(
                case["path"], rend, case.get("default_pipe", "jinja|yaml"), case.get("blacklist", []),
                case.get("whitelist", []), saltenv="base", sls=case["sls"], _pillar_rend=True)
            if hasattr(data, "read"):
                data = data.read()
            out[case["name"]] = {"ok": to_wire(data)}
        except Exception as exc:  # pylint: disable=broad-except
            out[case["name"]] = {"error": str(exc)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
