"""Proves that kvtier.du / fsck / gc never hang the caller on a hung mount.

Method: a small root is written to a backing directory and mounted through FUSE; every call on the
mount is then held (tests/support/faultfs.py's ``hang("all")`` where that fixture exists, else
Debian's bindfs with its daemon stopped by SIGSTOP). Each tool, called with ``io_timeout_s=1``,
must raise KvtierError(timed_out) naming the mount within the deadline plus a generous margin;
a gc abandoned that way must change nothing afterwards, even once the mount answers again; and
after release the same calls complete. Skips with one line where no FUSE mount can be made.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvtier

ROW = 4096
SUPPORT = Path(__file__).resolve().parents[1] / "support"


class BindfsHang:
    """bindfs SRC MNT; hang() stops its daemon (every call waits), release() resumes it."""

    def __init__(self, backing, mountpoint):
        self.mountpoint = str(mountpoint)
        os.makedirs(self.mountpoint, exist_ok=True)
        subprocess.run(["bindfs", str(backing), self.mountpoint], check=True, timeout=10)
        out = subprocess.run(["pgrep", "-f", f"bindfs {backing} {mountpoint}"], capture_output=True, text=True)
        self.pid = int(out.stdout.split()[0])

    def hang(self, op="all"):
        os.kill(self.pid, signal.SIGSTOP)

    def release(self):
        os.kill(self.pid, signal.SIGCONT)

    def close(self):
        self.release()
        subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], timeout=10)


def mount(backing, mountpoint):
    faultfs = None
    if (SUPPORT / "faultfs.py").is_file():  # tests/support/faultfs.py, where it exists
        sys.path.insert(0, str(SUPPORT))
        import faultfs
    if faultfs is not None:
        why = faultfs.FaultFs.unavailable() if hasattr(faultfs.FaultFs, "unavailable") else ""
        if why:
            pytest.skip(why)
        return faultfs.FaultFs(str(backing), str(mountpoint)).__enter__()
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("hung-mount tests need tests/support/faultfs.py, or root with bindfs and /dev/fuse")
    return BindfsHang(backing, mountpoint)


@pytest.fixture
def hung_root(tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    ns = kvtier.Namespace("kvtier-test/hung", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
    tier = kvtier.FsTier(ns, ROW, {"root_dir": str(backing)})
    keys = kvtier.chunk_keys(kvtier.block_hashes(list(range(16 * 4)), seed="hung"))
    job = tier.submit_store(keys, [bytes(ROW)] * 4)
    deadline = time.monotonic() + 30
    while not any(r.job_id == job for r in tier.wait(1000)):
        assert time.monotonic() < deadline
    tier.close()
    fs = mount(backing, tmp_path / "mnt")
    try:
        yield fs, backing
    finally:
        if hasattr(fs, "close"):
            fs.close()
        else:
            fs.__exit__(None, None, None)


def blocks(backing):
    return sum(1 for _ in Path(backing).rglob("*.bin"))


@pytest.mark.parametrize("tool", ["du", "fsck", "gc"])
def test_tools_raise_timed_out_on_a_hung_mount(hung_root, tool):
    fs, backing = hung_root
    mnt = fs.mountpoint() if callable(fs.mountpoint) else fs.mountpoint
    kwargs = {"max_bytes": 0} if tool == "gc" else {}
    fs.hang("all")
    start = time.monotonic()
    with pytest.raises(kvtier.KvtierError) as e:
        getattr(kvtier, tool)(mnt, io_timeout_s=1, **kwargs)
    assert time.monotonic() - start < 1 + 20, "bounded by io_timeout_s plus a margin"
    assert e.value.code == "timed_out" and mnt in e.value.message and "hung" in e.value.message
    fs.release()
    time.sleep(0.5)  # the abandoned call resumes now: it must change nothing
    assert blocks(backing) == 4
    report = getattr(kvtier, tool)(mnt, **kwargs)
    assert report.exit_code == 0
    if tool == "gc":
        assert blocks(backing) == 0, "after release the job completes"


def test_io_timeout_s_is_checked(tmp_path):
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(kvtier.KvtierError) as e:
            kvtier.du(str(tmp_path), io_timeout_s=bad)
        assert e.value.code == "invalid_argument" and "io_timeout_s" in e.value.message
    assert kvtier.du(str(tmp_path), io_timeout_s=None).total_blocks == 0
