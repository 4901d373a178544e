#!/usr/bin/env python3
"""Cross-check vectors for core/crypto, produced by Salt's own code (salt.crypt,
salt.utils.rsax931, salt.utils.crypt) and `cryptography` (independent of our C++).

    /tmp/saltvenv/3008/bin/python tests/vectors/crypto_vectors.py [OUT]
        (default tests/fixtures/vectors/crypto.json)

Test keys: tests/fixtures/keys/crypto_a.{pem,pub} (2048 bit, PKCS#1 "RSA PRIVATE KEY", as
Salt writes them) and crypto_b.{pem,pub} (3072 bit, PKCS#8 "PRIVATE KEY", to exercise the
"any PEM private key" loader). They are generated once by this script when missing and
committed; do not regenerate them (every signature below depends on them).

All byte strings in the JSON are lowercase hex. Sections:
  keys{name}: pem/pub file names, pub_pkcs1 (PKCS#1 "RSA PUBLIC KEY" text of the same key),
              size (modulus bytes), private_pem_pkcs1 (the key re-serialized as Salt writes it:
              TraditionalOpenSSL; C++ private_pem() must produce exactly this text).
  sign[]:     key, algo, msg, sig  (PKCS#1 v1.5 is deterministic: C++ must produce sig)
  x931[]:     key, msg, sig, recoverable, twisted (salt.utils.rsax931.RSAX931Signer; also checked
              here against a pure-Python X9.31 implementation; recoverable=false where
              OpenSSL's RSA_public_decrypt refuses its own padding: empty and k-3 bytes;
              twisted=true where OpenSSL output n - s rather than s)
  oaep[]:     key, algo, plain, cipher  (random: C++ must decrypt cipher to plain)
  crypticle:  key_string; raw[] {plain, cipher} (Crypticle.encrypt);
              dumps[] {obj (JSON), nonce (null or 32 hex chars), cipher, expect (what loads
              returns: obj without "serial")}; no_pickle {cipher} (plaintext without the
              "pickle::" prefix: Salt's loads returns {})
  pem_finger[]: text (file contents), hash, finger (salt.utils.crypt.pem_finger(path=...))
  clean_key[]:  text, clean (salt.crypt.clean_key)
  base64[]:     bytes, text (base64.b64encode)
"""
import base64
import hashlib
import json
import logging
import os
import sys
import tempfile
import uuid

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

import salt.crypt
import salt.utils.crypt
import salt.utils.rsax931

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
KEYDIR = os.path.join(ROOT, "tests", "fixtures", "keys")
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "vectors", "crypto.json")

KEYS = {"a": (2048, "traditional"), "b": (3072, "pkcs8")}


def h(b):
    return b.hex()


def ensure_keys():
    os.makedirs(KEYDIR, exist_ok=True)
    for name, (bits, fmt) in KEYS.items():
        pem_path = os.path.join(KEYDIR, f"crypto_{name}.pem")
        pub_path = os.path.join(KEYDIR, f"crypto_{name}.pub")
        if os.path.exists(pem_path):
            continue
        key = rsa.generate_private_key(65537, bits)
        pformat = (serialization.PrivateFormat.TraditionalOpenSSL if fmt == "traditional"
                   else serialization.PrivateFormat.PKCS8)
        with open(pem_path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, pformat,
                                      serialization.NoEncryption()))
        with open(pub_path, "wb") as f:
            f.write(key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def load(name):
    with open(os.path.join(KEYDIR, f"crypto_{name}.pem"), "rb") as f:
        pem = f.read()
    with open(os.path.join(KEYDIR, f"crypto_{name}.pub"), "rb") as f:
        pub = f.read()
    return pem, pub


def x931_pure(key, msg, want_twist=False):
    """ANSI X9.31 private encrypt the way OpenSSL does it, from the numbers alone."""
    nums = key.private_numbers()
    n, d = nums.public_numbers.n, nums.d
    k = (n.bit_length() + 7) // 8
    j = k - len(msg) - 2
    assert j >= 0
    em = (b"\x6a" if j == 0 else b"\x6b" + b"\xbb" * (j - 1) + b"\xba") + msg + b"\xcc"
    raw = pow(int.from_bytes(em, "big"), d, n)
    s = min(raw, n - raw)
    if want_twist:
        return s != raw
    return s.to_bytes(k, "big")


def pem_finger_text(text, sum_type):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode())
        path = f.name
    try:
        return salt.utils.crypt.pem_finger(path=path, sum_type=sum_type)
    finally:
        os.unlink(path)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    ensure_keys()
    rnd = os.urandom
    doc = {"keys": {}, "sign": [], "x931": [], "oaep": [], "crypticle": {},
           "pem_finger": [], "clean_key": [], "base64": []}

    for name in KEYS:
        pem, pub = load(name)
        key = serialization.load_pem_private_key(pem, password=None)
        size = key.key_size // 8
        pub_pkcs1 = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.PKCS1).decode()
        trad = key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption()).decode()
        doc["keys"][name] = {"pem": f"crypto_{name}.pem", "pub": f"crypto_{name}.pub",
                             "pub_pkcs1": pub_pkcs1, "size": size,
                             "private_pem_pkcs1": trad}
        priv = salt.crypt.PrivateKey(pem)
        spub = salt.crypt.PublicKey(pub)

        msgs = [b"", b"salt", b"x" * 1000, rnd(37), bytes(range(256))]
        for algo in ("PKCS1v15-SHA1", "PKCS1v15-SHA224"):
            for m in msgs:
                sig = priv.sign(m, algo)
                assert spub.verify(m, sig, algo)
                doc["sign"].append({"key": name, "algo": algo, "msg": h(m), "sig": h(sig)})

        signer = salt.utils.rsax931.RSAX931Signer(pem)
        verifier = salt.utils.rsax931.RSAX931Verifier(pub)
        aes = salt.crypt.Crypticle.generate_key_string()
        xmsgs = [b"salt", hashlib.sha256(aes.encode()).hexdigest().encode(), b"", b"\x00",
                 b"\x00\x01\x02", rnd(size - 2), rnd(size - 3), rnd(size // 2)]
        xmsgs += [rnd(i % 50 + 1) for i in range(24)]  # many: both halves of min(s, n-s)
        for m in xmsgs:
            sig = signer.sign(m)
            assert sig == x931_pure(key, m), "rsax931 differs from the X9.31 math"
            assert priv.encrypt(m) == sig
            # OpenSSL's X9.31 check cannot undo its own padding for an empty message or one
            # of k-3 bytes (a lone 0xBA is "invalid padding"); Salt never signs those.
            try:
                recovered = verifier.verify(sig)
                assert recovered == m
            except ValueError:
                recovered = None
                assert len(m) in (0, size - 3)
            doc["x931"].append({"key": name, "msg": h(m), "sig": h(sig),
                                "recoverable": recovered is not None,
                                "twisted": x931_pure(key, m, want_twist=True)})

        for algo, hl in (("OAEP-SHA1", 20), ("OAEP-SHA224", 28)):
            for m in (b"", b"a", aes.encode(), rnd(size - 2 * hl - 2)):
                c = spub.encrypt(m, algo)
                assert priv.decrypt(c, algo) == m
                doc["oaep"].append({"key": name, "algo": algo, "plain": h(m), "cipher": h(c)})

        for hash_type in ("sha256", "sha1", "sha224", "sha384", "sha512", "md5"):
            text = pub.decode()
            variants = [text, text.replace("\n", "\r\n"), "\n\n" + text.replace("\n", "\n\n"),
                        text.rstrip("\n"), "  \n" + text + " \t\n\n"]
            for v in variants:
                doc["pem_finger"].append({"text": v, "hash": hash_type,
                                          "finger": pem_finger_text(v, hash_type)})
        for hash_type in ("sha256",):
            for v in ("", "one line\n", "a\nb\n", "-----BEGIN X-----\nAAAA\n-----END X-----\n"):
                doc["pem_finger"].append({"text": v, "hash": hash_type,
                                          "finger": pem_finger_text(v, hash_type)})

        text = pub.decode()
        for v in (text, text.replace("\n", "\r\n"), "\n  " + text + "\n\n \t",
                  text.replace("\n", "\r"), text.rstrip("\n"), "", " \n ",
                  "a\x0bb\x0cc\x1cd\x1de\x1ef\x1fg\r\n\r\nh", "\x1f a \x1c"):
            doc["clean_key"].append({"text": v, "clean": salt.crypt.clean_key(v)})

    # Crypticle
    ks = salt.crypt.Crypticle.generate_key_string()
    cr = salt.crypt.Crypticle({}, ks)
    craw = []
    for n in list(range(0, 34)) + [100, 4096]:
        p = rnd(n)
        c = cr.encrypt(p)
        assert cr.decrypt(c) == p
        craw.append({"plain": h(p), "cipher": h(c)})
    objs = [
        # keys in sorted order: the JSON file is written with sort_keys, and the C++ test
        # re-packs obj and compares the plaintext bytes with Salt's
        {"arg": [1, "two", None, True, 3.5], "fun": "test.ping", "jid": "20240101010101010101",
         "ret": "", "tgt": "*"},
        {},
        [1, 2, 3],
        "just a string",
        {"nested": {"a": [{"b": -5}], "big": 2**40, "neg": -(2**33)}, "t": False},
    ]
    dumps = []
    for obj in objs:
        for nonce in (None, uuid.uuid4().hex):
            c = cr.dumps(obj, nonce=nonce)
            fresh = salt.crypt.Crypticle({}, ks)
            assert fresh.loads(c, nonce=nonce) == obj
            dumps.append({"obj": obj, "nonce": nonce, "cipher": h(c), "expect": obj})
    serial_obj = {"load": {"fun": "test.ping"}, "serial": 7}
    c = cr.dumps(serial_obj)
    fresh = salt.crypt.Crypticle({}, ks)
    assert fresh.loads(c) == {"load": {"fun": "test.ping"}}
    logging.disable(logging.CRITICAL)  # Salt logs the replay loudly
    assert fresh.loads(c) == {}  # replayed serial is dropped
    logging.disable(logging.NOTSET)
    dumps.append({"obj": serial_obj, "nonce": None, "cipher": h(c),
                  "expect": {"load": {"fun": "test.ping"}}, "serial": 7})
    no_pickle = cr.encrypt(b"not a pickle")
    assert salt.crypt.Crypticle({}, ks).loads(no_pickle) == {}
    doc["crypticle"] = {"key_string": ks, "raw": craw, "dumps": dumps,
                        "no_pickle": {"cipher": h(no_pickle)}}

    for n in range(0, 10):
        b = rnd(n)
        doc["base64"].append({"bytes": h(b), "text": base64.b64encode(b).decode()})
    b = rnd(56)
    doc["base64"].append({"bytes": h(b), "text": base64.b64encode(b).decode()})

    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {out_path}: {len(doc['sign'])} sign, {len(doc['x931'])} x931, "
          f"{len(doc['oaep'])} oaep, {len(dumps)} dumps, {len(doc['pem_finger'])} fingers")


if __name__ == "__main__":
    main()
