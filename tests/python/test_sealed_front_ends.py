"""Sealed tiers (FORMAT.md L160-L173) through kvtier's Python front ends, with the key given by
file as a Kubernetes Secret would be.

Proves: kvtier.vllm's KvtierFsTier (under vLLM's own manager, vllm-project/vllm
``vllm/v1/kv_offload/tiering/manager.py`` at commit 7cfb97e33791, run from ../shared/vllm) takes
``seal_key_file`` from the tier config, writes sealed blocks (row + 4096 bytes, KVTSEAL1 record,
no row bytes in the clear), loads a prompt that lives only on disk byte-exact, refuses a block
with a flipped byte (the prefix before it kept, the file removed, counted in the
tier's auth_failures and vLLM's kvtier:fs_rows_corrupt), and an unsealed kvtier tier on the same root finds none of its blocks;
kvtier.sglang's backend takes ``seal_key_file`` from SGLang's extra config, stores and loads
pages byte-exact through a sealed tier, a page file with a flipped byte is a miss, and clear()
removes the sealed store's pages (its block_dir and page_path are the key's). A bad key
file fails the attach with a KvtierError naming the path and not the key. Skips (one line) where
../shared/vllm, ../shared/sglang or torch is absent.
"""

import uuid
from pathlib import Path

import pytest

import kvtier

SALT = uuid.uuid4().hex[:8]
KEY_HEX = "5e" * 32


def key_file(tmp_path, content=KEY_HEX + "\n"):
    path = tmp_path / "secret" / "seal.key"
    path.parent.mkdir(exist_ok=True)
    path.write_text(content)
    path.chmod(0o600)  # FORMAT.md L174
    return str(path)


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


def test_vllm_sealed_tier_round_trips_and_refuses_a_tampered_block(h, tmp_path):
    root = tmp_path / "root"
    ps = [h.chunk_keys(i, SALT + "-vllm") for i in range(3)]
    eng = h.Engine([h.kvtier_tier(root, seal_key_file=key_file(tmp_path))])
    try:
        eng.store_prompts(ps)  # 12 chunks through 8 CPU rows: prompt 0 lives only on disk
        files = sorted(root.rglob("*.bin"))
        assert files and all(f.stat().st_size == h.ROW + 4096 for f in files)
        first = files[0].read_bytes()
        assert first[-64:-56] == b"KVTSEAL1"
        assert all(h.content(k)[64:96] not in first for p in ps for k in p)
        n, data = eng.fetch(ps[0])
        assert n == 4 and data == [h.content(k) for k in ps[0]]
    finally:
        eng.shutdown()
    eng = h.Engine([h.kvtier_tier(root, seal_key_file=key_file(tmp_path))])
    try:
        h.check_corrupt_block_keeps_the_prefix(eng, [h.chunk_keys(i, SALT + "-tamper") for i in range(3)])
        assert eng.tiers[0]._tier.metrics()["auth_failures"] == 1  # also kvtier:fs_rows_corrupt, checked there
    finally:
        eng.shutdown()
    plain = h.Engine([h.kvtier_tier(root)])
    try:
        n, _ = plain.fetch(ps[1])
        assert n == 0, "an unsealed tier never reads sealed blocks"
    finally:
        plain.shutdown()


def test_vllm_bad_key_file_names_the_path_not_the_key(h, tmp_path):
    path = key_file(tmp_path, "5e" * 20)
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path / "root", seal_key_file=path)])
    assert path in e.value.message and "5e5e" not in e.value.message, e.value.message


def test_sglang_sealed_store_round_trips_and_a_flipped_byte_is_a_miss(tmp_path, tmp_path_factory):
    import sglang_support as sg

    if sg.skip_reason():
        pytest.skip(sg.skip_reason())
    sg.harness_tree(tmp_path_factory)
    root = tmp_path / "root"
    extra = {"backend_name": "kvtier", "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
             "interface_v1": 1, "root_dir": str(root), "seal_key_file": key_file(tmp_path)}
    p = sg.pool(pages=40)
    ks = sg.keys(4, SALT + "-sglang")
    b = sg.backend(extra, p)
    w, r = p.alloc(4 * p.page_size), p.alloc(4 * p.page_size)
    sg.fill(p, ks, w)
    assert sum(b.batch_set_v1(ks, w)) == 4
    files = sorted(root.rglob("*.bin"))
    assert len(files) == 4 and all(f.stat().st_size == p.page_bytes + 4096 for f in files)
    assert sorted(Path(b._store.page_path(k)) for k in ks) == files, "page_path names the sealed files"
    with open(files[0], "r+b") as f:
        f.seek(7)
        byte = f.read(1)
        f.seek(7)
        f.write(bytes([byte[0] ^ 0x01]))
    ok = b.batch_get_v1(ks, r)
    assert sum(bool(x) for x in ok) == 3
    for i, (k, good) in enumerate(zip(ks, ok)):
        if good:
            assert bool((p.page_u8(r[i * p.page_size]) == sg.expected(p, k)).all())
    assert len(list(root.rglob("*.bin"))) == 3, "the failing page file is removed"
    assert files[1].parent.parent.parent.name == b._store.block_dir, "the store names its sealed directory"
    b.clear()
    assert not list(root.rglob("*.bin")), "clear() removes the sealed store's pages"
    b.close()
