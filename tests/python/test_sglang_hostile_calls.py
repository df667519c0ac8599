"""No argument makes a kvtier.sglang entry point raise into SGLang's threads.

SGLang's prefetch, prefetch I/O and backup threads catch nothing, so one exception ends L3 for the
life of the process. Every public entry point gets hostile arguments (None and other objects
without a length as keys, non-str keys, wrong types, mismatched lengths, host indices that are
not a tensor, float, two-dimensional, too short or too long; indices outside the pool, negative
or huge: test_sglang_pool_bounds.py) on an attached backend and on one never attached, and must
answer its failure value without raising: [] for a batch whose keys cannot be counted, else one
False (v1) or None (generic) per key; False for batch_set, set and exists; 0 for batch_exists;
None for get, clear, get_stats and close. keys=None must not raise a TypeError from the calls'
own except clause. A bad pool or config at attach raises only kvtier.KvtierError. Skips with one line
where ../shared/sglang or torch is absent.
"""

import pytest

import sglang_support as sg
from sglang_support import sglang_tree  # noqa: F401 (autouse: the harness on sys.path)

sg.skip_module_unless_ready()
PS = 16


class NoLen:
    def __iter__(self):
        return iter(["a"])


class LyingLen:
    def __len__(self):
        return 3

    def __iter__(self):
        raise RuntimeError("hostile iteration")


UNCOUNTABLE = [None, 5, 2.5, object(), NoLen(), LyingLen(), "abc", b"abc", (k for k in ["gen"])]


def hostile_indices(p, n):
    import torch

    good = p.alloc(n * PS)
    # Indices outside the pool crashed the old code (SIGSEGV): test_sglang_pool_bounds.py tries
    # them in a child process, for every layout.
    return [None, "indices", list(range(n * PS)), good.float(), good.view(n, PS), good[:-1], good.bool(),
            torch.zeros(0, dtype=torch.int64), good.repeat(2)]


def check_every_entry_point(b, p):
    import torch

    ks = sg.keys(2, "hostile")
    calls = []
    for keys in UNCOUNTABLE:
        idx = p.alloc(2 * PS) if p is not None else torch.arange(2 * PS)
        calls += [(b.batch_get_v1, (keys, idx), []), (b.batch_set_v1, (keys, idx), []),
                  (b.batch_get, (keys,), []), (b.batch_get, (keys, [None, None]), []),
                  (b.batch_set, (keys, [None, None]), False), (b.batch_exists, (keys,), 0),
                  (b.get, (keys,), None), (b.set, (keys, None), False), (b.exists, (keys,), False)]
    for keys in ([None, 1], [ks[0], 7], [ks[0], b"raw"]):
        calls += [(b.batch_exists, (keys,), 0), (b.batch_get, (keys,), [None, None]),
                  (b.batch_set, (keys, [torch.zeros(4), torch.zeros(4)]), False)]
    for idx in (hostile_indices(p, 2) if p is not None else [None]):
        calls += [(b.batch_get_v1, (ks, idx), [False, False]), (b.batch_set_v1, (ks, idx), [False, False])]
    for locs in (5, "xy", [None], [None, None, None], [torch.zeros(3), "t"], [torch.zeros(3, 3).t(), None]):
        calls += [(b.batch_get, (ks, locs), [None, None])]
    for vals in (None, 5, [None], [torch.zeros(3)] * 3, ["a", "b"], [torch.zeros(0), torch.zeros(0)]):
        calls += [(b.batch_set, (ks, vals), False)]
    calls += [(b.get, (ks[0], "not a tensor"), None), (b.set, (ks[0], object()), False),
              (b.batch_get_v1, ([], torch.zeros(0, dtype=torch.int64)), []),
              (b.get_stats, (), None), (b.clear, (), None)]
    wrong = []
    for fn, args, want in calls:
        try:
            got = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - a raise is the finding
            got = f"RAISED {type(exc).__name__}: {exc}"
        if got != want or type(got) is not type(want):
            wrong.append(f"{fn.__name__}{tuple(type(a).__name__ for a in args)} -> {got!r}, want {want!r}")
    assert not wrong, "\n".join(wrong)
    assert isinstance(b.kvtier_metrics()["sglang_failures"], dict)


def test_attached_backend_answers_failure_values(tmp_path):
    p = sg.pool(pages=64)
    b = sg.backend({"interface_v1": 1, "root_dir": str(tmp_path)}, p)
    check_every_entry_point(b, p)
    ks, w = sg.keys(2, "still-works"), p.alloc(2 * PS)
    sg.fill(p, ks, w)
    assert b.batch_set_v1(ks, w) == [True, True] and b.batch_exists(ks) == 2, "hostile calls broke nothing"
    assert b.close() is None and b.close() is None
    check_every_entry_point(b, p)


def test_never_attached_backend_answers_failure_values(tmp_path):
    from kvtier.sglang import KvtierHiCacheStorage

    b = KvtierHiCacheStorage(sg.storage_config({"root_dir": str(tmp_path)}), {})
    check_every_entry_point(b, None)
    assert b.close() is None


def test_attach_raises_only_kvtier_errors(tmp_path):
    import kvtier
    from kvtier.sglang import KvtierHiCacheStorage

    b = KvtierHiCacheStorage(sg.storage_config({"root_dir": str(tmp_path)}), {})
    for pool in (None, 5, object(), "pool"):
        with pytest.raises(kvtier.KvtierError):
            b.register_mem_pool_host(pool)
    broken = sg.pool(pages=4)
    broken.layer_num = "many"
    with pytest.raises(kvtier.KvtierError, match="mem_pool_host"):
        b.register_mem_pool_host(broken)

    class Exploding:
        def __getattr__(self, name):
            raise RuntimeError("hostile storage_config")

    with pytest.raises(kvtier.KvtierError, match="storage_config"):
        KvtierHiCacheStorage(Exploding(), {})
