#!/usr/bin/env python3
"""Cross-check vectors for core/wire, produced by Python msgpack (an independent
implementation, the one Salt itself uses).

    python3 tests/vectors/wire_vectors.py [OUT]   (default tests/fixtures/vectors/wire.json)

Needs the `msgpack` package (build/venv or /tmp/saltvenv/3008). The output is committed;
tests/unit/wire/test_wire_vectors.cpp reads it.

Value notation in the JSON (a tagged JSON, since JSON has no bytes):
  null/true/false/numbers/strings/lists/objects as themselves (ints have no '.', floats do);
  {"$bytes": "<hex>"}                 byte string (binary, no subtype)
  {"$ext": [code, "<hex>"]}           msgpack ext = binary with subtype code
  {"$float": "nan"|"inf"|"-inf"}      non-finite floats
  {"$str": [count, "<unit>"]}         the text unit repeated count times
  {"$rbytes": [count, "<hex unit>"]}  the bytes unit repeated count times
  {"$array": [count, <value>]}        list of count copies of value
  {"$map": count}                     {"k0": 0, "k1": 1, ...} (count entries, in order)
Packed bytes in encode[]: "<hex>" when at most 4096 bytes, else {"len": n, "head": "<hex of first
64 bytes>", "fnv1a64": "<16 hex digits>"} (FNV-1a 64 over all bytes).

Sections:
  encode[]: value -> frame (use_bin_type=True) and salt_payload (use_bin_type=False) bytes.
  decode[]: bytes (packed by Python, or hand-made and accepted by Python) -> the value the
            C++ decoder must build: str family -> text if valid UTF-8 else bytes, bin -> bytes,
            int/bool/nil keys -> their text; "repack" names the packing that must give the
            same bytes back (canonical encodings only).
  errors[]: bytes Python refuses, with the wire errc the C++ decoder must return.
"""
import json
import math
import os
import struct
import sys

import msgpack
from msgpack import ExtType

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "fixtures", "vectors", "wire.json")
INLINE_MAX = 4096


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def bytes_out(data):
    if len(data) <= INLINE_MAX:
        return data.hex()
    return {"len": len(data), "head": data[:64].hex(), "fnv1a64": fnv1a64(data)}


# --- tagged notation <-> Python objects ----------------------------------------------
def from_tagged(t):
    if isinstance(t, dict):
        if len(t) == 1:
            (k, v), = t.items()
            if k == "$bytes":
                return bytes.fromhex(v)
            if k == "$ext":
                return ExtType(v[0], bytes.fromhex(v[1]))
            if k == "$float":
                return float(v)
            if k == "$str":
                return v[1] * v[0]
            if k == "$rbytes":
                return bytes.fromhex(v[1]) * v[0]
            if k == "$array":
                return [from_tagged(v[1]) for _ in range(v[0])]
            if k == "$map":
                return {"k%d" % i: i for i in range(v)}
        return {k: from_tagged(v) for k, v in t.items()}
    if isinstance(t, list):
        return [from_tagged(e) for e in t]
    return t


def to_tagged(o):
    """Python object (as the C++ model sees it) -> tagged JSON."""
    if isinstance(o, bool) or o is None or isinstance(o, int) or isinstance(o, str):
        return o
    if isinstance(o, float):
        if math.isnan(o):
            return {"$float": "nan"}
        if math.isinf(o):
            return {"$float": "inf" if o > 0 else "-inf"}
        return o
    if isinstance(o, (bytes, bytearray)):
        return {"$bytes": bytes(o).hex()}
    if isinstance(o, ExtType):
        return {"$ext": [o.code, o.data.hex()]}
    if isinstance(o, (list, tuple)):
        return [to_tagged(e) for e in o]
    if isinstance(o, dict):
        return {k: to_tagged(v) for k, v in o.items()}
    raise TypeError(type(o))


# --- the C++ decoding rules applied to Python's own unpacking -------------------------
def model_key(k):
    if isinstance(k, str):
        return k
    if isinstance(k, bytes):
        return k.decode("utf-8")  # vectors only use UTF-8 byte keys
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return str(k)
    raise TypeError("unsupported key %r" % (k,))


def model(o):
    """Value from unpackb(raw=False, unicode_errors='surrogateescape'): a str holding
    surrogates was a str-family object with invalid UTF-8 -> bytes."""
    if isinstance(o, str):
        try:
            o.encode("utf-8")
            return o
        except UnicodeEncodeError:
            return o.encode("utf-8", "surrogateescape")
    if isinstance(o, list):
        return [model(e) for e in o]
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            out[model_key(model(k))] = model(v)
        return out
    return o


def py_unpack(data):
    return msgpack.unpackb(data, raw=False, unicode_errors="surrogateescape",
                           strict_map_key=False, use_list=True)


# --- encode cases ---------------------------------------------------------------------
def encode_cases():
    c = []

    def add(name, tagged):
        c.append((name, tagged))

    add("nil", None)
    add("true", True)
    add("false", False)
    for i in [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]:
        add("uint %d" % i, i)
    for i in [-1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63]:
        add("int %d" % i, i)
    for f in [0.0, -0.0, 1.5, -2.25, 3.141592653589793, 1e300, 5e-324, 1.0, 1e16]:
        add("float %r" % f, f)
    for f in ["inf", "-inf", "nan"]:
        add("float " + f, {"$float": f})
    for n in [0, 1, 31, 32, 255, 256, 65535, 65536]:
        add("str len %d" % n, {"$str": [n, "a"]})
    add("str utf8 2-byte", "h\u00e9llo")
    add("str utf8 4-byte", "\U0001f600 salt")
    add("str 32 bytes of utf8 (16 chars)", {"$str": [16, "\u00e9"]})
    for n in [0, 1, 31, 32, 255, 256, 65535, 65536]:
        add("bytes len %d" % n, {"$rbytes": [n, "ab"]})
    add("bytes not utf8", {"$bytes": "fffe00c0"})
    add("bytes valid utf8", {"$bytes": "68656c6c6f"})
    add("ext 78 datetime", {"$ext": [78, b"20240102T03:04:05.123456".hex()]})
    add("ext 79 constant", {"$ext": [79, msgpack.packb(["Constant", None]).hex()]})
    for n in [0, 1, 2, 3, 4, 8, 16, 17, 255, 256, 65535, 65536]:
        add("ext 5 len %d" % n, {"$ext": [5, ("5a" * n)]})
    add("array empty", [])
    add("array 15", {"$array": [15, 1]})
    add("array 16", {"$array": [16, None]})
    add("array 65535", {"$array": [65535, 0]})
    add("array 65536", {"$array": [65536, 0]})
    add("map empty", {})
    add("map 15", {"$map": 15})
    add("map 16", {"$map": 16})
    add("map 65535", {"$map": 65535})
    add("map 65536", {"$map": 65536})
    add("nested", {"a": [1, [2, [3, {"b": {"c": [None, True, 1.5, {"$bytes": "00ff"}]}}]]], "z": {}})
    add("order kept", {"zeta": 1, "alpha": 2, "mid": 3, "beta": [4, "x"]})
    add("request frame", {
        "head": {"mid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"},
        "body": {"enc": "aes", "load": {"$rbytes": [300, "c3"]}, "version": 3,
                 "id": "minion-1", "enc_algo": "OAEP-SHA1", "sig_algo": "PKCS1v15-SHA1"},
    })
    add("publish payload", {
        "fun": "test.ping", "arg": [], "tgt": "*", "jid": "20240102030405123456",
        "ret": "", "tgt_type": "glob", "user": "root",
        "kwargs": {"delimiter": ":", "show_timeout": True, "timeout": 5.0, "n": -7},
        "tok": {"$rbytes": [4, "deadbeef"]},
    })
    return c


def decode_cases():
    """(name, bytes, repack packing or None)."""
    d = []

    def py(name, obj, same_keys=True, **kw):
        data = msgpack.packb(obj, **kw)
        # Repacking gives the same bytes only for canonical encodings whose map keys
        # were text (or raw str in the old spec) already.
        canonical = not kw.get("use_single_float", False) and same_keys
        repack = None
        if canonical:
            repack = "frame" if kw.get("use_bin_type", True) else "salt_payload"
        d.append((name, data, repack))

    def raw(name, hexs, repack=None):
        d.append((name, bytes.fromhex(hexs.replace(" ", "")), repack))

    sample = {"s": "text", "b": b"bytes", "x": b"\xff\xfe", "e": "h\u00e9", "n": [1, -1, 2**64 - 1, -2**63],
              "f": 0.1, "t": True, "z": None, "ext": ExtType(78, b"20240102T03:04:05.000001")}
    py("sample use_bin_type=True", sample, use_bin_type=True)
    py("sample use_bin_type=False", sample, use_bin_type=False)
    py("float32 0.1", 0.1, use_single_float=True)
    py("float32 list", [1.5, -0.0, 3.4e38, 1e-45], use_single_float=True)
    py("int keys", {1: "a", -5: "b", 300: "c"}, same_keys=False)
    py("bool and nil keys", {True: 1, False: 2, None: 3}, same_keys=False)
    py("bytes keys old spec", {b"head": {}, b"body": b"x"}, use_bin_type=False)
    py("bytes keys new spec", {b"head": {}, b"body": b"x"}, same_keys=False, use_bin_type=True)
    py("str32 in old spec", "q" * 70000, use_bin_type=False)
    py("ext sizes", [ExtType(1, b"a" * n) for n in (1, 2, 4, 8, 16, 3, 300)])
    # Hand-made non-canonical or unusual encodings (Python accepts them all).
    raw("int8 positive", "d0 05")
    raw("int8 -128", "d0 80")
    raw("int16 -1", "d1 ffff")
    raw("int32 min", "d2 80000000")
    raw("int64 min", "d3 8000000000000000", "frame")
    raw("int64 positive", "d3 0000000000000007")
    raw("uint64 small", "cf 0000000000000001")
    raw("uint64 max", "cf ffffffffffffffff", "frame")
    raw("uint16 small", "cd 0001")
    raw("str8 short", "d9 03 616263")
    raw("str16 short", "da 0003 616263")
    raw("str32 short", "db 00000003 616263")
    raw("bin32 short", "c6 00000002 0102")
    raw("array16 one", "dc 0001 c0")
    raw("array32 one", "dd 00000001 c3")
    raw("map16 one", "de 0001 a161 01")
    raw("map32 one", "df 00000001 a161 02")
    raw("duplicate keys last wins", "83 a161 01 a162 02 a161 03")
    raw("str invalid utf8", "a2 c0af")
    raw("str surrogate", "a3 eda080")
    raw("str overlong nul", "a2 c080")
    raw("str max code point", "a4 f48fbfbf", "frame")
    raw("str above max code point", "a4 f4908080")
    raw("ext8 empty", "c7 00 4e")
    raw("float32 inf", "ca 7f800000")
    raw("float64 nan", "cb 7ff8000000000000", "frame")
    raw("fixext16 79", "d8 4f " + "00" * 16, "frame")
    return d


def error_cases():
    """(name, bytes, errc) for inputs Python refuses."""
    e = []

    def raw(name, hexs, err):
        e.append((name, bytes.fromhex(hexs.replace(" ", "")), err))

    raw("reserved c1", "c1", "malformed")
    raw("reserved c1 in array", "92 01 c1", "malformed")
    raw("reserved c1 as map value", "81 a161 c1", "malformed")
    raw("empty", "", "incomplete")
    raw("truncated array", "92 01", "incomplete")
    raw("truncated str", "a3 6162", "incomplete")
    raw("truncated str16 header", "da 00", "incomplete")
    raw("truncated uint32", "ce 0000", "incomplete")
    raw("truncated float64", "cb 3ff0", "incomplete")
    raw("truncated map value", "81 a161", "incomplete")
    raw("truncated ext", "d6 4e 0000", "incomplete")
    raw("extra data", "01 02", "trailing_bytes")
    raw("extra data after map", "80 c0", "trailing_bytes")
    return e


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    enc = []
    for name, tagged in encode_cases():
        obj = from_tagged(tagged)
        frame = msgpack.packb(obj, use_bin_type=True)
        payload = msgpack.packb(obj, use_bin_type=False)
        enc.append({"name": name, "value": tagged, "frame": bytes_out(frame), "salt_payload": bytes_out(payload)})
    dec = []
    for name, data, repack in decode_cases():
        expected = model(py_unpack(data))
        item = {"name": name, "bytes": data.hex(), "value": to_tagged(expected)}  # always inline
        if repack:
            item["repack"] = repack
        dec.append(item)
    errs = []
    for name, data, err in error_cases():
        try:
            py_unpack(data)
        except msgpack.exceptions.ExtraData:
            got = "trailing_bytes"
        except msgpack.exceptions.FormatError:
            got = "malformed"
        except ValueError as ex:
            got = "incomplete" if "incomplete" in str(ex) else "malformed"
        else:
            raise AssertionError("Python accepted error case %r" % name)
        assert got == err, (name, got, err)
        errs.append({"name": name, "bytes": bytes_out(data), "error": err})
    doc = {
        "generator": "tests/vectors/wire_vectors.py",
        "python_msgpack": ".".join(map(str, msgpack.version)),
        "encode": enc,
        "decode": dec,
        "errors": errs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("wrote %s: %d encode, %d decode, %d error vectors" % (out_path, len(enc), len(dec), len(errs)))


if __name__ == "__main__":
    main()
