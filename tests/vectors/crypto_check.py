#!/usr/bin/env python3
"""Reverse cross-check for core/crypto: verify ciphertexts, signatures and keys made by the
C++ library with Salt's own code (salt.crypt, salt.utils.rsax931, salt.utils.crypt) and
`cryptography`.

    $SYLVITE_PYTHON tests/vectors/crypto_check.py FILE.json

FILE is written by tests/unit/crypto/test_python_check.cpp. Byte strings are hex.
  keys{name}:   {private_pem, public_pem} (text; a C++-generated key and the fixtures)
  oaep[]:       key, algo, plain, cipher       -> salt PrivateKey.decrypt == plain
  sign[]:       key, algo, msg, sig            -> salt PublicKey.verify, and Salt's own sign
                                                  gives the same bytes (deterministic)
  x931[]:       key, msg, sig                  -> RSAX931Verifier.verify == msg and
                                                  RSAX931Signer.sign == sig
  crypticle:    key_string, raw[] {plain, cipher}, dumps[] {nonce, cipher, expect}
                                               -> Crypticle.decrypt / loads (one fresh
                                                  Crypticle per dumps entry)
  finger[]:     key, hash, finger              -> pem_finger(path=<public pem file>)
  clean_key[]:  text, clean                    -> salt.crypt.clean_key
  uuid4[], uuid4_hex[]                         -> uuid.UUID, version 4
  base64[]:     bytes, text                    -> base64.b64decode / b64encode
Exit 0 when everything matches; otherwise prints each mismatch and exits 1.
"""
import base64
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid

from cryptography.hazmat.primitives import serialization

import salt.crypt
import salt.utils.crypt
import salt.utils.rsax931

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)


def unhex(s):
    return bytes.fromhex(s)


def run(tmp):
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    logging.disable(logging.CRITICAL)

    privs, pubs, pub_paths = {}, {}, {}
    for name, k in doc["keys"].items():
        priv_pem = k["private_pem"].encode()
        pub_pem = k["public_pem"].encode()
        privs[name] = salt.crypt.PrivateKey(priv_pem)
        pubs[name] = salt.crypt.PublicKey(pub_pem)
        # The key as Salt writes it must be exactly the text C++ wrote.
        key = serialization.load_pem_private_key(priv_pem, password=None)
        trad = key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())
        check(trad == priv_pem, f"key {name}: private_pem differs from TraditionalOpenSSL")
        spki = key.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
        check(spki == pub_pem, f"key {name}: public_pem differs from SPKI of the private key")
        check(key.public_key().public_numbers().e == 65537, f"key {name}: e != 65537")
        if "bits" in k:
            check(key.key_size == k["bits"], f"key {name}: {key.key_size} bits")
        path = os.path.join(tmp, f"{name}.pub")
        with open(path, "wb") as f:
            f.write(pub_pem)
        pub_paths[name] = path

    for e in doc["oaep"]:
        try:
            plain = privs[e["key"]].decrypt(unhex(e["cipher"]), e["algo"])
            check(plain == unhex(e["plain"]), f"oaep {e['key']} {e['algo']}: wrong plaintext")
        except Exception as ex:  # noqa: BLE001
            check(False, f"oaep {e['key']} {e['algo']}: {ex!r}")

    for e in doc["sign"]:
        msg, sig = unhex(e["msg"]), unhex(e["sig"])
        check(pubs[e["key"]].verify(msg, sig, e["algo"]),
              f"sign {e['key']} {e['algo']} {e['msg'][:16]}: does not verify")
        check(privs[e["key"]].sign(msg, e["algo"]) == sig,
              f"sign {e['key']} {e['algo']} {e['msg'][:16]}: differs from Salt's signature")

    for e in doc["x931"]:
        k = doc["keys"][e["key"]]
        msg, sig = unhex(e["msg"]), unhex(e["sig"])
        try:
            got = salt.utils.rsax931.RSAX931Verifier(k["public_pem"]).verify(sig)
            check(got == msg, f"x931 {e['key']} {e['msg'][:16]}: recovered {got!r}")
            check(pubs[e["key"]].decrypt(sig) == msg, f"x931 {e['key']}: PublicKey.decrypt")
        except ValueError as ex:
            check(False, f"x931 {e['key']} {e['msg'][:16]}: {ex}")
        check(salt.utils.rsax931.RSAX931Signer(k["private_pem"]).sign(msg) == sig,
              f"x931 {e['key']} {e['msg'][:16]}: differs from RSAX931Signer")

    cr = doc["crypticle"]
    ks = cr["key_string"]
    try:
        c = salt.crypt.Crypticle({}, ks)
    except Exception as ex:  # noqa: BLE001
        check(False, f"crypticle key string refused: {ex!r}")
        c = None
    if c is not None:
        for e in cr["raw"]:
            try:
                check(c.decrypt(unhex(e["cipher"])) == unhex(e["plain"]),
                      f"crypticle raw {len(e['plain']) // 2} bytes: wrong plaintext")
            except Exception as ex:  # noqa: BLE001
                check(False, f"crypticle raw {len(e['plain']) // 2} bytes: {ex!r}")
        for e in cr["dumps"]:
            fresh = salt.crypt.Crypticle({}, ks)
            try:
                got = fresh.loads(unhex(e["cipher"]), nonce=e["nonce"])
                check(got == e["expect"], f"crypticle dumps {e['expect']!r}: got {got!r}")
            except Exception as ex:  # noqa: BLE001
                check(False, f"crypticle dumps {e['expect']!r}: {ex!r}")

    for e in doc["finger"]:
        got = salt.utils.crypt.pem_finger(path=pub_paths[e["key"]], sum_type=e["hash"])
        check(got == e["finger"], f"finger {e['key']} {e['hash']}: salt says {got}")

    for e in doc["clean_key"]:
        check(salt.crypt.clean_key(e["text"]) == e["clean"], f"clean_key {e['text']!r}")

    for u in doc["uuid4"]:
        try:
            p = uuid.UUID(u)
            check(str(p) == u and p.version == 4 and p.variant == uuid.RFC_4122, f"uuid4 {u}")
        except ValueError:
            check(False, f"uuid4 {u}: not a uuid")
    for u in doc["uuid4_hex"]:
        try:
            p = uuid.UUID(hex=u)
            check(p.hex == u and p.version == 4 and p.variant == uuid.RFC_4122, f"uuid4_hex {u}")
        except ValueError:
            check(False, f"uuid4_hex {u}: not a uuid")

    for e in doc["base64"]:
        b = unhex(e["bytes"])
        check(base64.b64encode(b).decode() == e["text"], f"base64 {e['bytes']}")
        check(base64.b64decode(e["text"], validate=True) == b, f"base64 decode {e['text']}")

    for f in failures:
        print("MISMATCH:", f)
    print(f"crypto_check: {checks} checks, {len(failures)} failures")
    return 1 if failures else 0


def main():
    tmp = tempfile.mkdtemp(prefix="sylvite-crypto-check-")
    try:
        return run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
