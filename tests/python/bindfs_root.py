"""A root without user xattrs for the tests: a ``bindfs --xattr-none`` mount of a fresh directory,
which answers every xattr call "operation not supported", as NFSv3/v4.1, EFS, Filestore and Azure
Files do. ``bindfs_root(tmp_path)`` is a generator for a fixture: it yields the mount point (under
``tmp_path``) and unmounts it afterwards; where bindfs or FUSE is missing, or the mount fails, it
skips the test with one line saying why."""

import os
import shutil
import subprocess

import pytest


def check_no_xattrs(mnt):
    """Fails the test unless setting a user xattr under `mnt` is refused."""
    probe = mnt / "xattr-probe"
    probe.write_bytes(b"x")
    with pytest.raises(OSError):
        os.setxattr(probe, "user.vllm.kv_crc32c", b"\0\0\0\0")
    probe.unlink()


def bindfs_root(tmp_path):
    if not shutil.which("bindfs"):
        pytest.skip("bindfs is not installed (scripts/bootstrap installs it): no xattr-less root to test on")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("FUSE is unavailable here (/dev/fuse): no xattr-less root to test on")
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    proc = subprocess.run(["bindfs", "--xattr-none", str(src), str(mnt)], capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        pytest.skip(f"bindfs --xattr-none could not mount here: {proc.stderr.strip()}")
    try:
        check_no_xattrs(mnt)
        yield mnt
    finally:
        if subprocess.run(["fusermount", "-u", str(mnt)], capture_output=True, timeout=20).returncode != 0:
            subprocess.run(["fusermount", "-uz", str(mnt)], capture_output=True, timeout=20)
