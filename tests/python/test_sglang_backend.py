"""kvtier.sglang beyond SGLang's selftest: what the selftest does not cover.

Proves, with SGLang's own HiCacheStorage/config classes (sgl-project/sglang
``python/sglang/srt/mem_cache/hicache_storage.py`` at commit d315eb725044, run from
../shared/sglang) and the kit's mock host pool:
the zero-copy pieces of every host layout concatenate to exactly SGLang's flat page (MHA
layer_first reordered from [K0,V0,K1,V1,..]); the namespace fields come from the pool and the
config (MHA per TP rank, MLA shared by TP ranks); a backend restarted on a populated root finds
and loads every page; two roots with path_sharding both get pages and serve them; a full disk
(a small tmpfs) makes stores False and nothing raise while stored pages still load; a page
replaced or overwritten in place by another process while being read is never returned torn;
bad configuration is refused at attach with a KvtierError naming the key, an unknown key only
warns; checksum_place reaches the store (trailer pages load, a flipped byte is a miss);
malformed calls answer a miss, never raise; get_stats gives SGLang's StorageMetrics.
Skips with one line where ../shared/sglang or torch is absent.
"""

import ctypes
import logging
import os
import random
import subprocess
import sys
import textwrap
import time

import pytest

import sglang_support as sg
from sglang_support import sglang_tree  # noqa: F401 (autouse: the harness on sys.path)

sg.skip_module_unless_ready()
PS = 16


extra = sg.extra_config


def pieces_bytes(pieces):
    return b"".join(ctypes.string_at(addr, n) for addr, n in pieces)


@pytest.mark.parametrize("kind,layout", [("mha", "page_first"), ("mha", "page_first_direct"), ("mha", "page_head"),
                                         ("mha", "layer_first"), ("mla", "page_first"),
                                         ("mla", "page_first_direct"), ("mla", "layer_first")])
def test_zero_copy_pieces_are_the_flat_page(tmp_path, kind, layout):
    p = sg.pool(kind, layout, pages=8)
    b = sg.backend(extra(tmp_path), p, is_mla=kind == "mla")
    idx = p.alloc(3 * PS)
    ks = sg.keys(3, layout)
    sg.fill(p, ks, idx)
    for i, pieces in enumerate(b._pool_pieces(3, idx)):
        assert pieces_bytes(pieces) == p.page_u8(idx[i * PS]).numpy().tobytes(), f"{kind} {layout} page {i}"
    assert b._store.page_bytes == p.page_bytes
    b.close()


def test_namespace_fields_follow_the_pool_and_ranks(tmp_path):
    import json

    p = sg.pool("mha", "page_first", pages=4)
    b0 = sg.backend(extra(tmp_path), p, tp_rank=0, tp_size=2)
    b1 = sg.backend(extra(tmp_path), p, tp_rank=1, tp_size=2)
    fields = json.loads(b0._store.config_json)
    assert fields["inference_engine"] == "sglang" and fields["mem_layout"] == "page_first", fields
    assert (fields["k_bytes_per_token"], fields["v_bytes_per_token"], fields["layer_num"]) == (256, 256, 4), fields
    assert fields["dtype"] == "bfloat16" and fields["page_bytes"] == p.page_bytes and fields["tp_size"] == 2
    assert b0._store.namespace_dir == b1._store.namespace_dir and b0._store.block_dir != b1._store.block_dir
    m = sg.pool("mla", "page_first", pages=4)
    m0 = sg.backend(extra(tmp_path), m, is_mla=True, tp_rank=0, tp_size=2)
    m1 = sg.backend(extra(tmp_path), m, is_mla=True, tp_rank=1, tp_size=2)
    assert m0._store.block_dir == m1._store.block_dir, "MLA ranks read TP rank 0's pages"
    other = sg.backend(extra(tmp_path), p, model="kvtier-test/other", tp_rank=0, tp_size=2)
    assert other._store.namespace_dir != b0._store.namespace_dir
    for b in (b0, b1, m0, m1, other):
        b.close()


def roundtrip(b, p, ks, salt=0):
    """Store ks from one region, load them into another; returns (stored, found, exact)."""
    w, r = p.alloc(len(ks) * PS), p.alloc(len(ks) * PS)
    sg.fill(p, ks, w, salt)
    stored = sum(b.batch_set_v1(ks, w))
    found = b.batch_exists(ks)
    ok = b.batch_get_v1(ks, r)
    exact = sum(bool(good) and bool((p.page_u8(r[i * PS]) == sg.expected(p, k, salt)).all())
                for i, (k, good) in enumerate(zip(ks, ok)))
    p.free(w)
    p.free(r)
    return stored, found, exact


def test_restart_on_a_populated_root(tmp_path):
    p = sg.pool(pages=80)
    ks = sg.keys(32, "restart")
    a = sg.backend(extra(tmp_path), p)
    assert roundtrip(a, p, ks) == (32, 32, 32)
    a.close()
    b = sg.backend(extra(tmp_path), p)  # a new server process would do the same: nothing in memory
    r = p.alloc(32 * PS)
    assert b.batch_exists(ks) == 32
    assert all(b.batch_get_v1(ks, r))
    assert all(bool((p.page_u8(r[i * PS]) == sg.expected(p, k)).all()) for i, k in enumerate(ks))
    # the generic path reads the same files
    pages = b.batch_get(ks[:4], [p.get_dummy_flat_data_page() for _ in range(4)])
    assert all(bool((pg.view(torch_uint8()) == sg.expected(p, k)).all()) for pg, k in zip(pages, ks))
    b.close()


def test_checksum_place_trailer_round_trips_and_a_flipped_byte_is_a_miss(tmp_path):
    """checksum_place reaches the store through the backend's config (FORMAT.md L130): each page
    file is the page plus its 4096-byte trailer; a backend with the default place loads them (a
    reader checks whichever form a page carries), and a flipped byte is a miss, its file removed."""
    p = sg.pool(pages=40)
    ks = sg.keys(4, "trailer")
    a = sg.backend(extra(tmp_path, checksum_place="trailer"), p)
    assert roundtrip(a, p, ks) == (4, 4, 4)
    a.close()
    files = sorted(tmp_path.rglob("*.bin"))
    sizes = {f.stat().st_size for f in files}
    assert len(files) == 4 and len(sizes) == 1 and sizes.pop() - 4096 == p.page_u8(0).numel()
    with open(files[0], "r+b") as f:
        f.seek(7)
        byte = f.read(1)
        f.seek(7)
        f.write(bytes([byte[0] ^ 0x01]))
    b = sg.backend(extra(tmp_path), p)
    r = p.alloc(4 * PS)
    assert sum(bool(ok) for ok in b.batch_get_v1(ks, r)) == 3
    assert len(list(tmp_path.rglob("*.bin"))) == 3, "the corrupt page file is removed"
    p.free(r)
    b.close()


def torch_uint8():
    import torch

    return torch.uint8


def test_two_roots_with_path_sharding(tmp_path):
    roots = [tmp_path / "a", tmp_path / "b"]
    cfg = extra(f"{roots[0]},{roots[1]}", path_sharding="by_block_hash")
    p = sg.pool(pages=140)
    ks = sg.keys(64, "roots")
    b = sg.backend(cfg, p)
    assert roundtrip(b, p, ks) == (64, 64, 64)
    b.close()
    per_root = [sum(f.endswith(".bin") for _, _, fs in os.walk(r) for f in fs) for r in roots]
    assert sum(per_root) == 64 and min(per_root) > 0, per_root
    again = sg.backend(cfg, p)
    assert again.batch_exists(ks) == 64
    again.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the full-disk test: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_stores_false_reads_still_work(small_tmpfs):
    p = sg.pool(pages=140)  # 32 KiB pages: 64 of them are twice the 1 MiB volume
    b = sg.backend(extra(small_tmpfs), p)
    ks = sg.keys(64, "full")
    w, r = p.alloc(64 * PS), p.alloc(64 * PS)
    sg.fill(p, ks, w)
    stored = b.batch_set_v1(ks, w)
    assert isinstance(stored, list) and len(stored) == 64 and not all(stored), stored
    assert b.batch_set(ks[:2], [p.get_data_page(w[i * PS]) for i in range(2)]) in (True, False)
    ok_keys = [k for k, s in zip(ks, stored) if s]
    assert ok_keys, "a 1 MiB volume holds some 32 KiB pages"
    assert b.batch_exists(ok_keys) == len(ok_keys)
    got = b.batch_get_v1(ok_keys, r[: len(ok_keys) * PS])
    assert all(got) and all(bool((p.page_u8(r[i * PS]) == sg.expected(p, k)).all()) for i, k in enumerate(ok_keys))
    m = b.kvtier_metrics()
    assert m["store_errors"] + m["rows_dropped"] >= 1, m
    b.close()


WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path[:0] = sys.argv[1].split(os.pathsep)
    import sglang_support as sg
    import torch
    root, key, stop, mode = sys.argv[2:6]
    p = sg.pool(pages=4, page_size=64, layers=8, heads=4, head_dim=128)   # 1 MiB pages
    idx = p.alloc(64)
    b = sg.backend({"root_dir": root, "interface_v1": 1}, p)
    n = 0
    path = b._store.page_path(key)
    while not os.path.exists(stop):
        v = 0x5A if n % 2 else 0xA5
        if mode == "replace":   # another instance clears its namespace and stores other bytes
            p.write_page_u8(idx[0], torch.full((p.page_bytes,), v, dtype=torch.uint8))
            b.clear()
            b.batch_set_v1([key], idx)
        else:                   # a foreign process overwrites the file in place, 64 KiB at a time
            try:
                with open(path, "r+b") as f:
                    for off in range(0, p.page_bytes, 65536):
                        f.write(bytes([v]) * 65536)
            except OSError:
                pass
        n += 1
    print("WRITES", n, flush=True)
""")


@pytest.mark.parametrize("mode", ["replace", "in_place"])
def test_page_rewritten_by_another_process_is_never_torn(tmp_path, mode):
    import torch

    p = sg.pool(pages=4, page_size=64, layers=8, heads=4, head_dim=128)
    b = sg.backend({"root_dir": str(tmp_path), "interface_v1": 1}, p)
    key = sg.keys(1, "torn" + mode)[0]
    slot = p.alloc(64)
    p.write_page_u8(slot[0], torch.full((p.page_bytes,), 0xA5, dtype=torch.uint8))
    assert b.batch_set_v1([key], slot) == [True]
    stop = tmp_path / "stop"
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([here, str(sg.harness_tree(None)), sg.kvtier_python_dir()])
    w = subprocess.Popen([sys.executable, "-c", WRITER, path, str(tmp_path), key, str(stop), mode],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reads = torn = 0
    deadline = time.monotonic() + 4.0
    try:
        while time.monotonic() < deadline and w.poll() is None:
            p.write_page_u8(slot[0], torch.zeros(p.page_bytes, dtype=torch.uint8))
            if b.batch_get_v1([key], slot) == [True]:
                reads += 1
                page = p.page_u8(slot[0])
                v = int(page[0])
                whole = v in (0x5A, 0xA5) and bool((page == v).all())
                torn += not whole
                if mode == "in_place":
                    # the CRC32C xattr is the original's: only the original bytes may be served
                    torn += whole and v != 0xA5
    finally:
        stop.touch()
        out, err = w.communicate(timeout=60)
    assert "WRITES" in out, f"writer failed:\n{out}\n{err}"
    assert torn == 0, f"{torn} torn pages in {reads} reads ({mode})"
    assert mode == "in_place" or reads > 0, f"no read succeeded while the page was replaced:\n{out}"
    b.close()


def test_bad_config_is_refused_at_attach_naming_the_key(tmp_path, caplog):
    import torch

    import kvtier
    from kvtier.sglang import KvtierHiCacheStorage

    p = sg.pool(pages=4)

    def refused(key, extra_config, pool=p, **cfg):
        with pytest.raises(kvtier.KvtierError) as e:
            sg.backend(extra_config, pool, **cfg)
        assert key in str(e.value) and e.value.code == "invalid_argument", str(e.value)

    refused("root_dir", {"interface_v1": 1})
    refused("io_timeout_ms", extra(tmp_path, io_timeout_ms=-1))
    refused("durability", extra(tmp_path, durability="sometimes"))
    refused("model_path", extra(tmp_path, model_path=3))
    refused("model_name", extra(tmp_path), model=None)
    refused("dtype", extra(tmp_path), pool=sg.pool(pages=4, dtype=torch.int32))
    odd = sg.pool(pages=4)
    odd.layout = "page_first_kv_split"
    refused("mem_layout", extra(tmp_path), pool=odd)
    refused("mem_layout", extra(tmp_path), pool=sg.pool(pages=4, layout="page_head"), is_mla=True)
    with pytest.raises(kvtier.KvtierError, match="storage_config"):
        KvtierHiCacheStorage(None, {})
    # model_path names the model when SGLang has no served name; unknown keys only warn
    with caplog.at_level(logging.WARNING, logger="kvtier.sglang"):
        b = sg.backend(extra(tmp_path, model_path="/models/x", metadata_ttl=5, prefetch_threshold=256), p, model=None)
    warned = [r.getMessage() for r in caplog.records if r.name == "kvtier.sglang"]
    assert any("metadata_ttl" in m for m in warned) and not any("prefetch_threshold" in m for m in warned), warned
    b.close()


def test_a_backup_larger_than_the_store_queue_is_stored_in_parts(tmp_path):
    """The fs tier drops a store job over store_queue_bytes_max whole; SGLang's 128-page backup
    of large pages is over the default 1 GiB, so kvtier.sglang splits it."""
    import kvtier

    p = sg.pool(pages=300)  # 32 KiB pages: 128 of them are 4 MiB, four times the queue
    b = sg.backend(extra(tmp_path, store_queue_bytes_max=1 << 20), p)
    assert roundtrip(b, p, sg.keys(128, "queue")) == (128, 128, 128)
    w = p.alloc(2 * PS)
    assert b.batch_set(sg.keys(2, "queue2"), [p.get_data_page(w[i * PS]) for i in range(2)]) is True
    b.close()
    with pytest.raises(kvtier.KvtierError, match="store_queue_bytes_max"):
        sg.backend(extra(tmp_path, store_queue_bytes_max=1 << 14), p)


def test_malformed_calls_answer_a_miss_and_never_raise(tmp_path):
    import torch

    p = sg.pool(pages=8)
    b = sg.backend(extra(tmp_path), p)
    ks = sg.keys(2, "bad")
    assert b.batch_get_v1(ks, None) == [False, False]
    assert b.batch_set_v1(ks, torch.arange(3)) == [False, False]
    assert b.batch_exists(None) == 0
    assert b.batch_set(ks, [torch.zeros(7), torch.zeros(7)]) is False  # wrong page size
    assert b.batch_get(ks, [torch.zeros(7), torch.zeros(7)]) == [None, None]
    assert b.get(ks[0]) is None and b.exists(ks[0]) is False and b.set(ks[0], "not a tensor") is False
    b.close()
    w = p.alloc(2 * PS)
    assert b.batch_set_v1(ks, w) == [False, False] and b.batch_exists(ks) == 0  # after close
    assert b.kvtier_metrics()["sglang_failures"], "failures are counted"


def test_get_stats_gives_storage_metrics_when_enabled(tmp_path):
    from sglang.srt.observability.metrics_collector import StorageMetrics

    p = sg.pool(pages=40)
    off = sg.backend(extra(tmp_path), p)
    assert off.get_stats() is None
    off.close()
    on = sg.backend(extra(tmp_path), p, metrics=True)
    roundtrip(on, p, sg.keys(8, "stats"))
    stats = on.get_stats()
    assert isinstance(stats, StorageMetrics), stats
    assert stats.backup_pgs == [8] and stats.prefetch_pgs == [8], stats
    assert on.get_stats().backup_pgs == [], "each call reports what happened since the last"
    on.close()


def test_clear_removes_only_this_namespace(tmp_path):
    p = sg.pool(pages=80)
    a, other = sg.backend(extra(tmp_path), p), sg.backend(extra(tmp_path), p, model="kvtier-test/other")
    ka, ko = sg.keys(8, "ca"), sg.keys(8, "co")
    roundtrip(a, p, ka)
    roundtrip(other, p, ko)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("keep")
    a.clear()
    assert a.batch_exists(ka) == 0 and other.batch_exists(ko) == 8 and foreign.read_text() == "keep"
    a.close()
    other.close()


def test_random_layouts_round_trip_across_paths(tmp_path):
    """Pages written on one path read back on the other (seeded; the seed is in the message)."""
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    for layout in ("page_first", "page_first_direct", "layer_first", "page_head"):
        p = sg.pool("mha", layout, pages=24, layers=rnd.choice([1, 3, 4]))
        b = sg.backend(extra(tmp_path / layout), p)
        ks = sg.keys(4, f"x{seed}{layout}")
        w, r = p.alloc(4 * PS), p.alloc(4 * PS)
        sg.fill(p, ks, w)
        assert b.batch_set_v1(ks[:2], w[: 2 * PS]) == [True, True], (seed, layout)
        assert b.batch_set(ks[2:], [p.get_data_page(w[(2 + i) * PS]) for i in range(2)]), (seed, layout)
        pages = b.batch_get(ks[:2], [p.get_dummy_flat_data_page() for _ in range(2)])
        assert b.batch_get_v1(ks[2:], r[: 2 * PS]) == [True, True], (seed, layout)
        for i, k in enumerate(ks[:2]):
            assert bool((pages[i].view(torch_uint8()) == sg.expected(p, k)).all()), (seed, layout, "v1 -> generic")
        for i, k in enumerate(ks[2:]):
            assert bool((p.page_u8(r[i * PS]) == sg.expected(p, k)).all()), (seed, layout, "generic -> v1")
        b.close()
