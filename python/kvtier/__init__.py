"""kvtier: a multi-tier KV-cache block store, byte-compatible with vLLM's fs tier.

A thin binding over kvtier's C++ library (``kvtier._kvtier``):

* hashing and layout: :func:`block_hashes`, :func:`none_hash`, :func:`chunk_keys`,
  :func:`make_key`, :class:`Namespace` (directory, digest, ``config.json`` bytes, block paths);
  SGLang's page keys: :func:`sglang_page_keys`;
* :class:`FsTier`: asynchronous store / load / lookup jobs over caller buffers (zero-copy);
  :func:`fs_metric_fields` describes each field of its ``metrics()``;
* :class:`VllmTier`: the same tier driven by an engine's per-step contract (used by
  :mod:`kvtier.vllm`, vLLM's out-of-tree secondary tier ``KvtierFsTier``); ``EngineTier``, its
  old name, is a deprecated alias (warns; removed in the next release);
* operators' tools: :func:`du`, :func:`fsck`, :func:`gc`; :func:`config_check`;
* kvtier's log (stderr by default): :func:`set_log_sink`, :func:`use_python_logging`,
  :func:`set_min_log_level`.

Every error is a :class:`KvtierError` carrying kvtier's status (``code``, ``errno``, ``message``).
"""

import logging
import warnings

from kvtier._kvtier import (
    Collector,
    DuReport,
    Finding,
    FsckReport,
    FsTier,
    GcReport,
    JobResult,
    KvtierError,
    Namespace,
    NamespaceUsage,
    Reclaimed,
    VllmTier,
    block_hashes,
    chunk_keys,
    config_check,
    du,
    fs_metric_fields,
    fsck,
    gc,
    make_key,
    none_hash,
    set_log_sink,
    set_min_log_level,
    sglang_page_keys,
)

__all__ = [
    "Collector", "DuReport", "Finding", "FsckReport", "FsTier", "GcReport", "JobResult", "KvtierError",
    "Namespace", "NamespaceUsage", "Reclaimed", "VllmTier", "block_hashes", "chunk_keys", "config_check", "du",
    "fs_metric_fields", "fsck", "gc", "make_key", "none_hash", "set_log_sink", "set_min_log_level",
    "sglang_page_keys", "use_python_logging",
]

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def use_python_logging(logger: logging.Logger | None = None) -> None:
    """Sends kvtier's log messages to ``logger`` (default ``logging.getLogger("kvtier")``) instead
    of stderr. Each message takes the GIL on the thread that logs it, kvtier's own threads
    included; kvtier logs rarely (a degraded mode, a retried failure), never per block."""
    target = logger if logger is not None else logging.getLogger("kvtier")
    set_log_sink(lambda level, message: target.log(_LEVELS[level], "%s", message))


def __getattr__(name: str):
    # kvtier.EngineTier was VllmTier's name until the adapters were named alike (issue 45); code
    # outside the repo may still use it, so it stays one release, with a warning.
    if name == "EngineTier":
        warnings.warn("kvtier.EngineTier is deprecated: use kvtier.VllmTier", DeprecationWarning, stacklevel=2)
        return VllmTier
    raise AttributeError(f"module 'kvtier' has no attribute {name!r}")
