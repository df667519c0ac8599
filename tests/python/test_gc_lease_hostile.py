"""Proves that the volume's collector lease cannot be switched off or doubled by what a co-tenant or an
operator does to the volume (FORMAT.md L153, L154), with real `kvtier gc` processes.

Method: block trees written directly in the layout (helpers of test_gc_watch.py), collectors started
with a 1 s collector TTL, their effect read from the tree, their metrics files and their logs.

* Something at `<root>/.kvtier/gc.lease` that is not a lease (a symlink to a file outside the
  volume, a FIFO, an empty directory, a directory with an entry) stops no watch: after the TTL it is
  moved aside and the watch trims to its bound. The log names the lease and what it is; a symlink's
  target keeps its bytes, a directory's entry is kept (moved to a name of its own). A one-shot
  `gc --max-bytes` takes a FIFO at the lease's name over the same way and trims (exit 0).
* Where it cannot be moved (a collector running as an unprivileged user in a `.kvtier` it may not
  write: EACCES), the one-shot `gc --max-bytes` exits 4 with a message naming the lease and the
  cause, and a watch says so in its log and exits 4 on SIGTERM. (Skipped in one line without root
  or setpriv.)
* One remover per root when the root is replaced: after `mv ROOT ROOT.old; mkdir ROOT` a running
  watch logs it once, gives its lease in ROOT.old up, and of it and a second watch started on the
  new ROOT exactly one holds a lease at any sample; after `rm -r ROOT; mkdir ROOT` the watches
  collect again (the new tree is trimmed to the bound).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from test_gc_watch import FAST, ROW, Watcher, blocks, make_blocks, wait_for


def plant(kind, lease, target):
    lease.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        lease.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(lease)
    elif kind == "empty_dir":
        lease.mkdir()
    else:
        lease.mkdir()
        (lease / "keep").write_text("not ours")


@pytest.mark.parametrize("kind", ["symlink", "fifo", "empty_dir", "full_dir"])
def test_a_non_lease_is_moved_aside_and_the_watch_collects(kvtier_bin, tmp_path, kind):
    root, target = tmp_path / "root", tmp_path / "precious"
    target.write_text("precious bytes")
    make_blocks(root, 40, "a")
    lease = root / ".kvtier" / "gc.lease"
    plant(kind, lease, target)
    w = Watcher(kvtier_bin, root, tmp_path, "w", "--max-bytes", str(10 * ROW), *FAST)
    try:
        wait_for("the watch to trim past the non-lease", lambda: len(blocks(root)) == 10, timeout_s=20)
    finally:
        rc = w.stop()
    log = w.log_path.read_text()
    assert rc == 0, log
    assert f"{lease} is a" in log and "not a lease" in log, log
    assert target.read_text() == "precious bytes"
    assert not lease.exists()  # released at SIGTERM
    left = sorted(p.name for p in (root / ".kvtier").iterdir())
    if kind == "full_dir":
        assert len(left) == 1 and left[0].endswith(".bad") and (root / ".kvtier" / left[0] / "keep").exists(), left
        assert "remove it by hand" in log, log
    else:
        assert left == [], left


def test_one_shot_gc_takes_a_non_lease_over(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 20, "a")
    plant("fifo", root / ".kvtier" / "gc.lease", None)
    r = subprocess.run([kvtier_bin, "gc", str(root), "--max-bytes", str(10 * ROW), "--collector-ttl", "1s"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert len(blocks(root)) == 10
    assert list((root / ".kvtier").iterdir()) == []  # taken over, then given up at exit


def unprivileged():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a collector as an unprivileged user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_a_non_lease_that_cannot_be_moved_is_named_and_fails_the_collectors(kvtier_bin):
    as_nobody = unprivileged()
    top = Path(tempfile.mkdtemp(prefix="kvtier-lease-"))  # not under pytest's 0700 tmp: nobody must reach it
    try:
        top.chmod(0o755)
        root = top / "root"
        make_blocks(root, 20, "a")
        lease = root / ".kvtier" / "gc.lease"
        plant("empty_dir", lease, None)
        for d in [root, *root.rglob("*")]:
            if d.is_dir():
                d.chmod(0o755)  # readable, not writable, by nobody
        r = subprocess.run([*as_nobody, kvtier_bin, "gc", str(root), "--max-bytes", str(10 * ROW),
                            "--collector-ttl", "1s"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        assert str(lease) in out and "a directory" in out and "Permission denied" in out, out
        log_path = top / "w.log"
        with open(log_path, "w") as log:
            p = subprocess.Popen([*as_nobody, kvtier_bin, "gc", str(root), "--watch", "--max-bytes", str(10 * ROW),
                                  *FAST], stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_for("the watch to say it cannot move the lease", lambda: "cannot be moved aside" in log_path.read_text())
            finally:
                p.send_signal(signal.SIGTERM)
                rc = p.wait(timeout=30)
        text = log_path.read_text()
        assert rc == 4, text
        assert f"{lease} (a directory) cannot be moved aside: Permission denied" in text, text
        assert len(blocks(root)) == 20 and lease.is_dir()
    finally:
        shutil.rmtree(top)


def lease_holders(ws):
    return sum(w.holding() for w in ws)


def test_a_replaced_root_keeps_one_remover(kvtier_bin, tmp_path):
    root, old = tmp_path / "root", tmp_path / "root.old"
    make_blocks(root, 20, "a")
    bound = ["--max-bytes", str(10 * ROW)]
    a = Watcher(kvtier_bin, root, tmp_path, "a", *bound, *FAST)
    ws = [a]
    try:
        wait_for("a to hold and trim", lambda: a.holding() and len(blocks(root)) == 10)
        root.rename(old)
        root.mkdir()
        make_blocks(root, 20, "b")
        ws.append(Watcher(kvtier_bin, root, tmp_path, "b", *bound, *FAST))
        wait_for("one holder trimming the new root", lambda: lease_holders(ws) == 1 and len(blocks(root)) == 10)
        wait_for("b to start watching", lambda: "watching" in ws[1].log_path.read_text())
        for _ in range(30):  # past b's settling (TTL/5 + TTL/15): a second remover shows as a second holder
            assert lease_holders(ws) <= 1, [w.log_path.read_text() for w in ws]
            time.sleep(0.05)
        assert "no longer names" in a.log_path.read_text()
        assert not (old / ".kvtier" / "gc.lease").exists(), a.log_path.read_text()  # given up where it was taken
        assert len(blocks(old)) == 10  # nothing removed in the old directory after the move

        shutil.rmtree(root)
        root.mkdir()
        make_blocks(root, 20, "c")
        wait_for("the watches to collect the new root again", lambda: len(blocks(root)) == 10)
        assert lease_holders(ws) <= 1
    finally:
        rcs = [w.stop() for w in ws]
    logs = [w.log_path.read_text() for w in ws]
    assert rcs == [0, 0], logs
    assert logs[0].count("no longer names") <= 2, logs[0]  # once per replacement
