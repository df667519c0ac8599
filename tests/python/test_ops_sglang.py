"""Proves that kvtier.du and kvtier.fsck agree with Python on an SGLang namespace.

Method: the SGLang namespace is written here with Python's own ``json`` and ``hashlib`` by the
lead's format decisions (digest12 = sha256 of json.dumps(fields, sort_keys=True,
separators=(",", ":")) -- ASCII escaping on -- and config.json = json.dumps(fields, indent=2,
sort_keys=True)), pages at ``<NS>_r<rank>/<hhh>/<hh>_g0/<key>.bin`` named by
kvtier.sglang_page_keys. The model name holds non-ASCII text, so the digest check covers
json.dumps' escaping. kvtier.fsck must find nothing (its digest check is the C++ canonical
JSON against Python's), kvtier.du must report engine "sglang" with page_size, mem_layout,
dtype and tp_size, and a vLLM namespace beside it (kvtier.Namespace's config.json) engine "vllm".
"""

import hashlib
import json
import os

import kvtier

PAGE_SIZE, LAYERS, K_BYTES, V_BYTES = 4, 2, 8, 8
PAGE_BYTES = PAGE_SIZE * LAYERS * (K_BYTES + V_BYTES)


def sglang_namespace(root, model):
    fields = {"inference_engine": "sglang", "format": "sglang-page/1", "model_name": model,
              "page_size": PAGE_SIZE, "mem_layout": "page_head", "dtype": "float16",
              "k_bytes_per_token": K_BYTES, "v_bytes_per_token": V_BYTES, "layer_num": LAYERS,
              "is_mla": False, "tp_size": 4, "pp_size": 1, "cp_size": 1, "page_bytes": PAGE_BYTES}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    ns = model.replace("/", "_") + "_" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
    os.makedirs(root / ns)
    (root / ns / "config.json").write_text(json.dumps(fields, indent=2, sort_keys=True))
    return ns


def write_pages(root, ns, rank, tokens):
    for key in kvtier.sglang_page_keys(tokens, PAGE_SIZE):
        d = root / f"{ns}_r{rank}" / key[:3] / f"{key[3:5]}_g0"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{key}.bin").write_bytes(bytes(PAGE_BYTES))


def test_du_and_fsck_on_an_sglang_namespace(tmp_path):
    ns = sglang_namespace(tmp_path, "org/Modèle-ü")
    write_pages(tmp_path, ns, 0, list(range(40)))
    write_pages(tmp_path, ns, 3, list(range(100, 120)))
    vllm = kvtier.Namespace("org/vllm", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
    (tmp_path / vllm.dir_name).mkdir()
    (tmp_path / vllm.config_path).write_text(vllm.config_json)
    block = tmp_path / vllm.block_path(kvtier.chunk_keys(kvtier.block_hashes(list(range(16)), seed="0"))[0])
    block.parent.mkdir(parents=True)
    block.write_bytes(bytes(4096))

    report = kvtier.fsck(str(tmp_path))
    assert [(f.kind, f.path) for f in report.findings] == []
    du = {u.dir: u for u in kvtier.du(str(tmp_path)).namespaces}
    assert set(du) == {ns, vllm.dir_name}
    s = du[ns]
    assert (s.engine, s.model, s.page_size, s.mem_layout, s.dtype, s.tp_size) == (
        "sglang", "org/Modèle-ü", PAGE_SIZE, "page_head", "float16", 4)
    assert (s.blocks, s.bytes, s.ranks) == (15, 15 * PAGE_BYTES, [0, 3])
    assert s.tokens_per_hash == -1
    v = du[vllm.dir_name]
    assert (v.engine, v.tokens_per_hash, v.page_size, v.mem_layout) == ("vllm", 16, -1, "")
