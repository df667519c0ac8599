"""A co-tenant's planted majority cannot talk the operators' tools into deleting valid blocks
(FORMAT.md L196, L182, L183; issue 43 item 1).

Method: real blocks written by a real tier (kvtier.FsTier, sealed with ``seal_key_file`` or not)
beside many more files a co-tenant plants at valid block names, all of one other size, so that
size is the namespace's most common one; then the ``kvtier`` CLI (``fsck --repair``, ``gc``) runs
over the volume without the key, as an operator runs it, and the real blocks are loaded again.

Proves:
* sealed, 60 planted files of row + 8192 bytes beside 20 real blocks (the repro): ``fsck
  --repair`` keeps all 20 (they load byte-exact after) and removes the planted ones, which carry
  no seal record, as ``seal_mismatch``; ``gc`` keeps all 20;
* sealed, the planted files carrying well-formed seal records of the namespace's key id for their
  own size: nothing real is removed, the planted ones are kept as ``size_mismatch`` and the
  namespace is reported ``suspect_sizes``; with the key (``--verify-data --seal-key-file``) their
  tags fail and ``--repair`` removes them, the real ones still kept;
* unsealed (vLLM's plain rows), 60 planted longer files: neither ``fsck --repair`` nor ``gc``
  removes any of the 20 real rows (they are reported as ``size_mismatch`` and the namespace as
  ``suspect_sizes``); with ``--row-bytes`` the operator settles it and the real rows are clean;
* an empty file is still removed by its size alone, whatever the majority.
Seeded random rows; the seed is in each assertion's message.
"""

import json
import os
import random
import struct
import subprocess
from pathlib import Path

import pytest

import kvtier
import seal_support
from seal_support import run_job

ROW = 8192
SEAL_TRAILER = 4096
REAL, PLANTED = 20, 60
SEED = int(os.environ.get("KVTIER_TEST_SEED", "4343"))


def block_keys(n, seed):
    tokens = list(range(16 * n))
    return kvtier.chunk_keys(kvtier.block_hashes(tokens, seed=seed))


def cli(kvtier_bin, *args, ok=(0,)):
    proc = subprocess.run([kvtier_bin, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode in ok, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


class Volume:
    """REAL blocks stored by a real tier, and PLANTED paths beside them (not yet written)."""

    def __init__(self, tmp_path, sealed):
        self.root = tmp_path / "vol"
        self.root.mkdir()
        self.key = tmp_path / "seal.key"
        self.key.write_bytes(bytes(range(7, 39)))
        self.key.chmod(0o600)
        self.config = {"root_dir": str(self.root)}
        if sealed:
            self.config["seal_key_file"] = str(self.key)
        rng = random.Random(SEED)
        self.rows = [bytes(rng.getrandbits(8) for _ in range(ROW)) for _ in range(REAL)]
        self.keys = block_keys(REAL, "real")
        with self.tier() as t:
            assert run_job(t, t.submit_store(self.keys, [bytearray(r) for r in self.rows])).outcomes == ["ok"] * REAL
            self.paths = [t.block_path(k) for k in self.keys]
            self.planted = [t.block_path(k) for k in block_keys(PLANTED, "planted")]

    def tier(self):
        return kvtier.FsTier(seal_support.namespace("kvtier-test/planted"), ROW, self.config)

    def plant(self, size, tail=b""):
        for p in self.planted:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            Path(p).write_bytes(os.urandom(size - len(tail)) + tail)

    def real_blocks_load(self):
        with self.tier() as t:
            out = [bytearray(ROW) for _ in range(REAL)]
            outcomes = run_job(t, t.submit_load(self.keys, out)).outcomes
        return outcomes == ["ok"] * REAL and [bytes(o) for o in out] == self.rows


def fsck(kvtier_bin, vol, *flags):
    proc = cli(kvtier_bin, "fsck", "--json", *flags, vol.root, ok=(0, 1, 4))
    return json.loads(proc.stdout)


def rel(vol, paths):
    return sorted(os.path.relpath(p, vol.root) for p in paths)


def findings(report, kind, action=None):
    return sorted(f["path"] for f in report["findings"] if f["kind"] == kind and action in (None, f["action"]))


@pytest.fixture
def sealed_vol(tmp_path):
    return Volume(tmp_path, sealed=True)


@pytest.fixture
def plain_vol(tmp_path):
    return Volume(tmp_path, sealed=False)


def test_sealed_fsck_and_gc_keep_real_blocks_beside_a_planted_majority(kvtier_bin, sealed_vol):
    vol = sealed_vol
    vol.plant(ROW + 2 * SEAL_TRAILER)  # the repro: row + 8192, no seal record
    gc = json.loads(cli(kvtier_bin, "gc", "--json", vol.root).stdout)
    assert gc["reclaimed"] == [], gc
    report = fsck(kvtier_bin, vol, "--repair")
    assert findings(report, "seal_mismatch", "removed") == rel(vol, vol.planted), report
    assert all(os.path.exists(p) for p in vol.paths), f"seed {SEED}: fsck removed real blocks"
    assert not any(os.path.exists(p) for p in vol.planted)
    assert vol.real_blocks_load(), f"seed {SEED}"


def sound_record_tail(vol, size):
    """A file's last 80 bytes as a sealed block of `size` bytes carries them: the namespace's
    key id (public: config.json names it) and a well-formed record; the tag is garbage."""
    real_tail = Path(vol.paths[0]).read_bytes()[-80:]
    key_id = real_tail[:16]
    record = b"KVTSEAL1" + struct.pack("<IIQ", 1, SEAL_TRAILER, size - SEAL_TRAILER) + os.urandom(40)
    return key_id + record


def test_sealed_planted_records_are_kept_as_suspect_until_the_key_judges_them(kvtier_bin, sealed_vol):
    vol = sealed_vol
    size = ROW + 3 * SEAL_TRAILER
    vol.plant(size, sound_record_tail(vol, size))
    report = fsck(kvtier_bin, vol, "--repair")
    assert findings(report, "size_mismatch", "none") == rel(vol, vol.paths), report  # the real ones: minority
    assert all(os.path.exists(p) for p in vol.paths + vol.planted), f"seed {SEED}: nothing goes without the key"
    suspect = findings(report, "suspect_sizes")
    assert len(suspect) == 1 and "--verify-data" in [f for f in report["findings"]
                                                      if f["kind"] == "suspect_sizes"][0]["detail"], report
    report = fsck(kvtier_bin, vol, "--repair", "--verify-data", "--seal-key-file", vol.key)
    assert findings(report, "seal_mismatch", "removed") == rel(vol, vol.planted), report
    assert all(os.path.exists(p) for p in vol.paths) and vol.real_blocks_load(), f"seed {SEED}"


def test_plain_rows_are_never_outvoted_by_planted_longer_files(kvtier_bin, plain_vol):
    vol = plain_vol
    vol.plant(ROW + 2 * 4096)
    gc = json.loads(cli(kvtier_bin, "gc", "--json", vol.root).stdout)
    assert gc["reclaimed"] == [], f"seed {SEED}: gc removed real rows: {gc}"
    report = fsck(kvtier_bin, vol, "--repair")
    assert findings(report, "size_mismatch", "removed") == [], report
    assert findings(report, "size_mismatch", "none") == rel(vol, vol.paths), report
    assert len(findings(report, "suspect_sizes")) == 1, report
    assert all(os.path.exists(p) for p in vol.paths) and vol.real_blocks_load(), f"seed {SEED}"
    given = fsck(kvtier_bin, vol, "--row-bytes", ROW)  # the operator settles the row
    assert findings(given, "size_mismatch") == rel(vol, vol.planted), given
    assert findings(given, "suspect_sizes") == [], given


def test_an_empty_block_goes_whatever_the_majority(kvtier_bin, plain_vol):
    vol = plain_vol
    vol.plant(ROW + 4096 * 2)
    Path(vol.paths[0]).write_bytes(b"")  # a power cut's zero-length file: no row is empty
    gc = json.loads(cli(kvtier_bin, "gc", "--json", vol.root).stdout)
    assert [(os.path.basename(r["path"]), r["reason"]) for r in gc["reclaimed"]] == \
        [(os.path.basename(vol.paths[0]), "corrupt")], gc
    assert all(os.path.exists(p) for p in vol.paths[1:])
