#!/usr/bin/env python3
"""Generates tests/data/py_golden.json: reference bytes computed by CPython's own
pickle (protocol 5, the C pickler) and json modules, for the kvtier unit tests
of the pickle writer and the Python-compatible JSON writer.

Objects are described in a tiny JSON form the C++ tests rebuild:
  {"t": "int", "v": "<decimal>"} | {"t": "str", "v": "..."} | {"t": "bytes", "hex": "..."}
  | {"t": "none"} | {"t": "tuple", "items": [...]}
  | {"t": "int_tuple", "start": a, "count": n, "mod": m}: tuple(a + (i % m if m else i))
Strings are built fresh from that description, so only CPython's cached
singleton strings (empty, one Latin-1 character) are shared objects: the same
identity rule kvtier's pickle writer implements.

Run: python3 tests/data/gen_py_golden.py > tests/data/py_golden.json
"""
import json
import pickle
import sys

assert pickle.HIGHEST_PROTOCOL == 5


def build(d):
    t = d["t"]
    if t == "int":
        return int(d["v"])
    if t == "str":
        return "".join(list(d["v"]))  # a fresh object unless CPython caches it
    if t == "bytes":
        return bytes.fromhex(d["hex"])
    if t == "none":
        return None
    if t == "tuple":
        return tuple(build(x) for x in d["items"])
    if t == "int_tuple":
        m = d["mod"]
        return tuple(d["start"] + (i % m if m else i) for i in range(d["count"]))
    raise ValueError(t)


def I(v):
    return {"t": "int", "v": str(v)}


def S(v):
    return {"t": "str", "v": v}


def B(h):
    return {"t": "bytes", "hex": h}


def T(*items):
    return {"t": "tuple", "items": list(items)}


NONE = {"t": "none"}
H32 = "00" * 31 + "01"

int_edges = [0, 1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31, -1, -128, -129,
             -255, -256, -32768, -32769, -(2**31), -(2**31) - 1, 2**32 + 5, 2**63 - 1, 2**63,
             -(2**63), -(2**63) - 1, 2**64, -(2**64), 2**64 - 1, 255 * 2**56, -(2**71),
             -(2**72), 2**2031, 2**2032 - 1, 2**2039, 2**2040, -(2**2039), -(2**2040),
             151643, 10**40]

cases = []


def add(name, desc):
    cases.append({"name": name, "object": desc,
                  "pickle_hex": pickle.dumps(build(desc), protocol=5).hex()})


for idx, v in enumerate(int_edges):
    add(f"int_{v}" if abs(v) < 10**20 else f"int{idx}_bits{abs(v).bit_length()}_{'neg' if v < 0 else 'pos'}", I(v))
add("none", NONE)
add("empty_str", S(""))
add("str_a", S("a"))
add("str_unicode", S("naïve café 😀 €"))
add("str_300", S("x" * 300))
add("str_70000", S("y" * 70000))
add("bytes_32", B(H32))
add("bytes_300", B("ab" * 300))
add("empty_tuple", T())
for n in range(1, 6):
    add(f"tuple_{n}", T(*[I(i) for i in range(n)]))
add("block_16", T(B(H32), T(*[I(i) for i in range(16)]), NONE))
add("block_extra_keys", T(B(H32), T(*[I(i) for i in range(16)]),
                          T(S("my-lora"), T(S("mm-a"), I(-12)), S("salt"), B("cd" * 32))))
add("singleton_strings_memo", T(S("a"), S("a"), S(""), S(""), S("é"), S("é"), S("€"), S("€"), S("ab"), S("ab")))
add("nested_memo_many", T(*[S(chr(97 + (i % 26))) for i in range(300)]))
# 20000 tokens of 5-byte BININT: the token tuple crosses the 64 KiB frame target.
add("block_20000_tokens", T(B(H32), {"t": "int_tuple", "start": 151643, "count": 20000, "mod": 0}, NONE))
add("block_70000_small_tokens", T(B(H32), {"t": "int_tuple", "start": 0, "count": 70000, "mod": 256}, T(S("lora"))))
add("big_str_inside_tuple", T(S("z" * 65536), I(7), S("w" * 65535)))

json_strings = ["", "plain", "quote\"back\\slash", "ctl\x00\x01\x1f\x7f", "nl\n cr\r tab\t bs\b ff\f",
                "naïve", "€", "😀", "mixed 日本語 and 🎉🎉", "/slash/", "\u2028\u2029", "\ud7ff\ue000\uffff"]
json_docs = [
    {"b": 1, "a": [1, 2, {"z": True, "y": False, "x": None}], "é": "ü", "€": [], "😀": {}, "A": -5},
    {"model_name": "org/Мodel-日本", "tokens_per_hash": 16, "kv_cache_groups": [
        {"tokens_per_block": 16, "layer_names": ["l.0", "l.1"]}], "parallel_agnostic": False},
    [],
    {},
    [[], {}, [[]], {"k": {}}],
    {"big": 2**63 - 1, "neg": -(2**63)},
]
print(json.dumps({
    "generator": "tests/data/gen_py_golden.py",
    "python": sys.version.split()[0],
    "pickle": cases,
    "json_strings": [{"value": s, "dumps": json.dumps(s)} for s in json_strings],
    "json_docs": [{"value": d, "compact": json.dumps(d, sort_keys=True, separators=(",", ":")),
                   "indent2": json.dumps(d, indent=2, sort_keys=True)} for d in json_docs],
}, ensure_ascii=True))
