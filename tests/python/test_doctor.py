"""Proves that `kvtier doctor ROOT` reports what the volume really does and what kvtier's "auto"
settings pick there, leaving nothing behind: on a local temp dir (xattr checksums, rename, link,
O_DIRECT), on `bindfs --xattr-none` (no user xattrs -> checksum trailer, syscall backend, bounce
loads, with the warning), and on kvtier_faultfs with injected faults: xattrs answering
EOPNOTSUPP, rename failing (exit 1, "cannot run"), mkdir refused (not writable, exit 1), and a
hung rename (exit 8 within --io-timeout plus a margin, naming the scratch directory; also when
the caller reads its output through pipes, which the child stuck on the mount never holds). Text and
--json fields are checked, and the exit codes of bad flags and a missing root. Skips the FUSE
cases, with one line, where no FUSE mount can be made.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from faultfs import FaultFs  # noqa: E402


def doctor(kvtier_bin, root, *flags, tmp):
    """Runs `kvtier doctor` with its output in files: only the CLI's own exit is waited for (a
    caller's pipes are test_faultfs_hung_rename_releases_a_callers_pipes's)."""
    out, err = tmp / "doctor.out", tmp / "doctor.err"
    start = time.monotonic()
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([kvtier_bin, "doctor", str(root), *flags], stdout=o, stderr=e)
        rc = proc.wait(timeout=60)
    return rc, out.read_text(), err.read_text(), time.monotonic() - start


def doctor_json(kvtier_bin, root, tmp, *flags):
    rc, out, err, _ = doctor(kvtier_bin, root, "--json", "--io-bytes", "1M", *flags, tmp=tmp)
    assert out, f"no JSON (exit {rc}): {err}"
    report = json.loads(out)
    assert report["exit_code"] == rc, (rc, report)
    return rc, report


def entries(path):
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))


def test_local_dir_text_and_json(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "keep.txt").write_text("mine")
    rc, report = doctor_json(kvtier_bin, root, tmp_path)
    assert rc == 0, report
    probes = report["probes"]
    for name in ("writable", "rename", "link"):
        assert probes[name]["verdict"] == "yes", (name, probes[name])
    assert report["can_run"] and report["problems"] == [] and report["scratch_removed"]
    assert ".kvtier/doctor." in report["scratch"]
    fs = report["filesystem"]
    assert fs["statfs_magic"].startswith("0x") and fs["name"]
    # The picks follow the probes and the filesystem's kind.
    auto = report["auto"]
    assert auto["checksum"] == ("trailer" if probes["user_xattrs"]["verdict"] == "no" else "xattr")
    assert auto["io_backend"] == ("syscall" if fs["network_or_fuse"] else "io_uring")
    assert auto["o_direct"] == (probes["o_direct"]["verdict"] != "no")
    for call in ("stat", "create", "rename"):
        assert report["latency"][call]["samples"] == 8 and report["latency"][call]["median_us"] > 0
    assert report["throughput"]["bytes"] == 1 << 20 and report["throughput"]["write_mib_s"] > 0
    assert entries(root) == ["keep.txt"], "doctor leaves the root as it found it"
    rc, text, err, _ = doctor(kvtier_bin, root, "--samples", "2", "--io-bytes", "64K", tmp=tmp_path)
    assert rc == 0, err
    for line in ("user xattrs", "O_DIRECT", "atomic rename", "atime update", "latency", "throughput",
                 "kvtier's \"auto\" settings here", "io_backend", "bounce_loads", "inline_metadata",
                 "result: kvtier can run here (exit 0)"):
        assert line in text, (line, text)
    assert entries(root) == ["keep.txt"]


def test_bad_flags_and_missing_root(kvtier_bin, tmp_path):
    rc, _, err, _ = doctor(kvtier_bin, tmp_path / "absent", tmp=tmp_path)
    assert rc == 1 and "absent" in err, err
    rc, _, err, _ = doctor(kvtier_bin, tmp_path, "--io-bytes", "0", tmp=tmp_path)
    assert rc == 2 and "io_bytes" in err, err
    rc, _, err, _ = doctor(kvtier_bin, tmp_path, "--io-timeout", "soon", tmp=tmp_path)
    assert rc == 2 and "--io-timeout" in err, err


def bindfs_unavailable():
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        return "needs root, bindfs (scripts/bootstrap installs it) and /dev/fuse"
    return ""


def test_bindfs_without_xattrs_picks_the_trailer(kvtier_bin, tmp_path):
    why = bindfs_unavailable()
    if why:
        pytest.skip(why)
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    subprocess.run(["bindfs", "--xattr-none", str(backing), str(mnt)], check=True, timeout=10)
    try:
        rc, report = doctor_json(kvtier_bin, mnt, tmp_path)
        rc_text, text, _, _ = doctor(kvtier_bin, mnt, "--io-bytes", "64K", tmp=tmp_path)
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], timeout=10)
    assert rc == 0 and rc_text == 0, report
    assert report["filesystem"]["name"] == "fuse" and report["filesystem"]["network_or_fuse"]
    assert report["probes"]["user_xattrs"]["verdict"] == "no"
    assert "EOPNOTSUPP" in report["probes"]["user_xattrs"]["detail"]
    assert report["auto"] == {**report["auto"], "checksum": "trailer", "io_backend": "syscall", "bounce_loads": True,
                              "inline_metadata": False}
    assert any(w.startswith("no user xattrs") for w in report["warnings"]), report["warnings"]
    assert "trailer (after the block's bytes)" in text and "no user xattrs" in text
    assert entries(backing) == [], "nothing left on the volume"


@pytest.fixture
def faultfs(tmp_path):
    why = FaultFs.unavailable()
    if why:
        pytest.skip(why)
    with FaultFs(tmp_path / "backing", tmp_path / "mnt") as fs:
        yield fs


def test_faultfs_xattr_eopnotsupp_and_latency(kvtier_bin, faultfs, tmp_path):
    faultfs.fail("xattr", "EOPNOTSUPP")
    faultfs.delay("all", 0.5)
    rc, report = doctor_json(kvtier_bin, faultfs.mountpoint, tmp_path, "--samples", "4")
    assert rc == 0, report
    assert report["filesystem"]["mount_type"] == "fuse.kvtier_faultfs"
    assert report["probes"]["user_xattrs"]["verdict"] == "no"
    assert report["auto"]["checksum"] == "trailer" and report["auto"]["io_backend"] == "syscall"
    # Every call waits at least 0.5 ms in the daemon: a lower bound, never an upper one.
    assert report["latency"]["stat"]["median_us"] >= 500
    assert entries(faultfs.backing) == []


def test_faultfs_rename_failing_cannot_run(kvtier_bin, faultfs, tmp_path):
    faultfs.fail("rename", "EXDEV")
    rc, report = doctor_json(kvtier_bin, faultfs.mountpoint, tmp_path)
    assert rc == 1 and not report["can_run"]
    assert report["probes"]["rename"]["verdict"] == "no" and "EXDEV" in report["probes"]["rename"]["detail"]
    assert report["probes"]["link"]["verdict"] == "not_probed"
    assert any("rename" in p for p in report["problems"]), report["problems"]
    assert not any("xattr probe failed" in w for w in report["warnings"]), "skipped probes are not findings"
    rc, text, _, _ = doctor(kvtier_bin, faultfs.mountpoint, tmp=tmp_path)
    assert rc == 1 and "result: kvtier cannot run here (exit 1)" in text and "EXDEV" in text
    assert entries(faultfs.backing) == []


def test_faultfs_root_not_writable_cannot_run(kvtier_bin, faultfs, tmp_path):
    faultfs.fail("mkdir", "EROFS")
    rc, report = doctor_json(kvtier_bin, faultfs.mountpoint, tmp_path)
    assert rc == 1
    assert report["probes"]["writable"]["verdict"] == "no" and "EROFS" in report["probes"]["writable"]["detail"]
    assert any("cannot write" in p for p in report["problems"]), report["problems"]
    assert entries(faultfs.backing) == []


def test_faultfs_hung_rename_is_bounded(kvtier_bin, faultfs, tmp_path):
    faultfs.hang("rename")
    rc, out, err, seconds = doctor(kvtier_bin, faultfs.mountpoint, "--io-timeout", "1s", tmp=tmp_path)
    assert rc == 8, (out, err)
    assert "hung" in err and ".kvtier/doctor." in err and "remove it once the mount answers" in err, err
    assert seconds < 1 + 20, "bounded by --io-timeout plus a margin"


def test_faultfs_hung_rename_releases_a_callers_pipes(kvtier_bin, faultfs):
    """A caller reading stdout and stderr through pipes (`$(kvtier ...)`, a sidecar's log, a
    capture) sees their end once the CLI exits 8, although its child, stuck on the mount, lives
    on: the child writes through the parent's relay, never the caller's pipes."""
    faultfs.hang("rename")
    start = time.monotonic()
    proc = subprocess.run([kvtier_bin, "doctor", str(faultfs.mountpoint), "--io-timeout", "1s"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 8 and "hung" in proc.stderr, (proc.stdout, proc.stderr)
    assert time.monotonic() - start < 1 + 20, "the pipes' end came with the CLI's exit"
