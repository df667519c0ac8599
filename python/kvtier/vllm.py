"""kvtier.vllm: ``KvtierFsTier``, kvtier's fs tier as an out-of-tree vLLM secondary tier.

Add to vLLM's ``kv_connector_extra_config`` (``spec_name: "TieringOffloadingSpec"``)::

    "secondary_tiers": [{"type": "KvtierFsTier", "module_path": "kvtier.vllm", "root_dir": "/mnt/pvc"}]

vLLM's ``SecondaryTierFactory`` imports this module and builds the class with the tier's other
keys: vLLM's fs-tier keys (``root_dir``, ``n_read_threads``, ``n_write_threads``,
``enable_kv_events``, ``locality``, ``backpressure``, PR #57912's ``checksum_blocks``, on by
default in kvtier, and PR #54327's ``max_bytes``, the byte budget of the tier's
``<model>_<digest>_r<rank>`` directory with LRU eviction) and kvtier's own (docs/config.md); an unknown key or a broken rule raises
``kvtier.KvtierError`` naming the key. Blocks, paths and
``config.json`` are vLLM's, so vLLM's own ``"type": "fs"`` tier on the same root reads what this
tier writes, and the reverse.

A sealed tier (``"seal_key_file": "/var/run/secrets/kvtier/seal.key"``, or ``seal_key_fd``, with
``seal_read_key_files`` for rotation; FORMAT.md L160-L173) encrypts and authenticates every block
under a key only its instances hold, in a namespace of that key's own: vLLM's tier and unsealed
kvtier tiers never see those blocks, and a block planted or moved by anyone without the key is
never returned.

All the work is in kvtier's C++ ``VllmTier``: the io_uring engine moves rows straight between
the block files and vLLM's primary rows (registered with the ring once), lookups are answered
from a verdict cache and checked in one asynchronous batch per scheduler step, and every job
yields exactly one ``JobResult``. This module only translates vLLM's types. It works with the
interface at vLLM commit 7cfb97e33791 and with later upstream (``backpressure_detector``
argument, ``TransferJob.chunk_ids``, ``JobResult.transfer_bytes``).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

try:
    import vllm.v1.kv_offload.tiering.base  # noqa: F401
except ImportError as exc:  # kvtier itself does not need vLLM; this module is vLLM's plug-in
    raise ImportError(
        "kvtier.vllm is a secondary tier for vLLM's TieringOffloadingSpec and needs vLLM "
        f"(vllm.v1.kv_offload.tiering) importable in this interpreter: {exc}"
    ) from exc

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingCounterMetadata,
    OffloadingEvent,
    OffloadingGaugeMetadata,
    OffloadingMetricMetadata,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

import kvtier

logger = logging.getLogger("kvtier.vllm")

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats
    from vllm.v1.kv_offload.base import OffloadingSpec

__all__ = ["KvtierFsTier"]

# VllmTier.lookup's answers, by value (0 miss, 1 hit, 2 retry).
_VERDICTS = (LookupResult.MISS, LookupResult.HIT, LookupResult.RETRY)
# Interface drift after vLLM 7cfb97e (PR #50045 added the backpressure_detector argument and
# JobResult.transfer_bytes), decided once at import.
_BASE_TAKES_DETECTOR = "backpressure_detector" in inspect.signature(SecondaryTierManager.__init__).parameters
_RESULT_HAS_BYTES = "transfer_bytes" in {f.name for f in dataclasses.fields(JobResult)}
# Later, OffloadingEvent gained `ownership` and `removal_expected`. vLLM's OffloadingEventsTracker
# (self-describing events, upstream offloading/events.py) keeps a chunk's block hashes until the
# removal of each residency that said one would follow, and then fans that removal out to all of
# them. With max_bytes this tier evicts, and names each eviction on its channel, so its stores say
# a removal follows, under one owner. Without it the tier's removals are rare (a corrupt block),
# and gc's, in another process, never reach this channel: vLLM would keep every chunk's hashes.
_EVENT_FIELDS = {f.name for f in dataclasses.fields(OffloadingEvent)}

# The metrics reported to vLLM's stats: the fields the library's metrics table gives a vLLM name
# (kvtier.fs_metric_fields(), include/kvtier/fs_tier_metrics.h), with its scale and documentation.
_REPORTED = [f for f in kvtier.fs_metric_fields() if f["vllm"]]
_COUNTERS = {  # metric name -> (FsTier metrics() field, scale, documentation)
    f["vllm"]: (f["name"], f["scale"], f["help"]) for f in _REPORTED if f["kind"] == "counter"
}
_GAUGES = {f["vllm"]: (f["name"], f["help"]) for f in _REPORTED if f["kind"] == "gauge"}
_LABELS = ("tier",)
# What a tier key from JSON can be. vLLM's factory passes a detector object (or None) as
# ``backpressure_detector``, never one of these; such a value is a tier key of that name (vLLM
# 7cfb97e's factory passes every tier key as an argument), unknown to the fs tier and refused.
_JSON_VALUE_TYPES = (str, int, float, bool, list, dict)


def _namespace(spec: OffloadingSpec) -> kvtier.Namespace:
    """The namespace vLLM's fs tier uses for this spec (FileMapper.from_offloading_spec with
    blocks_per_file = blocks_per_chunk and parallel_agnostic requested)."""
    config = spec.config
    parallel = config.parallel
    canonical = None
    if config.canonical_layout:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping import canonical_format_id

        canonical = canonical_format_id()
    return kvtier.Namespace(
        config.model.name,
        tokens_per_hash=config.cache.tokens_per_hash,
        blocks_per_file=spec.blocks_per_chunk,
        tp_size=parallel.tp_size,
        pp_size=parallel.pp_size,
        pcp_size=parallel.pcp_size,
        dcp_size=parallel.dcp_size,
        rank=parallel.rank,
        dtype=str(config.model.dtype),
        kv_cache_groups=[
            {"tokens_per_block": g.tokens_per_block, "layer_names": list(g.layer_names)} for g in config.groups
        ],
        parallel_agnostic=bool(parallel.is_parallelism_agnostic or config.replicated_layout),
        replicated_layout=bool(config.replicated_layout),
        canonical_format=canonical,
    )


class KvtierFsTier(SecondaryTierManager):
    """vLLM secondary tier on kvtier's io_uring fs tier (see the module docstring)."""

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(
        self,
        offloading_spec: OffloadingSpec,
        primary_kv_view: memoryview,
        tier_type: str,
        backpressure_detector: Any = None,
        **tier_keys: Any,
    ) -> None:
        if isinstance(backpressure_detector, _JSON_VALUE_TYPES):
            tier_keys = {**tier_keys, "backpressure_detector": backpressure_detector}  # kvtier's parser names it
            backpressure_detector = None
        if _BASE_TAKES_DETECTOR:
            super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector=backpressure_detector)
        else:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
        self.backpressure_detector = backpressure_detector
        self.root_dir = tier_keys.get("root_dir")
        assert primary_kv_view.strides is not None, "primary_kv_view.strides cannot be None"
        self._row_bytes: int = primary_kv_view.strides[0]
        # The tier keeps its stores and removals for take_events only while vLLM drains them.
        vllm_events = offloading_spec.kv_events_config.enable_kv_cache_events
        self._events_on = bool(tier_keys.get("enable_kv_events")) and vllm_events
        if tier_keys.get("enable_kv_events") is True and not self._events_on:
            # As vLLM's own fs tier says it: take_events would never be drained.
            logger.warning("kvtier.vllm: enable_kv_events is set on secondary tier %r but KV cache events are "
                           "disabled globally (enable_kv_cache_events); the tier will not emit events", tier_type)
            tier_keys = {**tier_keys, "enable_kv_events": False}
        # Every key is checked by kvtier's parser here, first, so a bad one (a misspelt locality
        # too) is a KvtierError naming it, never a bare ValueError from the conversions below.
        self._tier = kvtier.VllmTier(_namespace(offloading_spec), primary_kv_view, self._row_bytes, tier_keys)
        locality = tier_keys.get("locality")
        self.locality = Locality(locality) if locality is not None else None
        self._label = (f"{tier_type}:{self.root_dir}",)
        self._removals_follow = bool(tier_keys.get("max_bytes"))  # the tier evicts: see _EVENT_FIELDS
        self._load_keys: dict[int, list[OffloadKey]] = {}  # to name the keys of a partial load
        self._last_metrics = self._tier.metrics()

    # ---- per-step contract ----------------------------------------------------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        return _VERDICTS[self._tier.lookup(key, req_context.req_id)]

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._tier.flush_lookups()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._tier.finish_request(req_context.req_id)

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._tier.submit_store(job_metadata.job_id, list(job_metadata.keys), _chunk_ids(job_metadata))

    def submit_load(self, job_metadata: TransferJob) -> None:
        keys = list(job_metadata.keys)
        self._load_keys[job_metadata.job_id] = keys
        self._tier.submit_load(job_metadata.job_id, keys, _chunk_ids(job_metadata))

    def get_finished_jobs(self) -> Iterable[JobResult]:
        results = []
        for job_id, is_load, success, ok_indices, nbytes, seconds in self._tier.poll_finished():
            successful = None
            if is_load:
                keys = self._load_keys.pop(job_id)
                if not success and ok_indices:
                    successful = tuple(keys[i] for i in ok_indices)
            result = JobResult(job_id=job_id, success=success, successful_keys=successful, transfer_time=seconds)
            if _RESULT_HAS_BYTES:
                result.transfer_bytes = nbytes
            results.append(result)
        return results

    def has_pending_work(self) -> bool:
        return self._tier.has_pending_work()

    def drain_jobs(self) -> None:
        self._tier.drain()  # no limit

    def take_events(self) -> Iterable[OffloadingEvent]:
        """The files the tier made visible (a block found already there too, as vLLM's tier
        announces it) and removed (a corrupt block a load found, a max_bytes eviction) since the
        last call, in the order they changed: one event per run of stores or of removals."""
        if not self._events_on:
            return
        run: list[OffloadKey] = []
        removed = False
        for key, was_removed in self._tier.take_key_events():
            if run and was_removed != removed:
                yield self._event(run, removed)
                run = []
            run.append(key)
            removed = was_removed
        if run:
            yield self._event(run, removed)

    def _event(self, keys: list[OffloadKey], removed: bool) -> OffloadingEvent:
        extra: dict[str, Any] = {}
        if "ownership" in _EVENT_FIELDS:
            extra["ownership"] = self._label[0]
        if "removal_expected" in _EVENT_FIELDS and not removed and self._removals_follow:
            extra["removal_expected"] = True
        return OffloadingEvent(keys=keys, medium=self.medium, removed=removed, locality=self.locality, **extra)

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        # Recency for max_bytes comes from the tier's own loads and lookup hits; without max_bytes
        # the tier keeps no eviction order (gc reclaims by age and capacity).
        return

    def shutdown(self) -> None:
        """Drains, stops all I/O into the primary rows and releases them, so vLLM can unmap."""
        self._tier.shutdown()

    # ---- metrics --------------------------------------------------------------------------------

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, OffloadingMetricMetadata]:
        metrics: dict[str, OffloadingMetricMetadata] = {
            name: OffloadingCounterMetadata(documentation=doc, labelnames=_LABELS)
            for name, (_, _, doc) in _COUNTERS.items()
        }
        metrics.update(
            {name: OffloadingGaugeMetadata(documentation=doc, labelnames=_LABELS) for name, (_, doc) in _GAUGES.items()}
        )
        return metrics

    def get_stats(self) -> OffloadingConnectorStats | None:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats

        now = self._tier.metrics()
        stats = OffloadingConnectorStats()
        for name, (field, scale, _) in _COUNTERS.items():
            delta = now[field] - self._last_metrics[field]
            if delta:
                stats.increase_counter(name, delta * scale, self._label)
        for name, (field, _) in _GAUGES.items():
            stats.set_gauge(name, now[field], self._label)
        self._last_metrics = now
        return stats

    def prometheus_text(self) -> str:
        """kvtier's own full metric set (docs/metrics.md) in Prometheus text format."""
        return self._tier.prometheus_text("fs0")


def _chunk_ids(job: TransferJob) -> Any:
    """The primary slots of a job: ``chunk_ids`` on newer vLLM, ``block_ids`` at 7cfb97e."""
    ids = getattr(job, "chunk_ids", None)
    return job.block_ids if ids is None else ids
