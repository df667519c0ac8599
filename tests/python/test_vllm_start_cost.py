"""Proves that attaching KvtierFsTier (kvtier.vllm) under vLLM's real manager costs the same number
of filesystem calls whatever the volume holds: on a kvtier_faultfs mount (which counts every call
that reaches it; no kernel caching), an attach and shutdown over 256 blocks and over 16,384 blocks
of its block directory differ by at most a few calls. Method: the blocks are created on the
backing directory (tmpfs where /dev/shm is one), not through the mount, to keep the test fast."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "support")]
from faultfs import FaultFs  # noqa: E402

SLACK_CALLS = 8  # the statvfs sampler and the lease heartbeat may land on either side


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


@pytest.fixture
def mount(tmp_path):
    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    shm = tempfile.mkdtemp(prefix="kvtier-test-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    try:
        with FaultFs(Path(shm or tmp_path) / "backing", tmp_path / "mnt") as fs:
            yield fs
    finally:
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


def attach_calls(h, fs):
    before = fs.calls("all")
    eng = h.Engine([h.kvtier_tier(fs.mountpoint)])
    eng.shutdown()
    return fs.calls("all") - before


def add_blocks(block_dir, first, last, row):
    for i in range(first, last):
        hexs = (i * 0x9E3779B97F4A7C15 % (1 << 64)).to_bytes(8, "little").hex() + "00" * 23 + "7a"
        shard = block_dir / hexs[:3] / f"{hexs[3:5]}_g0"
        shard.mkdir(parents=True, exist_ok=True)
        with open(shard / f"{hexs}.bin", "wb") as f:
            f.truncate(row)


def test_attach_costs_the_same_calls_at_256_and_16384_blocks(h, mount):
    attach_calls(h, mount)  # creates the namespace and block directories
    backing = Path(mount.backing)
    block_dirs = [p for p in backing.iterdir() if p.is_dir() and p.name.rsplit("_", 1)[-1].startswith("r")]
    assert len(block_dirs) == 1, sorted(p.name for p in backing.iterdir())
    add_blocks(block_dirs[0], 0, 256, h.ROW)
    at_256 = attach_calls(h, mount)
    add_blocks(block_dirs[0], 256, 16384, h.ROW)
    at_16384 = attach_calls(h, mount)
    assert at_256 > 0
    assert abs(at_16384 - at_256) <= SLACK_CALLS, f"calls at attach: {at_256} with 256 blocks, {at_16384} with 16384"
