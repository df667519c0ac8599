"""The kvtier Python package on its own (no vLLM needed).

Proves: every golden case computed by vLLM's code (hashes, chunk keys, block paths, namespace
directory, config.json bytes) comes out of the package byte-exact; FsTier stores and loads
zero-copy through memoryview, bytearray, numpy arrays and (where installed) torch tensors, holds
the buffers while jobs run and never returns a corrupt block (EBADMSG, as vLLM), and with
checksum_blocks false writes and checks no CRC; errors are KvtierError with
kvtier's status code; du/fsck/gc return Python objects; config_check validates; the GIL is
released while a tool walks a tree; kvtier.EngineTier, VllmTier's old name, is still VllmTier
and warns that it is deprecated.
"""

import errno
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import kvtier

ROW = 8192
REPO = Path(__file__).resolve().parents[2]


def compat_cases():
    for base in (REPO.parent / "shared" / "compat", REPO / "tests" / "data" / "compat"):
        path = base / "vllm_cases.json"
        if path.is_file():
            return json.loads(path.read_text())["cases"]
    raise AssertionError("no vllm_cases.json in ../shared/compat or tests/data/compat")


CASES = compat_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_case(case):
    exp = case["expected"]
    seed = case["pythonhashseed"]
    if seed is None:
        seed = "vllm-none-hash"  # the sha256 variants' default; unseeded xxhash has no case
    assert kvtier.none_hash(case["algo"], seed).hex() == exp["none_hash_hex"]
    hashes = kvtier.block_hashes(
        case["token_ids"], algo=case["algo"], block_size=case["hash_block_size"], seed=seed,
        lora_name=case["lora_name"], cache_salt=case["cache_salt"],
        mm_features=[tuple(f) for f in case["mm_features"]])
    assert [h.hex() for h in hashes] == exp["block_hashes_hex"]
    spec = dict(case["namespace"])
    groups = spec["kv_cache_groups"]
    ns = kvtier.Namespace(spec.pop("model_name"), **spec)
    assert ns.dir_name == exp["namespace_dir"]
    assert ns.config_json == exp["config_json"]
    tpb = groups[case["group_idx"]]["tokens_per_block"] if groups else case["hash_block_size"]
    keys = kvtier.chunk_keys(hashes, tokens_per_block=tpb, blocks_per_chunk=case["blocks_per_chunk"],
                             tokens_per_hash=case["hash_block_size"], group_idx=case["group_idx"])
    assert [k.hex() for k in keys] == [c["offload_key_hex"] for c in exp["chunks"]]
    assert [ns.block_path(k) for k in keys] == [c["relpath"] for c in exp["chunks"]]


def keys_for(n, salt="t"):
    hashes = kvtier.block_hashes(list(range(16 * n)), seed=salt)
    return kvtier.chunk_keys(hashes)


@pytest.fixture
def ns():
    return kvtier.Namespace("kvtier-test/tiny", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])


@pytest.fixture
def tier(tmp_path, ns):
    t = kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path)})
    yield t
    t.close()


def run(tier, job):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for r in tier.wait(1000):
            if r.job_id == job:
                return r
    raise AssertionError(f"job {job} did not finish")


def test_round_trip_every_buffer_kind(tier):
    keys = keys_for(3)
    rng = np.random.default_rng(1)
    data = [rng.integers(0, 256, ROW, dtype=np.uint8) for _ in keys]
    sources = [memoryview(data[0].tobytes()), bytearray(data[1].tobytes()), data[2]]
    assert run(tier, tier.submit_store(keys, sources)).outcomes == ["ok"] * 3
    outs = [bytearray(ROW), np.zeros(ROW, np.uint8), memoryview(bytearray(ROW))]
    res = run(tier, tier.submit_load(keys, outs))
    assert res.outcomes == ["ok"] * 3 and res.ok_prefix == 3
    assert bytes(outs[0]) == data[0].tobytes()
    assert np.array_equal(outs[1], data[1])
    assert bytes(outs[2]) == data[2].tobytes()
    assert os.path.isfile(tier.block_path(keys[0]))
    assert tier.metrics()["rows_loaded"] == 3


def test_torch_tensors_zero_copy(tier):
    torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
    if not all(hasattr(torch, f) for f in ("arange", "zeros", "equal")):
        pytest.skip("only a stand-in for torch is importable (vLLM's harness stub), not torch")
    keys = keys_for(1, "torch")
    src = torch.arange(ROW, dtype=torch.int32).to(torch.uint8)
    assert run(tier, tier.submit_store(keys, [src])).outcomes == ["ok"]
    dst = torch.zeros(ROW, dtype=torch.uint8)
    assert run(tier, tier.submit_load(keys, [dst])).outcomes == ["ok"]
    assert torch.equal(src, dst)


def test_buffers_are_held_while_a_job_runs(tier):
    keys = keys_for(1, "held")
    row = bytearray(b"\x05" * ROW)
    job = tier.submit_store(keys, [row])
    with pytest.raises(BufferError):  # the export pins the buffer until the job is polled
        row.extend(b"x")
    run(tier, job)
    row.extend(b"x")  # released once the job was returned


def test_corrupt_block_is_never_returned(tier):
    keys = keys_for(2, "corrupt")
    rows = [np.full(ROW, 3, np.uint8), np.full(ROW, 4, np.uint8)]
    run(tier, tier.submit_store(keys, rows))
    path = tier.block_path(keys[1])
    with open(path, "r+b") as f:  # flip one byte: the CRC32C xattr no longer matches
        f.seek(100)
        f.write(b"\xff")
    outs = [np.zeros(ROW, np.uint8), np.zeros(ROW, np.uint8)]
    res = run(tier, tier.submit_load(keys, outs))
    assert res.outcomes == ["ok", "corrupt"] and res.ok_prefix == 1
    assert not os.path.exists(path), "a corrupt block file is removed"
    assert tier.metrics()["rows_corrupt"] == 1
    # vLLM (PR #57912) fails such a key with OSError(EBADMSG); kvtier's status carries the same errno.
    assert f"errno {errno.EBADMSG}: {os.strerror(errno.EBADMSG)}" in res.errors[1], res.errors


def test_checksum_blocks_off_writes_and_checks_no_crc(tmp_path, ns):
    keys = keys_for(2, "nocrc")
    rows = [np.full(ROW, 5, np.uint8), np.full(ROW, 6, np.uint8)]
    off = kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path), "checksum_blocks": False})
    try:
        assert not off.xattrs_supported
        run(off, off.submit_store(keys, rows))
        path = off.block_path(keys[1])
        assert "user.vllm.kv_crc32c" not in os.listxattr(path)
        os.setxattr(path, "user.vllm.kv_crc32c", b"\x00\x00\x00\x00")  # wrong, and never read
        outs = [np.zeros(ROW, np.uint8), np.zeros(ROW, np.uint8)]
        assert run(off, off.submit_load(keys, outs)).ok_prefix == 2
        assert all((o == r).all() for o, r in zip(outs, rows))
        assert off.metrics()["checksum_ns"] == 0
    finally:
        off.close()


def test_lookup_reports_hits_and_misses(tier):
    keys = keys_for(3, "lookup")
    run(tier, tier.submit_store(keys[:2], [bytes(ROW), bytes(ROW)]))
    assert run(tier, tier.submit_lookup(keys)).outcomes == ["ok", "ok", "miss"]


def test_errors_carry_kvtier_status(tmp_path, ns, tier):
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.FsTier(ns, ROW, {"root_dir": str(tmp_path), "n_read_thread": 4})
    assert e.value.code == "invalid_argument" and "n_read_thread" in e.value.message
    with pytest.raises(kvtier.KvtierError) as e:
        tier.submit_load(keys_for(1), [bytes(ROW)])  # read-only buffer for a load
    assert e.value.code == "invalid_argument" and "writable" in e.value.message
    with pytest.raises(kvtier.KvtierError) as e:
        tier.submit_store([b"short"[:3]], [bytes(ROW)])
    assert e.value.code == "invalid_argument"
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.block_hashes([1, 2, 3], algo="md5")
    assert e.value.code == "invalid_argument" and "md5" in e.value.message
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with pytest.raises(kvtier.KvtierError) as e:  # root_dir below a regular file
        kvtier.FsTier(ns, ROW, {"root_dir": str(blocked / "root")})
    assert e.value.code in ("io_error", "invalid_argument", "not_found") and str(blocked) in e.value.message


def test_ops_return_objects(tmp_path, tier):
    keys = keys_for(4, "ops")
    run(tier, tier.submit_store(keys, [bytes(ROW)] * 4))
    du = kvtier.du(str(tmp_path))
    assert du.total_blocks == 4 and du.namespaces[0].model == "kvtier-test/tiny"
    assert du.namespaces[0].bytes == 4 * ROW
    os.truncate(tier.block_path(keys[0]), ROW // 2)  # a torn block
    report = kvtier.fsck(str(tmp_path))
    # FORMAT.md L196: kept against the most common size, the namespace reported suspect.
    assert [f.kind for f in report.findings] == ["size_mismatch", "suspect_sizes"] and report.exit_code == 4
    assert report.findings[0].rule.startswith("L")
    given = kvtier.fsck(str(tmp_path), row_bytes=ROW)
    assert [f.kind for f in given.findings] == ["size_mismatch"], [f.kind for f in given.findings]
    gc = kvtier.gc(str(tmp_path), max_bytes=2 * ROW, dry_run=True)
    assert gc.dry_run and gc.reclaimed and all(r.bytes > 0 for r in gc.reclaimed)
    assert kvtier.du(str(tmp_path)).total_blocks == 4, "a dry run deletes nothing"


def test_ops_names_of_any_bytes(tmp_path, tier):
    run(tier, tier.submit_store(keys_for(1, "names"), [bytes(ROW)]))
    odd = b"stray\xff\x80\n"
    with open(os.path.join(os.fsencode(str(tmp_path)), odd), "wb") as f:
        f.write(b"x")
    report = kvtier.fsck(str(tmp_path))
    assert [os.fsencode(f.path) for f in report.findings if f.kind == "stray_file"] == [odd]


def test_ops_fail_closed_on_unreadable_leases(tmp_path, tier):
    keys = keys_for(2, "lease")
    run(tier, tier.submit_store(keys, [bytes(ROW)] * 2))
    old = time.time() - 30 * 86400
    for k in keys:
        os.utime(tier.block_path(k), (old, old))
    ns_dir = tmp_path / kvtier.du(str(tmp_path)).namespaces[0].dir
    for lease in (ns_dir / ".kvtier" / "leases").iterdir():
        lease.unlink()
    (ns_dir / ".kvtier" / "leases").rmdir()
    (ns_dir / ".kvtier" / "leases").write_text("not a directory")  # no reader can list it
    gc = kvtier.gc(str(tmp_path), older_than_s=86400)
    assert gc.reclaimed == [] and [k.path for k in gc.kept] == [ns_dir.name] and gc.exit_code == 8
    du = kvtier.du(str(tmp_path))
    assert du.exit_code == 8 and not du.namespaces[0].leases_known and du.unreadable


def test_config_check(tmp_path):
    cfg = {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30, "block_size": 64,
           "secondary_tiers": [{"type": "fs", "root_dir": str(tmp_path)}]}
    effective = json.loads(kvtier.config_check(json.dumps(cfg)))
    assert effective["block_size"] == 64 and effective["eviction_policy"] == "lru"
    assert effective["secondary_tiers"][0]["n_read_threads"] == 16
    assert effective["secondary_tiers"][0]["checksum_blocks"] is True  # kvtier's default; vLLM's is false
    cfg["secondary_tiers"][0]["durabilty"] = "full"
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.config_check(json.dumps(cfg))
    assert e.value.code == "invalid_argument" and "secondary_tiers[0].durabilty" in e.value.message


def test_gil_released_while_walking(tmp_path, tier):
    keys = keys_for(1500, "gil")
    for i in range(0, len(keys), 250):
        run(tier, tier.submit_store(keys[i:i + 250], [bytes(ROW)] * len(keys[i:i + 250])))
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = count[0]
    start = time.monotonic()
    for _ in range(5):
        kvtier.fsck(str(tmp_path), verify_data=True, jobs=1)
    elapsed = time.monotonic() - start
    during = count[0] - before
    stop.set()
    t.join()
    # With the GIL held for the walks, the spinning thread would not run while they do.
    assert during > 1000, f"only {during} Python increments in {elapsed:.3f} s of fsck"


def test_engine_tier_is_a_deprecated_alias_of_vllm_tier():
    with pytest.warns(DeprecationWarning, match="kvtier.VllmTier"):
        assert kvtier.EngineTier is kvtier.VllmTier
    with pytest.raises(AttributeError):
        kvtier.NoSuchName  # noqa: B018 - the module's __getattr__ still refuses other names


def test_vllm_tier_contract(tmp_path, ns):
    rows = bytearray(8 * ROW)
    view = memoryview(rows)
    et = kvtier.VllmTier(ns, view, ROW, {"root_dir": str(tmp_path)})
    keys = keys_for(4, "engine")
    with pytest.raises(kvtier.KvtierError) as e:  # a key is bytes: hash + 4-byte group
        et.lookup("not bytes", "r1")
    assert e.value.code == "invalid_argument"
    assert [et.lookup(k, "r1") for k in keys] == [2] * 4  # retry until checked
    et.flush_lookups()
    deadline = time.monotonic() + 10
    while et.has_pending_work() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [et.lookup(k, "r1") for k in keys] == [0] * 4
    view[0:ROW] = b"\x01" * ROW
    view[ROW:2 * ROW] = b"\x02" * ROW
    et.submit_store(7, keys[:2], np.array([0, 1]))
    with pytest.raises(kvtier.KvtierError):  # the same engine id twice in flight, or a bad slot
        et.submit_store(8, keys[2:3], [99])
    et.drain(10000)
    assert [r[:3] for r in et.poll_finished()] == [(7, False, True)]
    assert et.poll_finished() == [], "exactly one result per job"
    assert [et.lookup(k, "r1") for k in keys[:2]] == [1, 1], "a stored key is a hit"
    os.remove(et.block_path(keys[0]))
    et.submit_load(9, keys[:2], [4, 5])
    et.drain(10000)
    (job, is_load, ok, ok_idx, nbytes, secs), = et.poll_finished()
    assert (job, is_load, ok, ok_idx, nbytes) == (9, True, False, [1], ROW) and secs >= 0
    assert bytes(view[5 * ROW:6 * ROW]) == b"\x02" * ROW
    assert et.lookup(keys[0], "r1") == 0, "a failed load is not offered again"
    with pytest.raises(BufferError):
        rows.extend(b"x")
    et.shutdown()
    view.release()
    rows.extend(b"x")  # shutdown released the region
    assert et.lookup(keys[1], "r1") == 0 and et.poll_finished() == []
