"""What Python and vLLM see of an fs tier's metrics comes from the library's one table of them
(``kvtier.fs_metric_fields()``, ``include/kvtier/fs_tier_metrics.h``).

Proves: ``metrics()`` of an open FsTier, of a two-root FsTier and of an VllmTier has exactly the
table's fields, in its order, each an int (a float for the one double); ``prometheus_text()``
exports each field the table gives a family, with the table's kind; kvtier.vllm's metric
definitions, built by vLLM's own metadata classes (vllm-project/vllm
``vllm/v1/kv_offload/base.py`` at commit 7cfb97e33791, run from ../shared/vllm), are exactly the fields with a
vLLM name, by kind, documented with the table's help, and ``get_stats()`` reports every gauge
of them (that part skips, saying why, where ../shared/vllm is absent). A field added to the
table reaches all of them or one of these fails.
"""

import re

import pytest

import kvtier

ROW = 8192
NS_ARGS = dict(kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
FIELDS = kvtier.fs_metric_fields()


def ns():
    return kvtier.Namespace("kvtier-test/metrics-table", **NS_ARGS)


def test_table_rows_are_complete():
    assert FIELDS, "the table is empty"
    for f in FIELDS:
        assert set(f) == {"name", "kind", "merge", "unit", "prometheus", "scale", "vllm", "help"}, f
        assert f["kind"] in ("counter", "gauge") and f["merge"] in ("sum", "max", "min"), f
        assert f["unit"] and f["help"], f
    assert len({f["name"] for f in FIELDS}) == len(FIELDS)


@pytest.mark.parametrize("roots", [1, 2])
def test_fs_tier_metrics_and_text_follow_the_table(tmp_path, roots):
    root_dir = ",".join(str(tmp_path / f"r{i}") for i in range(roots))
    config = {"root_dir": root_dir, **({"path_sharding": "by_block_hash"} if roots > 1 else {})}
    with kvtier.FsTier(ns(), ROW, config) as tier:
        metrics = tier.metrics()
        text = tier.prometheus_text("fs0")
    assert list(metrics) == [f["name"] for f in FIELDS]
    for f in FIELDS:
        assert isinstance(metrics[f["name"]], (int, float)), f["name"]
        if f["prometheus"]:
            assert f"# TYPE {f['prometheus']} {f['kind']}\n" in text, f["prometheus"]
            assert re.search(rf"^{f['prometheus']}\{{tier=\"fs0\"\}} \S+$", text, re.M), f["prometheus"]
    exported = {f["prometheus"] for f in FIELDS if f["prometheus"]}
    families = set(re.findall(r"^# TYPE (\S+) (?:counter|gauge)$", text, re.M))
    assert families == exported


def test_vllm_tier_metrics_follow_the_table(tmp_path):
    rows = bytearray(4 * ROW)
    et = kvtier.VllmTier(ns(), rows, ROW, {"root_dir": str(tmp_path)})
    try:
        assert list(et.metrics()) == [f["name"] for f in FIELDS]
    finally:
        et.shutdown()


@pytest.fixture(scope="module")
def h(vllm_tree):
    import vllm_harness

    return vllm_harness


def test_vllm_sees_every_field_with_a_vllm_name(h, tmp_path):
    from vllm.v1.kv_offload.base import OffloadingCounterMetadata, OffloadingGaugeMetadata

    import kvtier.vllm

    reported = {f["vllm"]: f for f in FIELDS if f["vllm"]}
    assert reported, "the table reports nothing to vLLM"
    defs = kvtier.vllm.KvtierFsTier.build_metric_definitions(h.kvtier_tier(tmp_path))
    assert set(defs) == set(reported)
    for name, meta in defs.items():
        kind = OffloadingCounterMetadata if reported[name]["kind"] == "counter" else OffloadingGaugeMetadata
        assert isinstance(meta, kind), name
        assert meta.documentation == reported[name]["help"], name
    eng = h.Engine([h.kvtier_tier(tmp_path)])
    try:
        data = eng.m.get_stats().data["data"]
    finally:
        eng.shutdown()
    gauges = {name for name, f in reported.items() if f["kind"] == "gauge"}
    assert gauges <= set(data), gauges - set(data)
