"""kvtier.sglang attaches again: a second register_mem_pool_host on one backend works, and a failed
one leaves the backend detached, answering misses, until an attach succeeds.

A parser that took root_dir out of the very dict the backend keeps would fail the second attach
(after the working store was closed) with "root_dir missing", and empty a config given to the
Python FsTier the same way. Proves: pages stored through the first attach load
through the second, into another pool; the backend's config and a config given to kvtier.FsTier
are unchanged by opening; a re-attach with a pool kvtier does not store raises KvtierError, after
which every call answers its miss (0, all False, None) and clear() and close() raise nothing;
a third attach works again. Skips with one line where ../shared/sglang or torch is absent.
"""

import pytest

import sglang_support as sg
from sglang_support import sglang_tree  # noqa: F401 (autouse: the harness on sys.path)

sg.skip_module_unless_ready()
PS = 16


def test_a_second_attach_works_and_a_failed_one_leaves_the_backend_detached(tmp_path):
    import kvtier

    cfg = {"interface_v1": 1, "root_dir": str(tmp_path / "root")}
    p1, p2 = sg.pool(pages=8, seed=1), sg.pool(pages=8, seed=2)
    b = sg.backend(cfg, p1)
    kept = dict(b._fs_config)
    ks, w = sg.keys(4, "reattach"), p1.alloc(4 * PS)
    sg.fill(p1, ks, w)
    assert b.batch_set_v1(ks, w) == [True] * 4
    b.register_mem_pool_host(p2)
    assert b._fs_config == kept, "opening must not change the backend's config"
    r = p2.alloc(4 * PS)
    assert b.batch_exists(ks) == 4 and b.batch_get_v1(ks, r) == [True] * 4
    assert all(bool((p2.page_u8(r[i * PS]) == sg.expected(p2, k)).all()) for i, k in enumerate(ks))

    odd = sg.pool(pages=8)
    odd.layout = "page_first_kv_split"
    with pytest.raises(kvtier.KvtierError, match="mem_layout"):
        b.register_mem_pool_host(odd)
    assert b.batch_exists(ks) == 0 and b.exists(ks[0]) is False
    assert b.batch_get_v1(ks, r) == [False] * 4 and b.batch_set_v1(ks, r) == [False] * 4
    assert b.batch_get(ks[:1]) == [None] and b.get(ks[0]) is None
    assert b.batch_set(ks[:1], [p2.get_data_page(r[0])]) is False and b.set(ks[0], p2.get_data_page(r[0])) is False
    assert b.clear() is None and b.close() is None and b.close() is None

    b.register_mem_pool_host(p1)
    assert b.batch_get_v1(ks, w) == [True] * 4, "a later attach works again"
    b.close()


def test_fs_tier_leaves_the_callers_config_as_it_was(tmp_path):
    import kvtier

    config = {"root_dir": str(tmp_path / "fs"), "io_timeout_ms": 5000}
    before = dict(config)
    for _ in range(2):
        kvtier.FsTier(kvtier.Namespace("reattach/model"), 4096, config).close()
        assert config == before, config
