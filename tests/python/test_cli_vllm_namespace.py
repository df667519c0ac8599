"""Conformance of the namespaces kvtier's commands write, checked against vLLM's own code.

What it proves: `kvtier bench fs`, `kvtier bench tiers` and `kvtier replay`, given a model's
KV-cache groups (the default, --layers N or --kv-groups FILE), write exactly the namespace
that vLLM's fs tier writes for that model and offloading config: the same directory name
(digest) and the same config.json bytes. And `kvtier hash --namespace-config` on a namespace
with blocks_per_file 4 lists the paths vLLM's FileMapper gives to vLLM's own chunk keys, each
present after kvtier stored the prompt.

Method: vLLM's side is its real code (the `vllm_tree` fixture): build_offloading_config over
a SimpleNamespace VllmConfig and a KVCacheConfig with the same layer names and block size
(as the kit's selftest_manager.py beside vLLM's code in ../shared/vllm builds them), then vLLM's own "fs" secondary tier is
created on a separate root, which writes config.json as vLLM does. kvtier's side is the CLI
(`kvtier_bin`) on another root. The two roots must hold the same namespace directory with
byte-identical config.json. Run with:
    KVTIER_BIN=build/bin/kvtier /usr/bin/python3 -m pytest -q tests/python/test_cli_vllm_namespace.py
"""

import json
import os
import subprocess
from types import SimpleNamespace

import pytest

GPU_BLOCK = 16
LLAMA = "model.layers.{}.self_attn.attn"


def llama_layers(n):
    return [LLAMA.format(i) for i in range(n)]


def vllm_offloading_config(model, groups, extra):
    """vLLM's build_offloading_config for a TP1 model whose full-attention KV-cache groups
    hold the given layer-name lists (16-token blocks); `extra` is kv_connector_extra_config."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import build_offloading_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    par = SimpleNamespace(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                          tensor_parallel_size=1, pipeline_parallel_size=1, world_size=1, rank=0,
                          data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                          distributed_executor_backend="mp", nnodes_within_dp=1)
    vcfg = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra, engine_id="conformance"),
        parallel_config=par,
        cache_config=SimpleNamespace(block_size=GPU_BLOCK, cache_dtype="auto", enable_prefix_caching=True,
                                     prefix_match_unit=None),
        model_config=SimpleNamespace(model=model, dtype="bfloat16", use_mla=False,
                                     get_total_num_kv_heads=lambda: 8),
        use_v2_model_runner=False,
        kv_events_config=SimpleNamespace(enable_kv_cache_events=False),
    )
    n_gpu = 64
    names = [n for g in groups for n in g]
    kcfg = KVCacheConfig(
        num_blocks=n_gpu,
        kv_cache_tensors=[KVCacheTensor(size=n_gpu * 1024, shared_by=[n]) for n in names],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=g, kv_cache_spec=FullAttentionSpec(
            block_size=GPU_BLOCK, num_kv_heads=8, head_size=128)) for g in groups])
    return build_offloading_config(vcfg, kcfg)


def vllm_namespace(root, model, groups, chunk):
    """Creates vLLM's own fs tier on `root` (which writes the namespace's config.json) and
    returns (namespace directory name, config.json bytes, the FileMapper it uses)."""
    import numpy as np
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    tier_cfg = {"type": "fs", "root_dir": str(root)}
    extra = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20,
             "secondary_tiers": [tier_cfg], **chunk}
    spec = OffloadingSpecFactory.create_spec(vllm_offloading_config(model, groups, extra))
    view = memoryview(np.zeros((2, 4096), dtype=np.uint8))
    tier = SecondaryTierFactory.create_secondary_tier(dict(tier_cfg), view, spec)
    try:
        mapper = tier.file_mapper
        config_path = mapper.get_config_file_path()
        with open(config_path, "rb") as f:
            return os.path.basename(os.path.dirname(config_path)), f.read(), mapper
    finally:
        tier.shutdown()


def kvtier_namespace(root):
    """The one namespace directory (holding config.json) under root, and its config.json."""
    dirs = [d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "config.json"))]
    assert len(dirs) == 1, f"namespaces under {root}: {sorted(os.listdir(root))}"
    with open(os.path.join(root, dirs[0], "config.json"), "rb") as f:
        return dirs[0], f.read()


def run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def no_hash_seed(monkeypatch):
    """Both sides derive NONE_HASH from PYTHONHASHSEED; leave it unset for both."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


@pytest.mark.parametrize("layer_flags, groups", [
    ([], [llama_layers(32)]),                          # the default: Llama-3.1-8B
    (["--layers", "4"], [llama_layers(4)]),
])
def test_bench_fs_writes_vllms_namespace(kvtier_bin, vllm_tree, tmp_path, layer_flags, groups):
    (tmp_path / "kvtier").mkdir()
    run([kvtier_bin, "bench", "fs", "--root", str(tmp_path / "kvtier"), "--row-bytes", "4096", "--rows", "2",
         "--no-direct", "--keep", "--json", *layer_flags])
    want = vllm_namespace(tmp_path / "vllm", "kvtier-bench/fs-4096", groups, {"blocks_per_chunk": 1})
    assert kvtier_namespace(tmp_path / "kvtier") == want[:2]


def test_bench_tiers_writes_vllms_namespace_for_two_groups(kvtier_bin, vllm_tree, tmp_path):
    groups = [llama_layers(2), ["model.layers.2.mixer.attn", "model.layers.3.mixer.attn"]]
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps([{"tokens_per_block": GPU_BLOCK, "layer_names": g} for g in groups]))
    (tmp_path / "kvtier").mkdir()
    run([kvtier_bin, "bench", "tiers", "--root", str(tmp_path / "kvtier"), "--rows", "8", "--cpu-bytes", "16KiB",
         "--row-bytes", "4096", "--batch", "2", "--device", "-1", "--model", "meta-llama/Llama-3.1-8B-Instruct",
         "--kv-groups", str(groups_file), "--keep", "--json"])
    name, config, _ = vllm_namespace(tmp_path / "vllm", "meta-llama/Llama-3.1-8B-Instruct", groups,
                                     {"blocks_per_chunk": 1})
    assert b'"parallel_agnostic": false' in config  # two groups: vLLM's namespace is not agnostic
    assert kvtier_namespace(tmp_path / "kvtier") == (name, config)


def test_replay_and_hash_match_vllms_chunk_files(kvtier_bin, vllm_tree, tmp_path, no_hash_seed):
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.kv_offload.base import make_offload_key

    tokens = [(j * 7919 + 13) % 32000 for j in range(256)]  # 16 blocks, 4 chunks of 64 tokens
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "session": "s", "tokens": tokens}) + "\n")
    root = tmp_path / "kvtier"
    root.mkdir()
    # configs/default.json: "block_size": 64, i.e. 4 blocks per chunk and per file.
    run([kvtier_bin, "replay", "--trace", str(trace), "--root", str(root), "--layers", "8", "--device", "-1"])
    name, config, mapper = vllm_namespace(tmp_path / "vllm", "kvtier/replay-model", [llama_layers(8)],
                                          {"block_size": 64})
    assert kvtier_namespace(root) == (name, config)

    # vLLM's chunk keys: the last 16-token block hash of each 64-token chunk.
    kcu.init_none_hash(sha256)
    req = SimpleNamespace(block_hashes=[], num_tokens=len(tokens), all_token_ids=tokens, mm_features=[],
                          lora_request=None, cache_salt=None, prompt_embeds=None)
    hashes = kcu.get_request_block_hasher(GPU_BLOCK, sha256)(req)
    want = [os.path.relpath(mapper.get_file_name(make_offload_key(h, 0)), tmp_path / "vllm")
            for h in hashes[3::4]]
    # The config.json vLLM wrote (its namespace), the files kvtier's replay wrote.
    out = run([kvtier_bin, "hash", "--tokens", ",".join(map(str, tokens)), "--namespace-config",
               str(tmp_path / "vllm" / name / "config.json"), "--root", str(root), "--json"]).stdout
    chunks = json.loads(out)["chunks"]
    assert [c["relpath"] for c in chunks] == want
    assert all(c["exists"] for c in chunks), chunks
