"""kvtier over several roots (``path_sharding: "by_block_hash"``, vLLM PR #53133, FORMAT.md L99-L100)
against vLLM's own fs tier (vllm-project/vllm ``vllm/v1/kv_offload/tiering/fs/`` at commit
7cfb97e33791, run from ../shared/vllm).

The PR branch's ShardedFileMapper is not in vLLM at 7cfb97e33791, so its placement is emulated
with vLLM's real code: the root of a key is ``int.from_bytes(get_offload_block_hash(key), "big") % len(roots)``
(vLLM's own key helper, Python's own arithmetic), and vLLM's single-root "fs" tier writes each
root's blocks, once per root. Proves: kvtier, given the same list through vLLM's tier factory,
loads every block of that tree byte-exact; what kvtier stores over a list lands, per key, at the
path vLLM's FileMapper gives on the formula's root and nowhere else; a reordered list and a
missing root make kvtier refuse to start, naming the root. Skips (one line saying why) where
../shared/vllm is absent.
"""

import shutil
import uuid
from pathlib import Path

import pytest

import kvtier

SALT = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


def shard(key, n):
    from vllm.v1.kv_offload.base import get_offload_block_hash

    return int.from_bytes(get_offload_block_hash(key), "big") % n


def root_list(roots, sep=","):
    return sep.join(str(r) for r in roots)


def sharded_tier(h, roots, sep=","):
    return h.kvtier_tier(root_list(roots, sep), path_sharding="by_block_hash")


def write_with_vllm(h, roots, keys):
    """vLLM's own fs tier writes each key's block on the root the formula gives it."""
    for r, root in enumerate(roots):
        mine = [k for k in keys if shard(k, len(roots)) == r]
        eng = h.Engine([h.vllm_tier(root)])
        try:
            eng.store_prompts([mine[i : i + 4] for i in range(0, len(mine), 4)])
        finally:
            eng.shutdown()


def all_keys(h, n, salt):
    return [k for i in range(n) for k in h.chunk_keys(i, salt)]


def test_reads_a_tree_vllm_wrote_per_root(h, tmp_path):
    roots = [tmp_path / n for n in ("a", "b", "c")]
    keys = all_keys(h, 4, SALT + "-read")
    assert {shard(k, 3) for k in keys} == {0, 1, 2}, "the salted keys should cover every root"
    write_with_vllm(h, roots, keys)
    eng = h.Engine([sharded_tier(h, roots, sep=" , ")])  # whitespace around roots is stripped, as vLLM does
    try:
        for i in range(0, len(keys), 4):
            chunk = keys[i : i + 4]
            n, data = eng.fetch(chunk)
            assert n == len(chunk), f"kvtier found {n}/{len(chunk)} blocks vLLM wrote"
            assert data == [h.content(k) for k in chunk], "rows differ from the bytes vLLM stored"
    finally:
        eng.shutdown()


def test_kvtier_places_blocks_where_vllm_looks(h, tmp_path):
    roots = [tmp_path / n for n in ("a", "b", "c")]
    keys = all_keys(h, 3, SALT + "-place")
    eng = h.Engine([sharded_tier(h, roots)])
    try:
        eng.store_prompts([keys[i : i + 4] for i in range(0, len(keys), 4)])
        tier = eng.tiers[0]
    finally:
        eng.shutdown()
    mappers = []
    for root in roots:  # vLLM's FileMapper of each root, as the PR builds one per root
        probe = h.Engine([h.vllm_tier(root)])
        mappers.append(probe.tiers[0].file_mapper)
        probe.shutdown()
    for key in keys:
        want = shard(key, 3)
        for r, mapper in enumerate(mappers):
            assert Path(mapper.get_file_name(key)).is_file() == (r == want), (key.hex(), r, want)
    del tier


def test_reordered_or_missing_roots_are_refused(h, tmp_path):
    roots = [tmp_path / n for n in ("a", "b", "c")]
    keys = all_keys(h, 4, SALT + "-order")
    write_with_vllm(h, roots, keys)  # no kvtier marker: only the sampled blocks can tell
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([sharded_tier(h, [roots[2], roots[1], roots[0]])])
    assert e.value.code == "invalid_argument", e.value.message
    assert "belong on another root" in e.value.message and "root_dir[0]" in e.value.message, e.value.message
    shutil.rmtree(roots[1])
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([sharded_tier(h, roots)])
    assert e.value.code == "not_found", e.value.message
    assert f'root_dir[1] "{roots[1]}" does not exist' in e.value.message, e.value.message


def test_list_without_path_sharding_is_refused(h, tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(root_list([tmp_path / "a", tmp_path / "b"]))])
    assert e.value.code == "invalid_argument" and "path_sharding" in e.value.message, e.value.message
