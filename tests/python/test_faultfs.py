"""tests/support/faultfs.py drives kvtier_faultfs as the C++ FaultFs does: faults act on real
syscalls through the mount (hang/release on a read in a thread, delay in ms and in us, fail,
short, counting, every op's counters at once, gone) and __exit__ is bounded with a call still hung. Skips, with one line, where FUSE cannot be
mounted or $KVTIER_FAULTFS_BIN is not set."""

import errno
import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from faultfs import FaultFs, fuse_connection_of  # noqa: E402


def backing_with(tmp_path, payload):
    """Skips where FUSE cannot be mounted; else a backing directory holding file f."""
    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    (tmp_path / "backing").mkdir()
    (tmp_path / "backing" / "f").write_bytes(payload)
    return tmp_path / "backing"


@pytest.fixture
def fs(tmp_path):
    with FaultFs(backing_with(tmp_path, b"x" * 8192), tmp_path / "mnt") as mounted:
        yield mounted
    assert fuse_connection_of(mounted.mountpoint) < 0


def test_hang_then_release_serves_the_read(fs):
    fd = os.open(os.path.join(fs.mountpoint, "f"), os.O_RDONLY)
    try:
        fs.hang("read")
        result = []
        reader = threading.Thread(target=lambda: result.append(os.pread(fd, 4096, 0)), daemon=True)
        reader.start()
        assert fs.wait_hung(1, 5)
        assert fs.hung() == 1 and not result
        fs.release()
        reader.join(5)
        assert result == [b"x" * 4096]
    finally:
        os.close(fd)


def test_delay_fail_short_and_calls(fs):
    path = os.path.join(fs.mountpoint, "f")
    fs.delay("lookup", 200, "f")
    start = time.monotonic()
    os.stat(path)
    assert time.monotonic() - start >= 0.2
    fs.clear()
    fs.fail("open", "ESTALE", "f")
    with pytest.raises(OSError) as e:
        os.open(path, os.O_RDONLY)
    assert e.value.errno == errno.ESTALE
    fs.clear()
    fd = os.open(path, os.O_RDONLY)
    try:
        fs.fail("read", errno.EIO, "", 1)
        with pytest.raises(OSError) as e:
            os.pread(fd, 16, 0)
        assert e.value.errno == errno.EIO
        fs.short("read")
        before = fs.calls("read")
        assert len(os.pread(fd, 4096, 0)) == 2048
        assert fs.calls("read") == before + 1
    finally:
        os.close(fd)
    with pytest.raises(ValueError):
        fs.hang("nosuchop")


def test_delay_us_adds_up_and_counters_count_each_op(fs):
    path = os.path.join(fs.mountpoint, "f")
    before = fs.counters()
    assert set(before) >= {"lookup", "open", "read", "rename", "xattr"}
    # Sub-millisecond rules add to whole-millisecond ones: 1 ms + 2 x 0.25 ms per lookup.
    fs.delay("lookup", 1, "f")
    fs.delay_us("lookup", 250, "f")
    fs.delay("lookup", 0.25, "f")
    start = time.monotonic()
    for _ in range(20):
        os.stat(path)
    assert time.monotonic() - start >= 20 * 0.0015  # a lower bound: sleeps never end early
    fs.clear()
    with open(path, "rb") as f:
        f.read(100)
    after = fs.counters()
    assert after["lookup"] - before["lookup"] >= 20
    assert after["open"] - before["open"] == 1
    assert after["read"] - before["read"] >= 1
    assert after["rename"] == before["rename"]
    assert fs.calls("open") == after["open"]
    for bad in ("delay_us lookup -1", "delay_us lookup x", "delay_us nosuchop 5", "delay lookup 99999999"):
        with pytest.raises(ValueError):
            fs.command(bad)


def test_gone_answers_enotconn(fs):
    fs.gone()
    assert fs.daemon_pid == -1
    with pytest.raises(OSError) as e:
        os.stat(os.path.join(fs.mountpoint, "f"))
    assert e.value.errno == errno.ENOTCONN


def test_exit_is_bounded_with_a_call_hung(tmp_path):
    fs = FaultFs(backing_with(tmp_path, b"y" * 16), tmp_path / "mnt").__enter__()
    fd = os.open(os.path.join(fs.mountpoint, "f"), os.O_RDONLY)
    fs.hang("all")
    reader = threading.Thread(target=lambda: os.pread(fd, 16, 0), daemon=True)
    reader.start()
    assert fs.wait_hung(1, 5)
    start = time.monotonic()
    fs.__exit__(None, None, None)
    assert time.monotonic() - start < 10
    reader.join(5)
    assert not reader.is_alive()
    with pytest.raises(OSError) as e:  # the flush of an aborted connection
        os.close(fd)
    assert e.value.errno == errno.ENOTCONN
