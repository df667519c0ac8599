"""kvtier.sglang never lets two calls in flight at once use one host page where one of them writes it.

SGLang's prefetch I/O and backup threads call at the same time; a load still reading into a host
page would overwrite what a second load (answered True) put there, or what a backup is storing.
Method: a kvtier_faultfs root holds the reads of page A's file, so a batch_get_v1 of A into host
page P is in flight for certain (the daemon counts the held call); meanwhile batch_get_v1 of page B
into P and batch_set_v1 from P answer False; once A's read is let through, A loads into P
byte-exact, and P is free for B again. Were only the pages of one call checked against each other,
the second load would answer True and P then hold A's bytes: the test fails then. Skips with one line where
../shared/sglang, torch or FUSE is unavailable.
"""

import threading

import pytest

import sglang_support as sg

sg.skip_module_unless_ready()
PS = 16

mount = pytest.fixture(name="mount")(sg.faultfs_mount)


def test_a_call_in_flight_keeps_its_host_page_from_other_calls(mount):
    p = sg.pool(pages=8, seed=5)
    cfg = {"root_dir": f"{mount.mountpoint}/root", "interface_v1": 1, "io_timeout_ms": 30000}
    b = sg.backend(cfg, p)
    ka, kb, kc = sg.keys(3, "concurrent-overlap")
    w = p.alloc(2 * PS)
    sg.fill(p, [ka, kb], w)
    assert b.batch_set_v1([ka, kb], w) == [True, True]
    page = p.alloc(PS)

    mount.hang("read", ka)
    out = {}
    first = threading.Thread(target=lambda: out.update(a=b.batch_get_v1([ka], page)), daemon=True)
    first.start()
    assert mount.wait_hung(1, 10), "the load of page A never reached its read"
    assert b.batch_get_v1([kb], page) == [False], "a second load into a page a load writes"
    assert b.batch_set_v1([kc], page) == [False], "a store of a page a load writes"
    mount.release()
    first.join(30)
    assert out.get("a") == [True]
    assert bool((p.page_u8(page[0]) == sg.expected(p, ka)).all())
    assert b.batch_get_v1([kb], page) == [True], "the page stayed claimed"
    assert bool((p.page_u8(page[0]) == sg.expected(p, kb)).all())
    b.close()
