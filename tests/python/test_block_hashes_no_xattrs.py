"""Block-hash records (FORMAT.md L197-L202, docs/kv-events.md "Files of several blocks") on a root
without user xattrs (``bindfs --xattr-none``, a FUSE mount), kvtier.FsTier in a namespace whose
files hold 4 blocks (blocks_per_file 4), KV events on. Proves:

* checksum_place "auto" picks the trailer there, and a store given each file's 4 block hashes
  publishes one BlockStored naming the 4 in order (block_size tokens_per_hash), its file (row +
  4096 bytes) holding the record at the start of its last page (L199); nothing is lost;
* with ``checksum_blocks`` off there is no page and the attribute cannot be set: the record cannot
  be written, so the store names the key alone (block_size the file's tokens), the block is stored
  all the same, and ``kvtier_fs_block_hash_records_lost_total`` counts 1 per such file;
* a removal of a trailer-form file reads its record back through the mount before the unlink (L201:
  the attribute refused, then a pread of the last page) and its BlockRemoved names the 4 blocks: a
  ``max_bytes`` eviction (EvictOp) and a corrupt block's removal by a load (LoadOp), with
  io_backend "auto" (syscall on FUSE) and "uring". (The reader drops O_NONBLOCK before that pread:
  where io_uring fails a non-blocking read on FUSE with EAGAIN, the uring cases catch a reader
  that keeps it; a kernel that hands such reads to a worker, as 6.18 does, passes either way.)

Skips (one line saying why) where bindfs or FUSE is missing. Method: a real SUB socket (conftest's
event_sub), payloads decoded with python3-msgpack in vLLM's layout, hashes sent as bytes; records
read back with block_hash_records.py, written from the rules' text alone.
"""

import time
from pathlib import Path

import pytest

msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is needed to decode kvtier's KV events")

import kvtier  # noqa: E402
from bindfs_root import bindfs_root  # noqa: E402
from block_hash_records import file_blocks, parse  # noqa: E402

ROW, BLOCKS, TOKENS, PAGE = 16384, 4, 16, 4096
LOST = "kvtier_fs_block_hash_records_lost_total"


@pytest.fixture
def bare(tmp_path):
    yield from bindfs_root(tmp_path)


@pytest.fixture(params=["auto", "uring"])
def backend(request, tmp_path):
    """io_backend "auto" (the syscall pool on FUSE) or "uring" (io_uring there too); the latter
    skipped where the kernel refuses a ring (seen on a local directory, where "auto" takes one)."""
    if request.param == "uring":
        (tmp_path / "probe").mkdir()
        with kvtier.FsTier(kvtier.Namespace("kvtier-test/probe"), ROW, {"root_dir": str(tmp_path / "probe")}) as t:
            if t.backend != "io_uring":
                pytest.skip("the kernel refuses an io_uring ring here: no uring backend to test")
    return request.param


def tier_backend(tier, backend):
    assert (tier.backend == "io_uring") == (backend == "uring"), tier.backend


def events(s, n, timeout_s=20):
    """The next n events as (tag, hashes, block_size or None), and any within 300 ms after."""
    got, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not s.poll(300 if len(got) >= n else 100):
            if len(got) >= n:
                break
            continue
        _, _, payload = s.recv_multipart()
        got += [(e[0], e[1], e[4] if e[0] == "BlockStored" else None) for e in msgpack.unpackb(payload, raw=False)[1]]
    return got


def open_tier(root, endpoint, **config):
    ns = kvtier.Namespace("kvtier-test/block-hashes-no-xattrs", blocks_per_file=BLOCKS)
    events_config = {"enable_kv_cache_events": True, "endpoint": endpoint, "block_hash_encoding": "bytes"}
    return kvtier.FsTier(ns, ROW, {"root_dir": str(root), "kv_events_config": events_config, **config})


def run(tier, job):
    while True:
        for r in tier.wait(1000):
            if r.job_id == job:
                return r.outcomes


def chunks(n, seed):
    """n chunks of vLLM's scheme: their block hashes (4 each) and keys (each its chunk's last hash)."""
    hashes = kvtier.block_hashes(list(range(n * BLOCKS * TOKENS)), seed=seed)
    keys = kvtier.chunk_keys(hashes, blocks_per_chunk=BLOCKS)
    return [hashes[i * BLOCKS:(i + 1) * BLOCKS] for i in range(n)], keys


def store(tier, keys, lists):
    assert run(tier, tier.submit_store(keys, [bytes([i + 1]) * ROW for i in range(len(keys))],
                                       block_hashes=lists)) == ["ok"] * len(keys)


def lost(tier):
    """kvtier_fs_block_hash_records_lost_total in the tier's Prometheus text."""
    values = [float(line.split()[-1]) for line in tier.prometheus_text().splitlines() if line.startswith(LOST)]
    assert len(values) == 1, f"{LOST} is not in the tier's metrics"
    return values[0]


def test_auto_records_every_block_in_the_trailer(bare, event_sub):
    s, endpoint = event_sub
    with open_tier(bare, endpoint) as tier:
        s.poll(50)  # hands the tier's publisher this socket's subscription once it connects
        assert tier.checksum_place == "trailer" and not tier.xattrs_supported
        lists, keys = chunks(2, "trailer")
        store(tier, keys, lists)
        assert sorted(events(s, 2)) == sorted(("BlockStored", b, TOKENS) for b in lists)
        for key, blocks in zip(keys, lists):
            path = Path(tier.block_path(key))
            assert path.stat().st_size == ROW + PAGE, path
            with open(path, "rb") as f:
                f.seek(ROW)
                assert parse(f.read(PAGE), key[:-4]) == blocks, f"{path}: no record at its last page's start"
            assert file_blocks(path) == blocks
        assert lost(tier) == 0


def test_without_a_page_the_record_is_lost_and_counted(bare, event_sub):
    s, endpoint = event_sub
    with open_tier(bare, endpoint, checksum_blocks=False) as tier:
        s.poll(50)
        assert tier.checksum_place == "off"
        lists, keys = chunks(2, "lost")
        store(tier, keys, lists)
        assert sorted(events(s, 2)) == sorted(("BlockStored", [k[:-4]], BLOCKS * TOKENS) for k in keys)
        for key in keys:
            path = Path(tier.block_path(key))
            assert path.stat().st_size == ROW and file_blocks(path) == [key[:-4]], path
        assert lost(tier) == 2, "one lost record per file"
        assert run(tier, tier.submit_lookup(keys)) == ["ok", "ok"], "stored all the same"


def test_an_eviction_names_every_block(bare, event_sub, backend):
    s, endpoint = event_sub
    with open_tier(bare, endpoint, io_backend=backend, max_bytes=2 * (ROW + PAGE) + PAGE) as tier:
        s.poll(50)
        tier_backend(tier, backend)
        lists, keys = chunks(3, "evict-" + backend)
        for i in range(3):  # one at a time: the third evicts the first, the least recently used
            store(tier, keys[i:i + 1], lists[i:i + 1])
        got = events(s, 4)
        assert [e for e in got if e[0] == "BlockStored"] == [("BlockStored", b, TOKENS) for b in lists]
        assert [e for e in got if e[0] == "BlockRemoved"] == [("BlockRemoved", lists[0], None)], got
        assert not Path(tier.block_path(keys[0])).exists()


def test_a_corrupt_blocks_removal_names_every_block(bare, event_sub, backend):
    s, endpoint = event_sub
    with open_tier(bare, endpoint, io_backend=backend) as tier:
        s.poll(50)
        tier_backend(tier, backend)
        lists, keys = chunks(1, "corrupt-" + backend)
        store(tier, keys, lists)
        assert events(s, 1) == [("BlockStored", lists[0], TOKENS)]
        path = Path(tier.block_path(keys[0]))
        with open(path, "r+b") as f:
            f.seek(ROW // 2)
            byte = f.read(1)
            f.seek(ROW // 2)
            f.write(bytes([byte[0] ^ 0x5A]))
        assert run(tier, tier.submit_load(keys, [bytearray(ROW)])) == ["corrupt"]
        assert events(s, 1) == [("BlockRemoved", lists[0], None)]
        assert not path.exists()
