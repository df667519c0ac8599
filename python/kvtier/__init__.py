"""kvtier: a multi-tier KV-cache block store, byte-compatible with vLLM's fs tier.

A thin binding over kvtier's C++ library (``kvtier._kvtier``):

* hashing and layout: :func:`block_hashes`, :func:`none_hash`, :func:`chunk_keys`,
  :func:`make_key`, :class:`Namespace` (directory, digest, ``config.json`` bytes, block paths);
* :class:`FsTier`: asynchronous store / load / lookup jobs over caller buffers (zero-copy);
* :class:`EngineTier`: the same tier driven by an engine's per-step contract (used by
  :mod:`kvtier.vllm`, vLLM's out-of-tree secondary tier ``KvtierFsTier``);
* operators' tools: :func:`du`, :func:`fsck`, :func:`gc`; :func:`config_check`.

Every error is a :class:`KvtierError` carrying kvtier's status (``code``, ``errno``, ``message``).
"""

from kvtier._kvtier import (
    DuReport,
    EngineTier,
    Finding,
    FsckReport,
    FsTier,
    GcReport,
    JobResult,
    KvtierError,
    Namespace,
    NamespaceUsage,
    Reclaimed,
    block_hashes,
    chunk_keys,
    config_check,
    du,
    fsck,
    gc,
    make_key,
    none_hash,
)

__all__ = [
    "DuReport", "EngineTier", "Finding", "FsckReport", "FsTier", "GcReport", "JobResult", "KvtierError",
    "Namespace", "NamespaceUsage", "Reclaimed", "block_hashes", "chunk_keys", "config_check", "du", "fsck",
    "gc", "make_key", "none_hash",
]
