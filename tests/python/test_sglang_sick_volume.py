"""kvtier.sglang on a hung mount: SGLang's calls answer a miss within the deadline.

On a kvtier_faultfs mount where every operation but FLUSH hangs inside the server (as a dead NFS
or FUSE server would), with io_timeout_ms 500, the calls SGLang's prefetch, prefetch I/O and
backup threads make -- batch_exists, batch_get_v1, batch_set_v1, and the generic batch_get /
batch_set -- each return, without raising, a value the controller can use (0, all False, None,
False) within io_timeout + 1.5 s (a deadline miss, the abandonment 100 ms later, and a busy
2-core machine). Each call runs on its own thread so that a call that never returns fails the
test instead of holding it. After the mount is released, a new backend on the same root loads
the pages stored before, byte-exact. Skips with one line where ../shared/sglang, torch or FUSE
is unavailable.
"""

import threading
import time

import pytest

import sglang_support as sg


sg.skip_module_unless_ready()
IO_TIMEOUT_MS = 500
DECIDED_S = IO_TIMEOUT_MS / 1000 + 1.5
PS = 16


mount = pytest.fixture(name="mount")(sg.faultfs_mount)


def bounded(fn, *args):
    """(result, seconds) of fn(*args) on a daemon thread; result 'STILL RUNNING' past the bound."""
    out = {"r": "STILL RUNNING"}

    def run():
        try:
            out["r"] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - a raise is a finding
            out["r"] = f"RAISED {type(exc).__name__}: {exc}"

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(DECIDED_S * 4)
    return out["r"], time.monotonic() - t0


def test_hung_mount_answers_misses_within_the_deadline(mount):
    cfg = {"root_dir": f"{mount.mountpoint}/root", "interface_v1": 1, "io_timeout_ms": IO_TIMEOUT_MS}
    p = sg.pool(pages=40)
    b = sg.backend(cfg, p)
    ks, new = sg.keys(8, "sick"), sg.keys(8, "sick-new")
    w, r = p.alloc(8 * PS), p.alloc(8 * PS)
    sg.fill(p, ks, w)
    assert b.batch_set_v1(ks, w) == [True] * 8
    try:
        for op in sg.HANG_OPS:
            mount.hang(op)
        calls = {
            "batch_exists": (b.batch_exists, (new,), 0),
            "batch_get_v1": (b.batch_get_v1, (ks, r), [False] * 8),
            "batch_set_v1": (b.batch_set_v1, (new, w), [False] * 8),
            "batch_get": (b.batch_get, (ks[:2], [p.get_dummy_flat_data_page() for _ in range(2)]), [None, None]),
            "batch_set": (b.batch_set, (new[:2], [p.get_data_page(w[i * PS]) for i in range(2)]), False),
        }
        for name, (fn, args, want) in calls.items():
            got, secs = bounded(fn, *args)
            assert got == want and secs < DECIDED_S, f"{name} on a hung mount: {got!r} after {secs:.2f} s"
        m = b.kvtier_metrics()
        assert m["deadline_misses"] >= 1, m
    finally:
        mount.clear()
        mount.release()
    done, secs = bounded(b.close)
    assert done is None, f"close after release: {done!r} after {secs:.2f} s"
    again = sg.backend(cfg, p)
    assert again.batch_exists(ks) == 8 and again.batch_get_v1(ks, r) == [True] * 8
    assert all(bool((p.page_u8(r[i * PS]) == sg.expected(p, k)).all()) for i, k in enumerate(ks))
    again.close()
