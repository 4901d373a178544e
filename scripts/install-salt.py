#!/usr/bin/env python3
"""Install a real Salt release into a virtualenv for interop tests and benchmarks.

Salt's sdist pins some dependencies newer than the package registry may serve
(e.g. certifi>=2026.10.23 in 3008.5). We install salt with --no-deps and then its
declared Requires-Dist list, relaxing only pins that cannot be satisfied, one at a
time, and report each relaxed pin. Usage: install-salt.py VENV_DIR SALT_VERSION
"""
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

venv, version = Path(sys.argv[1]), sys.argv[2]
pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]

if not (venv / "bin" / "python").exists():
    subprocess.check_call([sys.executable, "-m", "venv", str(venv)])
    subprocess.check_call(pip + ["install", "-U", "pip", "wheel", "setuptools<81"])

with tempfile.TemporaryDirectory() as tmp:
    subprocess.check_call(pip + ["download", "--no-deps", "--no-binary", ":all:", "-d", tmp, f"salt=={version}"])
    sdist = next(Path(tmp).glob("salt-*.tar.gz"))
    with tarfile.open(sdist) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/PKG-INFO") and m.name.count("/") == 1)
        pkg_info = tf.extractfile(member).read().decode()
        reqs = [l.split(":", 1)[1].strip() for l in pkg_info.splitlines() if l.startswith("Requires-Dist:")]
        if not reqs:
            # Older sdists (3007.x) keep them in requirements/{base,zeromq,crypto}.txt.
            top = member.name.split("/")[0]

            def read_reqs(name, seen=set()):
                if name in seen:
                    return []
                seen.add(name)
                try:
                    text = tf.extractfile(f"{top}/requirements/{name}").read().decode()
                except KeyError:
                    return []
                out = []
                for line in text.splitlines():
                    line = line.split("#", 1)[0].strip()
                    if line.startswith("-r") or line.startswith("--requirement"):
                        out += read_reqs(line.split()[-1].split("/")[-1])
                    elif line and not line.startswith("-"):
                        out.append(line)
                return out

            for f in ("base.txt", "zeromq.txt", "crypto.txt"):
                reqs += read_reqs(f)
    subprocess.check_call(pip + ["install", "--no-deps", str(sdist)])

reqs += ["msgpack", "cryptography"]
relaxed = []
for attempt in range(10):
    with tempfile.TemporaryDirectory() as tmp:  # removed afterwards, also on failure
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text("\n".join(reqs) + "\n")
        p = subprocess.run(pip + ["install", "-r", str(req_file)], capture_output=True, text=True)
    if p.returncode == 0:
        break
    m = re.search(r"No matching distribution found for ([A-Za-z0-9_.\-]+)", p.stderr)
    if not m:
        sys.stderr.write(p.stderr)
        sys.exit(p.returncode)
    name = m.group(1).lower()
    new = []
    for r in reqs:
        base = re.split(r"[<>=!~;\[ ]", r, 1)[0].lower()
        if base == name:
            marker = r.split(";", 1)[1] if ";" in r else None
            r = name + (f"; {marker.strip()}" if marker else "")
            relaxed.append(name)
        new.append(r)
    reqs = new
else:
    sys.exit("could not resolve Salt's requirements")
for name in relaxed:
    print(f"install-salt: relaxed the version pin on {name} (not available in the registry)")
out = subprocess.check_output([str(venv / "bin" / "salt-call"), "--version"], text=True)
print("install-salt:", out.strip())
