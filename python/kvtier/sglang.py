"""kvtier.sglang: ``KvtierHiCacheStorage``, kvtier's fs tier as SGLang's HiCache L3 storage.

Load it with SGLang's ``dynamic`` storage backend::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "kvtier", "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
      "interface_v1": 1, "root_dir": "/mnt/pvc"}'

SGLang builds the class as ``KvtierHiCacheStorage(storage_config, kwargs)`` and hands it the host
KV pool through :meth:`register_mem_pool_host`; that is where the namespace is derived (served
model name, page size, host layout, dtype, K and V bytes per token, layers, MLA, TP/PP/CP) and
the store opened: a bad key, layout or dtype is a ``kvtier.KvtierError`` naming it there, and a
hung mount one with code ``timed_out`` within ``io_timeout_ms``, so SGLang's attach fails instead
of the server running without L3 or hanging (docs/sglang.md). A failed attach leaves the backend
detached (every call a miss) until an attach succeeds.

The page files are kvtier's (layout-spec/FORMAT.md, the SGLang rules): one file per page holding
SGLang's own flat page bytes, sharded like vLLM's blocks, written by temp file and rename with
the CRC32C in an xattr (or, on volumes without user xattrs, a trailer after the page:
docs/checksums.md), in a namespace directory of its own beside vLLM's. All I/O is kvtier's C++
``SglangTier`` (the io_uring I/O loop), called with the GIL released; with ``interface_v1`` the
pages move straight between the files and the pool's K and V buffers.

SGLang calls a backend from three daemon threads whose loops catch nothing: one exception ends
the thread and L3 with it. So every I/O entry point here catches everything, whatever the
arguments, and answers the miss the controller can use (False, None, 0, or [] for keys that are
not a list); each kind of failure is counted and logged once (``logging.getLogger("kvtier.sglang")``).
The zero-copy calls move a page only when all its pieces lie inside the pool's buffers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional

import torch

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError as exc:  # kvtier itself does not need SGLang; this module is SGLang's plug-in
    raise ImportError(
        "kvtier.sglang is a HiCache storage backend for SGLang and needs SGLang "
        f"(sglang.srt.mem_cache.hicache_storage) importable in this interpreter: {exc}"
    ) from exc

import kvtier
from kvtier import _kvtier
from kvtier._sglang_parts import (
    MHA_LAYOUTS, MLA_LAYOUTS, _dtype_name, _Failures, _key_list, _memory_spans, _piece_inside, _refuse)

__all__ = ["KvtierHiCacheStorage"]

logger = logging.getLogger("kvtier.sglang")


class _Attached:
    """What one register_mem_pool_host attached: the store, the pool and the pool's memory. It is
    replaced whole, and each call reads it once, so a call never mixes two attaches' pools and
    stores, and a call after close() or during a re-attach finds none (a miss)."""

    __slots__ = ("store", "pool", "spans", "reorder_layers", "page_size", "page_bytes")

    def __init__(self, store: Any, pool: Any, spans: List[tuple], reorder_layers: bool, page_size: int) -> None:
        self.store, self.pool, self.spans = store, pool, spans
        self.reorder_layers, self.page_size, self.page_bytes = reorder_layers, page_size, store.page_bytes


class KvtierHiCacheStorage(HiCacheStorage):
    """SGLang HiCache L3 storage on kvtier (see the module docstring)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        if storage_config is None:
            _refuse("storage_config", "SGLang passed none; kvtier needs the served model name and ranks")
        self.storage_config = storage_config
        try:
            # The library sorts the keys (fs tier, namespace, SGLang's, unknown: one warning each).
            extra = getattr(storage_config, "extra_config", None)
            self._fs_config, self._spec_keys = _kvtier.sglang_extra_config(extra)
            model = getattr(storage_config, "model_name", None) or self._spec_keys.get("model_path")
            self._metrics_on = bool(getattr(storage_config, "enable_storage_metrics", False))
        except kvtier.KvtierError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad attach is a KvtierError (docs/sglang.md)
            _refuse("storage_config", f"cannot be read ({type(exc).__name__}: {exc})")
        if not model:
            _refuse("model_name", "SGLang's served model name is not set (--served-model-name) and "
                    "extra_config has no model_path; kvtier keys its namespace by the model")
        self._model_name = str(model)
        self._attached: Optional[_Attached] = None
        self._failures = _Failures()
        self._stats_lock = threading.Lock()
        self._stats = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [], "backup_bandwidth": []}

    @property
    def _store(self) -> Any:
        """The attached native store, or None (before attach, after close or a failed attach)."""
        att = self._attached
        return att.store if att is not None else None

    # ---- attach ---------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Derives the namespace from the pool and opens the store. A second call re-attaches: the
        old store is closed first, and until the new one is open every call answers a miss. Any
        failure raises kvtier.KvtierError and leaves the backend detached (every call a miss, as
        after close()); a later call may attach it again (docs/sglang.md)."""
        old, self._attached = self._attached, None
        if old is not None:
            self._close_store(old)
        super().register_mem_pool_host(mem_pool_host)
        try:
            spec = self._page_spec(mem_pool_host)
            spans = _memory_spans(mem_pool_host)
            page_size = int(mem_pool_host.page_size)
        except kvtier.KvtierError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad attach is a KvtierError (docs/sglang.md)
            _refuse("mem_pool_host", f"not a host KV pool kvtier can read ({type(exc).__name__}: {exc})")
        kv = getattr(mem_pool_host, "kv_buffer", None)
        memory = []
        if isinstance(kv, torch.Tensor) and (kv.data_ptr(), kv.data_ptr() + kv.numel() * kv.element_size()) in spans:
            memory.append((kv.data_ptr(), kv.numel() * kv.element_size()))
            if kv.data_ptr() % 4096:
                # O_DIRECT needs page-aligned pieces: pages then go through the tier's aligned
                # staging rows (one memcpy each way; buffered only where a page's size is not a
                # multiple of 4 KiB). SGLang's pinned CUDA host pools are page-aligned: no copy.
                logger.info("kvtier.sglang: the host pool starts %d bytes past a 4 KiB boundary: "
                            "pages are staged through aligned rows (one copy each way)", kv.data_ptr() % 4096)
        if not spans:
            logger.warning("kvtier.sglang: the host pool's buffers are not contiguous CPU tensors, so kvtier "
                           "cannot check host indices against them: the zero-copy calls (interface_v1) answer "
                           "misses; the generic path works")
        # A copy: the native parser must never change the operator's config (a re-attach parses it again).
        store = _kvtier.SglangTier(dict(self._fs_config), spec, memory)
        reorder = (not spec["is_mla"]) and spec["mem_layout"] == "layer_first"
        self._attached = _Attached(store, mem_pool_host, spans, reorder, page_size)

    def _page_spec(self, pool: Any) -> dict:
        cfg = self.storage_config
        is_mla = bool(getattr(cfg, "is_mla_model", False))
        layout = getattr(pool, "layout", None)
        allowed = MLA_LAYOUTS if is_mla else MHA_LAYOUTS
        if layout not in allowed:
            _refuse("mem_layout", f"host layout {layout!r} is not supported for {'MLA' if is_mla else 'MHA'} "
                    f"(one of: {', '.join(allowed)})")
        dtype = _dtype_name(getattr(pool, "dtype", None))
        layers = int(pool.layer_num)
        per_token = int(pool.size_per_token)  # bytes of one token, all layers, K and V
        k_all = int(pool.get_ksize_per_token()) if not is_mla else per_token
        if layers < 1 or per_token % layers or k_all % layers or k_all > per_token:
            _refuse("mem_layout", f"the host pool's sizes do not divide into {layers} layers "
                    f"(size_per_token {per_token}, K size per token {k_all})")
        spec = {
            "model_name": self._model_name, "page_size": int(pool.page_size), "mem_layout": layout,
            "dtype": dtype, "k_bytes_per_token": k_all // layers, "v_bytes_per_token": (per_token - k_all) // layers,
            "layer_num": layers, "is_mla": is_mla,
            "tp_size": int(getattr(cfg, "tp_size", 1) or 1), "tp_rank": int(getattr(cfg, "tp_rank", 0) or 0),
            "pp_size": int(getattr(cfg, "pp_size", 1) or 1), "pp_rank": int(getattr(cfg, "pp_rank", 0) or 0),
            "cp_size": int(getattr(cfg, "attn_cp_size", 1) or 1), "cp_rank": int(getattr(cfg, "attn_cp_rank", 0) or 0),
        }
        spec.update(self._spec_keys)
        return spec

    # ---- zero-copy path (interface_v1) ------------------------------------------------------------

    def _attachment(self) -> _Attached:
        att = self._attached
        if att is None:
            raise RuntimeError("no host pool attached (before register_mem_pool_host, after close() or a "
                               "failed attach)")
        return att

    def _pool_pieces(self, n_keys: int, host_indices: Any,
                     att: Optional[_Attached] = None) -> List[Optional[List[tuple]]]:
        """Per page, the (address, bytes) pieces whose concatenation is SGLang's flat page, or None
        for a page one piece of which falls outside the pool's buffers (negative, past the end,
        far past): nothing is read or written for it."""
        att = att or self._attachment()
        if not att.spans:
            raise ValueError("the host pool's memory is unknown: zero-copy calls are off")
        if (not isinstance(host_indices, torch.Tensor) or host_indices.dim() != 1
                or host_indices.dtype.is_floating_point or host_indices.dtype.is_complex
                or host_indices.dtype == torch.bool or host_indices.numel() != n_keys * att.page_size):
            raise ValueError(f"host_indices must be {n_keys} pages of {att.page_size} integer token slots, got "
                             f"{type(host_indices).__name__} {getattr(host_indices, 'shape', '')}")
        if n_keys == 0:
            return []
        ptrs, sizes = att.pool.get_page_buffer_meta(host_indices)
        if len(ptrs) % n_keys or len(ptrs) != len(sizes):
            raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} pointers for {n_keys} pages")
        per = len(ptrs) // n_keys
        pages: List[Optional[List[tuple]]] = []
        for i in range(n_keys):
            at = slice(i * per, (i + 1) * per)
            piece = [_piece_inside(p, att.spans) for p in zip(ptrs[at], sizes[at])]
            if not all(piece):
                pages.append(None)
                continue
            if att.reorder_layers:  # [K0, V0, K1, V1, ...] -> the flat page's [K0..K(L-1), V0..V(L-1)]
                piece = piece[0::2] + piece[1::2]
            pages.append(piece)
        if any(p is None for p in pages):
            self._failures.note("host_indices", detail="a page's host indices fall outside the registered pool: "
                                "that page answered False, nothing read or written for it")
        return pages

    @staticmethod
    def _move_some(move: Any, keys: list, pages: list) -> List[bool]:
        """store.load or store.store of the pages that are not None; the others are False. The
        store decides the rest (a page sharing memory with a call in flight, a store split into
        jobs the fs tier takes whole)."""
        at = [i for i, p in enumerate(pages) if p is not None]
        out = [False] * len(keys)
        if at:
            for i, ok in zip(at, move([keys[i] for i in at], [pages[i] for i in at])):
                out[i] = bool(ok)
        return out

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        keys = _key_list(keys)
        if keys is None:
            self._failures.note("batch_get_v1", detail="keys is not a list of keys")
            return []
        try:
            att = self._attachment()
            t0 = time.perf_counter()
            out = self._move_some(att.store.load, keys, self._pool_pieces(len(keys), host_indices, att))
            self._record(att, "prefetch", out, time.perf_counter() - t0)
            return out
        except Exception as exc:  # noqa: BLE001 - an exception would end SGLang's prefetch I/O thread
            self._failures.note("batch_get_v1", exc)
            return [False] * len(keys)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        # MLA on TP rank > 0: SGLang's controller never backs up there (backup_skip). If a caller
        # does, the pages' bytes are rank 0's, so storing them is as correct as rank 0 storing.
        keys = _key_list(keys)
        if keys is None:
            self._failures.note("batch_set_v1", detail="keys is not a list of keys")
            return []
        try:
            att = self._attachment()
            t0 = time.perf_counter()
            out = self._move_some(att.store.store, keys, self._pool_pieces(len(keys), host_indices, att))
            self._record(att, "backup", out, time.perf_counter() - t0)
            return out
        except Exception as exc:  # noqa: BLE001 - an exception would end SGLang's backup thread
            self._failures.note("batch_set_v1", exc)
            return [False] * len(keys)

    # ---- generic path (flat page tensors) ----------------------------------------------------------

    @staticmethod
    def _tensor_piece(t: Any) -> Optional[List[tuple]]:
        """The one piece of a flat page tensor (its own memory), or None for anything else."""
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
            return None
        return [(t.data_ptr(), t.numel() * t.element_size())]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> list:
        keys = _key_list(keys)
        if keys is None:
            self._failures.note("batch_get", detail="keys is not a list of keys")
            return []
        try:
            att = self._attachment()
            if target_locations is not None and _key_list(target_locations) is None:
                raise ValueError(f"target_locations is not a list, got {type(target_locations).__name__}")
            if target_locations is not None and len(target_locations) != len(keys):
                raise ValueError(f"{len(keys)} keys but {len(target_locations)} target locations")
            given = list(target_locations) if target_locations is not None else [None] * len(keys)
            targets = [att.pool.get_dummy_flat_data_page() if t is None else t for t in given]
            t0 = time.perf_counter()
            ok = self._move_some(att.store.load, keys, [self._tensor_piece(t) for t in targets])
            self._record(att, "prefetch", ok, time.perf_counter() - t0)
            return [t if good else None for t, good in zip(targets, ok)]
        except Exception as exc:  # noqa: BLE001
            self._failures.note("batch_get", exc)
            return [None] * len(keys)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Optional[torch.Tensor]:
        try:
            got = self.batch_get([key], [target_location])
            return got[0] if len(got) == 1 else None
        except Exception as exc:  # noqa: BLE001
            self._failures.note("get", exc)
            return None

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        try:
            keys = _key_list(keys)
            if keys is None:
                raise ValueError("keys is not a list of keys")
            vals = _key_list(values)
            if vals is None or len(vals) != len(keys):
                raise ValueError(f"{len(keys)} keys but {'no list of' if vals is None else len(vals)} values")
            att = self._attachment()
            pieces = [self._tensor_piece(v.contiguous() if isinstance(v, torch.Tensor) else v) for v in vals]
            if any(p is None for p in pieces):
                raise ValueError("every value must be a non-empty CPU tensor")
            t0 = time.perf_counter()
            ok = self._move_some(att.store.store, keys, pieces)
            self._record(att, "backup", ok, time.perf_counter() - t0)
            return all(ok)
        except Exception as exc:  # noqa: BLE001
            self._failures.note("batch_set", exc)
            return False

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        try:
            return self.batch_set([key], [value]) is True
        except Exception as exc:  # noqa: BLE001
            self._failures.note("set", exc)
            return False

    def exists(self, key: str) -> bool:
        try:
            return self.batch_exists([key]) == 1
        except Exception as exc:  # noqa: BLE001
            self._failures.note("exists", exc)
            return False

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        try:
            keys = _key_list(keys)
            if keys is None:
                raise ValueError("keys is not a list of keys")
            att = self._attachment()
            return max(0, min(len(keys), int(att.store.exists_prefix(keys))))
        except Exception as exc:  # noqa: BLE001 - None or an exception kills SGLang's prefetch thread
            self._failures.note("batch_exists", exc)
            return 0

    # ---- scheduler thread ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Removes this namespace's pages (this rank's directory), nothing else under the root. On a
        hung mount it gives up after io_timeout_ms (a failure counted, nothing raised)."""
        try:
            att = self._attachment()
            removed = att.store.clear()
            logger.info("kvtier.sglang: clear() removed %d page files of %s", removed, att.store.block_dir)
        except Exception as exc:  # noqa: BLE001 - SGLang only logs it, but never raise from here either
            self._failures.note("clear", exc)

    def get_stats(self) -> Any:
        """None, or SGLang's StorageMetrics (pages and GB/s per call since the last call) when
        --enable-storage-metrics is on. kvtier's own counters: :meth:`kvtier_metrics`."""
        try:
            if not self._metrics_on:
                return None
            from sglang.srt.observability.metrics_collector import StorageMetrics

            with self._stats_lock:
                stats, self._stats = self._stats, {k: [] for k in self._stats}
            return StorageMetrics(**stats)
        except Exception as exc:  # noqa: BLE001 - anything but None/StorageMetrics fails an assert
            self._failures.note("get_stats", exc)
            return None

    def kvtier_metrics(self) -> dict:
        """kvtier's fs-tier counters (docs/metrics.md) plus failures caught here by kind."""
        try:
            att = self._attached
            out = dict(att.store.metrics()) if att is not None else {}
        except Exception:  # noqa: BLE001
            out = {}
        out["sglang_failures"] = dict(self._failures.counts)
        return out

    def close(self) -> None:
        """Drains queued I/O and releases the store (and the pool's memory registration); later
        calls answer misses until register_mem_pool_host attaches again."""
        att, self._attached = self._attached, None
        if att is not None:
            self._close_store(att)

    def _close_store(self, att: _Attached) -> None:
        try:
            att.store.close()
        except Exception as exc:  # noqa: BLE001
            self._failures.note("close", exc)

    # ---- helpers ------------------------------------------------------------------------------------

    def _record(self, att: _Attached, kind: str, ok: List[bool], seconds: float) -> None:
        if not self._metrics_on:
            return
        pages = sum(1 for x in ok if x)
        gbs = pages * att.page_bytes / seconds / 1e9 if seconds > 0 else 0.0
        with self._stats_lock:
            self._stats[f"{kind}_pgs"].append(pages)
            self._stats[f"{kind}_bandwidth"].append(gbs)
