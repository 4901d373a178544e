#!/usr/bin/env python3
"""Cross-check sylvite's master_sign pub_sig with Salt's own code (salt.crypt).

    $SYLVITE_PYTHON tests/vectors/master_sign_check.py FILE.json

FILE is written by tests/unit/master/test_master_sign.cpp:
  sign_pem, sign_pub:  the master_sign key pair (PEM text)
  master_pub:          master.pub as written on disk
  pub_key:             the pub_key string the master sends in its auth reply
  cases[]:             {algo, pub_sig} with pub_sig as sent (base64 + "\\n")
Checks, per case:
  - pub_key == salt.crypt.clean_key(master_pub)          (what Salt's get_pub_str sends)
  - salt.crypt.verify_signature(master_sign.pub, pub_key, a2b_base64(pub_sig), algo)
    (what AsyncAuth.verify_pubkey_sig does on a Salt minion)
  - Salt's master computes the same bytes: binascii.b2a_base64(PrivateKey.sign(pub_key, algo))
  - the pre-computed variant: MasterKeys.gen_signature's bytes (sign of clean_key(pub PEM))
    equal ours without the newline.
Exit 0 when everything matches; otherwise prints each mismatch and exits 1.
"""
import binascii
import json
import os
import sys
import tempfile

from cryptography.hazmat.primitives import serialization

import salt.crypt

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)


def main(path):
    with open(path) as f:
        doc = json.load(f)
    pub_key = doc["pub_key"]
    check(pub_key == salt.crypt.clean_key(doc["master_pub"]), "pub_key is not clean_key(master.pub)")
    priv = salt.crypt.PrivateKey.from_str(doc["sign_pem"])
    with tempfile.TemporaryDirectory() as d:
        sign_pub_path = os.path.join(d, "master_sign.pub")
        with open(sign_pub_path, "w") as f:
            f.write(doc["sign_pub"])
        for case in doc["cases"]:
            algo, ours = case["algo"], case["pub_sig"]
            ok = salt.crypt.verify_signature(sign_pub_path, pub_key, binascii.a2b_base64(ours), algorithm=algo)
            check(ok, f"{algo}: Salt's verify_signature refused our pub_sig")
            theirs = binascii.b2a_base64(priv.sign(pub_key, algorithm=algo)).decode()
            check(theirs == ours, f"{algo}: Salt's master would send {theirs!r}, we send {ours!r}")
            # MasterKeys.gen_signature (salt-key --gen-signature): signs clean_key(PEM of pub)
            pub_obj = serialization.load_pem_public_key(doc["master_pub"].encode())
            pem = pub_obj.public_bytes(encoding=serialization.Encoding.PEM,
                                       format=serialization.PublicFormat.SubjectPublicKeyInfo)
            pre = binascii.b2a_base64(priv.sign(salt.crypt.clean_key(pem.decode()).encode(), algorithm=algo))
            check(salt.crypt.clean_key(pre.decode()) == ours.strip(),
                  f"{algo}: salt-key --gen-signature bytes differ from ours")
    print(f"master_sign_check: {checks} checks, {len(failures)} failures")
    for f in failures:
        print("MISMATCH:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
