"""Proves that KvtierFsTier (kvtier.vllm) takes vLLM PR #54327's ``max_bytes`` from a vLLM-style
tier config and enforces it as the PR does: the tier's <model>_<digest>_r<rank> directory never
holds more than max_bytes once the cascade's store jobs are done, the least recently used
prompts go first, a batch larger than the budget is an unsuccessful store with nothing written
while the engine carries on, the usage gauges reach vLLM's stats, and bad values are refused
naming the key. Method: vLLM's real manager (the ``vllm_tree`` fixture and vllm_harness), rows
of the harness's size, a budget of a few rows, and the block files counted after every prompt."""

import uuid
from pathlib import Path

import pytest

import kvtier

SALT = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


def block_files(root):
    return sorted(p for p in Path(root).rglob("*.bin"))


def test_budget_enforced_and_oldest_prompts_evicted(h, tmp_path):
    ps = [h.chunk_keys(i, SALT + "-budget") for i in range(4)]  # 4 chunks (rows) each
    eng = h.Engine([h.kvtier_tier(tmp_path, max_bytes=8 * h.ROW)])
    try:
        for i, keys in enumerate(ps):
            eng.store_prompts([keys])
            files = block_files(tmp_path)
            assert sum(f.stat().st_size for f in files) <= 8 * h.ROW, (i, len(files))
        assert len(block_files(tmp_path)) == 8
        m = eng.tiers[0]._tier.metrics()
        assert m["capacity_bytes_max"] == 8 * h.ROW and m["namespace_blocks"] == 8
        assert m["capacity_evicted_blocks"] == 8
        for keys in ps[2:]:  # the two latest prompts are whole
            n, data = eng.fetch(keys)
            assert n == 4 and data == [h.content(k) for k in keys]
        stats = eng.m.get_stats().data
        gauges = stats.get("data", stats)
        assert "kvtier:fs_namespace_bytes" in str(gauges), stats
    finally:
        eng.shutdown()


def test_batch_larger_than_the_budget_is_an_unsuccessful_store(h, tmp_path):
    keys = h.chunk_keys(0, SALT + "-oversized")
    eng = h.Engine([h.kvtier_tier(tmp_path, max_bytes=2 * h.ROW)])
    try:
        eng.store_prompts([keys])  # 4 rows in one job: refused whole
        assert block_files(tmp_path) == []
        m = eng.tiers[0]._tier.metrics()
        assert m["capacity_refused_rows"] == 4 and m["rows_stored"] == 0
        n, _ = eng.fetch(keys)  # the CPU tier still serves the prompt
        assert n == 4
    finally:
        eng.shutdown()


@pytest.mark.parametrize("bad", [0, -1, "1GiB", 1.5, True])
def test_bad_max_bytes_refused_naming_the_key(h, tmp_path, bad):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path, max_bytes=bad)])
    assert e.value.code == "invalid_argument" and "'max_bytes'" in e.value.message, e.value.message


def test_null_max_bytes_is_unbounded(h, tmp_path):
    eng = h.Engine([h.kvtier_tier(tmp_path, max_bytes=None)])
    try:
        eng.store_prompts([h.chunk_keys(i, SALT + "-null") for i in range(3)])
        assert len(block_files(tmp_path)) == 12
        m = eng.tiers[0]._tier.metrics()
        assert m["capacity_bytes_max"] == 0 and m["namespace_blocks"] == 12
    finally:
        eng.shutdown()
