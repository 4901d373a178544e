#!/usr/bin/env python3
"""Layering check: fails on an include or a link that goes against sylvite's layers.

    scripts/check_layers.py BUILD_DIR            (reads BUILD_DIR/sylvite_targets.json)
    scripts/check_layers.py --table FILE

The table is written by CMake at configure time (sylvite_write_target_table in
cmake/sylvite.cmake): every target made by sylvite_library / sylvite_executable /
sylvite_test with its folder, sources, declared headers and links. Rules:

1. Links follow LAYERS below: a target links only targets of a lower layer, or of its own
   component (a component is the LAYERS folder a target's CMakeLists.txt lies in).
   So minion links neither cluster nor master, and master links no tool.
2. Libraries are linked by their alias (sylvite::wire), never by the real name.
3. Every project header has one owner: the library listed in HEADERS, else the library
   that compiles the .cpp of the same name beside it, else the only library with sources
   in its folder (or the nearest parent folder that has any). A header no library owns
   (a test helper) may only be included from its own folder's targets.
4. A file of target T may include (with "" or <>) a project header only if its owner is
   T or a library T links, directly or through PUBLIC links of those.
5. Some external headers only where their package is linked directly (EXTERNAL below):
   OpenSSL in core/crypto and core/pki, not in a library above them.

Exit status 0 when clean, 1 with one line per violation, 2 on a usage error.
Stdlib only (runs from scripts/test.sh and as the ctest test Layers.Tree).
"""

import argparse
import json
import os
import re
import sys

# Layer number per component folder, bottom up. Equal numbers: neither may link the other.
LAYERS = {
    "core/util": 0,
    "core/wire": 1,
    "core/crypto": 2,
    "core/config": 2,
    "core/pki": 3,
    "core/match": 3,
    "core/output": 3,
    "core/render": 3,
    "core/transport": 4,
    "cluster": 5,
    "minion": 5,
    "master": 6,
    "tools": 7,
    "bench": 7,
    "tests": 8,
}

# Include prefix -> link targets one of which the including library/executable must link
# itself (tests may include them freely, e.g. OpenSSL for independent cross-checks).
EXTERNAL = {
    "openssl/": ("OpenSSL::Crypto", "OpenSSL::SSL"),
    "yaml-cpp/": ("yaml-cpp",),
    "CLI/": ("CLI11::CLI11",),
    "zmq.h": ("PkgConfig::ZMQ",),
    "libpq-fe.h": ("PkgConfig::PQ",),  # pgjobs: only the PostgreSQL job cache links libpq
}

HEADER_EXT = (".hpp", ".h", ".hh", ".ipp", ".inc")
SOURCE_EXT = (".cpp", ".cc", ".cxx", ".c")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SKIP_DIRS = {".git", "venv", "__pycache__", "node_modules"}


def component_of(rel_dir):
    """The LAYERS key a folder belongs to (longest prefix), or None."""
    best = None
    for c in LAYERS:
        if rel_dir == c or rel_dir.startswith(c + "/"):
            if best is None or len(c) > len(best):
                best = c
    return best


class Checker:
    def __init__(self, table):
        self.root = os.path.normpath(table["root"])
        self.errors = []
        self.aliases = {}
        for a in table.get("aliases", []):
            alias, real = a.split("=", 1)
            self.aliases[alias] = real
        self.targets = {t["name"]: t for t in table["targets"]}
        for t in self.targets.values():
            t["rdir"] = self.rel(t["dir"])
            t["rsources"] = [self.rel(s) for s in t["sources"]]
            t["rheaders"] = [self.rel(h) for h in t.get("headers", [])]
        self.libraries = [n for n, t in self.targets.items() if t["kind"] == "library"]

    # ---- helpers ---------------------------------------------------------------------------
    def rel(self, path):
        return os.path.relpath(os.path.normpath(path), self.root).replace(os.sep, "/")

    def error(self, msg):
        self.errors.append(msg)

    def display(self, name):
        """sylvite::x for a library with an alias, else the target name."""
        for a, r in self.aliases.items():
            if r == name:
                return a
        return name

    def project_name(self, entry):
        """A link entry as a project target name (aliases resolved), or None."""
        m = re.fullmatch(r"\$<LINK_ONLY:(.*)>", entry)
        if m:
            entry = m.group(1)
        entry = self.aliases.get(entry, entry)
        return entry if entry in self.targets else None

    def direct_links(self, name):
        return [p for p in (self.project_name(e) for e in self.targets[name]["links"]) if p]

    def public_links(self, name):
        t = self.targets[name]
        return [p for p in (self.project_name(e) for e in t["interface_links"] if not e.startswith("$<LINK_ONLY:")) if p]

    def visible(self, name):
        """Libraries whose headers `name` may include: its links and their PUBLIC closure."""
        seen = set()
        todo = list(self.direct_links(name))
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            todo.extend(self.public_links(d))
        return seen

    # ---- rule 1 and 2: links -------------------------------------------------------------------
    def check_links(self):
        for name, t in sorted(self.targets.items()):
            comp = component_of(t["rdir"])
            if comp is None:
                self.error(f"{t['rdir']}/CMakeLists.txt: target {name} is in no layer (add its folder to LAYERS in "
                           f"scripts/check_layers.py)")
                continue
            for e in t["links"]:
                bare = re.sub(r"^\$<LINK_ONLY:(.*)>$", r"\1", e)
                if bare in self.targets and self.targets[bare]["kind"] == "library" and self.display(bare) != bare:
                    self.error(f"{t['rdir']}/CMakeLists.txt: {name} links {bare} by its real name; use "
                               f"{self.display(bare)}")
            for d in self.direct_links(name):
                dc = component_of(self.targets[d]["rdir"])
                if dc is None or dc == comp:
                    continue
                if self.targets[d]["kind"] != "library":
                    self.error(f"{t['rdir']}/CMakeLists.txt: {name} links {d}, which is not a library")
                elif LAYERS[dc] >= LAYERS[comp]:
                    self.error(f"{t['rdir']}/CMakeLists.txt: {name} ({comp}, layer {LAYERS[comp]}) links "
                               f"{self.display(d)} ({dc}, layer {LAYERS[dc]}): a link must point to a lower layer")

    # ---- rule 3: header owners -------------------------------------------------------------------
    def build_owners(self):
        self.source_owner = {}  # rel path of a library source -> library
        self.lib_dirs = {}  # folder -> libraries with sources there
        for lib in self.libraries:
            for s in self.targets[lib]["rsources"]:
                if s in self.source_owner and self.source_owner[s] != lib:
                    self.error(f"{s}: compiled by two libraries ({self.source_owner[s]}, {lib})")
                self.source_owner.setdefault(s, lib)
                self.lib_dirs.setdefault(os.path.dirname(s), set()).add(lib)
        self.declared = {}
        for lib in self.libraries:
            for h in self.targets[lib]["rheaders"]:
                if h in self.declared and self.declared[h] != lib:
                    self.error(f"{h}: declared in HEADERS of two libraries ({self.declared[h]}, {lib})")
                self.declared.setdefault(h, lib)
                if not os.path.isfile(os.path.join(self.root, h)):
                    self.error(f"{h}: in HEADERS of {self.display(lib)} but missing")
        self.provides = {}
        for lib in self.libraries:
            for p in self.targets[lib].get("provides", []):
                self.provides[p] = lib

    def owner(self, rel):
        """(library or None, why-not) for a project file."""
        if rel in self.declared:
            return self.declared[rel], None
        if rel in self.source_owner:
            return self.source_owner[rel], None
        stem, _ = os.path.splitext(rel)
        for ext in SOURCE_EXT:
            if stem + ext in self.source_owner:
                return self.source_owner[stem + ext], None
        d = os.path.dirname(rel)
        while True:
            libs = self.lib_dirs.get(d)
            if libs:
                if len(libs) == 1:
                    return next(iter(libs)), None
                names = ", ".join(sorted(self.display(x) for x in libs))
                return None, f"owned by no single library (its folder has {names}): list it in HEADERS of one"
            if not d:
                return None, None
            d = os.path.dirname(d)

    # ---- rules 4 and 5: includes --------------------------------------------------------------------
    def all_headers(self):
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                                 and not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
            for f in sorted(filenames):
                if f.endswith(HEADER_EXT):
                    out.append(self.rel(os.path.join(dirpath, f)))
        return out

    def resolve(self, including, kind, path):
        """('project', rel) | ('generated', library) | ('external', None) | ('missing', None)."""
        cands = []
        if kind == '"':
            cands.append(os.path.join(self.root, os.path.dirname(including), path))
        cands.append(os.path.join(self.root, path))
        for c in cands:
            c = os.path.normpath(c)
            if os.path.isfile(c) and (c + os.sep).startswith(self.root + os.sep):
                return "project", self.rel(c)
        if path in self.provides:
            return "generated", self.provides[path]
        return ("missing", None) if kind == '"' else ("external", None)

    def check_file(self, name, rel, own_dirs):
        t = self.targets[name]
        allowed = self.visible(name) | {name}
        try:
            with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            self.error(f"{rel}: cannot read ({e.strerror})")
            return
        for n, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            kind, path = m.group(1), m.group(2)
            what, hit = self.resolve(rel, kind, path)
            where = f"{rel}:{n}"
            if what == "missing":
                self.error(f'{where}: #include "{path}" is no file of the project')
            elif what == "external":
                if t["kind"] == "test":
                    continue
                for prefix, pkgs in EXTERNAL.items():
                    if path.startswith(prefix) and not set(pkgs) & set(t["links"]):
                        self.error(f"{where}: #include <{path}> in {self.display(name)}, which does not link "
                                   f"{' or '.join(pkgs)} itself (use the library that wraps it)")
            else:
                if what == "generated":
                    owner, why = hit, None
                else:
                    owner, why = self.owner(hit)
                if why:
                    self.error(f"{where}: {hit} {why}")
                elif owner is None:
                    if os.path.dirname(hit) not in own_dirs:
                        self.error(f"{where}: {hit} belongs to no library and is outside {self.display(name)}'s "
                                   f"folders")
                elif owner not in allowed:
                    self.error(f"{where}: includes {path} of {self.display(owner)}, which {self.display(name)} "
                               f"does not link (directly, or through a PUBLIC link)")

    def check_includes(self):
        headers = self.all_headers()
        header_owner = {h: self.owner(h) for h in headers}
        for h, (o, why) in header_owner.items():
            if why:
                self.error(f"{h}: {why}")
        for name, t in sorted(self.targets.items()):
            own_dirs = {os.path.dirname(s) for s in t["rsources"]}
            files = []
            for s in t["rsources"]:
                if not s.endswith(SOURCE_EXT + HEADER_EXT):
                    continue
                lib = self.source_owner.get(s)
                if lib is None or lib == name:  # a library source compiled into a test: its library's rules
                    files.append(s)
            for h, (o, _) in header_owner.items():
                if o == name or (o is None and t["kind"] != "library" and os.path.dirname(h) in own_dirs):
                    files.append(h)
            for f in files:
                self.check_file(name, f, own_dirs)

    def run(self):
        self.check_links()
        self.build_owners()
        self.check_includes()
        return self.errors


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir", nargs="?", help="a configured build folder")
    ap.add_argument("--table", help="sylvite_targets.json (default BUILD_DIR/sylvite_targets.json)")
    a = ap.parse_args(argv)
    table_path = a.table or (os.path.join(a.build_dir, "sylvite_targets.json") if a.build_dir else None)
    if not table_path:
        ap.error("give BUILD_DIR or --table")
    try:
        with open(table_path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_layers: cannot read {table_path}: {e} (configure the build first)", file=sys.stderr)
        return 2
    errors = Checker(table).run()
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} layering violation(s); see docs/contributing.md (Layers)")
        return 1
    print(f"check_layers: {len(table['targets'])} targets, layering ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
