"""Attach and clear() are bounded on a hung mount (kvtier.sglang, and every front end's attach).

On a kvtier_faultfs mount whose operations hang inside the server (as a dead NFS or FUSE server
would), with io_timeout_ms 500: SGLang's clear() returns within io_timeout + 1.5 s, raising
nothing and counting a "clear" failure, and a close() issued while that clear() waits is bounded
too (by the same, plus the 1 s its lease removal may wait); register_mem_pool_host raises
kvtier.KvtierError with code "timed_out" within io_timeout + 1.5 s, as do the vLLM front end's
VllmTier and the Python FsTier opened there (all three open an fs tier, whose start-up made its
mkdir, config.json, probes and lease with plain syscalls on the caller's thread). Each call runs
on a daemon thread, so a call that never returns fails the test instead of holding it. After the
mount is released, a backend on the same root works, so the abandoned start-ups and walk left
nothing broken behind. Skips with one line where ../shared/sglang, torch or FUSE is unavailable.
"""

import threading
import time
from pathlib import Path

import pytest

import sglang_support as sg


sg.skip_module_unless_ready()
IO_TIMEOUT_MS = 500
DECIDED_S = IO_TIMEOUT_MS / 1000 + 1.5
# close() on a hung mount also waits up to 1 s for its lease file's removal (fs/lease.h).
CLOSE_S = DECIDED_S + 1.0
PS = 16


mount = pytest.fixture(name="mount")(sg.faultfs_mount)


class Bounded:
    """fn(*args) on a daemon thread; .result() waits at most 4x the bound and gives (result,
    seconds): the return value, 'RAISED <type> <code>: <msg>' or 'STILL RUNNING'."""

    def __init__(self, fn, *args):
        self.out, self.secs = "STILL RUNNING", None
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self.thread.start()

    def _run(self, fn, args):
        try:
            self.out = fn(*args)
        except Exception as exc:  # noqa: BLE001 - what was raised is the finding
            self.out = f"RAISED {type(exc).__name__} {getattr(exc, 'code', '')}: {exc}"
        self.secs = time.monotonic() - self.t0

    def result(self):
        self.thread.join(CLOSE_S * 4)
        return self.out, self.secs if self.secs is not None else time.monotonic() - self.t0


def hang_all(mount):
    for op in sg.HANG_OPS:
        mount.hang(op)


def config(mount, **more):
    return {"root_dir": f"{mount.mountpoint}/root", "interface_v1": 1, "io_timeout_ms": IO_TIMEOUT_MS, **more}


def test_clear_and_a_close_meanwhile_are_bounded(mount):
    p = sg.pool(pages=24)
    b = sg.backend(config(mount), p)
    ks, w = sg.keys(8, "hung-clear"), p.alloc(8 * PS)
    sg.fill(p, ks, w)
    assert b.batch_set_v1(ks, w) == [True] * 8
    try:
        hang_all(mount)
        clearing = Bounded(b.clear)
        mount.wait_hung(1, DECIDED_S)  # clear() is stuck on the mount: close() now waits behind it
        closing = Bounded(b.close)
        got, secs = clearing.result()
        assert got is None and secs < DECIDED_S, f"clear() on a hung mount: {got!r} after {secs:.2f} s"
        got, secs = closing.result()
        assert got is None and secs < CLOSE_S, f"close() during a hung clear(): {got!r} after {secs:.2f} s"
        assert b.kvtier_metrics()["sglang_failures"].get("clear") == 1, b.kvtier_metrics()
    finally:
        mount.clear()
        mount.release()
    again = sg.backend(config(mount), p)
    r = p.alloc(8 * PS)
    assert again.batch_get_v1(ks, r) == [True] * 8, "a clear abandoned before any unlink removes nothing"
    again.clear()
    assert again.batch_exists(ks) == 0, "clear() on the released mount removes the pages"
    again.close()


def test_attach_on_a_hung_mount_raises_timed_out(mount):
    import kvtier

    (Path(mount.mountpoint) / "root").mkdir()
    p = sg.pool(pages=8)
    try:
        hang_all(mount)
        from kvtier.sglang import KvtierHiCacheStorage

        b = KvtierHiCacheStorage(sg.storage_config(config(mount), layout=p.layout), {})
        got, secs = Bounded(b.register_mem_pool_host, p).result()
        assert got.startswith("RAISED KvtierError timed_out") and secs < DECIDED_S, \
            f"register_mem_pool_host on a hung mount: {got!r} after {secs:.2f} s"
        assert b.batch_exists(sg.keys(2, "detached")) == 0 and b.batch_get_v1(sg.keys(2, "d"), p.alloc(2 * PS)) \
            == [False, False], "a failed attach leaves the backend detached: misses"
        ns = kvtier.Namespace("hung-attach/model")
        tier_cfg = {"root_dir": f"{mount.mountpoint}/root", "io_timeout_ms": IO_TIMEOUT_MS}
        got, secs = Bounded(kvtier.FsTier, ns, 4096, dict(tier_cfg)).result()
        assert got.startswith("RAISED KvtierError timed_out") and secs < DECIDED_S, \
            f"FsTier on a hung mount: {got!r} after {secs:.2f} s"
        got, secs = Bounded(kvtier.VllmTier, ns, bytearray(4096 * 2), 4096, dict(tier_cfg)).result()
        assert got.startswith("RAISED KvtierError timed_out") and secs < DECIDED_S, \
            f"VllmTier on a hung mount: {got!r} after {secs:.2f} s"
    finally:
        mount.clear()
        mount.release()
    del p  # the abandoned start-ups own what they use: freeing the pool must not matter
    p2 = sg.pool(pages=8)
    ks, w, r = sg.keys(2, "after-hang"), p2.alloc(2 * PS), p2.alloc(2 * PS)
    again = sg.backend(config(mount), p2)
    sg.fill(p2, ks, w)
    assert again.batch_set_v1(ks, w) == [True, True] and again.batch_get_v1(ks, r) == [True, True]
    again.close()
