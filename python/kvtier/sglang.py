"""kvtier.sglang: ``KvtierHiCacheStorage``, kvtier's fs tier as SGLang's HiCache L3 storage.

Load it with SGLang's ``dynamic`` storage backend::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "kvtier", "module_path": "kvtier.sglang", "class_name": "KvtierHiCacheStorage",
      "interface_v1": 1, "root_dir": "/mnt/pvc"}'

SGLang builds the class as ``KvtierHiCacheStorage(storage_config, kwargs)`` and hands it the host
KV pool through :meth:`register_mem_pool_host`; that is where the namespace is derived (served
model name, page size, host layout, dtype, K and V bytes per token, layers, MLA, TP/PP/CP) and
the store opened: a bad key, layout or dtype is a ``kvtier.KvtierError`` naming it there, so
SGLang's attach fails instead of the server running without L3 (docs/sglang.md).

The page files are kvtier's (layout-spec/FORMAT.md, the SGLang rules): one file per page holding
SGLang's own flat page bytes, sharded like vLLM's blocks, written by temp file and rename with
the CRC32C xattr, in a namespace directory of its own beside vLLM's. All I/O is kvtier's C++
``SglangStore`` (the io_uring engine), called with the GIL released; with ``interface_v1`` the
pages move straight between the files and the pool's K and V buffers.

SGLang calls a backend from three daemon threads whose loops catch nothing: one exception ends
the thread and L3 with it. So every I/O entry point here catches everything and answers the
per-key miss the controller can use (False, None, 0); each kind of failure is counted and logged
once (``logging.getLogger("kvtier.sglang")``).
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

__all__ = ["KvtierHiCacheStorage"]

logger = logging.getLogger("kvtier.sglang")

# kvtier's fs-tier keys (docs/config.md; the C++ parser's table, less `type` and `module_path`,
# which are vLLM's). They go to the fs config, whose parser checks them and names a bad one.
FS_KEYS = frozenset({
    "root_dir", "path_sharding", "n_read_threads", "n_write_threads", "enable_kv_events", "locality",
    "backpressure", "io_timeout_ms", "stores_while_loading_max", "durability", "store_queue_bytes_max",
    "io_backend", "o_direct", "inline_metadata", "bounce_loads", "checksum_blocks", "startup_scan",
})
# Keys that name the namespace (FORMAT.md's SGLang fields), beside what SGLang's config gives.
SPEC_KEYS = frozenset({"model_path", "model_revision"})
# Keys SGLang itself reads from --hicache-storage-backend-extra-config (the factory, the
# controller, HiRadixCache; some are removed before a backend sees them, some are not, and that
# changes between SGLang versions).
SGLANG_KEYS = frozenset({
    "backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold",
    "prefetch_timeout_base", "prefetch_timeout_per_ki_token", "prefetch_timeout_max",
    "hicache_storage_pass_prefix_keys", "tp_lcm_size", "use_shared_cp_storage",
})
MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
# dtypes of SGLang's host pools whose bytes kvtier stores as they are (fp8 caches are often uint8
# in host memory). Names absent from this torch (fp8 on torch 1.13) are skipped.
DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
          "float8_e5m2fnuz", "uint8", "int8")


def _refuse(key: str, rule: str) -> None:
    """Raises kvtier.KvtierError(invalid_argument) naming `key`, as kvtier's C++ parser does."""
    message = f"config key '{key}': {rule}"
    err = kvtier.KvtierError(f"invalid_argument: {message}")
    err.code, err.errno, err.message = "invalid_argument", 0, message
    raise err


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name not in DTYPES or getattr(torch, name, None) is None:
        _refuse("dtype", f"the host pool's dtype {dtype} is not one kvtier stores (one of: "
                + ", ".join(d for d in DTYPES if getattr(torch, d, None) is not None) + ")")
    return name


def _element_size(dtype: torch.dtype) -> int:
    # torch.dtype.itemsize exists only from torch 2.1 (Debian 12 ships 1.13).
    return torch.empty((), dtype=dtype).element_size()


def _split_extra_config(extra: Any) -> tuple[dict, dict]:
    """extra_config -> (fs config, namespace keys). SGLang's README asks a backend to accept keys
    it does not know (SGLang adds keys between versions, and some reach every backend), so an
    unknown key is one warning naming it, not an error."""
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        _refuse("extra_config", f"expected a dict (SGLang's parsed JSON), got {type(extra).__name__}")
    fs, spec = {}, {}
    for key, value in extra.items():
        if not isinstance(key, str):
            _refuse("extra_config", f"keys must be strings, got a key of type {type(key).__name__}")
        if key in FS_KEYS:
            fs[key] = value
        elif key in SPEC_KEYS:
            if value is not None and (not isinstance(value, str) or not value):
                _refuse(key, f"expected a non-empty string, got {value!r}")
            if value is not None:
                spec[key] = value
        elif key not in SGLANG_KEYS:
            logger.warning("kvtier.sglang: extra_config key '%s' is unknown to kvtier and ignored", key)
    if "root_dir" not in fs:
        _refuse("root_dir", "required: the directory (or mount) pages are stored under")
    return fs, spec


class _Failures:
    """Failure counts by kind, each kind logged once (SGLang calls per batch; a sick volume would
    otherwise log per page)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def note(self, kind: str, exc: BaseException | None = None, detail: str = "") -> None:
        with self._lock:
            n = self.counts.get(kind, 0) + 1
            self.counts[kind] = n
        if n == 1:
            what = f"{type(exc).__name__}: {exc}" if exc is not None else detail
            logger.warning("kvtier.sglang: %s failed (%s); answered as a miss, counted, logged only once", kind, what)


class KvtierHiCacheStorage(HiCacheStorage):
    """SGLang HiCache L3 storage on kvtier (see the module docstring)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        if storage_config is None:
            _refuse("storage_config", "SGLang passed none; kvtier needs the served model name and ranks")
        self.storage_config = storage_config
        self._fs_config, self._spec_keys = _split_extra_config(getattr(storage_config, "extra_config", None))
        model = getattr(storage_config, "model_name", None) or self._spec_keys.get("model_path")
        if not model:
            _refuse("model_name", "SGLang's served model name is not set (--served-model-name) and "
                    "extra_config has no model_path; kvtier keys its namespace by the model")
        self._model_name = str(model)
        self._metrics_on = bool(getattr(storage_config, "enable_storage_metrics", False))
        self._store: Any = None
        self._page_bytes = 0
        self._failures = _Failures()
        self._stats_lock = threading.Lock()
        self._stats = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [], "backup_bandwidth": []}

    # ---- attach ---------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        spec = self._page_spec(mem_pool_host)
        self._reorder_layers = (not spec["is_mla"]) and spec["mem_layout"] == "layer_first"
        kv = getattr(mem_pool_host, "kv_buffer", None)
        memory = []
        if isinstance(kv, torch.Tensor) and kv.device.type == "cpu" and kv.is_contiguous():
            memory.append((kv.data_ptr(), kv.numel() * kv.element_size()))
            if kv.data_ptr() % 4096:
                # O_DIRECT needs page-aligned pieces: pages then go through the tier's aligned
                # staging rows (one memcpy each way; buffered only where a page's size is not a
                # multiple of 4 KiB). SGLang's pinned CUDA host pools are page-aligned: no copy.
                logger.info("kvtier.sglang: the host pool starts %d bytes past a 4 KiB boundary: "
                            "pages are staged through aligned rows (one copy each way)", kv.data_ptr() % 4096)
        if self._store is not None:
            self._store.close()
        store = _kvtier.SglangStore(self._fs_config, spec, memory)
        if store.page_bytes > store.store_queue_bytes_max:
            store.close()
            _refuse("store_queue_bytes_max", f"{store.store_queue_bytes_max} bytes cannot hold one page of "
                    f"{store.page_bytes} bytes (a store larger than it is dropped)")
        self._store = store
        self._page_bytes = store.page_bytes
        # The fs tier drops a store job over store_queue_bytes_max whole; SGLang backs up 128 pages
        # per call (2.7 GB for a 70B model's 21 MB pages), so a call is split into jobs of at most
        # half of it, one after the other.
        self._pages_per_store = max(1, store.store_queue_bytes_max // 2 // store.page_bytes)

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

    def _pool_pieces(self, n_keys: int, host_indices: torch.Tensor) -> List[List[tuple]]:
        """Per page, the (address, bytes) pieces whose concatenation is SGLang's flat page."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if n_keys == 0 or len(ptrs) % n_keys or len(ptrs) != len(sizes):
            raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} pointers for {n_keys} pages")
        per = len(ptrs) // n_keys
        pages = []
        for i in range(n_keys):
            piece = list(zip(ptrs[i * per:(i + 1) * per], sizes[i * per:(i + 1) * per]))
            if self._reorder_layers:  # [K0, V0, K1, V1, ...] -> the flat page's [K0..K(L-1), V0..V(L-1)]
                piece = piece[0::2] + piece[1::2]
            pages.append(piece)
        return pages

    def _store_pages(self, keys: List[str], pieces: list) -> List[bool]:
        """store() in jobs the fs tier takes whole; after a job with a failure the rest is False
        (SGLang stops a backup at the first failed call, so the later pages would not be found)."""
        out: List[bool] = []
        n = self._pages_per_store
        for i in range(0, len(keys), n):
            ok = self._store.store(keys[i:i + n], pieces[i:i + n])
            out.extend(ok)
            if not all(ok):
                break
        return out + [False] * (len(keys) - len(out))

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        try:
            t0 = time.perf_counter()
            out = self._store.load(list(keys), self._pool_pieces(len(keys), host_indices))
            self._record("prefetch", out, time.perf_counter() - t0)
            return out
        except Exception as exc:  # noqa: BLE001 - an exception would end SGLang's prefetch I/O thread
            self._failures.note("batch_get_v1", exc)
            return [False] * len(keys)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        # MLA on TP rank > 0: SGLang's controller never backs up there (backup_skip). If a caller
        # does, the pages' bytes are rank 0's, so storing them is as correct as rank 0 storing.
        try:
            t0 = time.perf_counter()
            out = self._store_pages(list(keys), self._pool_pieces(len(keys), host_indices))
            self._record("backup", out, time.perf_counter() - t0)
            return out
        except Exception as exc:  # noqa: BLE001 - an exception would end SGLang's backup thread
            self._failures.note("batch_set_v1", exc)
            return [False] * len(keys)

    # ---- generic path (flat page tensors) ----------------------------------------------------------

    def _tensor_piece(self, t: Any) -> List[tuple]:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"expected a contiguous CPU tensor, got {type(t).__name__}")
        return [(t.data_ptr(), t.numel() * t.element_size())]

    def _target(self, target: Any) -> torch.Tensor:
        return self.mem_pool_host.get_dummy_flat_data_page() if target is None else target

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> list:
        try:
            keys = list(keys)
            targets = [self._target(target_locations[i] if target_locations is not None else None)
                       for i in range(len(keys))]
            t0 = time.perf_counter()
            ok = self._store.load(keys, [self._tensor_piece(t) for t in targets])
            self._record("prefetch", ok, time.perf_counter() - t0)
            return [t if good else None for t, good in zip(targets, ok)]
        except Exception as exc:  # noqa: BLE001
            self._failures.note("batch_get", exc)
            return [None] * len(keys)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Optional[torch.Tensor]:
        try:
            return self.batch_get([key], [target_location])[0]
        except Exception as exc:  # noqa: BLE001
            self._failures.note("get", exc)
            return None

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        try:
            keys = list(keys)
            if values is None or len(values) != len(keys):
                raise ValueError(f"{len(keys)} keys but {'no' if values is None else len(values)} values")
            pieces = [self._tensor_piece(v.contiguous() if isinstance(v, torch.Tensor) else v) for v in values]
            t0 = time.perf_counter()
            ok = self._store_pages(keys, pieces)
            self._record("backup", ok, time.perf_counter() - t0)
            return all(ok)
        except Exception as exc:  # noqa: BLE001
            self._failures.note("batch_set", exc)
            return False

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        try:
            return self.batch_set([key], [value])
        except Exception as exc:  # noqa: BLE001
            self._failures.note("set", exc)
            return False

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        try:
            return int(self._store.exists_prefix(list(keys)))
        except Exception as exc:  # noqa: BLE001 - None or an exception kills SGLang's prefetch thread
            self._failures.note("batch_exists", exc)
            return 0

    # ---- scheduler thread ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Removes this namespace's pages (this rank's directory), nothing else under the root."""
        try:
            removed = self._store.clear()
            logger.info("kvtier.sglang: clear() removed %d page files of %s", removed, self._store.block_dir)
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
            out = dict(self._store.metrics()) if self._store is not None else {}
        except Exception:  # noqa: BLE001
            out = {}
        out["sglang_failures"] = dict(self._failures.counts)
        return out

    def close(self) -> None:
        """Drains queued I/O and releases the store (and the pool's memory registration)."""
        try:
            if self._store is not None:
                self._store.close()
        except Exception as exc:  # noqa: BLE001
            self._failures.note("close", exc)

    # ---- helpers ------------------------------------------------------------------------------------

    def _record(self, kind: str, ok: List[bool], seconds: float) -> None:
        if not self._metrics_on:
            return
        pages = sum(1 for x in ok if x)
        gbs = pages * self._page_bytes / seconds / 1e9 if seconds > 0 else 0.0
        with self._stats_lock:
            self._stats[f"{kind}_pgs"].append(pages)
            self._stats[f"{kind}_bandwidth"].append(gbs)
