"""kvtier on a root without user xattrs (``bindfs --xattr-none``, and the project's fault filesystem
told to fail every xattr call with EOPNOTSUPP: both answer "operation not supported", as
NFSv3/v4.1, EFS, Filestore and Azure Files do), under vLLM's own code (vllm-project/vllm
``vllm/v1/kv_offload/tiering/`` at commit 7cfb97e33791, run from ../shared/vllm). FORMAT.md L130-L137.

Proves: kvtier's tier starts there with the default config and puts each block's CRC32C in a
trailer (files of row + 4096 bytes, no xattr); vLLM's own fs tier (its manager and its reader,
vllm/v1/kv_offload/tiering/fs/io.py) finds and loads kvtier's blocks byte-exact there, and kvtier
loads vLLM's plain blocks; a flipped byte of a kvtier block is caught (the prefix before it is
kept, the file removed, counted as corrupt); ``kvtier fsck --verify-data`` reports it and ``du``
counts the trailers' bytes. On a local disk, vLLM's reader with O_DIRECT reads a trailer block's
row byte-exact. Skips (one line saying why) where ../shared/vllm, FUSE or bindfs is absent.
"""

import errno
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bindfs_root import bindfs_root, check_no_xattrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from faultfs import FaultFs  # noqa: E402

SALT = uuid.uuid4().hex[:8]
TRAILER = 4096


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


@pytest.fixture(params=["bindfs", "faultfs"])
def bare(request, tmp_path):
    """A root without user xattrs: a bindfs --xattr-none mount of a fresh directory, or the
    project's fault filesystem answering every xattr call with EOPNOTSUPP."""
    if request.param == "faultfs":
        why = FaultFs.unavailable()
        if why:
            pytest.skip(why)
        with FaultFs(tmp_path / "backing", tmp_path / "mnt") as fs:
            fs.fail("xattr", errno.EOPNOTSUPP)
            mnt = Path(fs.mountpoint)
            check_no_xattrs(mnt)
            yield mnt
        return
    yield from bindfs_root(tmp_path)


def prompts(h, n, salt):
    return [h.chunk_keys(i, salt) for i in range(n)]


def block_files(root):
    return sorted(p for p in Path(root).rglob("*.bin"))


def test_vllm_reads_kvtiers_trailer_blocks_and_kvtier_reads_vllms(h, bare):
    ps = prompts(h, 2, f"{SALT}-k")
    k = h.Engine([h.kvtier_tier(bare)])
    try:
        assert k.tiers[0]._tier.checksum_place == "trailer"
        k.store_prompts(ps)
    finally:
        k.shutdown()
    files = block_files(bare)
    assert len(files) == 8
    for f in files:
        assert f.stat().st_size == h.ROW + TRAILER, f
    v = h.Engine([h.vllm_tier(bare)])
    try:
        for keys in ps:
            n, data = v.fetch(keys)
            assert n == len(keys), f"vLLM found {n}/{len(keys)} of kvtier's chunks"
            assert data == [h.content(key) for key in keys], "vLLM's reader must see kvtier's rows byte-exact"
        theirs = prompts(h, 1, f"{SALT}-v")
        v.store_prompts(theirs)
    finally:
        v.shutdown()
    assert len(block_files(bare)) == 12, "vLLM removed none of kvtier's blocks"
    plain = [f for f in block_files(bare) if f.stat().st_size == h.ROW]
    assert len(plain) == 4, "vLLM writes plain rows"
    r = h.Engine([h.kvtier_tier(bare)])
    try:
        n, data = r.fetch(theirs[0])
        assert n == 4 and data == [h.content(key) for key in theirs[0]], "kvtier loads vLLM's plain rows"
    finally:
        r.shutdown()


def test_corrupt_trailer_block_is_caught_and_fsck_finds_it(h, bare, kvtier_bin):
    ps = prompts(h, 3, SALT + "-corrupt")
    eng = h.Engine([h.kvtier_tier(bare)])
    try:
        tier = h.check_corrupt_block_keeps_the_prefix(eng, ps)
        again = tier._tier.block_path(ps[1][1])
    finally:
        eng.shutdown()
    with open(again, "r+b") as f:
        f.seek(h.ROW - 1)
        byte = f.read(1)
        f.seek(h.ROW - 1)
        f.write(bytes([byte[0] ^ 0x10]))
    fsck = subprocess.run([kvtier_bin, "fsck", "--verify-data", "--json", str(bare)], capture_output=True, text=True,
                          timeout=60)
    report = json.loads(fsck.stdout)
    # (the load's removal of the first corrupt block may have left its shard directory empty)
    found = [(f["kind"], f["path"]) for f in report["findings"] if f["kind"] != "empty_dir"]
    assert found == [("crc_mismatch", os.path.relpath(again, bare))], fsck.stdout + fsck.stderr
    assert fsck.returncode == 4
    du = subprocess.run([kvtier_bin, "du", "--json", str(bare)], capture_output=True, text=True, timeout=60)
    totals = json.loads(du.stdout)
    assert totals["total_blocks"] == 11 and totals["total_bytes"] == 11 * (h.ROW + TRAILER), du.stdout


def test_vllm_o_direct_reader_reads_a_trailer_blocks_row(h, tmp_path):
    """On a local disk (O_DIRECT works): vLLM's reader, O_DIRECT, reads exactly the row."""
    import mmap

    from vllm.v1.kv_offload.tiering.fs.io import batch_load_block, probe_o_direct

    if not probe_o_direct(str(tmp_path)):
        pytest.skip(f"O_DIRECT is refused under {tmp_path}")
    ps = prompts(h, 1, SALT + "-direct")
    eng = h.Engine([h.kvtier_tier(tmp_path, checksum_place="trailer")])
    try:
        assert eng.tiers[0]._tier.o_direct
        eng.store_prompts(ps)
        paths = [eng.tiers[0]._tier.block_path(k) for k in ps[0]]
    finally:
        eng.shutdown()
    for p in paths:
        assert os.path.getsize(p) == h.ROW + TRAILER
    buf = mmap.mmap(-1, len(paths) * h.ROW)
    view = memoryview(buf)
    batch_load_block(paths, view, [i * h.ROW for i in range(len(paths))], h.ROW, use_o_direct=True)
    assert [bytes(view[i * h.ROW:(i + 1) * h.ROW]) for i in range(len(paths))] == [h.content(k) for k in ps[0]]
    view.release()
    buf.close()
