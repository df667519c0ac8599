"""Builds vLLM's real TieringOffloadingManager (vllm-project/vllm at commit 7cfb97e33791, from
its verbatim copy in ../shared/vllm, assembled by the ``vllm_tree`` fixture) and plays vLLM's scheduler and GPU worker around it, step by step, as
vLLM's offloading connector does (vllm/v1/kv_offload/tiering/manager.py). Import only after the
``vllm_tree`` fixture has put vLLM's modules on sys.path.

The model is small (one full-attention group of LAYERS layers) so rows are small; content of a
chunk is a pure function of its key, so any process can check any row.
"""

import hashlib
import mmap
import os
import time
import uuid
from itertools import islice
from types import SimpleNamespace

import numpy as np
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
from vllm.utils.hashing import sha256
from vllm.v1.core import kv_cache_utils as kcu
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

GPU_BLOCK = 16
BLOCKS_PER_CHUNK = 4
LAYERS = 4
PAGE_BYTES = 1024
MODEL = "kvtier-conformance/tiny"
ROW = -(-LAYERS * PAGE_BYTES * BLOCKS_PER_CHUNK // mmap.PAGESIZE) * mmap.PAGESIZE


def kvtier_tier(root, **keys):
    return {"type": "KvtierFsTier", "module_path": "kvtier.vllm", "root_dir": str(root), **keys}


def vllm_tier(root, **keys):
    return {"type": "fs", "root_dir": str(root), **keys}


def layer_names():
    return [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]


def offloading_config(tier_configs, cpu_rows, engine_id=None, kv_cache_events=True):
    """vLLM's build_offloading_config() over the VllmConfig fields it reads (TP1)."""
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": cpu_rows * ROW,
             "block_size": GPU_BLOCK * BLOCKS_PER_CHUNK, "secondary_tiers": list(tier_configs)}
    par = SimpleNamespace(decode_context_parallel_size=1, prefill_context_parallel_size=1, tensor_parallel_size=1,
                          pipeline_parallel_size=1, world_size=1, rank=0, data_parallel_index=0,
                          data_parallel_size=1, data_parallel_rank_local=None, distributed_executor_backend="mp",
                          nnodes_within_dp=1)
    vcfg = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra,
                                           engine_id=engine_id or f"kvtier-test-{uuid.uuid4().hex[:10]}"),
        parallel_config=par,
        cache_config=SimpleNamespace(block_size=GPU_BLOCK, cache_dtype="auto", enable_prefix_caching=True,
                                     prefix_match_unit=None),
        model_config=SimpleNamespace(model=MODEL, dtype="bfloat16", use_mla=False, get_total_num_kv_heads=lambda: 2),
        use_v2_model_runner=False,
        kv_events_config=SimpleNamespace(enable_kv_cache_events=kv_cache_events),
    )
    n_gpu = 64
    kcfg = KVCacheConfig(
        num_blocks=n_gpu,
        kv_cache_tensors=[KVCacheTensor(size=n_gpu * PAGE_BYTES, shared_by=[n]) for n in layer_names()],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=layer_names(), kv_cache_spec=FullAttentionSpec(
            block_size=GPU_BLOCK, num_kv_heads=2, head_size=128))])
    return build_offloading_config(vcfg, kcfg)


def chunk_keys(prompt, salt, chunks=4):
    """vLLM's block hasher over a prompt, then one key per chunk (its last block hash)."""
    kcu.init_none_hash(sha256)
    tokens = [(prompt * 7919 + j * 31 + 1) % 32000 for j in range(chunks * BLOCKS_PER_CHUNK * GPU_BLOCK)]
    req = SimpleNamespace(block_hashes=[], num_tokens=len(tokens), all_token_ids=tokens, mm_features=[],
                          lora_request=None, cache_salt=salt, prompt_embeds=None)
    hashes = kcu.get_request_block_hasher(GPU_BLOCK, sha256)(req)
    return [make_offload_key(h, 0) for h in islice(hashes, BLOCKS_PER_CHUNK - 1, None, BLOCKS_PER_CHUNK)]


def content(key):
    return hashlib.shake_256(b"kvtier-conformance/" + key).digest(ROW)


class Engine:
    """One vLLM engine: the manager plus the scheduler's and the worker's calls around it."""

    def __init__(self, tier_configs, cpu_rows=8, kv_cache_events=True):
        self.config = offloading_config(tier_configs, cpu_rows, kv_cache_events=kv_cache_events)
        self.spec = OffloadingSpecFactory.create_spec(self.config)
        type(self.spec).build_metric_definitions(dict(self.config.extra_config))
        self.m = self.spec.get_manager()
        self.view = self.m.primary_tier.get_kv_memoryview()
        self.new_reqs = []
        self.steps = 0
        self._n = 0

    @property
    def tiers(self):
        return self.m.secondary_tiers

    def request(self):
        self._n += 1
        ctx = ReqContext(req_id=f"req-{self._n}")
        self.m.on_new_request(ctx)
        self.new_reqs.append(ctx.req_id)
        return ctx

    def step(self, stores=(), finished=()):
        self.m.on_schedule_end(ScheduleEndContext(new_req_ids=tuple(self.new_reqs), preempted_req_ids=()))
        self.new_reqs = []
        copies = []
        for ctx, keys in stores:
            out = self.m.prepare_store(keys, ctx)
            if out is not None and out.keys_to_store:
                rows = np.asarray(self.view)
                for key, row in zip(out.keys_to_store, out.store_spec.block_ids):
                    rows[int(row)] = np.frombuffer(content(key), dtype=np.int8)
                del rows
                copies.append((ctx, out.keys_to_store))
        for ctx in finished:
            self.m.on_request_finished(ctx)
        for ctx, keys in copies:
            self.m.complete_store(keys, ctx)
        self.steps += 1

    def lookup(self, keys, ctx):
        """The scheduler's maximal-prefix lookup: leading hits, or None to ask next step."""
        hits, defer = 0, False
        for key in keys:
            r = self.m.lookup(key, ctx)
            if r in (LookupResult.HIT, LookupResult.HIT_PENDING):
                hits += 1
                defer = defer or r is LookupResult.HIT_PENDING
            elif r is LookupResult.RETRY:
                defer = True
            else:
                break
        return None if defer else hits

    def settle(self, keys, ctx, timeout=30.0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            n = self.lookup(keys, ctx)
            if n is not None:
                return n
            self.step()
            time.sleep(0.002)
        raise AssertionError(f"lookup not settled after {timeout} s")

    def idle(self, timeout=30.0):
        t0 = time.monotonic()
        while self.m.has_pending_work() and time.monotonic() - t0 < timeout:
            self.step()
            time.sleep(0.002)
        assert not self.m.has_pending_work(), "pending work never finished"

    def load(self, keys, ctx):
        spec = self.m.prepare_load(keys, ctx)
        self.step()
        rows = np.asarray(self.view)
        data = [rows[int(r)].tobytes() for r in spec.block_ids]
        del rows
        self.m.complete_load(keys, ctx)
        return data

    def store_prompts(self, prompts):
        """Each prompt's chunks: lookup, store, finish, and let the cascade finish."""
        for keys in prompts:
            ctx = self.request()
            self.settle(keys, ctx)
            self.step(stores=[(ctx, keys)], finished=[ctx])
            self.idle()

    def fetch(self, keys):
        """A new request for `keys`: lookups until settled, then the hit prefix loaded."""
        ctx = self.request()
        n = self.settle(keys, ctx)
        data = self.load(keys[:n], ctx) if n else []
        self.step(finished=[ctx])
        return n, data

    def shutdown(self):
        self.view = None
        self.m.shutdown()


def check_corrupt_block_keeps_the_prefix(eng, prompts):
    """Stores `prompts` (12 chunks through 8 CPU rows: prompt 0 then lives only on disk), corrupts
    prompt 0's third block on disk and asserts that a fetch returns the two chunks before it, the
    corrupt file is removed and counted once (kvtier:fs_rows_corrupt). Returns the tier."""
    eng.store_prompts(prompts)
    tier = eng.tiers[0]
    bad = tier._tier.block_path(prompts[0][2])
    with open(bad, "r+b") as f:
        f.seek(10)
        f.write(b"\x00\xff")
    n, data = eng.fetch(prompts[0])
    assert n == 2, f"expected the 2 chunks before the corrupt one, got {n}"
    assert data == [content(k) for k in prompts[0][:2]]
    assert not os.path.exists(bad), "the corrupt block file is removed"
    eng.idle()
    stats = eng.m.get_stats()
    corrupt = stats.data["data"].get("kvtier:fs_rows_corrupt", {})
    assert sum(corrupt.values()) == 1, stats.data
    return tier
