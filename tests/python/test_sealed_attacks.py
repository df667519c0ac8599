"""A co-tenant with write access to the shared volume against the fs tier, unsealed and sealed.

Method: a victim instance (kvtier.FsTier, as a user opens it) stores blocks; an attacker, a real
separate process (the Debian interpreter run with ``-c``, its own uid's write access and nothing
else: no key), plants a file at the path of a known prefix's block, replacing it by rename as any
writer of the volume can; a fresh instance then loads that prefix. The plants: (a) a row without
any checksum, (b) a row with its correct CRC32C in the attribute vLLM PR #57912 reads, and one
with a valid ``KVTRAILR`` checksum trailer, (c) a valid block copied from another path of the same
namespace, (d) the attacker's own block for the same prefix from another namespace (sealed: under
the attacker's own key), (e) the victim's block truncated, and extended, (f) the same path's
earlier block (a replay of an older version).

Proves, through kvtier.FsTier, for the unsealed namespace which plants are served today (the
threat: every checksum a writer can compute is no defence, so (a)-(d) are served with the
attacker's bytes), and for the sealed namespace that none of (a)-(e) is served, each counted once in ``auth_failures``
(``kvtier_fs_auth_failures_total``), while (f) is served: a replay of the same path's own earlier
block under the same key is not detected (docs/sealed.md says so). Also: a reader without the key
who greps every file on the volume finds no plaintext of a pattern stored through the sealed
tier, nor the key (the same grep finds the pattern on an unsealed volume: the grep can fail).
The same for plant (b) through vLLM's own offloading manager and kvtier.vllm (skipped where
../shared/vllm is absent): the engine gets the attacker's row unsealed, the prefix before it
sealed. The attack table of docs/sealed.md is this test's output (``-s`` prints it).
"""

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kvtier
import seal_support
from seal_support import run_job

ROW = 8192
TRAILER = 4096
CRC_XATTR = "user.vllm.kv_crc32c"
PATTERN = b"KVTIER-SECRET-PROMPT-0123456789/"  # 32 bytes, repeated to fill a row

# The attacker: another process, with write access to the volume only. It reads a plan on
# stdin (repr of a dict) and performs it at `path`: write `data` to a temp file, copy or
# truncate, set the CRC attribute if given, rename over the victim's path.
ATTACKER = r"""
import ast, os, sys
plan = ast.literal_eval(sys.stdin.read())
path = plan["path"]
os.makedirs(os.path.dirname(path), exist_ok=True)
tmp = path + ".attacker"
if "copy_from" in plan:
    with open(plan["copy_from"], "rb") as f:
        data = f.read()
    xattrs = {n: os.getxattr(plan["copy_from"], n) for n in os.listxattr(plan["copy_from"]) if n.startswith("user.")}
else:
    data, xattrs = plan.get("data", b""), {}
if "resize" in plan:
    with open(path, "rb") as f:
        data = f.read()
    xattrs = {n: os.getxattr(path, n) for n in os.listxattr(path) if n.startswith("user.")}
    data = data[:plan["resize"]] + b"\0" * max(0, plan["resize"] - len(data))
with open(tmp, "wb") as f:
    f.write(data)
for name, value in dict(xattrs, **plan.get("xattrs", {})).items():
    os.setxattr(tmp, name, value)
os.rename(tmp, path)
"""


def attacker(plan):
    proc = subprocess.run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, "-c",
                           ATTACKER], input=repr(plan), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"the attacker process failed: {proc.stderr}"


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def trailer_for(row):
    """FORMAT.md L132: 4032 zero bytes, then the 64-byte KVTRAILR record."""
    head = b"KVTRAILR" + struct.pack("<IIQI", 1, TRAILER, len(row), crc32c(row)) + bytes(32)
    return bytes(TRAILER - 64) + head + struct.pack("<I", crc32c(head))


def keys_for(salt, n=1):
    return kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * n)), seed=salt))


def namespace(model="kvtier-test/sealed-attacks"):
    return seal_support.namespace(model)



def store(tier, key, row):
    assert run_job(tier, tier.submit_store([key], [bytearray(row)])).outcomes == ["ok"]


def row_of(tag):
    return (tag.encode() * ROW)[:ROW]


def key_file(path, byte):
    path.write_bytes(bytes([byte]) * 32)
    path.chmod(0o400)
    return str(path)


def xattrs_work(root):
    probe = Path(root) / ".xattr-probe"
    probe.write_bytes(b"x")
    try:
        os.setxattr(probe, CRC_XATTR, b"\0\0\0\0")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def plant_all(victim, other, root, cases):
    """Stores the victim's blocks, then has the attacker plant each case; returns
    {case: the bytes the attacker wants served}."""
    want = {}
    for case in cases:
        key = keys_for("victim-" + case)[0]
        path = victim.block_path(key)
        mine = row_of("attacker-" + case + "-")
        if case in ("e_truncated", "e_extended", "f_replay"):
            store(victim, key, row_of("victim-" + case + "-"))
        if case == "a_plain":
            attacker({"path": path, "data": mine})
        elif case == "b_crc_xattr":
            attacker({"path": path, "data": mine + trailer_for(mine)})  # a sealed block's size: lookups find it
        elif case == "b_crc_trailer":
            attacker({"path": path, "data": mine + trailer_for(mine)})
        elif case == "c_moved":
            elsewhere = keys_for("elsewhere-" + case)[0]
            store(victim, elsewhere, mine)  # a block the victim itself wrote, at another path
            attacker({"path": path, "copy_from": victim.block_path(elsewhere)})
        elif case == "d_other_namespace":
            store(other, key, mine)  # the attacker's own block for this very prefix
            attacker({"path": path, "copy_from": other.block_path(key)})
        elif case == "e_truncated":
            attacker({"path": path, "resize": os.path.getsize(path) - TRAILER // 2})
            mine = None
        elif case == "e_extended":
            attacker({"path": path, "resize": os.path.getsize(path) + TRAILER})
            mine = None
        elif case == "f_replay":
            attacker({"path": path + ".old", "copy_from": path})  # the attacker keeps today's block
            os.unlink(path)  # the block ages out; the victim stores a newer one
            store(victim, key, row_of("victim-newer-" + case + "-"))
            attacker({"path": path, "copy_from": path + ".old"})
            os.unlink(path + ".old")
            mine = row_of("victim-" + case + "-")
        want[case] = mine
    return want


def served(reader, cases, want):
    """{case: (served?, outcome, auth_failures counted by this load)}."""
    out = {}
    for case in cases:
        key = keys_for("victim-" + case)[0]
        before = reader.metrics().get("auth_failures", 0)
        buf = bytearray(ROW)
        res = run_job(reader, reader.submit_load([key], [buf]))
        got = res.outcomes[0]
        is_served = got == "ok" and (want[case] is None or bytes(buf) == want[case])
        out[case] = (is_served, got, reader.metrics().get("auth_failures", 0) - before)
    return out


CASES = ["a_plain", "b_crc_xattr", "b_crc_trailer", "c_moved", "d_other_namespace", "e_truncated",
         "e_extended", "f_replay"]


def attack(root, config, other_config, other_ns):
    cases = [c for c in CASES if c != "b_crc_xattr" or xattrs_work(root)]
    with kvtier.FsTier(namespace(), ROW, config) as victim, \
            kvtier.FsTier(other_ns, ROW, other_config) as other:
        want = plant_all(victim, other, root, cases)
    with kvtier.FsTier(namespace(), ROW, config) as reader:  # a fresh instance, nothing cached
        result = served(reader, cases, want)
        text = reader.prometheus_text()
    return result, text


def table(title, result):
    lines = [f"{title}:"] + [f"  {c:20s} {'SERVED' if s else 'refused'} ({o}, auth_failures +{n})"
                             for c, (s, o, n) in result.items()]
    print("\n".join(lines))


def test_unsealed_namespace_serves_what_a_co_tenant_plants(tmp_path):
    root = tmp_path / "vol"
    root.mkdir()
    config = {"root_dir": str(root)}
    result, _ = attack(root, config, config, namespace("kvtier-test/another-model"))
    table("unsealed (today)", result)
    # The threat: whatever checksum a writer can compute, the planted bytes are served.
    for case in ("a_plain", "b_crc_xattr", "b_crc_trailer", "c_moved", "d_other_namespace", "f_replay"):
        if case in result:
            assert result[case][0], (case, result[case])
    # Only a wrong length is refused (L65, L66).
    assert not result["e_truncated"][0] and not result["e_extended"][0]


def test_sealed_namespace_serves_no_plant_and_counts_each(tmp_path):
    root = tmp_path / "vol"
    root.mkdir()
    keys = tmp_path / "keys"
    keys.mkdir()
    config = {"root_dir": str(root), "seal_key_file": key_file(keys / "victim.key", 0x11)}
    theirs = {"root_dir": str(root), "seal_key_file": key_file(keys / "attacker.key", 0x22)}
    result, text = attack(root, config, theirs, namespace())
    table("sealed", result)
    for case, (is_served, outcome, counted) in result.items():
        if case == "f_replay":
            continue
        assert not is_served and outcome != "ok", (case, outcome)
        assert counted == 1, (case, counted)
    # A replay of the same path's own earlier block is authentic under the key: served.
    assert result["f_replay"][0] and result["f_replay"][2] == 0
    total = sum(n for _, _, n in result.values())
    assert f"kvtier_fs_auth_failures_total{{tier=\"fs0\"}} {total}" in text, text


def grep_volume(root, needles):
    """What a reader without the key finds: every regular file on the volume, read whole by
    another process, searched for each needle. Returns the needles found and where."""
    script = ("import os, sys\n"
              "needles = [bytes.fromhex(n) for n in sys.argv[2:]]\n"
              "for d, _, files in os.walk(sys.argv[1]):\n"
              "    for f in files:\n"
              "        p = os.path.join(d, f)\n"
              "        if os.path.islink(p) or not os.path.isfile(p): continue\n"
              "        data = open(p, 'rb').read()\n"
              "        for n in needles:\n"
              "            if n in data: print(n.hex(), p)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(root)] + [n.hex() for n in needles],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def store_pattern(config):
    with kvtier.FsTier(namespace("kvtier-test/grep"), ROW, config) as tier:
        for i, key in enumerate(keys_for("grep", 8)):
            store(tier, key, PATTERN * (ROW // len(PATTERN)))


def test_a_reader_without_the_key_finds_no_plaintext(tmp_path):
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    plain.mkdir()
    sealed.mkdir()
    key = key_file(tmp_path / "seal.key", 0x5A)
    key_bytes = Path(key).read_bytes()
    needles = [PATTERN, PATTERN[:16], key_bytes, key_bytes.hex().encode()]
    store_pattern({"root_dir": str(plain)})
    store_pattern({"root_dir": str(sealed), "seal_key_file": key})
    assert grep_volume(plain, [PATTERN]), "the grep must find the pattern where blocks are not sealed"
    found = grep_volume(sealed, needles)
    assert found == [], found
    assert len(list(sealed.rglob("*.bin"))) == 8


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
def test_through_vllms_manager(h, tmp_path, sealed):
    """Plant (b), a row with a valid checksum trailer (the size of a sealed block, so a lookup finds
    it), through vLLM's own offloading manager (kvtier.vllm): unsealed, the engine gets the
    attacker's row for the prefix's third chunk; sealed, it gets the two chunks before it (a miss
    from there: recomputed), the planted file is removed and vLLM's stats count it."""
    keys = {"seal_key_file": key_file(tmp_path / "seal.key", 0x33)} if sealed else {}
    salt = "vllm-" + ("sealed" if sealed else "unsealed")
    prompts = [h.chunk_keys(i, salt) for i in range(3)]  # 12 chunks through 8 CPU rows
    eng = h.Engine([h.kvtier_tier(tmp_path / "vol", **keys)])
    try:
        eng.store_prompts(prompts)
        path = eng.tiers[0]._tier.block_path(prompts[0][2])
        mine = (b"planted!" * h.ROW)[:h.ROW]
        attacker({"path": path, "data": mine + trailer_for(mine)})  # a sealed block's size: lookups find it
        n, data = eng.fetch(prompts[0])
        if not sealed:
            assert n == 4 and data[2] == mine, "unsealed: the planted row is what the engine gets"
            return
        assert n == 2 and data == [h.content(k) for k in prompts[0][:2]], n
        assert not os.path.exists(path), "the planted file is removed"
        eng.idle()
        stats = eng.m.get_stats().data["data"]
        assert sum(stats.get("kvtier:fs_auth_failures", {}).values()) == 1, stats
    finally:
        eng.shutdown()
