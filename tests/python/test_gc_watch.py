"""Proves `kvtier gc --watch` (free-space floor, collector lease, metrics) with real CLI processes.

Method: block trees are written directly in the layout (FORMAT.md L2-L8), every block with its own
use time so that least-recently-used order is unambiguous. Each test starts `kvtier gc --watch`
processes with short intervals and a short collector TTL, and reads what they did from their
metrics files (Prometheus text, written by temp file and rename) and their logs:

* --metrics-port serves the same text over HTTP (GET /metrics; anything else is 404).
* A pass trimming within gc's candidate buffer walks the tree once (its log line says so).
* SIGTERM ends a watch with exit 0, its lease released (the volume's `.kvtier/gc.lease` gone);
  bad flag combinations and a directory that is not a root are refused (exit 2) creating nothing.
* Three watchers on one root: exactly one holds the lease and runs passes; after a SIGKILL of the
  holder another takes over (the time it took is printed) and the blocks left are exactly those a
  single one-shot `kvtier gc` leaves on a copy of the tree given the same writes, and the files the
  watchers report removed add up to the files that disappeared (nothing removed twice).
* A one-shot `kvtier gc --max-bytes` beside a live `gc --watch` holder removes nothing for capacity
  (exit 0, capacity_skipped says why; --ignore-lease trims anyway); once the holder is SIGKILLed it
  takes the stale lease after the TTL and trims; with no holder it takes the lease for its run and
  gives it up at exit (FORMAT.md L124). One that saw another collector's lease given up during its
  run (that one may have trimmed already) trims nothing, even though it could take the lease then.
* A hung mount (a bindfs FUSE mount whose daemon is stopped; skipped in one line without root,
  bindfs or /dev/fuse) ends the watch with exit 8 once a call passes --io-timeout.
* --min-free on a 64 MiB tmpfs (mounted here; skipped in one line where mount is refused): a
  writer storing 1 MiB blocks at a steady rate writes more than the volume holds, never gets
  ENOSPC, and gc frees space with reason min_free. How far free space fell below the floor, against
  one check interval's writes, is printed (a measurement, not asserted: timing is the machine's).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

NS = "m_0123456789ab"
ROW = 4096


def make_blocks(root, n, salt, size=ROW, base_age_s=100000, now=None):
    """n blocks of `size` bytes, block i last used base_age_s - i seconds before `now`."""
    os.makedirs(root / NS, exist_ok=True)
    now = now or time.time()
    for i in range(n):
        h = hashlib.sha256(f"{salt}{i}".encode()).hexdigest()
        d = root / f"{NS}_r0" / h[:3] / f"{h[3:5]}_g0"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{h}.bin"
        p.write_bytes(b"\0" * size)
        t = now - base_age_s + i
        os.utime(p, (t, t))


def blocks(root):
    return sorted(p.name for p in Path(root).glob(f"{NS}_r0/*/*/*.bin"))


def metrics(path):
    """The metrics file as {name{labels}: value}; {} until the first write."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def removed_files(m):
    return sum(v for k, v in m.items() if k.startswith("kvtier_gc_reclaimed_files_total"))


def wait_for(what, cond, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Watcher:
    def __init__(self, kvtier_bin, root, tmp, name, *flags):
        self.metrics_file = tmp / f"{name}.prom"
        self.log_path = tmp / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [kvtier_bin, "gc", str(root), "--watch", "--metrics-file", str(self.metrics_file), *flags],
            stdout=subprocess.DEVNULL, stderr=self.log)

    def m(self):
        return metrics(self.metrics_file)

    def holding(self):
        return self.m().get("kvtier_gc_lease_held") == 1

    def passes(self):
        return self.m().get("kvtier_gc_passes_total", 0)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=30)
        self.log.close()
        return rc


FAST = ["--interval", "300ms", "--check-interval", "50ms", "--collector-ttl", "1s"]


def test_sigterm_exits_zero_and_releases_the_lease(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 40, "a")
    w = Watcher(kvtier_bin, root, tmp_path, "w", "--max-bytes", str(20 * ROW), *FAST)
    wait_for("a pass", lambda: w.passes() >= 1 and len(blocks(root)) == 20)
    assert (root / ".kvtier" / "gc.lease").is_file()
    assert w.stop() == 0, w.log_path.read_text()
    assert not (root / ".kvtier" / "gc.lease").exists()
    assert w.m()["kvtier_gc_lease_held"] == 0
    assert w.m()['kvtier_gc_reclaimed_files_total{reason="capacity"}'] == 20
    # A pass trimming within the candidate buffer walks once (no second walk).
    assert re.search(r"pass 1 \(interval\): removed 20 files.*, 1 walks", w.log_path.read_text()), w.log_path.read_text()
    # fsck does not count the volume's own directory as a stray.
    fsck = subprocess.run([kvtier_bin, "fsck", str(root), "--json"], capture_output=True, text=True)
    assert ".kvtier" not in fsck.stdout


def test_metrics_port_serves_the_metrics(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 4, "a")
    w = Watcher(kvtier_bin, root, tmp_path, "w", "--metrics-port", "0", *FAST)
    try:
        wait_for("a pass", lambda: w.passes() >= 1)
        port = int(re.search(r"serving /metrics on 127\.0\.0\.1:(\d+)", w.log_path.read_text()).group(1))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
        assert "# TYPE kvtier_gc_passes_total counter" in text
        assert "kvtier_gc_lease_held 1" in text
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert e.value.code == 404
    finally:
        assert w.stop() == 0


@pytest.mark.parametrize("flags", [["--dry-run"], ["--json"], ["--interval", "0"], ["--min-free", "120%"],
                                   ["--min-free-target", "5%"]])
def test_bad_watch_flags_are_refused(kvtier_bin, tmp_path, flags):
    root = tmp_path / "root"
    make_blocks(root, 2, "a")
    r = subprocess.run([kvtier_bin, "gc", str(root), "--watch", *flags], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert flags[0] in r.stderr
    assert not (root / ".kvtier").exists()


def test_a_directory_that_is_not_a_root_is_refused(kvtier_bin, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    r = subprocess.run([kvtier_bin, "gc", str(tmp_path), "--watch"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "does not look like" in r.stderr
    assert not (tmp_path / ".kvtier").exists()


def test_three_collectors_one_collects_and_one_takes_over(kvtier_bin, tmp_path):
    root, ref = tmp_path / "root", tmp_path / "ref"
    # Each bound falls in a wide gap of use times (a day against a minute), so any LRU method
    # with a tolerance (a histogram of ages) removes exactly the same blocks as the exact order.
    now = time.time()
    for tree in (root, ref):  # not a copy: reading the blocks would move their atime
        make_blocks(tree, 80, "a", base_age_s=100000, now=now)
        make_blocks(tree, 40, "y", base_age_s=60, now=now)
    bound = ["--max-bytes", str(60 * ROW), "--low-water", str(40 * ROW)]
    # A TTL of 3 s: a holder's lease thread would have to stall that long (a loaded machine) before
    # another collector could take over while it lives, and the test would see two collectors.
    flags = ["--interval", "300ms", "--check-interval", "50ms", "--collector-ttl", "3s"]
    ws = [Watcher(kvtier_bin, root, tmp_path, f"w{i}", *bound, *flags) for i in range(3)]
    try:
        wait_for("one holder and its pass", lambda: sum(w.holding() for w in ws) == 1 and len(blocks(root)) == 40)
        time.sleep(1.0)  # several more intervals: the others must stay idle
        holder = next(w for w in ws if w.holding())
        others = [w for w in ws if w is not holder]
        assert [w.passes() for w in others] == [0, 0], [w.log_path.read_text() for w in ws]
        subprocess.run([kvtier_bin, "gc", str(ref), *bound, "--ignore-lease"], check=True, capture_output=True)
        assert blocks(root) == blocks(ref)

        removed_before = removed_files(holder.m())
        killed_at = time.monotonic()
        holder.stop(signal.SIGKILL)
        for tree in (root, ref):  # over the bound again, by 50 blocks older than the 40 left
            make_blocks(tree, 50, "b", base_age_s=200000, now=now)
        wait_for("a takeover", lambda: any(w.holding() and w.passes() >= 1 for w in others))
        print(f"takeover after {time.monotonic() - killed_at:.2f} s (TTL 3 s, interval 0.3 s, check 0.05 s)")
        wait_for("the new holder's pass", lambda: len(blocks(root)) == 40)
        time.sleep(1.0)
        new = next(w for w in others if w.holding())
        idle = next(w for w in others if w is not new)
        assert idle.passes() == 0, idle.log_path.read_text()
        subprocess.run([kvtier_bin, "gc", str(ref), *bound, "--ignore-lease"], check=True, capture_output=True)
        assert blocks(root) == blocks(ref)
        assert removed_before + removed_files(new.m()) + removed_files(idle.m()) == 120 + 50 - 40
    finally:
        rcs = [w.stop() for w in ws]
    assert rcs[ws.index(holder)] == -signal.SIGKILL
    assert [rc for w, rc in zip(ws, rcs) if w is not holder] == [0, 0]


@pytest.fixture
def stallable_mount(tmp_path):
    """(backing, mnt, daemon): a bindfs FUSE mount of a root of 4 blocks; SIGSTOP to its daemon makes
    every call on the mount wait in the kernel (SIGCONT lets them through). Unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root, bindfs and /dev/fuse for a FUSE mount that can be made to hang")
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    make_blocks(backing, 4, "a")
    mnt.mkdir()
    daemon = subprocess.Popen(["bindfs", "-f", str(backing), str(mnt)])
    try:
        wait_for("the mount", lambda: os.path.ismount(mnt))
        yield backing, mnt, daemon
    finally:
        daemon.send_signal(signal.SIGCONT)
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], timeout=10, check=False)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a descriptor still open on the mount keeps the lazy unmount waiting
            daemon.kill()
            daemon.wait(timeout=10)


def test_a_hung_mount_ends_the_watch_with_exit_8(kvtier_bin, tmp_path, stallable_mount):
    _, mnt, daemon = stallable_mount
    w = Watcher(kvtier_bin, mnt, tmp_path, "w", "--io-timeout", "1s", *FAST)
    wait_for("a pass", lambda: w.passes() >= 1)
    daemon.send_signal(signal.SIGSTOP)  # every call on the mount now waits in the kernel
    assert w.proc.wait(timeout=60) == 8, w.log_path.read_text()
    assert "hung" in w.log_path.read_text()


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_bytes(path):
    v = os.statvfs(path)
    return v.f_bavail * v.f_frsize


def write_block(root, i):
    h = hashlib.sha256(f"w{i}".encode()).hexdigest()
    d = root / f"{NS}_r0" / h[:3] / f"{h[3:5]}_g0"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f"{h}.bin_{i}.tmp"
    tmp.write_bytes(b"\1" * (1 << 20))
    os.rename(tmp, d / f"{h}.bin")


def test_min_free_keeps_a_tmpfs_from_filling(kvtier_bin, tmp_path, tmpfs):
    root = tmpfs / "root"
    make_blocks(root, 8, "seed", size=1 << 20)
    size = os.statvfs(tmpfs).f_blocks * os.statvfs(tmpfs).f_frsize
    floor = size // 2
    check_s, rate = 0.1, 8 << 20  # the writer: 8 MiB/s, 96 MiB in all (the volume holds 64)
    w = Watcher(kvtier_bin, root, tmp_path, "w", "--min-free", "50%", "--min-free-target", "60%",
                "--interval", "1h", "--check-interval", "100ms", "--collector-ttl", "1s")
    try:
        wait_for("the lease", w.holding)
        lowest, start = free_bytes(tmpfs), time.monotonic()
        for i in range(96):
            time.sleep(max(0.0, start + i * (1 << 20) / rate - time.monotonic()))
            write_block(root, i)  # ENOSPC would raise here
            lowest = min(lowest, free_bytes(tmpfs))
        wait_for("free space back above the floor", lambda: free_bytes(tmpfs) >= floor)
        m = w.m()
    finally:
        assert w.stop() == 0
    assert m['kvtier_gc_reclaimed_files_total{reason="min_free"}'] > 0
    assert m["kvtier_gc_min_free_passes_total"] > 0
    overshoot = max(0, floor - lowest)
    per_check = rate * check_s
    print(f"tmpfs {size >> 20} MiB, floor {floor >> 20} MiB free: lowest free {lowest / 2**20:.1f} MiB, "
          f"overshoot {overshoot / 2**20:.1f} MiB = {overshoot / per_check:.2f} x one check interval's writes "
          f"({per_check / 2**20:.1f} MiB); last pass {m['kvtier_gc_last_pass_seconds']:.3f} s")


def one_shot(kvtier_bin, root, *flags):
    proc = subprocess.run([kvtier_bin, "gc", str(root), "--json", *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_one_shot_trim_defers_to_a_live_collector(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 40, "a")
    ttl = ["--collector-ttl", "1s"]
    w = Watcher(kvtier_bin, root, tmp_path, "w", *FAST)  # holds the lease, no bound of its own
    try:
        wait_for("the holder", w.holding)
        r = one_shot(kvtier_bin, root, "--max-bytes", str(20 * ROW), *ttl)
        assert r["files_reclaimed"] == 0 and "another collector" in r["capacity_skipped"], r
        assert len(blocks(root)) == 40
        r = one_shot(kvtier_bin, root, "--max-bytes", str(30 * ROW), "--ignore-lease", *ttl)
        assert r["files_reclaimed"] == 10 and r["capacity_skipped"] == "", r
        assert w.holding(), "--ignore-lease takes nothing"
    finally:
        assert w.stop(signal.SIGKILL) == -signal.SIGKILL
    assert (root / ".kvtier" / "gc.lease").is_file(), "a killed holder leaves its lease"
    started = time.monotonic()
    r = one_shot(kvtier_bin, root, "--max-bytes", str(20 * ROW), *ttl)
    print(f"stale lease taken over and trimmed in {time.monotonic() - started:.2f} s (TTL 1 s)")
    assert r["files_reclaimed"] == 10 and r["capacity_skipped"] == "", r
    assert len(blocks(root)) == 20
    assert not (root / ".kvtier" / "gc.lease").exists(), "given up at exit"


def test_one_shot_trim_takes_the_lease_for_its_run(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 40, "a")
    r = one_shot(kvtier_bin, root, "--max-bytes", str(25 * ROW), "--collector-ttl", "300ms")
    assert r["files_reclaimed"] == 15 and r["capacity_skipped"] == "" and r["walks"] == 1, r
    assert not (root / ".kvtier" / "gc.lease").exists()
    # A dry run removes nothing: it never touches the lease (no .kvtier is made for it).
    fresh = tmp_path / "fresh"
    make_blocks(fresh, 10, "b")
    one_shot(kvtier_bin, fresh, "--max-bytes", str(5 * ROW), "--dry-run")
    assert not (fresh / ".kvtier").exists()


def test_one_shot_trims_nothing_after_seeing_another_collector_give_up_the_lease(kvtier_bin, tmp_path):
    root = tmp_path / "root"
    make_blocks(root, 40, "a")
    (root / ".kvtier").mkdir()
    lease = root / ".kvtier" / "gc.lease"
    lease.write_text("another-host 4242 token\n")  # another collector's lease, as it sees it
    proc = subprocess.Popen([kvtier_bin, "gc", str(root), "--json", "--max-bytes", str(20 * ROW),
                             "--collector-ttl", "3s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # it has seen the lease (R = 200 ms), well within the TTL: not stale
    lease.unlink()   # its holder gave it up (after its own trim)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    r = json.loads(out)
    assert r["files_reclaimed"] == 0 and "another collector" in r["capacity_skipped"], r
    assert len(blocks(root)) == 40
    assert not lease.exists(), "nothing left behind"
