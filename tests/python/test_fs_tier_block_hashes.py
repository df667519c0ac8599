"""kvtier.FsTier.submit_store's block_hashes (FORMAT.md L197-L202, docs/kv-events.md): in a namespace
whose files hold 4 blocks (blocks_per_file 4), a store given each key's 4 block hashes (vLLM's: a
chunk's key is its last block hash) publishes one BlockStored per file naming the 4, in order, with
block_size tokens_per_hash; a store without them (None, or an empty list for a key) names the key
alone, block_size the file's tokens. A list that is not the file's blocks (the last one not the key, one too few, a hash of
another length, not one list per key) or not made of bytes raises KvtierError(invalid_argument)
naming what is wrong, and nothing is stored or announced.
Method: a real FsTier on a temp root, a real SUB socket (python3-zmq) bound by the test, payloads
decoded with python3-msgpack in vLLM's layout, hashes sent as bytes.
"""

import time

import pytest

zmq = pytest.importorskip("zmq", reason="python3-zmq is needed to subscribe to kvtier's KV events")
msgpack = pytest.importorskip("msgpack", reason="python3-msgpack is needed to decode kvtier's KV events")

import kvtier  # noqa: E402

ROW, BLOCKS, TOKENS = 16384, 4, 16


@pytest.fixture
def sub(event_sub):
    return event_sub


def receive(s, n, timeout_s=20):
    """BlockStored events as (hashes, block_size) until n arrived or the time is up."""
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        if s.poll(100):
            _, _, payload = s.recv_multipart()
            got += [(e[1], e[4]) for e in msgpack.unpackb(payload, raw=False)[1] if e[0] == "BlockStored"]
    return got


def run(tier, job):
    while True:
        for r in tier.wait(1000):
            if r.job_id == job:
                return r.outcomes


@pytest.fixture
def tier(tmp_path, sub):
    s, endpoint = sub
    ns = kvtier.Namespace("kvtier-test/block-hashes", blocks_per_file=BLOCKS)
    events = {"enable_kv_cache_events": True, "endpoint": endpoint, "block_hash_encoding": "bytes"}
    t = kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path), "kv_events_config": events})
    s.poll(50)  # hands the tier's publisher this socket's subscription once it connects
    yield t
    t.close()


def chunks(n, seed):
    """n chunks of vLLM's scheme: their block hashes (4 each) and keys (each its chunk's last hash)."""
    hashes = kvtier.block_hashes(list(range(n * BLOCKS * TOKENS)), seed=seed)
    keys = kvtier.chunk_keys(hashes, blocks_per_chunk=BLOCKS)
    return [hashes[i * BLOCKS:(i + 1) * BLOCKS] for i in range(n)], keys


def test_a_store_announces_every_block_of_each_file(tier, sub):
    s, _ = sub
    lists, keys = chunks(2, "announce")
    assert all(key[:-4] == blocks[-1] for key, blocks in zip(keys, lists))
    assert run(tier, tier.submit_store(keys, [bytearray(ROW) for _ in keys], block_hashes=lists)) == ["ok", "ok"]
    stored = receive(s, 2)
    assert sorted(stored) == sorted((blocks, TOKENS) for blocks in lists), stored  # each file's 4 blocks, in order

    _, plain = chunks(1, "plain")
    assert run(tier, tier.submit_store(plain, [bytearray(ROW)], block_hashes=None)) == ["ok"]
    assert receive(s, 1) == [([plain[0][:-4]], BLOCKS * TOKENS)]


def test_a_list_that_is_not_the_files_blocks_is_refused(tier, sub):
    s, _ = sub
    lists, keys = chunks(1, "refused")
    blocks = lists[0]
    rows = [bytearray(ROW)]
    bad = {
        "the last hash is not the key": [blocks[1:] + blocks[:1]],
        "3 hashes for a file of 4 blocks": [blocks[1:]],
        "a hash of 16 bytes": [[b"\x01" * 16] + blocks[1:]],
        "one list per key": [blocks, blocks],
    }
    for why, hashes in bad.items():
        with pytest.raises(kvtier.KvtierError) as e:
            tier.submit_store(keys, rows, block_hashes=hashes)
        assert e.value.code == "invalid_argument" and why in e.value.message, (why, e.value.message)
    for hashes, why in (([["not bytes"] * BLOCKS], "block_hashes[0][0]: expected a block hash (bytes)"),
                        (blocks, "block_hashes[0]: expected a list of block hashes"),
                        ([[b""] + blocks[1:]], "block_hashes[0][0]")):
        with pytest.raises(kvtier.KvtierError) as e:
            tier.submit_store(keys, rows, block_hashes=hashes)
        assert e.value.code == "invalid_argument" and why in e.value.message, (why, e.value.message)
    assert receive(s, 1, timeout_s=0.5) == []
    tier.wait_idle()
    assert run(tier, tier.submit_lookup(keys)) == ["miss"], "a refused store stored nothing"
    # An empty list: the key alone.
    assert run(tier, tier.submit_store(keys, rows, block_hashes=[[]])) == ["ok"]
    assert receive(s, 1) == [([keys[0][:-4]], BLOCKS * TOKENS)]
