#!/usr/bin/env python3
"""Unit tests of scripts/check_layers.py: small trees written to a temp folder with a
hand-made target table, each breaking one rule (an upward include, an include through a
PRIVATE link, an upward or sideways link, a real name instead of the alias, OpenSSL above
core/crypto, a header with no single owner, a foreign test helper, a missing header), and
the clean tree passing. Run by ctest as Layers.SelfTest (label unit)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "scripts", "check_layers.py"))


def lib(name, folder, sources, links=(), public=None, headers=(), provides=()):
    return {"name": name, "kind": "library", "dir": folder, "sources": list(sources), "headers": list(headers),
            "provides": list(provides), "links": list(links),
            "interface_links": list(links if public is None else public)}


def exe(name, folder, sources, links=(), kind="executable"):
    return {"name": name, "kind": kind, "dir": folder, "sources": list(sources), "headers": [], "provides": [],
            "links": list(links), "interface_links": []}


class LayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sylvite-layers-")
        self.root = self.tmp.name
        self.files = {
            "core/util/u.hpp": "#pragma once\n",
            "core/util/u.cpp": '#include "core/util/u.hpp"\n#include <string>\n',
            "core/wire/w.hpp": '#pragma once\n#include "core/util/u.hpp"\n',
            "core/wire/w.cpp": '#include "core/wire/w.hpp"\n',
            "master/m.hpp": '#pragma once\n#include "core/wire/w.hpp"\n',
            "master/m.cpp": '#include "master/m.hpp"\n',
            "master/bin/main.cpp": '#include "master/m.hpp"\n#include "sylvite/version.hpp"\n',
            "tests/unit/m/test_m.cpp": '#include "master/m.hpp"\n#include "helper.hpp"\n#include <openssl/evp.h>\n',
            "tests/unit/m/helper.hpp": '#pragma once\n#include "core/util/u.hpp"\n',
            "tests/unit/w/test_w.cpp": '#include "core/wire/w.hpp"\n',
        }
        self.targets = {
            "sylvite_util": lib("sylvite_util", "core/util", ["core/util/u.cpp"]),
            "sylvite_version": lib("sylvite_version", "core/util", [], provides=["sylvite/version.hpp"]),
            "sylvite_wire": lib("sylvite_wire", "core/wire", ["core/wire/w.cpp"], ["sylvite::util"]),
            "sylvite_master": lib("sylvite_master", "master", ["master/m.cpp"], ["sylvite::wire"]),
            "salt-master": exe("salt-master", "master", ["master/bin/main.cpp"],
                               ["sylvite::master", "sylvite::version"]),
            "test_m": exe("test_m", "tests/unit/m", ["tests/unit/m/test_m.cpp"], ["sylvite::master"], "test"),
            "test_w": exe("test_w", "tests/unit/w", ["tests/unit/w/test_w.cpp"], ["sylvite::wire"], "test"),
        }

    def tearDown(self):
        self.tmp.cleanup()

    def run_check(self):
        for rel, text in self.files.items():
            p = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        targets = []
        for t in self.targets.values():
            t = dict(t)
            t["dir"] = os.path.join(self.root, t["dir"])
            t["sources"] = [os.path.join(self.root, s) for s in t["sources"]]
            t["headers"] = [os.path.join(self.root, h) for h in t["headers"]]
            targets.append(t)
        aliases = [f"sylvite::{n[len('sylvite_'):]}={n}" for n, t in self.targets.items() if t["kind"] == "library"]
        table = os.path.join(self.root, "table.json")
        with open(table, "w") as f:
            json.dump({"root": self.root, "aliases": aliases, "targets": targets}, f)
        r = subprocess.run([sys.executable, SCRIPT, "--table", table], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def assert_fails(self, *needles):
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        for n in needles:
            self.assertIn(n, out)

    def test_clean_tree_passes(self):
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("layering ok", out)

    def test_upward_include_fails(self):
        self.files["core/util/u.cpp"] += '#include "core/wire/w.hpp"\n'
        self.assert_fails("core/util/u.cpp:3: includes core/wire/w.hpp of sylvite::wire, which sylvite::util does "
                          "not link")

    def test_upward_include_in_a_header_fails(self):
        self.files["core/wire/w.hpp"] += '#include "master/m.hpp"\n'
        self.assert_fails("core/wire/w.hpp:3:", "sylvite::master")

    def test_angle_bracket_project_include_is_checked_too(self):
        self.files["core/util/u.cpp"] += "#include <master/m.hpp>\n"
        self.assert_fails("core/util/u.cpp:3:", "sylvite::master")

    def test_include_through_a_private_link_fails(self):
        # master links wire PRIVATE: a test linking master cannot include wire's headers.
        self.targets["sylvite_master"]["interface_links"] = ["$<LINK_ONLY:sylvite::wire>"]
        self.files["tests/unit/m/test_m.cpp"] += '#include "core/wire/w.hpp"\n'
        self.assert_fails("tests/unit/m/test_m.cpp:4:", "test_m does not link")

    def test_include_through_a_public_link_passes(self):
        self.files["tests/unit/m/test_m.cpp"] += '#include "core/wire/w.hpp"\n#include "core/util/u.hpp"\n'
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_upward_link_fails(self):
        self.targets["sylvite_wire"]["links"].append("sylvite::master")
        self.assert_fails("sylvite_wire (core/wire, layer 1) links sylvite::master (master, layer 6)")

    def test_sideways_link_between_components_fails(self):
        # minion and cluster share a layer: the minion never links cluster.
        self.files["cluster/c.cpp"] = "\n"
        self.files["minion/n.cpp"] = "\n"
        self.targets["sylvite_cluster"] = lib("sylvite_cluster", "cluster", ["cluster/c.cpp"], ["sylvite::wire"])
        self.targets["sylvite_minion"] = lib("sylvite_minion", "minion", ["minion/n.cpp"], ["sylvite::cluster"])
        self.assert_fails("sylvite_minion (minion, layer 5) links sylvite::cluster (cluster, layer 5)")

    def test_link_by_real_name_fails(self):
        self.targets["sylvite_master"]["links"] = ["sylvite_wire"]
        self.assert_fails("sylvite_master links sylvite_wire by its real name; use sylvite::wire")

    def test_folder_outside_the_layers_fails(self):
        self.files["misc/x.cpp"] = "\n"
        self.targets["misc"] = exe("misc", "misc", ["misc/x.cpp"])
        self.assert_fails("target misc is in no layer")

    def test_openssl_above_crypto_fails_and_in_tests_passes(self):
        self.files["master/m.cpp"] += "#include <openssl/hmac.h>\n"
        self.assert_fails("master/m.cpp:2: #include <openssl/hmac.h> in sylvite::master")
        self.targets["sylvite_master"]["links"].append("OpenSSL::Crypto")
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)  # (and test_m.cpp's <openssl/evp.h> is fine: a test)

    def test_header_of_two_libraries_needs_a_declared_owner(self):
        self.files["master/ipc.hpp"] = "#pragma once\n"
        self.files["master/h.cpp"] = "\n"
        self.files["master/bin/main.cpp"] += '#include "master/ipc.hpp"\n'
        self.targets["sylvite_master_health"] = lib("sylvite_master_health", "master", ["master/h.cpp"],
                                                    ["sylvite::util"])
        self.assert_fails("master/ipc.hpp: owned by no single library")
        self.targets["sylvite_master"]["headers"] = ["master/ipc.hpp"]
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_a_header_beside_a_source_belongs_to_that_library(self):
        self.files["master/h.hpp"] = "#pragma once\n"
        self.files["master/h.cpp"] = '#include "master/h.hpp"\n'
        self.targets["sylvite_master_health"] = lib("sylvite_master_health", "master", ["master/h.cpp"],
                                                    ["sylvite::util"])
        self.files["master/m.cpp"] += '#include "master/h.hpp"\n'
        self.assert_fails("master/m.cpp:2: includes master/h.hpp of sylvite::master_health")

    def test_another_tests_helper_fails(self):
        self.files["tests/unit/w/test_w.cpp"] += '#include "tests/unit/m/helper.hpp"\n'
        self.assert_fails("tests/unit/w/test_w.cpp:2: tests/unit/m/helper.hpp belongs to no library")

    def test_missing_quoted_include_fails(self):
        self.files["core/wire/w.cpp"] += '#include "core/wire/gone.hpp"\n'
        self.assert_fails('core/wire/w.cpp:2: #include "core/wire/gone.hpp" is no file of the project')

    def test_generated_header_needs_its_library(self):
        self.targets["salt-master"]["links"] = ["sylvite::master"]
        self.assert_fails("master/bin/main.cpp:2: includes sylvite/version.hpp of sylvite::version")

    def test_unreadable_table_is_a_usage_error(self):
        r = subprocess.run([sys.executable, SCRIPT, os.path.join(self.root, "no-build")], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
