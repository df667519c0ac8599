"""Proves that ``kvtier.gc`` with a capacity bound is one of the volume's collectors, as
``kvtier gc --max-bytes`` is (FORMAT.md L124): it takes the collector lease for its run, and trims
nothing while another collector is alive.

Method: block trees written directly in the layout (helpers of test_gc_watch.py), a real
``kvtier gc --watch`` process as the other collector (1 s collector TTL), the effect read from the
tree and the report.

* Beside a live watch holding the lease, ``kvtier.gc(max_bytes=...)`` removes nothing for
  capacity, ``capacity_skipped`` names the other collector, ``exit_code`` is 0 and the watch still
  holds its lease; ``ignore_lease=True`` trims anyway. Once the watch is stopped (SIGTERM: it gives
  the lease up) ``kvtier.gc`` takes the lease, trims to the bound and gives it up (no gc.lease left).
* Where the lease cannot be made (a regular file squats on ``<root>/.kvtier``), it removes nothing
  for capacity, ``capacity_lease_failed`` is set, ``capacity_skipped`` names the lease, and
  ``exit_code`` has 4: nobody enforced the bound.
* A bad ``collector_ttl_s`` and a root holding a NUL are refused (KvtierError invalid_argument)
  before the lease is touched: no ``.kvtier`` is made.
* ``kvtier.Collector`` (the watch collector, embedded) takes the lease, trims to its bound in
  passes, reports them in ``status()`` and ``metrics_text()``, makes ``kvtier.gc`` defer to it, and
  gives the lease up at ``stop()``; bad arguments and a directory that is not a root are refused.
* A ``kvtier.Collector`` whose loop ended on one call that outlived ``io_timeout_s`` (a bindfs
  mount whose daemon is stopped, then resumed; skipped in one line without root, bindfs or
  /dev/fuse) gives its lease up once the mount answers: no gc.lease is left behind.
* A Python process that exits with a started ``kvtier.Collector`` it never stopped, its threads
  stuck on a stalled mount, exits: the collector is not waited for at interpreter exit.
"""

import signal
import subprocess
import sys
import time

import pytest

import kvtier
from test_gc_watch import FAST, ROW, Watcher, blocks, make_blocks, stallable_mount, wait_for  # noqa: F401

TTL_S = 1.0  # the watch's --collector-ttl (FAST): every collector of a volume uses the same


def test_capacity_gc_defers_to_a_live_collector_then_takes_the_lease(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 40, "a")
    w = Watcher(kvtier_bin, root, tmp_path, "w", *FAST)  # holds the lease, no bound of its own
    try:
        wait_for("the watch to hold the lease", w.holding)
        r = kvtier.gc(str(root), max_bytes=20 * ROW, collector_ttl_s=TTL_S)
        assert r.files_reclaimed == 0 and "another collector" in r.capacity_skipped, r.capacity_skipped
        assert not r.capacity_lease_failed and r.exit_code == 0
        assert len(blocks(root)) == 40
        assert w.holding(), "the holder keeps its lease"
        r = kvtier.gc(str(root), max_bytes=30 * ROW, collector_ttl_s=TTL_S, ignore_lease=True)
        assert r.files_reclaimed == 10 and r.capacity_skipped == ""
    finally:
        assert w.stop() == 0, w.log_path.read_text()
    assert not (root / ".kvtier" / "gc.lease").exists(), "the stopped watch gave its lease up"
    r = kvtier.gc(str(root), max_bytes=20 * ROW, collector_ttl_s=TTL_S)
    assert r.files_reclaimed == 10 and r.capacity_skipped == "" and r.exit_code == 0
    assert len(blocks(root)) == 20
    assert (root / ".kvtier").is_dir() and not (root / ".kvtier" / "gc.lease").exists(), "given up at return"


def test_a_lease_that_cannot_be_made_fails_the_bound(tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 10, "a")
    (root / ".kvtier").write_text("not a directory")
    r = kvtier.gc(str(root), max_bytes=5 * ROW, collector_ttl_s=TTL_S)
    assert r.files_reclaimed == 0 and len(blocks(root)) == 10
    assert r.capacity_lease_failed and "collector lease" in r.capacity_skipped, r.capacity_skipped
    assert r.exit_code & 4


def test_bad_arguments_touch_no_lease(tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 4, "a")
    for ttl in (0, -1.0, float("nan")):
        with pytest.raises(kvtier.KvtierError) as e:
            kvtier.gc(str(root), max_bytes=0, collector_ttl_s=ttl)
        assert e.value.code == "invalid_argument" and "collector_ttl_s" in str(e.value)
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.gc(str(root) + "\0/elsewhere", max_bytes=0)
    assert e.value.code == "invalid_argument"
    assert not (root / ".kvtier").exists() and len(blocks(root)) == 4


def test_an_embedded_collector_holds_the_lease_and_trims(tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 30, "a")
    with kvtier.Collector(str(root), max_bytes=20 * ROW, interval_s=0.3, check_interval_s=0.05,
                          collector_ttl_s=TTL_S) as c:
        wait_for("a pass", lambda: c.status()["passes"] >= 1 and len(blocks(root)) == 20)
        s = c.status()
        assert s["running"] and s["holding"] and s["files_reclaimed"] == 10, s
        assert 'kvtier_gc_reclaimed_files_total{reason="capacity"} 10' in c.metrics_text()
        r = kvtier.gc(str(root), max_bytes=5 * ROW, collector_ttl_s=TTL_S)
        assert r.files_reclaimed == 0 and "another collector" in r.capacity_skipped, r.capacity_skipped
    assert not c.status()["running"] and not c.status()["holding"]
    assert not (root / ".kvtier" / "gc.lease").exists(), "given up at stop"
    assert len(blocks(root)) == 20


def test_collector_arguments_are_checked(tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 2, "a")
    for kwargs, name in [({"interval_s": 0}, "interval_s"), ({"min_free": "120%"}, "min_free"),
                         ({"min_free": "x"}, "min_free"), ({"min_free_target": "5%"}, "min_free_target"),
                         ({"collector_ttl_s": -1}, "collector_ttl_s")]:
        with pytest.raises(kvtier.KvtierError) as e:
            kvtier.Collector(str(root), **kwargs)
        assert e.value.code == "invalid_argument" and name in str(e.value), (kwargs, str(e.value))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(kvtier.KvtierError, match="does not look like"):
        kvtier.Collector(str(tmp_path))
    assert not (root / ".kvtier").exists() and not (tmp_path / ".kvtier").exists()


def test_a_collector_ended_by_one_slow_call_gives_its_lease_up(stallable_mount):
    backing, mnt, daemon = stallable_mount
    # A TTL far longer than the stall: the lease is still this collector's when the mount answers.
    c = kvtier.Collector(str(mnt), max_bytes=100 * ROW, interval_s=0.3, check_interval_s=0.05,
                         collector_ttl_s=30, io_timeout_s=1)
    c.start()
    wait_for("the lease taken", lambda: (backing / ".kvtier" / "gc.lease").exists())
    daemon.send_signal(signal.SIGSTOP)  # every call on the mount now waits in the kernel
    wait_for("the loop to end on the stalled call", lambda: not c.status()["running"])
    daemon.send_signal(signal.SIGCONT)  # the one slow call is answered
    wait_for("the lease given up", lambda: not (backing / ".kvtier" / "gc.lease").exists())
    with pytest.raises(kvtier.KvtierError):
        c.stop()  # how the loop ended: timed out
    del c  # its lease directory's descriptor closed: the daemon can go at unmount


# Starts a collector on argv[1] and exits at a line on stdin without stopping it.
EXIT_WITH_A_STARTED_COLLECTOR = """
import sys
import kvtier
c = kvtier.Collector(sys.argv[1], max_bytes=100 * 4096, interval_s=0.3, check_interval_s=0.05,
                     collector_ttl_s=1, io_timeout_s=600)
c.start()
sys.stdin.readline()
"""


def test_a_process_exits_with_a_started_collector_stuck_on_a_stalled_mount(stallable_mount):
    backing, mnt, daemon = stallable_mount
    child = subprocess.Popen([sys.executable, "-c", EXIT_WITH_A_STARTED_COLLECTOR, str(mnt)],
                             stdin=subprocess.PIPE, text=True)
    try:
        wait_for("the lease taken", lambda: (backing / ".kvtier" / "gc.lease").exists())
        daemon.send_signal(signal.SIGSTOP)  # the loop's next statvfs waits in the kernel (for 600 s)
        time.sleep(0.5)  # ten check intervals: the loop is in that call
        child.stdin.write("exit\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0, "interpreter exit waited for the collector's stuck loop"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
