"""The operators' tools on sealed namespaces (FORMAT.md L180-L184, docs/sealed.md).

Method: a sealed tier (kvtier.FsTier with ``seal_key_file``, as a user opens it) and an unsealed
one store blocks on one root; the ``kvtier`` CLI (``kvtier_bin``) then runs over it, and files are
planted or damaged by hand where a rule says what a tool must find.

Proves: ``du`` reports the sealed namespace with its key id (the HMAC-SHA256 identity of L161,
computed here independently) and the unsealed one as unsealed; ``gc`` needs no key, counts a
sealed block as row + 4096, keeps every sound sealed block, a plain row one trailer short and a
truncated block (L181, L196: no row is declared), and removes an empty one as corrupt; ``fsck`` without a key checks each sealed
block's structure and reports a checksum-trailer block, a damaged record and another key's block
as ``seal_mismatch`` (L182) but cannot see a block moved from another path or a flipped bit, which
``--verify-data --seal-key-file`` then catches (L183), ``--repair`` removing them all; a key file
that is no key fails fsck naming the path and never its bytes; ``hash --seal-key-file`` (or a
sealed config.json) prints the sealed tier's own paths; a key mounted as a Kubernetes Secret
(symlinks, mode 0440 with ``seal_key_group_read``) works, and is refused without it; a key file
others can write is refused by the tier and every tool, naming the path (L174); ``bench fs --seal-key-file`` round-trips through a sealed tier and removes the
sealed namespace it wrote.
"""

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import kvtier
import seal_support
from seal_support import run_job

ROW = 8192
TRAILER = 4096
MODEL = "kvtier-test/sealed-tools"
TOKENS = list(range(16 * 6))


def namespace():
    return seal_support.namespace(MODEL)


def keys(n=6, seed="tools"):
    return kvtier.chunk_keys(kvtier.block_hashes(TOKENS[:16 * n], seed=seed))



def key_id(key_bytes):
    return hmac.new(key_bytes, b"kvtier seal key id v1", hashlib.sha256).digest()[:16].hex()


@pytest.fixture
def vol(tmp_path):
    """A root with a sealed namespace of 6 blocks (key A) and an unsealed one of 2; and key B."""
    root = tmp_path / "vol"
    root.mkdir()
    ka, kb = tmp_path / "a.key", tmp_path / "b.key"
    ka.write_bytes(bytes(range(32)))
    kb.write_bytes(bytes(range(100, 132)))
    ka.chmod(0o600)  # L174: readable by nobody else
    kb.chmod(0o600)
    sealed = {"root_dir": str(root), "seal_key_file": str(ka)}
    with kvtier.FsTier(namespace(), ROW, sealed) as t:
        rows = [bytearray(bytes([i]) * ROW) for i in range(6)]
        assert run_job(t, t.submit_store(keys(), rows)).outcomes == ["ok"] * 6
        paths = [t.block_path(k) for k in keys()]
    with kvtier.FsTier(namespace(), ROW, {"root_dir": str(root)}) as t:
        assert run_job(t, t.submit_store(keys(2), [bytearray(ROW)] * 2)).outcomes == ["ok"] * 2
    return type("Vol", (), {"root": root, "a": ka, "b": kb, "paths": paths, "sealed": sealed})


def cli(kvtier_bin, *args, ok=(0,)):
    proc = subprocess.run([kvtier_bin, *map(str, args)], capture_output=True, text=True, timeout=60)
    assert proc.returncode in ok, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def fsck(kvtier_bin, vol, *flags, ok=(0, 4)):
    proc = cli(kvtier_bin, "fsck", "--json", vol.root, *flags, ok=ok)
    return json.loads(proc.stdout), proc.returncode


def found(report):
    return sorted((f["kind"], os.path.basename(f["path"]), f["rule"], f["action"]) for f in report["findings"]
                  if f["kind"] != "empty_dir")


def test_du_shows_the_sealed_namespace_and_its_key_id(kvtier_bin, vol):
    du = json.loads(cli(kvtier_bin, "du", "--json", vol.root).stdout)
    by_seal = {n["sealed"]: n for n in du["namespaces"]}
    assert set(by_seal) == {True, False}, du
    assert by_seal[True]["seal_key_id"] == key_id(vol.a.read_bytes())
    assert by_seal[True]["blocks"] == 6 and by_seal[True]["bytes"] == 6 * (ROW + TRAILER)
    assert by_seal[False]["seal_key_id"] is None and by_seal[False]["blocks"] == 2
    assert by_seal[True]["dir"] != by_seal[False]["dir"]  # L162: a namespace of its own
    text = cli(kvtier_bin, "du", vol.root).stdout
    assert f"sealed (key id {key_id(vol.a.read_bytes())})" in text, text
    assert text.count(", sealed (key id") == 1
    py = {n.sealed: n for n in kvtier.du(str(vol.root)).namespaces}
    assert py[True].seal_key_id == key_id(vol.a.read_bytes()) and py[False].seal_key_id == ""


def test_gc_needs_no_key_and_sizes_sealed_blocks(kvtier_bin, vol):
    plain_row = vol.paths[0]
    with open(plain_row, "r+b") as f:  # one trailer short: a plain row's size (L181: kept by gc)
        f.truncate(ROW)
    with open(vol.paths[1], "r+b") as f:  # truncated mid-row: kept by gc (L196: no row is declared)
        f.truncate(ROW // 2)
    empty = vol.paths[5]
    Path(empty).write_bytes(b"")  # empty: no row is, whatever the majority (L196)
    gc = json.loads(cli(kvtier_bin, "gc", "--json", vol.root).stdout)
    assert [(os.path.basename(r["path"]), r["reason"]) for r in gc["reclaimed"]] == \
        [(os.path.basename(empty), "corrupt")], gc
    assert os.path.exists(plain_row) and all(os.path.exists(p) for p in vol.paths[1:5])
    # fsck judges the truncated one by its own record (L182, L196): none, so not a sealed block.
    report, rc = fsck(kvtier_bin, vol, "--repair", ok=(1, 4))
    assert ("seal_mismatch", os.path.basename(vol.paths[1]), "L182", "removed") in found(report), report
    assert ("seal_mismatch", os.path.basename(plain_row), "L182", "removed") in found(report), report
    vol.paths = vol.paths[2:5]  # what is left of the sealed blocks
    assert all(os.path.exists(p) for p in vol.paths)
    # The capacity bound counts row + 4096 per sealed block: with the sealed blocks the least
    # recently used (oldest first), 2 of the 3 and the unsealed namespace's 2 rows fit in
    # exactly this many bytes, so exactly the oldest sealed block goes.
    now = time.time()
    for i, path in enumerate(vol.paths):
        os.utime(path, (now - 1000 + i, now - 1000 + i))
    budget = 2 * (ROW + TRAILER) + 2 * ROW
    gc = json.loads(cli(kvtier_bin, "gc", "--json", "--ignore-lease", "--max-bytes", budget, vol.root).stdout)
    assert [(os.path.basename(r["path"]), r["bytes"], r["reason"]) for r in gc["reclaimed"]] == \
        [(os.path.basename(vol.paths[0]), ROW + TRAILER, "capacity")], gc
    assert all(os.path.getsize(p) == ROW + TRAILER for p in vol.paths[1:])


def plant_trailer_block(path):
    """A checksum-trailer block (L131/L132) of the right size: not a sealed block."""
    import struct
    crc = 0  # the record's CRC fields need not match: the magic alone makes it not sealed
    record = b"KVTRAILR" + struct.pack("<IIQI", 1, TRAILER, ROW, crc) + bytes(36)
    Path(path).write_bytes(bytes(ROW) + bytes(TRAILER - 64) + record)


def test_fsck_checks_structure_without_the_key_and_tags_with_it(kvtier_bin, vol, tmp_path):
    clean, rc = fsck(kvtier_bin, vol)
    assert rc == 0 and found(clean) == [] and clean["summary"]["sealed_checked"] == 6, clean
    p = vol.paths
    plant_trailer_block(p[0])
    with open(p[1], "r+b") as f:  # the record's row size, edited: damaged (L165)
        f.seek(ROW + TRAILER - 64 + 16)
        f.write((ROW * 2).to_bytes(8, "little"))
    other = tmp_path / "other"
    other.mkdir()
    with kvtier.FsTier(namespace(), ROW, {"root_dir": str(other), "seal_key_file": str(vol.b)}) as t:
        assert run_job(t, t.submit_store([keys()[2]], [bytearray(ROW)])).outcomes == ["ok"]
        shutil.copyfile(t.block_path(keys()[2]), p[2])  # another key's sealed block
    shutil.copyfile(p[5], p[3])  # moved from another path: structure sound, tag fails
    with open(p[4], "r+b") as f:  # one flipped bit of ciphertext
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    names = [os.path.basename(x) for x in p]
    report, rc = fsck(kvtier_bin, vol)
    assert rc == 4 and found(report) == sorted(
        [("seal_mismatch", names[i], "L182", "none") for i in range(3)]), report
    details = {os.path.basename(f["path"]): f["detail"] for f in report["findings"]}
    assert "checksum-trailer" in details[names[0]] and "cut or grown" in details[names[1]]
    assert key_id(vol.b.read_bytes()) in details[names[2]]
    report, rc = fsck(kvtier_bin, vol, "--verify-data", "--seal-key-file", vol.a, "--repair", ok=(1,))
    assert found(report) == sorted([("seal_mismatch", names[i], "L182", "removed") for i in range(3)] +
                                   [("seal_mismatch", names[i], "L183", "removed") for i in (3, 4)]), report
    assert report["summary"]["sealed_verified"] == 3  # blocks 3, 4 and 5 had sound records
    assert [os.path.exists(x) for x in p] == [False] * 5 + [True]
    again, _ = fsck(kvtier_bin, vol, "--verify-data", "--seal-key-file", vol.a)  # (empty shard dirs are young)
    assert found(again) == [] and again["summary"]["sealed_verified"] == 1, again


def test_fsck_repair_removes_no_block_for_a_seal_member_whose_config_fails_its_digest(kvtier_bin, vol):
    """A kvtier_seal member planted in the unsealed namespace's config.json, and the sealed one's
    key id edited to key B's: neither config.json hashes to its directory's digest (L79), so
    --repair reports the blocks it judges by them but removes none (L182)."""
    with kvtier.FsTier(namespace(), ROW, {"root_dir": str(vol.root)}) as t:
        plain_paths = [t.block_path(k) for k in keys(2)]
    by_seal = {n.sealed: vol.root / n.dir / "config.json" for n in kvtier.du(str(vol.root)).namespaces}
    seal_member = json.loads(by_seal[True].read_text())["kvtier_seal"]
    plain_config = json.loads(by_seal[False].read_text())
    by_seal[False].write_text(json.dumps(dict(plain_config, kvtier_seal=seal_member), sort_keys=True))
    sealed_config = json.loads(by_seal[True].read_text())
    sealed_config["kvtier_seal"]["key_id"] = key_id(vol.b.read_bytes())
    by_seal[True].write_text(json.dumps(sealed_config, sort_keys=True))
    report, rc = fsck(kvtier_bin, vol, "--repair", ok=(1, 4))
    kinds = [f["kind"] for f in report["findings"]]
    assert kinds.count("config_digest_mismatch") == 2, report
    assert kinds.count("seal_mismatch") == 8 and "removed" not in [f["action"] for f in report["findings"]
                                                                   if f["kind"] == "seal_mismatch"], report
    assert all("not trusted" in f["detail"] for f in report["findings"] if f["kind"] == "seal_mismatch")
    assert all(os.path.exists(x) for x in vol.paths + plain_paths), report


def test_fsck_refuses_a_key_file_that_is_no_key_without_printing_it(kvtier_bin, vol, tmp_path):
    bad = tmp_path / "bad.key"
    secret = b"S3CRET-NOT-A-KEY-" * 3
    bad.write_bytes(secret)
    bad.chmod(0o600)
    proc = cli(kvtier_bin, "fsck", "--verify-data", "--seal-key-file", bad, vol.root, ok=(8,))
    assert str(bad) in proc.stderr and b"S3CRET".decode() not in proc.stdout + proc.stderr, proc.stderr
    proc = cli(kvtier_bin, "fsck", "--seal-key-file", vol.a, vol.root, ok=(106, 105, 2, 8, 1))
    assert "--verify-data" in proc.stderr, proc.stderr  # a key checks nothing without it


def test_hash_prints_the_sealed_namespaces_paths(kvtier_bin, vol):
    base = ["hash", "--tokens", ",".join(map(str, TOKENS)), "--seed", "tools", "--model", MODEL,
            "--num-layers", "1", "--layer-name-template", "l{}", "--root", vol.root, "--json"]
    plain = json.loads(cli(kvtier_bin, *base).stdout)
    sealed = json.loads(cli(kvtier_bin, *base, "--seal-key-file", vol.a).stdout)
    assert [c["path"] for c in sealed["chunks"]] == vol.paths
    assert all(c["exists"] for c in sealed["chunks"])
    assert [c["path"] for c in plain["chunks"]] != vol.paths  # without a key: the unsealed namespace
    assert all(c["exists"] for c in plain["chunks"][:2])
    # A sealed namespace's config.json names its key: its paths need no key (L184).
    sealed_dir = [n.dir for n in kvtier.du(str(vol.root)).namespaces if n.sealed][0]
    by_config = ["hash", "--tokens", ",".join(map(str, TOKENS)), "--seed", "tools", "--root", vol.root, "--json",
                 "--namespace-config", vol.root / sealed_dir / "config.json"]
    assert [c["path"] for c in json.loads(cli(kvtier_bin, *by_config).stdout)["chunks"]] == vol.paths
    assert [c["path"] for c in json.loads(cli(kvtier_bin, *by_config, "--seal-key-file", vol.a).stdout)["chunks"]] \
        == vol.paths
    other_key = cli(kvtier_bin, *by_config, "--seal-key-file", vol.b, ok=(2,))
    assert key_id(vol.b.read_bytes()) in other_key.stderr, other_key.stderr


def test_a_key_mounted_as_a_kubernetes_secret_works(kvtier_bin, vol, tmp_path):
    """A Secret volume's file is a symlink into a timestamped directory through ``..data``
    (the kubelet swaps ``..data`` on update): the tier and the tools follow it."""
    secret = tmp_path / "secret"
    (secret / "..2026_11_27_00_00_00.000000001").mkdir(parents=True)
    stamped = secret / "..2026_11_27_00_00_00.000000001" / "seal.key"
    shutil.copyfile(vol.a, stamped)
    stamped.chmod(0o440)  # defaultMode 0440 with fsGroup: group-readable
    (secret / "..data").symlink_to("..2026_11_27_00_00_00.000000001")
    (secret / "seal.key").symlink_to("..data/seal.key")
    mounted = dict(vol.sealed, seal_key_file=str(secret / "seal.key"))
    with pytest.raises(kvtier.KvtierError, match="seal_key_group_read"):
        kvtier.FsTier(namespace(), ROW, mounted)
    mounted["seal_key_group_read"] = True
    with kvtier.FsTier(namespace(), ROW, mounted) as t:
        out = [bytearray(ROW)]
        assert run_job(t, t.submit_load([keys()[3]], out)).outcomes == ["ok"] and out[0] == bytes([3]) * ROW
    refused = cli(kvtier_bin, "fsck", "--verify-data", "--seal-key-file", secret / "seal.key", vol.root, ok=(8,))
    assert "seal-key-group-read" in refused.stderr, refused.stderr
    report, rc = fsck(kvtier_bin, vol, "--verify-data", "--seal-key-file", secret / "seal.key",
                      "--seal-key-group-read")
    assert rc == 0 and report["summary"]["sealed_verified"] == 6, report
    py = kvtier.fsck(str(vol.root), verify_data=True, seal_key_files=[str(secret / "seal.key")],
                     seal_key_group_read=True)
    assert py.exit_code == 0 and py.sealed_checked == 6 and py.sealed_verified == 6


def test_a_key_file_others_can_write_is_refused_everywhere(kvtier_bin, vol):
    """L174: whoever can write the key file chooses the key; the tier, fsck, hash and bench all
    refuse it before reading it, naming the path."""
    vol.a.chmod(0o622)
    with pytest.raises(kvtier.KvtierError, match=str(vol.a)):
        kvtier.FsTier(namespace(), ROW, vol.sealed)
    for args in (["fsck", "--verify-data", "--seal-key-file", vol.a, vol.root],
                 ["hash", "--tokens", ",".join(map(str, TOKENS)), "--seed", "tools", "--model", MODEL,
                  "--num-layers", "1", "--layer-name-template", "l{}", "--seal-key-file", vol.a],
                 ["bench", "fs", "--root", vol.root, "--row-bytes", 4096, "--rows", 1, "--seal-key-file", vol.a]):
        proc = cli(kvtier_bin, *args, ok=(2, 8, 1))
        assert str(vol.a) in proc.stderr and "writable by its group or others" in proc.stderr, (args, proc.stderr)
    with pytest.raises(kvtier.KvtierError, match="writable"):
        kvtier.fsck(str(vol.root), verify_data=True, seal_key_files=[str(vol.a)], seal_key_group_read=True)


def test_bench_fs_runs_sealed_and_removes_its_sealed_namespace(kvtier_bin, vol, tmp_path):
    """`kvtier bench fs --seal-key-file` (bench/sealed.sh's sealed mode): every row round-trips
    through a sealed tier, and the run removes the namespace it wrote (the key's)."""
    root = tmp_path / "bench"
    root.mkdir()
    out = json.loads(cli(kvtier_bin, "bench", "fs", "--root", root, "--row-bytes", 4096, "--rows", 8,
                         "--seal-key-file", vol.a, "--json", "--keep").stdout)
    assert out["rows_verified"] == 8 and out["rows_corrupt"] == 0, out
    du = kvtier.du(str(root)).namespaces
    assert [(n.sealed, n.seal_key_id, n.blocks) for n in du] == [(True, key_id(vol.a.read_bytes()), 8)]
    assert all(f.stat().st_size == 4096 + TRAILER for f in root.rglob("*.bin"))
    cli(kvtier_bin, "bench", "fs", "--root", root, "--row-bytes", 4096, "--rows", 8, "--seal-key-file", vol.a)
    assert list(root.rglob("*.bin")) == [], "the run removes the sealed namespace it wrote"
