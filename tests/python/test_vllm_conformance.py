"""kvtier.vllm.KvtierFsTier under vLLM's own code (vllm-project/vllm ``vllm/v1/kv_offload/``
at commit 7cfb97e33791: factory, tiering manager, CPU primary and fs tier; run from its
verbatim copy in ../shared/vllm).

Proves: vLLM's SecondaryTierFactory builds the tier from `module_path`; vLLM's selftest script
passes with it; blocks stored through KvtierFsTier are found and loaded byte-exact by vLLM's own
"fs" tier on the same root, and the reverse, with the same namespace and files; a corrupt block
is never promoted and the prefix before it is kept (partial success); unknown keys are refused;
the newer upstream interface (backpressure_detector, chunk_ids, transfer_bytes) works; vLLM PR
#57912's checksum_blocks key reaches the tier and vLLM's unchecksummed blocks load; drain_jobs
leaves every job with exactly one result; kvtier's metrics reach vLLM's stats; with
enable_kv_events, vLLM's take_events names every store and every removal (a corrupt block, a
max_bytes eviction), so an index fed by it equals the volume, with vLLM's later OffloadingEvent its
stores say a removal follows (one owner for both), and with vLLM's events off the tier says so and
keeps nothing.
Skips (one line saying why) where ../shared/vllm is absent.
"""

import dataclasses
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import kvtier

SALT = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


def prompts(h, n, salt=SALT):
    return [h.chunk_keys(i, salt) for i in range(n)]


def block_files(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*.bin"))


def test_factory_resolves_module_path(h, tmp_path):
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    cfg = h.kvtier_tier(tmp_path)
    assert SecondaryTierFactory.get_tier_class(cfg) is kvtier.vllm.KvtierFsTier
    defs = kvtier.vllm.KvtierFsTier.build_metric_definitions(cfg)  # before any instance, as the API server
    assert "kvtier:fs_rows_corrupt" in defs
    eng = h.Engine([cfg])
    try:
        assert isinstance(eng.tiers[0], kvtier.vllm.KvtierFsTier)
        assert eng.tiers[0]._tier.backend in ("io_uring", "syscall")
    finally:
        eng.shutdown()


@pytest.mark.parametrize("tier", ["KvtierFsTier", "fs"])
def test_vllm_selftest_script(vllm_tree, tmp_path, tier):
    script = Path(os.environ.get("KVTIER_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))
    script = script / "vllm" / "selftest_manager.py"
    args = [sys.executable, str(script), str(tmp_path / "root"), "--tier-type", tier]
    if tier == "KvtierFsTier":
        args += ["--module-path", "kvtier.vllm"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(vllm_tree)] + sys.path))
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    assert "10/10 checks pass" in proc.stdout, proc.stdout


@pytest.mark.parametrize("writer,reader", [("kvtier", "vllm"), ("vllm", "kvtier")])
def test_blocks_shared_both_ways(h, tmp_path, writer, reader):
    make = {"kvtier": h.kvtier_tier, "vllm": h.vllm_tier}
    ps = prompts(h, 3, f"{SALT}-{writer}")
    w = h.Engine([make[writer](tmp_path)])
    try:
        w.store_prompts(ps)
    finally:
        w.shutdown()
    files = block_files(tmp_path)
    assert len(files) == 12
    r = h.Engine([make[reader](tmp_path)])
    try:
        for keys in ps:
            n, data = r.fetch(keys)
            assert n == len(keys), f"{reader} found {n}/{len(keys)} chunks {writer} stored"
            assert data == [h.content(k) for k in keys], "rows differ from the bytes stored"
        assert block_files(tmp_path) == files, "the reader wrote or removed block files"
        configs = list(Path(tmp_path).glob("*/config.json"))
        assert len(configs) == 1, f"both tiers must use one namespace, found {configs}"
    finally:
        r.shutdown()


@pytest.mark.parametrize("checksum", [True, False])
def test_checksum_blocks_key(h, tmp_path, checksum):
    """vLLM PR #57912's tier key reaches the tier through vLLM's factory: on, each block file has
    the 4-byte CRC32C xattr; off, none. Blocks vLLM's own (pinned, checksum-less) fs tier wrote
    have no xattr and load either way."""
    ps = prompts(h, 1, f"{SALT}-crc-{checksum}")
    v = h.Engine([h.vllm_tier(tmp_path / "v")])
    try:
        v.store_prompts(ps)
    finally:
        v.shutdown()
    eng = h.Engine([h.kvtier_tier(tmp_path / "k", checksum_blocks=checksum)])
    try:
        eng.store_prompts(ps)
        for name in block_files(tmp_path / "k"):
            attrs = os.listxattr(tmp_path / "k" / name)
            assert ("user.vllm.kv_crc32c" in attrs) == checksum, (name, attrs)
            if checksum:
                assert len(os.getxattr(tmp_path / "k" / name, "user.vllm.kv_crc32c")) == 4
    finally:
        eng.shutdown()
    for name in block_files(tmp_path / "v"):
        assert "user.vllm.kv_crc32c" not in os.listxattr(tmp_path / "v" / name)
    r = h.Engine([h.kvtier_tier(tmp_path / "v", checksum_blocks=checksum)])
    try:
        n, data = r.fetch(ps[0])
        assert n == len(ps[0]) and data == [h.content(k) for k in ps[0]], "vLLM's unchecksummed blocks load"
    finally:
        r.shutdown()


def test_same_paths_as_vllm_file_mapper(h, tmp_path):
    eng = h.Engine([h.kvtier_tier(tmp_path / "a"), h.vllm_tier(tmp_path / "b")])
    try:
        ours, theirs = eng.tiers
        for key in prompts(h, 1)[0]:
            rel = os.path.relpath(theirs.file_mapper.get_file_name(key), tmp_path / "b")
            assert ours._tier.block_path(key) == str(tmp_path / "a" / rel)
        ps = prompts(h, 2, SALT + "-paths")
        eng.store_prompts(ps)
        assert block_files(tmp_path / "a") == block_files(tmp_path / "b")
        a = next((tmp_path / "a").glob("*/config.json")).read_bytes()
        b = next((tmp_path / "b").glob("*/config.json")).read_bytes()
        assert a == b
    finally:
        eng.shutdown()


def test_corrupt_block_keeps_the_prefix(h, tmp_path):
    ps = prompts(h, 3, SALT + "-corrupt")
    eng = h.Engine([h.kvtier_tier(tmp_path)])
    try:
        h.check_corrupt_block_keeps_the_prefix(eng, ps)
    finally:
        eng.shutdown()


def test_unknown_key_refused(h, tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path, n_read_thread=4)])
    assert e.value.code == "invalid_argument" and "n_read_thread" in e.value.message


# A bad locality is kvtier's KvtierError naming the key (not a bare ValueError from vLLM's
# Locality enum), and a tier key named backpressure_detector (vLLM 7cfb97e's factory passes every
# tier key as an argument) is an unknown key, not bound to the argument and silently ignored.
def test_bad_locality_is_refused_by_name(h, tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path, locality="local")])
    assert e.value.code == "invalid_argument" and "'locality'" in e.value.message, e.value.message


def test_backpressure_detector_tier_key_is_refused(h, tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path, backpressure_detector="EMABackpressureDetector")])
    assert "'backpressure_detector': unknown key" in e.value.message, e.value.message


# Too many I/O slots are refused at parse time through vLLM's factory too.
def test_io_slot_limit_through_vllm(h, tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        h.Engine([h.kvtier_tier(tmp_path, n_read_threads=100000)])
    assert "'n_read_threads'" in e.value.message and "at most 8192" in e.value.message, e.value.message


def test_kvtier_keys_accepted(h, tmp_path):
    eng = h.Engine([h.kvtier_tier(tmp_path, durability="file", io_timeout_ms=5000, stores_while_loading_max=1,
                                  n_read_threads=4, n_write_threads=4, locality="LOCAL",
                                  backpressure={"backpressure_cls": "EMABackpressureDetector"})])
    try:
        eng.store_prompts(prompts(h, 1, SALT + "-keys"))
        assert len(block_files(tmp_path)) == 4
    finally:
        eng.shutdown()


@dataclasses.dataclass
class UpstreamJob:  # TransferJob after vLLM #52615: chunk_ids instead of block_ids
    job_id: int
    keys: list
    chunk_ids: np.ndarray
    is_promotion: bool
    req_context: object
    submit_time: float = 0.0


def test_upstream_interface(h, tmp_path, monkeypatch):
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.tiering.base import JobResult

    @dataclasses.dataclass
    class NewJobResult(JobResult):  # JobResult after vLLM #50045
        transfer_bytes: int | None = None

    monkeypatch.setattr(kvtier.vllm, "JobResult", NewJobResult)
    monkeypatch.setattr(kvtier.vllm, "_RESULT_HAS_BYTES", True)
    eng = h.Engine([h.vllm_tier(tmp_path / "host")])
    try:
        tier = kvtier.vllm.KvtierFsTier(eng.spec, eng.view, "KvtierFsTier", backpressure_detector=None,
                                        root_dir=str(tmp_path / "t"))
        rows = np.asarray(eng.view)
        keys = prompts(h, 1, SALT + "-up")[0]
        for i, k in enumerate(keys):
            rows[i] = np.frombuffer(h.content(k), dtype=np.int8)
        ctx = ReqContext(req_id="up")
        tier.submit_store(UpstreamJob(41, keys, np.arange(4), False, ctx))
        tier.drain_jobs()
        (res,) = tier.get_finished_jobs()
        assert (res.job_id, res.success, res.transfer_bytes) == (41, True, 4 * h.ROW)
        rows[4:8] = 0
        tier.submit_load(UpstreamJob(42, keys, np.arange(4, 8), True, ctx))
        tier.drain_jobs()
        (res,) = tier.get_finished_jobs()
        assert (res.job_id, res.success, res.transfer_bytes) == (42, True, 4 * h.ROW)
        assert [rows[4 + i].tobytes() for i in range(4)] == [h.content(k) for k in keys]
        del rows
        tier.shutdown()
    finally:
        eng.shutdown()


def test_drain_gives_every_job_one_result(h, tmp_path):
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.tiering.base import TransferJob

    eng = h.Engine([h.vllm_tier(tmp_path / "host")])
    try:
        tier = kvtier.vllm.KvtierFsTier(eng.spec, eng.view, "KvtierFsTier", root_dir=str(tmp_path / "t"))
        ctx = ReqContext(req_id="drain")
        ids = list(range(100, 140))
        for j in ids:
            keys = prompts(h, 1, f"{SALT}-drain-{j}")[0][:2]
            tier.submit_store(TransferJob(j, keys, np.array([j % 8, (j + 1) % 8]), False, ctx))
        tier.drain_jobs()
        got = [r.job_id for r in tier.get_finished_jobs()]
        assert sorted(got) == ids and tier.get_finished_jobs() == []
        assert not tier.has_pending_work()
        tier.shutdown()
    finally:
        eng.shutdown()


def test_restart_finds_blocks(h, tmp_path):
    ps = prompts(h, 2, SALT + "-restart")
    first = h.Engine([h.kvtier_tier(tmp_path)])
    try:
        first.store_prompts(ps)
    finally:
        first.shutdown()
    second = h.Engine([h.kvtier_tier(tmp_path)])
    try:
        for keys in ps:
            n, data = second.fetch(keys)
            assert n == 4 and data == [h.content(k) for k in keys]
        t0 = time.monotonic()
        second.idle()
        assert time.monotonic() - t0 < 30
    finally:
        second.shutdown()


def test_kv_events_for_stored_blocks(h, tmp_path):
    from vllm.v1.kv_offload.base import Locality, Medium

    ps = prompts(h, 2, SALT + "-events")
    eng = h.Engine([h.kvtier_tier(tmp_path, enable_kv_events=True, locality="REMOTE")])
    try:
        eng.store_prompts(ps)
        events = [e for e in eng.m.take_events() if e.medium == Medium.STORAGE]
        stored = sorted(k for e in events if not e.removed for k in e.keys)
        assert stored == sorted(k for keys in ps for k in keys)
        assert all(e.locality == Locality.REMOTE for e in events)
        assert not [e for e in eng.m.take_events() if e.medium == Medium.STORAGE], "events are taken once"
    finally:
        eng.shutdown()


def test_kv_events_off_in_vllm_is_said_and_keeps_nothing(h, tmp_path, caplog):
    """enable_kv_events on the tier with vLLM's events off: a warning, as vLLM's own tier gives, and no events."""
    from vllm.v1.kv_offload.base import Medium

    with caplog.at_level(logging.WARNING, logger="kvtier.vllm"):
        eng = h.Engine([h.kvtier_tier(tmp_path, enable_kv_events=True)], kv_cache_events=False)
    try:
        said = [r.getMessage() for r in caplog.records if r.name == "kvtier.vllm"]
        assert any("enable_kv_events" in m and "disabled globally" in m for m in said), said
        eng.store_prompts(prompts(h, 1, SALT + "-events-off"))
        assert not [e for e in eng.m.take_events() if e.medium == Medium.STORAGE]
        assert eng.tiers[0]._tier.take_key_events() == [], "nothing kept for a channel no one drains"
    finally:
        eng.shutdown()


def storage_index(events, index):
    """Applies vLLM-channel events to a router's index of one volume: a set of keys."""
    for e in events:
        index.difference_update(e.keys) if e.removed else index.update(e.keys)
    return index


def storage_events(eng):
    from vllm.v1.kv_offload.base import Medium

    return [e for e in eng.m.take_events() if e.medium == Medium.STORAGE]


def test_kv_events_for_a_corrupt_block_removed(h, tmp_path):
    """vLLM's own channel (enable_kv_events) names the corrupt block a load found and removed."""
    ps = prompts(h, 3, SALT + "-removed")
    eng = h.Engine([h.kvtier_tier(tmp_path, enable_kv_events=True)])
    try:
        h.check_corrupt_block_keeps_the_prefix(eng, ps)
        events = storage_events(eng)
        assert [e.keys for e in events if e.removed] == [[ps[0][2]]], events
        index = storage_index(events, set())
        assert index == {k for keys in ps for k in keys} - {ps[0][2]}
    finally:
        eng.shutdown()


def test_kv_events_say_a_removal_follows_where_vllm_asks(h, tmp_path, monkeypatch):
    """With vLLM's later OffloadingEvent (ownership, removal_expected: what its self-describing
    tracker pairs a chunk's store and removal by), a tier that evicts (max_bytes) says with each
    store that a removal follows, and its stores and removals carry one owner; one that does not
    evict says none follows (gc's removals never reach vLLM's channel); with the pinned event class
    (no such fields) events are built as before."""
    import kvtier.vllm
    from vllm.v1.kv_offload.base import OffloadingEvent

    @dataclasses.dataclass
    class NewEvent(OffloadingEvent):
        ownership: str | None = None
        removal_expected: bool = False

    monkeypatch.setattr(kvtier.vllm, "OffloadingEvent", NewEvent)
    monkeypatch.setattr(kvtier.vllm, "_EVENT_FIELDS", {f.name for f in dataclasses.fields(NewEvent)})
    for max_bytes, root in ((10 * h.ROW, tmp_path / "evicts"), (None, tmp_path / "keeps")):
        keys = {"max_bytes": max_bytes} if max_bytes else {}
        eng = h.Engine([h.kvtier_tier(root, enable_kv_events=True, **keys)])
        try:
            eng.store_prompts(prompts(h, 6, SALT + f"-owned-{root.name}"))
            events = [e for e in storage_events(eng) if isinstance(e, NewEvent)]
            stores, removals = [e for e in events if not e.removed], [e for e in events if e.removed]
            assert stores and bool(removals) == bool(max_bytes), events
            assert all(e.removal_expected == bool(max_bytes) for e in stores), events
            assert not any(e.removal_expected for e in removals)
            assert {e.ownership for e in events} == {f"KvtierFsTier:{root}"}, events
        finally:
            eng.shutdown()


def test_kv_events_for_evictions_keep_an_index_equal_to_the_volume(h, tmp_path):
    """Each max_bytes eviction is a removal on vLLM's channel, in file order: an index fed by
    take_events (once, at the end, or every step) equals the block files on the volume."""
    ps = prompts(h, 6, SALT + "-evicted")
    eng = h.Engine([h.kvtier_tier(tmp_path, enable_kv_events=True, max_bytes=10 * h.ROW)])
    try:
        each_step = set()
        for p in ps[:3]:
            eng.store_prompts([p])
            storage_index(storage_events(eng), each_step)
        eng.store_prompts(ps[3:])
        at_end = storage_index(storage_events(eng), set(each_step))
        tier = eng.tiers[0]
        on_disk = {k for keys in ps for k in keys if os.path.exists(tier._tier.block_path(k))}
        assert 0 < len(on_disk) < 24 and tier._tier.metrics()["capacity_evicted_blocks"] >= 24 - len(on_disk)
        assert at_end == on_disk, (sorted(at_end ^ on_disk), len(on_disk))
    finally:
        eng.shutdown()
